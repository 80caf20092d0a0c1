"""Token counting for request content: the word approximation, or a Hugging Face tokenizer from a local path, and prompts built to exact token lengths.

Without a tokenizer a prompt of ``n`` tokens is ``n`` vocabulary words
(:mod:`benchrun.loadgen.workload`); with one (``--tokenizer PATH``: a ``tokenizer.json`` or a
folder holding one) every count is the tokenizer's own, without special tokens (the server's
fixed additions, a BOS or a chat template, are the probe's ``prompt_token_overhead``), and a
synthetic prompt is grown word by word until the tokenizer says it has exactly ``n`` tokens.
``tokenizers`` is imported only when a tokenizer is asked for; nothing is fetched from a hub.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from benchrun.loadgen.workload import VOCABULARY, make_prompt, renamed_within


def whole_text(text: str) -> str:
    """``text`` as UTF-8 and a tokenizer take it: UTF-16 surrogate halves that arrived apart (an emoji a
    server streamed as ``\\ud83d`` in one chunk and ``\\ude00`` in the next, joined as two code points)
    made one character again, and a lone half U+FFFD. JSON admits lone ``\\uD8xx`` escapes; the
    tokenizers library refuses such a string, and one reply (or dataset prompt) ended the whole sweep."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class TokenizerError(ValueError):
    """A tokenizer that cannot be loaded or used; the message names the path and the fix."""


class TokenCounter(Protocol):
    """What request content needs of a tokenizer."""

    name: str

    def count(self, text: str) -> int: ...

    def build(self, n: int, rng: np.random.Generator, after: str = "") -> str: ...


class WordCounter:
    """One token per whitespace-separated word (the approximation without a tokenizer)."""

    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())

    def build(self, n: int, rng: np.random.Generator, after: str = "") -> str:
        return make_prompt(n, rng)


class HFTokenizer:
    """A Hugging Face ``tokenizers`` tokenizer read from a local file."""

    def __init__(self, path: str | Path) -> None:
        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise TokenizerError(f"tokenizer {path}: no tokenizer.json there; give a tokenizer.json file or a "
                                 "model folder that holds one (nothing is downloaded)")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise TokenizerError("a tokenizer needs the `tokenizers` package: pip install tokenizers==0.23.3") from None
        try:
            self._tok: Any = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library's own error type is not public
            raise TokenizerError(f"tokenizer {file}: cannot be read ({exc}); give a valid tokenizer.json") from None
        self.path = str(file)
        self.name = f"tokenizers:{file}"
        # words that are one token on their own after a space, tried first to fill the last tokens
        self._fillers = [w for w in VOCABULARY if len(self._ids(" " + w)) == 1 and len(self._ids("a " + w)) == len(self._ids("a")) + 1]
        if not self._fillers:
            self._fillers = list(VOCABULARY)
        self._filler_ids = [VOCABULARY.index(w) for w in self._fillers]

    def _ids(self, text: str) -> list[int]:
        return self._tok.encode(whole_text(text), add_special_tokens=False).ids

    def count(self, text: str) -> int:
        return len(self._ids(text)) if text else 0

    def build(self, n: int, rng: np.random.Generator, after: str = "") -> str:
        """Text ``t`` with ``count(after + sep + t) == count(after) + n`` (sep a space when
        ``after`` is given); TokenizerError when the tokenizer cannot be hit exactly."""
        if n <= 0:
            return ""
        sep = " " if after else ""
        base = self.count(after)

        def extra(words: list[str]) -> int:
            return self.count(after + sep + " ".join(words)) - base if words else 0

        words = [VOCABULARY[i] for i in rng.integers(0, len(VOCABULARY), size=n)]
        while extra(words) < n:  # words of several tokens: fewer words than tokens are needed
            if len(words) >= 64 * n:  # a tokenizer whose count does not grow with the text (it hung here)
                raise TokenizerError(f"tokenizer {self.path}: {len(words)} words count {extra(words)} tokens, "
                                     f"fewer than the {n} asked; use a tokenizer that splits text into words")
            words.extend(VOCABULARY[i] for i in rng.integers(0, len(VOCABULARY), size=n))
        lo, hi = 0, len(words)  # the most words whose text has at most n tokens
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if extra(words[:mid]) <= n:
                lo = mid
            else:
                hi = mid - 1
        chosen = words[:lo]
        have = extra(chosen)
        # the fillers' order is drawn as before (the stream's use unchanged), then renamed among the
        # fillers by a salted rng's salt, so the last words change with the salt too (and stay fillers)
        rename = renamed_within(rng, self._filler_ids)
        order = [self._fillers[rename[i]] for i in rng.permutation(len(self._fillers))]
        while have < n:
            for w in order:
                c = extra(chosen + [w])
                if have < c <= n:
                    chosen.append(w)
                    have = c
                    break
            else:
                raise TokenizerError(f"tokenizer {self.path}: cannot build a prompt of exactly {n} tokens "
                                     f"(stuck at {have}); use a tokenizer whose vocabulary holds common English words")
        return " ".join(chosen)


def load_counter(path: str | None) -> TokenCounter:
    """The tokenizer at ``path``, or the word approximation when no path is given."""
    return HFTokenizer(path) if path else WordCounter()
