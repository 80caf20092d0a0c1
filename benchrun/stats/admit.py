"""Fail-closed admission of a comparison: both runs finished, measured the same suites, verify, and measured every primary.

A comparison may only say "no regression" about what both runs measured. Before any
statistics, :func:`admit_runs` refuses a pair when a run is not Succeeded (the candidate of
a run in progress may be ``Analyzing`` — or ``Failed``/``Canceled`` by an earlier attempt that
a retry resumes — when what its suites measured was not failed), when the two
pinned specs run different layer/suite sets, or when a run's evidence does not verify (its
sealed manifest's hashes, and, when the run is signed, the DSSE signature and every sealed
file it covers). After the rows are built, :func:`unmeasured_primaries` refuses a gating
primary measured in one run but not (with ≥ 2 ok replicates) in the other, or a pair in
which no primary was measured at all; a primary measured in neither run is noted (and names
itself in the condition: a suite unavailable in both, no GPU on either host) unless it names a suite
that reported other metrics, or a suite that failed and reported nothing may be the one that
measures it. A refusal is a :class:`Refusal` with a
reason code; the CLI exits :data:`EXIT_NOT_COMPARABLE` and the asset writes
``RegressionDetected=Unknown (NotComparable)``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from benchrun.errors import BenchrunError
from benchrun.rundir import finished_and_succeeded

if TYPE_CHECKING:
    import pandas as pd

    from benchrun.stats.load import RunInfo

log = logging.getLogger(__name__)

EXIT_NOT_COMPARABLE = 5

# Why a pair was refused (the condition's message starts with these codes' text).
NOT_SUCCEEDED = "RunNotSucceeded"
SUITES_DIFFER = "SuiteSetsDiffer"
EVIDENCE = "EvidenceDoesNotVerify"
PRIMARY_UNMEASURED = "PrimaryNotMeasured"
BASELINE_ALIAS = "BaselineAliasMismatch"
UNITS_DIFFER = "UnitsDiffer"
PRIMARY_NOT_GATEABLE = "PrimaryNotGateable"
REPLICATES_FAILED = "ReplicatesFailed"


@dataclass(frozen=True)
class Refusal:
    """One reason the pair cannot be compared."""

    reason: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message}


def condition(refusals: list[Refusal]) -> dict[str, str]:
    """``RegressionDetected=Unknown (NotComparable)``: nothing was judged, so nothing is cleared."""
    return {"type": "RegressionDetected", "status": "Unknown", "reason": "NotComparable",
            "message": "not comparable, nothing judged: " + "; ".join(r.message for r in refusals)}


def message(refusals: list[Refusal]) -> str:
    return "comparison refused (fail closed): " + "; ".join(f"[{r.reason}] {r.message}" for r in refusals)


# -- phase ------------------------------------------------------------------------------------------

# Phases the run being materialized may be in when the asset compares it: Analyzing on a first
# attempt; Failed or Canceled, as an earlier attempt left it, when a retry resumes its steps.
RESUMABLE_PHASES = ("Analyzing", "Failed", "Canceled")


def _phase_refusal(role: str, run: "RunInfo", in_progress: bool) -> Refusal | None:
    phase = run.status.get("phase")
    outcome = run.status.get("outcome")
    if finished_and_succeeded(phase, outcome):
        return None
    if in_progress and phase in RESUMABLE_PHASES and (run.status.get("outcome_measured") or outcome) in (
            "succeeded", "partial"):
        # The asset compares the run it is materializing: its suites are done. A retry that resumes
        # after an attempt was marked Failed or Canceled (a failed step, a cancel, a reaped process)
        # still reads that phase until run_status settles it; what its suites measured decides.
        return None
    what = f"phase {phase}" + (f", outcome {outcome}" if outcome else "")
    if phase in ("Pending", "Admitted", "Running", "Rejected", None):
        return Refusal(NOT_SUCCEEDED, f"{role} {run.run_id} has not run ({what}); compare runs whose suites "
                                      "have run and succeeded (`benchrun runs` lists them)")
    return Refusal(NOT_SUCCEEDED, f"{role} {run.run_id} is not Succeeded ({what}); only finished, "
                                  "succeeded runs are compared")


# -- layer/suite sets ------------------------------------------------------------------------------


def suite_set(spec: dict[str, Any]) -> set[str]:
    """``layer/suite`` of every enabled layer's suites in a pinned spec."""
    out: set[str] = set()
    layers = (spec.get("spec") or {}).get("layers") if isinstance(spec.get("spec"), dict) else None
    for layer in layers or []:
        if not isinstance(layer, dict) or layer.get("enabled", True) is False:
            continue
        for suite in layer.get("suites") or []:
            if isinstance(suite, dict):
                out.add(f"{layer.get('name')}/{suite.get('name')}")
    return out


