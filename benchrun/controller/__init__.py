"""The BenchmarkRun controller: applied custom resources become runs, runs write their status back.

``operator`` is the controller for clusters (``benchrun operator``: watch with resume, finalizer,
Lease, status writes with resourceVersion preconditions; ``lease`` and ``dagster_runs`` serve
it); the sensor below is the fallback without it. ``resources`` decides what a sensor tick does with the listed BenchmarkRuns (submit, reject,
cancel, catch up status); ``status`` builds and patches the ``status`` subresource; ``kube``
opens the API client. Dagster-free: ``sensors/benchmarkrun.py`` calls these.
"""
