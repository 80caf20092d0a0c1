"""A run's life after submission: admit (grant a class, capture the environment, plan),
record evidence, and settle the final phase. Dagster-free; the run assets call these."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

from benchrun.errors import BenchrunError
from benchrun.execute import run_outcome
from benchrun.plan import LayerPlan, plan_run
from benchrun.rundir import MUTABLE_FILES, RunDir
from benchrun.fsio import atomic_write_json
from benchrun.provenance.signing import FINAL_SIGNATURE_PENDING
# the pinned spec's reader lives below this module (benchrun.hotpublish reads it too); its name stays here
from benchrun.pinned import load_pinned

log = logging.getLogger(__name__)

LOCAL_SCHEDULER_PATH = "local"
LAYER_CONDITION = {"micro": "MicroComplete", "component": "ComponentComplete", "end_to_end": "EndToEndComplete"}


def plans_for(rd: RunDir, loaded: Any) -> dict[str, LayerPlan]:
    return {p.name: p for p in plan_run(loaded.run, rd.run_id, rd.path, home=rd.home)}


def admit(rd: RunDir, loaded: Any, *, dagster_run_id: str | None = None,
          offer: tuple[str, bool, str] | None = None, dagster_run_created: float | None = None) -> dict[str, Any]:
    """Grant the benchmark class the configured launcher can honour, capture the environment,
    write the plan, and move the run to Running.

    ``offer`` is the launcher's answer (``LauncherResource.admission_offer``): its scheduler
    path, whether it can guarantee publication grade for this run, and why (not). Without
    one the run is local: it never claims publication grade.

    ``dagster_run_created`` (epoch seconds) is when the admitting Dagster run was made: a run
    canceled after that (``benchrun cancel`` while its Dagster run was starting) is refused and
    stays Canceled; a Failed run, or a Canceled one re-executed later (a new Dagster run), is
    admitted again."""
    from benchrun.envcapture import write_environment
    from benchrun.execute import Progress

    _refuse_if_canceled_since(rd, dagster_run_id, dagster_run_created)

    path, can_publish, why = offer or (
        LOCAL_SCHEDULER_PATH, False,
        "dedicated nodes, fixed topology, stable background load and topology-exclusive "
        "placement cannot be guaranteed on a shared local machine")
    intent = loaded.run.spec.intent
    _refuse_another_scheduler_path(intent.scheduler_path, path)
    requested = intent.benchmark_class
    signing = loaded.run.spec.provenance.signing
    # Publication grade needs the signature it asks for (CONTRACT §3): one this installation cannot make
    # downgrades the run like a guarantee the launcher cannot give.
    unsignable = signing_unavailable(signing)
    granted = class_granted(loaded.run.spec, can_publish)
    if requested == "publication_grade":
        if granted == "publication_grade":
            rd.set_condition("PublicationGuaranteesMet", True, "LauncherGuarantees", why)
        else:  # the message benchrun render says too (downgrade_reason)
            rd.set_condition(
                "PublicationGuaranteesMet", False,
                "SigningUnavailable" if can_publish else
                "LocalExecution" if path == LOCAL_SCHEDULER_PATH else "LauncherCannotGuarantee",
                str(downgrade_reason(loaded.run.spec, can_publish, why)),
            )
    earlier = set_earlier_attempt_aside(rd)
    if earlier:
        rd.set_condition("Rematerialized", True, "EarlierAttemptKeptAside",
                         f"the run was started again: what its earlier attempt wrote is under {earlier}")
    if getattr(signing, "required", False):
        rd.set_condition("Signed", False, "SigningNotPerformed",
                         f"{unsignable}; nothing was signed" if unsignable else
                         "nothing is signed yet: the run's evidence is signed once it is sealed")
    plans = plans_for(rd, loaded)
    atomic_write_json(rd.file("structured", "plan", "", "json"),
                      [inv.to_json() for p in plans.values() for inv in p.invocations])
    write_environment(rd.path, rd.run_id)
    Progress(rd).begin_run(list(plans.values()))
    from benchrun.liveness import start_heartbeat

    with rd.status_lock():
        # Checked again, and the attempt begun, under one hold of the status lock: a `benchrun cancel` that
        # landed while this attempt was being admitted (after the check above) had its Canceled removed
        # just below and the run set Running over it (found in review).
        _refuse_if_canceled_since(rd, dagster_run_id, dagster_run_created)
        # A retried run starts clean: conditions of the failed (or canceled) attempt no longer hold.
        rd.remove_conditions("Failed", "Canceled", "Complete")
        rd.update_status(message=None)
        start_heartbeat(rd.home, rd.run_id, dagster_run_id=dagster_run_id)
        rd.update_status(benchmark_class_granted=granted, selected_scheduler_path=path,
                         dagster_run_id=dagster_run_id)
        if path == LOCAL_SCHEDULER_PATH:
            asked = str(intent.scheduler_path or "")
            rd.set_condition("Admitted", True, "LocalLauncher", "admitted to run on this machine" + (
                f" (intent.schedulerPath {asked!r} is the Kubernetes launcher's placement: here the suites run as "
                "processes, and the selected scheduler path is local)" if asked.strip().lower() != "local" else ""))
        else:
            through = "Kueue and Slinky's slurm-bridge" if "slinky" in path else "Kueue"
            rd.set_condition("Admitted", True, "KubernetesLauncher",
                             f"admitted to run as {granted} Jobs through {through} (scheduler path {path})")
        status = rd._write_phase("Running", message=None, allow_final_exit=False)
    return rd._publish_phase(status, "Running")  # outside the lock: it may reach the network


def class_granted(spec: Any, can_publish: bool) -> str:
    """The benchmark class a run of ``spec`` is granted when the launcher can (``can_publish``) or cannot
    honour publication grade: publication grade only when it is asked for, the launcher can honour it and
    the signature it asks for can be made here (:func:`signing_unavailable`); else realism grade. The one
    rule of :func:`admit`, of the launcher's admission offer (whose LocalQueue it checks) and of
    ``benchrun render`` (whose objects are those of the class a run would get)."""
    if spec.intent.benchmark_class != "publication_grade" or not can_publish:
        return "realism_grade"
    return "realism_grade" if signing_unavailable(spec.provenance.signing) else "publication_grade"


def downgrade_reason(spec: Any, can_publish: bool, why: str) -> str | None:
    """Why a run of ``spec`` asking for publication grade is downgraded to realism grade (the message of
    its ``PublicationGuaranteesMet`` condition); None when it is not downgraded."""
    if spec.intent.benchmark_class != "publication_grade" or class_granted(spec, can_publish) == "publication_grade":
        return None
    unsignable = signing_unavailable(spec.provenance.signing)
    if can_publish:
        return f"{unsignable}; the run is downgraded to realism_grade"
    return f"{why}{'; ' + unsignable if unsignable else ''}; the run is downgraded to realism_grade"


def _refuse_another_scheduler_path(requested: Any, path: str) -> None:
    """A launcher that places a run through another scheduler path than its ``intent.schedulerPath`` asks
    for (slurm-bridge or not) is refused: the path is recorded and the one-variable gate compares it."""
    if path == LOCAL_SCHEDULER_PATH:
        return  # on this machine schedulerPath has no meaning: the path recorded is local
    if ("slinky" in str(requested or "").lower()) != ("slinky" in path):
        raise BenchrunError(f"intent.schedulerPath: {requested!r} is not what the launcher offers to place the run "
                            f"through ({path!r}); it is not run another way than it asks")


def _refuse_if_canceled_since(rd: RunDir, dagster_run_id: str | None, created: float | None) -> None:
    refused = canceled_since(rd.read_status(), created)
    if refused:
        raise BenchrunError(f"run {rd.run_id} was canceled {refused} after Dagster run {dagster_run_id} was "
                            "created: this attempt does not run it (the run stays Canceled); re-execute it "
                            "(a new Dagster run) to run it again")


def signing_unavailable(signing: Any) -> str | None:
    """Why the signature a spec's ``provenance.signing`` asks for cannot be made here (a backend other
    than the local ed25519 key, e.g. sigstore or a KMS key; an attestation format other than an in-toto
    DSSE envelope); None when it can."""
    from benchrun.provenance.signing import BACKEND_USED, backend_available, format_produced

    backend, fmt = getattr(signing, "backend", None), getattr(signing, "attestation_format", None)
    if not backend_available(backend):
        return (f"signing backend {backend!r} is not available in this installation (it signs with "
                f"{BACKEND_USED} only), so no {backend} signature can be made")
    if not format_produced(fmt):
        return f"attestation format {fmt!r} is not produced here (only an in-toto statement in a DSSE envelope)"
    return None


def pull_if_absent(rd: RunDir) -> bool:
    """The run from the shared state when this home does not hold it: a step re-executed from a failure
    on Kubernetes runs in a fresh run-worker pod, whose home is empty (only ``pinned_spec`` pulled the
    run, so a re-executed layer or ``run_evidence`` found "no such run"); True when it pulled one."""
    from benchrun.sharedstate import files_behind, pull_run

    if rd.exists() and not files_behind(rd.home, rd.run_id):
        return False  # (a home that read only the run's status since: its files are older, pulled again)
    pull_run(rd.run_id, rd.home)
    return rd.exists()


def pull_sealed_if_absent(rd: RunDir) -> None:
    """:func:`pull_if_absent` for a step after ``run_evidence`` (statistics, comparison, warehouse, report,
    status): a run pulled without its sealed evidence (``manifest.json``) is refused, naming the step to
    re-execute from, rather than analysed, curated and finished Succeeded from a copy older than its seal."""
    if pull_if_absent(rd) and not (rd.path / "manifest.json").is_file():
        raise BenchrunError(f"run {rd.run_id} pulled from the shared state holds no sealed evidence (manifest.json): "
                            "its copy there is older than its seal; re-execute it from run_evidence")


def resume_attempt(rd: RunDir, dagster_run_id: str | None) -> bool:
    """Make ``dagster_run_id`` the run's current attempt when a Dagster re-execution (from a failure, or
    of chosen steps) runs this step without running ``pinned_spec``, which admits an attempt: status.json
    named the attempt that failed, so the re-execution's own failure or cancel was ignored as "not the
    current attempt", its phase stayed Failed while its suites ran, and, with no liveness claim, a
    re-execution killed with -9 held the one-at-a-time queue for good. Clears the earlier attempt's
    Failed/Canceled, claims the run for this process and sets it Running; True when it did."""
    st = rd.read_status()
    if not dagster_run_id or st.get("dagster_run_id") in (None, dagster_run_id):
        return False
    from benchrun.liveness import start_heartbeat

    earlier = st.get("dagster_run_id")
    rd.remove_conditions("Failed", "Canceled", "Complete")
    rd.update_status(message=None, dagster_run_id=dagster_run_id)
    start_heartbeat(rd.home, rd.run_id, dagster_run_id=dagster_run_id)
    rd.set_condition("Resumed", True, "ReExecuted", f"Dagster run {dagster_run_id} re-executes steps of Dagster run "
                                                    f"{earlier}, which ended first")
    rd.set_phase("Running")
    return True


def canceled_since(status: dict[str, Any], created: float | None) -> str | None:
    """When and why the run was canceled, if it is Canceled and that happened at or after
    ``created`` (epoch seconds); else None (also when ``created`` is not known)."""
    import datetime as dt

    if created is None or status.get("phase") != "Canceled":
        return None
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == "Canceled"), {})
    when = str(cond.get("lastTransitionTime") or status.get("finished_utc") or "")
    try:
        at = dt.datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp()
    except ValueError:
        at = float("inf")  # Canceled at an unknown time: not this attempt's to undo
    if at < created:
        return None
    return f"at {when or 'an unknown time'} ({cond.get('message') or status.get('message') or 'no reason recorded'})"


def settle_layers(rd: RunDir) -> tuple[str, list[str]]:
    """The outcome of the layers so far, with a <Layer>Complete condition for each."""
    layers = rd.read_status().get("layers", {})
    for name, cond in LAYER_CONDITION.items():
        st = layers.get(name)
        if st is None:
            continue
        if st["status"] == "skipped":
            rd.set_condition(cond, True, "Skipped", st.get("skip_reason") or "layer disabled")
        else:
            ok = st["status"] == "succeeded"
            why = "; ".join(st.get("failures") or [])
            rd.set_condition(cond, ok, "AllReplicatesSucceeded" if ok else "ReplicatesFailed",
                             f"{st['ok']} ok, {st['failed']} failed, {st.get('unavailable', 0)} unavailable "
                             f"of {st['launches']}" + (f" ({why}; logs in raw/)" if why else ""))
    return run_outcome(layers)


def set_earlier_attempt_aside(rd: RunDir) -> str | None:
    """A run started again after its evidence was sealed (its partition re-materialized) starts
    clean: everything the earlier attempt wrote — results, logs, reports, figures, its manifest and
    signature — moves to ``attempts/<k>/`` (k = 1, 2, ...), where it stays part of the run's files
    (the new manifest hashes it; its own evidence is in the store under its manifest digest).
    Left in place, the earlier reports and statistics were sealed into the new manifest, the assets
    after rewrote them and signing refused ("the sealed evidence changed"). Kept in place: the
    pinned spec, the live status and a ``replicates: auto`` decision (the plan reads it back). Returns
    the folder, None when nothing was sealed before."""
    import shutil

    if not (rd.path / "manifest.json").is_file():
        return None
    keep = {"status.json", f"structured/{rd.run_id}_spec.yaml", f"structured/{rd.run_id}_replicate_plan.json"}
    k = 1
    # manifest.json moves last, so a folder without one is a move a crash cut short: it is finished there
    # (before, manifest.json moved among the first, and the next start found none and moved nothing more:
    # the stale reports were sealed into the new manifest and signing refused)
    while (rd.path / "attempts" / str(k)).exists() and (rd.path / "attempts" / str(k) / "manifest.json").is_file():
        k += 1
    target = rd.path / "attempts" / str(k)
    moving = [p for p in sorted(rd.path.rglob("*")) if p.is_file()
              and (rel := p.relative_to(rd.path).as_posix()) not in keep and not rel.startswith("attempts/")]
    for path in sorted(moving, key=lambda p: p.name == "manifest.json" and p.parent == rd.path):
        dest = target / path.relative_to(rd.path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(dest))
    return f"attempts/{k}/"


def record_evidence(rd: RunDir, loaded: Any, open_store_for: Callable[[str, int | None], Any] | None = None) -> dict[str, Any]:
    """Write manifest.json over the finished run directory, then store it write-once.

    ``open_store_for(path_template, retention_days)`` gives the artifact store (the Dagster
    resource passes its own); by default ``benchrun.store.open_store`` under the run's home."""
    from benchrun.envcapture import write_environment
    from benchrun.store import open_store, retention_days_for_class

    outcome, issues = settle_layers(rd)
    rd.update_status(outcome=outcome, issues=issues, outcome_measured=None)
    from benchrun.telemetry.conditions import apply_run_conditions

    apply_run_conditions(rd)  # TelemetryCollected, ReplicatesUncontended (publication: guarantee)
    rd.set_phase("Analyzing")
    # The background load after the suites, over a window opened when the last one ended
    # (it covers the work above), written before the manifest that hashes it. It is this host's:
    # where the run's environment is a pod's (Kubernetes), it goes under ``orchestrator``.
    write_environment(rd.path, rd.run_id, when="after")
    layers = rd.read_status().get("layers", {})
    steps = {name: {"status": st["status"], "planned": st.get("launches", 0), "ok": st.get("ok", 0),
                    "failed": st.get("failed", 0)} for name, st in layers.items()}
    from benchrun.provenance.signing import envelope_path

    earlier_seal = envelope_path(rd.path)
    if earlier_seal.is_file():
        # run_evidence materialized again (a re-execution): this seal replaces the earlier one, whose
        # evidence stays in the artifact store under its digest. Its envelope signs that earlier seal: kept,
        # the new manifest hashed it as evidence and provenance_attestation refused to sign the new seal.
        log.info("run %s: sealed again; the signature of the earlier seal (%s) is dropped, the new seal is signed "
                 "by provenance_attestation", rd.run_id, earlier_seal.name)
        earlier_seal.unlink()
    manifest = rd.write_manifest(status=outcome, issues=issues, suite_steps=steps)
    sinks = loaded.run.spec.sinks
    days = retention_days_for_class(sinks.raw_artifacts.retention_class,
                                    sinks.curated_warehouse.retention.model_dump(by_alias=True))
    if open_store_for is None:
        store = open_store(sinks.raw_artifacts.path_template, rd.home, retention_days=days)
    else:
        store = open_store_for(sinks.raw_artifacts.path_template, days)
    try:
        stored = store.put_run_dir(rd.path, rd.run_id, exclude=MUTABLE_FILES)
    except BenchrunError:
        raise
    except Exception as exc:
        from benchrun.storage_errors import storage_error

        mapped = storage_error(exc, f"storing the evidence of run {rd.run_id} in the artifact store")
        if mapped is None:
            raise
        raise mapped from exc
    rd.update_status(artifact_manifest_digest=stored.digest)
    return {"manifest": manifest, "stored": stored, "outcome": outcome, "issues": issues}


