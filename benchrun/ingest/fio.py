"""Reader of fio's JSON output (``--output-format=json``) into benchrun metric rows.

Standard library only: the ``fio`` suite (:mod:`benchrun.suites.fio`) calls it inside benchmark
pods on the fio it ran, and :func:`benchrun.ingest.ingest_file` (kind ``fio``) calls
:func:`metrics_from_file` on a saved fio JSON file handed to it.

Per job (``case`` = the job name; ``<job>:read`` / ``<job>:write`` when a job does both)
and per direction that moved bytes. With ``--unified_rw_reporting=1`` (fio 3: ``mixed``) fio
writes a job's I/O only under ``mixed``, read and write together: read as a direction of its
own, case ``<job>:mixed`` (never the same case as a job's reads or writes alone); with
``unified_rw_reporting=both`` the separate directions are read and ``mixed`` is left aside.

* ``bandwidth_mib_per_s`` — ``bw_bytes`` / 2^20 (fio's ``bw`` is KiB/s; fio's own "MiB/s")
* ``iops`` — fio's ``iops`` (mean over the job's runtime)
* ``p99_clat_ms`` — the 99th percentile of completion latency (``clat_ns.percentile
  ["99.000000"]``; fio 2.x's ``clat`` in microseconds), in milliseconds;
* ``p99_lat_ms`` — instead of ``p99_clat_ms`` when fio reported only total-latency
  percentiles (``lat_ns``: ``--lat_percentiles=1 --clat_percentiles=0``): submission plus
  completion, a different quantity, so under its own name. Neither is there when fio
  reported no percentiles.

Every row carries ``job_runtime_ms`` (fio's ``job_runtime``: how long fio ran the job) when fio
reports it. Under ``--group_reporting`` it is the SUM over the group's jobs (``numjobs=2`` for
1 s reports 2000 ms), not the wall time: fio adds each clone's runtime, and the JSON does not
say reliably how many jobs a group merged, so it is not divided here.

Refused with BenchrunError rather than read into partial rows:

* a job that ended with a non-zero ``error`` (:func:`job_errors` lists them): its rows would
  silently be missing;
* a job name reported more than once (``numjobs`` > 1 without ``--group_reporting`` gives one
  entry per clone): run fio with ``--group_reporting``, with each different job in a reporting
  group of its own (``--stonewall`` or ``--new_group`` before it), since ``--group_reporting``
  reports a whole group under its first job's name;
* a job whose entry shows it is several different jobs merged by ``--group_reporting`` (no
  ``--stonewall`` / ``--new_group`` between them): fio reports the group under its first job's
  name with its LAST job's ``job options``, so a ``name`` option other than the job name, or an
  ``rw`` that excludes a direction that moved bytes (``g1`` rw=read with write bytes: a read job
  and a write job summed; reads of ``verify`` and trims of ``trim_percentage`` allowed);
* a job that moved bytes but gave no rows (I/O under a key this reader does not know);
* output whose last JSON document does not parse. With ``--status-interval`` fio writes a
  document per interval and its final result last; the last document is the one read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.suites.result import metric

DIRECTIONS = ("read", "write", "trim")
# fio's rw= values and the directions each may move ("rw=write:4k": the part before the colon)
RW_DIRECTIONS: dict[str, frozenset[str]] = {
    **{v: frozenset({"read"}) for v in ("read", "randread")},
    **{v: frozenset({"write"}) for v in ("write", "randwrite")},
    **{v: frozenset({"trim"}) for v in ("trim", "randtrim")},
    **{v: frozenset({"read", "write"}) for v in ("rw", "readwrite", "randrw")},
    **{v: frozenset({"trim", "write"}) for v in ("trimwrite", "randtrimwrite")},
}


def parse_fio_documents(text: str, source: str = "fio output") -> list[dict[str, Any]]:
    """Every JSON document in fio's output, in order; text fio printed around them is skipped.

    fio writes one document per run, or, with ``--status-interval``, one per interval and the
    final result last (the earlier ones are snapshots of a run in progress). A document that
    does not parse is an error even when earlier ones did: the final result is the last one.
    """
    docs: list[dict[str, Any]] = []
    decoder = json.JSONDecoder()
    pos = text.find("{")
    if pos < 0:
        raise BenchrunError(f"{source}: no JSON object found; run fio with --output-format=json")
    while pos >= 0:
        try:
            doc, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            which = f"JSON document {len(docs) + 1} (after {len(docs)} that parsed)" if docs else "fio JSON"
            raise BenchrunError(f"{source}: {which} does not parse ({exc}); was the run cut short?") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
            raise BenchrunError(f"{source}: not fio JSON output (no 'jobs' list)")
        docs.append(doc)
        pos = text.find("{", end)
    return docs


def parse_fio_json(text: str, source: str = "fio output") -> dict[str, Any]:
    """fio's result: the last JSON document of its output (see :func:`parse_fio_documents`)."""
    return parse_fio_documents(text, source)[-1]


