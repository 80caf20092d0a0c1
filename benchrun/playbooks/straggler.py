"""Playbook ``distributed_straggler``: periodic spikes in a collective and one rank (node) that looks slow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchrun.playbooks.base import REPLICATE_STATUS_CTE, PlaybookResult, check_runs, fetch, replicates_phrase

NAME = "distributed_straggler"
QUESTION = "Distributed runs show periodic spikes and one node looks slow: which rank/node, and does it repeat?"

# A rank "stands out" in one replicate of one message size when either
#  * its own median time in the collective is a robust outlier among the ranks:
#    |value − median| / (1.4826 · MAD) ≥ Z_MIN (the same 3.5 as the replicate outlier rule),
#    and at least OFF_MEDIAN_MIN of the median away from it (tightly clustered healthy ranks make
#    MAD tiny: 1010 µs against 1000 µs had z 12.5 and was flagged, 1 % off: review 2026-12-08),
#    computed only with at least MIN_RANKS_FOR_Z ranks (with two, |z| is always 0.67); when
#    MAD is 0 (at least half the ranks took exactly the median time) z is undefined and a rank
#    whose time differs from the median by at least OFF_MEDIAN_MIN of it stands out (its z is
#    unbounded, but a timer that rounds to whole µs makes MAD 0 often, and 1000.5 against
#    1000 µs is no straggler; the mean absolute deviation is no fallback: with one outlier among
#    n ranks it caps |z| at n / 1.2533, 3.2 for four ranks, so the extreme rank still would not
#    stand out); or
#  * it is the rank that arrives last and its arrival lag is at least LAG_SHARE_MIN of the
#    collective's p50 latency (a straggler spends *less* time in the call than the ranks
#    waiting for it, so lateness, not duration, names it).
Z_MIN = 3.5
MIN_RANKS_FOR_Z = 3
LAG_SHARE_MIN = 0.5
OFF_MEDIAN_MIN = 0.10
# "Repeats": it stands out in at least this share of the replicates, and in at least
# MIN_REPEATS of them (one bad replicate is noise, not a slow node). Two thirds, not half:
# with two ranks each is last about half the time by chance.
REPEAT_SHARE_MIN = 2 / 3
MIN_REPEATS = 2
# A node that hosts several ranks is judged as a whole too (the question is which rank *or
# node*): the robust z over all ranks cannot name a node that hosts half or more of them (2
# nodes × 4 ranks, node B late every call: every |z| is 0.67), and which of its ranks arrives
# last varies, so no one rank repeats. A node with at least MIN_RANKS_PER_NODE ranks "stands
# out" in one replicate of one message size when either
#  * the rank that arrived last is one of its ranks and its lag is at least LAG_SHARE_MIN of the
#    p50 latency (the rank rule's late arrival, counted for the node) — with three nodes or more
#    only: of two nodes one always hosts the last arrival, so 2 of 3 replicates happen by chance on
#    a healthy gang (found in the re-review) —, or
#  * every one of its ranks spent less time in the collective than every rank of the other
#    nodes, its ranks' median at least OFF_MEDIAN_MIN below the other nodes' ranks' median (a
#    late node's ranks wait least: the others wait for them);
# and it is flagged when it stands out in REPEAT_SHARE_MIN of the replicates, at least
# MIN_REPEATS of them, as a rank is.
MIN_RANKS_PER_NODE = 2

# Per message size (case) × rank: from measurement_fact's per-rank rows (rank_p50_time_us
# and slowest_rank_arrival_lag_us, both with rank_id) of the run's ok replicates ($1; $2 is the
# baseline REPLICATE_STATUS_CTE takes, NULL here: the ok ones are those whose every recorded
# status, the result's and the launch's, is ok; a failed or hung replicate's numbers are no
# evidence, LEFT_OUT_SQL names them), per replicate the
# rank's robust z over the ranks (NULL below $4 ranks or when MAD is 0; with MAD 0 a rank off
# the median is counted apart, as standing out), whether it was the
# last to arrive and its lag as a share of that replicate's p50_latency_us; then over
# replicates: how often it stood out (|z| ≥ $3, or last with lag share ≥ $5), its median
# time and z, and the collective's median p99/p50 (the "periodic spikes"); beside it, the
# telemetry of the rank's node over the same replicates (host CPU, background CPU, the busiest
# GPU's utilization — the highest of its GPUs' mean utilizations, as low_gpu_utilization judges a
# suite by its busiest GPU: the node's mean over all its GPUs read a busy GPU beside idle ones as
# starved —, % of GPU samples throttled) with the sample files it came from; and per node with
# names (node_*): per replicate whether it stood out as a node (MIN_RANKS_PER_NODE above), over
# replicates how often, how often one of its ranks arrived last late enough, how often its ranks
# all waited less, its ranks' median time and the other nodes' ranks' median time ($7 is
# MIN_RANKS_PER_NODE).
SQL = """
WITH """ + REPLICATE_STATUS_CTE + """,
judged AS (
    SELECT m.* FROM measurement_fact m
    JOIN replicate_status rs ON rs.run_id = m.run_id AND rs.suite = m.suite AND rs.replicate = m.replicate
    WHERE m.run_id = $1 AND rs.status = 'ok'
),
rank_times AS (
    SELECT suite, "case", replicate, rank_id, any_value(node_name) AS node_name, median(value) AS time_us
    FROM judged
    WHERE metric = 'rank_p50_time_us' AND rank_id IS NOT NULL AND value IS NOT NULL
    GROUP BY suite, "case", replicate, rank_id
),
centred AS (
    SELECT *, median(time_us) OVER w AS median_us, count(*) OVER w AS n_ranks
    FROM rank_times
    WINDOW w AS (PARTITION BY suite, "case", replicate)
),
scaled AS (
    SELECT *, 1.4826 * median(abs(time_us - median_us)) OVER (PARTITION BY suite, "case", replicate) AS mad_us
    FROM centred
),
latency AS (
    SELECT suite, "case", replicate,
           max(value) FILTER (WHERE metric = 'p50_latency_us') AS p50_latency_us,
           max(value) FILTER (WHERE metric = 'p99_latency_us') AS p99_latency_us
    FROM judged
    WHERE metric IN ('p50_latency_us', 'p99_latency_us') AND rank_id IS NULL
    GROUP BY suite, "case", replicate
),
last_arrival AS (
    SELECT suite, "case", replicate, rank_id, value AS lag_us
    FROM judged
    WHERE metric = 'slowest_rank_arrival_lag_us' AND rank_id IS NOT NULL
),
gpu_by_device AS (
    -- each GPU's mean utilization per replicate and node: the node's figure is its busiest GPU's
    SELECT suite, replicate, node_name, coalesce(gpu_uuid, CAST(device_index AS VARCHAR)) AS device,
           avg(value) AS util_pct
    FROM telemetry_slice_fact
    WHERE run_id = $1 AND suite IS NOT NULL AND node_name IS NOT NULL AND value IS NOT NULL
      AND metric IN ('gpu_utilization_pct', 'dcgm_gpu_utilization_pct')
    GROUP BY suite, replicate, node_name, device
),
busiest_gpu AS (
    SELECT suite, replicate, node_name, max(util_pct) AS gpu_util_pct FROM gpu_by_device
    GROUP BY suite, replicate, node_name
),
node_telemetry AS (
    -- the sampler beside each replicate (benchrun.telemetry), per node it ran on
    SELECT t.suite, t.replicate, t.node_name,
           avg(t.value) FILTER (WHERE t.metric = 'cpu_utilization_pct') AS cpu_util_pct,
           avg(t.value) FILTER (WHERE t.metric = 'background_cpu_pct') AS background_cpu_pct,
           any_value(b.gpu_util_pct) AS gpu_util_pct,
           100 * avg(t.value) FILTER (WHERE t.metric = 'gpu_throttled') AS gpu_throttled_pct,
           string_agg(DISTINCT t.raw_path, ', ' ORDER BY t.raw_path) AS telemetry_evidence
    FROM telemetry_slice_fact t
    LEFT JOIN busiest_gpu b ON b.suite = t.suite AND b.replicate = t.replicate AND b.node_name = t.node_name
    WHERE t.run_id = $1 AND t.suite IS NOT NULL AND t.node_name IS NOT NULL
    GROUP BY t.suite, t.replicate, t.node_name
),
sampled_hosts AS (
    SELECT suite, replicate, count(*) AS n_hosts FROM node_telemetry GROUP BY suite, replicate
),
per_replicate AS (
    SELECT s.suite, s."case", s.replicate, s.rank_id, s.node_name, s.n_ranks, s.time_us,
           nt.cpu_util_pct, nt.background_cpu_pct, nt.gpu_util_pct, nt.gpu_throttled_pct, nt.telemetry_evidence,
           CASE WHEN s.n_ranks >= $4 AND s.mad_us > 0 THEN (s.time_us - s.median_us) / s.mad_us END AS robust_z,
           abs(s.time_us - s.median_us) >= $6 * abs(s.median_us) AS off_enough,
           s.n_ranks >= $4 AND s.mad_us = 0 AND abs(s.time_us - s.median_us) >= $6 * abs(s.median_us)
               AND s.time_us <> s.median_us AS off_zero_mad,
           a.rank_id IS NOT NULL AS arrived_last,
           a.lag_us, a.lag_us / nullif(l.p50_latency_us, 0) AS lag_share,
           l.p99_latency_us / nullif(l.p50_latency_us, 0) AS spike_ratio
    FROM scaled s
    LEFT JOIN last_arrival a USING (suite, "case", replicate, rank_id)
    LEFT JOIN latency l USING (suite, "case", replicate)
    -- the rank's node; a replicate sampled on one host only (a local gang) gives that host to every rank
    LEFT JOIN sampled_hosts h ON h.suite = s.suite AND h.replicate = s.replicate
    LEFT JOIN node_telemetry nt ON nt.suite = s.suite AND nt.replicate = s.replicate
         AND (nt.node_name = s.node_name OR h.n_hosts = 1)
),
node_replicate AS (
    SELECT suite, "case", replicate, node_name, count(*) AS n_node_ranks,
           coalesce(bool_or(arrived_last AND lag_share >= $5), false) AS node_late,
           median(time_us) AS node_time_us, max(time_us) AS node_max_us
    FROM per_replicate WHERE node_name IS NOT NULL
    GROUP BY suite, "case", replicate, node_name
),
other_nodes AS (
    -- per node, the ranks of every other node in the same replicate
    SELECT n.suite, n."case", n.replicate, n.node_name, median(o.time_us) AS others_time_us,
           min(o.time_us) AS others_min_us
    FROM node_replicate n
    JOIN per_replicate o ON o.suite = n.suite AND o."case" = n."case" AND o.replicate = n.replicate
         AND o.node_name IS NOT NULL AND o.node_name <> n.node_name
    GROUP BY n.suite, n."case", n.replicate, n.node_name
),
node_vs_others AS (
    SELECT n.*, o.others_time_us,
           n.node_max_us < o.others_min_us AND n.node_time_us <= (1 - $6) * o.others_time_us AS node_waited_less,
           count(*) OVER (PARTITION BY n.suite, n."case", n.replicate) AS n_nodes
    FROM node_replicate n
    JOIN other_nodes o USING (suite, "case", replicate, node_name)
),
node_summary AS (
    SELECT suite, "case", node_name, max(n_node_ranks) AS node_n_ranks, count(*) AS node_n_replicates,
           count(*) FILTER (WHERE n_node_ranks >= $7
                            AND (node_waited_less OR (node_late AND n_nodes >= 3))) AS node_n_stood_out,
           count(*) FILTER (WHERE node_late) AS node_n_last_late,
           count(*) FILTER (WHERE node_waited_less) AS node_n_waited_less,
           median(node_time_us) AS node_median_time_us, median(others_time_us) AS other_nodes_median_time_us
    FROM node_vs_others
    GROUP BY suite, "case", node_name
),
rank_rows AS (
SELECT suite, "case", rank_id, any_value(node_name) AS node_name, max(n_ranks) AS n_ranks,
       count(*) AS n_replicates,
       count(*) FILTER (WHERE (abs(robust_z) >= $3 AND off_enough) OR off_zero_mad
                        OR (arrived_last AND lag_share >= $5)) AS n_stood_out,
       count(*) FILTER (WHERE off_zero_mad) AS n_off_zero_mad,
       count(*) FILTER (WHERE arrived_last) AS n_arrived_last,
       median(time_us) AS median_time_us,
       median(robust_z) AS median_robust_z,
       median(lag_us) FILTER (WHERE arrived_last) AS median_lag_us,
       median(lag_share) FILTER (WHERE arrived_last) AS median_lag_share,
       median(spike_ratio) AS collective_p99_over_p50,
       avg(cpu_util_pct) AS node_cpu_util_pct, avg(background_cpu_pct) AS node_background_cpu_pct,
       avg(gpu_util_pct) AS node_gpu_util_pct, avg(gpu_throttled_pct) AS node_gpu_throttled_pct,
       string_agg(DISTINCT telemetry_evidence, ', ' ORDER BY telemetry_evidence) AS telemetry_evidence
FROM per_replicate
GROUP BY suite, "case", rank_id
)
SELECT r.*, ns.node_n_ranks, ns.node_n_replicates, ns.node_n_stood_out, ns.node_n_last_late, ns.node_n_waited_less,
       ns.node_median_time_us, ns.other_nodes_median_time_us
