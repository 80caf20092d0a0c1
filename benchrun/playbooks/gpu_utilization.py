"""Playbook ``low_gpu_utilization``: throughput dropped while GPU utilization stayed low."""

from __future__ import annotations

from pathlib import Path

from benchrun.playbooks.base import (
    REPLICATE_STATUS_CTE,
    SEPARATION_MIN_REPLICATES,
    PlaybookResult,
    check_runs,
    fetch,
    separation,
)

NAME = "low_gpu_utilization"
QUESTION = "Training throughput dropped while GPU utilization stayed low: which suite, how low, how much lost?"

# "Low": the median of one GPU's utilization samples is below this (percent). The GPU is then
# starved (input pipeline, host, communication), not saturated. A suite is judged by its
# busiest GPU: the sampler records the suite's GPUs when its CUDA_VISIBLE_DEVICES names them,
# else every GPU of the node (the GPUs another job holds, or none, read idle), and DCGM's
# node series cover every GPU of the node too; the busiest is the one the suite ran on
# whichever of those it is, and a multi-GPU suite is low only when all its GPUs are.
LOW_UTIL_PCT = 50.0
# "Dropped": a throughput metric's median is at most (1 − this) × the baseline's median, and
# it is told from noise as scheduler_backpressure tells a grown wait (base.separation): both
# runs have at least SEPARATION_MIN_REPLICATES replicates of it and every replicate of the run
# is below every replicate of the baseline. A drop in the medians from fewer replicates cannot
# be judged (the answer says so: unavailable, not flagged); one whose replicate ranges overlap
# is within noise (not flagged). Before, the medians alone decided: 1 replicate against 1, or
# [860, 880, 1150] against [800, 1000, 1200], was flagged.
THROUGHPUT_DROP_MIN = 0.10

