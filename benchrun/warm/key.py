"""Where a warm orchestrator for this code listens: the code's key (a digest of what a fresh
process depends on at import) and the private socket directory."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

# The packages a server imports and digests: benchrun's own, beside each other in the repo.
CODE_PACKAGES = ("benchrun", "bench_assets", "resources", "schedules", "sensors")
# Environment read by the interpreter or by libraries at import time: a server started under
# other values would not behave as a fresh process would, so they are part of its key.
KEY_ENV_PREFIXES = ("PYTHON", "LC_", "LANG", "OMP_", "OPENBLAS_", "MKL_", "LD_", "DAGSTER_", "MPL", "BENCHRUN_")
KEY_ENV_NAMES = frozenset({"TERMINAL_WIDTH", "FORCE_COLOR", "PY_COLORS", "NO_COLOR", "GITHUB_ACTIONS"})
# Read per command, never at import: a server serves every home.
KEY_ENV_EXCLUDED = frozenset({"BENCHRUN_HOME", "BENCHRUN_WARM", "BENCHRUN_WARM_DIR"})


class WarmError(Exception):
    """The warm path cannot be used; the message says why and what to do."""


# --- where a server for this code listens ------------------------------------------------

def code_root() -> Path:
    """The directory benchrun is imported from (the repo root for an editable install)."""
    return Path(__file__).resolve().parent.parent.parent


def code_key(environ: dict[str, str] | None = None, root: Path | None = None) -> str:
    """Digest of everything a fresh ``benchrun`` process would depend on at import time."""
    environ = os.environ if environ is None else environ
    root = code_root() if root is None else root
    h = hashlib.sha256()
    h.update(os.fsencode(f"{sys.executable}\0{sys.version}\0{root}\0"))
    for name in sorted(environ):
        if (name.startswith(KEY_ENV_PREFIXES) or name in KEY_ENV_NAMES) and name not in KEY_ENV_EXCLUDED:
            h.update(os.fsencode(f"{name}={environ[name]}\0"))
    for pkg in CODE_PACKAGES:
        for dirpath, dirnames, filenames in os.walk(root / pkg):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for fn in sorted(filenames):
                if fn.endswith(".py"):
                    st = os.stat(os.path.join(dirpath, fn))
                    h.update(os.fsencode(f"{dirpath}/{fn}\0{st.st_size}\0{st.st_mtime_ns}\0"))
    import sysconfig

    for key in ("purelib", "platlib"):  # a pip install changes these directories' mtimes
        path = sysconfig.get_paths().get(key)
        if path and os.path.isdir(path):
            h.update(os.fsencode(f"{path}\0{os.stat(path).st_mtime_ns}\0"))
    return h.hexdigest()[:24]


def socket_dir(environ: dict[str, str] | None = None, create: bool = False) -> Path:
    """``$BENCHRUN_WARM_DIR``, else ``$XDG_RUNTIME_DIR/benchrun``, else ``/tmp/benchrun-<uid>``;
    it must be ours and closed to others (0700), else WarmError names it."""
    environ = os.environ if environ is None else environ
    if environ.get("BENCHRUN_WARM_DIR"):
        path = Path(environ["BENCHRUN_WARM_DIR"])
    elif environ.get("XDG_RUNTIME_DIR"):
        path = Path(environ["XDG_RUNTIME_DIR"]) / "benchrun"
    else:
        path = Path("/tmp") / f"benchrun-{os.getuid()}"
    if create:
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise WarmError(f"{path}: cannot create the warm orchestrator's directory ({exc.strerror})") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise WarmError(f"{path}: not a directory owned by uid {os.getuid()}; remove it or set BENCHRUN_WARM_DIR")
    if st.st_mode & 0o077:
        raise WarmError(f"{path}: open to other users (mode {st.st_mode & 0o777:o}); chmod 700 it or remove it")
    return path


def socket_path(environ: dict[str, str] | None = None, create: bool = False) -> Path:
    return socket_dir(environ, create) / f"{code_key(environ)}.sock"
