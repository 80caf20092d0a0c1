"""The content-addressed, write-once artifact store for run directories (local or S3).

``open_store(sinks.rawArtifacts.pathTemplate, home)`` picks the backend:

- ``None`` / empty → ``$BENCHRUN_HOME/objects`` (objects shared across runs);
- ``file:///abs/path/${RUN_ID}/`` or a plain path (relative paths are under ``home``);
- ``s3://bucket/prefix/${RUN_ID}/`` → S3 through boto3 (endpoint and credentials from the
  environment only).

Layout under the run's prefix: ``sha256/<aa>/<hex>`` (objects) and
``manifests/<run_id>.json`` (the latest object manifest) plus
``manifests/<run_id>/<artifact_manifest_digest>.json`` (every version, immutable).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

from benchrun.errors import BenchrunError
from benchrun.store.base import (
    ArtifactStore,
    ObjectEntry,
    ObjectManifest,
    manifest_digest,
    sha256_file,
)
from benchrun.store.local import LocalStore
from benchrun.store.s3 import S3Store

__all__ = [
    "ArtifactStore",
    "LocalStore",
    "ObjectEntry",
    "ObjectManifest",
    "S3Store",
    "hash_uri",
    "manifest_digest",
    "open_store",
    "portable_address",
    "portable_store_uri",
    "retention_days_for_class",
    "sha256_file",
]

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _split_template(template: str, field: str) -> tuple[str, str]:
    """(part before ``${RUN_ID}``, part from it on); refuses other placeholders."""
    for name in _PLACEHOLDER.findall(template):
        if name != "RUN_ID":
            raise BenchrunError(f"{field}: placeholder ${{{name}}} is not supported here; only ${{RUN_ID}}")
    idx = template.find("${RUN_ID}")
    if idx < 0:
        return template, ""
    return template[:idx], template[idx:]


def retention_days_for_class(retention_class: str | None, retention: dict | None) -> int | None:
    """Days a raw object is kept for ``retention_class`` (``hot*``/``warm*``/``cold*`` map to
    ``hotDays``/``warmDays``/``coldDays``); None = no known limit (keep forever)."""
    if not retention_class or not retention:
        return None
    cls = retention_class.lower()
    for tier in ("hot", "warm", "cold"):
        if cls.startswith(tier):
            value = retention.get(f"{tier}Days")
            return int(value) if isinstance(value, (int, float)) and value > 0 else None
    return None


def open_store(
    path_template: str | None,
    home: Path,
    *,
    retention_days: int | None = None,
    lock_mode: str = "GOVERNANCE",
    endpoint_url: str | None = None,
) -> ArtifactStore:
    """The artifact store named by ``sinks.rawArtifacts.pathTemplate`` (None → the local default).

    ``retention_days`` sets the object-lock retain-until date on S3 buckets with object
    lock enabled (ignored elsewhere).
    """
    field = "sinks.rawArtifacts.pathTemplate"
    home = Path(home)
    if not path_template:
        return LocalStore(home / "objects")
    if not isinstance(path_template, str):
        raise BenchrunError(f"{field}: must be a string such as s3://bucket/raw/${{RUN_ID}}/")
    parsed = urllib.parse.urlparse(path_template)
    if parsed.scheme == "s3":
        key = parsed.path.lstrip("/")
        base, prefix = _split_template(key, field)
        confine_s3_location(parsed.netloc, base, field)
        if base and not base.endswith("/") and prefix:
            # "raw-${RUN_ID}/" style: keep the literal text before the placeholder in the prefix.
            base, prefix = "", key
        return S3Store(parsed.netloc, base, prefix, retention_days=retention_days, lock_mode=lock_mode,
                       endpoint_url=endpoint_url)
    return LocalStore(*_local_root(path_template, parsed, home, field))


def _local_root(path_template: str, parsed: urllib.parse.ParseResult, home: Path, field: str) -> tuple[Path, str]:
    """(root, per-run prefix template) of a local store's ``file://`` or plain-path template,
    confined to the home or the operator's roots; the one reading admission and opening share."""
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise BenchrunError(f"{field}: file:// URI names host {parsed.netloc!r}; use file:///absolute/path")
        raw = urllib.parse.unquote(parsed.path)
    elif parsed.scheme in ("",) or (len(parsed.scheme) == 1 and path_template[1:3] == ":\\"):
        raw = path_template
    else:
        raise BenchrunError(f"{field}: scheme {parsed.scheme}:// is not supported; use s3://, file:// or a path")
    base, prefix = _split_template(raw, field)
    if base and not base.endswith("/") and prefix:
        base, prefix = str(Path(base).parent) + "/", Path(base).name + prefix
    root = Path(base or ".")
    if not root.is_absolute():
        root = Path(home) / root
    confine_local_root(root, prefix, Path(home), field)
    return root, prefix


STORE_ROOTS_ENV = "BENCHRUN_STORE_ROOTS"