# Per suite: the GPU utilization measured, per replicate from the best source it has:
#   1. the sampler's windowed summary (measurement_fact gpu_utilization_pct_mean, case telemetry:
#      NVML over the suite's measured window, benchrun.telemetry.hook.measured_samples), where the
#      replicate's samples record that window (the 'measured_window_s' slice the sampler adds:
#      a suite that records no window, training before 2026-12-07, has its whole process summarised
#      under the same name, and measurement_fact keeps nothing else to tell them apart by; such a
#      replicate is read from its samples, as in 2, and counted, n_replicates_process_summary) and
#      its sampler saw one GPU (a summary averages every GPU sampled, so on a node where it
#      sampled them all a busy GPU beside idle ones would read starved: such a replicate is judged
#      per GPU from its samples, as in 2);
#   2. else its telemetry_slice_fact samples, which cover the whole process (imports, CUDA start-up,
#      teardown): NVML's gpu_utilization_pct from the sampler beside every replicate, and DCGM's
#      through Prometheus, the series attributed to the suite's pod where it was queried, else the
#      node's;
# and measurement_fact gpu_utilization_pct rows a suite writes itself, beside either. Each answer
# says which it used (util_source). Per GPU (node and UUID or index, whichever basis each of its
# values has: the bases are counted, judged_gpu_bases) the median over those values and, for the
# suite, the busiest GPU's median, for the run ($1) and its baseline ($2),
# next to each throughput metric of that suite (higher-is-better per-second metrics of ok
# replicates, and training_outcome_fact tokens_per_second where measurement_fact has none for the
# replicate, case and metric: each replicate counted once): its median over replicates in both
# runs with its range and replicate count, and the run-over-baseline ratio. The telemetry rows are cited (their raw sample files and
# window), with the host's CPU utilization and the background CPU load over the same replicates (the
# windowed summaries again where a replicate has them): a starved GPU on a saturated or contended
# host is input-bound. Nothing here is derived from other metrics: without GPU utilization rows the
# answer is "not measured". Values of a replicate that did not succeed (REPLICATE_STATUS_CTE: its
# result or its launch says so) are left out and counted (n_util_samples_left_out): a crashed or
# hung replicate's idle GPU is no evidence of a starved one. Samples of a replicate with no status
# recorded stay in. Until 2026-12-07 only the slices were read (the summary rows, named
# gpu_utilization_pct_mean, never matched), so 0 % while the suite imported and started CUDA beside
# 95 % while it was timed read as a starved GPU.
SQL = """
WITH """ + REPLICATE_STATUS_CTE + """,
tele AS (
    SELECT run_id, coalesce(suite, source) AS suite, replicate, metric, source, value, raw_path, window_start_utc AS t0,
           window_end_utc AS t1, node_name, coalesce(gpu_uuid, CAST(device_index AS VARCHAR)) AS device
    FROM telemetry_slice_fact
    WHERE run_id IN ($1, $2) AND value IS NOT NULL
      AND metric IN ('gpu_utilization_pct', 'dcgm_gpu_utilization_pct', 'dcgm_gpu_utilization_pct_pod')
),
marked AS (
    -- the replicates whose telemetry summaries are of the suite's measured window: the sampler adds the
    -- window to the replicate's samples as one slice (benchrun.telemetry.hook.mark_window), since
    -- measurement_fact keeps no basis beside a summary row (a suite that records no window, and every
    -- run before windows were recorded, has its whole process summarised under the same names)
    SELECT DISTINCT run_id, suite, replicate
    FROM telemetry_slice_fact
    WHERE run_id IN ($1, $2) AND metric = 'measured_window_s' AND source = 'suite'
),
summaries AS (
    SELECT m.run_id, m.suite, m.replicate, m.metric, m.value, m.node_name, m.status,
           mk.replicate IS NOT NULL AS of_window
    FROM measurement_fact m
    LEFT JOIN marked mk ON mk.run_id = m.run_id AND mk.suite = m.suite AND mk.replicate = m.replicate
    WHERE m.run_id IN ($1, $2) AND m."case" = 'telemetry' AND m.value IS NOT NULL
      AND m.metric IN ('gpu_utilization_pct_mean', 'cpu_utilization_pct_mean', 'background_cpu_pct_mean')
),
windowed AS (
    SELECT run_id, suite, replicate, metric, value, node_name, status FROM summaries WHERE of_window
),
process_summaries AS (
    SELECT run_id, suite, CAST(count(DISTINCT replicate) AS BIGINT) AS n_replicates_process_summary
    FROM summaries WHERE NOT of_window AND metric = 'gpu_utilization_pct_mean'
    GROUP BY run_id, suite
),
sampled_gpus AS (
    SELECT run_id, suite, replicate, count(DISTINCT device) AS n_gpus, min(device) AS device,
           any_value(node_name) AS node_name
    FROM tele WHERE source = 'nvml'
    GROUP BY run_id, suite, replicate
),
gpu_windowed AS (
    SELECT w.run_id, w.suite, w.replicate, coalesce(g.node_name, w.node_name) AS node_name, g.device, w.value,
           w.status, coalesce(g.n_gpus, 1) <= 1 AS one_gpu
    FROM windowed w
    LEFT JOIN sampled_gpus g ON g.run_id = w.run_id AND g.suite = w.suite AND g.replicate = w.replicate
    WHERE w.metric = 'gpu_utilization_pct_mean'
),
all_util_samples AS (
    SELECT run_id, suite, replicate, 'suite' AS source, node_name, NULL AS device, value, NULL AS raw_path,
           NULL::TIMESTAMPTZ AS t0, NULL::TIMESTAMPTZ AS t1, status AS sample_status, 'suite' AS basis
    FROM measurement_fact
    WHERE run_id IN ($1, $2) AND metric = 'gpu_utilization_pct' AND value IS NOT NULL
    UNION ALL
    SELECT run_id, suite, replicate, 'nvml, measured window', node_name, device, value, NULL, NULL, NULL, status,
           'window'
    FROM gpu_windowed WHERE one_gpu
    UNION ALL
    SELECT run_id, suite, replicate, source || CASE WHEN metric LIKE '%_pod' THEN ' (pod)' ELSE '' END, node_name,
           device, value, raw_path, t0, t1, NULL, 'slices'
    FROM tele t
    WHERE (metric <> 'dcgm_gpu_utilization_pct'
           OR NOT EXISTS (SELECT 1 FROM tele p WHERE p.run_id = t.run_id AND p.suite = t.suite
                                                 AND p.metric = 'dcgm_gpu_utilization_pct_pod'))
      AND NOT EXISTS (SELECT 1 FROM gpu_windowed w WHERE w.one_gpu AND w.run_id = t.run_id AND w.suite = t.suite
                                                     AND w.replicate = t.replicate)
),
judged_samples AS (
    SELECT a.*, coalesce(a.sample_status, 'ok') = 'ok' AND coalesce(rs.status, 'ok') = 'ok' AS replicate_ok
    FROM all_util_samples a
    LEFT JOIN replicate_status rs ON rs.run_id = a.run_id AND rs.suite = a.suite AND rs.replicate = a.replicate
),
left_out AS (
    SELECT run_id, suite, count(*) AS n_left_out, count(DISTINCT replicate) AS n_replicates_left_out
    FROM judged_samples WHERE NOT replicate_ok
    GROUP BY run_id, suite
),
util_samples AS (
    SELECT * FROM judged_samples WHERE replicate_ok
),
-- one GPU is its node and device, whichever basis each replicate was read on (its windowed summary,
-- its samples): a row per GPU, the bases counted in it (grouped by source too, one GPU read both ways
-- was two, and the busiest the higher of two medians)
per_gpu AS (
    SELECT run_id, suite, node_name, device, count(*) AS n, median(value) AS util,
           min(value) AS util_min, max(value) AS util_max,
           coalesce(node_name || '/', '') || coalesce(device, '?')
               || ' (' || string_agg(DISTINCT source, ' + ' ORDER BY source) || ')' AS gpu,
           concat_ws(', ',
               CASE WHEN count(*) FILTER (WHERE basis = 'window') > 0 THEN
                   count(DISTINCT replicate) FILTER (WHERE basis = 'window') || ' replicate(s) from the measured window' END,
               CASE WHEN count(*) FILTER (WHERE basis = 'slices') > 0 THEN
                   count(*) FILTER (WHERE basis = 'slices') || ' whole-process sample(s) of '
                   || count(DISTINCT replicate) FILTER (WHERE basis = 'slices') || ' replicate(s)' END,
               CASE WHEN count(*) FILTER (WHERE basis = 'suite') > 0 THEN
                   count(*) FILTER (WHERE basis = 'suite') || ' value(s) the suite reported' END) AS bases
    FROM util_samples
    GROUP BY run_id, suite, node_name, device
),
evidence AS (
    SELECT run_id, suite, string_agg(DISTINCT raw_path, ', ' ORDER BY raw_path) AS telemetry_evidence,
           min(t0) AS telemetry_from_utc, max(t1) AS telemetry_to_utc,
           CAST(count(DISTINCT replicate) FILTER (WHERE basis = 'window') AS BIGINT) AS n_replicates_windowed,
           CAST(count(DISTINCT replicate) FILTER (WHERE basis = 'slices') AS BIGINT) AS n_replicates_from_slices,
           CAST(count(*) FILTER (WHERE basis = 'slices') AS BIGINT) AS n_slice_samples,
           CAST(count(*) FILTER (WHERE basis = 'suite') AS BIGINT) AS n_suite_values
    FROM util_samples
    GROUP BY run_id, suite
),
several_gpus AS (
    SELECT run_id, suite, CAST(count(DISTINCT replicate) AS BIGINT) AS n_replicates_several_gpus
    FROM gpu_windowed WHERE NOT one_gpu
    GROUP BY run_id, suite
),
util AS (
    SELECT g.run_id, g.suite, CAST(sum(n) AS BIGINT) AS n_util_samples, count(*) AS n_gpus,
           max(util) AS gpu_util_pct, arg_max(gpu, util) AS judged_gpu, arg_max(bases, util) AS judged_gpu_bases,
           arg_max(util_min, util) AS gpu_util_min_pct, arg_max(util_max, util) AS gpu_util_max_pct,
           string_agg(gpu || ' ' || round(util, 1) || '%', ', ' ORDER BY util DESC, gpu) AS gpu_medians,
           any_value(e.telemetry_evidence) AS telemetry_evidence,
           any_value(e.telemetry_from_utc) AS telemetry_from_utc, any_value(e.telemetry_to_utc) AS telemetry_to_utc,
           CAST(coalesce(any_value(lo.n_left_out), 0) AS BIGINT) AS n_util_samples_left_out,
           CAST(coalesce(any_value(lo.n_replicates_left_out), 0) AS BIGINT) AS n_replicates_left_out,
           any_value(e.n_replicates_windowed) AS n_replicates_windowed,
           any_value(e.n_replicates_from_slices) AS n_replicates_from_slices,
           any_value(e.n_slice_samples) AS n_slice_samples, any_value(e.n_suite_values) AS n_suite_values,
           CAST(coalesce(any_value(sg.n_replicates_several_gpus), 0) AS BIGINT) AS n_replicates_several_gpus,
           CAST(coalesce(any_value(ps.n_replicates_process_summary), 0) AS BIGINT) AS n_replicates_process_summary
    FROM per_gpu g JOIN evidence e ON e.run_id = g.run_id AND e.suite = g.suite
    LEFT JOIN left_out lo ON lo.run_id = g.run_id AND lo.suite = g.suite
    LEFT JOIN several_gpus sg ON sg.run_id = g.run_id AND sg.suite = g.suite
    LEFT JOIN process_summaries ps ON ps.run_id = g.run_id AND ps.suite = g.suite
    GROUP BY g.run_id, g.suite
),
-- per replicate: its windowed summary where it has one, else its samples time-weighted (each rate
-- over the window it describes, as the replicate summaries are: the sampler's closing tick, tens of
-- ms long, weighs tens of ms; the plain mean where no row has a window); the suite: their mean
host_windows AS (
    SELECT run_id, suite, replicate, metric, value,
           date_diff('microsecond', window_start_utc, window_end_utc) / 1e6 AS seconds
    FROM telemetry_slice_fact
    WHERE run_id = $1 AND suite IS NOT NULL AND metric IN ('cpu_utilization_pct', 'background_cpu_pct')
),
host_replicates AS (
    SELECT run_id, suite, replicate, replace(metric, '_mean', '') AS metric, value
    FROM windowed WHERE run_id = $1 AND metric IN ('cpu_utilization_pct_mean', 'background_cpu_pct_mean')
    UNION ALL
    SELECT run_id, suite, replicate, metric,
           coalesce(sum(value * seconds) FILTER (WHERE seconds > 0)
                    / nullif(sum(seconds) FILTER (WHERE seconds > 0), 0), avg(value))
    FROM host_windows h
    WHERE NOT EXISTS (SELECT 1 FROM windowed w WHERE w.run_id = h.run_id AND w.suite = h.suite
                                                 AND w.replicate = h.replicate AND w.metric = h.metric || '_mean')
    GROUP BY run_id, suite, replicate, metric
),
host AS (
    SELECT run_id, suite, avg(value) FILTER (WHERE metric = 'cpu_utilization_pct') AS host_cpu_util_pct,
           avg(value) FILTER (WHERE metric = 'background_cpu_pct') AS background_cpu_pct
    FROM host_replicates
    GROUP BY run_id, suite
),
measured_throughput AS (
    -- the ok replicates by their result and their launch (a suite that wrote ok and was then killed at
    -- its timeout failed: its throughput is no evidence, as the utilization above already reads it)
    SELECT m.run_id, m.suite, m.replicate, m."case", m.metric, m.unit, m.value
    FROM measurement_fact m
    LEFT JOIN replicate_status rs ON rs.run_id = m.run_id AND rs.suite = m.suite AND rs.replicate = m.replicate
    WHERE m.run_id IN ($1, $2) AND m.status = 'ok' AND coalesce(rs.status, 'ok') = 'ok'
      AND m.direction = 'higher' AND m.value IS NOT NULL
      AND (m.unit LIKE '%/s' OR m.metric LIKE '%per_s%' OR m.metric LIKE '%per_second%'
           OR m.metric LIKE '%throughput%')
),
throughput_samples AS (
    SELECT run_id, suite, replicate, "case", metric, unit, value FROM measured_throughput
    UNION ALL
    -- the training suite writes tokens_per_second to both tables: a replicate's value once
    SELECT run_id, suite, replicate, "case", 'tokens_per_second', 'tokens/s', tokens_per_second
    FROM training_outcome_fact t
    WHERE run_id IN ($1, $2) AND tokens_per_second IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM replicate_status rs WHERE rs.run_id = t.run_id AND rs.suite = t.suite
                      AND rs.replicate = t.replicate AND rs.status <> 'ok')
      AND NOT EXISTS (SELECT 1 FROM measured_throughput m
                      WHERE m.run_id = t.run_id AND m.suite = t.suite AND m.replicate = t.replicate
                        AND m."case" = t."case" AND m.metric = 'tokens_per_second')
),
throughput AS (
    SELECT run_id, suite, "case", metric, any_value(unit) AS unit,
           count(*) AS n_replicates, median(value) AS value, min(value) AS min_value, max(value) AS max_value
    FROM throughput_samples
    GROUP BY run_id, suite, "case", metric
)
SELECT u.suite, u.n_util_samples, u.n_util_samples_left_out, u.n_replicates_left_out, u.n_gpus, u.gpu_util_pct, u.judged_gpu, u.gpu_util_min_pct, u.gpu_util_max_pct,
       u.judged_gpu_bases, u.gpu_medians, bu.gpu_util_pct AS base_gpu_util_pct, h.host_cpu_util_pct, h.background_cpu_pct,
       u.n_replicates_windowed, u.n_replicates_from_slices, u.n_slice_samples, u.n_suite_values,
       u.n_replicates_several_gpus, u.n_replicates_process_summary,
       u.telemetry_evidence, u.telemetry_from_utc, u.telemetry_to_utc,
       t."case", t.metric AS throughput_metric, t.unit AS throughput_unit, t.n_replicates,
       t.value AS throughput, t.min_value AS throughput_min, t.max_value AS throughput_max,
       bt.n_replicates AS base_n_replicates, bt.value AS base_throughput,
       bt.min_value AS base_throughput_min, bt.max_value AS base_throughput_max,
       t.value / nullif(bt.value, 0) AS throughput_change
FROM util u
LEFT JOIN util bu ON bu.run_id = $2 AND bu.suite = u.suite
LEFT JOIN host h ON h.run_id = u.run_id AND h.suite = u.suite
LEFT JOIN throughput t ON t.run_id = $1 AND t.suite = u.suite
LEFT JOIN throughput bt ON bt.run_id = $2 AND bt.suite = t.suite AND bt."case" = t."case" AND bt.metric = t.metric
WHERE u.run_id = $1
ORDER BY u.suite, t."case", t.metric
"""

