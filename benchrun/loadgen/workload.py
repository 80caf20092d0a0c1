"""The sequence-length mix, seeded request drawing, synthetic prompts and trace identifiers.

Prompt length approximation: the load generator has no tokenizer (none is in the allowed
import set, and the right one depends on the served model). A prompt of ``n`` input tokens
is ``n`` words drawn from a vocabulary of short, common English words, each of which is a
single token in the BPE vocabularies of the common open models (GPT-2/cl100k/o200k, Llama,
Qwen). Real tokenizers still differ (a leading space, merges across words, a chat
template's own tokens), so every request row records the server's own ``usage`` counts
next to the requested lengths, and the summary reports the discrepancy.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

# Short words that are one token each in the common BPE vocabularies.
VOCABULARY: tuple[str, ...] = tuple(
    """the of and to in is it that was for on are as with his they at be this from have or by
    one had not but what all were when we there can an your which their said if do will each
    about how up out them then she many some so these would other into has more her two like
    him see time could no make than first been its who now people my made over did down only
    way find use may water long little very after words called just where most know get through
    back much before go good new write our used me man too any day same right look think also
    around another came come work three word must because does part even place well such here
    take why things help put years different away again off went old number great tell men say
    small every found still between name should home big give air line set own under read last
    never us left end along while might next sound below saw something thought both few those
    always looked show large often together asked house world going want school important until
    form food keep children feet land side without boy once animals life enough took sometimes
    four head above kind began almost live page got earth need far hand high year mother light
    parts country father let night following picture being study second eyes soon times story
    boys since white days ever paper hard near sentence better best across during today others
    however sure means knew try told young miles sun ways thing whole hear example heard several
    change answer room sea against top turned learn point city play toward five using himself
    usually""".split()
)

_MIX_ITEM = re.compile(r"^\{?\s*(\d+)\s*/\s*(\d+)\s*(?:@\s*([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?))?\s*\}?\Z")


class MixError(ValueError):
    """A sequence-length mix that cannot be used; the message names the item and the fix."""


@dataclass(frozen=True)
class MixBucket:
    """One (input, output) pair of the workload mix with its weight."""

    input_tokens: int
    output_tokens: int
    weight: float

    @property
    def label(self) -> str:
        """``"<in>/<out>"``, the ``bucket`` value of rows and summaries."""
        return f"{self.input_tokens}/{self.output_tokens}"


def _check(buckets: list[MixBucket], where: str) -> list[MixBucket]:
    if not buckets:
        raise MixError(f"{where}: the mix is empty; give at least one input/output pair")
    for b in buckets:
        if b.input_tokens <= 0 or b.output_tokens <= 0:
            raise MixError(f"{where}: {b.label} has a non-positive token count; use positive integers")
        if not b.weight > 0:
            raise MixError(f"{where}: {b.label} has weight {b.weight}; weights must be positive")
    total = sum(b.weight for b in buckets)
    if abs(total - 1.0) > 1e-6:
        raise MixError(f"{where}: weights sum to {total:g}, not 1; adjust them so they sum to 1")
    labels = [b.label for b in buckets]
    if len(set(labels)) != len(labels):
        raise MixError(f"{where}: the pair(s) {sorted({x for x in labels if labels.count(x) > 1})} repeat; merge them")
    return buckets


def parse_mix(text: str) -> list[MixBucket]:
    """Parse the compact form ``512/128@0.7,1024/256@0.3`` (also ``[{512/128@0.7},...]``).

    A single pair without a weight (``512/128``) has weight 1.
    """
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    items = [p.strip() for p in re.split(r",(?![^{]*\})", body) if p.strip()]
    buckets: list[MixBucket] = []
    for item in items:
        m = _MIX_ITEM.match(item)
        if not m:
            raise MixError(f"mix item {item!r} is not IN/OUT@WEIGHT (e.g. 512/128@0.7)")
        weight = float(m.group(3)) if m.group(3) is not None else (1.0 if len(items) == 1 else float("nan"))
        if weight != weight:
            raise MixError(f"mix item {item!r} needs a weight (@W) when the mix has several pairs")
        buckets.append(MixBucket(int(m.group(1)), int(m.group(2)), weight))
    return _check(buckets, f"mix {text!r}")


def mix_from_workload(items: Any) -> list[MixBucket]:
    """The mix from ``spec.workload.sequenceLengthMix`` (a list of inputTokens/outputTokens/weight)."""
    if isinstance(items, str):
        return parse_mix(items)
    if not isinstance(items, list):
        raise MixError("workload.sequenceLengthMix must be a list of {inputTokens, outputTokens, weight}")
    buckets = []
    for i, it in enumerate(items):
        where = f"workload.sequenceLengthMix[{i}]"
        if not isinstance(it, dict):
            raise MixError(f"{where} must be a mapping with inputTokens, outputTokens, weight")
        try:
            buckets.append(MixBucket(int(it["inputTokens"]), int(it["outputTokens"]), float(it.get("weight", 1.0))))
        except (KeyError, TypeError, ValueError) as exc:
            raise MixError(f"{where}: needs integer inputTokens and outputTokens and a numeric weight ({exc})") from None
    return _check(buckets, "workload.sequenceLengthMix")


def format_mix(buckets: Iterable[MixBucket]) -> str:
    """The compact form of a mix, e.g. ``512/128@0.7,1024/256@0.3``."""
    return ",".join(f"{b.label}@{b.weight:g}" for b in buckets)


def mix_cdf(buckets: Iterable[MixBucket]) -> np.ndarray:
    """The cumulative weights of a mix, normalised to end at 1 (for :func:`draw_bucket`)."""
    cdf = np.cumsum([b.weight for b in buckets], dtype=float)
    return cdf / cdf[-1]


def draw_bucket(cdf: np.ndarray, rng: np.random.Generator) -> int:
    """One bucket index for one request: a single uniform draw through the inverse CDF, so
    drawing lazily (a timed point) and in bulk (a counted one) give the same sequence."""
    return min(int(np.searchsorted(cdf, rng.random(), side="right")), len(cdf) - 1)


def draw_buckets(buckets: list[MixBucket], n: int, rng: np.random.Generator) -> list[int]:
    """``n`` bucket indices drawn i.i.d. with the mix weights (joint (input, output) pairs),
    exactly as the runner draws them one request at a time."""
    cdf = mix_cdf(buckets)
    return [draw_bucket(cdf, rng) for _ in range(max(0, n))]


def make_prompt(n_words: int, rng: np.random.Generator) -> str:
    """A prompt of ``n_words`` vocabulary words (≈ ``n_words`` tokens, see module docstring)."""
    idx = rng.integers(0, len(VOCABULARY), size=n_words)
    return " ".join(VOCABULARY[i] for i in idx)


def salt_permutation(salt: str | None) -> np.ndarray | None:
    """The renaming of :data:`VOCABULARY` that a prompt salt gives (None without a salt).

    The same salt always gives the same renaming; two salts give unrelated ones, so a prompt
    sent under one shares no block of words with any prompt sent under the other."""
    if not salt:
        return None
    key = int.from_bytes(hashlib.sha256(salt.encode("utf-8")).digest()[:16], "big")
    return np.random.default_rng([key, 0x5A17]).permutation(len(VOCABULARY))


class SaltedWords:
    """``rng`` whose vocabulary draws (``integers(0, len(VOCABULARY), ...)``, what
    :func:`make_prompt` and the tokenizers' prompt builders draw words with) come back renamed by
    a salt's permutation; every other call is ``rng``'s own.

    The random stream is consumed exactly as without the salt, so the bucket, length and session
    draws that share it stay the seed's alone, while the words sent change with the salt. A
    renaming is a bijection: prompts equal under the seed (a shared prefix, a session's history)
    stay equal, prompts that differ stay different, and each word is still one vocabulary word."""

    __slots__ = ("rng", "perm")

    def __init__(self, rng: np.random.Generator, perm: np.ndarray) -> None:
        self.rng = rng
        self.perm = perm

    def integers(self, low: Any, high: Any = None, size: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``rng.integers``, its vocabulary indices renamed."""
        x = self.rng.integers(low, high, size, *args, **kwargs)
        return self.perm[x] if (low, high) == (0, len(VOCABULARY)) else x

    def within(self, members: Sequence[int]) -> np.ndarray:
        """The salt's renaming of the vocabulary words ``members`` (their indices) among themselves:
        position i -> the member to send in its place, a permutation of ``range(len(members))``.
        For draws over a subset (a tokenizer's one-token fillers) that :meth:`integers` cannot see;
        the same salt always gives the same renaming, and without a salt it is the identity."""
        return np.argsort(self.perm[np.asarray(members, dtype=int)], kind="stable")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rng, name)


def renamed_within(rng: Any, members: Sequence[int]) -> np.ndarray:
    """:meth:`SaltedWords.within` of a salted ``rng``, the identity for a plain one."""
    return rng.within(members) if isinstance(rng, SaltedWords) else np.arange(len(members))


def salted(rng: np.random.Generator, perm: np.ndarray | None) -> Any:
    """``rng`` for drawing a prompt's words under a salt's permutation (``rng`` itself without one)."""
    return rng if perm is None else SaltedWords(rng, perm)


def worker_rng(seed: int, point_index: int, worker: int, stream: int) -> np.random.Generator:
    """The generator for one (point, worker, stream); identical inputs give identical draws.

    ``stream`` 0 draws buckets and prompts, 1 the measured arrival times and 2 the
    warm-up's, so changing the load model never changes which requests are sent.
    """
    return np.random.default_rng([int(seed), int(point_index), int(worker), int(stream)])


def new_trace_context() -> tuple[str, str]:
    """A fresh W3C trace id (32 hex) and the ``traceparent`` header carrying it (sampled)."""
    trace_id = os.urandom(16).hex()
    span_id = os.urandom(8).hex()
    return trace_id, f"00-{trace_id}-{span_id}-01"


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers that differ by at most one (larger first)."""
    base, extra = divmod(int(total), int(parts))
    return [base + (1 if i < extra else 0) for i in range(parts)]


def split_by(total: int, weights: list[int]) -> list[int]:
    """``total`` split into integers in proportion to ``weights`` (largest remainders get the
    leftover, the first on a tie), summing to ``total``; equal weights give :func:`split_evenly`."""
    total, ws = int(total), [int(w) for w in weights]
    whole = sum(ws)
    base = [total * w // whole for w in ws]
    left = total - sum(base)
    order = sorted(range(len(ws)), key=lambda i: (-(total * ws[i] % whole), i))
    for i in order[:left]:
        base[i] += 1
    return base


def dealt_index(shares: list[int], worker: int, k: int) -> int:
    """The global index of ``worker``'s ``k``-th item when items 0, 1, 2, ... are dealt round
    robin to the workers, each until its share is used up (``worker + k * len(shares)`` while
    every share lasts), so the workers' items together are ``0 .. sum(shares) - 1``."""
    n = len(shares)
    if k < min(shares):
        return worker + k * n
    return sum(min(s, k) for s in shares) + sum(1 for s in shares[:worker] if s > k)