def measured_suites(run: "RunInfo") -> set[str]:
    """Suites with a result file in the run directory (any status)."""
    from benchrun.stats.load import suite_results

    return {str(d.get("suite")) for d in suite_results(run.path)}


def _suite_refusal(base: "RunInfo", cand: "RunInfo") -> Refusal | None:
    sb, sc = suite_set(base.spec), suite_set(cand.spec)
    if sb == sc:
        mb, mc = measured_suites(base), measured_suites(cand)
        if mb == mc:
            return None
        sb, sc, what = mb, mc, "suites with results"
    else:
        what = "layer/suite sets of the pinned specs"
    only_b, only_c = sorted(sb - sc), sorted(sc - sb)
    return Refusal(SUITES_DIFFER, f"the {what} differ: only in baseline {base.run_id}: "
                                  f"{', '.join(only_b) or 'none'}; only in candidate {cand.run_id}: "
                                  f"{', '.join(only_c) or 'none'}")


# -- evidence --------------------------------------------------------------------------------------


def manifest_problems(run_dir: Path) -> list[str]:
    """Files of the sealed manifest that are missing or changed (or why the manifest is unusable)."""
    path = run_dir / "manifest.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return ["manifest.json is missing: the run never recorded its evidence"]
    except (OSError, ValueError) as exc:
        return [f"manifest.json is not readable JSON ({exc})"]
    if not isinstance(doc, dict) or doc.get("run_id") not in (None, run_dir.name):
        return [f"manifest.json is not the manifest of run {run_dir.name}"]
    sha = ((doc.get("summary") or {}).get("sha256") or {}) if isinstance(doc.get("summary"), dict) else {}
    if not isinstance(sha, dict) or not sha:
        return ["manifest.json hashes no files"]
    from benchrun.provenance.statement import digest_mismatches

    bad = digest_mismatches(run_dir, sha, "sha256 differs from manifest.json")
    from benchrun.stats.load import analysed_files

    # a result document or request record added after sealing would be read as a measurement
    bad.extend(f"{name} (not in manifest.json: added after the run was sealed)"
               for name in analysed_files(run_dir) if name not in sha)
    if doc.get("status") == "failed":
        bad.append("manifest.json records outcome failed")
    return bad


def verification_key(home: Path | None) -> tuple[Any, str]:
    """The key a comparison checks signatures with: the configured/pinned one, else the home's own
    public key (which proves the files are unchanged since signing, not who signed them)."""
    from benchrun.provenance.keys import default_public_key, home_key_fallback, load_public_key

    pub = home_key_fallback(home)
    if pub is None:
        return default_public_key(home)
    return load_public_key(pub), f"{pub} (the home's own key, not pinned: integrity only)"


