"""The one partitions definition every run-level asset shares: key = run_id."""

import dagster as dg

benchmark_run_partitions = dg.DynamicPartitionsDefinition(name="benchmark_run")
