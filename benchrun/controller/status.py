"""The BenchmarkRun ``status`` subresource: built from a run's status.json, patched at every phase change.

A run submitted from a custom resource carries ``resource`` (namespace, name, uid,
generation) in its status.json. :func:`on_phase_change` is called by ``RunDir.set_phase``
in whichever process moves the phase (the run worker, a failure sensor) and patches the
resource; the controller sensor's tick patches again whenever the resource's status lags
status.json, so a missed write (API server away, no RBAC) is caught up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# status.json key → CR status key (RunStatus in benchrun/spec/model.py, camelCase)
_COPIED = {
    "run_id": "runId",
    "run_directory": "runDirectory",
    "spec_digest": "specDigest",
    "workload_spec_digest": "workloadSpecDigest",
    "artifact_manifest_digest": "artifactManifestDigest",
    "benchmark_class_granted": "benchmarkClassGranted",
    "selected_scheduler_path": "selectedSchedulerPath",
    "hot_metrics_ref": "hotMetricsRef",
    "provenance_ref": "provenanceRef",
    "straggler_nodes": "stragglerNodes",  # the distributed_straggler playbook's repeat offenders
    "message": "message",
    "started_utc": "startTime",
    "finished_utc": "completionTime",
    "status_seq": "statusSeq",  # orders one run's statuses (advances)
}
# Conditions whose outcome a person looks for first: (status, reason) become the verdicts.
VERDICT_CONDITIONS = ("Complete", "RegressionDetected", "PublicationGuaranteesMet", "Signed")
# What the sensor compares to decide that the resource's status lags status.json.
COMPARED = ("phase", "runId", "observedGeneration", "conditions", "artifactManifestDigest", "reportRef",
            "completionTime")


@dataclass(frozen=True)
class ResourceRef:
    """One generation of one BenchmarkRun object."""

    namespace: str
    name: str
    uid: str
    generation: int

    @property
    def run_key(self) -> str:
        """The Dagster run key: ``cr:<namespace>/<name>:<uid>:<generation>``."""
        return f"cr:{self.namespace}/{self.name}:{self.uid}:{self.generation}"

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid, "generation": self.generation}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ResourceRef":
        return cls(str(data["namespace"]), str(data["name"]), str(data["uid"]), int(data["generation"]))

    @classmethod
    def of(cls, obj: dict[str, Any]) -> "ResourceRef":
        meta = obj.get("metadata") or {}
        return cls(str(meta.get("namespace") or "default"), str(meta.get("name")), str(meta.get("uid")),
                   int(meta.get("generation") or 1))


def report_ref(run_dir: Path) -> str | None:
    """The run's HTML report found in this home's copy of the run directory, if one is there
    (status.json's ``report_ref``, recorded where the report was written, comes first: a pod that
    pulled only status.json has no ``reports/``)."""
    reports = sorted((run_dir / "reports").glob("*.html")) if run_dir.is_dir() else []
    return str(reports[-1]) if reports else None


def _described(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` with every other key of the CRD's status null: the status describes only the
    observed generation, and a write is a JSON merge patch, where a key left out keeps what the
    earlier generation (or run) wrote (its runId, digests, verdicts, completionTime) and a null
    removes it. A nested map is merged key by key as well: :func:`write` sends the patch
    :func:`replacing` makes, with the keys the new ``verdicts`` lacks null."""
    from benchrun.spec.model import RunStatus

    blank = {(f.alias or name): None for name, f in RunStatus.model_fields.items()}
    return _checked({**blank, **status})


def status_from_run(st: dict[str, Any], ref: ResourceRef) -> dict[str, Any]:
    """The resource's ``status`` for one run's status.json (the keys without a value null)."""
    out: dict[str, Any] = {"phase": st.get("phase"), "observedGeneration": ref.generation}
    for key, cr_key in _COPIED.items():
        out[cr_key] = st.get(key)
    out["conditions"] = [
        {k: c[k] for k in ("type", "status", "reason", "message", "lastTransitionTime") if c.get(k) is not None}
        for c in st.get("conditions") or []
    ]
    verdicts = {"outcome": st["outcome"]} if st.get("outcome") else {}
    for c in st.get("conditions") or []:
        if c.get("type") in VERDICT_CONDITIONS:
            verdicts[c["type"]] = f"{c.get('status')}: {c.get('reason') or ''}".rstrip(": ")
    out["verdicts"] = verdicts or None
    out["reportRef"] = st.get("report_ref") or (report_ref(Path(st["run_directory"])) if st.get("run_directory")
                                                 else None)
    return _described(out)


def rejected_status(ref: ResourceRef, errors: list[str] | tuple[str, ...], now: str) -> dict[str, Any]:
    """Phase Rejected with every admission error in the Validated condition's message."""
    message = "; ".join(errors) or "the BenchmarkRun is invalid"
    return _described({
        "phase": "Rejected",
        "observedGeneration": ref.generation,
        "message": f"{len(errors)} error(s): fix the spec and apply it again",
        "completionTime": now,
        "conditions": [{"type": "Validated", "status": "False", "reason": "AdmissionRulesFailed",
                        "message": message, "lastTransitionTime": now}],
    })


def unregistered_status(ref: ResourceRef, why: str, now: str) -> dict[str, Any]:
    """Phase Pending with ``Registered=False``: the spec is valid but pinning or registering its
    run failed (the shared state or the disk); the operator tries again."""
    return _described({
        "phase": "Pending",
        "observedGeneration": ref.generation,
        "message": "not registered yet; tried again",
        "conditions": [{"type": "Registered", "status": "False", "reason": "RegistrationFailed",
                        "message": why, "lastTransitionTime": now}],
    })


