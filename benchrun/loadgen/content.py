"""What requests carry beyond the length mix: a dataset's prompts, a tokenizer's exact lengths, shared prefixes and multi-turn sessions (:class:`ContentConfig`), and the request specs built from them.

- ``dataset``: each request's prompt is an entry drawn from a seeded permutation of the
  dataset (per point and worker, cycling); its output length is the entry's
  ``output_tokens``, else its first reply's token count, else the mix's draw. Rows carry
  ``dataset_index`` and the bucket ``dataset``.
- ``tokenizer``: every prompt is built to (and every dataset prompt counted in) the
  tokenizer's tokens; ``input_tokens_requested`` is that count.
- ``shared_prefix``: ``prefixes`` prefixes of ``prefix_tokens`` tokens, each with ``suffixes``
  suffixes of the mix's input length; a request is one (prefix, suffix) pair drawn with the
  seed. The prefixes and suffixes depend on the seed (and the prompt salt) only, so every
  worker and point shares them (as a server's prefix cache sees them). Rows carry ``prefix_id``.
- ``sessions``: :mod:`benchrun.loadgen.sessions` runs them (history, think time, per-turn rows).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from benchrun.errors import BenchrunError
from benchrun.loadgen import endpoint as ep_mod
from benchrun.loadgen.dataset import FORMATS, Dataset, DatasetError, file_sha256, load_dataset
from benchrun.loadgen.tokens import TokenCounter, TokenizerError, load_counter
from benchrun.loadgen.workload import (MixBucket, dealt_index, draw_bucket, mix_cdf, new_trace_context, salt_permutation,
                                       salted, worker_rng)

DATASET_BUCKET = "dataset"
TRACE_BUCKET = "trace"  # a replayed trace's requests: its own prompts and lengths, never the mix's


@dataclass(frozen=True)
class SessionShape:
    """Multi-turn sessions: ``turns`` requests a session, ``think_time_s`` between a reply and the next turn."""

    turns: int
    think_time_s: float = 0.0


@dataclass(frozen=True)
class SharedPrefix:
    """``prefixes`` x ``suffixes`` prompts whose first ``prefix_tokens`` tokens are shared per prefix."""

    prefixes: int
    suffixes: int
    prefix_tokens: int


@dataclass(frozen=True)
class ContentConfig:
    """The request content of a sweep (picklable: worker processes load the files themselves)."""

    dataset: str | None = None
    dataset_format: str = "auto"
    dataset_sha256: str | None = None
    tokenizer: str | None = None
    sessions: SessionShape | None = None
    shared_prefix: SharedPrefix | None = None

    def check(self) -> None:
        """Raise BenchrunError naming the bad field (the option or parameter) and the fix."""
        if self.dataset_format not in FORMATS:
            raise BenchrunError(f"dataset format {self.dataset_format!r} is not one of {', '.join(FORMATS)} (--dataset-format)")
        if self.sessions is not None:
            if self.sessions.turns < 1:
                raise BenchrunError("sessions: turns must be >= 1 (--session-turns)")
            if not 0 <= self.sessions.think_time_s < 3600:
                raise BenchrunError("sessions: think time must be 0..3600 s (--think-time)")
        sp = self.shared_prefix
        if sp is not None:
            if sp.prefixes < 1 or sp.suffixes < 1 or sp.prefix_tokens < 1:
                raise BenchrunError("shared prefix: prefixes, suffixes and prefix tokens must each be >= 1 (--shared-prefix N,M,P)")
            if self.dataset is not None:
                raise BenchrunError("shared prefix and dataset are exclusive: the prompts come from one of them")
        try:
            self.load()
        except (DatasetError, TokenizerError) as exc:
            raise BenchrunError(str(exc)) from None

    def load(self) -> tuple[Dataset | None, TokenCounter]:
        """The dataset (None without one) and the token counter; read once per process while the
        files' size and modification time stay the same (a changed file is read and checked again)."""
        return _load(self.dataset, self.dataset_format, self.dataset_sha256, _stamp(self.dataset),
                     self.tokenizer, _stamp(self.tokenizer))

    def info(self) -> dict[str, Any]:
        """What the result's context records of the content."""
        data, counter = self.load()
        out: dict[str, Any] = {"tokenizer": counter.name}
        if data is not None:
            out["dataset"] = data.info()
        if self.sessions is not None:
            out["sessions"] = {"turns": self.sessions.turns, "think_time_s": self.sessions.think_time_s}
        if self.shared_prefix is not None:
            sp = self.shared_prefix
            out["shared_prefix"] = {"prefixes": sp.prefixes, "suffixes": sp.suffixes, "prefix_tokens": sp.prefix_tokens}
        return out


