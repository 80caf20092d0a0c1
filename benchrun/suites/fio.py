"""The ``fio`` suite: storage bandwidth, IOPS and p99 latency measured by the real fio.

Parameters:
    size_mb     file size per case in MiB (default 256)
    runtime_s   how long each case is measured, in seconds (default 10; fractions such as
                0.25 allowed). fio runs --time_based: a case that has gone through its file
                starts over, so every case measures for runtime_s, not until size_mb moved.
    ramp_s      seconds each case runs before its measurement starts (fio --ramp_time;
                default 1, 0 for none): the I/O of the ramp is not counted.
    directory   where the test files go (default: a temporary directory under the run
                directory). A temporary sub-directory is made inside it and removed after.
    ioengine    fio I/O engine (default psync)
    iodepth     queue depth (default 1). Above 1 it needs an asynchronous engine (libaio,
                io_uring, posixaio, ...): with a synchronous one (psync, sync, pvsync, ...)
                fio runs at depth 1 whatever is asked, so the suite refuses the parameters
                rather than record a depth that was not run. libaio also needs direct: true for a
                depth above 1 (fio's manual: Linux only queues non-buffered I/O; buffered, each
                io_submit returns when its I/Os are done, so the depth fio reports was never at the
                device and its latencies include fio's own queueing); the suite refuses libaio with
                direct false at a depth above 1, including where tmpfs turns the default off.
                io_uring does asynchronous buffered I/O and is accepted either way.
    direct      O_DIRECT, bypassing the page cache (default true). Buffered I/O (direct false)
                measures the page cache (RAM) as much as the storage, so its cases are named
                ``<case>,buffered`` (``seq_read,buffered``): never compared with a direct run's
                storage figures. ``direct: false`` asked for is such a measurement on purpose, and
                valid. On tmpfs, which has no O_DIRECT, the default becomes false, context.direct_note
                says so, and the replicate's ``context.verdict`` is ``invalid`` (its
                ``verdict_reasons``: a figure of RAM where the spec asked for storage;
                :mod:`benchrun.stats.validity`): shown as measured, never gated on. Set
                ``direct: false`` to measure buffered I/O there on purpose, or choose a directory on a
                disk filesystem.
    cases       any of seq_read, seq_write (1 MiB blocks), rand_read, rand_write (4 KiB
                blocks); default all four, run one after another (``--stonewall``)

fio runs from an argv list with ``--output-format=json``; its JSON is kept as
``raw/<run_id>_fio_r<k>_fio.json`` and read by :mod:`benchrun.ingest.fio` (metrics per
case: ``bandwidth_mib_per_s``, ``iops``, ``p99_clat_ms``, each row with ``job_runtime_ms``
and the p99 with ``samples``, the completions it is of). A case that moved no bytes (so has
no rows) fails the replicate, naming the case: the others' rows are not an ok result.
``context.fio_report.jobs`` gives per case the measured milliseconds, the I/O count and the queue depth fio reached (``iodepth_level``,
the share of I/Os at each depth, and ``effective_iodepth``, the depth most I/Os were issued
at: a bucket of fio's 1, 2, 4, ..., >=64). No fio on PATH is a failed
replicate, ``fio is not installed: install the Debian package fio (apt-get install fio)``: a
storage benchmark without its tool is a broken set-up to fix, not a measurement that cannot
exist here (unlike a GPU-only case on a CPU machine).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

from benchrun.ingest.fio import fio_context, fio_metrics, parse_fio_json
from benchrun.paths import SCRATCH_PREFIX
from benchrun.suites._common import ParamError, Params, bool_param, check_known, int_param
from benchrun.suites._runtime import SuiteContext, main

# the parameters the suite takes (checked when it starts, and by `benchrun validate`)
PARAMETERS = ("size_mb", "runtime_s", "ramp_s", "directory", "ioengine", "iodepth", "direct", "cases")
# the metrics the suite may report (`benchrun validate` checks a primary names one; reporting another fails)
METRICS = ("bandwidth_mib_per_s", "iops", "p99_clat_ms", "p99_lat_ms")  # benchrun.ingest.fio.fio_metrics


class FioMissing(RuntimeError):
    """fio is not on PATH (the replicate fails with the package to install)."""

CASES: dict[str, dict[str, str]] = {
    "seq_read": {"rw": "read", "bs": "1M"},
    "seq_write": {"rw": "write", "bs": "1M"},
    "rand_read": {"rw": "randread", "bs": "4k"},
    "rand_write": {"rw": "randwrite", "bs": "4k"},
}
NO_O_DIRECT = ("tmpfs", "ramfs")  # open(O_DIRECT) fails there with EINVAL
BUFFERED = "buffered"  # the case suffix of buffered I/O: a page-cache figure is not storage's
# fio engines that complete each I/O before issuing the next: fio caps their depth at 1
SYNC_ENGINES = ("sync", "psync", "vsync", "pvsync", "pvsync2", "mmap", "splice", "falloc", "ftruncate",
                "filecreate", "filestat", "filedelete", "dircreate", "dirstat", "dirdelete", "e4defrag")
# asynchronous engines that queue only O_DIRECT I/O on Linux (fio's manual, libaio): buffered,
# io_submit completes the I/O before it returns, so depth > 1 needs direct=1
DIRECT_ONLY_ASYNC_ENGINES = ("libaio",)
_ENGINE = re.compile(r"^[a-z0-9_]{1,32}\Z")


def _cases(ctx: Params) -> list[str]:
    value = ctx.param("cases", None)
    if value is None:
        return list(CASES)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or any(v not in CASES for v in value):
        raise ParamError(f"parameter cases={value!r} must be a non-empty list drawn from {', '.join(CASES)}")
    return list(dict.fromkeys(value))


def _directory_param(ctx: Params) -> str | None:
    value = ctx.param("directory", None)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ParamError(f"parameter directory={value!r} must be a path string")
    return value


def _directory(value: str | None) -> Path | None:
    """The directory on this host (where the suite runs: validate cannot see it)."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_dir():
        raise ParamError(f"parameter directory={value!r} is not an existing directory; create it or omit directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ParamError(f"parameter directory={value!r} is not writable by this user")
    return path


def filesystem_of(path: Path) -> dict[str, str] | None:
    """The mount (device, mount point, type) holding ``path``, from /proc/self/mounts."""
    try:
        lines = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    target = str(path.resolve())
    best: dict[str, str] | None = None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if target == mnt or target.startswith(mnt.rstrip("/") + "/"):
            if best is None or len(mnt) > len(best["mount_point"]):
                best = {"device": parts[0], "mount_point": mnt, "fstype": parts[2]}
    return best


def _seconds(ctx: Params, name: str, default: float, *, minimum: float, maximum: float) -> float:
    value = ctx.param(name, None)
    if value is None:
        return default
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and minimum <= value <= maximum
    if not ok:
        raise ParamError(f"parameter {name}={value!r} must be a number of seconds from {minimum} to {maximum}")
    return float(value)


def _ms(seconds: float) -> str:
    return f"{max(0, round(seconds * 1000))}ms"


def build_argv(fio: str, workdir: Path, output: Path, cases: list[str], *, size_mb: int, runtime_s: float,
               ioengine: str, iodepth: int, direct: bool, ramp_s: float = 0.0) -> list[str]:
    """fio's argv: global options, then one ``--name`` section per case, run in sequence; each
    case time-based, ``ramp_s`` unmeasured then ``runtime_s`` measured."""
    argv = [
        fio,
        "--output-format=json",
        f"--output={output}",
        # fio splits --directory at ':' (several directories); a colon in the path is escaped
        "--directory=" + str(workdir).replace(":", "\\:"),
        f"--size={size_mb}M",
        "--time_based",
        f"--runtime={_ms(runtime_s)}",
        f"--ramp_time={_ms(ramp_s)}",
        f"--ioengine={ioengine}",
        f"--iodepth={iodepth}",
        f"--direct={1 if direct else 0}",
        "--randrepeat=0",
    ]
    for case in cases:
        spec = CASES[case]
        argv += [f"--name={case}", f"--rw={spec['rw']}", f"--bs={spec['bs']}", "--stonewall"]
        if "write" in spec["rw"]:
            argv.append("--end_fsync=1")  # the bandwidth includes getting the bytes to the device
    return argv


class Settings(NamedTuple):
    """The suite's parameters, parsed (the directory as written: it is checked where fio runs)."""

    size_mb: int
    runtime_s: float
    ramp_s: float
    iodepth: int
    direct_asked: bool
    direct: bool
    ioengine: str
    cases: list[str]
    directory: str | None


def settings(ctx: Params) -> Settings:
    """The parameters, checked (ParamError): the suite's first step, and ``benchrun validate``'s."""
    check_known(ctx, PARAMETERS)
    size_mb = int_param(ctx, "size_mb", 256, minimum=1, maximum=1_048_576)
    runtime_s = _seconds(ctx, "runtime_s", 10.0, minimum=0.01, maximum=86_400)
    ramp_s = _seconds(ctx, "ramp_s", 1.0, minimum=0, maximum=3600)
    iodepth = int_param(ctx, "iodepth", 1, minimum=1, maximum=4096)
    direct_asked = ctx.param("direct", None) is not None
    direct = bool_param(ctx, "direct", True)
    ioengine = ctx.param("ioengine", "psync")
    if not isinstance(ioengine, str) or not _ENGINE.match(ioengine):
        raise ParamError(f"parameter ioengine={ioengine!r} must be a fio engine name such as psync, libaio, io_uring")
    if iodepth > 1 and ioengine in SYNC_ENGINES:
        raise ParamError(f"parameter iodepth={iodepth} with ioengine={ioengine}: a synchronous engine issues one I/O "
                         "at a time (fio caps its depth at 1); set ioengine: libaio or io_uring, or iodepth: 1")
    check_depth(iodepth, ioengine, direct)
    return Settings(size_mb, runtime_s, ramp_s, iodepth, direct_asked, direct, ioengine, _cases(ctx),
                    _directory_param(ctx))


def check_depth(iodepth: int, ioengine: str, direct: bool, why: str | None = None) -> None:
    """Refuse (ParamError) a queue depth above 1 with an engine that queues only O_DIRECT I/O when
    I/O is buffered; ``why`` says where direct was turned off for the user (tmpfs)."""
    if iodepth > 1 and not direct and ioengine in DIRECT_ONLY_ASYNC_ENGINES:
        cause = f"direct is false ({why})" if why else "direct is false"
        raise ParamError(f"parameter iodepth={iodepth} with ioengine={ioengine} and {cause}: Linux queues only "
                         f"non-buffered (O_DIRECT) I/O through {ioengine}, so buffered I/O runs one request at a "
                         "time and the depth would not be the one asked; set direct: true (on a filesystem with "
                         "O_DIRECT), or ioengine: io_uring (asynchronous buffered I/O), or iodepth: 1")


def case_name(job: str, direct: bool) -> str:
    """The metric case of fio job ``job``: the job's name, ``<job>,buffered`` without O_DIRECT."""
    return job if direct else f"{job},{BUFFERED}"


def run(ctx: SuiteContext) -> None:
    """Run fio over the chosen cases and report each case's bandwidth, IOPS and p99 latency."""
    size_mb, runtime_s, ramp_s, iodepth, direct_asked, direct, ioengine, cases, directory = settings(ctx)
    base = _directory(directory)

    fio = shutil.which("fio")
    if fio is None:
        raise FioMissing("fio is not installed: install the Debian package fio (apt-get install fio)")
    version = subprocess.run([fio, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()

    fs = filesystem_of(base if base is not None else ctx.run_dir)
    direct_note = None
    if direct and fs is not None and fs["fstype"] in NO_O_DIRECT:
        if direct_asked:
            raise ParamError(f"parameter direct=true: {fs['mount_point']} is {fs['fstype']}, which has no O_DIRECT; "
                             "set direct: false or choose another directory")
        check_depth(iodepth, ioengine, False, f"the default direct: true was turned off because {fs['mount_point']} "
                    f"is {fs['fstype']}, which has no O_DIRECT; choose a directory on a disk filesystem")
        direct = False
        direct_note = f"{fs['fstype']} has no O_DIRECT: measured through the page cache"
        # found in review: /dev/shm's seq_read (8 GiB/s of RAM) went out as the disk case's "seq_read"
        ctx.context.update({"verdict": "invalid", "verdict_reasons": [
            f"buffered I/O on {fs['mount_point']} ({fs['fstype']}, no O_DIRECT): the default direct: true was "
            "turned off, so the figures are of the page cache (RAM), not of storage; set direct: false to measure "
            "buffered I/O on purpose, or choose a directory on a disk filesystem"]})
    elif not direct:
        direct_note = "direct: false: buffered I/O, measured through the page cache (cases named ',buffered')"
    workdir = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}fio-", dir=base if base is not None else ctx.run_dir))
    output = ctx.raw_file("fio", "json")
    argv = build_argv(fio, workdir, output, cases, size_mb=size_mb, runtime_s=runtime_s, ramp_s=ramp_s,
                      ioengine=ioengine, iodepth=iodepth, direct=direct)
    ctx.context.update({"fio": fio, "fio_version": version, "argv": argv, "filesystem": fs, "direct_note": direct_note,
                        "directory": str(base) if base is not None else "temporary under the run directory",
                        "direct": direct, "ioengine": ioengine, "iodepth": iodepth, "cases": cases,
                        "runtime_s": runtime_s, "ramp_s": ramp_s, "time_based": True})
    # Generous bound: each case runs ramp_s + runtime_s; laying out files runs at >= 20 MiB/s.
    timeout = 120 + len(cases) * (ramp_s + runtime_s + size_mb / 20)
    ctx.log(f"fio: {len(cases)} cases, {size_mb} MiB each, in {workdir}")
    try:
        with ctx.measuring():  # the telemetry summaries' window: fio's own run
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if proc.stderr.strip():
        ctx.log(proc.stderr.strip()[-4000:])
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"fio exited {proc.returncode}: {' | '.join(tail) or 'no output'}")
    if not output.exists():
        raise RuntimeError(f"fio wrote no JSON to {output.name}")
    ctx.samples["fio_json"] = str(output.relative_to(ctx.run_dir))
    doc = parse_fio_json(output.read_text(encoding="utf-8", errors="replace"), output.name)
    ctx.context["fio_report"] = fio_context(doc)
    rows = fio_metrics(doc, output.name)  # refuses failed jobs (benchrun.ingest.fio.job_errors)
    if not rows:
        raise RuntimeError("fio reported no I/O for any case")
    # a case that moved no bytes has no rows: the replicate would be ok with that case missing
    missing = [c for c in cases if not any(r["case"] == c or r["case"].startswith(f"{c}:") for r in rows)]
    if missing:
        jobs = ctx.context["fio_report"]["jobs"]
        said = [f"{c} ({jobs[c]['total_ios']} I/Os in {jobs[c]['job_runtime_ms']} ms)" if c in jobs
                else f"{c} (not in fio's output)" for c in missing]
        raise RuntimeError(f"fio reported no I/O for case(s) {', '.join(missing)} of {len(cases)} asked: "
                           f"{'; '.join(said)}")
    for row in rows:
        case = case_name(row.pop("case"), direct)
        ctx.add_metric(row.pop("name"), row.pop("value"), row.pop("unit"), row.pop("direction"), case, **row)
    for case in cases:
        got = {r["name"]: r["value"] for r in ctx.metrics if r["case"] == case_name(case, direct)}
        if got:
            ctx.log(f"fio {case_name(case, direct)}: {got.get('bandwidth_mib_per_s', 0):.1f} MiB/s, "
                    f"{got.get('iops', 0):.0f} IOPS, "
                    f"p99 {got.get('p99_clat_ms', got.get('p99_lat_ms', float('nan'))):.3f} ms")


if __name__ == "__main__":
    main(run)