def finalize(rd: RunDir) -> dict[str, Any]:
    """Succeeded unless the outcome is failed; the exit code follows the outcome."""
    st = rd.read_status()
    # A step failed and was retried: the outcome the suites measured, not the failure's "failed".
    outcome = st.get("outcome_measured") or st.get("outcome") or settle_layers(rd)[0]
    if st.get("outcome_measured"):
        rd.update_status(outcome=outcome, outcome_measured=None)
    rd.set_condition("Complete", outcome == "succeeded", outcome.capitalize(),
                     "; ".join(st.get("issues") or []) or "every replicate succeeded")
    if outcome != "failed":
        # A retried step succeeded: the failure (or cancel) recorded by the earlier attempt no longer holds.
        rd.remove_conditions("Failed", "Canceled")
        rd.update_status(message=None)
    # Until sign_publication signs the finished run (its final report and statistics, the final
    # warehouse rows), verify and promote refuse it: a kill between here and there must not leave
    # a Succeeded run that only its sealing signature covers (the phase must be set before
    # signing: the final report and warehouse rows the signature covers carry it). A run never signed
    # (no sealing signature) owes none: marked, an interrupt here read as a signature still owed that
    # `benchrun report` would never make (found in review).
    from benchrun.provenance import envelope_path

    if envelope_path(rd.path).is_file():
        rd.update_status(final_signature=FINAL_SIGNATURE_PENDING)
    final = rd.set_phase("Failed" if outcome == "failed" else "Succeeded")
    from benchrun.liveness import stop_heartbeat

    stop_heartbeat(rd.home, rd.run_id)
    return final


