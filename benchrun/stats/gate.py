"""The one-variable gate: diff two runs' workloads and identities and allow only the declared variable to differ.

The two pinned specs are compared field by field by spec path (:mod:`benchrun.spec.paths`;
the sections in :data:`SPEC_SECTIONS`: commands, arguments, ``env``, suite parameters,
replicates, placement, measurement policy); a difference passes only when it lies under the
variable under test given as a spec path, under a path a named variable may change
(:data:`ALIAS_SPEC_PATHS`), or under an explicit ``--allow-differences`` path (recorded).
Besides, both runs are flattened into dotted fields (status.json identity, the environment capture,
image digests from the manifest). Each field belongs to a category; each
``comparison.variableUnderTest`` may change the categories listed in :data:`ALLOWED`.
Fields that describe one machine's moment rather than its configuration (hostname, load,
free memory, timestamps, device serials, exact byte counts that kernel reservations move)
are not compared, nor the derived ``hardware_key``/``software_key`` digests: their inputs
(``key_inputs``) are compared field by field, so a refusal names the field itself. A field that no rule knows is
compared and, if it differs, refuses the pair: an unknown difference is not a safe one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, get_args

from benchrun.spec.model import VariableUnderTest
from benchrun.spec.paths import GATED_SECTIONS as SPEC_SECTIONS
from benchrun.stats.load import RunInfo, variable_under_test

# The comparison variables of CONTRACT.md §2, from the spec model (one list, not two).
VARIABLES: tuple[str, ...] = get_args(VariableUnderTest)

# What each variable under test may change.
ALLOWED: dict[str, frozenset[str]] = {
    "hardware_generation": frozenset({"hardware"}),
    "runtime_version": frozenset({"software"}),
    "scheduler_path": frozenset({"scheduler"}),
    "control_plane_path": frozenset({"control_plane"}),
    "driver_stack": frozenset({"driver_stack"}),
    "network_topology": frozenset({"network"}),
    "storage_stack": frozenset({"storage"}),
}

# Volatile fields: measured state of a moment, or identities of interchangeable parts.
_IGNORE = re.compile(
    r"(^|[._])(hostname|host|node_name|pid|uptime|boot_id|run_id|name_of_run|"
    r"background\w*|load\w*|loadavg\w*|free\w*|available\w*|used\w*|percent\w*|"
    r"\w*_utc|timestamp\w*|time|captured\w*|created\w*|started\w*|finished\w*|"
    r"uuid|gpu_uuid|serial\w*|bus_id|pci_bus_id|temperature\w*|power_draw\w*|utilization\w*|"
    r"run_directory|pinned_spec|dagster_run_id|spec_digest|artifact_manifest_digest|"
    r"phase|conditions|layers|executable|cwd|argv|schema|max_mhz|swap\w*|"
    r"total_bytes|memory_total_bytes|"
    # how the capture read the machine, not the machine: the wording of why no GPU was found (it
    # changed with the NVML fallback; whether GPUs were found is gpus.count) and which reader found them
    r"gpu_unavailable_reason|gpu_source)($|[._])"
    # derived digests of fields compared one by one (key_inputs); the harness itself
    r"|(^|\.)(hardware_key|software_key)$|packages\.benchrun$"
)

# Fields the environment capture gained after runs were made without them (dotted names; ``*`` one
# list index): absent from one run's capture and present in the other's, such a field is not a
# difference of the machines but of the benchrun that captured them, so it is listed, allowed, as
# ``absent from the older capture`` — a baseline promoted before it was added still compares. Present
# in both, it is compared as any other field. Add a field here when the capture gains one.
# Each maps to the values the field may hold beside an older capture (None: any): what the older
# capture's machine may be taken to have had. A MIG-partitioned GPU is other hardware than the whole
# one an older capture saw, so only a GPU without MIG enabled passes; a pod's CPU quota is set by the
# suites' cpu, which the pinned specs' comparison covers.
CAPTURE_ADDED: dict[str, tuple[Any, ...] | None] = {
    "environment.cpu.affinity_cpus": None,  # 2026-12-07: the affinity mask and the cgroup quota apart
    "environment.cpu.cgroup_cpu_quota": None,
    "environment.gpus.*.mig_mode": (None, "Disabled"),  # 2026-12-07: nvidia-smi's mig.mode.current / NVML
}
_CAPTURE_ADDED = [(re.compile("^" + re.escape(f).replace(r"\*", r"\d+") + "$"), ok) for f, ok in CAPTURE_ADDED.items()]


def _older_capture(key: str, present: Any) -> bool:
    """Whether ``key``, absent from one run's capture and ``present`` in the other's, is a field the
    capture gained since (:data:`CAPTURE_ADDED`) holding a value the older capture's machine may have had."""
    return any(rx.match(key) and (ok is None or present in ok) for rx, ok in _CAPTURE_ADDED)
