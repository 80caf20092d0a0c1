"""Collecting a Kubernetes replicate's outputs: the pod's log copied into the run directory, the
result document read from its one result line (and the Pipes messages beside it), and the files
the result declares checked in the shared run volume.

The suite prints ``{"__benchrun_result__": <doc>}`` as one log line (``BENCHRUN_RESULT_STDOUT=1``);
it is checked like a local result file (schema, status, numeric metrics, and that it names this
run, suite and replicate) and written atomically to ``structured/``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from dagster_pipes import PIPES_PROTOCOL_VERSION_FIELD
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from benchrun.paths import sample_path
from benchrun.fsio import atomic_path, atomic_write_json
from benchrun.launch.k8s_submit import api_error
from benchrun.launch.podspec import CONTAINER_NAME
from benchrun.plan import Invocation
from benchrun.suites.result import read_result

RESULT_KEY = "__benchrun_result__"
_RESULT_PREFIX = b'{"' + RESULT_KEY.encode() + b'"'


def write_note(log_path: Path, note: str) -> None:
    """A log of one line saying why there is no container log."""
    with atomic_path(log_path) as tmp:
        tmp.write_text(f"benchrun: {note}\n", encoding="utf-8")


def copy_log(core_api: Any, namespace: str, pod_name: str | None, log_path: Path) -> str | None:
    """Copy the container log into ``log_path``; a note when there is none."""
    if pod_name is None:
        note = "no pod was created"
        write_note(log_path, note)
        return note
    try:
        resp = core_api.read_namespaced_pod_log(
            name=pod_name, namespace=namespace, container=CONTAINER_NAME, _preload_content=False
        )
    except (ApiException, HTTPError, OSError) as exc:
        note = f"no container log ({api_error(exc) if isinstance(exc, ApiException) else exc})"
        write_note(log_path, note)
        return note
    try:
        with atomic_path(log_path) as tmp, tmp.open("wb") as fh:
            for chunk in resp.stream(1 << 16):
                fh.write(chunk)
    finally:
        release = getattr(resp, "release_conn", None)
        if release is not None:
            release()
    return None


def scan_log(
    inv: Invocation, log_path: Path, result_path: Path
) -> tuple[dict[str, Any] | None, str | None, list[dict[str, Any]]]:
    """The last result line (written to structured/ and checked) and the Pipes messages."""
    last: bytes | None = None
    messages: list[dict[str, Any]] = []
    with log_path.open("rb") as fh:
        for line in fh:
            if line.startswith(_RESULT_PREFIX):
                last = line
            elif line.startswith(b'{"' + PIPES_PROTOCOL_VERSION_FIELD.encode()):
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if msg.get("method") == "report_custom_message":
                    payload = (msg.get("params") or {}).get("payload")
                    if isinstance(payload, dict):
                        messages.append(payload)
    if last is None:
        return None, None, messages
    try:
        doc = json.loads(last)[RESULT_KEY]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        return None, f"the result line in {inv.log_relpath()} is not JSON ({exc})", messages
    if not isinstance(doc, dict):
        return None, f"the result line in {inv.log_relpath()} does not hold an object", messages
    mine = (inv.run_id, inv.suite, inv.replicate)
    theirs = (doc.get("run_id"), doc.get("suite"), doc.get("replicate"))
    if theirs != mine:
        return None, f"the result line names {theirs}, not {mine}", messages
    atomic_write_json(result_path, doc)
    try:
        return read_result(result_path), None, messages
    except ValueError as exc:
        result_path.unlink(missing_ok=True)
        return None, str(exc), messages


def missing_outputs(run_dir: Path, doc: Mapping[str, Any]) -> list[str]:
    """Files the result document declares (``samples``) that are not in the run directory."""
    missing = []
    samples = doc.get("samples") or {}
    for value in samples.values() if isinstance(samples, dict) else []:
        found = sample_path(run_dir, value)
        if isinstance(value, str) and value and (found is None or not found.is_file()):
            missing.append(value)
    return sorted(missing)
