"""Where and how a suite's pods may run: :class:`Placement` (queue, image, resources, node
placement, deadlines, eviction retries), the per-suite resource defaults that make every pod
Guaranteed QoS, and the label and quantity rules the manifests are checked against.

:mod:`benchrun.launch.podspec` turns a Placement and an invocation into Job manifests; the
rules of each knob are in its module docstring.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from benchrun.errors import BenchrunError
from benchrun.plan import Invocation

SLINKY_JOB_PREFIX = "slurmjob.slinky.slurm.net/"
SLURM_BRIDGE_SCHEDULER = "slurm-bridge-scheduler"
# The scheduler path a Kubernetes run is placed through (status ``selected_scheduler_path``, which the
# one-variable gate compares): every Job is admitted by Kueue; a spec whose ``intent.schedulerPath``
# names slinky is also placed by Slinky's slurm-bridge (``LauncherSettings.scheduler_path_for``).
SCHEDULER_PATH_KUEUE = "kueue"
SCHEDULER_PATH_SLINKY = "kueue+slinky"
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?\Z")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


@dataclass(frozen=True)
class Placement:
    """Where and how a suite's Job may run (one per launcher; the same for every replicate).

    ``queue_name`` is the Kueue LocalQueue (required: every benchmark Job is admitted by
    Kueue). ``gpus``/``cpu``/``memory``/``shm_size`` are the defaults for suites that do not
    set their own (spec ``gpus``, ``cpu``, ``memory``, ``shmSize``); cpu and memory are set as
    requests = limits. ``run_volume_claim`` names the ReadWriteMany PersistentVolumeClaim
    that holds ``BENCHRUN_HOME`` (mounted at ``run_home`` on the orchestrator): each pod
    mounts its run's directory from it at the same path, so every file a suite writes is in
    the run directory when the pod ends. ``publication_grade`` turns on the guarantees listed
    in the module docstring.
    """

    queue_name: str
    image: str | None = None  # for suites that name none
    priority_class: str | None = None
    gpus: int = 0
    cpu: str | None = None
    memory: str | None = None
    shm_size: str = "1Gi"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    publication_grade: bool = False
    exclusive_topology_key: str = "kubernetes.io/hostname"
    topology_label: str | None = None
    topology_values: tuple[str, ...] = ()
    scheduler_name: str | None = None
    slurm_partition: str | None = None
    slurm_constraints: str | None = None
    slurm_reservation: str | None = None
    slurm_qos: str | None = None
    slinky_annotation_prefix: str = SLINKY_JOB_PREFIX
    # the pods go through slurm-bridge (the run's scheduler path is kueue+slinky): the Job or JobSet
    # carries the Slurm job annotations whatever slurm-bridge's scheduler name is on this cluster
    slinky: bool = False
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    image_pull_policy: str = "IfNotPresent"
    gpu_resource: str = "nvidia.com/gpu"
    run_volume_claim: str | None = None
    run_home: str | None = None
    # s3://bucket/prefix: with no run volume, each pod uploads what it wrote (and its whole log)
    # there and the orchestrator reads it back by key (benchrun.launch.podout).
    outputs_uri: str | None = None
    env_secret: str | None = None  # a Secret whose keys become env vars (S3 credentials for Pipes over S3)
    # Image references a suite may run (prefixes: a registry path ending in '/', or a whole name);
    # empty: any. A spec names its suites' images, and their pods get env_secret: on a cluster where
    # others submit BenchmarkRuns, this keeps them to images the operators trust.
    allowed_images: tuple[str, ...] = ()
    ttl_seconds_after_finished: int = 3600
    pending_timeout_s: float = 1800.0
    # The pod's activeDeadlineSeconds counts from the pod's startTime, which the kubelet sets
    # before it pulls the image: the deadline is the suite's timeout plus this allowance (the
    # orchestrator itself enforces the suite's timeout from the container's start).
    pull_allowance_s: float = 600.0
    # Evictions (a pod with the DisruptionTarget condition: node drain, kubelet pressure, API
    # eviction) are not benchmark failures: the Job's podFailurePolicy ignores them and
    # replaces the pod, and the launcher follows the new pod, up to this many times per replicate.
    eviction_retries: int = 2
    # benchrun.launch.podsecurity: "restricted" (runAsNonRoot as run_as_user, no privilege
    # escalation, every capability dropped, RuntimeDefault seccomp) or "none"
    pod_security: str = "restricted"
    run_as_user: int = 10001


# Per-suite cpu and memory when neither the spec (suites[].cpu/.memory) nor the launcher
# (cpu/memory) sets them, so every suite pod is Guaranteed QoS (requests = limits, whole
# CPUs: the kubelet's static CPU manager gives such a pod exclusive cores). Keyed by the
# suite module the command runs (``python -m benchrun.suites.<name>``), else the suite's name.
SUITE_RESOURCES: dict[str, tuple[str, str]] = {
    "gemm": ("4", "16Gi"),
    "membw": ("4", "16Gi"),
    "fio": ("2", "4Gi"),
    "dataloader": ("8", "32Gi"),
    "allreduce": ("8", "64Gi"),
    "training": ("16", "64Gi"),
    "serving_sweep": ("4", "8Gi"),
    "serving_workflow": ("4", "8Gi"),
    "job_startup": ("1", "2Gi"),
}
DEFAULT_RESOURCES = ("2", "4Gi")  # any other suite


def suite_module(inv: Invocation) -> str:
    """The benchrun suite an invocation runs (``-m benchrun.suites.<name>``), else its spec name."""
    argv = list(inv.argv)
    for i, word in enumerate(argv[:-1]):
        if word == "-m" and argv[i + 1].startswith("benchrun.suites."):
            return argv[i + 1].removeprefix("benchrun.suites.")
    return inv.suite


def wants_gpu(inv: Invocation) -> bool:
    """A GPU suite: its parameters ask for CUDA (``device: cuda``) or NCCL (``backend: nccl``), or it is
    the gemm suite with a dtype only CUDA runs (``dtype: bfloat16``: gemm's own rule,
    :func:`benchrun.suites.gemm.needs_gpu`), which on a pod without a GPU was unavailable in every replicate."""
    params = inv.parameters or {}
    if str(params.get("device", "")).lower() == "cuda" or str(params.get("backend", "")).lower() == "nccl":
        return True
    if suite_module(inv) == "gemm":
        from benchrun.suites.gemm import needs_gpu  # deferred: numpy only for a gemm invocation

        return needs_gpu(params)
    return False


def whole_cpus(qty: str, field_name: str) -> str:
    """``qty`` as a whole number of CPUs (``"2000m"`` → ``"2"``), else raise naming the field
    (:func:`benchrun.spec.model.whole_cpu_count`: the spec's rule)."""
    from benchrun.spec.model import whole_cpu_count

    try:
        return str(whole_cpu_count(qty))
    except ValueError as exc:
        raise BenchrunError(f"{field_name}: {exc}") from None


def check_image_allowed(image: str, allowed: tuple[str, ...] | list[str], field_name: str) -> str:
    """``image`` when the launcher allows it (``allowed`` empty, or a prefix of it), else raise naming
    the field and the setting. A prefix is matched as written: ``registry.example.com/bench/`` allows
    that path; ``registry.example.com/bench`` alone would also allow ``registry.example.com/bench-evil``."""
    if allowed and not any(image.startswith(prefix) for prefix in allowed):
        raise BenchrunError(f"{field_name}: {image!r} is not among the images this launcher runs "
                            f"({', '.join(allowed)}; BENCHRUN_LAUNCHER_ALLOWED_IMAGES); use one of those, or ask "
                            "the operators to allow it")
    return image


def moving_tag(image: str) -> bool:
    """Whether an image reference can change under the same name: no digest, and no tag or ``latest``."""
    if "@sha256:" in image:
        return False
    last = image.rsplit("/", 1)[-1]
    return ":" not in last or last.rsplit(":", 1)[1] == "latest"


def check_label_value(value: str, field_name: str) -> str:
    """Return ``value`` if it is a valid label value, else raise naming ``field_name``."""
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
        raise BenchrunError(
            f"{field_name}: {value!r} is not a valid Kubernetes label value: at most 63 "
            "characters of letters, digits, '-', '_' and '.', starting and ending with a "
            "letter or digit"
        )
    return value


def check_label_key(key: str, field_name: str) -> str:
    """Return ``key`` if it is a valid label (or annotation) key, else raise."""
    prefix, _, name = key.rpartition("/") if isinstance(key, str) else ("", "", "")
    ok = (
        isinstance(key, str)
        and 0 < len(name) <= 63
        and _LABEL_NAME.match(name) is not None
        and (not prefix or (len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix) is not None))
    )
    if not ok:
        raise BenchrunError(
            f"{field_name}: {key!r} is not a valid Kubernetes label key: [prefix/]name with a "
            "DNS-subdomain prefix and a name of at most 63 letters, digits, '-', '_', '.'"
        )
    return key