def job_errors(doc: dict[str, Any]) -> list[str]:
    """``"<job>: error <n>"`` for each job fio reports as failed."""
    return [f"{j.get('jobname')}: error {j.get('error')}" for j in doc["jobs"] if j.get("error")]


def _p99_ms(stats: dict[str, Any]) -> tuple[str, float] | None:
    """(metric name, the 99th percentile in ms): completion latency when fio reported its
    percentiles, else total latency (``lat_ns``) named ``p99_lat_ms``; None without either."""
    for key, scale, name in (("clat_ns", 1e-6, "p99_clat_ms"), ("clat", 1e-3, "p99_clat_ms"),  # clat (usec): fio 2.x
                             ("lat_ns", 1e-6, "p99_lat_ms")):
        pct = (stats.get(key) or {}).get("percentile") or {}
        for q, value in pct.items():
            try:
                if abs(float(q) - 99.0) < 1e-9:
                    return name, float(value) * scale
            except ValueError:
                continue
    return None


def _moved(job: dict[str, Any]) -> dict[str, int]:
    """Bytes per key of ``job`` that holds I/O stats (read, write, trim, mixed, ...)."""
    out = {}
    for key, stats in job.items():
        if isinstance(stats, dict) and isinstance(stats.get("io_bytes"), (int, float)) and stats["io_bytes"] > 0:
            out[key] = int(stats["io_bytes"])
    return out


def merged_jobs(doc: dict[str, Any], job: dict[str, Any]) -> str | None:
    """Why ``job``'s entry is several different jobs ``--group_reporting`` merged (module docstring),
    else None. fio reports a group under its first job's name with its last job's options."""
    name, opts = str(job.get("jobname", "job")), job.get("job options") or {}
    if not isinstance(opts, dict):
        return None
    if opts.get("name") not in (None, name):
        return f"its job options are of job {opts['name']!r}"
    glob = doc.get("global options") or {}
    rw = opts.get("rw", opts.get("readwrite", glob.get("rw", glob.get("readwrite"))))
    allowed = RW_DIRECTIONS.get(str(rw).split(":")[0].strip()) if rw is not None else None
    if allowed is None:
        return None  # not set here, or a value this reader does not know: nothing to hold it to
    def setting(key: str) -> bool:
        value = opts.get(key, glob.get(key))
        return value is not None and str(value).strip().lower() not in ("", "0", "none", "null")
    allowed = allowed | ({"read"} if setting("verify") else set()) | ({"trim"} if setting("trim_percentage") else set())
    moved = _moved(job)
    extra = [f"{d} ({moved[d]} bytes)" for d in DIRECTIONS if d in moved and d not in allowed]
    return f"it moved {', '.join(extra)} but its rw={rw}" if extra else None


