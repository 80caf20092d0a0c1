"""The layering of the product code, read from its source with ``ast`` (nothing is imported):
no import circle, nothing in ``benchrun/`` imports the Dagster shell, automation depends on
submission and not the reverse, the foundation imports nothing above it, a suite pod's code stays
on the pod side, and file primitives come from ``benchrun.fsio``.

Every import counts, deferred ones inside functions and ``TYPE_CHECKING`` ones included: a
deferred import keeps a circle working, it does not remove it. docs/architecture.md describes
the layers this test enforces.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The Dagster shell: the code location, its resources, schedules and sensors. They import
# benchrun; benchrun never imports them.
SHELL = ("bench_assets", "resources", "sensors", "schedules")
PACKAGES = ("benchrun", *SHELL)
# What benchrun.suites.result may still be imported for: the result format, not file writes.
FILE_PRIMITIVES = frozenset({"atomic_path", "atomic_write_bytes", "atomic_write_text", "atomic_write_json",
                             "create_once", "fsync_dir"})


def module_names(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` under ``packages``."""
    out: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str, int]]:
    """``(imported product module, imported names, line)`` for every import in the file, at any
    depth of the syntax tree. ``from pkg import x`` is an edge to ``pkg.x`` when that is a module,
    else to ``pkg``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    out: list[tuple[str, str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name, modules)
                if target:
                    out.append((target, "", node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    out.append((sub, "", node.lineno))
                else:
                    target = _known(base, modules)
                    if target:
                        out.append((target, alias.name, node.lineno))
    return out


def _known(dotted: str, modules: dict[str, Path]) -> str | None:
    """The product module ``dotted`` names, or its nearest product parent; None outside."""
    parts = dotted.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, dict[str, list[tuple[str, int]]]]:
    """module -> {imported module -> [(imported name, line)]} over the product modules, walked in
    a fresh interpreter: CPython 3.11's ``ast.parse`` raises "AST constructor recursion depth
    mismatch" in a process where an earlier test hit a RecursionError (seen in a pytest-xdist
    worker), which would fail these tests for another test's reason."""
    code = ("import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "from test_layering import walk_imports; "
            "print(json.dumps(walk_imports(Path(sys.argv[2]), tuple(sys.argv[3:]))))")
    proc = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(root), *packages],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    raw = json.loads(proc.stdout)
    return {m: {t: [(imp, line) for imp, line in v] for t, v in edges.items()} for m, edges in raw.items()}


def walk_imports(root: Path, packages: tuple[str, ...]) -> dict[str, dict[str, list[tuple[str, int]]]]:
    """The walk behind :func:`import_graph`, in this process."""
    modules = module_names(root, packages)
    graph: dict[str, dict[str, list[tuple[str, int]]]] = {}
    for name, path in modules.items():
        edges: dict[str, list[tuple[str, int]]] = {}
        for target, imported, line in imports_of(name, path, modules):
            if target != name:
                edges.setdefault(target, []).append((imported, line))
        graph[name] = edges
    return graph