def exit_code_for(status: dict[str, Any]) -> int:
    """0 Succeeded, 1 Failed or partial, 2 Rejected, 130 Canceled (the CLI's contract). A Succeeded run
    whose final signature is still owed (``final_signature``: stopped between its final phase and its
    signing) is not done either: 1 (it exited 0, though it cannot be verified or promoted until
    ``benchrun report`` signs it; found in review)."""
    if status.get("phase") == "Rejected":
        return 2
    if status.get("phase") == "Canceled":
        return 130
    done = status.get("outcome") == "succeeded" and not status.get("final_signature")
    return 0 if status.get("phase") == "Succeeded" and done else 1


def run_dir_of(run_id: str, home: Path | None = None) -> RunDir:
    return RunDir.for_run(run_id, home)


def resign_checked(run_dir: Path, home: Path | str | None = None, *,
                   rewritten: tuple[str, ...] = ()) -> tuple[str | None, Any]:
    """After one of benchrun's own commands rewrote signed files (a report, the run's warehouse
    partitions): sign the run again through the run's own path (lifecycle.sign_publication), but
    only when its current signature verifies and the evidence files it signed are unchanged —
    re-signing must never launder an edit. ``rewritten``: the run-relative paths the calling
    command wrote; any other signed file that changed — sealed or published — blocks re-signing
    too (an edited report stays an edit a later rebuild-warehouse must not sign over), and so does
    any file added since signing that the command did not write (signing hashes every file of the
    run: a file dropped in would be signed). ``(None, SignResult)`` when re-signed, ``(None, None)`` when
    never signed; else ``(why not, None)``."""
    from benchrun.errors import BenchrunError
    from benchrun.provenance.signing import (
        analysis_output, envelope_path, subject_mismatches, uncovered_files, verify_envelope)
    from benchrun.provenance.statement import status_drift, unsigned_names

    run_dir = Path(run_dir)
    path = envelope_path(run_dir)
    if not path.is_file():
        return None, None  # a run never signed stays unsigned
    from benchrun.provenance.keys import home_key_fallback

    home_path = Path(home or run_dir.parent.parent)
    try:
        # a configured key, else the home's own (the one that signed it and will sign it again): it
        # shows the signed files unchanged, which is what re-signing must know
        statement = verify_envelope(path, home_key_fallback(home_path, strict=False), home=home_path)
    except BenchrunError as exc:
        return f"not signed again: the current signature cannot be checked ({exc})", None
    try:
        status = json.loads((run_dir / "status.json").read_text(encoding="utf-8"))
        # A run interrupted after finalize, before its final signing: what its analysis added after the
        # sealing signature is what that signing would have signed; its final-status rows are curated first.
        # Judged by the verified signature (made while Analyzing) and the sealed outcome, never by
        # status.json's marker alone: status.json is not signed.
        from benchrun.provenance.status_fields import completing as final_signing_pending

        completing = isinstance(status, dict) and final_signing_pending(statement.predicate, status)
        # every field the warehouse curates too: the rows signed below are curated from them
        drift = status_drift(statement, status, run_dir, completing=completing)
    except (OSError, ValueError, AttributeError) as exc:
        return f"not signed again: status.json cannot be read ({exc})", None
    if drift:
        return ("not signed again: status.json no longer names the run as its signature does "
                f"({'; '.join(drift[:5])}): it was edited; restore those fields (the current signature stays)"), None
    sealed = set(statement.subjects) - set(statement.predicate.get("published_files") or [])
    changed = subject_mismatches(statement, run_dir)
    bad = [b for b in changed if b.split(" (")[0] in sealed]
    if bad:
        return f"not signed again: its signed evidence changed since signing ({', '.join(bad[:5])})", None

    ours = set(rewritten)
    edited = [b for b in changed if b.split(" (")[0] not in ours]
    if edited:
        return ("not signed again: signed files changed that this command did not write "
                f"({', '.join(edited[:5])}); restore them (`benchrun verify` lists what differs)"), None
    added = [f for f in uncovered_files(run_dir, statement) if f not in ours and f not in unsigned_names(run_dir.name)]
    if completing:  # what the analysis wrote after sealing is signed now; nothing else added since
        added = [f for f in added if not analysis_output(run_dir.name, f)]
    if added:
        who = "neither this command nor the run's analysis writes" if completing else "this command did not write"
        return (f"not signed again: files were added since signing that {who} "
                f"({', '.join(added[:5])}); remove them (`benchrun verify` lists them)"), None
    try:  # the fields the statement takes from status.json keep their signed values
        if completing:
            from benchrun.warehouse import curate_run
            from benchrun.warehouse.curate import FINAL_STATUS_TABLES

            curate_run(run_dir, home_path, tables=list(FINAL_STATUS_TABLES))
        result = sign_publication(RunDir(run_dir.parent.parent, run_dir.name), keep=statement.predicate)
    except BenchrunError as exc:  # e.g. a pinned spec that no longer validates: the command's own work stands
        return f"not signed again: {exc}", None
    return None, result


