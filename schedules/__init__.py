"""Dagster schedules for benchrun."""