FROM rank_rows r
LEFT JOIN node_summary ns ON ns.suite = r.suite AND ns."case" = r."case" AND ns.node_name = r.node_name
ORDER BY r.suite, r."case", r.rank_id
"""

# The replicates with per-rank rows that were not judged: a status recorded for them (their
# result's or their launch's) was not ok, or none was recorded.
LEFT_OUT_SQL = """
WITH """ + REPLICATE_STATUS_CTE + """
SELECT m.suite, m.replicate, coalesce(any_value(rs.status), 'status not recorded') AS status
FROM measurement_fact m
LEFT JOIN replicate_status rs ON rs.run_id = m.run_id AND rs.suite = m.suite AND rs.replicate = m.replicate
WHERE m.run_id = $1 AND m.metric = 'rank_p50_time_us' AND m.rank_id IS NOT NULL AND rs.status IS DISTINCT FROM 'ok'
GROUP BY m.suite, m.replicate
ORDER BY m.suite, m.replicate
"""

# Columns the terminal table shows (--json gives every column).
DISPLAY = ("suite", "case", "rank_id", "node_name", "n_ranks", "n_replicates", "n_stood_out", "n_arrived_last",
           "median_time_us", "median_robust_z", "median_lag_share", "collective_p99_over_p50", "flagged", "node_flagged")


def _key(row: dict[str, Any]) -> str:
    return f"rank {row['rank_id']}" + (f" (node {row['node_name']})" if row.get("node_name") else "")


def straggler_nodes(result: PlaybookResult) -> list[str]:
    """The nodes of the ranks the playbook flagged (repeat offenders) and the nodes it flagged as a
    whole (``node_flagged``), for status.stragglerNodes.

    A flagged rank without a node name (a suite that did not record one) is named
    ``rank-<id>`` so the status still says who; sorted, each once.
    """
    if result.verdict != "flagged":
        return []
    names = {str(r["node_name"]) if r.get("node_name") else f"rank-{r['rank_id']}"
             for r in result.rows if r.get("flagged")}
    names |= {str(r["node_name"]) for r in result.rows if r.get("node_flagged")}
    return sorted(names)


def _judge_nodes(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Set node_flagged and node_why on every rank row of a node with names; the flagged nodes, each
    with its message sizes and why."""
    flagged: dict[str, list[str]] = {}
    for row in rows:
        n, k = row.get("node_n_replicates"), row.get("node_n_stood_out")
        if not n or row.get("node_n_ranks", 0) < MIN_RANKS_PER_NODE:
            row.update(node_flagged=None, node_why=None)  # no node name, or one rank: the rank pass judges it
            continue
        row["node_flagged"] = k >= MIN_REPEATS and k / n >= REPEAT_SHARE_MIN - 1e-9
        others = row["other_nodes_median_time_us"]
        row["node_why"] = (f"node {row['node_name']} ({row['node_n_ranks']} ranks) stood out in {k}/{n} replicates: one "
                           f"of its ranks arrived last by ≥ {LAG_SHARE_MIN:.0%} of the p50 in {row['node_n_last_late']}, "
                           f"all its ranks spent less time in the call than every other node's rank (those waited for them) in "
                           f"{row['node_n_waited_less']} "
                           f"(median {row['node_median_time_us']:.0f} µs"
                           + (f" against {others:.0f} µs on the other nodes)" if others is not None else ")"))
        if row["node_flagged"]:
            cases = flagged.setdefault(str(row["node_name"]), [])
            if not any(c.startswith(f"{row['case']} (") for c in cases):
                cases.append(f"{row['case']} ({row['node_why'].split(' stood out in ', 1)[1]})")
    return flagged


