"""Readers of a run directory for statistics: replicate table, run identity, spec settings, requests.

Everything here reads the run directory (CONTRACT.md §4) directly, so the statistics do
not depend on the warehouse being built first. A run is named by a run id, a path to its
directory, or the alias ``published/current`` (set by ``benchrun promote``).
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchrun.errors import BenchrunError
from benchrun.paths import home_location, parse_result_name, validate_run_id
from benchrun.spec.refs import ALIAS_REF, RUN_REF, baseline_ref_problem, fill_site_placeholder
from benchrun.stats.directions import read_direction
from benchrun.suites.result import read_result

if TYPE_CHECKING:  # pandas is heavy; imported inside the functions that need it
    import pandas as pd

log = logging.getLogger(__name__)

REPLICATE_COLUMNS = ("suite", "case", "metric", "unit", "direction", "replicate", "value", "status")
ALIAS = "published/current"
DEFAULT_DELTA_PCT = 3.0
DEFAULT_CONFIDENCE = 0.95
DEFAULT_MIN_REPLICATES = 3


def _refuse_links(run_dir: Path, sub: str, files: list[Path]) -> list[Path]:
    """``files`` (under ``run_dir/sub``), or a BenchrunError naming the first that is a symbolic link
    (or lies in a linked folder): a glob follows links, so a link dropped in beside the evidence was
    read as a measurement, while the store, the manifest and the signature skip links (the evidence is
    the bytes in the run directory)."""
    folder = run_dir / sub
    links = ([folder] if folder.is_symlink() else []) + [p for p in files if p.is_symlink()]
    if links:
        p = links[0]
        raise BenchrunError(f"{p}: a symbolic link (to {os.readlink(p)}), not a file of the run: a measurement "
                            "is read only from the run directory's own files (links are never stored, sealed "
                            "or signed); remove the link, or restore the file from the stored evidence")
    return files


def _result_files(run_dir: Path, run_id: str) -> list[Path]:
    return _refuse_links(run_dir, "structured", [p for p in sorted((run_dir / "structured").glob(f"{run_id}_*_r*.json"))
                                                 if parse_result_name(p.name, run_id) is not None])


def _request_files(rd: Path) -> list[Path]:
    return _refuse_links(rd, "raw", sorted((rd / "raw").glob(f"{rd.name}_*_r*_requests.parquet")))


def analysed_files(run_dir: str | os.PathLike[str]) -> list[str]:
    """Run-relative paths of the files a comparison reads as measurements: the suite result
    documents, the per-request records and the launch record. Each must be in the sealed
    manifest (``admit.manifest_problems``): a file added after sealing is not evidence."""
    rd = Path(run_dir)
    files = [*_result_files(rd, rd.name), *_request_files(rd)]
    record = rd / "structured" / f"{rd.name}_launches.json"
    return [p.relative_to(rd).as_posix() for p in [*files, *([record] if record.is_file() else [])]]


def suite_results(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every suite result document of a run (all statuses), checked by ``read_result``."""
    rd = Path(run_dir)
    run_id = rd.name
    docs = []
    for p in _result_files(rd, run_id):
        try:
            doc = read_result(p)
        except ValueError as exc:
            raise BenchrunError(f"{exc}; fix or remove the file and re-run the analysis") from exc
        doc["_path"] = str(p.relative_to(rd))
        docs.append(doc)
    return docs


