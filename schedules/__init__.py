"""Dagster schedules for benchrun: the nightly and pre-release cadences."""

from schedules.cadences import nightly_schedule, pre_release_schedule

all_schedules = [nightly_schedule, pre_release_schedule]

__all__ = ["all_schedules", "nightly_schedule", "pre_release_schedule"]
