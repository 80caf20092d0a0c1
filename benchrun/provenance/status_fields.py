"""The status.json fields the warehouse curates, and how re-signing judges them.

status.json is never signed (it keeps changing), yet curation reads it: the run's
``benchmark_run_fact`` row (phase, outcome, cadence, scheduler path, variable under test, times),
its dimensions and its telemetry windows. A signature covers those rows, so a re-signing after
``rebuild-warehouse`` would sign whatever status.json said by then. A statement therefore records
the values its rows were curated from (``curated_status``), and re-signing
(``lifecycle.resign_if_intact``) refuses a status.json that moved off them — except along the moves
benchrun itself makes after a signature: a run signed before it finished that was then marked
Failed or Canceled (killed, canceled), and a run whose final signing is pending (``completing``:
finalize set its final phase, outcome and finish, and the signing that follows was interrupted).

A statement signed before ``curated_status`` existed is judged by what sealed or signed sources
still prove: the pinned spec (sealed) for the fields submission copied from it, the signed
timestamps for the start and the finish, the sealed outcome for a Succeeded phase.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

# Every status.json field curation reads (benchrun.warehouse.curate and its sources);
# tests/test_provenance_chain.py fails when curation reads one that is not listed here.
STATUS_FIELDS = (
    "run_id", "name", "phase", "outcome", "benchmark_class_requested", "benchmark_class_granted", "workload_type",
    "cadence", "scheduler_path_requested", "selected_scheduler_path", "variable_under_test", "spec_digest",
    "workload_spec_digest", "artifact_manifest_digest", "dagster_run_id", "scheduler_run_id", "job_uid",
    "created_utc", "started_utc", "first_started_utc", "finished_utc",
)
# What benchrun moves after a signature (a run that ends after it, or is finalized)
LIFECYCLE = ("phase", "outcome", "finished_utc")
# The phases a run signed before it finished is moved to without a new signature, and their outcome
# (rundir.mark_run_failed, rundir.mark_run_canceled)
ENDED_OUTSIDE = {"Failed": "failed", "Canceled": "canceled"}
# The fields submission copies from the pinned spec (benchrun.submit.prepare): where each lies in it
FROM_SPEC = {
    "name": ("metadata", "name"),
    "benchmark_class_requested": ("spec", "intent", "benchmarkClass"),
    "workload_type": ("spec", "intent", "workloadType"),
    "cadence": ("spec", "intent", "cadence"),
    "scheduler_path_requested": ("spec", "intent", "schedulerPath"),
    "variable_under_test": ("spec", "comparison", "variableUnderTest"),
}


# status.json's ``final_signature`` from ``lifecycle.finalize`` (the final phase) until
# ``lifecycle.sign_publication`` has signed the finished run (its last step).
FINAL_SIGNATURE_PENDING = "pending"
# The final phase and outcome lifecycle.finalize sets from the run's outcome (Failed for "failed", else
# Succeeded), and run_status's Failed over it when publishing the finished run fails (rundir.mark_run_failed)
FINALIZED = {"Succeeded": ("succeeded", "partial"), "Failed": ("failed",)}
# The phase a run is in when its evidence is sealed and first signed (lifecycle.record_evidence)
SEALING_PHASE = "Analyzing"


def completing(predicate: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether a re-signing completes the run's interrupted final signing (finalize set its final phase,
    the signing after it never ran). status.json says so (``final_signature`` pending), but status.json is
    never signed, so that alone proves nothing: the current (verified) signature must be the one made when
    the evidence was sealed (its curated phase Analyzing; a statement signed before ``curated_status`` was
    recorded: signed with no finish), and status.json's phase and outcome must be what finalize sets —
    Succeeded only with the outcome the sealed manifest records (signed in the predicate), Failed only as
    ``failed``. A run signed in a final phase (Canceled, Failed, Succeeded) is never completing again."""
    if status.get("final_signature") != FINAL_SIGNATURE_PENDING:
        return False
    recorded = predicate.get("curated_status")
    if isinstance(recorded, dict):
        if recorded.get("phase") != SEALING_PHASE:
            return False
    else:
        times = predicate.get("timestamps")
        if not isinstance(times, dict) or times.get("finished_utc") is not None:
            return False
    phase, outcome = status.get("phase"), status.get("outcome")
    if outcome not in FINALIZED.get(str(phase), ()):
        return False
    return phase != "Succeeded" or outcome == predicate.get("outcome")


