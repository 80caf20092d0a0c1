"""Dagster assets, checks and definitions for benchrun (thin: the logic lives in benchrun/)."""
