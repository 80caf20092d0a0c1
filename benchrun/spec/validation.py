"""Admission of BenchmarkRun documents: YAML → model + rules → every error with file:line.

``validate_document`` runs the model (types, enumerations, bounds, unknown keys with a
"did you mean") and then every rule of :mod:`benchrun.spec.rules`, so one pass reports
all problems. ``load_spec`` / ``load_spec_bytes`` are what the rest of benchrun calls:
one valid document in, a :class:`LoadedSpec` out, else :class:`SpecInvalid`.
"""

from __future__ import annotations

import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_snake

from benchrun.errors import BenchrunError
from benchrun.spec import rules
from benchrun.spec.builtin_suites import local_trace_errors
from benchrun.spec.datasets import RESOURCE, Finder, pin_dataset
from benchrun.spec.digest import spec_digest, workload_spec_digest
from benchrun.spec.docaccess import did_you_mean
from benchrun.spec.normal import normalized_workload_digest
from benchrun.spec.loader import MAX_BYTES, Path, SpecError, YamlDocument, YamlLoadError, format_path, load_documents
from benchrun.spec.model import API_VERSION, KIND, BenchmarkRun

YAML_SUFFIXES = (".yaml", ".yml")


class SpecInvalid(BenchrunError):
    """A spec that does not pass admission; ``errors`` holds every problem found."""

    exit_code = 2

    def __init__(self, errors: list[SpecError], source: str) -> None:
        self.errors = list(errors)
        self.source = source
        lines = "\n".join(f"  {e}" for e in self.errors)
        super().__init__(f"{source}: {len(self.errors)} error(s) in the BenchmarkRun spec:\n{lines}", exit_code=2)


@dataclass(frozen=True)
class LoadedSpec:
    """A valid, pinned-ready spec: the model, the exact bytes and both digests."""

    run: BenchmarkRun
    raw: bytes
    source: str
    spec_digest: str
    workload_spec_digest: str
    document: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # the workload with its defaults left out (benchrun.spec.normal): recorded beside the digest
    # as written, and preferred by the comparisons where both runs have it
    workload_spec_digest_normalized: str | None = None


@dataclass
class DocumentResult:
    """The outcome for one YAML document (or for a file that could not be read).

    ``fatal`` marks a file that is unreadable or not YAML (exit code 2); ``skipped`` a
    document of another kind met while scanning a folder (e.g. the CRD itself).
    """

    file: str
    index: int
    valid: bool
    errors: list[SpecError] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    fatal: bool = False
    skipped: bool = False
    run: BenchmarkRun | None = field(default=None, repr=False)
    # Advice that does not make the spec invalid (e.g. a gate that can never fire).
    warnings: list[SpecError] = field(default_factory=list)
    pinned: Any = field(default=None, repr=False, compare=False)  # the document the digests cover (a dataset's sha256 filled)

    def to_json(self) -> dict[str, Any]:
        """``{"valid", "file", "errors": [{"path","line","message"}], "warnings": [...], "summary"}``."""
        return {
            "valid": self.valid,
            "file": self.file,
            "errors": [e.to_json() for e in self.errors],
            "warnings": [w.to_json() for w in self.warnings],
            "summary": self.summary,
        }


# -- pydantic errors → SpecError ---------------------------------------------------------------


def _unwrap(tp: Any) -> Any:
    """Strip Annotated and Optional from a type annotation."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _keys_of(model: type[BaseModel]) -> dict[str, str]:
    """YAML key → Python attribute name for a model's fields."""
    return {(f.alias or name): name for name, f in model.model_fields.items()}


def model_at(loc: Path) -> type[BaseModel] | None:
    """The model class that validates the mapping at ``loc`` (None for free mappings)."""
    tp: Any = BenchmarkRun
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            name = _keys_of(tp).get(str(part))
            if name is None:
                return None
            tp = tp.model_fields[name].annotation
        elif typing.get_origin(tp) is list:
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


