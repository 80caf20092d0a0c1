"""The BenchmarkRun controller: applied custom resources become runs, runs write their status back.

``operator`` is the controller for clusters (``benchrun operator``: watch with resume,
finalizer, Lease, status writes with resourceVersion preconditions), served by ``lease``
(leader election) and ``dagster_runs`` (runs queued on the Dagster instance: the one module
here that imports dagster). ``resources`` decides what a tick of the fallback sensor
(``sensors/benchmarkrun.py``, for clusters without the operator) does with the listed
BenchmarkRuns; ``status`` builds and writes the ``status`` subresource; ``kube`` opens the
API client and wraps its calls (each with a client timeout); ``heartbeat`` is the file the
operator's loop touches and the liveness probe that checks it.
"""