def launch_statuses(run_dir: str | os.PathLike[str]) -> dict[tuple[str, int], str] | None:
    """(suite, replicate) → how the launcher says each replicate ended (``ok``, ``failed``,
    ``unavailable``), from ``structured/<run>_launches.json``; None where the run has no launch
    record (runs fabricated from the documented format). The record decides over a result
    document: a suite that wrote an ok document and was then killed at its timeout failed, and a
    replicate killed before it wrote anything has no document at all. A record that is not
    readable is an error naming it (failures must not vanish with it)."""
    rd = Path(run_dir)
    path = rd / "structured" / f"{rd.name}_launches.json"
    if not path.is_file():
        return None
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchrunError(f"{path}: the launch record is not readable JSON ({exc}); restore it from the "
                            "stored evidence") from None
    if not isinstance(rows, list):
        raise BenchrunError(f"{path}: the launch record is not a list of launches; restore it from the stored evidence")
    out: dict[tuple[str, int], str] = {}
    for row in rows:
        try:
            out[(str(row["suite"]), int(row["replicate"]))] = str(row["status"])
        except (TypeError, KeyError, ValueError):
            raise BenchrunError(f"{path}: a launch without suite, replicate and status ({row!r}); restore it from "
                                "the stored evidence") from None
    return out


def launch_decides(status: Any, said: str | None) -> Any:
    """A result document's status as every reader takes it: the launcher's word (``said``, from
    :func:`launch_statuses`; None: no record of it) decides, so a suite that wrote ok and was then
    killed at its timeout failed."""
    if said is None or said == status:
        return status
    return said if said in ("failed", "unavailable") else "failed"


def replicate_table(run_dir: str | os.PathLike[str], *, include_failed: bool = False,
                    docs: list[dict[str, Any]] | None = None) -> "pd.DataFrame":
    """One row per replicate per metric of the run's ok suite results.

    Columns: suite, case, metric, unit, direction, replicate, value, status (``ok``: failed
    and unavailable replicates have no values). With ``include_failed``, each failed
    replicate of a suite adds one row with its status (``failed``), an empty metric and a
    NaN value, so a comparison can count failures per arm instead of silently keeping only
    the launches that survived; each ok replicate that reported no metric at all adds one such
    row with status ``ok`` (it launched ok and measured nothing). An ``unavailable`` replicate of a suite that other replicates
    of the same run measured counts as failed too: the device was there and went away (a
    suite unavailable in every replicate — no GPU on this host — is not a failure). Several rows for one
    (suite, case, metric, replicate) — per-rank values, told apart by ``rank_id``, ``node_name`` or
    ``gpu_uuid`` (rows that nothing tells apart are an error naming the file) — are summarised by their median
    (:func:`benchrun.stats.perlaunch.launch_value`'s rule, vectorised; ``benchrun show --all`` applies it too),
    because a replicate (one launch) is the unit of replication, never a rank or sample.
    ``docs``: the run's :func:`suite_results`, when the caller has read them already.
    """
    import pandas as pd

    rows = []
    failed = []

    def fail(suite: str, replicate: int) -> None:
        if include_failed:
            failed.append({"suite": suite, "case": "", "metric": "", "unit": "", "direction": "",
                           "replicate": replicate, "value": float("nan"), "status": "failed"})

    launched = launch_statuses(run_dir)
    labels: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}
    seen: set[tuple[str, int]] = set()
    unavailable: list[tuple[str, int]] = []
    measured: set[str] = set()
    for doc in suite_results(run_dir) if docs is None else docs:
        key = (str(doc.get("suite")), int(doc.get("replicate", 0)))
        seen.add(key)
        status = launch_decides(doc.get("status"), None if launched is None else launched.get(key))
        if status != "ok":
            if status == "failed":
                fail(*key)
            elif status == "unavailable":
                unavailable.append(key)
            continue
        measured.add(key[0])
        if include_failed and not doc.get("metrics"):
            # an ok launch that reported no metric at all still launched ok: a value-less marker row, so
            # the comparison's per-suite ok counts (admit.measured_rows, _partly_reported) see it
            failed.append({"suite": key[0], "case": "", "metric": "", "unit": "", "direction": "",
                           "replicate": key[1], "value": float("nan"), "status": "ok"})
        for m in doc.get("metrics", []):
            _label_once(labels, doc, m, Path(run_dir))
            rows.append(
                {
                    "suite": str(doc.get("suite")),
                    "case": str(m.get("case") or ""),
                    "metric": str(m["name"]),
                    "unit": str(m.get("unit") or ""),
                    # host CPU utilization has none (benchrun.stats.directions), whatever the row says
                    "direction": read_direction(m.get("case"), m["name"], m["direction"]),
                    "replicate": int(doc.get("replicate", 0)),
                    "value": float(m["value"]),
                    "status": "ok",
                }
            )
    for key, status in sorted((launched or {}).items()):
        if key not in seen:  # launched, but no result document stayed
            if status == "unavailable":
                unavailable.append(key)
            else:
                fail(*key)
    for key in sorted(unavailable):
        if key[0] in measured:  # lost part-way: the replicates that ran cannot speak for the others
            fail(*key)
    df = pd.DataFrame(rows, columns=list(REPLICATE_COLUMNS))
    if df.empty:
        df = pd.concat([df, pd.DataFrame(failed, columns=list(REPLICATE_COLUMNS))], ignore_index=True) if failed else df
        return df.astype({"replicate": "int64", "value": "float64"})
    keys = ["suite", "case", "metric", "unit", "direction", "replicate", "status"]
    if df.duplicated(["suite", "case", "metric", "replicate"]).any():  # per-rank rows: one value per launch
        # launch_value's rule (the median, NaN left out), vectorised: one Python call per group was not
        df = df.groupby(keys, as_index=False, sort=True)["value"].median()
    else:
        df = df.sort_values(keys, kind="stable")
    df = df[list(REPLICATE_COLUMNS)].reset_index(drop=True)
    if failed:
        df = pd.concat([df, pd.DataFrame(failed, columns=list(REPLICATE_COLUMNS))], ignore_index=True)
    return df


