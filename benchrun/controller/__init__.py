"""The BenchmarkRun controller: applied custom resources become runs, runs write their status back.

``resources`` decides what a sensor tick does with the listed BenchmarkRuns (submit, reject,
cancel, catch up status); ``status`` builds and patches the ``status`` subresource; ``kube``
opens the API client. Dagster-free: ``sensors/benchmarkrun.py`` calls these.
"""
