"""YAML loading that keeps line numbers and refuses hostile input with an error, not a crash.

Documents are composed with PyYAML's safe loader into nodes (which carry their marks),
then turned into plain Python values by :func:`_Converter`, which records the line of
every mapping key and sequence item under its path. Limits, all reported as errors:

* size: at most ``MAX_BYTES`` per file;
* encoding: UTF-8 (a BOM is allowed); binary data and control characters are refused;
* nesting: at most ``MAX_DEPTH`` levels, checked while composing (so a document nested
  ten thousand levels deep never reaches Python's recursion limit), and for flow
  collections (``[[[[...``) before parsing too, because PyYAML's scanner slows to a crawl
  on very deep flow nesting long before the composer sees it;
* aliases: expanding anchors may produce at most ``MAX_VALUES`` values per file (the
  "billion laughs" bomb stops there);
* numbers: integers beyond 64 bits and integer literals too long for Python to convert
  are errors at their path;
* tags: only the YAML core schema (no ``!!python/...``, no custom tags);
* keys: strings only, no duplicates.

Floats are read as YAML 1.2 (kubectl) reads them: ``1e2``, ``1.0e5`` and ``-.5`` are numbers,
where PyYAML's YAML 1.1 resolver left them strings; every other scalar resolves as before. An
empty document (a trailing ``---``) is skipped, as kubectl skips it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterator

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_VALUES = 50_000
# Characters of scalars the file may expand to, aliases counted each time they are used: 50,000 values
# were the only bound, and 2,000 aliases of one 800 KB string (a file under 1 MiB) made 3.2 GB in
# validate's canonical JSON, 12,000 ran it out of memory (review 2026-12-08).
MAX_EXPANDED_CHARS = 4 * MAX_BYTES
INT64_MAX = 2**63 - 1

Path = tuple[str | int, ...]

_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_CORE + t for t in ("str", "int", "float", "bool", "null")}
_KEEP_TEXT_TAGS = {_CORE + "timestamp", _CORE + "binary"}
_MAP_TAG = _CORE + "map"
_SEQ_TAG = _CORE + "seq"
_MERGE_TAG = _CORE + "merge"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*\Z")


def format_path(path: Path) -> str:
    """``('spec', 'layers', 0, 'name')`` → ``spec.layers[0].name``; odd keys are quoted."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.match(part):
            out += f".{part}" if out else part
        else:
            out += "[" + _quote(part) + "]"
    return out or "(document)"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class SpecError:
    """One problem in a document: where (dotted path, file, line) and what."""

    path: str
    message: str
    line: int | None = None
    file: str | None = None

    def __str__(self) -> str:
        where = self.file or "<spec>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {self.path}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """``{"path", "line", "message"}`` for ``--json`` output."""
        return {"path": self.path, "line": self.line, "message": self.message}


class YamlLoadError(Exception):
    """The file as a whole cannot be read as YAML (syntax, encoding, limits)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass
class YamlDocument:
    """One YAML document: plain data, the line of every path, and load-time errors."""

    data: Any
    index: int
    start_line: int
    lines: dict[Path, int] = field(default_factory=dict)
    errors: list[tuple[Path, str]] = field(default_factory=list)

    def line_of(self, path: Path) -> int:
        """The line of ``path``, else of its nearest ancestor that exists."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.start_line


# YAML 1.2 core-schema floats that YAML 1.1 reads as strings: an exponent without a dot or without
# a sign (1e2, 1.0e5, .5E3), and a signed fraction without a leading digit (-.5). Added after
# PyYAML's own resolvers, so what they resolve (ints, 1.1 floats, .inf, .nan) is unchanged.
_FLOAT_12 = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+|[-+]\.[0-9]+)$")


class _Loader(yaml.SafeLoader):
    """Safe loader whose composer refuses documents nested deeper than MAX_DEPTH."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:  # type: ignore[override]
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YamlLoadError(f"nested deeper than {MAX_DEPTH} levels", mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_Loader.add_implicit_resolver(_CORE + "float", _FLOAT_12, list("-+.0123456789"))


def _empty(node: Node) -> bool:
    """A document with no content at all (``---`` followed by nothing, or only comments)."""
    return isinstance(node, ScalarNode) and node.tag == _CORE + "null" and node.value == "" and not node.style


def decode(data: bytes) -> str:
    """UTF-8 text of ``data`` (BOM allowed), or YamlLoadError naming the byte offset."""
    if len(data) > MAX_BYTES:
        raise YamlLoadError(f"file is {len(data)} bytes; a spec may be at most {MAX_BYTES} bytes")
    if b"\x00" in data[:8192] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise YamlLoadError("binary data (NUL bytes), not a YAML text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise YamlLoadError(
            f"not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at offset {exc.start}); save the file as UTF-8",
            line,
        ) from None
    return text


_BRACKETS = re.compile(r"[\[\]{}]")


def check_flow_depth(text: str) -> None:
    """Refuse text whose ``[``/``{`` nesting exceeds MAX_DEPTH (a cheap over-estimate: quotes are not parsed)."""
    depth = 0
    for m in _BRACKETS.finditer(text):
        if m.group() in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlLoadError(f"nested deeper than {MAX_DEPTH} levels", text.count("\n", 0, m.start()) + 1)
        elif depth:
            depth -= 1


def load_documents(data: bytes) -> list[YamlDocument]:
    """Every document of a YAML stream, with line maps; YamlLoadError if the file is unusable."""
    text = decode(data)
    check_flow_depth(text)
    budget = _Budget()
    docs: list[YamlDocument] = []
    loader: _Loader | None = None
    try:
        loader = _Loader(text)
        while loader.check_node():
            node = loader.get_node()
            if node is None:  # pragma: no cover - check_node said there was one
                break
            if _empty(node):
                continue
            doc = YamlDocument(data=None, index=len(docs), start_line=node.start_mark.line + 1)
            doc.data = _Converter(doc, budget).convert(node, ())
            docs.append(doc)
    except YamlLoadError:
        raise
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        raise YamlLoadError(
            f"not a YAML text file: control character U+{exc.character:04X} at offset {exc.position} is not allowed", line
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or str(exc)
        context = f" ({exc.context})" if exc.context else ""
        raise YamlLoadError(f"not valid YAML: {problem}{context}", line) from None
    except yaml.YAMLError as exc:
        raise YamlLoadError(f"not valid YAML: {exc}") from None
    except RecursionError:  # defence in depth; the depth limit should stop this first
        raise YamlLoadError(f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()
    return docs


class _Budget:
    """Counts values produced per file (aliases expanded) against MAX_VALUES, and their scalars'
    characters against MAX_EXPANDED_CHARS."""

    def __init__(self) -> None:
        self.count = 0
        self.chars = 0

    def spend(self, node: Node) -> None:
        self.count += 1
        if self.count > MAX_VALUES:
            raise YamlLoadError(
                f"the file expands to more than {MAX_VALUES} values (anchors/aliases: a YAML bomb?)",
                node.start_mark.line + 1,
            )
        if isinstance(node, ScalarNode):
            self.text(len(node.value), node.start_mark.line + 1)

    def text(self, n: int, line: int) -> None:
        """Count ``n`` characters of a scalar (a value or a key, as often as aliases use it)."""
        self.chars += n
        if self.chars > MAX_EXPANDED_CHARS:
            raise YamlLoadError(f"the file expands to more than {MAX_EXPANDED_CHARS} characters of values and keys "
                                "(aliases of long strings: a YAML bomb?)", line)


class _Converter:
    """Node tree → plain values, recording the line of each path and soft errors."""

    def __init__(self, doc: YamlDocument, budget: _Budget) -> None:
        self.doc = doc
        self.budget = budget
        self.constructor = yaml.SafeLoader("")

    def error(self, path: Path, message: str) -> None:
        self.doc.errors.append((path, message))

    def convert(self, node: Node, path: Path) -> Any:
        self.budget.spend(node)
        if len(path) > MAX_DEPTH:
            raise YamlLoadError(f"nested deeper than {MAX_DEPTH} levels (recursive alias?)", node.start_mark.line + 1)
        if isinstance(node, ScalarNode):
            return self.scalar(node, path)
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ_TAG:
                self.error(path, f"unsupported YAML tag {node.tag!r}; use a plain list")
            out = []
            for i, item in enumerate(node.value):
                self.doc.lines.setdefault(path + (i,), item.start_mark.line + 1)
                out.append(self.convert(item, path + (i,)))
            return out
        if isinstance(node, MappingNode):
            if node.tag != _MAP_TAG:
                self.error(path, f"unsupported YAML tag {node.tag!r}; use a plain mapping")
            return self.mapping(node, path)
        raise YamlLoadError(f"unexpected YAML node {type(node).__name__}")  # pragma: no cover

    def scalar(self, node: ScalarNode, path: Path) -> Any:
        if node.tag in _KEEP_TEXT_TAGS:
            return node.value  # dates and !!binary stay as written: the spec wants text
        if node.tag not in _SCALAR_TAGS:
            self.error(path, f"unsupported YAML tag {node.tag!r}; write a plain value")
            return node.value
        try:
            value = self.constructor.construct_object(node, deep=True)
        except ValueError:
            # int() refuses literals longer than sys.get_int_max_str_digits()
            self.error(path, "number too large: integers must fit in 64 bits")
            return None
        except yaml.YAMLError as exc:
            self.error(path, f"cannot read value: {exc}")
            return node.value
        if isinstance(value, int) and not isinstance(value, bool) and not -INT64_MAX - 1 <= value <= INT64_MAX:
            self.error(path, "number too large: integers must fit in 64 bits")
        return value

    def mapping(self, node: MappingNode, path: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        merged: list[tuple[str, Node, int]] = []
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if isinstance(key_node, ScalarNode) and key_node.tag == _MERGE_TAG:
                merged.extend(self.merge_sources(value_node, path))
                continue
            if not isinstance(key_node, ScalarNode):
                self.error(path, f"line {key_line}: a mapping key must be a plain string, not a {key_node.id}")
                continue
            self.budget.text(len(key_node.value), key_line)  # a key's characters too (an alias of a long string)
            key = key_node.value if key_node.tag in _KEEP_TEXT_TAGS | {_CORE + "str"} else self.scalar(key_node, path)
            if not isinstance(key, str):
                self.error(path + (str(key),), f"key {key_node.value!r} must be a string (quote it)")
                key = str(key_node.value)
            if key in first_line:
                self.error(path + (key,), f"duplicate key {key!r} (first at line {first_line[key]})")
            first_line.setdefault(key, key_line)
            self.doc.lines[path + (key,)] = key_line
            out[key] = self.convert(value_node, path + (key,))
        for key, value_node, key_line in merged:  # explicit keys win over merged ones
            self.budget.text(len(key), key_line)
            if key not in out:
                self.doc.lines[path + (key,)] = key_line
                out[key] = self.convert(value_node, path + (key,))
        return out

    def merge_sources(self, value_node: Node, path: Path) -> Iterator[tuple[str, Node, int]]:
        sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
        for src in sources:
            if not isinstance(src, MappingNode):
                self.error(path, "a merge key '<<' must refer to a mapping or a list of mappings")
                continue
            for k, v in src.value:
                if isinstance(k, ScalarNode) and k.tag == _CORE + "str":
                    yield k.value, v, k.start_mark.line + 1