def _checked(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` as the CRD types it (the model the CRD is generated from validates it; a null
    key is one the write removes)."""
    from benchrun.spec.model import RunStatus

    RunStatus.model_validate({k: v for k, v in status.items() if v is not None})
    return status


def lags(current: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    """Whether the resource's status differs from ``wanted`` in what matters."""
    current = current or {}
    return any(current.get(k) != wanted.get(k) for k in COMPARED)


# Phases in the order a run moves through them; a status never goes back to an earlier one.
PHASE_ORDER = {"Pending": 0, "Admitted": 1, "Running": 2, "Analyzing": 3,
               "Succeeded": 4, "Failed": 4, "Rejected": 4, "Canceled": 4}
CONFLICT_RETRIES = 8


def advances(current: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
    """Whether writing ``wanted`` over ``current`` moves forward (or refreshes the same status):
    an older generation's status never wins. Within one run (same generation and ``runId``) both
    built from status.json, status.json's own order decides (``statusSeq``): the run itself may
    leave a final phase (a Failed run retried goes Running again; publication failing after
    Succeeded makes it Failed) and its status follows, while a stale writer (an older
    ``statusSeq``) never moves it back. Otherwise an earlier phase or a different final phase
    never wins."""
    current = current or {}
    if not current.get("phase"):
        return True
    cur_gen, new_gen = int(current.get("observedGeneration") or 0), int(wanted.get("observedGeneration") or 0)
    if new_gen != cur_gen:
        return new_gen > cur_gen
    cur_seq, new_seq = current.get("statusSeq"), wanted.get("statusSeq")
    if (isinstance(cur_seq, int) and isinstance(new_seq, int) and current.get("runId")
            and current.get("runId") == wanted.get("runId")):
        return new_seq >= cur_seq
    cur, new = PHASE_ORDER.get(current["phase"], 0), PHASE_ORDER.get(wanted.get("phase") or "", 0)
    if cur == 4 and current["phase"] != wanted.get("phase"):
        return False  # a final phase is final (no order of status.json to say otherwise)
    return new >= cur


def write(api: Any, ref: ResourceRef, status: dict[str, Any], current: dict[str, Any] | None = None) -> bool:
    """Patch the status of exactly this generation of this object, with the object's
    ``resourceVersion`` as a precondition: on 409 (another writer got there first) read it
    again and decide again. False when it is gone, has moved to a newer generation (that
    generation's own run writes it), or already holds a later status (never written back).

    ``current`` is the object as the caller last read it (else it is read here)."""
    from kubernetes.client.exceptions import ApiException

    from benchrun.controller.kube import get_benchmarkrun, patch_status_if

    obj = current if current is not None else get_benchmarkrun(api, ref.namespace, ref.name)
    for _attempt in range(CONFLICT_RETRIES):
        if obj is None:
            return False
        now = ResourceRef.of(obj)
        if now.uid != ref.uid or now.generation != ref.generation:
            return False
        status = _keeping_report_ref(obj.get("status"), status)
        if not advances(obj.get("status"), status) or not lags(obj.get("status"), status):
            return False
        try:
            patch = replacing(obj.get("status"), status)
            patch_status_if(api, ref.namespace, ref.name, patch, str(obj["metadata"]["resourceVersion"]))
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            if exc.status != 409:
                raise
            log.info("%s/%s: status write conflicted (409); reading it again", ref.namespace, ref.name)
        obj = get_benchmarkrun(api, ref.namespace, ref.name)
    raise RuntimeError(f"{ref.namespace}/{ref.name}: status still conflicting after {CONFLICT_RETRIES} tries")


def replacing(current: dict[str, Any] | None, wanted: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that turns ``current`` into ``wanted``: a write is a merge patch
    (RFC 7386), where a nested map is merged key by key, so a key of ``current`` that ``wanted``
    lacks (a verdict of an earlier status) is sent as null, at every depth. Sent with the
    ``resourceVersion`` it was computed against, so ``current`` is what the server holds."""
    out = dict(wanted)
    for key, value in (current or {}).items():
        if key not in wanted:
            out[key] = None
        elif isinstance(value, dict) and isinstance(wanted[key], dict):
            out[key] = replacing(value, wanted[key])
    return out


def note(api: Any, obj: dict[str, Any], message: str) -> bool:
    """Set only the object's ``status.message`` (what its deletion waits for), with its
    ``resourceVersion`` as a precondition; False when it already says so, moved on (409: the next
    try writes it) or is gone."""
    from kubernetes.client.exceptions import ApiException

    from benchrun.controller.kube import patch_status_if

    if (obj.get("status") or {}).get("message") == message:
        return False
    ref = ResourceRef.of(obj)
    try:
        patch_status_if(api, ref.namespace, ref.name, {"message": message}, str(obj["metadata"]["resourceVersion"]))
    except ApiException as exc:
        if exc.status in (404, 409):
            return False
        raise
    return True


def _keeping_report_ref(current: dict[str, Any] | None, wanted: dict[str, Any]) -> dict[str, Any]:
    """``wanted`` with the object's known reportRef where ``wanted`` has none for the same run: a
    writer that cannot see the report (status.json from before it was recorded, no ``reports/``
    in its home) never erases where the report is."""
    current = current or {}
    if wanted.get("reportRef") or not current.get("reportRef") or not wanted.get("runId"):
        return wanted
    if current.get("runId") != wanted.get("runId"):
        return wanted
    return {**wanted, "reportRef": current["reportRef"]}


def on_phase_change(st: dict[str, Any]) -> None:
    """Called with a run's new status.json; patches its BenchmarkRun when it came from one.

    Never raises: the run goes on when the API server cannot be reached, and the
    controller sensor catches the status up on its next tick.
    """
    resource = st.get("resource")
    if not resource:
        return
    try:
        from benchrun.controller.kube import custom_objects_api

        ref = ResourceRef.from_json(resource)
        written = write(custom_objects_api(), ref, status_from_run(st, ref))
        log.info("BenchmarkRun %s/%s status %s: %s", ref.namespace, ref.name, st.get("phase"),
                 "patched" if written else "not patched (object gone, a newer generation, a later status or "
                 "nothing new)")
    except Exception as exc:  # noqa: BLE001 - a status write must never fail the run
        log.warning("could not patch the BenchmarkRun status for run %s: %s", st.get("run_id"), exc)
