"""A suite pod's outputs back through the artifact store: the in-pod wrapper and the key layout.

With the launcher's ``outputs_uri`` (``s3://bucket/prefix``, no shared run volume) every suite
container runs::

    python -m benchrun.launch.podout --run-dir RUN_DIR --to s3://bucket/prefix [--input REL ...] -- ARGV...

which downloads the inputs the orchestrator put there (a publication-grade layer's plan), runs
ARGV (never through a shell) with its stdout and stderr copied both to the pod log (read live,
Pipes) and to a file, and when it ends uploads every file the suite wrote under RUN_DIR, then
that complete log, then ``index.json`` naming each object with its sha256 and size, and exits
with the suite's own exit code (so the Job's ``podFailurePolicy`` sees the suite's, not ours).
The orchestrator reads the index by key for the pod it followed (``fetch_outputs``), downloads
each file into the run directory (checked against its sha256, written through a temporary
name) and takes the log from there, so nothing depends on the pod log's rotation (the kubelet
keeps 10 MiB) and no ReadWriteMany volume is needed.

Keys, under the bucket's prefix: ``pods/<run_id>/<pod_uid>/files/<rel>``, ``.../log``,
``.../index.json`` (one prefix per pod: an evicted attempt's files are never merged with its
replacement's), and ``pods/<run_id>/inputs/<rel>``. Endpoint and credentials as for the artifact
store (``BENCHRUN_S3_ENDPOINT_URL``, ``AWS_*``; in the pod from the launcher's ``env_secret``);
never logged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

INDEX_VERSION = 1
# What a suite may bring back into the run directory (the run's own files are the orchestrator's).
OUTPUT_DIRS = ("raw", "structured", "figures")
_SKIP_SUFFIXES = (".tmp", ".lock")


def parse_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix ending in "/" or "") of ``s3://bucket/prefix``; ValueError naming the fix."""
    parsed = urllib.parse.urlparse(uri or "")
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"outputs_uri {uri!r}: use s3://bucket/prefix")
    prefix = parsed.path.strip("/")
    return parsed.netloc, f"{prefix}/" if prefix else ""


def pod_prefix(prefix: str, run_id: str, pod_uid: str) -> str:
    return f"{prefix}pods/{run_id}/{pod_uid}/"


def input_key(prefix: str, run_id: str, rel: str) -> str:
    return f"{prefix}pods/{run_id}/inputs/{rel}"


def safe_rel(rel: str) -> str | None:
    """``rel`` when it is a plain relative path under one of OUTPUT_DIRS, else None."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        return None
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts) or len(parts) < 2:
        return None
    return rel if parts[0] in OUTPUT_DIRS else None


def s3_client() -> Any:
    import boto3

    endpoint = os.environ.get("BENCHRUN_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL") or None
    return boto3.client("s3", endpoint_url=endpoint)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def written_files(run_dir: Path, skip: set[str]) -> list[str]:
    """Relative paths of the regular files under the output directories (no links followed)."""
    out = []
    for top in OUTPUT_DIRS:
        root = run_dir / top
        for dirpath, _dirs, files in os.walk(root) if root.is_dir() else []:
            for name in files:
                path = Path(dirpath) / name
                rel = path.relative_to(run_dir).as_posix()
                if path.is_symlink() or not path.is_file() or name.endswith(_SKIP_SUFFIXES) or rel in skip:
                    continue
                if safe_rel(rel):
                    out.append(rel)
    return sorted(out)


def upload_outputs(client: Any, bucket: str, prefix: str, run_dir: Path, log_file: Path, exit_code: int,
                   skip: set[str]) -> dict[str, Any]:
    """Every file written, the log, then the index (last: its presence means the rest is there)."""
    files: dict[str, dict[str, Any]] = {}
    for rel in written_files(run_dir, skip):
        path = run_dir / rel
        client.upload_file(str(path), bucket, f"{prefix}files/{rel}")
        files[rel] = {"sha256": _sha256(path), "size": path.stat().st_size}
    client.upload_file(str(log_file), bucket, f"{prefix}log")
    index = {"version": INDEX_VERSION, "exit_code": exit_code, "files": files,
             "log": {"sha256": _sha256(log_file), "size": log_file.stat().st_size}}
    client.put_object(Bucket=bucket, Key=f"{prefix}index.json", Body=json.dumps(index, sort_keys=True).encode())
    return index


def run_tee(argv: list[str], log_file: Path) -> int:
    """Run argv, its stdout and stderr to our stdout (the pod log) and to ``log_file``; its exit code."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def forward(signum: int, _frame: Any) -> None:  # the kubelet's SIGTERM (deadline, deletion) reaches the suite
        if proc.poll() is None:
            proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    out = sys.stdout.buffer
    assert proc.stdout is not None
    with log_file.open("wb") as fh:
        while True:
            chunk = proc.stdout.read1(1 << 16)
            if not chunk:
                break
            out.write(chunk)
            out.flush()
            fh.write(chunk)
    rc = proc.wait()
    return 128 - rc if rc < 0 else rc  # killed by signal N: 128+N, as a container runtime says


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchrun.launch.podout")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--to", required=True, help="s3://bucket/prefix")
    parser.add_argument("--input", action="append", default=[], help="a run-directory file to fetch first")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    run_dir = Path(args.run_dir)
    run_id = os.environ.get("BENCHRUN_RUN_ID", "")
    pod_uid = os.environ.get("BENCHRUN_POD_UID", "")
    if not run_id or not pod_uid:
        print("benchrun.launch.podout: BENCHRUN_RUN_ID and BENCHRUN_POD_UID (downward API) must be set",
              file=sys.stderr, flush=True)
        return 2
    bucket, prefix = parse_uri(args.to)
    client = s3_client()
    for rel in args.input:
        if not safe_rel(rel):
            print(f"benchrun.launch.podout: --input {rel!r} is not a run-directory file", file=sys.stderr, flush=True)
            return 2
        (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, input_key(prefix, run_id, rel), str(run_dir / rel))
    fd, log_name = tempfile.mkstemp(prefix="benchrun-log-")
    os.close(fd)
    log_file = Path(log_name)
    try:
        code = run_tee(command, log_file)
        try:
            upload_outputs(client, bucket, pod_prefix(prefix, run_id, pod_uid), run_dir, log_file, code,
                           set(args.input))
        except Exception as exc:  # the orchestrator fails the replicate: no index, and says so
            print(f"benchrun.launch.podout: uploading the outputs to s3://{bucket}/{prefix} failed: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return code
    finally:
        log_file.unlink(missing_ok=True)


if __name__ == "__main__":
    raise SystemExit(main())
