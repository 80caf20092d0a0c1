"""Prompt datasets for the load generator: ShareGPT-style conversations (JSON or JSONL), a generic JSONL and a parquet table, read into entries and sampled with a seed.

Layouts (``format``; ``auto`` decides by the file's suffix and its first record):

- ``sharegpt``: a JSON list (or JSONL) of ``{"conversations": [{"from": "human", "value": ...},
  {"from": "gpt", "value": ...}, ...]}``; ``messages: [{"role": "user", "content": ...}]`` is
  read the same. The human/user turns are an entry's prompts (a multi-turn session uses them
  in order); the first reply's length (counted by the request's tokenizer) is its output length.
- ``jsonl``: one ``{"prompt": str, "output_tokens": int?}`` object a line.
- ``parquet``: a table with a string column ``prompt`` and optionally an integer
  ``output_tokens`` (pyarrow is imported only for it).

An entry without a human turn is skipped (and counted); a file with no usable entry, a line
that is not JSON or a field of the wrong type is a :class:`DatasetError` naming the file, the
line or record, and the fix. The file's sha256 is computed on reading, so a pinned digest can
be checked (``expect_sha256``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchrun.loadgen.tokens import whole_text

FORMATS = ("auto", "sharegpt", "jsonl", "parquet")
_HUMAN = frozenset({"human", "user"})
_ASSISTANT = frozenset({"gpt", "assistant", "bot", "chatgpt", "model"})


class DatasetError(ValueError):
    """A dataset that cannot be used; the message names the file (and line) and the fix."""


@dataclass(frozen=True)
class Entry:
    """One dataset record: its user prompts in order, the dataset's replies, an output length."""

    index: int
    prompts: tuple[str, ...]
    replies: tuple[str, ...]
    output_tokens: int | None


@dataclass(frozen=True)
class Dataset:
    """The usable entries of one file, with what was read."""

    path: str
    format: str
    sha256: str
    entries: tuple[Entry, ...]
    skipped: int

    def info(self) -> dict[str, Any]:
        """What a result's context records of the dataset."""
        return {"path": self.path, "format": self.format, "sha256": self.sha256, "entries": len(self.entries),
                "skipped": self.skipped}


def file_sha256(path: str | Path) -> str:
    """The sha256 hex of the file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _conversation(rec: dict[str, Any], where: str) -> tuple[list[str], list[str]] | None:
    turns = rec.get("conversations", rec.get("messages"))
    if turns is None:
        return None
    if not isinstance(turns, list):
        raise DatasetError(f"{where}: 'conversations' must be a list of {{from, value}} turns")
    # (prompt, reply) pairs: a reply answers the human turns since the previous reply (consecutive human
    # turns are one prompt); a pair whose prompt is empty is dropped with its reply. Before, empty human
    # turns were filtered after pairing by position, so prompt k could be paired with reply k + 1.
    pairs: list[list[str]] = []
    for i, t in enumerate(turns):
        if not isinstance(t, dict):
            raise DatasetError(f"{where}: turn {i} must be an object with from/value (or role/content)")
        who = str(t.get("from", t.get("role", ""))).lower()
        text = t.get("value", t.get("content"))
        if not isinstance(text, str):
            raise DatasetError(f"{where}: turn {i} has no string 'value' (or 'content')")
        if who in _HUMAN:
            if pairs and not pairs[-1][1]:
                pairs[-1][0] = "\n".join(x for x in (pairs[-1][0], text) if x.strip())
            else:
                pairs.append([text, ""])
        elif who in _ASSISTANT and pairs:
            pairs[-1][1] = "\n".join(x for x in (pairs[-1][1], text) if x.strip())
    pairs = [p for p in pairs if p[0].strip()]
    replies = [r for _, r in pairs]
    while replies and not replies[-1]:
        replies.pop()  # no reply to the last prompts: as before, the tuple is shorter than the prompts
    return [p for p, _ in pairs], replies


def _output_tokens(v: Any, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise DatasetError(f"{where}: output_tokens must be a positive integer, not {v!r}")
    return v


def _entry(rec: Any, idx: int, fmt: str, where: str) -> Entry | None:
    if not isinstance(rec, dict):
        raise DatasetError(f"{where}: a record must be a JSON object")
    if fmt == "sharegpt":
        conv = _conversation(rec, where)
        if conv is None:
            raise DatasetError(f"{where}: no 'conversations' (or 'messages'); is this the generic layout? use format jsonl")
        prompts, replies = conv
        if not prompts:
            return None
        return Entry(idx, tuple(map(whole_text, prompts)), tuple(map(whole_text, replies)),
                     _output_tokens(rec.get("output_tokens"), where))
    prompt = rec.get("prompt")
    if not isinstance(prompt, str):
        raise DatasetError(f"{where}: needs a string 'prompt' (generic layout: {{\"prompt\": ..., \"output_tokens\": N}})")
    if not prompt.strip():
        return None
    return Entry(idx, (whole_text(prompt),), (), _output_tokens(rec.get("output_tokens"), where))


def jsonl_lines(text: str) -> list[str]:
    """JSON Lines' records: split on ``\\n`` only (a ``\\r`` before it dropped). ``str.splitlines`` also
    breaks at U+2028, U+2029, U+0085 and other separators, which JSON strings may hold unescaped
    (RFC 8259 §7; ``json.dumps(..., ensure_ascii=False)`` writes them): a valid record was cut in two."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _detect(p: Path, text: str | None) -> str:
    if p.suffix == ".parquet":
        return "parquet"
    if text is None:
        return "jsonl"
    first = text.lstrip()[:1]
    if first == "[":
        return "sharegpt"
    for line in jsonl_lines(text):
        if line.strip():
            try:
                rec = json.loads(line)
            except ValueError:
                break
            return "sharegpt" if isinstance(rec, dict) and ("conversations" in rec or "messages" in rec) else "jsonl"
    return "jsonl"


