"""Trace replay: reading request traces (Mooncake JSONL, Azure LLM inference CSV, a plain CSV/JSONL) and the requests they send.

A trace is a list of requests, each with its time, input length and output length, and
optionally a session id and prefix ids. Replayed, request ``i`` is scheduled at
``go + t_i / speedup`` (``t`` measured from the trace's first request) and sent then whether
or not earlier ones have finished (open loop); its ``schedule_lag_ms`` is its lateness against
the trace. A replay point is invalid when the client fell behind the trace (see
:func:`benchrun.loadgen.metrics.verdict`): p99 lateness above ``max_schedule_lag_p99_ms``
(10 ms by default) or any send later than ``max_trace_lateness_ms`` (100 ms), or the achieved
send rate more than ``rate_tolerance`` off the trace's own.

Layouts accepted (``fmt="auto"`` picks by the file's suffix and its first line):

- Mooncake JSONL (``timestamp`` in ms, ``input_length``, ``output_length``, ``hash_ids``: the
  prompt's 512-token blocks; requests that share leading ids share that prefix);
- Azure LLM inference CSV (``TIMESTAMP`` as ``YYYY-MM-DD HH:MM:SS.fffffff``,
  ``ContextTokens``, ``GeneratedTokens``), the 2023 and 2024 releases;
- a plain CSV or JSONL with ``timestamp_s``, ``input_tokens``, ``output_tokens`` and optional
  ``session_id``, ``prefix_id``.

Prompts: a request with prefix ids starts with one deterministic block of words per id
(``PREFIX_BLOCK_TOKENS`` words, drawn from a generator seeded by the id, so two requests that
share ids share the same leading text and a server's prefix cache can hit), and is filled up
to its input length with words drawn per request (one word ≈ one token, as
:mod:`benchrun.loadgen.workload` explains).
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from benchrun.errors import BenchrunError
from benchrun.loadgen import client as http
from benchrun.loadgen.config import LoadPoint, SweepConfig
from benchrun.loadgen.content import TRACE_BUCKET
from benchrun.loadgen.records import _Spec
from benchrun.loadgen.workload import VOCABULARY, make_prompt, new_trace_context, worker_rng

FORMATS = ("auto", "mooncake", "azure", "csv", "jsonl")
PREFIX_BLOCK_TOKENS = 512  # Mooncake's block size of hash_ids
MAX_TRACE_REQUESTS = 5_000_000
# The most tokens one request of a trace may ask for (prompt or reply): the largest contexts served
# are 1-2 M tokens, and the prompt is built in the client's memory before the replay starts (3e9
# tokens ended in MemoryError, no line named)
MAX_TRACE_TOKENS = 2_000_000
# The longest replay (after --speedup), as --duration's bound: a timestamp of 1e300 read fine and
# ended the sweep after its warm-up ("OverflowError: cannot convert float infinity to integer")
MAX_REPLAY_S = 7 * 86400


# A spec's ``trace`` parameter names a trace file, never another file of the machine that runs the suite
# (:func:`spec_path_error`, :func:`checked_path`); the loadgen's own ``--trace`` reads what its user names.
SUFFIXES = (".csv", ".jsonl")
# pseudo-filesystems: /proc/self/environ holds the pod's S3 keys (envFrom a Secret)
_NOT_FILES = (Path("/proc"), Path("/sys"), Path("/dev"))


def spec_path_error(written: Any) -> str | None:
    """Why ``written`` may not be a spec's ``trace`` parameter, or None: a path (absolute: a volume
    where the suite runs; relative: from the suite's working directory) of a ``.csv`` or ``.jsonl``
    file, with no ``..``."""
    if not isinstance(written, str) or not written.strip():
        return f"parameter trace {written!r} must be the path of a trace file (.csv or .jsonl)"
    if ".." in written.replace("\\", "/").split("/"):
        return f"parameter trace {written!r}: '..' is not allowed; give the trace file's own path"
    if Path(written).suffix.lower() not in SUFFIXES:
        return (f"parameter trace {written!r} is not a trace file: a trace is CSV (.csv: Azure's or the plain "
                f"layout) or JSONL (.jsonl: Mooncake's or the plain layout); give such a file")
    return None


def checked_path(written: str) -> Path:
    """A spec's trace file as the suite will read it: :func:`spec_path_error`, and its real path (links
    followed) a ``.csv``/``.jsonl`` file outside /proc, /sys and /dev (TraceError naming both)."""
    problem = spec_path_error(written)
    if problem:
        raise TraceError(problem)
    real = Path(written).resolve()
    if real.suffix.lower() not in SUFFIXES or any(real.is_relative_to(d) for d in _NOT_FILES):
        raise TraceError(f"parameter trace {written!r} leads to {real}, which is not a trace file (.csv or .jsonl); "
                         "give the trace file itself")
    return Path(written)


def local_file_error(written: str) -> str | None:
    """Why a local run's suite would not find the trace ``written`` (a path :func:`spec_path_error`
    passed), or None. A local run's suites run on this machine with the run directory as their
    working directory: an absolute path is read as written, a relative one from the run directory,
    which a run starts without (no trace is copied there); what :func:`checked_path` refuses when the
    suite starts is refused too. A Kubernetes run reads its trace where its suite runs: not this."""
    path = Path(written)
    if not path.is_absolute():
        return (f"parameter trace {written!r} is relative: a local run's suite reads it from the run directory "
                f"(<home>/runs/<run id>/{written}, the suite's working directory), which holds no trace; give the "
                f"trace file's absolute path on this machine")
    try:
        checked_path(written)
    except TraceError as exc:
        return str(exc)
    if not path.is_file():
        return (f"parameter trace {written!r}: no file at {path} (a local run's suite reads its trace on this "
                f"machine, as written); give the path of an existing trace file")
    return None


def _shown_columns(cols: Iterable[str]) -> str:
    """A CSV header for an error: its names when they read as column names, else only how many (a file
    that is not a trace must not have its first line, perhaps a secret, copied into a result)."""
    names = list(cols)
    if len(names) <= 32 and all(len(c) <= 40 and all(ch.isalnum() or ch in " _-." for ch in c) for c in names):
        return str(names)
    return f"of {len(names)} field(s) that do not read as column names"


class TraceError(BenchrunError):
    """A trace file that cannot be replayed; the message names the file, line and field."""


@dataclass(frozen=True)
class TraceEntry:
    """One request of a trace: seconds from the trace's first request, lengths, optional ids."""

    t_s: float
    input_tokens: int
    output_tokens: int
    session_id: str | None = None
    prefix_ids: tuple[int, ...] = ()