LAUNCH_LABELS = ("rank_id", "node_name", "gpu_uuid")  # what tells one launch's rows of a metric apart


def _label_once(labels: dict[tuple[Any, ...], set[tuple[Any, ...]]], doc: dict[str, Any], m: dict[str, Any],
                rd: Path) -> None:
    """Record the rank/node/GPU label of a metric row of one replicate; a second row of the same
    (suite, case, metric, replicate) with the same label — none at all, most often — is an error
    naming the file: the median of two unlabelled rows (60 and 150 tok/s) read as a value no launch
    measured, where a label says they are one launch's ranks, nodes or GPUs."""
    key = (str(doc.get("suite")), str(m.get("case") or ""), str(m["name"]), int(doc.get("replicate", 0)))
    label = tuple(m.get(k) for k in LAUNCH_LABELS)
    got = labels.setdefault(key, set())
    if label in got:
        what = ("without a rank_id, node_name or gpu_uuid telling the rows apart" if all(v is None for v in label)
                else f"with the same {', '.join(f'{k} {v!r}' for k, v in zip(LAUNCH_LABELS, label) if v is not None)}")
        where = rd / doc["_path"] if doc.get("_path") else rd / "structured" / f"{rd.name}_{key[0]}_r{key[3]}.json"
        raise BenchrunError(f"{where}: metric {key[2]!r}"
                            + (f" (case {key[1]!r})" if key[1] else "") + f" is reported more than once for replicate "
                            f"{key[3]} {what}: one launch has one value of a metric, or one a rank, node or GPU "
                            "(label its rows): the suite, or its spec (a load point given twice), wrote it twice; fix that "
                            "and run it again")
    got.add(label)


