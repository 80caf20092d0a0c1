"""Dagster sensors for benchrun."""