class _TraceSpec(_Spec):
    __slots__ = ("trace_index", "t_s", "session_id", "prefix_ids")


def _num(v: Any, where: str, field: str, *, integer: bool = False) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {field} {v!r} is not a number") from None
    if not math.isfinite(f):
        raise TraceError(f"{where}: {field} {v!r} is not finite")
    if integer and f != int(f):
        raise TraceError(f"{where}: {field} {v!r} is not a whole number of tokens")
    return f


def _lengths(where: str, fin: str, fout: str, vin: Any, vout: Any) -> tuple[int, int]:
    i = int(_num(vin, where, fin, integer=True))
    o = int(_num(vout, where, fout, integer=True))
    if i < 1:
        raise TraceError(f"{where}: {fin} {i} must be >= 1 (a request needs a prompt)")
    if o < 1:
        raise TraceError(f"{where}: {fout} {o} must be >= 1 (drop the row, or set it to the tokens you want generated)")
    for field, v in ((fin, i), (fout, o)):
        if v > MAX_TRACE_TOKENS:
            raise TraceError(f"{where}: {field} {v} is above {MAX_TRACE_TOKENS:,} tokens, more than any model's context "
                             "(and its prompt is built in memory before the replay); fix the row or drop it")
    return i, o


def _not_text(path: Path) -> TraceError:
    """The TraceError for a file that is not UTF-8: the first line that does not decode, and where."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return TraceError(f"{path}:{n}: not UTF-8 text (byte {raw[exc.start]:#04x} at column {exc.start + 1}); "
                                  "a trace is UTF-8 CSV or JSONL: convert it (e.g. iconv -f latin1 -t utf-8) or fix the line")
    return TraceError(f"{path}: not UTF-8 text; a trace is UTF-8 CSV or JSONL: convert it (e.g. iconv -t utf-8)")


def _azure_time(text: str, where: str) -> float:
    """Epoch seconds of an Azure ``TIMESTAMP`` (100 ns ticks: more fraction digits than Python parses)."""
    s = text.strip().replace("T", " ")
    tz = _dt.timezone.utc
    if s.endswith("Z"):
        s = s[:-1]
    if "+" in s[10:]:
        s, _, _off = s.rpartition("+")  # the published files are UTC; an offset is ignored
    head, _, frac = s.partition(".")
    try:
        base = _dt.datetime.strptime(head, "%Y-%m-%d %H:%M:%S").replace(tzinfo=tz)
    except ValueError:
        raise TraceError(f"{where}: TIMESTAMP {text!r} is not 'YYYY-MM-DD HH:MM:SS[.fraction]'") from None
    if frac and not frac.isdigit():
        raise TraceError(f"{where}: TIMESTAMP {text!r} has a fraction that is not digits")
    return base.timestamp() + (int(frac) / 10 ** len(frac) if frac else 0.0)


def _from_json_line(obj: Any, where: str) -> tuple[float, TraceEntry]:
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: a trace line must be a JSON object")
    if "timestamp" in obj and "input_length" in obj:  # Mooncake: ms
        t = _num(obj["timestamp"], where, "timestamp") / 1000.0
        i, o = _lengths(where, "input_length", "output_length", obj.get("input_length"), obj.get("output_length"))
        ids = obj.get("hash_ids") or []
        if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in ids):
            raise TraceError(f"{where}: hash_ids must be a list of integers")
        sid = obj.get("session_id")
        return t, TraceEntry(0.0, i, o, None if sid is None else str(sid), tuple(ids))
    if "timestamp_s" in obj:
        t = _num(obj["timestamp_s"], where, "timestamp_s")
        i, o = _lengths(where, "input_tokens", "output_tokens", obj.get("input_tokens"), obj.get("output_tokens"))
        sid, pid = obj.get("session_id"), obj.get("prefix_id")
        return t, TraceEntry(0.0, i, o, None if sid is None else str(sid), () if pid is None else (int(_num(pid, where, "prefix_id", integer=True)),))
    raise TraceError(f"{where}: neither a Mooncake line (timestamp, input_length, output_length[, hash_ids]) "
                     f"nor a plain one (timestamp_s, input_tokens, output_tokens); keys found: {sorted(obj)[:8]}")


def _read_jsonl(path: Path) -> Iterable[tuple[float, TraceEntry]]:
    with open(path, encoding="utf-8-sig") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{where}: not JSON ({exc.msg})") from None
            yield _from_json_line(obj, where)


def _read_csv(path: Path) -> Iterable[tuple[float, TraceEntry]]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        reader = csv.DictReader(fh)
        cols = {c.strip(): c for c in reader.fieldnames or []}
        azure = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= set(cols)
        plain = {"timestamp_s", "input_tokens", "output_tokens"} <= set(cols)
        if not (azure or plain):
            raise TraceError(f"{path}: CSV header {_shown_columns(cols)} is neither Azure's (TIMESTAMP, ContextTokens, GeneratedTokens) "
                             f"nor the plain one (timestamp_s, input_tokens, output_tokens[, session_id, prefix_id])")
        for n, row in enumerate(reader, 2):
            where = f"{path}:{n}"
            if azure:
                t = _azure_time(row[cols["TIMESTAMP"]] or "", where)
                i, o = _lengths(where, "ContextTokens", "GeneratedTokens", row[cols["ContextTokens"]], row[cols["GeneratedTokens"]])
                yield t, TraceEntry(0.0, i, o)
            else:
                t = _num(row[cols["timestamp_s"]], where, "timestamp_s")
                i, o = _lengths(where, "input_tokens", "output_tokens", row[cols["input_tokens"]], row[cols["output_tokens"]])
                sid = (row.get(cols["session_id"]) or None) if "session_id" in cols else None
                pid = (row.get(cols["prefix_id"]) or None) if "prefix_id" in cols else None
                yield t, TraceEntry(0.0, i, o, sid, () if pid is None else (int(_num(pid, where, "prefix_id", integer=True)),))


def load_trace(path: str | Path, fmt: str = "auto") -> tuple[TraceEntry, ...]:
    """The trace's requests in time order, ``t_s`` from the first request (TraceError naming the file and line)."""
    p = Path(path)
    if fmt not in FORMATS:
        raise TraceError(f"trace format {fmt!r} is not one of {', '.join(FORMATS)} (--trace-format)")
    if not p.is_file():
        raise TraceError(f"trace file {p} does not exist (--trace)")
    raw: list[tuple[float, TraceEntry]] = []
    try:
        if fmt == "auto":
            with open(p, encoding="utf-8-sig") as fh:
                first = fh.readline().lstrip()
            fmt = "jsonl" if first.startswith("{") else "csv"
        reader = _read_jsonl(p) if fmt in ("jsonl", "mooncake") else _read_csv(p)
        for item in reader:
            raw.append(item)
            if len(raw) > MAX_TRACE_REQUESTS:
                raise TraceError(f"{p}: more than {MAX_TRACE_REQUESTS} requests; cut the trace (e.g. head -n)")
    except UnicodeDecodeError:
        raise _not_text(p) from None
    if not raw:
        raise TraceError(f"{p}: the trace has no requests")
    raw.sort(key=lambda x: x[0])  # stable: equal times keep file order
    t0 = raw[0][0]
    return tuple(TraceEntry(t - t0, e.input_tokens, e.output_tokens, e.session_id, e.prefix_ids) for t, e in raw)


