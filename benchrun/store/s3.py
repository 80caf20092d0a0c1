"""The S3 artifact store: conditional writes (never overwrite) and object-lock retention.

The endpoint comes from ``BENCHRUN_S3_ENDPOINT_URL`` (else boto3's own ``AWS_ENDPOINT_URL``
/ ``AWS_*`` environment); credentials come only from the environment boto3 reads and are
never logged or put in messages.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import io
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, TypeVar

from benchrun.errors import BenchrunError
from benchrun.urlsafe import redact, redact_in
from benchrun.store.base import CHUNK, ArtifactStore, changed_while_stored, sha256_stream

log = logging.getLogger(__name__)
T = TypeVar("T")
SPOOL_MEMORY = 16 << 20  # a file up to this size is uploaded from memory, a larger one from a temporary file
# A file larger than this goes up in parts (S3 caps one PutObject at 5 GiB; before, a larger trace or
# profile failed the run's evidence): PART_SIZE each (S3: 5 MiB to 5 GiB, at most 10,000 parts),
# read from the file itself (no spool), the whole file hashed as it goes and compared before the
# upload is completed, with If-None-Match on the completion (write-once as a single put is).
MULTIPART_THRESHOLD = 1 << 30
PART_SIZE = 256 << 20

# Errors that mean "the service is not there right now": retry the evidence step later.
_UNREACHABLE = (
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ConnectionClosedError",
    "ConnectionError",
)


class S3Store(ArtifactStore):
    """Objects at ``s3://<bucket>/<base><prefix>sha256/<aa>/<hex>`` written with ``If-None-Match: *``."""

    def __init__(
        self,
        bucket: str,
        base: str,
        prefix_template: str = "",
        *,
        retention_days: int | None = None,
        lock_mode: str = "GOVERNANCE",
        endpoint_url: str | None = None,
        client: Any = None,
    ) -> None:
        if not bucket:
            raise BenchrunError("sinks.rawArtifacts.pathTemplate: s3:// URI has no bucket; use s3://bucket/prefix/${RUN_ID}/")
        self.bucket = bucket
        self.base = base
        self.prefix_template = prefix_template
        self.retention_days = retention_days
        self.lock_mode = lock_mode
        self.uri = f"s3://{bucket}/{base}{prefix_template}"
        self.endpoint_url = (
            endpoint_url or os.environ.get("BENCHRUN_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL")
        )
        self._client = client
        self._lock_enabled: bool | None = None

    # -- client and error mapping ---------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                connect_timeout=float(os.environ.get("BENCHRUN_S3_CONNECT_TIMEOUT_S", "3")),
                read_timeout=60,
                retries={"max_attempts": int(os.environ.get("BENCHRUN_S3_MAX_ATTEMPTS", "3")), "mode": "standard"},
            )
            self._client = boto3.client("s3", endpoint_url=self.endpoint_url, config=config)
        return self._client

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        import botocore.exceptions as bex

        where = f"s3://{self.bucket} at {redact(self.endpoint_url) if self.endpoint_url else 'the default AWS endpoint'}"
        try:
            return fn()
        except bex.NoCredentialsError as exc:
            raise BenchrunError(
                f"{what}: no S3 credentials in the environment; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
            ) from exc
        except bex.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchBucket",):
                raise BenchrunError(f"{what}: bucket {self.bucket} does not exist at {where}; create it or fix sinks.rawArtifacts.pathTemplate") from exc
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403", "Forbidden") \
                    or status == 403:
                # a HEAD has no body: its 403 comes back as code "403", not AccessDenied
                raise BenchrunError(f"{what}: {where} refused access with the credentials in the environment "
                                    f"({code or status}: access denied)") from exc
            # anything else the service answered (5xx InternalError, SlowDown, ...): an error naming the
            # request, never a raw botocore exception (callers, `verify --store` among them, catch BenchrunError)
            raise BenchrunError(f"{what}: {where} answered {code or 'an error'}"
                                f"{f' (HTTP {status})' if status else ''}: {_message(exc)}") from exc
        except bex.BotoCoreError as exc:
            if type(exc).__name__ in _UNREACHABLE or isinstance(exc, (bex.EndpointConnectionError, bex.ConnectionError)):
                raise BenchrunError(
                    f"{what}: S3 endpoint unreachable ({where}): {type(exc).__name__}; "
                    "check BENCHRUN_S3_ENDPOINT_URL and retry — nothing was half-written"
                ) from exc
            # e.g. ResponseStreamingError: the connection broke while an object was being read
            raise BenchrunError(f"{what}: S3 request to {where} failed ({type(exc).__name__}): {_message(exc)}") from exc

    # -- primitives ---------------------------------------------------------------
    def run_prefix(self, run_id: str) -> str:
        prefix = self.base + self.prefix_template.replace("${RUN_ID}", run_id)
        return prefix if not prefix or prefix.endswith("/") else prefix + "/"

    def key_uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    @property
    def lock_enabled(self) -> bool:
        """Whether the bucket has object lock (then every object gets a retention date)."""
        if self._lock_enabled is None:
            import botocore.exceptions as bex

            def probe() -> bool:
                try:
                    conf = self.client.get_object_lock_configuration(Bucket=self.bucket)
                except bex.ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") in (
                        "ObjectLockConfigurationNotFoundError",
                        "NotImplemented",
                        "InvalidRequest",
                    ):
                        return False
                    raise
                return conf.get("ObjectLockConfiguration", {}).get("ObjectLockEnabled") == "Enabled"

            self._lock_enabled = self._call("object lock check", probe)
        return self._lock_enabled

    def exists(self, key: str) -> bool:
        import botocore.exceptions as bex

        def head() -> bool:
            try:
                self.client.head_object(Bucket=self.bucket, Key=key)
            except bex.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    return False
                raise
            return True

        return self._call(f"head {self.key_uri(key)}", head)

    def open_key(self, key: str) -> BinaryIO:
        import botocore.exceptions as bex

        def get() -> BinaryIO:
            try:
                resp = self.client.get_object(Bucket=self.bucket, Key=key)
            except bex.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    raise BenchrunError(f"{self.key_uri(key)}: stored object is missing") from exc
                raise
            return resp["Body"]

        what = f"get {self.key_uri(key)}"
        return _GuardedBody(self._call(what, get), self._call, f"read {self.key_uri(key)}")

    def _lock_args(self) -> dict[str, Any]:
        if not self.lock_enabled or not self.retention_days:
            return {}
        until = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=self.retention_days)
        return {"ObjectLockMode": self.lock_mode, "ObjectLockRetainUntilDate": until}

    def _conditional_put(self, key: str, body: BinaryIO, extra: dict[str, Any]) -> bool:
        """PutObject with If-None-Match: * ; False when the key already exists."""
        import botocore.exceptions as bex

        def put() -> bool:
            try:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*", **extra)
            except bex.ClientError as exc:
                if precondition_failed(exc):
                    return False
                raise
            return True

        return self._call(f"put {self.key_uri(key)}", put)

    def _put_file(self, key: str, path: Path, sha256: str) -> bool:
        # Upload exactly the bytes that hash to ``sha256``: the file is read once into a spool while
        # it is hashed again, and the spool is what goes up. A file that changed after put_run_dir
        # hashed it is refused, as the local store refuses it, instead of landing under a stale key.
        if path.stat().st_size > MULTIPART_THRESHOLD:
            written = self._put_parts(key, path, sha256)
            return written or self._same_or_refuse(key, path, sha256)
        with _hashed_spool(path) as (spool, actual):
            if actual != sha256:
                raise changed_while_stored(path)
            # the server checks the bytes it received against the same hash (S3 rejects a mismatch)
            extra = {"Metadata": {"sha256": sha256}, "ChecksumAlgorithm": "SHA256", "ChecksumSHA256": _b64(sha256),
                     **self._lock_args()}
            written = self._conditional_put(key, spool, extra)
        if written:
            return True
        return self._same_or_refuse(key, path, sha256)

    def _same_or_refuse(self, key: str, path: Path, sha256: str) -> bool:
        """False when the key already holds these bytes; BenchrunError when it holds others."""
        existing = self.hash_key(key)
        if existing != sha256:
            raise BenchrunError(
                f"{self.key_uri(key)}: already holds different bytes (sha256 {existing}) than {path} ({sha256}); "
                "stored objects are write-once, so the stored copy was altered: investigate the bucket"
            )
        return False

    def _put_parts(self, key: str, path: Path, sha256: str) -> bool:
        """A multipart upload of ``path`` (MULTIPART_THRESHOLD); False when the key already exists. Each
        part carries its Content-MD5 (the server checks it; a SHA-256 per part would make the object's
        checksum a composite one, which clients then fail to validate against the whole object); the
        file's sha256 is compared before completing and kept in the object's metadata, and the upload is
        aborted on any error or mismatch (no part is left billed)."""
        import botocore.exceptions as bex

        c = self.client
        start = self._call(f"start upload {self.key_uri(key)}", lambda: c.create_multipart_upload(
            Bucket=self.bucket, Key=key, Metadata={"sha256": sha256}, **self._lock_args()))
        upload = start["UploadId"]
        try:
            parts, h = [], hashlib.sha256()
            with open(path, "rb") as src:
                while chunk := src.read(PART_SIZE):
                    h.update(chunk)
                    n = len(parts) + 1
                    md5 = base64.b64encode(hashlib.md5(chunk).digest()).decode("ascii")  # noqa: S324 - S3's part check
                    resp = self._call(f"upload part {n} of {self.key_uri(key)}", lambda chunk=chunk, n=n, md5=md5:
                                      c.upload_part(Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=n,
                                                    Body=chunk, ContentMD5=md5))
                    parts.append({"ETag": resp["ETag"], "PartNumber": n})
            if h.hexdigest() != sha256:
                raise changed_while_stored(path)

            def complete() -> bool:
                try:
                    c.complete_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload,
                                                MultipartUpload={"Parts": parts}, IfNoneMatch="*")
                except bex.ClientError as exc:
                    if precondition_failed(exc):
                        return False
                    raise
                return True

            done = self._call(f"complete upload {self.key_uri(key)}", complete)
        except BaseException:
            with contextlib.suppress(Exception):
                c.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
            raise
        if not done:
            with contextlib.suppress(Exception):
                c.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
        return done

    def _put_manifest_doc(self, key: str, data: bytes, *, overwrite: bool) -> None:
        if overwrite:
            self._call(
                f"put {self.key_uri(key)}",
                lambda: self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType="application/json"),
            )
            return
        extra = {"ContentType": "application/json", **self._lock_args()}
        if not self._conditional_put(key, io.BytesIO(data), extra):
            with self.open_key(key) as fh:
                if fh.read() != data:
                    raise BenchrunError(f"{self.key_uri(key)}: a different manifest is already stored under this digest")

    def hash_key(self, key: str) -> str:
        with self.open_key(key) as body:
            return sha256_stream(body.iter_chunks(1 << 20))

    def list_manifest_run_ids(self) -> list[str]:
        ids: set[str] = set()
        base = self.base + (self.prefix_template.split("${RUN_ID}")[0] if "${RUN_ID}" in self.prefix_template else self.prefix_template)

        def scan() -> None:
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base):
                for obj in page.get("Contents", []):
                    parts = obj["Key"].split("/")
                    if len(parts) >= 2 and parts[-2] == "manifests" and parts[-1].endswith(".json"):
                        ids.add(parts[-1][: -len(".json")])

        self._call("list manifests", scan)
        return sorted(ids)