def load_dataset(path: str | Path, fmt: str = "auto", expect_sha256: str | None = None) -> Dataset:
    """Read the dataset at ``path``; DatasetError naming the file and the fix otherwise."""
    p = Path(path)
    if fmt not in FORMATS:
        raise DatasetError(f"dataset {p}: format {fmt!r} is not one of {', '.join(FORMATS)}")
    if not p.is_file():
        raise DatasetError(f"dataset {p}: no such file; give the path of a .json, .jsonl or .parquet dataset")
    digest = file_sha256(p)
    if expect_sha256 and digest != expect_sha256.lower():
        raise DatasetError(f"dataset {p}: sha256 {digest} differs from the pinned {expect_sha256}; the file changed "
                           "after the spec was pinned: restore it or submit the spec again")
    text: str | None = None
    if p.suffix != ".parquet" and fmt != "parquet":
        try:
            text = p.read_text(encoding="utf-8-sig")  # a spreadsheet export's byte-order mark is no content
        except UnicodeDecodeError as exc:
            raise DatasetError(f"dataset {p}: not UTF-8 text ({exc}); save it as UTF-8") from None
    if fmt == "auto":
        fmt = _detect(p, text)
    records: list[tuple[Any, str]] = []
    if fmt == "parquet":
        records = _parquet_records(p)
    elif text is not None and text.lstrip()[:1] == "[":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise DatasetError(f"dataset {p}: not JSON ({exc}); fix the file or give one record a line (JSONL)") from None
        records = [(rec, f"{p}: record {i}") for i, rec in enumerate(data)]
    else:
        for n, line in enumerate(jsonl_lines(text or ""), 1):
            if not line.strip():
                continue
            try:
                records.append((json.loads(line), f"{p}:{n}"))
            except ValueError as exc:
                raise DatasetError(f"{p}:{n}: not JSON ({exc}); a JSONL dataset holds one JSON object a line") from None
    entries: list[Entry] = []
    skipped = 0
    for rec, where in records:
        e = _entry(rec, len(entries), fmt, where)
        if e is None:
            skipped += 1
        else:
            entries.append(e)
    if not entries:
        raise DatasetError(f"dataset {p}: no usable entry ({skipped} without a prompt); every entry needs a non-empty "
                           "prompt (or a human turn)")
    return Dataset(str(p), fmt, digest, tuple(entries), skipped)


def _parquet_records(p: Path) -> list[tuple[Any, str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError(f"dataset {p}: reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        table = pq.read_table(p)
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise DatasetError(f"dataset {p}: not a readable parquet file ({exc})") from None
    if "prompt" not in table.column_names:
        raise DatasetError(f"dataset {p}: the table has no 'prompt' column (columns: {', '.join(table.column_names)}); "
                           "give a string column prompt and optionally an integer output_tokens")
    cols = ["prompt"] + (["output_tokens"] if "output_tokens" in table.column_names else [])
    rows = table.select(cols).to_pylist()
    return [(r, f"{p}: row {i}") for i, r in enumerate(rows)]