OLDER_CAPTURE = "absent from the older capture"
# status.selected_scheduler_path before 2026-12-07 recorded "kubernetes" for every Kubernetes run (the
# spec's schedulerPath was not read; slurm-bridge only where the launcher's scheduler_name said so,
# which the default deployment does not set). Such a baseline beside a new run's "kueue" is the same
# path as far as can be known: noted, not refused. Beside "kueue+slinky" it stays a difference.
LEGACY_SCHEDULER_PATHS = {("kubernetes", "kueue")}
LEGACY_PATH = "recorded before per-run scheduler paths (kubernetes: Kueue, slurm-bridge only by launcher setting)"

# benchrun's own code (environment.harness: benchrun.harness): not the system under test, so never a
# refusal, but a comparison across two harnesses says so (a load-generator change moves the figures)
HARNESS_DIFFERS = "benchrun's own code differs"

# First match wins; patterns are searched in the lower-cased dotted field name.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (cat, re.compile(p))
    for cat, p in (
        ("workload", r"workload"),
        ("measurement_policy", r"benchmark_class|cadence|variable_under_test"),
        # Python packages are the runtime, even the CUDA/NCCL wheels that travel with it.
        ("software", r"(^|\.)(packages|python)($|\.)|torch_cuda"),
        ("hardware", r"(^|\.)machine$"),
        ("scheduler", r"scheduler"),
        ("control_plane", r"control_plane|kubernetes|k8s|kubelet|kueue|slinky|operator_version"),
        ("driver_stack", r"driver|cuda|nccl|cudnn|kernel|(^|\.)os($|\.)|distro|firmware|vbios"),
        ("network", r"network|nic|rdma|infiniband|(^|[._])ib[._]|interconnect|fabric|(^|\.)net\w*"),
        ("storage", r"storage|disk|filesystem|fs_type|mount|nvme|(^|[._])fio"),
        ("software", r"python|packages|software|image|framework|torch|runtime|vllm|sglang|"
                     r"trt|tensorrt|container|version"),
        ("hardware", r"hardware|cpu|core|numa|socket|memory|mem_total|gpu|pcie|nvlink|"
                     r"topology|machine|arch|platform|model"),
    )
)

# status.json fields that say what was measured and how; the rest of status.json is bookkeeping.
_STATUS_FIELDS = (
    "workload_spec_digest",
    "workload_type",
    "benchmark_class_granted",
    "selected_scheduler_path",
)


def categorize(name: str) -> str | None:
    """The category of a dotted field, or None when the field is volatile and not compared."""
    low = name.lower()
    if "workload" in low:  # never volatile, never allowed to differ
        return "workload"
    if _IGNORE.search(low):
        return None
    for cat, pat in _RULES:
        if pat.search(low):
            return cat
    return "other"


def _flatten(obj: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in obj):
            out[prefix] = sorted(map(str, obj))
        else:
            out[f"{prefix}.count"] = len(obj)
            for i, v in enumerate(obj):
                _flatten(v, f"{prefix}.{i}", out)
    else:
        out[prefix] = obj


