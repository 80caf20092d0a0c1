"""The orchestrator's side of outputs through the artifact store: a pod's files read back by key.

``benchrun.launch.podout`` (in the pod) uploads what the suite wrote and its complete log under
``pods/<run_id>/<pod_uid>/`` with an ``index.json``; ``fetch_outputs`` reads that index for the
pod the launcher followed (never another attempt's), downloads each file into the run directory
through a temporary name, checks its sha256, and puts the log at the replicate's log path.
``put_inputs`` uploads the run-directory files a pod needs first (a publication layer's plan).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Iterable

from benchrun.fsio import atomic_path
from benchrun.launch.podout import input_key, parse_uri, pod_prefix, s3_client, safe_rel

log = logging.getLogger(__name__)


def _download(client: Any, bucket: str, key: str, dest: Path, sha256: str | None) -> str | None:
    """Download ``key`` to ``dest`` atomically; an error note (nothing written) on a mismatch. An index
    entry without a sha256 (the uploader always writes one) is refused: it was taken unchecked (found in review)."""
    if not isinstance(sha256, str) or not sha256:
        raise ValueError(f"s3://{bucket}/{key}: the pod's index gives no sha256 for it: not taken unchecked")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(dest) as tmp:
        client.download_file(bucket, key, str(tmp))
        h = hashlib.sha256()
        with tmp.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != sha256:
            raise ValueError(f"s3://{bucket}/{key}: sha256 {h.hexdigest()} is not the index's {sha256}")
    return None


# How a note begins when the pod's upload was there but did not all come back: the replicate fails
# (kubernetes.KubernetesLauncher._settle), as its evidence is incomplete.
INCOMPLETE = "the pod's outputs did not all come back (nothing of them was kept)"


def fetch_outputs(uri: str, run_id: str, pod_uid: str | None, run_dir: Path, log_path: Path,
                  client: Any = None) -> str | None:
    """Bring the pod's files and log into the run directory; None, or why they did not come."""
    import botocore.exceptions as bex

    if not pod_uid:
        return "no pod ran, so nothing was uploaded"
    bucket, prefix = parse_uri(uri)
    base = pod_prefix(prefix, run_id, pod_uid)
    client = client or s3_client()
    try:
        body = client.get_object(Bucket=bucket, Key=f"{base}index.json")["Body"].read()
    except bex.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        return (f"the pod uploaded no outputs to s3://{bucket}/{base} ({code or exc}): was the image built with "
                "benchrun (python -m benchrun.launch.podout) and the pod given S3 credentials (launcher env_secret)?")
    except bex.BotoCoreError as exc:
        return f"the artifact store is unreachable for s3://{bucket}/{base}: {type(exc).__name__}"
    try:
        index = json.loads(body)
        files = dict(index["files"])
    except (ValueError, KeyError, TypeError) as exc:
        return f"s3://{bucket}/{base}index.json is not an outputs index ({exc})"
    refused = []
    # Every file into a scratch folder first (paths.is_scratch: never evidence), moved into the run
    # directory only once all of them arrived whole: before, the files before a failed one stayed and
    # the rest did not, and the replicate read ok (found in review).
    import shutil

    from benchrun.paths import SCRATCH_PREFIX

    stage = run_dir / f"{SCRATCH_PREFIX}outputs-{pod_uid}"
    shutil.rmtree(stage, ignore_errors=True)
    wanted = []
    try:
        for rel, meta in sorted(files.items()):
            if not safe_rel(rel):
                refused.append(rel)
                continue
            _download(client, bucket, f"{base}files/{rel}", stage / rel, (meta or {}).get("sha256"))
            wanted.append(rel)
        _download(client, bucket, f"{base}log", stage / ".log", (index.get("log") or {}).get("sha256"))
        for rel in wanted:
            (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (stage / rel).replace(run_dir / rel)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        (stage / ".log").replace(log_path)
    except (bex.ClientError, bex.BotoCoreError, ValueError, OSError) as exc:
        return f"{INCOMPLETE} from s3://{bucket}/{base}: {exc}"
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if refused:
        log.warning("pod %s: left out outputs outside %s: %s", pod_uid, "raw/, structured/, figures/",
                    ", ".join(refused))
    return None


def put_inputs(uri: str, run_id: str, run_dir: Path, rels: Iterable[str], client: Any = None) -> list[str]:
    """Upload run-directory files a pod fetches before it starts (``podout --input``)."""
    bucket, prefix = parse_uri(uri)
    client = client or s3_client()
    out = []
    for rel in rels:
        client.upload_file(str(run_dir / rel), bucket, input_key(prefix, run_id, rel))
        out.append(rel)
    return out
