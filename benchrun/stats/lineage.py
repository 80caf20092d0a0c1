"""Lineage of published numbers: each summarised metric walks back to its run's digests and raw files.

A number is traceable when status.json carries ``workload_spec_digest`` and
``artifact_manifest_digest``, and every replicate behind it has its suite result and raw log
in the run directory, listed in ``manifest.json`` with a sha256 that still matches.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from benchrun.stats.load import load_run
from benchrun.store.base import sha256_file

if TYPE_CHECKING:
    import pandas as pd


def lineage_gaps(run_dir: str | os.PathLike[str], replicates: "pd.DataFrame") -> list[str]:
    """Every reason a number in ``replicates`` (a replicate table) cannot be traced; empty = complete."""
    run = load_run(run_dir)
    gaps = [f"status.json lacks {k}" for k in ("workload_spec_digest", "artifact_manifest_digest")
            if not run.status.get(k)]
    hashes = (run.manifest.get("summary") or {}).get("sha256") or {}
    if not run.manifest:
        gaps.append("manifest.json missing: raw files are not hashed")
    seen: set[tuple[str, int]] = set()
    # A run whose every replicate failed has no numbers: read back from JSON its table has no columns.
    keys = replicates[["suite", "replicate"]] if {"suite", "replicate"} <= set(replicates.columns) else None
    for suite, rep in ([] if keys is None else keys.drop_duplicates().itertuples(index=False)):
        if (suite, rep) in seen:
            continue
        seen.add((suite, rep))
        for rel in (f"structured/{run.run_id}_{suite}_r{rep}.json", f"raw/{run.run_id}_{suite}_r{rep}.log"):
            path = run.path / rel
            if not path.is_file():
                gaps.append(f"{rel} missing")
            elif run.manifest and rel not in hashes:
                gaps.append(f"{rel} not in manifest.json")
            elif run.manifest and hashes[rel] != sha256_file(path):
                gaps.append(f"{rel} changed since the manifest was written (sha256 differs)")
    return gaps
