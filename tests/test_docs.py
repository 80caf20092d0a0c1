"""The README and docs/ stay true: the quickstart is short, every link resolves, and every
shell block (```sh, ```shell, ```bash) runs here as written, unless the line before it says
why it cannot (``<!-- not run in tests: REASON -->``: `make test` itself, a cluster, a
placeholder run id)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
SHELL = ("sh", "shell", "bash")
NOT_RUN = re.compile(r"<!-- not run in tests: (\S.*?) -->\s*$")


def _shell_blocks() -> list[tuple[Path, str, str | None]]:
    """Every shell block of README and docs/: (page, block, the reason it is not run, or None)."""
    out = []
    for p in DOCS:
        text = p.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            if m.group(1) in SHELL:
                before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
                reason = NOT_RUN.search(before)
                out.append((p, m.group(2), reason.group(1) if reason else None))
    return out


def _blocks() -> list[tuple[Path, str]]:
    """The shell blocks that run here."""
    return [(p, b) for p, b, why in _shell_blocks() if why is None]


def test_the_quickstart_is_short_and_names_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 60
    assert "make run" in text and "make test" in text


def test_every_relative_link_resolves():
    broken = []
    for page in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+://", target):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


@pytest.mark.parametrize("page,block", _blocks(), ids=lambda v: v.name if isinstance(v, Path) else "")
def test_every_shell_block_runs_as_written(page, block, tmp_path):
    if not (ROOT / ".venv" / "bin" / "benchrun").exists():
        pytest.skip("unavailable: no .venv (make test creates it)")
    env = {**os.environ, "BENCHRUN_HOME": str(tmp_path / "home"), "BENCHRUN_WARM": "0"}
    env.pop("DAGSTER_HOME", None)
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"{page.relative_to(ROOT)}:\n{block}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"


def test_there_are_shell_blocks_to_run_and_every_other_says_why():
    blocks = _shell_blocks()
    assert len([b for b in blocks if b[2] is None]) >= 2
    # a fence labelled shell holds commands: not YAML, not a properties file (label those as what they are)
    for page, block, _ in blocks:
        first = next(line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#"))
        assert not re.match(r"\s*[\w.-]+(:\s|=)", first) or first.split()[0].isupper(), (page.name, first)


@pytest.mark.slow
def test_the_schedule_start_command_of_docs_dagster_runs_as_written(tmp_path):
    """Issue 26 (first-run rough edge): docs/dagster.md's `dagster schedule start` example failed
    (a relative DAGSTER_HOME); run it as written, from a checkout whose instance `make ui` made."""
    import dagster as dg
    from dagster._core.scheduler.instigation import InstigatorStatus

    text = (ROOT / "docs" / "dagster.md").read_text(encoding="utf-8")
    [command] = re.findall(r"`(DAGSTER_HOME=\S+ \.venv/bin/dagster schedule start \w+)`", text)
    if not (ROOT / ".venv" / "bin" / "dagster").exists():
        pytest.skip("unavailable: no .venv (make test creates it)")
    checkout = tmp_path / "checkout"  # the checkout's files, with its own .benchrun
    checkout.mkdir()
    for name in ("workspace.yaml", "bench_assets", "benchrun", ".venv", "specs", "dagster.yaml"):
        if (ROOT / name).exists():
            (checkout / name).symlink_to(ROOT / name)
    from benchrun.submit import get_instance

    get_instance(checkout / ".benchrun")
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "BENCHRUN_HOME")}
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=checkout, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "Started schedule" in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
    with dg.DagsterInstance.from_config(str(checkout / ".benchrun" / "dagster_home")) as instance:
        states = [s for s in instance.all_instigator_state() if s.name == command.split()[-1]]
        assert states and states[0].status == InstigatorStatus.RUNNING
