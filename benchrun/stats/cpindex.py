"""The shared state's index of Succeeded runs by workload: ``index/workload/<workload digest>/<run id>``, an
empty object each, so the report's history figure reads its workload's runs and not every run's status.

Written as a Succeeded status is pushed (:func:`index_status`, from ``benchrun.sharedstate``), and healed by a
full pass over the shared runs (:func:`heal`: change_points' nightly pass, or a report's history read before any
pass healed it), which then writes ``index/workload/.complete``. Until that marker exists the index is not
trusted (runs pushed before it existed are not in it) and a history reads every run's status, as before; after,
:func:`indexed` names the candidates and each one's status still decides (a run deleted, or Failed after it
Succeeded, drops out there; ``benchrun delete`` removes a run's key with its shared copy). Hand-written: a few
object keys, no library does this for S3.

The shared state object is passed in, never imported (``benchrun.sharedstate`` imports this module).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Mapping

from benchrun.paths import is_run_id

log = logging.getLogger(__name__)

INDEX = "index/workload/"
COMPLETE = f"{INDEX}.complete"
_DIGEST = re.compile(r"[0-9a-f]{64}")


def index_key(status: Any) -> str | None:
    """The index key of a Succeeded run's status (None for any other, or one whose digest or id does not
    read as benchrun writes them: never a key built from anything else)."""
    if not isinstance(status, dict) or status.get("phase") != "Succeeded":
        return None
    digest, run_id = status.get("workload_spec_digest"), status.get("run_id")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest) or not is_run_id(run_id):
        return None
    return f"{INDEX}{digest}/{run_id}"


def index_status(shared: Any, path: Path) -> None:
    """After a status.json was pushed: its run's index key, when it says Succeeded. A failure is logged,
    not raised (the status is pushed; the next full pass, change_points' every night, adds the key)."""
    try:
        key = index_key(json.loads(Path(path).read_bytes()))
        if key is not None:
            shared.put_marker(key)
    except Exception as exc:  # noqa: BLE001 - an index is an optimisation
        log.warning("shared state: %s not indexed by its workload (%s); the next full pass adds it", path, exc)


def indexed(shared: Any, workload: str) -> list[str] | None:
    """The run ids the index names for ``workload``; None while the index is not known complete (or the
    digest does not read as one): then every shared run is read."""
    if not _DIGEST.fullmatch(workload or "") or not shared.list_keys(COMPLETE):
        return None
    top = f"{INDEX}{workload}/"
    return sorted(k[len(top):] for k in shared.list_keys(top) if is_run_id(k[len(top):]))


def heal(shared: Any, statuses: Mapping[str, Any]) -> int:
    """After a pass that read every shared run's status (``statuses``: run id -> status): the index keys
    missing for its Succeeded runs, then the marker that the index is complete; how many were added. A
    failure is logged, never raised: the history it served is whole either way."""
    try:
        held = set(shared.list_keys(INDEX))
        missing = [k for k in (index_key(s) for s in statuses.values()) if k is not None and k not in held]
        for key in missing:
            shared.put_marker(key)
        if COMPLETE not in held:
            shared.put_marker(COMPLETE)
        return len(missing)
    except Exception as exc:  # noqa: BLE001 - an index is an optimisation; the next full pass heals it
        log.warning("shared state: the workload index was not healed (%s); the next full pass does", exc)
        return 0