def check_speedup(speedup: float) -> float:
    """``speedup`` when it is a positive, finite number; else TraceError naming it (checked before
    any of the trace's times is divided by it)."""
    if not (isinstance(speedup, (int, float)) and 0 < speedup < float("inf")):
        raise TraceError(f"speedup {speedup!r} must be a positive, finite number (2 = twice as fast) (--speedup)")
    return float(speedup)


def trace_point(entries: tuple[TraceEntry, ...], speedup: float = 1.0) -> LoadPoint:
    """The load point of a replay; its offered load is the trace's own mean rate (req/s) after ``speedup``."""
    check_speedup(speedup)
    span = (entries[-1].t_s - entries[0].t_s) / speedup if entries else 0.0
    if not span <= MAX_REPLAY_S:
        raise TraceError(f"the replay would last {span:.4g} s (its last request at {entries[-1].t_s:.4g} s of the trace, "
                         f"speedup {speedup:g}): more than {MAX_REPLAY_S // 86400} days; fix the timestamps if they are not in "
                         "seconds, or replay a part of it (--requests or --duration) or faster (--speedup)")
    rate = (len(entries) - 1) / span if span > 0 else float(max(1, len(entries)))
    return LoadPoint("trace", rate, speedup=speedup)


def select(entries: tuple[TraceEntry, ...], n: int | None, duration_s: float | None, speedup: float) -> tuple[TraceEntry, ...]:
    """The replayed part: the first ``n`` requests, or those within the first ``duration_s`` replayed seconds."""
    check_speedup(speedup)
    if n is not None:
        return entries[:n]
    if duration_s is not None:
        return tuple(e for e in entries if e.t_s / speedup < duration_s)
    return entries


