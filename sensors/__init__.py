"""Dagster sensors for benchrun: spec commits, canaries after merges, failed and cancelled runs,
and BenchmarkRun custom resources."""

from sensors.benchmarkrun import benchmarkrun_resource_sensor
from sensors.canary import canary_sensor
from sensors.run_failure import run_canceled_sensor, run_failure_sensor, run_liveness_sensor
from sensors.spec_commit import spec_commit_sensor

all_sensors = [spec_commit_sensor, canary_sensor, run_failure_sensor, run_canceled_sensor, run_liveness_sensor,
               benchmarkrun_resource_sensor]

__all__ = ["all_sensors", "benchmarkrun_resource_sensor", "canary_sensor", "run_canceled_sensor", "run_failure_sensor",
           "run_liveness_sensor", "spec_commit_sensor"]
