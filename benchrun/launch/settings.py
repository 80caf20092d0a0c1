"""Launcher settings: one model for the Dagster launcher resource and ``benchrun render``.

Read from the environment by ``LauncherSettings.from_env`` (``BENCHRUN_LAUNCHER_<FIELD>``,
upper-case; lists and mappings as JSON; an unknown ``BENCHRUN_LAUNCHER_*`` variable is an
error naming the nearest valid one), which is what ``bench_assets/definitions.py`` gives
``LauncherResource`` and what ``benchrun render`` uses, so a rendered Job is the Job a run
would create.

Queue and priority are per run: ``queues`` and ``priority_classes`` map the run's granted
benchmark class (``publication_grade``) or else its ``intent.cadence`` to a Kueue LocalQueue
and WorkloadPriorityClass; the defaults are the ones ``deploy/kustomize/base/kueue.yaml``
ships (in ``namespace`` ``benchrun-runs``). ``queue_name``/``priority_class``, when set, put
every run in that one queue / class instead.

Scheduler path per run (``scheduler_path_for``): every Job is admitted by Kueue; a run whose
``intent.schedulerPath`` names slinky is also placed by Slinky's slurm-bridge (``schedulerName``
and the Slurm job annotations), which needs the launcher to declare slurm-bridge
(``slinky_scheduler_name``, or a ``scheduler_name`` that names slurm-bridge): without it such a run
is refused at admission. A run that does not name slinky never goes through slurm-bridge, whatever
``scheduler_name`` says.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, ValidationInfo, field_validator

from benchrun.errors import BenchrunError
from benchrun.launch.placement import (
    SCHEDULER_PATH_KUEUE,
    SCHEDULER_PATH_SLINKY,
    SLINKY_JOB_PREFIX,
    SLURM_BRIDGE_SCHEDULER,
    check_label_key,
    check_label_value,
    is_annotation_prefix,
    is_extended_resource,
    whole_cpus,
)
from benchrun.spec.model import Quantity

ENV_PREFIX = "BENCHRUN_LAUNCHER_"
# deploy/kustomize/base: the runs' namespace, a LocalQueue and a WorkloadPriorityClass per lane
# (tests/test_deploy.py keeps these equal to what kueue.yaml ships).
DEFAULT_NAMESPACE = "benchrun-runs"
# An adhoc experiment shares the nightly queue and priority: below the canary (which gates
# changes) and the release runs, on the same nodes as the runs it is compared with.
DEFAULT_QUEUES = {"canary": "canary", "nightly": "nightly", "adhoc": "nightly", "pre_release": "pre-release",
                  "publication_grade": "publication"}
DEFAULT_PRIORITY_CLASSES = {"canary": "benchrun-canary", "nightly": "benchrun-nightly", "adhoc": "benchrun-nightly",
                            "pre_release": "benchrun-pre-release", "publication_grade": "benchrun-publication"}
# the spec's own quantity rule (suites[].memory/.shmSize), for the launcher's defaults of them
_QUANTITY: TypeAdapter[str] = TypeAdapter(Quantity)


def _refused_as_value_error(check: Any, value: Any, name: str) -> None:
    """``check(value, name)``, its BenchrunError (``<name>: why``) as pydantic's ValueError (``why``): the
    settings' error then names the setting and its variable (LauncherSettings.from_env)."""
    try:
        check(value, name)
    except BenchrunError as exc:
        raise ValueError(str(exc).removeprefix(f"{name}: ")) from None


