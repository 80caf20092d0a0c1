"""Spec discovery: which documents a cadence runs, and invalid ones reported with their errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchrun.automation.discovery import check_cadence, discover, documents_at_commit, is_spec_path
from benchrun.errors import BenchrunError
from test_automation_fixtures import GitRepo, invalid_spec_bytes, spec_bytes


@pytest.fixture
def specs_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    files = {
        "nightly/a.yaml": spec_bytes("nightly-a", "nightly"),
        "nightly/deep/b.yml": spec_bytes("nightly-b", "nightly"),
        "nightly/off.yaml": spec_bytes("nightly-off", "nightly", nightly=False, canary=True),
        "canary.yaml": spec_bytes("canary-a", "canary"),
        "pre.yaml": spec_bytes("pre-a", "pre_release"),
        "broken.yaml": invalid_spec_bytes("broken"),
        "crd/benchmarkrun-crd.yaml": b"kind: CustomResourceDefinition\n",
        "notes.md": b"# not a spec\n",
        ".hidden.yaml": b"junk: [\n",
    }
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return folder


def test_nightly_selects_documents_with_cadence_and_switch(specs_dir: Path) -> None:
    found = discover("nightly", specs_dir)
    assert [s.path for s in found.selected] == ["nightly/a.yaml", "nightly/deep/b.yml"]
    assert [s.name for s in found.selected] == ["nightly-a", "nightly-b"]
    # intent.cadence nightly but ci.nightly false: valid, not run
    assert "nightly/off.yaml" in [s.path for s in found.other]
    assert sorted(s.path for s in found.other) == ["canary.yaml", "nightly/off.yaml", "pre.yaml"]


def test_invalid_document_is_reported_with_every_error(specs_dir: Path) -> None:
    found = discover("canary", specs_dir)
    assert [s.path for s in found.selected] == ["canary.yaml"]
    assert [b.path for b in found.invalid] == ["broken.yaml"]
    errors = found.invalid[0].errors
    assert any(e.startswith("spec.intent.cadence (line ") and "weekly" in e for e in errors)
    assert any(e.startswith("spec.trials.minReplicates (line ") for e in errors)
    assert "broken.yaml: " in found.invalid[0].describe()


def test_pre_release_uses_the_prerelease_switch(specs_dir: Path) -> None:
    assert [s.path for s in discover("pre-release", specs_dir).selected] == ["pre.yaml"]


def test_crd_folder_hidden_files_and_other_suffixes_are_not_specs() -> None:
    assert is_spec_path("specs/a.yaml", "specs") and is_spec_path("specs/x/b.yml", "specs")
    assert not is_spec_path("specs/crd/benchmarkrun.yaml", "specs")
    assert is_spec_path("specs/x/crd/b.yaml", "specs")  # only the top-level crd/ is excluded
    assert not is_spec_path("other/a.yaml", "specs")
    assert not is_spec_path("specs/readme.md", "specs")


def test_unknown_cadence_and_missing_folder_are_clear_errors(tmp_path: Path) -> None:
    assert check_cadence("Pre-Release") == "pre_release"
    with pytest.raises(BenchrunError, match="use one of canary, nightly, pre_release"):
        check_cadence("weekly")
    with pytest.raises(BenchrunError, match="--specs"):
        discover("nightly", tmp_path / "nope")
    one = tmp_path / "canary.yaml"  # a spec file given for the folder read "does not exist"
    one.write_bytes(spec_bytes("a"))
    with pytest.raises(BenchrunError, match=r"is a file: --specs takes the folder .*`benchrun submit .*canary.yaml`"):
        discover("nightly", one)


def test_documents_at_commit_read_the_committed_tree(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    sha = repo.commit("specs", {"specs/a.yaml": spec_bytes("a"), "specs/crd/c.yaml": b"x: 1\n", "b.yaml": b"y\n"})
    repo.write("specs/a.yaml", b"changed after the commit\n")
    docs = documents_at_commit(repo.path, sha, "specs")
    assert [d.path for d in docs] == ["specs/a.yaml"]
    assert docs[0].data == spec_bytes("a") and docs[0].source.endswith(f"@{sha[:12]}:specs/a.yaml")


def test_long_skip_reasons_are_cut_at_a_message_boundary() -> None:
    from benchrun.automation.ticks import SKIP_REASON_MAX, TickOutcome

    out = TickOutcome(notes=[f"commit {i:040d} touches no spec under specs/" for i in range(200)])
    text = out.skip_reason()
    assert len(text) < SKIP_REASON_MAX + 80
    assert text.startswith("commit " + "0" * 40) and text.endswith("(200 messages in all: see the tick log)")
    assert TickOutcome().skip_reason() == "nothing to submit"


def test_an_adhoc_experiment_is_never_picked_up_by_a_cadence(tmp_path: Path) -> None:
    """Issue 26 item 2: `intent.cadence: adhoc` (a one-off experiment) is valid, runs on request
    only, and no schedule or spec sensor selects it, even with every CI switch on."""
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "exp.yaml").write_bytes(spec_bytes("exp", "adhoc", canary=True, nightly=True, pre_release=True))
    for cadence in ("canary", "nightly", "pre_release"):
        found = discover(cadence, folder)
        assert found.selected == () and found.invalid == () and [s.path for s in found.other] == ["exp.yaml"]
    with pytest.raises(BenchrunError, match="unknown cadence 'adhoc'"):
        check_cadence("adhoc")