_TYPE_WORDS = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "a mapping",
    type(None): "null",
}
_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean (true or false)",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def _camel_spelling(key: str, model: type[BaseModel]) -> str | None:
    """The YAML key a snake_case (Python) spelling ``key`` stands for in ``model``, else None."""
    for name, f in model.model_fields.items():
        alias = f.alias or name
        if key != alias and key in (name, to_snake(alias)):
            return alias
    return None


def _got(value: Any) -> str:
    word = _TYPE_WORDS.get(type(value), type(value).__name__)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        text = repr(value)
        text = text if len(text) <= 40 else text[:37] + "..."
        return f"{word} {text}"
    return word


# The model's patterns in words (a regex is no instruction to the person who wrote the value).
PATTERN_WORDS = {
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$": "must be a DNS label: lowercase letters, digits and '-', starting and "
                                          "ending with a letter or digit (e.g. canary-h100)",
    r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$": "must be letters, digits, '.', '_' or '-', starting and "
                                                           "ending with a letter or digit, at most 63 characters",
    r"^([0-9]+(\.[0-9]+)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$": "must be a Kubernetes quantity such as "
                                                                           "500m, 4, 64Gi or 1.5",
    r"^[A-Za-z_][A-Za-z0-9_]*$": "must be an environment variable name: letters, digits and '_', not starting "
                                 "with a digit",
    r"^[^\x00]*$": "must not contain a NUL character",
    r"^[0-9a-f]{64}$": "must be 64 lowercase hexadecimal digits (a sha256)",
}


def _message(err: dict[str, Any]) -> str:
    kind = err["type"]
    loc = tuple(err["loc"])
    if kind == "extra_forbidden":
        key = str(loc[-1])
        model = model_at(loc[:-1])
        allowed = sorted(_keys_of(model)) if model is not None else []
        spelled = _camel_spelling(key, model) if model is not None else None
        if spelled:
            return f"unknown key {key!r}: keys are written in camelCase; did you mean {spelled!r}?"
        hint = rules.did_you_mean(key, allowed)
        if hint:
            return f"unknown key {key!r}{hint}"
        return f"unknown key {key!r}; allowed here: {', '.join(allowed)}" if allowed else f"unknown key {key!r}"
    if kind == "missing":
        return f"required key {str(loc[-1])!r} is missing"
    if kind in _EXPECTED:
        return f"must be {_EXPECTED[kind]}, not {_got(err.get('input'))}"
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        value = err.get("input")
        hint = rules.did_you_mean(value, expected) if isinstance(value, str) else ""
        return f"is {value!r}; must be one of {', '.join(expected)}{hint}"
    if kind == "string_pattern_mismatch":
        pattern = str(err.get("ctx", {}).get("pattern", ""))
        if pattern == r"\S":
            return "must not be empty or blank"
        said = PATTERN_WORDS.get(pattern)
        return (f"is {err.get('input')!r}; {said}" if said else
                f"{err.get('input')!r} does not match the pattern {pattern}")
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "too_short":
        return "must not be empty"
    if kind == "finite_number":
        return "must be a finite number"
    if kind in ("value_error", "assertion_error"):
        return str(err.get("msg", "")).removeprefix("Value error, ")
    msg = str(err.get("msg", ""))
    value = err.get("input")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        bound = (err.get("ctx") or {}).get("lt", (err.get("ctx") or {}).get("le"))
        # a fraction written as a percentage (confidenceLevel: 95): say what was meant
        hint = (f"; it is a fraction: {value / 100:g} for {value:g} %" if kind in ("less_than", "less_than_equal")
                and bound == 1 and 1 < value <= 100 else "")
        return (f"is {value!r}; {msg[0].lower() + msg[1:]}" if msg else f"is {value!r}") + hint
    return msg[0].lower() + msg[1:] if msg else kind


def model_errors(data: Any) -> tuple[BenchmarkRun | None, list[tuple[Path, str]]]:
    """Validate ``data`` with the model; the model, or every error as (path, message)."""
    try:
        return BenchmarkRun.model_validate(data), []
    except ValidationError as exc:
        return None, [(tuple(e["loc"]), _message(e)) for e in exc.errors(include_url=False)]