class LauncherSettings(BaseModel):
    """Where suites run and, for ``kubernetes``, how their Jobs are queued and placed."""

    # a value is never echoed in an error (an outputs URI with credentials in it, a token)
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    kind: Literal["local", "kubernetes"] = "local"
    namespace: str = DEFAULT_NAMESPACE
    # The image of suites that name none (spec suites[].image wins); the repo's Dockerfile builds it.
    image: str = "benchrun:latest"
    queue_name: str | None = None  # one LocalQueue for every run; None: by the run (queues)
    priority_class: str | None = None  # one WorkloadPriorityClass for every run; None: by the run
    queues: dict[str, str] = dict(DEFAULT_QUEUES)
    priority_classes: dict[str, str] = dict(DEFAULT_PRIORITY_CLASSES)
    gpus: int = 0
    cpu: str | None = None
    memory: str | None = None
    shm_size: str = "1Gi"
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    service_account: str | None = None
    image_pull_secrets: list[str] = []
    # the pods' schedulerName for runs not placed through slurm-bridge (None: kube-scheduler); one that
    # names slurm-bridge is used only for runs whose intent.schedulerPath names slinky (scheduler_path_for)
    scheduler_name: str | None = None
    # Slinky slurm-bridge is installed and answers to this schedulerName (normally slurm-bridge-scheduler):
    # runs whose intent.schedulerPath names slinky go through it; None: scheduler_name when that names
    # slurm-bridge, else such runs are refused at admission
    slinky_scheduler_name: str | None = None
    # Slinky slurm-bridge: the Slurm external job of each pod (annotations on the Job or JobSet)
    slurm_partition: str | None = None
    slurm_constraints: str | None = None
    slurm_reservation: str | None = None
    slurm_qos: str | None = None
    slinky_annotation_prefix: str = SLINKY_JOB_PREFIX  # "slinky.slurm.net/" for earlier slurm-bridge releases
    gpu_resource: str = "nvidia.com/gpu"  # the GPU device plugin's extended resource (amd.com/gpu, ...)
    # the RDMA device plugin's extended resource every pod of a `network: rdma` gang asks for, and how many
    rdma_resource: str = "rdma/ib"
    rdma_per_pod: int = Field(default=1, ge=1)
    # the node label of the run's fixed topology (a rack or block) and the values its pods are pinned to
    # (required node affinity): set together, checked when the settings load
    topology_label: str | None = None
    topology_values: list[str] = Field(default=[], validate_default=True)
    run_volume_claim: str | None = None
    run_home: str | None = None
    outputs_uri: str | None = None  # s3://bucket/prefix: outputs through the artifact store (no shared volume)
    pending_timeout_s: float = 1800.0
    pull_allowance_s: float = 600.0
    eviction_retries: int = 2
    ttl_seconds_after_finished: int = 3600
    poll_s: float = 2.0
    delete_finished: bool = True
    pipes_messages: Literal["pod_logs", "s3"] = "pod_logs"
    pipes_s3_bucket: str | None = None
    env_secret: str | None = None
    allowed_images: list[str] = []  # image prefixes suites may run (empty: any); JSON list in the environment
    # the suites' pods meet the restricted Pod Security Standard as this uid (benchrun.launch.podsecurity);
    # none: the image's own user and privileges
    pod_security: Literal["restricted", "none"] = "restricted"
    run_as_user: int = Field(default=10001, ge=1)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "LauncherSettings":
        environ = os.environ if environ is None else environ
        known = {ENV_PREFIX + name.upper() for name in cls.model_fields}
        for var in sorted(environ):
            if var.startswith(ENV_PREFIX) and var not in known:
                import difflib

                fields = sorted(name.upper() for name in cls.model_fields)
                near = difflib.get_close_matches(var[len(ENV_PREFIX):], fields, n=1, cutoff=0.6)
                hint = (f"did you mean {ENV_PREFIX}{near[0]}?" if near
                        else f"valid: {', '.join(ENV_PREFIX + f for f in fields)}")
                raise BenchrunError(f"{var}: not a launcher setting; {hint}")
        values: dict[str, Any] = {}
        for name, info in cls.model_fields.items():
            raw = environ.get(ENV_PREFIX + name.upper())
            if raw is None:
                continue
            text = str(info.annotation)
            if any(t in text for t in ("dict", "list", "bool", "int", "float")):
                try:
                    values[name] = json.loads(raw)
                except json.JSONDecodeError:
                    values[name] = raw
            else:
                values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise BenchrunError(
                f"launcher setting {field} ({ENV_PREFIX}{str(first['loc'][0]).upper()}): {first['msg']}"
            ) from None

    @field_validator("outputs_uri")
    @classmethod
    def _no_credentials_in_outputs_uri(cls, value: str | None) -> str | None:
        """The outputs URI is shown in replicates' reasons (written into the run directory) and pods' env:
        credentials in it would be too (found in review). They come from the S3 credential environment."""
        import urllib.parse

        if value and "@" in urllib.parse.urlsplit(value).netloc:
            raise ValueError("must not carry credentials in its URL (user:secret@host): give them as "
                             "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY in the environment")
        return value

    @field_validator("memory", "shm_size")
    @classmethod
    def _a_quantity(cls, value: str | None) -> str | None:
        """Found in review: ``16GB`` passed here and the API server refused every pod at create time."""
        if value:  # shm_size "": no memory-backed /dev/shm
            try:
                _QUANTITY.validate_python(value)
            except ValidationError:
                raise ValueError("must be a Kubernetes quantity such as 64Gi, 512Mi or 16G (binary suffixes Ki, Mi, "
                                 "Gi, Ti; decimal k, M, G, T: 16GB is neither)") from None
        return value

    @field_validator("cpu")
    @classmethod
    def _whole_cpus(cls, value: str | None) -> str | None:
        """Every pod's cpu is whole CPUs (Guaranteed QoS, exclusive cores): a fraction, refused when a pod is
        built, is refused here, when the settings load."""
        if value:
            _refused_as_value_error(whole_cpus, value, "cpu")
        return value

    @field_validator("topology_label")
    @classmethod
    def _a_label_key(cls, value: str | None) -> str | None:
        if value is not None:
            _refused_as_value_error(check_label_key, value, "topology_label")
        return value

    @field_validator("topology_values")
    @classmethod
    def _values_of_the_label(cls, value: list[str], info: ValidationInfo) -> list[str]:
        """Found in review: a topology_label without topology_values loaded, and building any pod then failed
        (its required node affinity has no value to pin to); values without a label were ignored."""
        label = info.data.get("topology_label")
        if label and not value:
            raise ValueError(f"empty while topology_label ({ENV_PREFIX}TOPOLOGY_LABEL) is {label!r}: list the values "
                             f"of {label} the runs' pods are pinned to, as JSON (e.g. [\"rack-1\"]), or unset "
                             "topology_label")
        if value and not label and "topology_label" not in info.data:
            return value  # the label itself was refused: that error is the one to show
        if value and not label:
            raise ValueError(f"set without topology_label ({ENV_PREFIX}TOPOLOGY_LABEL): name the node label these "
                             "values are of, or unset topology_values")
        for v in value:
            _refused_as_value_error(check_label_value, v, "topology_values")
        return value

    @field_validator("slinky_scheduler_name")
    @classmethod
    def _one_slurm_bridge(cls, value: str | None, info: ValidationInfo) -> str | None:
        named = info.data.get("scheduler_name")
        if value and named and _names_slurm_bridge(named) and named != value:
            raise ValueError(f"{value!r} while scheduler_name ({ENV_PREFIX}SCHEDULER_NAME) names slurm-bridge as "
                             f"{named!r}: set one of them (slinky_scheduler_name; scheduler_name then names the "
                             "scheduler of runs not placed through slurm-bridge, or is unset)")
        return value

    @field_validator("gpu_resource", "rdma_resource")
    @classmethod
    def _an_extended_resource(cls, value: str) -> str:
        if not is_extended_resource(value):
            raise ValueError("must be an extended resource name, <domain>/<name> outside kubernetes.io, such as "
                             "nvidia.com/gpu, amd.com/gpu or rdma/ib (the device plugin's resource)")
        return value

    @field_validator("slinky_annotation_prefix")
    @classmethod
    def _an_annotation_prefix(cls, value: str) -> str:
        if not is_annotation_prefix(value):
            raise ValueError(f"must be an annotation key prefix ending in '/', such as {SLINKY_JOB_PREFIX} "
                             "(slinky.slurm.net/ for earlier slurm-bridge releases)")
        return value

    def queue_for(self, cadence: str | None, benchmark_class: str | None = None) -> tuple[str, str | None]:
        """(LocalQueue, WorkloadPriorityClass) of a run: ``queue_name``/``priority_class`` when
        set, else the ``queues``/``priority_classes`` entry for ``publication_grade`` (when
        granted) or the run's cadence."""
        keys = [k for k in (benchmark_class if benchmark_class == "publication_grade" else None, cadence) if k]
        queue = self.queue_name or next((self.queues[k] for k in keys if k in self.queues), None)
        if not queue:
            raise BenchrunError(
                f"launcher queues ({ENV_PREFIX}QUEUES): no LocalQueue for {' or '.join(keys) or 'a run without a cadence'}; "
                f"map it in {ENV_PREFIX}QUEUES (JSON, e.g. {json.dumps(DEFAULT_QUEUES)}) or set {ENV_PREFIX}QUEUE_NAME")
        priority = self.priority_class or next((self.priority_classes[k] for k in keys if k in self.priority_classes), None)
        return queue, priority

    def slinky_scheduler(self) -> str | None:
        """slurm-bridge's schedulerName on this launcher's cluster: ``slinky_scheduler_name``, else
        ``scheduler_name`` when it names slurm-bridge; None: the launcher does not declare slurm-bridge."""
        if self.slinky_scheduler_name:
            return self.slinky_scheduler_name
        return self.scheduler_name if self.scheduler_name and _names_slurm_bridge(self.scheduler_name) else None

    def scheduler_path_for(self, requested: str | None) -> str:
        """The scheduler path a run whose ``intent.schedulerPath`` is ``requested`` is placed through on
        this (Kubernetes) launcher: ``kueue+slinky`` when it names slinky, else ``kueue`` (every Job is
        admitted by Kueue; ``local`` asks for nothing more). A run asking for slinky on a launcher that does
        not declare slurm-bridge is refused, naming both: it is never run another way than it asked."""
        if "slinky" not in str(requested or "").lower():
            return SCHEDULER_PATH_KUEUE
        if not self.slinky_scheduler():
            raise BenchrunError(
                f"intent.schedulerPath: {requested!r} asks for Slinky's slurm-bridge, and this launcher does not "
                f"declare it: set the launcher's slinky_scheduler_name ({ENV_PREFIX}SLINKY_SCHEDULER_NAME) to "
                f"slurm-bridge's scheduler name ({SLURM_BRIDGE_SCHEDULER}) on a cluster where slurm-bridge is "
                "installed, or submit the run with a schedulerPath without slinky (e.g. kueue); it is not run "
                "another way than it asks")
        return SCHEDULER_PATH_SLINKY

    def placement(self, publication_grade: bool = False, run_home: str | None = None,
                  cadence: str | None = None, scheduler_path: str = SCHEDULER_PATH_KUEUE) -> Any:
        """The :class:`~benchrun.launch.placement.Placement` of a run: its queue (cadence or granted
        class), and its scheduler path (:meth:`scheduler_path_for`): ``kueue+slinky`` puts the pods on
        slurm-bridge with the Slurm job annotations; ``kueue`` never does (no slurm-bridge scheduler
        name, no Slurm annotation)."""
        from benchrun.launch.podspec import Placement

        queue, priority = self.queue_for(cadence, "publication_grade" if publication_grade else None)
        if scheduler_path == SCHEDULER_PATH_SLINKY:
            scheduler_name = self.slinky_scheduler()
            if not scheduler_name:
                self.scheduler_path_for("slinky")  # raises, naming the setting
            slurm: dict[str, Any] = {"slurm_partition": self.slurm_partition, "slurm_constraints": self.slurm_constraints,
                                     "slurm_reservation": self.slurm_reservation, "slurm_qos": self.slurm_qos}
        elif scheduler_path == SCHEDULER_PATH_KUEUE:
            named = self.scheduler_name
            scheduler_name = None if named and (named == self.slinky_scheduler() or _names_slurm_bridge(named)) else named
            slurm = {}
        else:
            raise BenchrunError(f"scheduler path {scheduler_path!r}: the Kubernetes launcher places a run through "
                                f"{SCHEDULER_PATH_KUEUE!r} or {SCHEDULER_PATH_SLINKY!r}")
        return Placement(
            image=self.image, queue_name=queue, priority_class=priority, gpus=self.gpus, cpu=self.cpu,
            memory=self.memory, shm_size=self.shm_size, node_selector=dict(self.node_selector),
            tolerations=tuple(self.tolerations), publication_grade=publication_grade,
            topology_label=self.topology_label, topology_values=tuple(self.topology_values),
            scheduler_name=scheduler_name, slinky=scheduler_path == SCHEDULER_PATH_SLINKY, **slurm,
            slinky_annotation_prefix=self.slinky_annotation_prefix,
            gpu_resource=self.gpu_resource,
            service_account=self.service_account, image_pull_secrets=tuple(self.image_pull_secrets),
            run_volume_claim=self.run_volume_claim, run_home=self.run_home or run_home, outputs_uri=self.outputs_uri,
            ttl_seconds_after_finished=self.ttl_seconds_after_finished, pending_timeout_s=self.pending_timeout_s,
            pull_allowance_s=self.pull_allowance_s, eviction_retries=self.eviction_retries,
            env_secret=self.env_secret, allowed_images=tuple(self.allowed_images),
            pod_security=self.pod_security, run_as_user=self.run_as_user,
        )

    def gang_options(self) -> Any:
        """The :class:`~benchrun.launch.jobset.GangOptions` of this launcher's multi-node gangs."""
        from benchrun.launch.jobset import GangOptions

        return GangOptions(rdma_resource=self.rdma_resource, rdma_per_pod=self.rdma_per_pod)

    def publication_offer_for(self, suites: list[Any]) -> tuple[bool, str]:
        """:meth:`publication_offer` for a spec's enabled suites (``benchrun.spec.Suite``): their images,
        whether each has cpu and memory (its own, else this launcher's), whether one is a gang."""
        resources_set = all((s.cpu or self.cpu) and (s.memory or self.memory) for s in suites)
        return self.publication_offer([s.image or self.image for s in suites], bool(resources_set),
                                      gang=any(s.nodes > 1 for s in suites))

    def publication_offer(self, images: list[str | None], resources_set: bool,
                          gang: bool = False) -> tuple[bool, str]:
        """Whether this launcher can honour publication grade for a run, and why (not). ``gang``: a suite
        of the run spans nodes; its JobSet takes a topology domain of its own (``topology_label``)."""
        if self.kind != "kubernetes":
            return False, ("dedicated nodes, fixed topology, stable background load and topology-exclusive "
                           "placement cannot be guaranteed on a shared local machine")
        missing = []
        if not self.node_selector:
            missing.append("dedicated nodes (launcher node_selector)")
        if any(not img or "@sha256:" not in img for img in images):
            missing.append("every suite image pinned by digest (name@sha256:...)")
        if not resources_set:
            missing.append("cpu and memory for every suite (Guaranteed QoS)")
        if gang and not self.topology_label:
            missing.append("a topology domain of its own for each multi-node gang (launcher topology_label, the node "
                           "label of a rack or block, with topology_values)")
        if missing:
            return False, "the Kubernetes launcher cannot guarantee: " + "; ".join(missing)
        return True, ("dedicated nodes by node selector, exclusive placement by pod anti-affinity, "
                      "digest-pinned images and Guaranteed QoS")


def _names_slurm_bridge(scheduler_name: str) -> bool:
    """Whether a schedulerName is slurm-bridge's (``slurm-bridge-scheduler``, or a renamed one)."""
    return "slurm-bridge" in scheduler_name.lower()