def requests_tables(run_dir: str | os.PathLike[str]) -> "pd.DataFrame":
    """All per-request rows in ``raw/*_requests.parquet``, with suite and replicate columns."""
    import pandas as pd

    rd = Path(run_dir)
    frames = []
    for p in _request_files(rd):
        m = re.match(rf"^{re.escape(rd.name)}_(?P<suite>.+)_r(?P<rep>\d+)_requests\.parquet$", p.name)
        if not m:
            continue
        df = pd.read_parquet(p)
        df["suite"] = m.group("suite")
        df["replicate"] = int(m.group("rep"))
        df["raw_file"] = str(p.relative_to(rd))
        frames.append(df)
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def serving_rows(run_dir: str | os.PathLike[str]) -> "pd.DataFrame":
    """The ``serving`` summary rows of the ok suite results (one per point x bucket x replicate)."""
    import pandas as pd

    rows = []
    for doc in suite_results(run_dir):
        if doc.get("status") != "ok":
            continue
        for r in doc.get("serving") or []:
            row = dict(r)
            row["suite"] = doc.get("suite")
            row["replicate"] = int(doc.get("replicate", 0))
            rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class RunInfo:
    """What the statistics need to know about one run besides its values."""

    run_id: str
    path: Path
    status: dict[str, Any]
    environment: dict[str, Any]
    spec: dict[str, Any]
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def spec_body(self) -> dict[str, Any]:
        return self.spec.get("spec", {}) if isinstance(self.spec.get("spec"), dict) else {}

    @property
    def cadence(self) -> str | None:
        """The run's ``intent.cadence`` (its pinned spec's, else the one status.json recorded)."""
        intent = self.spec_body.get("intent")
        return (intent.get("cadence") if isinstance(intent, dict) else None) or self.status.get("cadence")


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BenchrunError(f"{path}: {what} is not readable JSON ({exc}); re-run the benchmark") from exc
    return data if isinstance(data, dict) else {}