def _stamp(path: str | None) -> tuple[int, int] | None:
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size) if st else None


@functools.lru_cache(maxsize=8)
def _load(dataset: str | None, fmt: str, sha256: str | None, dataset_stamp: Any, tokenizer: str | None,
          tokenizer_stamp: Any) -> tuple[Dataset | None, TokenCounter]:
    counter = load_counter(tokenizer)
    data = load_dataset(dataset, fmt, sha256) if dataset else None
    return data, counter


def locate_dataset(path: str, sha256: str | None) -> str:
    """``path`` when it is a file; else, for a pinned dataset (a suite in a pod, whose spec was
    resolved on the submitting host), the first file under the working directory or benchrun's
    own root whose path ends like ``path`` (``specs/datasets/x.jsonl`` in the image); else (the
    run's own copy, ``structured/<run_id>_dataset.<ext>``, is not in a pod without the run volume)
    the first file of the same suffix under those roots' ``specs/`` whose sha256 is the pinned one.
    The pinned sha256 is checked when the file is read, so a file found this way is the same bytes."""
    p = Path(path)
    if p.is_file() or not sha256 or not p.is_absolute():
        return path
    parts = p.parts[1:]
    roots = (Path.cwd(), Path(__file__).resolve().parents[2])
    for root in roots:
        for i in range(len(parts)):
            candidate = root.joinpath(*parts[i:])
            if candidate.is_file():
                return str(candidate)
    for candidate in _same_suffix(roots, p.suffix):
        if file_sha256(candidate) == sha256.lower():
            return str(candidate)
    return path


SKIP_DIRS = frozenset({"node_modules", "site-packages", "__pycache__", "venv", "proc", "sys", "dev"})


def _same_suffix(roots: tuple[Path, ...], suffix: str, *, max_entries: int = 20000,
                 max_files: int = 200) -> Iterator[Path]:
    """Files ending in ``suffix`` under ``roots`` (``specs/`` first, then the rest; hidden and
    package folders skipped), at most ``max_files`` of them after at most ``max_entries``
    directory entries: a bounded search of an image for a pinned dataset by its bytes."""
    seen = found = 0
    for top in dict.fromkeys(r.resolve() for r in roots if r.is_dir()):
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted((d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS),
                             key=lambda d: (d != "specs", d))
            for name in sorted(files):
                seen += 1
                if seen > max_entries or found >= max_files:
                    return
                if name.endswith(suffix) and not name.startswith(".") and os.path.isfile(os.path.join(folder, name)):
                    found += 1
                    yield Path(folder) / name


@dataclass(frozen=True)
class Turn:
    """One user turn of a prepared request: its text, its own token count and the reply length asked."""

    text: str
    tokens: int
    out_tokens: int
    bucket: str
    dataset_index: int | None = None
    prefix_id: int | None = None