def circles(graph: dict[str, dict[str, list[tuple[str, int]]]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    for start in sorted(graph):
        if start in index:
            continue
        # Iterative Tarjan: (node, iterator over its successors).
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in graph:
                    continue
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(graph, component: list[str]) -> str:
    members = set(component)
    lines = [f"  {a} -> {b} (line {graph[a][b][0][1]})" for a in component for b in sorted(graph[a]) if b in members]
    return "circle of " + ", ".join(component) + ":\n" + "\n".join(lines)


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.fixture(scope="module")
def graph():
    return import_graph(ROOT, PACKAGES)


def test_the_walk_sees_the_product(graph):
    # A walk that finds nothing passes everything: check it sees what is known to be there.
    assert len(graph) > 150
    assert "benchrun.submit" in graph["benchrun.automation.ticks"]  # a deferred import
    assert "benchrun.submit" in graph["benchrun.commands"]  # `from benchrun import submit as sub`
    assert "benchrun.spec.validation" in graph["benchrun.spec"]  # the package's lazy exports


def test_no_import_circle(graph):
    found = circles(graph)
    assert not found, "\n".join(_describe(graph, c) for c in found)


def test_benchrun_never_imports_the_shell(graph):
    bad = [f"{a} imports {b} (line {lines[0][1]})" for a, edges in graph.items() if _in(a, "benchrun")
           for b, lines in edges.items() if any(_in(b, shell) for shell in SHELL)]
    assert not bad, "\n".join(bad)


def test_submission_does_not_depend_on_automation(graph):
    # Automation (schedule and sensor ticks) submits through benchrun.submit: never the reverse.
    assert "benchrun.submit" in graph["benchrun.automation.ticks"]
    reach = _reachable(graph, "benchrun.submit")
    assert not [m for m in reach if _in(m, "benchrun.automation")], sorted(reach)


# The foundation: what every layer may import; it imports nothing of the product above it.
FOUNDATION = {"benchrun.errors": set(), "benchrun.fsio": set(), "benchrun._lazy": set(), "benchrun.console": set(),
              "benchrun.paths": {"benchrun.errors"}, "benchrun.urlsafe": set()}
# What a suite pod imports (`python -m benchrun.suites.<name>` in the benchmark image): the suites,
# the load generator, the readers of other tools' outputs, environment capture and the foundation,
# never the orchestrator's side (Dagster, the warehouse, the launchers).
POD_SIDE = ("benchrun.suites", "benchrun.loadgen", "benchrun.ingest", "benchrun.envcapture", "benchrun.harness",
            *FOUNDATION)


def test_the_foundation_imports_nothing_above_it(graph):
    bad = [f"{name} imports {target}" for name, allowed in FOUNDATION.items()
           for target in graph[name] if target not in allowed]
    assert not bad, "\n".join(bad)


def test_what_a_suite_pod_imports_stays_on_the_pod_side(graph):
    starts = [m for m in graph if any(_in(m, side) for side in POD_SIDE)]
    assert "benchrun.suites.gemm" in starts and "benchrun.loadgen.client" in starts
    bad = sorted({f"{m} reaches {r}" for m in starts for r in _reachable(graph, m)
                  if not any(_in(r, side) for side in POD_SIDE)})
    assert not bad, "\n".join(bad)


# Modules over the size limit that other branches of the same issue split or explain.
SIZE_PENDING: set[str] = set()  # modules being split elsewhere (none now)
SIZE_LIMIT = 600


def test_a_module_over_600_lines_says_why_in_its_first_lines():
    bad = []
    for name, path in module_names(ROOT, PACKAGES).items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") <= SIZE_LIMIT or name in SIZE_PENDING:
            continue
        head = "\n".join(text.splitlines()[:8])
        if f"Over {SIZE_LIMIT} lines" not in head:
            bad.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines; split it along its seams or say "
                       f"why in its first lines ('Over {SIZE_LIMIT} lines on purpose: ...')")
    assert not bad, "\n".join(bad)


def result_primitive_imports(graph) -> list[str]:
    """Every import of a file primitive from benchrun.suites.result (they live in benchrun.fsio)."""
    return [f"{name} imports {what} from benchrun.suites.result (line {line}): import it from benchrun.fsio"
            for name, edges in sorted(graph.items())
            for what, line in edges.get("benchrun.suites.result", [])
            if what in FILE_PRIMITIVES]


def test_file_primitives_come_from_fsio(graph):
    bad = result_primitive_imports(graph)
    assert not bad, "\n".join(bad)


def test_the_cli_finds_the_shell_by_the_workspace_name():
    # benchrun reaches the code location only by the name workspace.yaml gives (as Dagster
    # does); the default for an installed package without workspace.yaml is that same name.
    import yaml

    from benchrun import submit

    entry = yaml.safe_load((ROOT / "workspace.yaml").read_text())["load_from"][0]["python_module"]
    assert submit.CODE_LOCATION == (entry["module_name"], entry["attribute"])
    assert submit.WORKSPACE == ROOT / "workspace.yaml"


def test_a_broken_workspace_is_named(tmp_path, monkeypatch):
    from benchrun import submit
    from benchrun.errors import BenchrunError

    broken = tmp_path / "workspace.yaml"
    broken.write_text("load_from: []\n")
    monkeypatch.setattr(submit, "WORKSPACE", broken)
    with pytest.raises(BenchrunError, match="workspace.yaml: no load_from"):
        submit.code_location()


def _reachable(graph, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        for succ in graph.get(node, {}):
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return seen


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_deliberate_circle_is_caught(tmp_path):
    # A package whose modules point down, then one deferred import pointing back up.
    root = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "import os\n",
        "pkg/mid.py": "from pkg.low import x\n",
        "pkg/top.py": "from pkg import mid\nfrom . import low\n",
    })
    assert circles(import_graph(root, ("pkg",))) == []
    (root / "pkg" / "low.py").write_text("def f():\n    from pkg.top import g\n    return g\n")
    assert circles(import_graph(root, ("pkg",))) == [["pkg.low", "pkg.mid", "pkg.top"]]


def test_a_circle_through_a_package_and_relative_imports_is_caught(tmp_path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "from .a import A\n",
        "pkg/sub/a.py": "A = 1\n",
        "pkg/b.py": "from pkg.sub import A\n",
    })
    assert circles(import_graph(root, ("pkg",))) == []
    (root / "pkg" / "sub" / "a.py").write_text("from ..b import thing\n")
    assert circles(import_graph(root, ("pkg",))) == [["pkg.b", "pkg.sub", "pkg.sub.a"]]


def test_a_shell_import_and_a_file_primitive_from_result_are_caught(tmp_path):
    root = _tree(tmp_path, {
        "benchrun/__init__.py": "",
        "benchrun/x.py": "def run():\n    from bench_assets.definitions import defs\n",
        "bench_assets/__init__.py": "",
        "bench_assets/definitions.py": "from benchrun import x\n",
    })
    graph = import_graph(root, ("benchrun", "bench_assets"))
    assert "bench_assets.definitions" in graph["benchrun.x"]
    assert circles(graph) == [["bench_assets.definitions", "benchrun.x"]]
    _tree(root, {"benchrun/suites/__init__.py": "", "benchrun/suites/result.py": "def atomic_path(): ...\n",
                 "benchrun/y.py": "from benchrun.suites.result import SuiteResult, atomic_path\n"})
    assert result_primitive_imports(import_graph(root, ("benchrun",))) == [
        "benchrun.y imports atomic_path from benchrun.suites.result (line 1): import it from benchrun.fsio"]