def fio_metrics(doc: dict[str, Any], source: str = "fio output") -> list[dict[str, Any]]:
    """Metric rows for every job and direction that moved bytes (see the module docstring)."""
    errors = job_errors(doc)
    if errors:
        raise BenchrunError(f"{source}: fio jobs failed, so their rows would be missing: {'; '.join(errors)}")
    names = [str(job.get("jobname", "job")) for job in doc["jobs"]]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise BenchrunError(
            f"{source}: fio reported job name(s) {', '.join(map(repr, repeated))} more than once (numjobs > 1 gives one "
            "entry per clone); run fio with --group_reporting so a job's clones are one result, with each different "
            "job in a group of its own (--stonewall or --new_group before it: --group_reporting reports a whole "
            "group under its first job's name), or give the jobs distinct names")
    rows: list[dict[str, Any]] = []
    for job, name in zip(doc["jobs"], names):
        why = merged_jobs(doc, job)
        if why is not None:
            raise BenchrunError(
                f"{source}: fio job {name!r} is several different jobs summed by --group_reporting ({why}): fio "
                "reports a reporting group under its first job's name; put each different job in a group of its own "
                "(--stonewall or --new_group before it)")
        runtime = job.get("job_runtime")  # ms the job ran (fio >= 3.x); summed over a group's jobs
        extra = {"job_runtime_ms": int(runtime)} if isinstance(runtime, (int, float)) and runtime > 0 else {}
        moved = _moved(job)
        active = [d for d in DIRECTIONS if d in moved] or (["mixed"] if "mixed" in moved else [])
        if moved and not active:
            raise BenchrunError(f"{source}: fio job {name!r} moved bytes ({', '.join(f'{k}: {v}' for k, v in moved.items())}) "
                                "under no key this reader knows (read, write, trim, mixed); it would give no rows")
        for direction in active:
            stats = job[direction]
            case = f"{name}:mixed" if direction == "mixed" else name if len(active) == 1 else f"{name}:{direction}"
            bw_bytes = stats.get("bw_bytes")
            if bw_bytes is None:  # older fio: bw in KiB/s only
                bw_bytes = float(stats.get("bw", 0)) * 1024
            rows.append(metric("bandwidth_mib_per_s", float(bw_bytes) / 2**20, "MiB/s", "higher", case=case, **extra))
            rows.append(metric("iops", float(stats.get("iops", 0.0)), "IO/s", "higher", case=case, **extra))
            p99 = _p99_ms(stats)
            if p99 is not None:
                ios = stats.get("total_ios")  # the completions the percentile is of
                rows.append(metric(p99[0], p99[1], "ms", "lower", case=case, **extra,
                                   **({"samples": int(ios)} if isinstance(ios, (int, float)) and ios > 0 else {})))
    return rows


def effective_iodepth(job: dict[str, Any]) -> str | None:
    """The queue-depth bucket (fio's ``iodepth_level`` keys: "1", "2", "4", ..., ">=64") most of
    the job's I/Os were issued at; None when fio reported no depths."""
    levels = job.get("iodepth_level") or {}
    shares = {k: float(v) for k, v in levels.items() if isinstance(v, (int, float))}
    if not shares or max(shares.values()) <= 0:
        return None
    return max(shares, key=lambda k: shares[k])


def fio_context(doc: dict[str, Any]) -> dict[str, Any]:
    """What the output says about the run: fio version, each job's options, runtime, I/O count,
    queue depths reached, disk util."""
    return {
        "fio_version": doc.get("fio version"),
        "jobs": {
            str(j.get("jobname")): {
                "options": j.get("job options", {}),
                "job_runtime_ms": j.get("job_runtime"),
                "total_ios": sum(int((j.get(d) or {}).get("total_ios") or 0) for d in DIRECTIONS),
                "iodepth_level": j.get("iodepth_level"),
                "effective_iodepth": effective_iodepth(j),
                "error": j.get("error", 0),
            }
            for j in doc["jobs"]
        },
        "disk_util": doc.get("disk_util", []),
    }


def metrics_from_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Metric rows from a file holding fio's JSON output."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BenchrunError(f"{p}: cannot read fio output ({exc.strerror})") from None
    return fio_metrics(parse_fio_json(text, str(p)), str(p))