# -- documents -------------------------------------------------------------------------------


def _covered(path: Path, model_paths: set[Path]) -> bool:
    return any(path[: len(p)] == p for p in model_paths)


def _json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as text (``.nan`` → ``"nan"``): ``--json`` stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def summary_of(data: Any) -> dict[str, Any]:
    """A short description of a document for humans and ``--json`` (values as written, JSON-safe)."""
    out: dict[str, Any] = {}
    if not isinstance(data, dict):
        return out
    out["name"] = _json_safe(rules.get(data, ("metadata", "name")))
    out["kind"] = _json_safe(data.get("kind"))
    for key in ("benchmarkClass", "workloadType", "schedulerPath", "cadence"):
        out[key] = _json_safe(rules.get(data, ("spec", "intent", key)))
    layers: dict[str, Any] = {}
    total = 0
    layer_list = rules.get(data, ("spec", "layers"))
    for layer in layer_list if isinstance(layer_list, list) else []:  # another type is the model's error
        name = rules.get(layer, ("name",))
        entries = rules.get(layer, ("suites",))
        n = len(entries) if isinstance(entries, list) else 0
        if isinstance(name, str):
            layers[name] = {"enabled": _json_safe(rules.get(layer, ("enabled",))), "suites": n}
            total += n
    out["layers"] = layers
    out["suites"] = total
    return out


def _path_template_errors(run: BenchmarkRun) -> list[tuple[Path, str]]:
    """The admission rule for ``sinks.rawArtifacts.pathTemplate`` against this home (as `run`
    and `submit` apply it), so `validate` never accepts what admission refuses."""
    from benchrun.paths import home_location
    from benchrun.store import check_path_template

    try:  # the home is read, not created: validate leaves nothing behind
        check_path_template(run.spec.sinks.raw_artifacts.path_template, home_location()[0])
    except BenchrunError as exc:
        return [(("spec", "sinks", "rawArtifacts", "pathTemplate"), str(exc))]
    return []