# How much host telemetry the run has (to say that it was sampled, just without a GPU).
SAMPLED_SQL = """
SELECT count(DISTINCT suite || '/' || replicate) AS n_replicates, count(*) AS n_samples
FROM telemetry_slice_fact WHERE run_id = $1 AND source = 'psutil' AND suite IS NOT NULL
"""

# Columns the terminal table shows (--json gives every column).
DISPLAY = ("suite", "gpu_util_pct", "judged_gpu", "n_gpus", "base_gpu_util_pct", "host_cpu_util_pct", "case", "throughput_metric",
           "throughput", "base_throughput", "throughput_change", "flagged", "telemetry_evidence")


def util_source(row: dict) -> str:
    """Which values a suite's utilization was read from (the SQL's per-replicate choice), in words."""
    parts = []
    if row["n_replicates_windowed"]:
        parts.append(f"the suite's measured window for {row['n_replicates_windowed']} replicate(s) "
                     "(measurement_fact gpu_utilization_pct_mean)")
    if row["n_slice_samples"]:
        reps = row["n_replicates_from_slices"]
        parts.append(f"{row['n_slice_samples']} telemetry_slice_fact sample(s) over the whole process, start-up and "
                     f"teardown included, {f'of {reps} replicate(s) ' if reps else ''}with no usable windowed summary")
    if row["n_suite_values"]:
        parts.append(f"{row['n_suite_values']} gpu_utilization_pct value(s) the suite reported itself")
    text = "; ".join(parts)
    if row.get("n_replicates_process_summary"):
        text += (f" ({row['n_replicates_process_summary']} replicate(s) whose gpu_utilization_pct_mean covers the whole "
                 "process: their sample file holds no measured window (the suite recorded none, or the run predates "
                 "its recording), so they are read from their samples, said so, never as windowed)")
    if row["n_replicates_several_gpus"]:
        text += (f" ({row['n_replicates_several_gpus']} replicate(s) whose sampler saw several GPUs: their summary "
                 "averages all of them, no one GPU's figure, so they are judged per GPU from their samples)")
    return text


