"""Published baselines: ``promote`` verifies a run as ``verify`` does before publishing it, and the alias records what it verified.

``published/<alias>`` is a text file: the run id on its first line (what older readers
read), then one JSON line recording the verified evidence — the sha256 of the DSSE envelope
(the attestation digest), of ``manifest.json``, the signed ``artifact_manifest_digest`` and
the keyid. :func:`alias_problems` checks a baseline read through an alias against that
record again, so a baseline edited after promotion is refused by ``compare``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchrun.stats.admit import Refusal
    from benchrun.stats.load import RunInfo

from benchrun.errors import BenchrunError
from benchrun.rundir import finished_and_succeeded
from benchrun.stats.load import read_alias  # noqa: F401 - the alias file format; promote and compare read it here

log = logging.getLogger(__name__)


def _sha256(path: Path) -> str:
    from benchrun.store.base import sha256_file

    return sha256_file(path)


def verify_for_promotion(run_dir: Path, home: Path, *, public_key: Path | None = None,
                         pinned: tuple[str, ...] = (), allow_adhoc: bool = False) -> dict[str, Any]:
    """What ``verify RUN_ID`` checks — the DSSE signature, every signed file, the sealed manifest,
    every stored object — plus a Succeeded phase that the signed outcome agrees with, a final
    signature (not only the one made when the evidence was sealed: ``final_signature_missing``), and a
    cadence other than ``adhoc`` (unless ``allow_adhoc``).

    Returns the alias record; raises BenchrunError naming the file that fails.
    """
    from benchrun.provenance.keys import keyid_of, load_public_key
    from benchrun.provenance.signing import envelope_path, verify_run, verify_stored
    from benchrun.stats.admit import manifest_problems, signed_phase_problem
    from benchrun.stats.load import _read_json, load_run

    run_id = run_dir.name
    status = _read_json(run_dir / "status.json", "status.json")
    if not finished_and_succeeded(status.get("phase"), status.get("outcome")):
        raise BenchrunError(f"run {run_id} is in phase {status.get('phase')} (outcome {status.get('outcome')}); "
                            "only a Succeeded run can become the baseline")
    if load_run(run_dir).cadence == "adhoc" and not allow_adhoc:
        raise BenchrunError(f"run {run_id} is an ad-hoc experiment (intent.cadence adhoc): it is not published as a "
                            "baseline unless you say so with --allow-adhoc")
    from benchrun.provenance.signing import final_signature_missing

    missing = final_signature_missing(run_id, status)
    if missing:
        raise BenchrunError(f"{missing}; it cannot become the baseline until then")
    env = envelope_path(run_dir)
    if not env.is_file():
        raise BenchrunError(f"run {run_id}: {env.relative_to(run_dir)} is missing: an unsigned run cannot become "
                            "the baseline (its evidence cannot be verified); re-run it with signing")
    key_path, where = public_key, str(public_key)
    if public_key is None:
        from benchrun.provenance.keys import default_public_key, home_key_fallback

        key_path = home_key_fallback(home, pinned)
        if key_path is None:
            _, where = default_public_key(home, pinned)
        else:  # the home's own key: integrity only, and said so
            where = f"{key_path} (the home's own key, not pinned: proves the files unchanged, not who signed)"
            log.warning("promote %s: no trusted key configured; checked with %s", run_id, where)
    st = verify_run(run_dir, key_path, home=home, pinned=pinned)
    missing = final_signature_missing(run_id, status, st)  # the signed phase too: the marker is not signed
    if missing:
        raise BenchrunError(f"{missing}; it cannot become the baseline until then")
    bad = manifest_problems(run_dir)
    if bad:
        raise BenchrunError(f"run {run_id}: manifest.json does not verify: {'; '.join(bad[:5])}")
    if st.predicate.get("outcome") == "failed":
        raise BenchrunError(f"run {run_id}: {env.name} signs outcome failed, but status.json says "
                            f"{status.get('phase')}: status.json was changed; this run cannot become the baseline")
    contradicted = signed_phase_problem(status, st)  # compare's check: a signed Failed/Canceled phase
    if contradicted:
        raise BenchrunError(f"run {run_id}: {contradicted}; this run cannot become the baseline")
    objects = verify_stored(run_dir, st, home)
    keyid = keyid_of(load_public_key(key_path)) if key_path is not None else None
    if keyid is None:
        from benchrun.provenance.keys import default_public_key

        keyid = keyid_of(default_public_key(home, pinned)[0])
    return {"run_id": run_id, "attestation_sha256": _sha256(env), "manifest_sha256": _sha256(run_dir / "manifest.json"),
            "artifact_manifest_digest": st.predicate.get("artifact_manifest_digest"), "keyid": keyid,
            "checked_with": where, "stored_objects": objects}


def write_alias(path: Path, record: dict[str, Any]) -> Path:
    from benchrun.fsio import atomic_write_text

    return atomic_write_text(path, record["run_id"] + "\n" + json.dumps(record, sort_keys=True) + "\n")


def alias_problems(run_dir: Path, alias: str, record: dict[str, Any] | None) -> list[str]:
    """Why the baseline read through ``published/<alias>`` is not what was promoted (empty: it is)."""
    from benchrun.provenance.signing import envelope_path

    if record is None:
        return [f"published/{alias} records no attestation digest (promoted before baselines were verified); "
                f"run `benchrun promote {run_dir.name}` again"]
    out = []
    if record.get("run_id") != run_dir.name:
        out.append(f"published/{alias} records run {record.get('run_id')!r}, not {run_dir.name!r}")
    man = run_dir / "manifest.json"
    if not man.is_file() or _sha256(man) != record.get("manifest_sha256"):
        out.append(f"{run_dir.name}/manifest.json is not the one verified when published/{alias} was promoted")
    env = envelope_path(run_dir)
    if not env.is_file():
        out.append(f"{run_dir.name}/{env.relative_to(run_dir)} is missing")
    elif _sha256(env) != record.get("attestation_sha256"):
        from benchrun.stats.admit import signature_problems

        problems, st = signature_problems(run_dir, run_dir.parent.parent)
        if problems or st is None or st.predicate.get("artifact_manifest_digest") != record.get("artifact_manifest_digest"):
            out.append(f"{run_dir.name}/{env.relative_to(run_dir)} differs from the attestation published/{alias} "
                       "recorded and does not sign the same evidence")
    return out


def promote(run_id: str, home: Path | None = None, alias: str = "current", *, public_key: Path | None = None,
            pinned: tuple[str, ...] = (), allow_adhoc: bool = False) -> Path:
    """Verify ``run_id`` as ``benchrun verify`` does (:func:`verify_for_promotion`),
    then point ``published/<alias>`` at it, recording the verified digests (atomic)."""
    from benchrun.paths import benchrun_home, validate_run_id
    from benchrun.stats.load import alias_path, runs_root

    home = home or benchrun_home()
    p = alias_path(home, alias)
    validate_run_id(run_id)
    rd = runs_root(home) / run_id
    if not rd.is_dir():
        raise BenchrunError(f"run {run_id!r} not found under {runs_root(home)}; nothing to promote")
    record = verify_for_promotion(rd, home, public_key=public_key, pinned=pinned, allow_adhoc=allow_adhoc)
    write_alias(p, record)
    from benchrun.sharedstate import push_alias

    try:
        push_alias(home, alias)  # every pod's comparison reads it (no-op without BENCHRUN_SHARED_STATE)
    except BenchrunError as exc:
        raise BenchrunError(f"published/{alias} -> {run_id} is written in this home but not in the shared state "
                            f"({exc}): the cluster's comparisons still read the earlier baseline; run "
                            f"`benchrun promote {run_id} --alias {alias}` again") from None
    log.info("published/%s -> %s (attestation sha256 %s)", alias, run_id, record["attestation_sha256"])
    return p


def alias_refusals(base: "RunInfo", alias: str) -> list["Refusal"]:
    """The baseline read through ``published/<alias>`` must still be what promote verified."""
    from benchrun.stats.admit import BASELINE_ALIAS, Refusal
    from benchrun.stats.load import alias_path

    path = alias_path(base.path.parent.parent, alias)
    try:
        _, record = read_alias(path)
    except (OSError, BenchrunError) as exc:
        return [Refusal(BASELINE_ALIAS, f"published/{alias}: {exc}")]
    return [Refusal(BASELINE_ALIAS, m) for m in alias_problems(base.path, alias, record)]
