"""YAML loading: line numbers, several documents, and hostile input → an error result, never a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchrun.errors import BenchrunError
from benchrun.spec import SpecInvalid, load_spec, load_spec_bytes, validate_bytes, validate_path
from benchrun.spec.loader import MAX_DEPTH, format_path, load_documents

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "specs/examples/publication-inference-stack-b200.yaml"
SEED_TEXT = SEED.read_text()


def line_of(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def test_line_numbers_point_at_the_offending_key() -> None:
    text = SEED_TEXT.replace("minReplicates: 5", "minReplicates: 2").replace("cadence: pre_release", "cadence: weekly")
    [result] = validate_bytes(text.encode(), "seed.yaml")
    got = {e.path: e.line for e in result.errors}
    assert got == {
        "spec.trials.minReplicates": line_of(text, "minReplicates: 2"),
        "spec.intent.cadence": line_of(text, "cadence: weekly"),
    }
    assert all(e.file == "seed.yaml" for e in result.errors)
    assert str(result.errors[0]).startswith(f"seed.yaml:{line_of(text, 'cadence: weekly')}: spec.intent.cadence: ")


def test_line_of_a_list_item_and_a_missing_key() -> None:
    text = SEED_TEXT.replace("          repoCommand: python -m cli.aisp bench run --targets labs/async_input_pipeline --profile minimal\n", "")
    [result] = validate_bytes(text.encode(), "s.yaml")
    [error] = result.errors
    assert error.path == "spec.layers[1].suites[1].repoCommand"
    assert error.message == "required key 'repoCommand' is missing"
    assert error.line == line_of(text, "- name: dataloader")


def test_did_you_mean_for_a_near_miss() -> None:
    text = SEED_TEXT.replace("minReplicates: 5", "minReplicate: 5")
    [result] = validate_bytes(text.encode(), "s.yaml")
    messages = {e.path: e.message for e in result.errors}
    assert messages["spec.trials.minReplicate"] == "unknown key 'minReplicate' (did you mean 'minReplicates'?)"
    assert messages["spec.trials.minReplicates"] == "required key 'minReplicates' is missing"
    text = SEED_TEXT.replace("bottleneckAnalysis:", "bottleneckanalysis:")
    [result] = validate_bytes(text.encode(), "s.yaml")
    assert "did you mean 'bottleneckAnalysis'" in {e.path: e.message for e in result.errors}["spec.bottleneckanalysis"]


def test_several_documents_per_file_are_refused_as_admission_refuses_them() -> None:
    # validate said "2 valid" (exit 0) where run, submit and digest refuse the file (exit 2)
    second = SEED_TEXT.replace("name: publication-inference-stack-b200", "name: second")
    text = SEED_TEXT + "\n---\n" + second
    [result] = validate_bytes(text.encode(), "two.yaml")
    assert result.fatal and not result.valid
    with pytest.raises(SpecInvalid) as info:
        load_spec_bytes(text.encode(), "two.yaml")
    [error] = info.value.errors
    assert result.errors == [error] and "2 YAML documents" in error.message and "a file of its own" in error.message
    # a folder scan still skips a file of other kinds' documents (manifests beside the specs)
    others = b"kind: Namespace\n---\nkind: ConfigMap\n"
    assert all(r.skipped for r in validate_bytes(others, "ns.yaml", only_benchmark_runs=True))
    [mixed] = validate_bytes(others + b"---\n" + SEED_TEXT.encode(), "mixed.yaml", only_benchmark_runs=True)
    assert mixed.fatal and "3 YAML documents" in mixed.errors[0].message


def test_anchors_and_merge_keys_resolve() -> None:
    text = b"a: &base {x: 1, y: 2}\nb:\n  <<: *base\n  y: 3\nc: [*base]\n"
    [doc] = load_documents(text)
    assert doc.data == {"a": {"x": 1, "y": 2}, "b": {"x": 1, "y": 3}, "c": [{"x": 1, "y": 2}]}
    assert doc.lines[("b", "y")] == 4


def test_format_path() -> None:
    assert format_path(("spec", "layers", 0, "suites", 2, "repoCommand")) == "spec.layers[0].suites[2].repoCommand"
    assert format_path(("metadata", "labels", "aisp.dev/owner")) == 'metadata.labels["aisp.dev/owner"]'
    assert format_path(()) == "(document)"


BOMB = b"".join(
    [b"l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n"]
    + [f"l{i}: &l{i} [{', '.join([f'*l{i-1}'] * 10)}]\n".encode() for i in range(1, 9)]
)

# (name, bytes, fatal, substring of the first error message)
BAD_INPUT = [
    ("empty", b"", False, "holds no YAML document"),
    ("only-comments", b"# nothing here\n", False, "holds no YAML document"),
    ("binary", bytes(range(256)) * 8, True, "binary data"),
    ("non-utf8", "metadata:\n  name: caf\xe9\n".encode("latin-1"), True, "not UTF-8"),
    ("control-char", b"a: \x07\n", True, "control character U+0007"),
    ("yaml-bomb", BOMB, True, "YAML bomb"),
    # few values, each an alias of one 800 KB string: 3.2 GB in validate's canonical JSON (review 2026-12-08)
    ("long-string-aliases", b"a: &a " + b"A" * 800_000 + b"\nb: [" + b", ".join([b"*a"] * 2000) + b"]\n", True,
     "characters of values and keys"),
    ("long-string-alias-keys", b"a: &a " + b"A" * 800_000 + b"\nb:\n" + b"".join([b"- {*a : 1}\n"] * 2000), True,
     "characters of values and keys"),
    ("long-string-merged-keys", b"a: &m\n  ? " + b"K" * 800_000 + b"\n  : 1\nb:\n" + b"".join([b"- {<<: *m}\n"] * 2000),
     True, "characters of values and keys"),
    ("deep-flow", b"[" * 100_000 + b"]" * 100_000, True, f"nested deeper than {MAX_DEPTH}"),
    ("deep-block", "".join("  " * i + f"k{i}:\n" for i in range(500)).encode() + b"  " * 500 + b"v\n", True, "nested deeper"),
    ("recursive-alias", b"a: &a [*a]\n", True, "nested deeper"),
    ("syntax", b"spec: [unclosed\n", True, "not valid YAML"),
    ("tab-indent", b"spec:\n\tintent: 1\n", True, "not valid YAML"),
    ("python-tag", b"!!python/object/apply:os.system ['true']\n", False, "unsupported YAML tag"),
    ("huge-int", b"apiVersion: " + b"9" * 5000 + b"\n", False, "number too large"),
    ("int-beyond-64-bit", b"apiVersion: 99999999999999999999999\n", False, "number too large"),
    ("scalar-document", b"42\n", False, "must be a mapping"),
    ("list-document", b"- a\n- b\n", False, "must be a mapping"),
    ("null-document", b"~\n", False, "must be a mapping"),
    ("list-key", b"? [a, b]\n: 1\n", False, "mapping key must be a plain string"),
    ("int-key", b"1: a\n", False, "must be a string"),
    ("duplicate-key", b"apiVersion: a\napiVersion: b\n", False, "duplicate key 'apiVersion' (first at line 1)"),
    ("too-big", b"a: " + b"x" * (2 * 1024 * 1024), True, "at most"),
    ("deep-flow-interleaved", b"a: " + b"[x, " * 100_000, True, f"nested deeper than {MAX_DEPTH}"),
]


@pytest.mark.parametrize("name,data,fatal,needle", BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_gives_an_error_result(name: str, data: bytes, fatal: bool, needle: str) -> None:
    results = validate_bytes(data, f"{name}.yaml")
    assert results and not any(r.valid for r in results)
    assert results[0].fatal is fatal
    messages = [e.message for r in results for e in r.errors]
    assert any(needle in m for m in messages), messages
    # load_spec turns the same input into a BenchrunError with exit code 2, never another exception
    with pytest.raises(BenchrunError) as info:
        load_spec_bytes(data, f"{name}.yaml")
    assert info.value.exit_code == 2


def test_wrong_types_at_every_level() -> None:
    cases = {
        "spec: 5": ("spec", "must be a mapping, not an integer 5"),
        "  layers: {a: 1}": ("spec.layers", "must be a list, not a mapping"),
        "  layers: 5": ("spec.layers", "must be a list, not an integer 5"),
        "  trials: []": ("spec.trials", "must be a mapping, not a list"),
        "    minReplicates: '5'": ("spec.trials.minReplicates", "must be an integer, not a string '5'"),
        "      enabled: 'yes'": ("spec.layers[0].enabled", "must be a boolean (true or false), not a string 'yes'"),
        "    model: 7": ("spec.workload.model", "must be a string, not an integer 7"),
        "    confidenceLevel: true": ("spec.trials.confidenceLevel", "must be a number, not a boolean"),
        # a percentage where a fraction is asked (new-user trial): the bound's words, then what was meant
        "    confidenceLevel: 95": ("spec.trials.confidenceLevel",
                                   "is 95; input should be less than 1; it is a fraction: 0.95 for 95 %"),
    }
    for line, (path, message) in cases.items():
        key = line.strip().split(":")[0]
        lines = SEED_TEXT.splitlines()
        indent = len(line) - len(line.lstrip())
        idx = next(i for i, l in enumerate(lines) if l.startswith(" " * indent + key + ":") and (len(l) - len(l.lstrip())) == indent)
        # replace the key's value (and drop its block, if any)
        end = idx + 1
        while end < len(lines) and (len(lines[end]) - len(lines[end].lstrip())) > indent:
            end += 1
        text = "\n".join(lines[:idx] + [line] + lines[end:]) + "\n"
        [result] = validate_bytes(text.encode(), "t.yaml")
        got = {e.path: e.message for e in result.errors}
        assert got.get(path) == message, (line, got)
        assert result.errors[0].line is not None


def test_unreadable_paths(tmp_path: Path) -> None:
    [result] = validate_path(tmp_path / "missing.yaml")
    assert result.fatal and "cannot read" in result.errors[0].message
    [result] = validate_path(tmp_path)  # an empty folder
    assert result.fatal and "no .yaml" in result.errors[0].message
    with pytest.raises(BenchrunError) as info:
        load_spec(tmp_path / "missing.yaml")
    assert info.value.exit_code == 2
    with pytest.raises(BenchrunError):
        load_spec(tmp_path)


def test_folder_scan_skips_other_kinds_and_hidden_folders(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(SEED_TEXT)
    (tmp_path / "crd.yml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "bad.yaml").write_text("nope: 1\n")
    (tmp_path / "notes.txt").write_text("nope: 1\n")
    results = validate_path(tmp_path)
    assert [(Path(r.file).name, r.valid, r.skipped) for r in results] == [("a.yaml", True, False), ("crd.yml", True, True)]
    # given explicitly, a document of another kind is an error
    [result] = validate_path(tmp_path / "crd.yml")
    assert not result.valid and [e.path for e in result.errors] == ["kind"]  # one error, not its every key


def test_bom_and_crlf_are_accepted() -> None:
    data = b"\xef\xbb\xbf" + SEED_TEXT.replace("\n", "\r\n").encode()
    loaded = load_spec_bytes(data, "bom.yaml")
    assert loaded.raw == data and loaded.run.metadata.name == "publication-inference-stack-b200"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_property_arbitrary_bytes_give_a_result(data: bytes) -> None:
    results = validate_bytes(data, "fuzz.yaml")
    assert results and all(r.errors for r in results)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(SEED_TEXT) - 1), st.integers(1, 40), st.text(max_size=8))
def test_property_corrupted_seed_text_gives_a_result(start: int, length: int, insert: str) -> None:
    text = SEED_TEXT[:start] + insert + SEED_TEXT[start + length :]
    results = validate_bytes(text.encode("utf-8", "surrogatepass"), "cut.yaml")
    assert results
    for result in results:
        assert result.valid == (not result.errors)


def test_a_named_pipe_as_spec_is_refused_not_waited_on(tmp_path) -> None:
    """Issue 16 O: a named pipe given as a spec made `validate` hang for ever."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "benchrun.cli", "validate", str(fifo)], capture_output=True,
                         text=True, timeout=60, cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)})
    assert out.returncode == 2 and "is a named pipe, not a file" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr
