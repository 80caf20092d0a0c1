"""Launcher settings: one model for the Dagster launcher resource and ``benchrun render``.

Read from the environment by ``LauncherSettings.from_env`` (``BENCHRUN_LAUNCHER_<FIELD>``,
upper-case; lists and mappings as JSON), which is what ``bench_assets/definitions.py`` gives
``LauncherResource`` and what ``benchrun render`` uses, so a rendered Job is the Job a run
would create.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

from benchrun.errors import BenchrunError

ENV_PREFIX = "BENCHRUN_LAUNCHER_"


class LauncherSettings(BaseModel):
    """Where suites run and, for ``kubernetes``, how their Jobs are queued and placed."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["local", "kubernetes"] = "local"
    namespace: str = "benchrun"
    # The image of suites that name none (spec suites[].image wins); the repo's Dockerfile builds it.
    image: str = "benchrun:latest"
    queue_name: str = "benchrun"
    priority_class: str | None = None
    gpus: int = 0
    cpu: str | None = None
    memory: str | None = None
    shm_size: str = "1Gi"
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    service_account: str | None = None
    image_pull_secrets: list[str] = []
    scheduler_name: str | None = None
    slurm_partition: str | None = None
    topology_label: str | None = None
    topology_values: list[str] = []
    run_volume_claim: str | None = None
    run_home: str | None = None
    pending_timeout_s: float = 1800.0
    pull_allowance_s: float = 600.0
    eviction_retries: int = 2
    ttl_seconds_after_finished: int = 3600
    poll_s: float = 2.0
    delete_finished: bool = True
    pipes_messages: Literal["pod_logs", "s3"] = "pod_logs"
    pipes_s3_bucket: str | None = None
    env_secret: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "LauncherSettings":
        environ = os.environ if environ is None else environ
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

    def placement(self, publication_grade: bool = False, run_home: str | None = None) -> Any:
        from benchrun.launch.podspec import Placement

        return Placement(
            image=self.image, queue_name=self.queue_name, priority_class=self.priority_class, gpus=self.gpus, cpu=self.cpu,
            memory=self.memory, shm_size=self.shm_size, node_selector=dict(self.node_selector),
            tolerations=tuple(self.tolerations), publication_grade=publication_grade,
            topology_label=self.topology_label, topology_values=tuple(self.topology_values),
            scheduler_name=self.scheduler_name, slurm_partition=self.slurm_partition,
            service_account=self.service_account, image_pull_secrets=tuple(self.image_pull_secrets),
            run_volume_claim=self.run_volume_claim, run_home=self.run_home or run_home,
            ttl_seconds_after_finished=self.ttl_seconds_after_finished, pending_timeout_s=self.pending_timeout_s,
            pull_allowance_s=self.pull_allowance_s, eviction_retries=self.eviction_retries,
            env_secret=self.env_secret,
        )

    def publication_offer(self, images: list[str | None], resources_set: bool) -> tuple[bool, str]:
        """Whether this launcher can honour publication grade for a run, and why (not)."""
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
        if missing:
            return False, "the Kubernetes launcher cannot guarantee: " + "; ".join(missing)
        return True, ("dedicated nodes by node selector, exclusive placement by pod anti-affinity, "
                      "digest-pinned images and Guaranteed QoS")