class Source:
    """Seeded turns for one (point, worker): from the dataset, the shared prefixes or the mix.

    Dataset entries follow ONE seeded permutation per (seed, point), a fresh one each time it is
    used up, dealt by global request index across the point's ``n_workers`` workers (worker
    ``w`` takes indices ``w, w + n_workers, ...``, as trace replay deals its requests; with
    unequal ``shares`` a worker whose share is used up is skipped), so the
    requests of a point use the same entries whatever ``--workers`` is, and no entry repeats
    before the dataset is used up. Warm-up requests draw from a permutation of their own.

    ``salt`` renames the words of synthetic prompts (:func:`benchrun.loadgen.workload.salt_permutation`)
    without changing any draw; a dataset's prompts are sent as written."""

    def __init__(self, content: ContentConfig, mix: tuple[MixBucket, ...], seed: int, point_index: int, worker: int,
                 n_workers: int = 1, shares: list[int] | None = None, salt: str | None = None) -> None:
        self.data, self.counter = content.load()
        self._salt = salt_permutation(salt)
        self.mix = mix
        self.cdf = mix_cdf(mix)
        self.rng = worker_rng(seed, point_index, worker, 0)
        self._seed, self._point = int(seed), int(point_index)
        self._worker, self._n_workers = int(worker), max(1, int(n_workers))
        self._shares = list(shares) if shares is not None else None  # every worker's measured requests
        self._drawn = [0, 0]  # entries drawn by this worker: measured, warm-up
        self._perms: dict[tuple[int, int], list[int]] = {}
        self.shared = content.shared_prefix
        if self.shared is not None:
            # the same prefixes for every worker and point: they depend on the seed only
            prng = np.random.default_rng([int(seed), 0x5EED])
            counter = self.counter
            words = salted(prng, self._salt)
            self.prefixes = [counter.build(self.shared.prefix_tokens, words) for _ in range(self.shared.prefixes)]
            self._suffixes: dict[tuple[int, int, str], str] = {}

    def _entry(self, warmup: bool = False, index: int | None = None) -> tuple[Any, int]:
        """The next entry of this worker's share and its global request index in the point."""
        assert self.data is not None
        stream = int(warmup)
        k = self._drawn[stream]
        if index is not None:
            g = index  # a session planned for the whole point (loadgen.sessions)
        elif not warmup and self._shares is not None and k < self._shares[self._worker]:
            g = dealt_index(self._shares, self._worker, k)  # unequal shares dealt in turn, skipping used-up ones
        else:
            g = self._worker + k * self._n_workers  # the global request index
        self._drawn[stream] += 1
        cycle, pos = divmod(g, len(self.data.entries))
        key = (stream, cycle)
        if key not in self._perms:
            self._perms = {k: v for k, v in self._perms.items() if k[0] != stream}  # one cycle per stream kept
            prng = np.random.default_rng([self._seed, self._point, 0xDA7A, stream, cycle])
            self._perms[key] = [int(i) for i in prng.permutation(len(self.data.entries))]
        return self.data.entries[self._perms[key][pos]], g

    def conversation(self, turns: int, warmup: bool = False, index: int | None = None) -> list[Turn]:
        """``turns`` user turns of one session (a dataset entry's human turns, cycled when short);
        ``index``: the session's index in its point, which picks its entry (and seeds its draws),
        so it is the same session whichever worker sends it."""
        if index is not None:
            saved = self.rng
            self.rng = np.random.default_rng([self._seed, self._point, 0x5E55, int(index)])
            try:
                return self._conversation(turns, warmup, index)
            finally:
                self.rng = saved
        return self._conversation(turns, warmup, None)

    def _conversation(self, turns: int, warmup: bool, index: int | None) -> list[Turn]:
        if self.data is None:
            return [self.single() for _ in range(turns)]
        e, _ = self._entry(warmup, index)
        out = []
        for k in range(turns):
            text = e.prompts[k % len(e.prompts)]
            reply = e.replies[k] if k < len(e.replies) else None
            out.append(Turn(text, self.counter.count(text), self._out_len(e.output_tokens if k == 0 else None, reply),
                            DATASET_BUCKET, e.index))
        return out

    def _out_len(self, given: int | None, reply: str | None, rng: np.random.Generator | None = None) -> int:
        if given is not None:
            return given
        if reply:
            return max(1, self.counter.count(reply))
        return self.mix[draw_bucket(self.cdf, rng if rng is not None else self.rng)].output_tokens

    def single(self, warmup: bool = False) -> Turn:
        """One request's prompt (``warmup``: a warm-up request's, from the warm-up permutation)."""
        if self.data is not None:
            e, g = self._entry(warmup)
            text = e.prompts[0]
            reply = e.replies[0] if e.replies else None
            # an entry without a length draws it from the mix, seeded by its global request index
            # (as a session is): this worker's own generator made it change with --workers
            rng = None if e.output_tokens is not None or reply else np.random.default_rng(
                [self._seed, self._point, 0x0E7, int(warmup), g])
            return Turn(text, self.counter.count(text), self._out_len(e.output_tokens, reply, rng), DATASET_BUCKET, e.index)
        b = self.mix[draw_bucket(self.cdf, self.rng)]
        if self.shared is not None:
            sp = self.shared
            i = int(self.rng.integers(sp.prefixes))
            j = int(self.rng.integers(sp.suffixes))
            key = (i, j, b.label)
            if key not in self._suffixes:
                srng = np.random.default_rng([self._seed, 0x5EED, i, j, b.input_tokens])
                self._suffixes[key] = self.counter.build(b.input_tokens, salted(srng, self._salt), after=self.prefixes[i])
            text = self.prefixes[i] + " " + self._suffixes[key]
            return Turn(text, self.counter.count(text), b.output_tokens, b.label, prefix_id=i)
        text = self.counter.build(b.input_tokens, salted(self.rng, self._salt))
        return Turn(text, self.counter.count(text), b.output_tokens, b.label)