def _signing_as_written(rd: RunDir) -> tuple[str | None, str | None]:
    """``spec.provenance.signing``'s backend and attestation format as the pinned spec writes them
    (unvalidated; None where absent)."""
    from benchrun.spec.loader import YamlLoadError, load_documents

    try:
        docs = load_documents(rd.file("structured", "spec", "", "yaml").read_bytes())
    except (OSError, YamlLoadError, ValueError) as exc:
        raise BenchrunError(f"run {rd.run_id}: its pinned spec cannot be read ({exc})") from None
    data = docs[0].data if docs else None
    spec = data.get("spec") if isinstance(data, dict) else None
    provenance = spec.get("provenance") if isinstance(spec, dict) else None
    signing = provenance.get("signing") if isinstance(provenance, dict) else None
    signing = signing if isinstance(signing, dict) else {}
    backend, fmt = signing.get("backend"), signing.get("attestationFormat")
    return (backend if isinstance(backend, str) else None), (fmt if isinstance(fmt, str) else None)


def resign_if_intact(run_dir: Path, home: Path | str | None = None, *, rewritten: tuple[str, ...] = ()) -> str | None:
    """:func:`resign_checked`: None when re-signed or never signed; else why not."""
    return resign_checked(run_dir, home, rewritten=rewritten)[0]