_BLOCKS: dict[int, list[str]] = {}


def _block(prefix_id: int) -> list[str]:
    words = _BLOCKS.get(prefix_id)
    if words is None:
        rng = np.random.default_rng([0x7EACE, int(prefix_id) & 0xFFFFFFFFFFFF])
        words = [VOCABULARY[i] for i in rng.integers(0, len(VOCABULARY), size=PREFIX_BLOCK_TOKENS)]
        if len(_BLOCKS) < 100_000:
            _BLOCKS[prefix_id] = words
    return words


def trace_prompt(entry: TraceEntry, rng: np.random.Generator) -> str:
    """``entry.input_tokens`` words: the prefix blocks of its ids first, then per-request words."""
    words: list[str] = []
    for pid in entry.prefix_ids:
        if len(words) >= entry.input_tokens:
            break
        words.extend(_block(pid))
    words = words[: entry.input_tokens]
    rest = entry.input_tokens - len(words)
    if rest:
        words.append(make_prompt(rest, rng))
    return " ".join(words)


def worker_share(entries: tuple[TraceEntry, ...], worker: int, n_workers: int) -> list[tuple[int, TraceEntry]]:
    """(trace index, entry) of one worker: every ``n_workers``-th request, so their merged sends are the trace."""
    return [(i, e) for i, e in enumerate(entries) if i % n_workers == worker]