def _judge_throughput(row: dict, low: bool, util: str) -> dict:
    """flagged, why and throughput_judged ('dropped', 'not dropped', 'too few replicates', 'within noise')
    for a row with a baseline throughput: a median down by THROUGHPUT_DROP_MIN counts only with
    SEPARATION_MIN_REPLICATES replicates in each run and the run's range below the baseline's."""
    change = row["throughput_change"]
    n, base_n = row["n_replicates"], row["base_n_replicates"]
    why = f"{util}, throughput ×{change:.2f}"
    if change > 1.0 - THROUGHPUT_DROP_MIN:
        return {"flagged": False, "throughput_judged": "not dropped",
                "why": f"{why} (not dropped by ≥ {THROUGHPUT_DROP_MIN:.0%})"}
    apart = separation(n, row["throughput_min"], row["throughput_max"], base_n, row["base_throughput_min"],
                       row["base_throughput_max"], worse="lower")
    if apart == "too few":
        return {"flagged": False, "throughput_judged": "too few replicates",
                "why": f"{why} in the medians, but from {n} replicate(s) in the run and {base_n} in the baseline: "
                       f"at least {SEPARATION_MIN_REPLICATES} each are needed to tell a drop from noise, so it "
                       "cannot be judged"}
    ranges = (f"{row['throughput_min']:g}–{row['throughput_max']:g} against the baseline's "
              f"{row['base_throughput_min']:g}–{row['base_throughput_max']:g}")
    if apart == "overlap":
        return {"flagged": False, "throughput_judged": "within noise",
                "why": f"{why} in the medians, but the replicate ranges overlap ({ranges}): within noise"}
    return {"flagged": low, "throughput_judged": "dropped",
            "why": f"{why} (dropped by ≥ {THROUGHPUT_DROP_MIN:.0%}, every replicate below the baseline's: {ranges})"}


