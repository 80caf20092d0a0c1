"""Contention in the model: replicates measured on a contended machine (telemetry's ``contended`` verdict) are launched again, then left out of the comparison by a stated rule, and the rows say how many of each arm were and what was done.

Rerun: with ``spec.trials.contendedReruns`` = r (an extension, default 1), the runner
(``benchrun.execute.run_layer``) launches a contended replicate again up to r times, right
after it; each contended attempt is kept as ``raw/<run>_<suite>_r<k>_contended<i>.json`` (and
``.log``, and its raw files as ``raw/<run>_<suite>_r<k>_contended<i>_*``), and the result
document that stays says ``contention_rerun``.
Rule: per suite and arm, replicates still contended are excluded when at least ``MIN_QUIET`` quiet
(uncontended, ok) replicates remain; otherwise they are kept (too few quiet replicates to
compare on) and the rows say so. One contended baseline replicate 10 % low at n = 5 took the
power for a real 10 % regression from 99.98 % to 33 %; two contended candidate replicates
raised per-metric A/A flags from 0.31 % to 3.4 % (the issue's audit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MIN_QUIET = 3


def contended_replicates(run_dir: str | Path) -> dict[str, set[int]]:
    """suite → ok replicates whose telemetry record says ``contended``: ok as the launcher says
    (:func:`benchrun.stats.load.launch_decides`), so a suite that wrote an ok, contended document
    and was then killed at its timeout stays a failure."""
    from benchrun.stats.load import launch_decides, launch_statuses, suite_results

    said = launch_statuses(run_dir) or {}
    out: dict[str, set[int]] = {}
    for doc in suite_results(run_dir):
        tel = doc.get("telemetry")
        suite, rep = str(doc.get("suite")), int(doc.get("replicate") or 0)
        if isinstance(tel, dict) and tel.get("contended") and \
                launch_decides(doc.get("status"), said.get((suite, rep))) == "ok":
            out.setdefault(suite, set()).add(rep)
    return out


def reruns(run_dir: str | Path) -> dict[str, dict[str, int]]:
    """suite → how the replicates launched again because an earlier attempt was contended ended
    on the attempt that stayed (``quiet``, ``contended``, ``unavailable``, ``failed`` → count;
    :func:`benchrun.rundir.contention_reruns`: read from the attempts set aside, so one whose
    rerun failed without writing a result counts too)."""
    from benchrun.rundir import contention_reruns

    out: dict[str, dict[str, int]] = {}
    for (suite, _), end in contention_reruns(Path(run_dir), Path(run_dir).name).items():
        per = out.setdefault(suite, {})
        per[end] = per.get(end, 0) + 1
    return out


def exclude(table: Any, contended: dict[str, set[int]], *, min_quiet: int = MIN_QUIET) -> tuple[Any, dict[str, tuple[int, str]]]:
    """The replicate table without the contended replicates of each suite that keeps at least
    ``min_quiet`` quiet ok replicates, and per suite (contended count, what was done)."""
    info: dict[str, tuple[int, str]] = {}
    if table is None or table.empty or not contended:
        return table, info
    drop = None
    for suite, reps in contended.items():
        in_suite = table["suite"] == suite
        ok = (table["status"].astype(str) == "ok") if "status" in table.columns else True
        quiet = set(table.loc[in_suite & ok, "replicate"].astype(int)) - reps
        if len(quiet) >= min_quiet:  # only ok rows leave: a failed replicate's row keeps counting as failed
            mask = in_suite & ok & table["replicate"].astype(int).isin(reps)
            drop = mask if drop is None else (drop | mask)
            info[suite] = (len(reps), "excluded")
        else:
            info[suite] = (len(reps), f"kept (only {len(quiet)} quiet replicates, fewer than {min_quiet})")
    return (table[~drop].reset_index(drop=True) if drop is not None else table), info


def compared_table(run_dir: str | Path) -> tuple[Any, dict[str, tuple[int, str]], dict[str, set[int]]]:
    """A run's replicate table as a comparison takes it (failed launches counted, contended replicates
    left out by the rule: :func:`exclude`), what was done per suite, and the contended replicates. The
    comparison, the p99 check and the tail-latency playbook read one answer to "which replicates count"."""
    from benchrun.stats.load import replicate_table

    contended = contended_replicates(run_dir)
    table, info = exclude(replicate_table(run_dir, include_failed=True), contended)
    return table, info, contended


def annotate(rows: Any, base_info: dict[str, tuple[int, str]], cand_info: dict[str, tuple[int, str]],
             base_reruns: dict[str, dict[str, int]] | None = None,
             cand_reruns: dict[str, dict[str, int]] | None = None) -> None:
    """``contended_baseline``, ``contended_candidate`` (replicates still contended after any
    rerun), ``rerun_baseline``, ``rerun_candidate`` (replicates launched again because contended;
    ``*_reruns`` as :func:`reruns` gives them) and ``contention`` (what was done) on every row
    (in place)."""
    if rows is None or rows.empty:
        return
    base_reruns, cand_reruns = base_reruns or {}, cand_reruns or {}
    rows["contended_baseline"] = [base_info.get(s, (0, ""))[0] for s in rows["suite"]]
    rows["contended_candidate"] = [cand_info.get(s, (0, ""))[0] for s in rows["suite"]]
    rows["rerun_baseline"] = [sum(base_reruns.get(s, {}).values()) for s in rows["suite"]]
    rows["rerun_candidate"] = [sum(cand_reruns.get(s, {}).values()) for s in rows["suite"]]

    def what(suite: str) -> str:
        parts = []
        for arm, info, rr in (("baseline", base_info, base_reruns), ("candidate", cand_info, cand_reruns)):
            n, done = info.get(suite, (0, ""))
            ends = rr.get(suite, {})
            again = sum(ends.values())
            if again:
                failed = ends.get("failed", 0)
                parts.append(f"{arm}: {again} contended and launched again, {ends.get('quiet', 0)} quiet on the rerun"
                             + (f", {failed} failed on it" if failed else "")
                             + (f"; {n} still contended, {done}" if n else ""))
            elif n:
                parts.append(f"{arm}: {n} contended, {done}")
        return "; ".join(parts)

    rows["contention"] = [what(s) for s in rows["suite"]]
    kept = {s for info in (base_info, cand_info) for s, (_n, done) in info.items() if done.startswith("kept")}
    if kept and "note" in rows.columns:  # a change read off contended replicates is not said bare
        for i in [i for i, s in enumerate(rows["suite"]) if s in kept]:
            why = f"compared on contended replicates ({rows['contention'].iat[i]}): its change may be the machine's"
            rows.iat[i, rows.columns.get_loc("note")] = "; ".join(x for x in (str(rows["note"].iat[i] or ""), why) if x)


def kept_in_gating(rows: Any, base_info: dict[str, tuple[int, str]],
                   cand_info: dict[str, tuple[int, str]]) -> list[str]:
    """``suite: arm N contended, kept (…)`` for each gating suite whose contended replicates stayed in
    the comparison (fewer than ``MIN_QUIET`` quiet ones): the keep-rule stands, but a change it shows —
    "better" as much as "worse" — is partly the machine's, so the condition says so (NoRegressionShown)."""
    if rows is None or rows.empty or "gating" not in rows.columns:
        return []
    out = []
    for suite in sorted({str(s) for s in rows.loc[rows["gating"].astype(bool), "suite"]}):
        arms = [f"{arm} {info[suite][0]} contended, {info[suite][1]}" for arm, info in
                (("baseline", base_info), ("candidate", cand_info))
                if suite in info and info[suite][1].startswith("kept")]
        if arms:
            out.append(f"{suite}: {'; '.join(arms)}")
    return out