def load_run(run_dir: str | os.PathLike[str]) -> RunInfo:
    """Read status.json, the environment capture, the pinned spec and the manifest of a run."""
    import yaml

    rd = Path(run_dir)
    if not rd.is_dir():
        raise BenchrunError(f"run directory {rd} does not exist; check the run id or path")
    run_id = rd.name
    status = _read_json(rd / "status.json", "status.json")
    env = _read_json(rd / "structured" / f"{run_id}_environment.json", "environment capture")
    manifest = _read_json(rd / "manifest.json", "manifest.json")
    spec: dict[str, Any] = {}
    spec_path = rd / "structured" / f"{run_id}_spec.yaml"
    if spec_path.is_file():
        try:
            # libyaml's loader when built in: the pure-Python one costs ~0.1 s per read of a spec
            loaded = yaml.load(spec_path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as exc:
            raise BenchrunError(f"{spec_path}: pinned spec is not valid YAML ({exc})") from exc
        spec = loaded if isinstance(loaded, dict) else {}
    return RunInfo(run_id=run_id, path=rd, status=status, environment=env, spec=spec, manifest=manifest)


# -- spec settings (plain dict reads with defaults: extension fields may be absent) -------


def _get(d: Any, *keys: str, default: Any = None) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d


def confidence_level(spec: dict[str, Any]) -> float:
    """``trials.confidenceLevel`` (default 0.95)."""
    return float(_get(spec, "spec", "trials", "confidenceLevel", default=DEFAULT_CONFIDENCE))


def min_replicates(spec: dict[str, Any]) -> int:
    """``trials.minReplicates`` (default 3)."""
    return int(_get(spec, "spec", "trials", "minReplicates", default=DEFAULT_MIN_REPLICATES))


def _declared_metrics(spec: dict[str, Any], role: str) -> set[str]:
    """Union of ``metrics.<family>.<role>`` over the enabled families."""
    out: set[str] = set()
    metrics = _get(spec, "spec", "metrics", default={}) or {}
    for fam in metrics.values() if isinstance(metrics, dict) else []:
        if isinstance(fam, dict) and fam.get("enabled", True):
            out.update(str(m) for m in fam.get(role) or [])
    return out


def primary_metrics(spec: dict[str, Any]) -> set[str]:
    """Union of ``metrics.<family>.primary`` over the enabled families: bare names or
    ``suite/metric[case]`` selectors (:func:`benchrun.stats.compare.parse_primary`)."""
    return _declared_metrics(spec, "primary")


def secondary_metrics(spec: dict[str, Any]) -> set[str]:
    """Union of ``metrics.<family>.secondary`` over the enabled families (selectors as the
    primaries'): declared outcomes, compared as their own family even when they are telemetry."""
    return _declared_metrics(spec, "secondary")


def delta_pct(spec: dict[str, Any], metric: str) -> float:
    """The no-change margin δ in percent for ``metric``: ``comparison.deltaPctByMetric``,
    else ``comparison.deltaPct``, else 3 %."""
    comp = _get(spec, "spec", "comparison", default={}) or {}
    by_metric = comp.get("deltaPctByMetric") or {}
    if isinstance(by_metric, dict) and metric in by_metric:
        return float(by_metric[metric])
    return float(comp.get("deltaPct", DEFAULT_DELTA_PCT))


def absolute_margin(spec: dict[str, Any], metric: str) -> float | None:
    """``comparison.absoluteMarginByMetric[metric]``: the no-change margin, in the metric's unit,
    of a metric compared by absolute difference (one with a value ≤ 0); None when not set."""
    by_metric = _get(spec, "spec", "comparison", "absoluteMarginByMetric", default={}) or {}
    if isinstance(by_metric, dict) and metric in by_metric:
        return float(by_metric[metric])
    return None


@dataclass(frozen=True)
class GatePolicy:
    """What a comparison gates on and how strictly, from both runs' pinned specs. The candidate
    is what is under test, so it never sets a laxer bar than the baseline's: the primaries are
    both specs' (a candidate that drops one, or disables its family, still gates on it), δ the
    smaller, an absolute margin the smaller or none where either spec sets none (none is 0), the
    confidence level the lower (the larger α); ``differs``
    names what the two specs set differently (the comparison's notes say so)."""

    specs: tuple[dict[str, Any], dict[str, Any]]
    confidence: float
    primary: set[str]
    secondary: set[str]
    differs: tuple[str, ...]

    def delta(self, metric: str) -> float:
        return min(delta_pct(s, metric) for s in self.specs)

    def margin(self, metric: str) -> float | None:
        found = [absolute_margin(s, metric) for s in self.specs]
        # no margin is the strictest bar (0: significance alone decides), so one spec without wins
        return None if None in found else min(found)  # type: ignore[type-var]


def gate_policy(baseline: dict[str, Any], candidate: dict[str, Any]) -> GatePolicy:
    """The stricter of the two runs' gating policies (:class:`GatePolicy`)."""
    primary = primary_metrics(baseline) | primary_metrics(candidate)
    differs = [name for name, read in (
        ("primary metrics", primary_metrics), ("secondary metrics", secondary_metrics),
        ("comparison.deltaPct", lambda s: _get(s, "spec", "comparison", "deltaPct")),
        ("comparison.deltaPctByMetric", lambda s: _get(s, "spec", "comparison", "deltaPctByMetric")),
        ("comparison.absoluteMarginByMetric", lambda s: _get(s, "spec", "comparison", "absoluteMarginByMetric")),
        ("trials.confidenceLevel", confidence_level)) if read(baseline) != read(candidate)]
    return GatePolicy((baseline, candidate), min(confidence_level(baseline), confidence_level(candidate)), primary,
                      (secondary_metrics(baseline) | secondary_metrics(candidate)) - primary, tuple(differs))


def variable_under_test(spec: dict[str, Any], status: dict[str, Any] | None = None) -> str | None:
    """``comparison.variableUnderTest`` of the pinned spec, else the one in status.json."""
    v = _get(spec, "spec", "comparison", "variableUnderTest")
    if v is None and status:
        v = status.get("variable_under_test")
    return str(v) if v else None


def slo_lines(spec: dict[str, Any]) -> dict[str, float]:
    """Per-request SLO thresholds declared under ``metrics.inference`` (extension; may be absent)."""
    inf = _get(spec, "spec", "metrics", "inference", default={}) or {}
    for key in ("slo", "slos", "requestSlo", "perRequestSlo"):
        v = inf.get(key) if isinstance(inf, dict) else None
        if isinstance(v, dict):
            out = {}
            for k, val in v.items():
                try:
                    out[str(k)] = float(val)
                except (TypeError, ValueError):
                    continue
            return out
    return {}


# -- naming runs: id, path, alias ------------------------------------------------------


def runs_root(home: Path | None = None) -> Path:
    return (home or home_location()[0]) / "runs"


def alias_path(home: Path | None = None, alias: str = "current") -> Path:
    """``<home>/published/<alias>``: the run id it points at, then the record of what promote verified."""
    from benchrun.paths import validate_name

    return (home or home_location()[0]) / "published" / validate_name(alias, what="baseline alias")


def read_alias(path: Path) -> tuple[str, dict[str, Any] | None]:
    """(run id, record or None for an alias written before records existed)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    run_id = lines[0].strip() if lines else ""
    record = None
    if len(lines) > 1 and lines[1].strip():
        try:
            record = json.loads(lines[1])
        except ValueError:
            raise BenchrunError(f"{path}: the alias record is not JSON; promote the baseline again") from None
    return run_id, record if isinstance(record, dict) else None




def resolve_run(ref: str, home: Path | None = None, *, paths: bool = True, role: str = "baseline") -> Path:
    """A run directory from a run id, a path to a run directory, or a baseline alias.

    ``role`` names what the alias was given as in its errors (``compare``'s candidate may be an alias
    too: "baseline alias" named the candidate's wrongly).

    ``published/<alias>`` (``published/current`` is what ``benchrun promote`` sets) may carry
    a site prefix as the specs write it (``cluster/published/current``,
    ``local/published/canary``); so may ``<site>/runs/<run_id>``.
    ``paths=False`` for a name read from a spec (``comparison.baseline.artifactRef``): only the
    home's own runs and aliases, never a directory the spec points at (:mod:`benchrun.spec.refs`).
    """
    home = home or home_location()[0]  # read, never created
    ref = str(ref).strip()
    if not paths:
        problem = baseline_ref_problem(ref)
        if problem:
            raise BenchrunError(f"comparison.baseline.artifactRef: {problem}")
        ref = fill_site_placeholder(ref)
    candidate = Path(ref)
    if paths and ("/" in ref or ref.startswith(".")) and candidate.is_dir():
        if not (candidate / "status.json").is_file() and not (candidate / "structured").is_dir():
            raise BenchrunError(f"{candidate} is not a run directory (no status.json or structured/)")
        return candidate.resolve()
    m = ALIAS_REF.match(ref)
    if m:
        p = alias_path(home, m.group("alias"))
        if not p.is_file():
            raise BenchrunError(
                f"{role} alias published/{m.group('alias')} is not set under {p.parent}; "
                f"run `benchrun promote RUN_ID{'' if m.group('alias') == 'current' else ' --alias ' + m.group('alias')}`"
                " to publish a baseline"
            )
        ref = read_alias(p)[0]
        validate_run_id(ref)
        if not (runs_root(home) / ref).is_dir():
            raise BenchrunError(f"{role} alias published/{m.group('alias')} points at run {ref!r}, which no longer "
                                f"exists under {runs_root(home)}; promote another run (`benchrun promote RUN_ID"
                                f"{'' if m.group('alias') == 'current' else ' --alias ' + m.group('alias')}`)")
    elif RUN_REF.match(ref):
        ref = RUN_REF.match(ref).group("run")
    elif "/" in ref:
        raise BenchrunError(f"{ref}: no such run directory; give a run id, a run directory or {ALIAS}")
    validate_run_id(ref)
    rd = runs_root(home) / ref
    if not rd.is_dir():
        raise BenchrunError(f"run {ref!r} not found under {runs_root(home)}; list runs with `benchrun runs`")
    return rd


def alias_of(ref: str) -> str | None:
    """The alias a run reference names (``published/<alias>``, with an optional site prefix), else None."""
    m = ALIAS_REF.match(str(ref).strip())
    return m.group("alias") if m else None