def distributed_straggler(home: Path, run_id: str, baseline_run_id: str | None) -> PlaybookResult:
    """Per message size and rank: does one rank stand out (robust z or late arrival), repeatedly?

    The baseline is not needed: a straggler is judged among the run's own ranks.
    """
    check_runs(home, run_id, baseline_run_id)
    params = [run_id, None, Z_MIN, MIN_RANKS_FOR_Z, LAG_SHARE_MIN, OFF_MEDIAN_MIN, MIN_RANKS_PER_NODE]
    rows, digest = fetch(SQL, home, params)
    dropped, _ = fetch(LEFT_OUT_SQL, home, [run_id, None])
    failed = [(r["suite"], r["replicate"], r["status"]) for r in dropped]
    left_out = (f"; left out, not judged: {len(failed)} replicate(s) whose result is not ok "
                f"({replicates_phrase(failed)})" if failed else "")

    def result(verdict: str, reason: str) -> PlaybookResult:
        return PlaybookResult(NAME, QUESTION, verdict, reason + left_out, rows, digest, SQL, run_id, baseline_run_id,
                              params)

    if not rows and failed:
        return result("unavailable", f"run {run_id}'s per-rank rows (rank_p50_time_us) are all from replicates "
                                     "that did not succeed: nothing to judge")
    if not rows:
        return result("unavailable", f"run {run_id} has no per-rank rows (rank_p50_time_us with rank_id) in "
                                     "measurement_fact: no distributed suite (allreduce) ran")
    for row in rows:
        n, k = row["n_replicates"], row["n_stood_out"]
        row["flagged"] = k >= MIN_REPEATS and k / n >= REPEAT_SHARE_MIN - 1e-9
        row["why"] = f"stood out in {k}/{n} replicates"
        if row["n_off_zero_mad"]:
            row["why"] += (f" ({row['n_off_zero_mad']} of them with MAD 0: at least half the ranks took exactly the median "
                           f"time, so z is undefined and a rank ≥ {OFF_MEDIAN_MIN:.0%} off the median counts as "
                           "standing out)")
        if row["flagged"] and row.get("telemetry_evidence"):
            # What the node was doing meanwhile: a busy host or a throttled GPU explains a slow rank.
            seen = [f"{label} {row[col]:.0f}%" for col, label in (
                ("node_cpu_util_pct", "host CPU"), ("node_background_cpu_pct", "background CPU"),
                ("node_gpu_util_pct", "GPU"), ("node_gpu_throttled_pct", "GPU throttled")) if row.get(col) is not None]
            row["why"] += f"; node telemetry: {', '.join(seen)} ({row['telemetry_evidence']})"
    node_hits = _judge_nodes(rows)
    hits = [r for r in rows if r["flagged"]]
    judged = max(r["n_replicates"] for r in rows)
    if not hits and judged < MIN_REPEATS:  # a straggler is one that repeats: one replicate cannot show it
        return result("unavailable", f"run {run_id} has per-rank rows from {judged} ok replicate(s); a straggler is "
                                     f"a rank that stands out in at least {MIN_REPEATS}, so nothing can be said "
                                     "either way: run more replicates")
    world = max(r["n_ranks"] for r in rows)
    z_note = "" if world >= MIN_RANKS_FOR_Z else f"; with {world} ranks only late arrival can name a straggler (no z)"
    # a node flagged as a whole that no flagged rank already names: its ranks took turns being late
    named = {r["node_name"] for r in hits if r.get("node_name")}
    nodes = {k: v for k, v in node_hits.items() if k not in named}
    node_note = "".join(f"; node {k} stands out as a whole in {len(v)} message size(s): {', '.join(v)}"
                        for k, v in nodes.items())
    if hits:
        by_rank: dict[str, list[str]] = {}
        for r in hits:
            by_rank.setdefault(_key(r), []).append(f"{r['case']} ({r['why'].split(' in ', 1)[1]})")
        worst = max(by_rank.items(), key=lambda kv: len(kv[1]))
        return result("flagged", f"{worst[0]} stands out in {len(worst[1])} message size(s): {', '.join(worst[1])}"
                                 + (f"; also {', '.join(k for k in by_rank if k != worst[0])}" if len(by_rank) > 1 else "")
                                 + node_note + z_note)
    if nodes:
        return result("flagged", node_note.removeprefix("; ") + "; no one of its ranks stood out in enough replicates alone" + z_note)
    return result("clear", f"no rank stood out (|robust z| ≥ {Z_MIN:g}, off the median where MAD is 0, "
                           f"or last arrival ≥ {LAG_SHARE_MIN:.0%} of the "
                           f"p50 latency) in ≥ {REPEAT_SHARE_MIN:.0%} of replicates, and no node of "
                           f"≥ {MIN_RANKS_PER_NODE} ranks did (one of its ranks last by as much, or all its ranks "
                           f"waiting ≥ {OFF_MEDIAN_MIN:.0%} less than the other nodes'); {len(rows)} case×rank rows"
                           + z_note)