def turn_spec(spec: Any, cfg: Any, endpoint: ep_mod.Endpoint, request_id: str, turn: Turn,
              history: list[tuple[str, str]] | None = None, in_tokens: int | None = None) -> Any:
    """Fill ``spec`` (a records._Spec) with the request bytes of ``turn`` after ``history``
    (prior (user, assistant) pairs: chat messages, or one text for completions); ``in_tokens``
    is the whole request's count (default: the turn's own)."""
    history = history or []
    spec.request_id = request_id
    spec.trace_id, traceparent = new_trace_context()
    spec.bucket = turn.bucket
    spec.out_tokens = turn.out_tokens
    spec.in_tokens = turn.tokens if in_tokens is None else in_tokens
    spec.dataset_index = turn.dataset_index
    spec.prefix_id = turn.prefix_id
    extra: dict[str, Any] | None = None
    prompt = turn.text
    if history:
        if endpoint.api == "chat":
            msgs: list[dict[str, str]] = []
            for user, reply in history:
                msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
            msgs.append({"role": "user", "content": turn.text})
            extra = {"messages": msgs}
        else:
            prompt = "\n".join([x for pair in history for x in pair] + [turn.text])
    spec.body = ep_mod.build_body(endpoint, cfg.model, prompt, turn.out_tokens, ignore_eos=cfg.ignore_eos,
                                  include_usage=cfg.include_usage, extra=extra)
    spec.head = ep_mod.build_head(endpoint, "POST", endpoint.path, len(spec.body),
                                  {"X-Request-Id": request_id, "traceparent": traceparent})
    return spec


def history_tokens(counter: TokenCounter, api: str, history: list[tuple[str, str]], turn: Turn) -> int:
    """The tokens of a whole request's text: every message's content (chat) or the joined prompt."""
    if api == "chat":
        return sum(counter.count(u) + counter.count(a) for u, a in history) + turn.tokens
    return counter.count("\n".join([x for pair in history for x in pair] + [turn.text]))


