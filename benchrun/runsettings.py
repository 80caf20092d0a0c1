"""The environment settings a run reads only once it measures, checked before anything is made."""

from __future__ import annotations

import os

from benchrun.errors import BenchrunError


def settings_up_front() -> float:
    """The environment settings a run reads only once it measures, read before anything is made or waited
    for (exit 2 naming the variable): ``BENCHRUN_PROGRESS_INTERVAL_S`` (returned; it was read after the
    turn), ``BENCHRUN_REPORT_FIGURES`` (a bad value failed the run at its report step, after every
    launch had measured) and ``BENCHRUN_CONTENTION_PCT`` (``ten`` was the default, unsaid): review
    2026-12-07 and -08. ``run`` and ``cadence run --execute`` call it."""
    from benchrun.progress_display import interval_from_env
    from benchrun.report import worker
    from benchrun.telemetry.summary import contention_threshold_pct

    interval_s = interval_from_env()
    if os.environ.get(worker.ENV) is not None:
        try:
            worker.background()
        except BenchrunError as exc:
            raise BenchrunError(str(exc), exit_code=2) from None
    contention_threshold_pct()
    return interval_s
