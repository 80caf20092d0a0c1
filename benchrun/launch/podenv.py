"""The environment of the node that ran a suite, as the pod captured it, joined with what
only the API server knows (the image digest from the container's ``imageID``).

In a pod the suite runtime (``benchrun.suites._runtime``, with ``BENCHRUN_CAPTURE_ENVIRONMENT=1``)
writes ``raw/<run>_<suite>_r<k>_environment.json``: ``benchrun.envcapture``'s document
(CPU, kernel, memory, GPUs and driver/CUDA through nvidia-smi/NVML when present,
``hardware_key``/``software_key``) plus ``pod`` (node name, pod name and UID from the
downward API). After the pod ends, ``record_pod_environment`` adds ``image`` (reference,
``imageID``, digest) to that file and makes the run-level environment
(``structured/<run>_environment.json``, which ``hardware_key``, the one-variable gate and
change-point grouping read) the pod's: the first replicate's capture replaces the
orchestrator's, background load included (the pod's sample describes the node; the
orchestrator's hostname, keys and ``background_load`` are kept under ``orchestrator``, where
the after-run sample taken on the orchestrator's host also goes), and every node seen is listed
under ``nodes`` with its ``hardware_key``, so a run that landed on different hardware shows it.
The image digest of each suite goes to ``status.json`` ``image_digests``, where the gate
compares it, and its reference by digest (``repository@sha256:...``, the tag it was asked by
dropped) to ``images``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping

from benchrun.plan import Invocation
from benchrun.suites.result import raw_path
from benchrun.fsio import atomic_write_json

log = logging.getLogger(__name__)


def image_digest(image_id: str | None) -> str | None:
    """``sha256:...`` from an imageID (``docker-pullable://repo@sha256:...`` or ``sha256:...``)."""
    if not image_id:
        return None
    tail = image_id.rsplit("@", 1)[-1]
    tail = tail.split("://", 1)[-1]
    return tail if tail.startswith("sha256:") else None


def pinned_reference(image: str | None, digest: str | None) -> str | None:
    """The image as ``repository@sha256:...`` (its tag dropped: the digest says what ran), or None."""
    if not image or not digest:
        return None
    repo = image.split("@", 1)[0]
    head, _, last = repo.rpartition("/")
    last = last.split(":", 1)[0]  # a registry's port is in head, never in the last component
    return f"{head}/{last}@{digest}" if head else f"{last}@{digest}"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def record_pod_environment(run_dir: Path, inv: Invocation, timeline: Mapping[str, Any]) -> dict[str, Any] | None:
    """Join the pod's capture with its image digest and promote it to the run's environment."""
    from benchrun.envcapture import environment_path
    from benchrun.rundir import RunDir

    path = raw_path(run_dir, inv.run_id, inv.suite, inv.replicate, "environment", "json")
    doc = _read(path)
    if doc is None:
        return None
    reference = timeline.get("image") or inv.image
    digest = image_digest(timeline.get("image_id"))
    doc["image"] = {"reference": reference, "image_id": timeline.get("image_id"), "digest": digest,
                    "pinned": pinned_reference(reference, digest)}
    pod = dict(doc.get("pod") or {})
    for key in ("node_name", "pod_name", "pod_uid", "namespace"):
        if timeline.get(key) and not pod.get(key):
            pod[key] = timeline[key]
    doc["pod"] = pod
    doc["captured_in"] = "pod"
    atomic_write_json(path, doc)

    run_env_path = environment_path(run_dir, inv.run_id)
    run_env = _read(run_env_path) or {}
    node = {"node_name": pod.get("node_name"), "hardware_key": doc.get("hardware_key"),
            "software_key": doc.get("software_key")}
    if run_env.get("captured_in") != "pod":
        # everything the pod's, its background load too: the orchestrator's samples describe
        # another machine (the Dagster host) and stay under ``orchestrator``, with its keys
        promoted = dict(doc)
        promoted["orchestrator"] = {k: run_env.get(k) for k in ("hostname", "hardware_key", "software_key",
                                                                 "background_load")}
        promoted["run_id"] = inv.run_id
        promoted["nodes"] = [node]
        run_env = promoted
    elif node not in (run_env.get("nodes") or []):
        run_env.setdefault("nodes", []).append(node)
    atomic_write_json(run_env_path, run_env)

    if digest:
        # the run records each suite's image by digest (``images``: repository@sha256:...), whatever
        # tag it was asked by; ``image_digests`` is what the one-variable gate compares
        rd = RunDir(run_dir.parent.parent, inv.run_id)
        status = rd.read_status()
        digests = dict(status.get("image_digests") or {})
        images = dict(status.get("images") or {})
        pinned = doc["image"]["pinned"]
        if digests.get(inv.suite) != digest or images.get(inv.suite) != pinned:
            digests[inv.suite] = digest
            images[inv.suite] = pinned
            rd.update_status(image_digests=digests, images=images)
    return doc
