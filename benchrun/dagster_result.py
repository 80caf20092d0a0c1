"""What an in-process Dagster run's result says about how it ended, in benchrun's words (``benchrun run``).

Here rather than in :mod:`benchrun.commands`, which stays under the size limit.
"""

from __future__ import annotations

from typing import Any


# The blocking asset check that fails the Dagster run of a benchmark that did not succeed
# (bench_assets.run_assets.run_succeeded): its step fails by design, after the run's final status.
VERDICT_CHECK_STEP = "run_status_run_succeeded"


def _only_the_verdict_check_failed(result: Any) -> bool:
    """Whether the only failed step is :data:`VERDICT_CHECK_STEP`: the benchmark failed and said so
    (its status is final); the orchestration did not fail."""
    failed = {e.step_key for e in result.all_events if e.is_step_failure}
    return failed == {VERDICT_CHECK_STEP}


def _failure_reason(result: Any) -> str:
    """The first failed step's own error, as one line: benchrun's message where benchrun raised
    one (not the library exception it wraps), else the outermost error below Dagster's wrappers."""
    failure = next((e for e in result.all_events if e.is_step_failure), None)
    if failure is None:
        return "the Dagster run failed"
    chain = []
    err = failure.step_failure_data.error
    while err is not None:
        chain.append(err)
        err = err.cause
    ours = [e for e in chain if e.cls_name in ("BenchrunError", "SpecInvalid")]
    user = [e for e in chain if not e.cls_name.startswith("Dagster")]
    chosen = (ours or user or chain)[0]
    if not ours:
        from benchrun.storage_errors import describe_storage_text

        for e in chain:  # a full disk or read-only file system, said in benchrun's words
            storage = describe_storage_text(e.cls_name, e.message, f"step {failure.step_key}")
            if storage:
                return storage
    return f"step {failure.step_key}: {chosen.message.strip()}"


def _interrupted(result: Any) -> bool:
    """Whether the Dagster run ended because it was interrupted (Ctrl-C, SIGTERM) rather than
    because a step failed."""
    for event in result.all_events:
        if not event.is_step_failure:
            continue
        err = event.step_failure_data.error
        while err is not None:
            if err.cls_name in ("DagsterExecutionInterruptedError", "KeyboardInterrupt"):
                return True
            err = err.cause
    return False