def low_gpu_utilization(home: Path, run_id: str, baseline_run_id: str | None) -> PlaybookResult:
    """Per suite with measured GPU utilization: below LOW_UTIL_PCT, and throughput down vs the baseline?"""
    check_runs(home, run_id, baseline_run_id)
    rows, digest = fetch(SQL, home, [run_id, baseline_run_id])

    def result(verdict: str, reason: str) -> PlaybookResult:
        suites = {r["suite"]: r for r in rows}.values()
        windowed, sliced = (sum(r[k] or 0 for r in suites)
                            for k in ("n_replicates_windowed", "n_replicates_from_slices"))
        if rows:
            reason += (f"; utilization read from the measured window's summaries for {windowed} replicate(s) and from "
                       f"whole-process samples for {sliced} (util_source per suite)")
        return PlaybookResult(NAME, QUESTION, verdict, reason, rows, digest, SQL, run_id, baseline_run_id,
                              [run_id, baseline_run_id])

    if not rows:
        sampled, _ = fetch(SAMPLED_SQL, home, [run_id])
        n = sampled[0]["n_replicates"] if sampled else 0
        seen = (f"; the sampler ran beside {n} replicates (telemetry_slice_fact, {sampled[0]['n_samples']} host "
                "samples) and NVML saw no GPU" if n else "")
        return result("unavailable", f"run {run_id} has no gpu_utilization_pct(_mean) in measurement_fact or "
                                     "gpu_utilization_pct in telemetry_slice_fact: GPU utilization was not measured "
                                     f"(a CPU-only run has no GPU telemetry), so it is not inferred from anything else{seen}")
    for row in rows:
        low = row["gpu_util_pct"] < LOW_UTIL_PCT
        change = row["throughput_change"]
        util = (f"utilization {row['gpu_util_pct']:.1f}% ({'<' if low else '≥'} {LOW_UTIL_PCT:g}%) on the busiest "
                f"of {row['n_gpus']} GPU(s) sampled, {row['judged_gpu']}")
        if row["n_util_samples_left_out"]:
            util += (f" ({row['n_util_samples_left_out']} sample(s) of {row['n_replicates_left_out']} replicate(s) "
                     "that did not succeed left out)")
        row["util_source"] = util_source(row)
        util += f", from {row['util_source']}"
        row["gpu_util_low"] = low
        if baseline_run_id is None:
            row.update(flagged=None, why=f"{util}; no baseline run to compare throughput with")
        elif change is None:
            row.update(flagged=False, why=f"{util}; no baseline throughput for this metric")
        else:
            row.update(_judge_throughput(row, low, util))
    for row in rows:
        if row["gpu_util_low"] and row.get("host_cpu_util_pct") is not None:
            # The host beside the starved GPU: a busy or shared CPU points at the input side.
            row["why"] += (f"; host CPU {row['host_cpu_util_pct']:.0f}% busy, background "
                           f"{row['background_cpu_pct'] or 0:.0f}% (telemetry: {row['telemetry_evidence']})")
    rule = ("each suite is judged by its busiest GPU's median utilization, among the suite's GPUs where its "
            "CUDA_VISIBLE_DEVICES named them or DCGM attributed them to its pod, else every GPU of the node")
    if baseline_run_id is None:
        low = sorted({r["suite"] for r in rows if r["gpu_util_low"]})
        seen = (f"utilization below {LOW_UTIL_PCT:g}% in {', '.join(low)}" if low
                else f"utilization ≥ {LOW_UTIL_PCT:g}% wherever measured")
        return result("unavailable", f"no baseline run: 'throughput dropped' is a change between runs; {seen} "
                                     f"({rule}); give --baseline RUN_ID")
    hits = [r for r in rows if r["flagged"]]
    suites = sorted({r["suite"] for r in hits})
    if not any(r["throughput_change"] is not None for r in rows):
        return result("unavailable", f"GPU utilization was measured but no throughput metric of those suites is in "
                                     f"both {run_id} and baseline {baseline_run_id}")
    drop = (f"by ≥ {THROUGHPUT_DROP_MIN:.0%} (every replicate below the baseline's, with at least "
            f"{SEPARATION_MIN_REPLICATES} replicates in each run)")
    if hits:
        return result("flagged", f"{len(hits)} throughput metric(s) fell {drop} with GPU "
                                 f"utilization below {LOW_UTIL_PCT:g}% in {', '.join(suites)} ({rule})")
    low_rows = [r for r in rows if r["gpu_util_low"]]
    thin = [r for r in low_rows if r.get("throughput_judged") == "too few replicates"]
    noisy = [r for r in low_rows if r.get("throughput_judged") == "within noise"]
    if thin:
        r = thin[0]
        return result("unavailable", f"{len(thin)} throughput metric(s) fell by ≥ {THROUGHPUT_DROP_MIN:.0%} in the "
                                     f"medians with GPU utilization below {LOW_UTIL_PCT:g}%, from too few replicates "
                                     f"to judge, e.g. {r['suite']} {r['throughput_metric']}: {r['n_replicates']} in "
                                     f"the run, {r['base_n_replicates']} in the baseline, at least "
                                     f"{SEPARATION_MIN_REPLICATES} each needed (run more replicates); {rule}")
    judged = {r["suite"] for r in low_rows if r["throughput_change"] is not None}
    # a suite with no throughput metric at all (job_startup beside an idle GPU) has nothing to judge: not unjudged
    unjudged = sorted({r["suite"] for r in low_rows if r["throughput_metric"] is not None} - judged)
    if unjudged:
        # a starved suite whose throughput the baseline cannot speak for is not judged: no "clear" for lack of
        # evidence (a metric reported under another case in the baseline read clear: review 2026-12-08)
        return result("unavailable", f"GPU utilization below {LOW_UTIL_PCT:g}% in {', '.join(unjudged)}, but no "
                                     f"throughput metric of {'it' if len(unjudged) == 1 else 'them'} is in both "
                                     f"{run_id} and baseline {baseline_run_id} (same suite, case and metric), so "
                                     f"whether it fell is not known; {rule}")
    within = (f"; {len(noisy)} whose median fell with GPU utilization below {LOW_UTIL_PCT:g}% have replicate "
              f"ranges overlapping the baseline's (within noise)" if noisy else "")
    return result("clear", f"no throughput metric fell {drop} while GPU utilization was "
                           f"below {LOW_UTIL_PCT:g}%{within}; {rule}")