def identity(run: RunInfo) -> dict[str, Any]:
    """The compared fields of one run, flattened: status identity, environment, image digests."""
    out: dict[str, Any] = {}
    for key in _STATUS_FIELDS:
        if key in run.status:
            out[f"status.{key}"] = run.status[key]
    env = dict(run.environment)
    _flatten(env, "environment", out)
    images = run.manifest.get("image_digests") or run.status.get("image_digests")
    if images:
        _flatten(images, "images", out)
    return {k: v for k, v in out.items() if categorize(k) is not None}


@dataclass(frozen=True)
class FieldDiff:
    """One field that differs between baseline and candidate."""

    field: str
    category: str
    baseline: Any
    candidate: Any
    allowed: bool
    how: str = ""  # why: declared | allowed by --allow-differences | allowed by comparison.allowDifferences


# -- the pinned specs, field by field --------------------------------------------------------------

# Spec sections compared field by field: what runs and how it is measured. Not compared: how the
# comparison itself is made (comparison, metrics: taken from the candidate), where results go
# (sinks, provenance), which CI cadences run the spec (automation), the diagnosis settings
# (bottleneckAnalysis), and intent.cadence (when a run happens, not what it runs).
_SPEC_IGNORE = (("intent", "cadence"),)

# Spec fields each named variable (the vocabulary of CONTRACT.md §2) may change besides its
# environment categories; ``*`` is any one segment.
ALIAS_SPEC_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "scheduler_path": (("intent", "schedulerPath"),),
    "runtime_version": (("layers", "*", "suites", "*", "image"),),
}


def spec_variable(variable: str | None) -> tuple[str, ...] | None:
    """The segments of a variable under test given as a spec path; None for a named variable."""
    from benchrun.spec import paths

    if variable is None or variable in ALLOWED:
        return None
    try:
        return paths.parse(variable)
    except ValueError:
        return None


def compared_specs(baseline: RunInfo, candidate: RunInfo) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two pinned specs as the gate diffs them: read by the model with every default filled in
    (so ``nodes: 1`` written out is no difference), or both as written when the model does not
    read one of them (a run pinned by an older version)."""
    from benchrun.spec.normal import filled_spec

    fa, fb = filled_spec(baseline.spec), filled_spec(candidate.spec)
    if fa is not None and fb is not None:
        return fa, fb
    return baseline.spec_body, candidate.spec_body


def _normalized_workload(run: RunInfo) -> str | None:
    """The run's normalized workload digest: recorded in status.json, else from its pinned spec."""
    from benchrun.spec.normal import NORMALIZED_KEY, normalized_workload_digest

    return run.status.get(NORMALIZED_KEY) or (normalized_workload_digest(run.spec) if run.spec_body else None)


def spec_diffs(baseline: RunInfo, candidate: RunInfo, variable: str | None,
               allow: tuple[str, ...] = (), allowed_by: str = "--allow-differences") -> list[FieldDiff]:
    """Every field of the two pinned specs' compared sections that differs, by spec path."""
    from benchrun.spec import paths

    declared = spec_variable(variable)
    allowed_paths = [declared] if declared else list(ALIAS_SPEC_PATHS.get(variable or "", ()))
    overrides = [paths.parse(a) for a in allow]
    # an empty mapping is no field (a filled-in `env: {}` against `env: {OMP_NUM_THREADS: '1'}` is one difference)
    fa, fb = ({k: v for k, v in paths.flatten({s: body[s] for s in SPEC_SECTIONS if s in body}).items()
               if v != {} and not any(paths.covers(i, k) for i in _SPEC_IGNORE)}
              for body in compared_specs(baseline, candidate))
    out = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, _MISSING), fb.get(key, _MISSING)
        if va == vb:
            continue
        how = ("declared" if any(paths.covers(d, key) for d in allowed_paths)
               else f"allowed by {allowed_by}" if any(paths.covers(o, key) for o in overrides) else "")
        out.append(FieldDiff("spec." + paths.render(key), "spec", va, vb, bool(how), how))
    return out


