"""``benchrun verify --store``: every run of the home verified, and every object manifest in
the stores they use re-hashed, including manifests whose run directory is gone."""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass
class StoreReport:
    """What was checked (lines to print) and what failed (one line each)."""

    lines: list[str] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)


def walk_store(public_key: Path | None, pinned: tuple[str, ...], home: Path | None = None) -> StoreReport:
    """Verify every signed run (signature, files, stored objects); re-hash every stored manifest."""
    from benchrun.errors import BenchrunError
    from benchrun.paths import benchrun_home
    from benchrun.provenance import envelope_path, verify_run
    from benchrun.provenance.signing import run_store_template, verify_stored
    from benchrun.rundir import list_runs
    from benchrun.store import open_store

    home = benchrun_home(home)
    report = StoreReport()
    stores: dict[str | None, object] = {}
    seen: set[tuple[str, str]] = set()
    for rd in list_runs(home):
        template = run_store_template(rd.path)
        try:
            if template not in stores:
                stores[template] = open_store(template, home)
            if not envelope_path(rd.path).is_file():
                report.lines.append(f"run {rd.run_id}: not signed (no provenance envelope): signature not checked")
                digest = rd.read_status().get("artifact_manifest_digest")
                if digest:
                    store = stores[template]
                    n = store.verify(store.load_manifest(rd.run_id, digest))
                    seen.add((rd.run_id, digest))
                    report.lines.append(f"run {rd.run_id}: {n} stored objects re-hashed: all match")
                continue
            st = verify_run(rd.path, public_key, home=home, pinned=pinned)
            n = verify_stored(rd.path, st, home)
            seen.add((rd.run_id, str(st.predicate.get("artifact_manifest_digest"))))
            report.lines.append(f"run {rd.run_id}: signature, {len(st.subjects)} signed files and {n} stored "
                                "objects verified")
        except BenchrunError as exc:
            report.failures.append(f"run {rd.run_id}: {exc}")
            report.lines.append(f"run {rd.run_id}: FAILED: {exc}")
    # Manifests in the stores that no run directory accounts for (latest version per run); the
    # default store is walked even when no run directory is left to name it.
    if None not in stores:
        try:
            stores[None] = open_store(None, home)
        except BenchrunError as exc:
            report.failures.append(f"default store: {exc}")
    for template, store in stores.items():
        for run_id in store.list_manifest_run_ids():
            try:
                manifest = store.load_manifest(run_id)
                if (run_id, manifest.digest) in seen:
                    continue
                n = store.verify(manifest)
                where = store.key_uri(store.manifest_key(run_id, manifest.digest))
                report.lines.append(f"stored run {run_id} (manifest {where}): {n} objects re-hashed: all match")
            except BenchrunError as exc:
                report.failures.append(f"stored run {run_id}: {exc}")
                report.lines.append(f"stored run {run_id}: FAILED: {exc}")
    report.lines.append(f"verify --store: {len(report.failures)} failure(s)")
    return report