class _GuardedBody:
    """An object's body whose reads fail as BenchrunError (``S3Store._call``): a connection that breaks
    mid-stream raised botocore's ResponseStreamingError to callers that catch BenchrunError."""

    def __init__(self, body: Any, call: Callable[[str, Callable[[], Any]], Any], what: str) -> None:
        self._body, self._call, self._what = body, call, what

    def read(self, *args: Any) -> bytes:
        return self._call(self._what, lambda: self._body.read(*args))

    def iter_chunks(self, chunk_size: int = CHUNK) -> Iterator[bytes]:
        chunks = self._body.iter_chunks(chunk_size)
        while (chunk := self._call(self._what, lambda: next(chunks, None))) is not None:
            yield chunk

    def close(self) -> None:
        self._body.close()

    def __enter__(self) -> "_GuardedBody":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _message(exc: Any) -> str:
    """The service's message of a ClientError (or the exception's text), without credentials."""
    response = getattr(exc, "response", None)
    err = response.get("Error", {}) if isinstance(response, dict) else {}
    return redact_in(str(err.get("Message") or exc))


@contextlib.contextmanager
def _hashed_spool(path: Path) -> Iterator[tuple[BinaryIO, str]]:
    """``(spool, sha256)``: the bytes of ``path`` as read once, rewound, and their hex sha256.

    Up to ``SPOOL_MEMORY`` in memory, beyond that in an unnamed file under ``TMPDIR``."""
    h = hashlib.sha256()
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY) as spool, open(path, "rb") as src:
        while chunk := src.read(CHUNK):
            h.update(chunk)
            spool.write(chunk)
        spool.seek(0)
        yield spool, h.hexdigest()


def precondition_failed(exc: Any) -> bool:
    """Whether a ClientError is the server refusing a conditional write (the key exists, or changed)."""
    code = exc.response.get("Error", {}).get("Code", "")
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412)


def _b64(sha256: str) -> str:
    """The base64 of a hex sha256, as S3's ``ChecksumSHA256`` takes it."""
    return base64.b64encode(bytes.fromhex(sha256)).decode("ascii")
