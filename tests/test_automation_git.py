"""The git helpers and the commit window of the commit sensors, on real repositories made with git."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchrun.automation import git
from benchrun.automation.commits import commit_window
from benchrun.errors import BenchrunError
from test_automation_fixtures import GitRepo


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "repo")


def test_changed_files_lists_added_and_modified_specs_only(repo: GitRepo) -> None:
    root = repo.commit("root", {"specs/a.yaml": "a: 1\n", "README": "x\n"})
    assert [(c.status, c.path) for c in git.changed_files(repo.path, root, "specs")] == [("A", "specs/a.yaml")]
    c2 = repo.commit("edit a, add b, touch readme", {"specs/a.yaml": "a: 2\n", "specs/sub/b.yml": "b\n", "README": "y\n"})
    assert [(c.status, c.path) for c in git.changed_files(repo.path, c2, "specs")] == [
        ("M", "specs/a.yaml"), ("A", "specs/sub/b.yml")]
    c3 = repo.commit("delete a", remove=("specs/a.yaml",))
    assert git.changed_files(repo.path, c3, "specs") == []
    c4 = repo.commit("rename b", {"specs/sub/c.yml": "b\n"}, remove=("specs/sub/b.yml",))
    assert [(c.status, c.path) for c in git.changed_files(repo.path, c4, "specs")] == [("A", "specs/sub/c.yml")]


def test_read_blob_returns_committed_bytes_not_worktree(repo: GitRepo) -> None:
    sha = repo.commit("root", {"specs/a.yaml": b"committed\n"})
    repo.write("specs/a.yaml", "edited but not committed\n")
    assert git.read_blob(repo.path, sha, "specs/a.yaml") == b"committed\n"
    assert git.list_files(repo.path, sha, "specs") == ["specs/a.yaml"]
    assert git.commit_time(repo.path, sha) == repo.clock


def test_merge_commit_counts_once_against_first_parent(repo: GitRepo) -> None:
    base = repo.commit("root", {"README": "x\n"})
    repo.git("checkout", "-q", "-b", "feature")
    f1 = repo.commit("feature spec", {"specs/f.yaml": "f\n"})
    repo.commit("feature spec 2", {"specs/g.yaml": "g\n"})
    repo.git("checkout", "-q", "main")
    repo.commit("main readme", {"README": "y\n"})
    repo.clock += 1
    repo.git("merge", "-q", "--no-ff", "-m", "merge feature", "feature")
    merge = repo.head()
    commits = git.first_parent_commits(repo.path, merge, since=base)
    assert len(commits) == 2 and commits[-1] == merge and f1 not in commits
    assert [c.path for c in git.changed_files(repo.path, merge, "specs")] == ["specs/f.yaml", "specs/g.yaml"]


def test_git_errors_name_the_repository(tmp_path: Path) -> None:
    with pytest.raises(BenchrunError, match="not inside a git repository"):
        git.repo_root(tmp_path)
    with pytest.raises(BenchrunError, match="does not exist"):
        git.repo_root(tmp_path / "missing")


def test_window_first_tick_starts_at_head(repo: GitRepo) -> None:
    head = repo.commit("root", {"specs/a.yaml": "a\n"})
    w = commit_window(repo.path, "main", None, 25)
    assert w.commits == () and w.next_cursor == head and "first tick" in w.note


def test_window_lists_new_commits_oldest_first_then_nothing(repo: GitRepo) -> None:
    c0 = repo.commit("root")
    c1 = repo.commit("one", {"a": "1"})
    c2 = repo.commit("two", {"a": "2"})
    w = commit_window(repo.path, "main", c0, 25)
    assert w.commits == (c1, c2) and w.next_cursor == c2 and w.abandoned == ()
    again = commit_window(repo.path, "main", c2, 25)
    assert again.commits == () and again.next_cursor == c2 and "no new commits" in again.note


def test_window_caps_commits_per_tick_and_resumes(repo: GitRepo) -> None:
    c0 = repo.commit("root")
    shas = [repo.commit(f"c{i}", {"a": str(i)}) for i in range(5)]
    w = commit_window(repo.path, "main", c0, 2)
    assert w.commits == tuple(shas[:2]) and w.next_cursor == shas[1] and "3 more" in w.note
    w2 = commit_window(repo.path, "main", w.next_cursor, 2)
    assert w2.commits == tuple(shas[2:4])


def test_window_after_force_push_resumes_from_merge_base(repo: GitRepo) -> None:
    base = repo.commit("root")
    old = repo.commit("old tip", {"a": "old"})
    repo.git("reset", "-q", "--hard", base)
    new1 = repo.commit("rewritten 1", {"a": "new"})
    new2 = repo.commit("rewritten 2", {"b": "new"})
    w = commit_window(repo.path, "main", old, 25)
    assert w.commits == (new1, new2) and w.abandoned == (old,) and w.next_cursor == new2
    assert "rewritten" in w.note and base[:12] in w.note


def test_window_branch_moved_back_submits_nothing(repo: GitRepo) -> None:
    base = repo.commit("root")
    tip = repo.commit("tip", {"a": "1"})
    repo.git("reset", "-q", "--hard", base)
    w = commit_window(repo.path, "main", tip, 25)
    assert w.commits == () and w.abandoned == (tip,) and w.next_cursor == base


def test_window_unknown_cursor_restarts_at_head(repo: GitRepo) -> None:
    head = repo.commit("root")
    w = commit_window(repo.path, "main", "0" * 40, 25)
    assert w.commits == () and w.next_cursor == head and "not in the repository" in w.note


def test_window_missing_branch_is_a_clear_error(repo: GitRepo) -> None:
    repo.commit("root")
    with pytest.raises(BenchrunError, match="BENCHRUN_SPEC_BRANCH"):
        commit_window(repo.path, "release", None, 25)