@dataclass
class GateResult:
    """The gate's decision: may these two runs be compared, and which fields differ."""

    variable: str | None
    diffs: list[FieldDiff] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # fail-closed refusals (benchrun.stats.admit): the pair is not comparable at all
    refusals: list[Any] = field(default_factory=list)
    # the comparison computed before a refusal that only its rows could show (a primary not
    # gateable, failed replicates): kept for the record — its rows and any confirmation round
    # that ran — never a verdict (benchrun.stats.analysis.write_comparison)
    unjudged: Any = None

    @property
    def refused(self) -> list[FieldDiff]:
        return [d for d in self.diffs if not d.allowed]

    @property
    def passed(self) -> bool:
        return not self.refused and not self.problems and not self.refusals

    @property
    def not_comparable(self) -> bool:
        """True when a fail-closed precondition refused the pair (exit 5), not the one-variable rule (exit 4)."""
        return bool(self.refusals)

    allowed_differences: tuple[str, ...] = ()  # --allow-differences: recorded wherever the gate is
    allowed_by: str = "--allow-differences"  # who allowed them: the CLI option or comparison.allowDifferences

    def _listed(self, diffs: list[FieldDiff]) -> str:
        return "; ".join(f"{d.field}: {d.baseline!r} -> {d.candidate!r} ({d.how or 'not declared'})" for d in diffs)

    def message(self) -> str:
        if self.refusals:
            from benchrun.stats.admit import message

            return message(self.refusals)
        override = (f"; differences allowed by {self.allowed_by}: {', '.join(self.allowed_differences)}"
                    if self.allowed_differences else "")
        if self.passed:
            spec = [d for d in self.diffs if d.category == "spec"]
            older = [d.field for d in self.diffs if d.how == OLDER_CAPTURE]  # not a change of the machines
            harness = [d for d in self.diffs if d.how == HARNESS_DIFFERS]
            # the spec's differences are changes too
            changed = sorted({d.category for d in self.diffs
                              if d.how not in (OLDER_CAPTURE, HARNESS_DIFFERS, LEGACY_PATH)})
            listed = f"; spec differences: {self._listed(spec)}" if spec else ""
            listed += f"; {OLDER_CAPTURE} (not compared): {', '.join(older)}" if older else ""
            legacy = [d for d in self.diffs if d.how == LEGACY_PATH]
            listed += f"; {self._listed(legacy)}" if legacy else ""
            listed += (f"; note: {HARNESS_DIFFERS} (not the system under test, but its figures may move with it): "
                       f"{self._listed(harness)}" if harness else "")
            return (f"one-variable gate passed (variable {self.variable}; changed: {', '.join(changed) or 'nothing'}"
                    f"{listed}{override})")
        parts = list(self.problems)
        if self.refused:
            cats = sorted({d.category for d in self.refused})
            parts.append(
                f"fields outside variableUnderTest={self.variable} differ ({', '.join(cats)}): {self._listed(self.refused)}"
            )
            ok = [d for d in self.diffs if d.allowed]
            if ok:
                parts.append(f"allowed: {self._listed(ok)}")
        return "one-variable gate refused the pair: " + " | ".join(parts) + override


_MISSING = "<absent>"