def _other_kind(data: Any) -> str | None:
    """Why ``data`` is a document of another kind, not a BenchmarkRun with mistakes (a ``kind`` that
    is a string neither BenchmarkRun nor close to it), or None: the one error given for it, so a
    CustomResourceDefinition is not checked, key by key, against the BenchmarkRun schema."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if not isinstance(kind, str) or kind == KIND or did_you_mean(kind, [KIND]):
        return None
    api = data.get("apiVersion")
    of = f" (apiVersion {api!r})" if isinstance(api, str) and api != API_VERSION else ""
    return (f"is {kind!r}{of}: this document is not a BenchmarkRun (apiVersion {API_VERSION}, kind {KIND}), "
            "so nothing else in it was checked; give a BenchmarkRun spec")


def validate_document(doc: YamlDocument, file: str, find_dataset: Finder | None = None) -> DocumentResult:
    """Model + every rule over one document; errors sorted by line, then path."""
    found: list[tuple[Path, str]] = list(doc.errors)
    run: BenchmarkRun | None = None
    # a dataset's bytes join the digest; the model reads the resolved file (benchrun.spec.datasets)
    data, model_data, dataset_errors = pin_dataset(doc.data, file, find_dataset)
    found.extend(dataset_errors)
    other = _other_kind(data)
    if other is not None:  # a document of another kind (a CRD, a Deployment): its schema is not a BenchmarkRun's
        found[:] = [(("kind",), other)]
    elif not isinstance(data, dict):
        what = "empty" if data is None else f"{_got(data)}"
        found.append(((), f"a BenchmarkRun document must be a mapping with apiVersion, kind, metadata and spec, not {what}"))
    else:
        run, from_model = model_errors(model_data)
        found.extend(from_model)
        model_paths = {p for p, _ in from_model} | {p for p, _ in doc.errors}
        found.extend(f for f in rules.check(data) if not _covered(f[0], model_paths))
        if run is not None:
            found.extend(_path_template_errors(run))
        if find_dataset is None and not file.startswith(RESOURCE):  # a spec file admitted on this machine
            # a local run's trace (where every replicate would look for it), once its suite's parameters parse
            found.extend(f for f in local_trace_errors(data)
                         if not any(p[:len(f[0]) - 1] == f[0][:-1] for p, _ in found))
        if run is not None and doc.errors:
            run = None
    seen: set[tuple[Path, str]] = set()
    errors: list[SpecError] = []
    for path, message in found:
        if (path, message) in seen:
            continue
        seen.add((path, message))
        errors.append(SpecError(format_path(path), message, doc.line_of(path), file))
    errors.sort(key=lambda e: (e.line or 0, e.path))
    digests: dict[str, str] = {}
    if not errors and run is not None:
        try:  # defence in depth: a value the model takes as it is (.nan) cannot be digested
            digests = {"specDigest": spec_digest(data), "workloadSpecDigest": workload_spec_digest(data)}
        except (TypeError, ValueError) as exc:
            errors.append(SpecError(format_path(()), f"{exc}; write a finite number", doc.start_line, file))
    valid = not errors and run is not None
    summary = summary_of(data)
    summary["errors"] = len(errors)
    summary.update(digests)
    warnings = []
    if valid:
        from benchrun.stats.power import gating_warnings, percentile_warnings  # statistics' advice on the gate

        warnings = [SpecError(format_path(p), m, doc.line_of(p), file)
                    for p, m in [*gating_warnings(data), *percentile_warnings(data)]]
    return DocumentResult(file=file, index=doc.index, valid=valid, errors=errors, summary=summary,
                          run=run if valid else None, warnings=warnings, pinned=data if valid else None)


def validate_bytes(data: bytes, source: str, *, only_benchmark_runs: bool = False) -> list[DocumentResult]:
    """Every document in ``data``; a file-level problem is one fatal result.

    With ``only_benchmark_runs`` (folder scans), documents whose ``kind`` is another
    string are skipped, not failed. A file holding more than one document, one of them a
    candidate BenchmarkRun, is one fatal result, as admission (:func:`load_spec_bytes`) refuses it.
    """
    try:
        docs = load_documents(data)
    except YamlLoadError as exc:
        error = SpecError("(file)", exc.message, exc.line, source)
        return [DocumentResult(file=source, index=0, valid=False, errors=[error], summary={"errors": 1}, fatal=True)]
    if not docs:
        return [DocumentResult(file=source, index=0, valid=False, errors=[_not_one(0, source)], summary={"errors": 1})]

    def skipped(doc: YamlDocument) -> DocumentResult | None:
        kind = rules.get(doc.data, ("kind",))
        if only_benchmark_runs and isinstance(kind, str) and kind != KIND:
            return DocumentResult(file=source, index=doc.index, valid=True, skipped=True,
                                  summary={"kind": kind, "skipped": f"kind {kind} is not {KIND}"})
        return None

    others = [skipped(doc) for doc in docs]
    if len(docs) > 1 and None in others:
        # what `run`, `submit`, `digest`, the sensors and the operator refuse (load_spec_bytes): never "2 valid"
        return [DocumentResult(file=source, index=0, valid=False, errors=[_not_one(len(docs), source)],
                               summary={"errors": 1}, fatal=True)]
    return [other or validate_document(doc, source) for other, doc in zip(others, docs)]


def _not_one(count: int, source: str) -> SpecError:
    what = "no YAML document (the file is empty)" if not count else f"{count} YAML documents"
    fix = "" if not count else ": put each in a file of its own"
    return SpecError("(file)", f"holds {what}; a spec file holds exactly one BenchmarkRun{fix}", 1, source)


def _read(path: FsPath) -> bytes:
    """At most MAX_BYTES + 1 bytes of ``path``: a huge file or a device such as /dev/zero is refused, not swallowed."""
    import os
    import stat

    try:
        # O_NONBLOCK: opening a named pipe for reading would otherwise wait for a writer for ever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            mode = os.fstat(fd).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                kind = "a named pipe" if stat.S_ISFIFO(mode) else "a socket"
                raise BenchrunError(f"{path}: is {kind}, not a file; save the spec to a file and give that",
                                    exit_code=2)
            os.set_blocking(fd, True)
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise BenchrunError(f"{path}: cannot read the file ({exc.strerror or exc}); check the path", exit_code=2) from None
    if len(data) > MAX_BYTES:
        raise BenchrunError(
            f"{path}: more than {MAX_BYTES} bytes; a spec may be at most {MAX_BYTES} bytes (is this the right file?)",
            exit_code=2,
        )
    return data


def _is_dir(path: FsPath) -> bool:
    """``path.is_dir()``, False where the name itself is unusable (too long, ...): reading it then says why."""
    try:
        return path.is_dir()
    except OSError:
        return False


def validate_path(path: str | FsPath) -> list[DocumentResult]:
    """Validate a file, or every ``*.yaml``/``*.yml`` under a folder (hidden folders skipped)."""
    root = FsPath(path)
    if _is_dir(root):
        files = sorted(
            p for p in root.rglob("*")
            if p.suffix in YAML_SUFFIXES and p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(root).parts)
        )
        if not files:
            error = SpecError("(file)", "the folder holds no .yaml or .yml file", None, str(root))
            return [DocumentResult(file=str(root), index=0, valid=False, errors=[error], fatal=True)]
        results: list[DocumentResult] = []
        for file in files:
            results.extend(_validate_file(file, only_benchmark_runs=True))
        return results
    return _validate_file(root, only_benchmark_runs=False)


def _validate_file(path: FsPath, *, only_benchmark_runs: bool) -> list[DocumentResult]:
    try:
        data = _read(path)
    except BenchrunError as exc:
        error = SpecError("(file)", str(exc).split(": ", 1)[-1], None, str(path))
        return [DocumentResult(file=str(path), index=0, valid=False, errors=[error], fatal=True)]
    return validate_bytes(data, str(path), only_benchmark_runs=only_benchmark_runs)


def load_spec_bytes(data: bytes, source: str, *, find_dataset: Finder | None = None) -> LoadedSpec:
    """One valid BenchmarkRun from ``data``; SpecInvalid (exit 2) listing every error otherwise.
    ``find_dataset``: where ``workload.dataset.path`` is read (:mod:`benchrun.spec.datasets`)."""
    try:
        docs = load_documents(data)
    except YamlLoadError as exc:
        where = f"{source}:{exc.line}" if exc.line else source
        raise BenchrunError(f"{where}: {exc.message}", exit_code=2) from None
    if len(docs) != 1:
        raise SpecInvalid([_not_one(len(docs), source)], source)
    result = validate_document(docs[0], source, find_dataset)
    if not result.valid or result.run is None:
        raise SpecInvalid(result.errors, source)
    document = result.pinned if result.pinned is not None else docs[0].data
    return LoadedSpec(
        run=result.run,
        raw=data,
        source=source,
        spec_digest=spec_digest(document),
        workload_spec_digest=workload_spec_digest(document),
        document=document,
        workload_spec_digest_normalized=normalized_workload_digest(document),
    )


def load_spec(path: str | FsPath) -> LoadedSpec:
    """The one BenchmarkRun in the file at ``path`` (see ``load_spec_bytes``)."""
    p = FsPath(path)
    if _is_dir(p):
        raise BenchrunError(f"{p}: is a folder; give one spec file", exit_code=2)
    return load_spec_bytes(_read(p), str(p))


__all__ = [
    "API_VERSION",
    "DocumentResult",
    "LoadedSpec",
    "SpecInvalid",
    "load_spec",
    "load_spec_bytes",
    "validate_bytes",
    "validate_document",
    "validate_path",
]