def trace_specs(cfg: SweepConfig, endpoint: http.Endpoint, point_index: int, worker: int, nonce: str,
                share: list[tuple[int, TraceEntry]], tag: str) -> list[_TraceSpec]:
    """The prepared requests (bytes built in advance, as for the mix) of one worker's share."""
    rng = worker_rng(cfg.seed, point_index, worker, 3 if tag else 0)
    out = []
    for i, e in share:
        s = _TraceSpec()
        s.request_id = f"{nonce}-p{point_index}-w{worker}-{tag}t{i}"
        s.trace_id, traceparent = new_trace_context()
        s.bucket = TRACE_BUCKET
        s.in_tokens, s.out_tokens = e.input_tokens, e.output_tokens
        s.trace_index, s.t_s, s.session_id, s.prefix_ids = i, e.t_s, e.session_id, e.prefix_ids
        s.body = http.build_body(endpoint, cfg.model, trace_prompt(e, rng), e.output_tokens,
                                 ignore_eos=cfg.ignore_eos, include_usage=cfg.include_usage)
        s.head = http.build_head(endpoint, "POST", endpoint.path, len(s.body), {"X-Request-Id": s.request_id, "traceparent": traceparent})
        out.append(s)
    return out


def trace_fields(spec: Any) -> dict[str, Any]:
    """The trace columns of a request row (empty for a request not from a trace)."""
    if not isinstance(spec, _TraceSpec):
        return {}
    return {"trace_index": spec.trace_index, "trace_offset_s": spec.t_s, "trace_session_id": spec.session_id,
            "trace_prefix_ids": ",".join(map(str, spec.prefix_ids)) or None}


def describe(entries: tuple[TraceEntry, ...], path: str, speedup: float) -> dict[str, Any]:
    """What the sweep's context records about the replayed trace (``sha256``: the bytes replayed)."""
    from benchrun.loadgen.dataset import file_sha256

    try:
        digest: str | None = file_sha256(path)
    except OSError:
        digest = None
    return {"file": str(path), "sha256": digest, "requests": len(entries), "span_s": entries[-1].t_s if entries else 0.0, "speedup": speedup,
            "sessions": len({e.session_id for e in entries if e.session_id is not None}),
            "with_prefix_ids": sum(1 for e in entries if e.prefix_ids)}
