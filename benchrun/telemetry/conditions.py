"""Run conditions from the replicates' telemetry records: was telemetry collected (sampler,
Prometheus), and were replicates measured on a contended machine (which a publication-grade run
cannot accept)."""

from __future__ import annotations

import json
import logging
from typing import Any

from benchrun.rundir import RunDir, contention_reruns

log = logging.getLogger(__name__)


def _records(rd: RunDir) -> list[tuple[str, int, str, dict[str, Any]]]:
    """(suite, replicate, status, telemetry record) of every result document that has one (an
    unreadable document is skipped: these conditions must not stop the evidence from being recorded)."""
    out = []
    structured = rd.path / "structured"
    for path in sorted(structured.glob(f"{rd.run_id}_*_r*.json")) if structured.is_dir() else []:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("telemetry"), dict):
            out.append((str(doc.get("suite")), int(doc.get("replicate") or 0), str(doc.get("status")), doc["telemetry"]))
    return out


def rerun_outcomes(rd: RunDir) -> tuple[int, int, int]:
    """(replicates launched again because an earlier attempt was contended, how many of them
    were ok and quiet on the attempt that stayed, how many failed there) — from the attempts set
    aside in ``raw/`` and the launch record (:func:`benchrun.rundir.contention_reruns`), so a
    rerun that wrote nothing (a timeout, a kill) still counts, as a failure."""
    ends = list(contention_reruns(rd.path, rd.run_id).values())
    return len(ends), ends.count("quiet"), ends.count("failed")


def _names(items: list[tuple[str, int, Any]], limit: int = 6) -> str:
    shown = ", ".join(f"{s} r{k}" for s, k, _ in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def apply_run_conditions(rd: RunDir) -> dict[str, Any]:
    """Set TelemetryCollected and ReplicatesUncontended; a publication-grade run with contended
    replicates loses PublicationGuaranteesMet and is downgraded to realism_grade, saying why.
    ReplicatesUncontended is Unknown (NotSampled) when no ok replicate has a contention verdict."""
    with_status = _records(rd)
    records = [(s, k, r) for s, k, _, r in with_status]
    if not records:
        return rd.read_status()
    broken = [(s, k, r["error"]) for s, k, r in records if r.get("error")]
    prom = [(s, k, r["prometheus"]) for s, k, r in records if isinstance(r.get("prometheus"), dict)]
    prom_bad = [(s, k, p) for s, k, p in prom if p.get("status") != "ok"]
    if broken:
        rd.set_condition("TelemetryCollected", False, "SamplerError",
                         f"the sampler failed in {_names(broken)}: {broken[0][2]}")
    elif prom_bad:
        reason = "PrometheusUnavailable" if all(p.get("status") == "unavailable" for _, _, p in prom_bad) else "PrometheusPartial"
        rd.set_condition("TelemetryCollected", False, reason,
                         f"Prometheus range queries {prom_bad[0][2].get('status')} for {_names(prom_bad)}: "
                         f"{prom_bad[0][2].get('reason')}; host samples were kept")
    else:
        rates = sorted({r["rate_hz"] for _, _, r in records if isinstance(r.get("rate_hz"), (int, float))})
        sampled = [r for _, _, r in records if r.get("samples")]
        parts = ([f"{len(sampled)} replicates sampled at {', '.join(f'{x:g}' for x in rates)} Hz"] if sampled else [])
        parts += [f"Prometheus answered for {len(prom)} replicates"] if prom else []
        rd.set_condition("TelemetryCollected", True, "Sampled" if sampled else "PrometheusOnly", "; ".join(parts))
    # Only a replicate that measured something (ok) can have been measured on a contended machine:
    # an unavailable one's sampler still ran (and may have seen background load) but it has no
    # numbers to spoil, so it neither downgrades the run nor counts among the judged. Of the ok ones
    # only those with a verdict (a bool ``contended``, from the sampler) are judged: a record of
    # Prometheus data alone (a Kubernetes pod's), or a window too short to summarise, says nothing
    # about the machine (until 2026-12-07 such replicates made the run QuietMachine).
    ok = [(s, k, r) for s, k, status, r in with_status if status == "ok"]
    judged = [(s, k, r) for s, k, r in ok if isinstance(r.get("contended"), bool)]
    unjudged = [(s, k, r) for s, k, r in ok if not isinstance(r.get("contended"), bool)]
    contended = [(s, k, r) for s, k, r in judged if r["contended"]]
    relaunched, quiet, failed = rerun_outcomes(rd)
    again = (f"; launched again after a contended attempt (trials.contendedReruns): {relaunched}, "
             f"{quiet} of them quiet on the rerun" + (f", {failed} failed on it" if failed else "")
             if relaunched else "")
    why_not = (unjudged[0][2].get("contention_reason")
               or "no contention verdict: Prometheus data alone, no sampler") if unjudged else ""
    not_judged = (f"; {len(unjudged)} ok replicates not judged ({_names(unjudged)}; e.g. {why_not})" if unjudged else "")
    if not judged:
        # No verdict is no evidence either way: Unknown, which neither downgrades a publication-grade
        # run (its launcher's guarantee stands) nor lets a reader call the machine quiet.
        rd.set_condition("ReplicatesUncontended", "Unknown", "NotSampled",
                         (f"no ok replicate was judged for background load: {len(unjudged)} ok replicates not judged "
                          f"({_names(unjudged)}; e.g. {why_not})" if unjudged else "no ok replicate to judge") + again)
        return rd.read_status()
    if contended:
        first = contended[0][2].get("contention_reason")
        rd.set_condition("ReplicatesUncontended", False, "BackgroundLoad",
                         f"{len(contended)} of {len(judged)} ok replicates were measured on a contended machine "
                         f"({_names(contended)}); e.g. {first}{not_judged}{again}")
        status = rd.read_status()
        if status.get("benchmark_class_granted") == "publication_grade":
            rd.set_condition("PublicationGuaranteesMet", False, "BackgroundLoad",
                             f"stable background load was not had: {len(contended)} replicates contended "
                             f"({_names(contended)}); the run is downgraded to realism_grade")
            rd.update_status(benchmark_class_granted="realism_grade")
    else:
        rd.set_condition("ReplicatesUncontended", True, "QuietMachine",
                         (f"no replicate that stayed saw background CPU above its threshold ({len(judged)} ok replicates sampled)"
                          if relaunched else
                          f"no replicate saw background CPU above its threshold ({len(judged)} ok replicates sampled)")
                         + not_judged + again)
    return rd.read_status()