def content_specs(cfg: Any, endpoint: ep_mod.Endpoint, point_index: int, worker: int, nonce: str, n_warm: int,
                  n: int | None, new_spec: Any, n_workers: int = 1, shares: list[int] | None = None) -> Iterator[Any]:
    """Warm-up then measured specs of a content sweep (single requests; sessions yield plans,
    see :func:`benchrun.loadgen.sessions.session_plans`); ``n_workers``: the point's active
    workers, over which dataset entries are dealt (:class:`Source`)."""
    src = Source(cfg.content, cfg.mix, cfg.seed, point_index, worker, n_workers, shares, getattr(cfg, "prompt_salt", None))
    seq = 0

    def one(tag: str) -> Any:
        nonlocal seq
        s = turn_spec(new_spec(), cfg, endpoint, f"{nonce}-p{point_index}-w{worker}-{tag}{seq}", src.single(tag == "wu"))
        s.session_id = None
        s.turn = None
        seq += 1
        return s

    for _ in range(n_warm):
        yield one("wu")
    i = 0
    while n is None or i < n:
        yield one("")
        i += 1


def bucket_labels(cfg: Any, load_model: str | None = None) -> list[str]:
    """The per-bucket summaries a point gets: the mix's pairs, or ``dataset``, or ``trace`` for a
    replay (it sent none of the mix: it had a 0-request ``invalid`` row per pair, review 2026-12-07)."""
    if load_model == "trace":
        return [TRACE_BUCKET]
    if getattr(cfg, "content", None) is not None and cfg.content.dataset is not None:
        return [DATASET_BUCKET]
    return [b.label for b in cfg.mix]


def _p50(xs: list[float]) -> float | None:
    return float(np.percentile(xs, 50)) if xs else None


def content_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per point: TTFT by session turn, the server's prefix-cache hit rate (when it reports
    cached tokens) and the requests whose server ``usage`` disagrees with what was sent."""
    ok = [r for r in rows if r.get("error") is None]
    out: dict[str, Any] = {
        "input_token_mismatches": sum(1 for r in ok if r.get("input_token_discrepancy") not in (None, 0)),
        "output_token_mismatches": sum(1 for r in ok if r.get("usage_output_tokens") is not None
                                       and r["usage_output_tokens"] != r.get("output_tokens_requested")),
        "usage_compared": sum(1 for r in ok if r.get("usage_input_tokens") is not None),
    }
    turns = sorted({r["turn"] for r in ok if r.get("turn") is not None})
    if turns:
        out["ttft_ms_p50_by_turn"] = {str(t): _p50([r["ttft_ms"] for r in ok if r.get("turn") == t and r["ttft_ms"] is not None]) for t in turns}
        out["sessions"] = len({r["session_id"] for r in rows if r.get("session_id") is not None})
    cached = [r for r in ok if r.get("usage_cached_tokens") is not None and r.get("usage_input_tokens")]
    if cached:
        out["prefix_cache_hit_rate"] = sum(r["usage_cached_tokens"] for r in cached) / sum(r["usage_input_tokens"] for r in cached)
    else:
        out["prefix_cache_hit_rate"] = None
    return out


def content_from_options(dataset: Any, dataset_format: str, tokenizer: Any, session_turns: int | None,
                         think_time: float, shared_prefix: str | None) -> Any:
    """The request content the loadgen options ask for (None: synthetic prompts from the mix)."""
    if dataset is None and tokenizer is None and session_turns is None and shared_prefix is None:
        if think_time:
            raise BenchrunError("--think-time needs --session-turns")
        return None
    sp = None
    if shared_prefix is not None:
        parts = shared_prefix.split(",")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise BenchrunError(f"--shared-prefix {shared_prefix!r} is not N,M,P (prefixes, suffixes each, prefix tokens), e.g. 4,8,256")
        sp = SharedPrefix(*(int(p) for p in parts))
    if think_time and session_turns is None:
        raise BenchrunError("--think-time needs --session-turns")
    return ContentConfig(
        dataset=str(dataset) if dataset is not None else None,
        dataset_format=dataset_format,
        tokenizer=str(tokenizer) if tokenizer is not None else None,
        sessions=SessionShape(session_turns, think_time) if session_turns is not None else None,
        shared_prefix=sp,
    )