def sign_publication(rd: RunDir, keep: dict[str, Any] | None = None) -> Any:
    """Sign the run again once everything is published (the final report included), so the
    signature covers every file but the live status.json; a run never signed stays unsigned.
    Clears status.json's ``final_signature`` marker (set by finalize), after signing.
    ``keep``: the replaced signature's predicate, whose status.json fields are kept (re-signing)."""
    from benchrun.provenance import envelope_path, sign_run

    if not envelope_path(rd.path).is_file():
        rd.update_status(final_signature=None)  # never signed: no final signature is owed
        return None
    try:
        signing = load_pinned(rd).run.spec.provenance.signing
        backend, attestation_format = signing.backend, signing.attestation_format
    except BenchrunError:
        if keep is None:
            raise
        # Signing again a run whose signature :func:`resign_checked` just verified, sealed spec included: a
        # pinned spec that today's rules refuse (a rule added since it was pinned) was admitted when it was
        # pinned, and its signing settings are read as written. It made `benchrun report` impossible to sign.
        backend, attestation_format = _signing_as_written(rd)
    result = sign_run(rd.path, rd.home, backend_requested=backend, attestation_format=attestation_format, keep=keep)
    ok, reason, message = result.condition()
    rd.set_condition("Signed", ok, reason, message)
    rd.update_status(final_signature=None)  # the last step: the finished run is signed
    return result