def curated_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """The values of STATUS_FIELDS in ``status``: what a statement records beside the rows it signs."""
    return {key: status.get(key) for key in STATUS_FIELDS}


def _final(phase: Any) -> bool:
    from benchrun.sharedstate import FINAL_PHASES

    return phase in FINAL_PHASES


def _spec_values(run_dir: Path | None, run_id: str) -> dict[str, Any]:
    """FROM_SPEC's fields as the run's pinned spec (sealed evidence) gives them; {} where it does not read."""
    import yaml

    if run_dir is None:
        return {}
    try:
        doc = yaml.safe_load((Path(run_dir) / "structured" / f"{run_id}_spec.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}  # the sealed-evidence check refuses a pinned spec that is missing or changed
    out = {}
    for key, path in FROM_SPEC.items():
        value: Any = doc
        for step in path:
            value = value.get(step) if isinstance(value, dict) else None
        if isinstance(value, str):
            out[key] = value
    return out


def _reference(predicate: Mapping[str, Any], run_dir: Path | None) -> dict[str, Any]:
    """What the signed rows were curated from: the statement's ``curated_status``; for a statement
    signed before it was recorded, the fields sealed or signed sources prove (the rest unknown)."""
    recorded = predicate.get("curated_status")
    if isinstance(recorded, dict):
        return dict(recorded)
    run_id = str(predicate.get("run_id") or "")
    times = predicate.get("timestamps") if isinstance(predicate.get("timestamps"), dict) else {}
    out: dict[str, Any] = {"run_id": run_id, **_spec_values(run_dir, run_id)}
    out.update({k: times[k] for k in ("created_utc", "started_utc", "finished_utc") if times.get(k) is not None})
    return out


def curated_drift(predicate: Mapping[str, Any], status: Mapping[str, Any], run_dir: Path | None = None, *,
                  completing: bool = False) -> list[str]:
    """``field (signed X, status.json Y)`` for each status.json field curation reads that no longer
    holds the value the signed rows were curated from (module docstring), and ``phase (...)`` for a
    phase benchrun never reaches that way. ``completing``: the run's final signing is pending."""
    ref = _reference(predicate, run_dir)
    recorded = isinstance(predicate.get("curated_status"), dict)
    phase = status.get("phase")
    # signed in a final phase: known for a statement that records it, else from its signed finish
    signed_final = _final(ref.get("phase")) if recorded else ref.get("finished_utc") is not None
    moved = completing or (not signed_final and phase in ENDED_OUTSIDE)
    out = []
    for key, signed in sorted(ref.items()):
        if key in LIFECYCLE and moved:
            continue
        if status.get(key) != signed:
            source = "pinned spec" if not recorded and key in FROM_SPEC else "signed"
            out.append(f"{key} ({source} {signed!r}, status.json {status.get(key)!r})")
    if moved and not completing and status.get("outcome") != ENDED_OUTSIDE[phase]:
        out.append(f"outcome (status.json {status.get('outcome')!r} with phase {phase}: benchrun sets "
                   f"{ENDED_OUTSIDE[phase]!r})")
    if not recorded and phase == "Succeeded" and not completing:
        if not signed_final:
            out.append("phase (signed before the run finished, status.json 'Succeeded' with no final signing "
                       "pending)")
        elif predicate.get("outcome") == "failed":
            out.append("phase (the sealed outcome is 'failed', status.json 'Succeeded')")
    return out