def _verified_statement(env: Path, public: Any, where: str) -> Any:
    """The Statement of the envelope at ``env`` if its signature verifies with ``public``."""
    from benchrun.provenance import dsse
    from benchrun.provenance.keys import keyid_of
    from benchrun.provenance.statement import Statement

    try:
        envelope = dsse.Envelope.from_json(json.loads(env.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise BenchrunError(f"{env.name}: not a readable DSSE envelope ({exc})") from None
    if envelope.payload_type != dsse.IN_TOTO_PAYLOAD_TYPE or not dsse.verify(envelope, public, keyid_of(public)):
        raise BenchrunError(f"{env.name}: the signature does not verify with {where}")
    try:
        return Statement.from_json(json.loads(envelope.payload.decode("utf-8")), env.name)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BenchrunError(f"{env.name}: the signed payload is not JSON ({exc})") from None


def signature_problems(run_dir: Path, home: Path | None) -> tuple[list[str], Any]:
    """Problems of a signed run's envelope (signature, run id, sealed files it covers); the
    statement (None when unsigned or unverifiable)."""
    from benchrun.provenance.signing import envelope_path
    from benchrun.provenance.statement import subject_mismatches

    env = envelope_path(run_dir)
    if not env.is_file():
        return [], None
    try:
        public, where = verification_key(home)
        st = _verified_statement(env, public, where)
    except BenchrunError as exc:
        return [str(exc)], None
    if st.run_id != run_dir.name:
        return [f"{env.name}: the statement is for run {st.run_id!r}, not {run_dir.name!r}"], None
    published = set(st.predicate.get("published_files") or [])
    sealed = type(st)({k: v for k, v in st.subjects.items() if k not in published}, st.predicate_type,
                      st.predicate, st.raw)
    bad = subject_mismatches(sealed, run_dir)
    if st.predicate.get("outcome") == "failed":
        bad.append("the signed statement records outcome failed")
    return [f"signed file {b}" for b in bad], st


def signed_phase_problem(status: Any, statement: Any) -> str | None:
    """Why unsigned ``status`` (status.json) contradicts the verified ``statement``: the statement
    signs phase Failed or Canceled and status.json says another. benchrun never moves a run signed
    Failed or Canceled to another phase without signing it again: status.json (unsigned) was edited,
    and its phase is what admission and promotion read. None when they agree (or nothing is signed).
    The one check ``compare`` (:func:`evidence_problems`) and ``promote`` make."""
    recorded = (statement.predicate.get("curated_status") or {}) if statement is not None else {}
    phase = status.get("phase") if isinstance(status, dict) else None
    if isinstance(recorded, dict) and recorded.get("phase") in ("Failed", "Canceled") and phase != recorded.get("phase"):
        return (f"status.json says phase {phase!r}, but the signed statement records phase "
                f"{recorded.get('phase')!r} (outcome {recorded.get('outcome')!r}): status.json was edited "
                "after the run was signed")
    return None


def evidence_problems(run: "RunInfo", home: Path | None = None, *, signed: bool = True) -> list[str]:
    """Why a run's evidence does not verify (empty when it does). A finished run without its
    envelope does not verify: every run benchrun finishes is signed (the provenance_attestation
    asset), so a missing envelope means the run never got that far or the envelope was removed —
    and its manifest alone proves nothing (whoever edits a file can rewrite the manifest too).
    ``signed=False``: the run being analysed in this process (phase Analyzing), whose envelope
    the provenance_attestation asset may not have written yet."""
    from benchrun.provenance.signing import envelope_path, final_signature_missing

    problems = manifest_problems(run.path)
    sig, st = signature_problems(run.path, home or run.path.parent.parent)  # a caller comparing two runs names one home
    contradicted = signed_phase_problem(run.status, st)
    if contradicted:
        sig = [*sig, contradicted]
    # a finished run signed only when its evidence was sealed: never signed as finished (interrupted), or
    # status.json edited to Succeeded after the reaper failed it — promote's check, and compare's too
    unfinished = final_signature_missing(run.run_id, run.status, st) if signed else None
    if unfinished:
        sig = [*sig, unfinished]
    if signed and not envelope_path(run.path).is_file():
        sig = [f"{envelope_path(run.path).relative_to(run.path)} is missing: the run is not signed, so nothing "
               "shows its files are the ones it measured (every run benchrun finishes is signed)"]
    return problems + sig


# -- all together ----------------------------------------------------------------------------------


def admit_runs(base: "RunInfo", cand: "RunInfo", *, candidate_in_progress: bool = False,
               home: Path | None = None) -> list[Refusal]:
    """Every reason the pair cannot be compared, before any statistics (empty: admitted). Both runs'
    signatures are checked with one key: the configured one, else ``home``'s own (by default the
    candidate's home). A key beside the baseline proves nothing: whoever wrote the baseline wrote it."""
    home = home or cand.path.parent.parent
    out: list[Refusal] = []
    for role, run, prog in (("baseline", base, False), ("candidate", cand, candidate_in_progress)):
        r = _phase_refusal(role, run, prog)
        if r:
            out.append(r)
    r = _suite_refusal(base, cand)
    if r:
        out.append(r)
    for role, run, prog in (("baseline", base, False), ("candidate", cand, candidate_in_progress)):
        bad = evidence_problems(run, home, signed=not prog)
        if bad:
            out.append(Refusal(EVIDENCE, f"{role} {run.run_id}'s evidence does not verify: "
                                         + "; ".join(bad[:5]) + (" ..." if len(bad) > 5 else "")))
    return out


def unmeasured_primaries(rows: "pd.DataFrame", primary: Iterable[str],
                         failed: "dict[str, tuple[int, int, int, int]] | None" = None) -> list[Refusal]:
    """Gating rows not measured (≥ 2 ok replicates) in both arms, and primaries matching no row.
    ``failed``: (failed, launched) replicates of the baseline and the candidate per suite with a
    failed replicate in either arm (:func:`failed_launches`). A primary measured in neither run is
    a note only when no suite that failed could have reported it: a gating suite that failed every
    replicate in both runs has nothing to judge, and exited 0 where 4 failures of 5 were refused."""
    from benchrun.stats.compare import FAILED_METRIC, parse_primary

    primary = list(primary)
    failed = failed or {}
    out: list[Refusal] = []
    if not primary:  # nothing declared gates: no pair can be cleared (it exited 0 on any regression)
        return [Refusal(PRIMARY_UNMEASURED, "neither spec declares a primary metric (spec.metrics.<family>.primary): "
                                            "nothing gates, so the pair cannot be judged; declare the metrics that "
                                            "decide the comparison")]
    if rows.empty:
        if primary:
            out.append(Refusal(PRIMARY_UNMEASURED, f"no metric was measured; primaries {', '.join(sorted(primary))} "
                                                   "have no value in either run"))
        return out
    values = rows[rows["name"] != FAILED_METRIC]
    measured_any = False
    for text in sorted(primary):
        sel = parse_primary(text)
        if sel.metric == FAILED_METRIC:
            continue
        hit = values[[sel.matches(s, c, m) for s, c, m in zip(values["suite"], values["case"], values["name"])]]
        if hit.empty and sel.suite is not None and (values["suite"] == sel.suite).any():
            # the suite it names ran and reported, but nothing it reported is this primary: a case or a
            # name the spec got wrong, which no run would ever gate on (it was a note, and the pair passed)
            got = values[values["name"] == sel.metric] if (values["name"] == sel.metric).any() else values
            cases = sorted({c or "(no case)" for c in got[got["suite"] == sel.suite]["case"]})
            out.append(Refusal(PRIMARY_UNMEASURED, f"primary {text} matches nothing suite {sel.suite} reported "
                                                   f"(its {sel.metric if got is not values else 'metrics'}' cases: "
                                                   f"{', '.join(cases[:8])}{' ...' if len(cases) > 8 else ''}); fix "
                                                   "metrics.<family>.primary"))
            continue
        if hit.empty and sel.suite is None and sel.case is not None and (values["name"] == sel.metric).any():
            # NAME[CASE] whose name was reported, with other cases only: the suite-qualified form above
            # refused it, this one was a note and the pair passed (review 2026-12-07: a −39 % exit 0)
            got = values[values["name"] == sel.metric]
            cases = sorted({f"{s}/{sel.metric}[{c}]" if c else f"{s}/{sel.metric}"
                            for s, c in zip(got["suite"], got["case"])})
            out.append(Refusal(PRIMARY_UNMEASURED, f"primary {text} matches nothing either run reported: "
                                                   f"{sel.metric} was reported as {', '.join(cases[:8])}"
                                                   f"{' ...' if len(cases) > 8 else ''}; fix metrics.<family>.primary "
                                                   "(qualify it as SUITE/NAME[CASE] when it names a suite that ran "
                                                   "in neither run)"))
            continue
        if hit.empty:
            # a suite that failed and reported nothing in either run may be the one that measures it
            culprits = [f"{suite} ({fc} of {tc} candidate, {fb} of {tb} baseline replicates failed)"
                        for suite, (fb, tb, fc, tc) in sorted(failed.items())
                        if (sel.suite is None or suite == sel.suite) and not (values["suite"] == suite).any()]
            if culprits:
                out.append(Refusal(REPLICATES_FAILED, f"primary {text} has no value in either run, and "
                                                      f"{'the suite' if len(culprits) == 1 else 'suites'} that may "
                                                      f"measure it failed: {'; '.join(culprits)}; fix the failures "
                                                      "(their logs are in raw/) and run both again"))
            # else measured in neither run: both agree there is nothing to judge (see neither_measured)
            continue
        measured_any = True
        short = hit[(hit["n_baseline"] < 2) | (hit["n_candidate"] < 2)]
        for r in short.itertuples():
            arms = [a for a, n in (("baseline", r.n_baseline), ("candidate", r.n_candidate)) if n < 2]
            what = "has no value" if all(n == 0 for a, n in (("baseline", r.n_baseline), ("candidate", r.n_candidate))
                                         if a in arms) else "has fewer than 2 ok replicates"
            out.append(Refusal(PRIMARY_UNMEASURED, f"primary {r.metric} {what} in the {' and '.join(arms)} "
                                                   f"({r.n_baseline} vs {r.n_candidate} ok replicates)"))
        out.extend(_partly_reported(hit.drop(short.index)))
    if primary and not measured_any and not out:
        out.append(Refusal(PRIMARY_UNMEASURED, f"none of the primaries ({', '.join(sorted(primary))}) has a value "
                                               "in either run: nothing gates"))
    return out


def _partly_reported(hit: "pd.DataFrame") -> list[Refusal]:
    """Gating rows that the candidate's ok replicates left out more often than the baseline's:
    a suite may leave a metric out when it has no value to give (the load generator omits
    ``capacity_at_slo`` when no point met the SLO, the worst outcome), so judging the
    replicates that reported it would clear a candidate on its best launches."""
    if "ok_candidate" not in hit.columns:
        return []
    out = []
    for r in hit.itertuples():
        nb, nc, ob, oc = int(r.n_baseline), int(r.n_candidate), int(r.ok_baseline), int(r.ok_candidate)
        if oc > nc and (oc - nc) * max(ob, 1) > max(ob - nb, 0) * oc:
            out.append(Refusal(PRIMARY_UNMEASURED, f"primary {r.metric} has a value in only {nc} of {oc} ok candidate "
                                                   f"replicates ({nb} of {ob} in the baseline): the replicates that "
                                                   "left it out are not judged, so the pair is not cleared; see why "
                                                   "they gave no value (their result documents' context) and run "
                                                   "again"))
    return out


def failed_launches(baseline: "pd.DataFrame", candidate: "pd.DataFrame") -> dict[str, tuple[int, int, int, int]]:
    """(failed, launched) replicates of the baseline, then of the candidate, per suite with a failed
    replicate in either arm's replicate table (``include_failed``)."""
    from benchrun.stats.launches import launches_by_suite

    (fb, tb), (fc, tc) = launches_by_suite(baseline), launches_by_suite(candidate)
    return {s: (fb.get(s, 0), tb.get(s, 0), fc.get(s, 0), tc.get(s, 0)) for s in sorted(set(fb) | set(fc))}


def neither_measured(rows: "pd.DataFrame", primary: Iterable[str]) -> list[str]:
    """Primaries that match no row of either run (a note: not judged, and not refused while
    another primary gates)."""
    from benchrun.stats.compare import FAILED_METRIC, parse_primary

    values = rows[rows["name"] != FAILED_METRIC] if not rows.empty else rows
    out = []
    for text in sorted(primary):
        sel = parse_primary(text)
        if sel.metric != FAILED_METRIC and (values.empty or not any(
                sel.matches(s, c, m) for s, c, m in zip(values["suite"], values["case"], values["name"]))):
            out.append(text)
    return out


def ungateable_primaries(rows: "pd.DataFrame") -> list[Refusal]:
    """Gating rows the comparison could not judge (a p99 from fewer requests than it needs, or
    whose load generator's verdict is invalid, or a suite that judged its own measurement invalid:
    ``benchrun.stats.tails``): a pair is not cleared of
    a regression it could not test — the more errors or the fewer requests a candidate served,
    the surer it would otherwise pass."""
    if rows.empty or "gating" not in rows.columns:
        return []
    sel = rows[rows["gating"].astype(bool) & rows["verdict"].astype(str).str.startswith("not gateable")]
    return [Refusal(PRIMARY_NOT_GATEABLE, f"primary {r.metric} cannot be judged ({r.verdict}): run enough requests "
                                          "a replicate for every primary percentile (enough that the replicates "
                                          "left after any left out as contended still pool them; on a busy machine, "
                                          "quieten it), or fix what made the load "
                                          "generator's or the suite's own verdict invalid")
            for r in sel.itertuples()]


def failure_refusals(rows: "pd.DataFrame") -> list[Refusal]:
    """Gating suites where at least half of the candidate's launches failed, more than the
    baseline's: the replicates that survived (the fast ones, when the others hit their timeout)
    cannot speak for the suite, and at 5 replicates an arm Fisher's test on the counts cannot
    reach significance before too few survive to compare (3 of 5 failed: p 0.17) — so a 60 %
    crash rate would otherwise pass."""
    from benchrun.stats.compare import FAILED_METRIC
    from benchrun.stats.launches import survivors_cannot_speak

    if rows.empty or "failed_candidate" not in rows.columns:
        return []
    sel = rows[(rows["name"] == FAILED_METRIC) & rows["gating"].astype(bool)]
    out = []
    for r in sel.itertuples():
        fb, fc, tb, tc = int(r.failed_baseline), int(r.failed_candidate), int(r.n_baseline), int(r.n_candidate)
        if survivors_cannot_speak(fb, tb, fc, tc):
            out.append(Refusal(REPLICATES_FAILED, f"gating suite {r.suite}: {fc} of {tc} candidate replicates failed "
                                                   f"({fb} of {tb} in the baseline); the ones that ran cannot speak "
                                                   "for the suite: fix the failures (their logs are in raw/) and "
                                                   "run it again"))
    return out


def unit_mismatches(baseline: "pd.DataFrame", candidate: "pd.DataFrame") -> list[Refusal]:
    """Metrics both arms measured whose unit or direction differ (a p99 in s against one in ms,
    tok/min against tok/s): their ratio is no change of the system, and a latency recorded as
    "higher is better" would judge a regression an improvement. Within an arm, replicates that
    disagree are refused the same way."""
    from benchrun.stats.compare import _label

    def kinds(t: "pd.DataFrame") -> dict[tuple[str, str, str], set[tuple[str, str]]]:
        ok = t[t["status"].astype(str) == "ok"] if "status" in t.columns else t
        out: dict[tuple[str, str, str], set[tuple[str, str]]] = {}
        for s_, c_, m_, u_, d_ in zip(ok["suite"], ok["case"], ok["metric"], ok["unit"], ok["direction"]):
            out.setdefault((str(s_), str(c_), str(m_)), set()).add((str(u_), str(d_)))
        return out

    def say(recorded: set[tuple[str, str]]) -> str:
        return ", ".join(f"{u or 'no unit'} ({d} is better)" for u, d in sorted(recorded))

    kb, kc = kinds(baseline), kinds(candidate)
    out = []
    for key in sorted(set(kb) | set(kc)):
        if len(kb.get(key, set()) | kc.get(key, set())) > 1:
            said = "; ".join(f"{arm} {say(k[key])}" for arm, k in (("baseline", kb), ("candidate", kc)) if key in k)
            out.append(Refusal(UNITS_DIFFER, f"{_label(*key)} is not recorded the same way: {said}; a suite "
                                             "must report a metric in one unit and direction (rename it when "
                                             "the unit changes)"))
    return out


def measured_rows(baseline: "pd.DataFrame", candidate: "pd.DataFrame") -> "pd.DataFrame":
    """Per (suite, case, metric): ok replicates with a value in each arm (the input of
    :func:`unmeasured_primaries`, computed before any statistics or confirmation round)."""
    import pandas as pd

    def counts(t: "pd.DataFrame") -> "pd.DataFrame":
        if t.empty:
            return pd.DataFrame(columns=["suite", "case", "metric", "n"])
        ok = t[(t["status"].astype(str) == "ok") & t["value"].notna()] if "status" in t.columns else t
        return ok.groupby(["suite", "case", "metric"], as_index=False).size().rename(columns={"size": "n"})

    m = counts(baseline).merge(counts(candidate), on=["suite", "case", "metric"], how="outer",
                               suffixes=("_baseline", "_candidate"))
    m = m.fillna({"n_baseline": 0, "n_candidate": 0})
    from benchrun.stats.compare import _label

    def ok_replicates(t: "pd.DataFrame") -> dict[str, int]:
        if t.empty:
            return {}
        ok = t[t["status"].astype(str) == "ok"] if "status" in t.columns else t
        return {str(k): int(v) for k, v in ok.groupby("suite")["replicate"].nunique().items()}

    ok_b, ok_c = ok_replicates(baseline), ok_replicates(candidate)
    return pd.DataFrame({
        "suite": m["suite"].astype(str), "case": m["case"].astype(str), "name": m["metric"].astype(str),
        "metric": [_label(s, c, n) for s, c, n in zip(m["suite"], m["case"], m["metric"])],
        "n_baseline": m["n_baseline"].astype(int), "n_candidate": m["n_candidate"].astype(int),
        "ok_baseline": [ok_b.get(str(s), 0) for s in m["suite"]],
        "ok_candidate": [ok_c.get(str(s), 0) for s in m["suite"]],
    })