def confine_local_root(root: Path, prefix: str, home: Path, field: str) -> None:
    """A local store lives under the home or under a root the operator configured
    (``$BENCHRUN_STORE_ROOTS``, ':'-separated); no '..' in the per-run part. A spec cannot
    send evidence anywhere else on the machine."""
    if ".." in prefix.replace("\\", "/").split("/"):
        raise BenchrunError(f"{field}: '..' after ${{RUN_ID}} would leave the store's root; remove it")
    allowed = [Path(home).resolve()] + [Path(r).expanduser().resolve()
                                        for r in os.environ.get(STORE_ROOTS_ENV, "").split(":") if r.strip()]
    resolved = Path(os.path.abspath(root))  # lexical: '..' collapses even where nothing exists yet
    resolved = resolved.resolve()
    if not any(resolved == a or resolved.is_relative_to(a) for a in allowed):
        raise BenchrunError(
            f"{field}: the local store {resolved} is outside the benchrun home {allowed[0]}; evidence stays under "
            f"the home or a root the operator lists in ${STORE_ROOTS_ENV}"
        )
    if resolved.is_relative_to(allowed[0]):
        clash = _home_folder(resolved.relative_to(allowed[0]).parts)
        if clash is not None:
            raise BenchrunError(f"{field}: the local store {resolved} would write into {clash}; {_STORE_FIX}")


# The home's own folders (and the shared state's, which mirrors the home): a store among them would
# write its objects and manifests into another run's directory, the signed specs or the keys.
# Every folder benchrun makes in a home is here (tests/test_verify_hardening.py reads the code for them):
# dagster_home/ (the Dagster instance) and report_workers/ were missing, and a store could be put there.
HOME_FOLDERS = frozenset({"runs", "specs", "keys", "published", "warehouse", "locks", "liveness", "metrics", "cache",
                          "confirmations", "dagster_home", "report_workers", "warehouse.duckdb",
                          "warehouse.duckdb.lock", "dagster", "storage", "history", "logs"})
_STORE_FIX = "give a folder of its own, such as objects/${RUN_ID}/ (the default store is objects/)"


def _home_folder(parts: tuple[str, ...] | list[str]) -> str | None:
    """What of the home a store at ``parts`` (relative to the home, or to the shared state's prefix)
    would write into: "the home itself", "its runs/ folder", ...; None when it is a folder of its own."""
    parts = [p for p in parts if p not in ("", ".")]
    if not parts:
        return "the home itself (beside its runs/, specs/ and keys/)"
    if parts[0] in HOME_FOLDERS:
        return f"the home's {parts[0]}/ folder"
    return None


def confine_s3_location(bucket: str, base: str, field: str) -> None:
    """An S3 store (``bucket``, key text before ``${RUN_ID}``) must not lie among the shared state's own
    folders (``$BENCHRUN_SHARED_STATE`` mirrors the home: a store at its ``runs/<other-run>/`` is pulled
    into that run's directory) nor inside the warehouse's table location (``$BENCHRUN_WAREHOUSE_LOCATION``)."""
    from benchrun.sharedstate import ENV as SHARED_ENV
    from benchrun.warehouse.lakecatalog import LOCATION_ENV

    here = f"s3://{bucket}/{base}"
    for env in (SHARED_ENV, LOCATION_ENV):
        other = urllib.parse.urlparse(os.environ.get(env, "").strip())
        if other.scheme != "s3" or other.netloc != bucket:
            continue
        root = other.path.strip("/")
        inside = not root or base == root or base.startswith(root + "/")
        if not inside:
            continue
        rest = base[len(root):].strip("/").split("/") if root else base.strip("/").split("/")
        clash = "the warehouse's table location" if env == LOCATION_ENV else (
            _home_folder(rest) and _home_folder(rest).replace("the home", "the shared state"))
        if clash:
            raise BenchrunError(f"{field}: the store {here} would write into {clash} (${env} is "
                                f"{os.environ[env].strip()}); {_STORE_FIX}")


def check_path_template(path_template: str | None, home: Path) -> None:
    """Admission check of ``sinks.rawArtifacts.pathTemplate`` against this home (nothing is created)."""
    field = "sinks.rawArtifacts.pathTemplate"
    if not path_template:
        return
    parsed = urllib.parse.urlparse(path_template)
    if parsed.scheme == "s3":
        base, _ = _split_template(parsed.path.lstrip("/"), field)
        confine_s3_location(parsed.netloc, base, field)
        return
    _local_root(path_template, parsed, Path(home), field)


def portable_address(uri: str, key: str) -> str:
    """The address the warehouse keeps for a stored object: an ``s3://`` URI as it is; a local
    object as its key relative to the store's root (``sha256/ab/ab…``), so moving the home
    (or the store's root with it) keeps every lineage address valid."""
    return uri if uri.startswith("s3://") else key


def portable_store_uri(store_uri: str | None, home: Path) -> str | None:
    """A local store's URI relative to the home when it lies inside it (``objects/``), else unchanged."""
    if not store_uri or not store_uri.startswith("file://"):
        return store_uri
    path = Path(urllib.parse.unquote(urllib.parse.urlparse(store_uri).path))
    try:
        rel = path.relative_to(Path(home).resolve())
    except ValueError:
        return store_uri
    return rel.as_posix() + ("/" if store_uri.endswith("/") else "")


def hash_uri(uri: str) -> str:
    """Re-hash the stored object at ``uri`` (``file://`` or ``s3://``), streaming."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme == "file":
        path = Path(urllib.parse.unquote(parsed.path))
        if not path.is_file():
            raise BenchrunError(f"{uri}: stored object is missing")
        return sha256_file(path)
    if parsed.scheme == "s3":
        store = S3Store(parsed.netloc, "")
        return store.hash_key(parsed.path.lstrip("/"))
    raise BenchrunError(f"{uri}: not a stored object URI (file:// or s3://)")
