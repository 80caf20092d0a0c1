"""Dagster resources for benchrun."""