def check_gate(baseline: RunInfo, candidate: RunInfo, variable: str | None = None,
               allow_differences: tuple[str, ...] | list[str] = (),
               allowed_by: str = "--allow-differences") -> GateResult:
    """Diff the two runs — the pinned specs field by field, the environment, the images — and
    pass only when what differs is the variable under test (a named variable's categories, or
    the spec path it names) or explicitly allowed (``allow_differences``: spec paths or field
    names, recorded in the result with ``allowed_by``: the CLI option or the spec's
    ``comparison.allowDifferences``)."""
    from benchrun.spec import paths

    variable = variable or variable_under_test(candidate.spec, candidate.status)
    allow = tuple(allow_differences)
    result = GateResult(variable=variable, allowed_differences=allow, allowed_by=allowed_by)
    declared = spec_variable(variable)
    if variable is not None and variable not in ALLOWED and declared is None:
        result.problems.append(
            f"comparison.variableUnderTest {variable!r} is neither one of {', '.join(VARIABLES)} nor a spec path "
            "such as layers.micro.suites[gemm].env.OMP_NUM_THREADS"
        )
    for a in allow:
        try:
            paths.parse(a)
        except ValueError as exc:
            result.problems.append(f"{allowed_by}: {exc}")
    if result.problems:
        return result
    both_specs = bool(baseline.spec_body) and bool(candidate.spec_body)
    if not both_specs and (not baseline.status.get("workload_spec_digest")
                           or not candidate.status.get("workload_spec_digest")):
        result.problems.append(
            "pinned spec and workload_spec_digest missing from "
            + ", ".join(r.run_id for r in (baseline, candidate)
                        if not r.spec_body and not r.status.get("workload_spec_digest"))
            + ": the workloads cannot be shown identical; re-run with a pinned spec"
        )
    allowed = ALLOWED.get(variable or "", frozenset())
    a, b = identity(baseline), identity(candidate)
    # usable_cpus was the affinity mask alone until the capture bounded it by the cgroup quota and
    # recorded the mask apart (affinity_cpus, 2026-12-07): beside an older capture, the mask is compared
    for new, old in ((a, b), (b, a)):
        mask = "environment.cpu.affinity_cpus"
        if mask in new and mask not in old and "environment.cpu.usable_cpus" in new:
            new["environment.cpu.usable_cpus"] = new[mask]
    # workload_spec_digest hashes spec.workload: compared as is, unless a difference there is declared
    # or allowed (then spec.workload is compared field by field below, and the digest must differ).
    # It hashes the workload as written, so where the written digests differ and both runs have the
    # normalized one (recorded, or from the pinned spec: benchrun.spec.normal), that one decides: a
    # default written out is no change
    in_workload = [x for x in ((declared,) if declared else ()) + tuple(paths.parse(o) for o in allow)
                   if x and x[0] == "workload"]
    key = "status.workload_spec_digest"
    if both_specs and in_workload:
        a.pop(key, None)
        b.pop(key, None)
    elif key in a and key in b and a[key] != b[key]:
        from benchrun.spec.normal import WorkloadDigests

        if WorkloadDigests(a[key], _normalized_workload(baseline)).matches(
                WorkloadDigests(b[key], _normalized_workload(candidate))):
            b[key] = a[key]  # the same workload, a default written out in one of them
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, _MISSING), b.get(key, _MISSING)
        if va == vb:
            continue
        cat = categorize(key) or "other"
        if key == "status.selected_scheduler_path" and tuple(sorted((str(va), str(vb)))) in LEGACY_SCHEDULER_PATHS:
            result.diffs.append(FieldDiff(key, "scheduler", va, vb, True, LEGACY_PATH))
            continue
        if key.startswith("environment.harness."):
            result.diffs.append(FieldDiff(key, "harness", va, vb, True, HARNESS_DIFFERS))
            continue
        if _MISSING in (va, vb) and _older_capture(key, vb if va == _MISSING else va):
            result.diffs.append(FieldDiff(key, cat, va, vb, True, OLDER_CAPTURE))
            continue
        ok = cat in allowed or (declared is not None and declared[-1] == "image" and cat == "software"
                                and key.startswith("images."))
        if not ok and key in allow:
            result.diffs.append(FieldDiff(key, cat, va, vb, True, f"allowed by {allowed_by}"))
        else:
            result.diffs.append(FieldDiff(key, cat, va, vb, ok, "declared" if ok else ""))
    if both_specs:
        result.diffs.extend(spec_diffs(baseline, candidate, variable, allow, allowed_by))
    return result
