"""`benchrun validate`, `benchrun digest` and `benchrun crd` through the real typer app."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from benchrun.cli import app
from benchrun.errors import BenchrunError
from benchrun.spec import load_spec
from benchrun.spec.crd import crd_yaml

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "specs/examples/publication-inference-stack-b200.yaml"
runner = CliRunner()


def bad_copy(tmp_path: Path) -> Path:
    text = SEED.read_text().replace("minReplicates: 5", "minReplicate: 5").replace("cadence: pre_release", "cadence: weekly")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


def test_validate_valid_folders_exit_0() -> None:
    result = runner.invoke(app, ["validate", str(ROOT / "specs")])
    assert result.exit_code == 0, result.output
    assert "11 document(s): 11 valid, 0 with errors" in result.output
    assert "skip    " in result.output and "benchmarkrun-crd.yaml" in result.output


def test_validate_invalid_exit_1_lists_every_error(tmp_path: Path) -> None:
    bad = bad_copy(tmp_path)
    result = runner.invoke(app, ["validate", str(SEED), str(bad)])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    text = bad.read_text()
    def line(needle: str) -> int:
        return text[: text.index(needle)].count("\n") + 1
    assert f"  {bad}:{line('cadence: weekly')}: spec.intent.cadence: is 'weekly'; must be one of canary, nightly, pre_release, adhoc" in lines
    assert f"  {bad}:{line('minReplicate: 5')}: spec.trials.minReplicate: unknown key 'minReplicate' (did you mean 'minReplicates'?)" in lines
    assert any(l.startswith(f"  {bad}:") and "spec.trials.minReplicates: required key" in l for l in lines)
    assert "2 document(s): 1 valid, 1 with errors" in result.output


def test_validate_json(tmp_path: Path) -> None:
    bad = bad_copy(tmp_path)
    result = runner.invoke(app, ["validate", "--json", str(SEED), str(bad)])
    assert result.exit_code == 1
    good, invalid = [json.loads(l) for l in result.output.splitlines()]
    assert set(good) == {"valid", "file", "errors", "warnings", "summary"}
    assert good["valid"] is True and good["errors"] == []
    assert good["summary"]["specDigest"] == load_spec(SEED).spec_digest
    assert good["summary"]["layers"]["micro"] == {"enabled": True, "suites": 3}
    assert invalid["valid"] is False and invalid["file"] == str(bad)
    assert {e["path"] for e in invalid["errors"]} == {"spec.intent.cadence", "spec.trials.minReplicate", "spec.trials.minReplicates"}
    assert all(set(e) == {"path", "line", "message"} and isinstance(e["line"], int) for e in invalid["errors"])


def test_validate_unreadable_or_not_yaml_exit_2(tmp_path: Path) -> None:
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)))
    (tmp_path / "syntax.yaml").write_text("spec: [\n")
    for path in (tmp_path / "missing.yaml", tmp_path / "binary.yaml", tmp_path / "syntax.yaml"):
        result = runner.invoke(app, ["validate", str(SEED), str(path)])
        assert result.exit_code == 2, (path, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.output
    result = runner.invoke(app, ["validate", "--json", str(tmp_path / "syntax.yaml")])
    [doc] = [json.loads(l) for l in result.output.splitlines()]
    assert doc["errors"][0]["line"] == 2 and "not valid YAML" in doc["errors"][0]["message"]


def test_validate_refuses_a_file_of_two_documents_as_run_and_digest_do(tmp_path: Path) -> None:
    two = tmp_path / "two.yaml"
    two.write_text(SEED.read_text() + "\n---\n" + SEED.read_text())
    result = runner.invoke(app, ["validate", str(two)])
    assert result.exit_code == 2 and "holds 2 YAML documents; a spec file holds exactly one BenchmarkRun" in result.output
    assert "valid   " not in result.output
    digest = runner.invoke(app, ["digest", str(two)])
    assert isinstance(digest.exception, BenchrunError) and digest.exception.exit_code == 2
    assert "holds 2 YAML documents; a spec file holds exactly one BenchmarkRun" in str(digest.exception)


def test_validate_empty_file_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_bytes(b"")
    result = runner.invoke(app, ["validate", str(tmp_path / "empty.yaml")])
    assert result.exit_code == 1 and "holds no YAML document" in result.output


def test_digest() -> None:
    loaded = load_spec(SEED)
    result = runner.invoke(app, ["digest", str(SEED)])
    assert result.exit_code == 0
    assert result.output.split() == ["spec_digest", loaded.spec_digest, "workload_spec_digest", loaded.workload_spec_digest]
    result = runner.invoke(app, ["digest", "--json", str(SEED)])
    assert json.loads(result.output)["workload_spec_digest"] == loaded.workload_spec_digest


def test_digest_of_an_invalid_spec_is_a_user_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["digest", str(bad_copy(tmp_path))])
    assert isinstance(result.exception, BenchrunError) and result.exception.exit_code == 2
    assert "spec.intent.cadence" in str(result.exception)


def test_crd_command_prints_the_committed_crd() -> None:
    result = runner.invoke(app, ["crd"])
    assert result.exit_code == 0
    assert result.output == crd_yaml() == (ROOT / "specs/crd/benchmarkrun-crd.yaml").read_text()


def test_console_entry_point_prints_one_line_not_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from benchrun.cli import main; main()", "digest", str(bad_copy(tmp_path))],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and "spec.trials.minReplicate" in proc.stderr


def _limit_memory() -> None:
    # 1 GiB of address space: a validator that reads a device or a huge file whole fails here
    # with a MemoryError traceback instead of eating the machine.
    resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))


def test_validate_endless_huge_and_unusable_paths_exit_2_without_a_traceback(tmp_path: Path) -> None:
    sparse = tmp_path / "huge.yaml"
    with sparse.open("wb") as fh:
        fh.truncate(64 * 2**20)  # 64 MiB of NULs, no disk used
    long_name = tmp_path / ("x" * 300 + ".yaml")  # longer than any file system allows (ENAMETOOLONG)
    cases = {
        "/dev/zero": "more than 1048576 bytes",
        str(sparse): "more than 1048576 bytes",
        str(long_name): "cannot read the file (File name too long)",
    }
    for path, needle in cases.items():
        for command in ("validate", "digest"):
            proc = subprocess.run(
                [sys.executable, "-c", "from benchrun.cli import main; main()", command, path],
                capture_output=True, text=True, timeout=120, cwd=ROOT, preexec_fn=_limit_memory,
            )
            assert proc.returncode == 2, (command, path, proc.stdout, proc.stderr)
            assert "Traceback" not in proc.stderr, (command, path, proc.stderr)
            assert needle in proc.stdout + proc.stderr, (command, path, proc.stdout, proc.stderr)


def test_validate_json_is_strict_json_whatever_the_values(tmp_path: Path) -> None:
    text = SEED.read_text().replace("benchmarkClass: publication_grade", "benchmarkClass: .nan")
    text = text.replace("name: publication-inference-stack-b200", "name: -.inf", 1).replace("enabled: true", "enabled: .inf", 1)
    (tmp_path / "odd.yaml").write_text(text)
    result = runner.invoke(app, ["validate", "--json", str(tmp_path / "odd.yaml")])
    assert result.exit_code == 1

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    [doc] = [json.loads(line, parse_constant=refuse) for line in result.output.splitlines()]
    assert doc["summary"]["benchmarkClass"] == "nan" and doc["summary"]["name"] == "-inf"
    assert doc["summary"]["layers"]["micro"]["enabled"] == "inf"
    assert {e["path"] for e in doc["errors"]} == {"metadata.name", "spec.intent.benchmarkClass", "spec.layers[0].enabled"}
