"""The warm orchestrator's parts (benchrun.warmstart is its entry and documentation)."""
