"""How long a commit-sensor or schedule tick takes: git queries, validation and pinning per spec.

Builds a throwaway git repository whose commits each change one spec (copies of the
repository's example spec under new names), then times, each repeated and reported as
median and max wall seconds:

* ``idle``        spec_commit_tick with no new commit (what most ticks are)
* ``25 commits``  spec_commit_tick over 25 new commits (the per-tick cap), one spec each
* ``canary x25``  canary_tick over the same 25 commits with 5 canary specs in the tree
* ``nightly 10``  cadence_tick over a folder of 10 nightly specs (what a schedule tick does)

Usage: .venv/bin/python benchmarks/sensor_tick.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import tempfile
from pathlib import Path

import yaml

from benchrun.automation.settings import RepoWatch
from benchrun.automation.ticks import canary_tick, cadence_tick, prepare_register, spec_commit_tick
from _timing import timed  # benchmarks/_timing.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "specs" / "examples" / "publication-inference-stack-b200.yaml"


def spec(name: str, cadence: str) -> bytes:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = name
    doc["spec"]["intent"]["cadence"] = cadence
    doc["spec"]["automation"]["ci"] = {"canary": cadence == "canary", "nightly": cadence == "nightly",
                                       "preRelease": cadence == "pre_release"}
    return yaml.safe_dump(doc, sort_keys=False).encode()


_CLOCK = [1_790_000_000]


def git(repo: Path, *args: str) -> str:
    # One commit a minute, like merges to main: commits in the same second with the same
    # canary bytes would share one run id (<name>-<time>-<digest>) and run once.
    stamp = f"@{_CLOCK[0]} +0000"
    env = {**os.environ, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def commit(repo: Path, files: dict[str, bytes], message: str) -> str:
    for rel, data in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    _CLOCK[0] += 60
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        os.environ["BENCHRUN_HOME"] = str(tmpdir / "home")
        repo = tmpdir / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        git(repo, "config", "user.email", "bench@example.invalid")
        git(repo, "config", "user.name", "bench")
        start = commit(repo, {f"specs/canary/c{i}.yaml": spec(f"canary-{i}", "canary") for i in range(5)}, "root")
        for i in range(25):
            commit(repo, {f"specs/nightly/n{i}.yaml": spec(f"nightly-{i}", "nightly")}, f"spec {i}")
        head = git(repo, "rev-parse", "HEAD")
        watch = RepoWatch(repo=repo, branch="main", specs_under="specs", max_commits=25)
        register = prepare_register(None)

        def check_count(outcome, expected: int):
            assert len(outcome.submissions) == expected, (len(outcome.submissions), outcome.skip_reason())

        rows = [
            ("idle (no new commit)", timed(lambda: check_count(spec_commit_tick(watch, head, register), 0), args.repeats)),
            ("spec_commit: 25 commits, 1 spec each",
             timed(lambda: check_count(spec_commit_tick(watch, start, register), 25), args.repeats)),
            ("canary: 25 commits x 5 canary specs",
             timed(lambda: check_count(canary_tick(watch, start, register), 125), args.repeats)),
            ("nightly schedule: 10 nightly specs", timed(lambda: check_count(cadence_tick(
                "nightly", _folder(tmpdir), dt.datetime(2026, 9, 21, 3, 15, tzinfo=dt.timezone.utc), register), 10),
                args.repeats)),
        ]
    print(f"{'tick':42} {'median s':>9} {'max s':>9}   (repeats={args.repeats})")
    for name, (med, worst) in rows:
        print(f"{name:42} {med:9.3f} {worst:9.3f}")


def _folder(tmpdir: Path) -> Path:
    folder = tmpdir / "nightly-specs"
    if not folder.exists():
        folder.mkdir()
        for i in range(10):
            (folder / f"n{i}.yaml").write_bytes(spec(f"sched-{i}", "nightly"))
    return folder


if __name__ == "__main__":
    main()