def pod_deadline_s(inv: Invocation, placement: Placement) -> int:
    """A pod's ``activeDeadlineSeconds``: the suite's timeout plus ``pull_allowance_s`` (it counts
    from the pod's ``startTime``, before the image pull), whole seconds."""
    return max(1, int(math.ceil(inv.timeout_s))) + max(0, int(math.ceil(placement.pull_allowance_s)))


def slinky_annotations(inv: Invocation, placement: Placement) -> dict[str, str]:
    """The slurm-bridge annotations of the Slurm external job of each of ``inv``'s pods, for the
    top-level workload object (the Job or JobSet's own ``metadata.annotations``: slurm-bridge reads
    them there and ignores a pod template's). ``timelimit`` (whole minutes) covers the pod's whole
    deadline (:func:`pod_deadline_s`, the image pull included), so Slurm never ends a pod that
    Kubernetes would still let run. Empty when the pods do not go through slurm-bridge."""
    if not placement.slinky and placement.scheduler_name != SLURM_BRIDGE_SCHEDULER and not (
        placement.slurm_partition or placement.slurm_constraints or placement.slurm_reservation or placement.slurm_qos
    ):
        return {}
    p = placement.slinky_annotation_prefix
    ann = {p + "timelimit": str(max(1, math.ceil(pod_deadline_s(inv, placement) / 60)))}
    for suffix, value in (("partition", placement.slurm_partition), ("constraints", placement.slurm_constraints),
                          ("reservation", placement.slurm_reservation), ("qos", placement.slurm_qos)):
        if value:
            ann[p + suffix] = value
    if placement.publication_grade:
        ann[p + "exclusive"] = "true"
    return ann


# deviceclass.resource.kubernetes.io/<class>: DRA's extended resources, the one kubernetes.io name allowed
_DRA_EXTENDED = "deviceclass.resource.kubernetes.io"


def is_extended_resource(name: str) -> bool:
    """Whether ``name`` is a Kubernetes extended resource name (``nvidia.com/gpu``, ``amd.com/gpu``,
    ``rdma/ib``): ``<prefix>/<name>`` as a label key, the prefix outside ``kubernetes.io`` (that
    domain's names are native resources) but for DRA's ``deviceclass.resource.kubernetes.io``."""
    if not isinstance(name, str) or "/" not in name:
        return False
    prefix = name.rpartition("/")[0]
    if (prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io")) and prefix != _DRA_EXTENDED:
        return False
    try:
        check_label_key(name, "resource")
    except BenchrunError:
        return False
    return True


def is_annotation_prefix(prefix: str) -> bool:
    """Whether ``prefix`` is an annotation key prefix: a DNS subdomain followed by ``/``."""
    return (isinstance(prefix, str) and prefix.endswith("/") and len(prefix) <= 254
            and _DNS_SUBDOMAIN.match(prefix[:-1]) is not None)
