"""``benchrun verify --store``: every run of the home verified, and every object manifest in
the stores they use re-hashed, including manifests whose run directory is gone."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class StoreReport:
    """What was checked (lines to print) and what failed (one line each)."""

    lines: list[str] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)


def unsigned(rd: Any, templates: Any = ()) -> tuple[bool, str]:
    """``(failure, why)`` for run ``rd`` (a RunDir) that has no provenance envelope, the one rule of
    `verify RUN_ID` and `verify --store`. benchrun signs every run that finishes its analysis (the
    provenance_attestation asset, after the evidence is sealed): a run that sealed its evidence
    (manifest.json, its digest in status.json, an object manifest in any local layout or in the store
    its pinned spec names, or rows in the warehouse: :func:`sealed_evidence`) or Succeeded without an
    envelope fails, fail-closed (the envelope was removed, or signing failed). A run that never sealed
    anything (canceled, failed or rejected before its evidence, or still running) published nothing to
    verify: not a failure. The pinned spec is not signed here either (an edited storage pathTemplate
    hid the stored manifest), so it only adds a place to look; a store that cannot be read (the run's
    own, or a local layout) or a warehouse that cannot be read fails the run: nothing then shows it
    sealed nothing. ``templates``: more artifact stores to look in (``verify --store`` passes every
    run's); a run whose pinned spec is gone cannot say where it stored its evidence, and fails."""
    from benchrun.errors import BenchrunError
    from benchrun.provenance import envelope_path
    from benchrun.rundir import TERMINAL_PHASES

    env = envelope_path(rd.path).relative_to(rd.path)
    try:
        st = rd.read_status()
    except BenchrunError as exc:
        return True, f"not signed ({env} is missing) and its status cannot be read ({exc})"
    phase = str(st.get("phase") or "unknown")
    sealed = (rd.path / "manifest.json").is_file() or bool(st.get("artifact_manifest_digest"))
    where = error = None
    if not sealed:
        where, error = sealed_evidence(rd, templates)
        pinned = rd.path / "structured" / f"{rd.run_id}_spec.yaml"
        if not pinned.is_file():
            found = f"; it did seal its evidence: {where}" if where else f"; {error}" if error else ""
            return True, (f"not signed ({env} is missing) and its pinned spec {pinned.relative_to(rd.path)} is gone: "
                          "it names the artifact store that would show whether the run sealed evidence, so nothing "
                          f"shows this run published nothing{found}")
        if where is None and error is not None:
            return True, (f"not signed ({env} is missing, phase {phase}) and it cannot tell whether it sealed "
                          f"evidence: {error}")
        sealed = where is not None
    if sealed and phase == "Analyzing":
        # status.json (the phase) is not signed: "being analyzed" holds only while a live process claims
        # the run, and even then its files must still be the ones it sealed (a sealed run tampered with,
        # its envelope deleted and its phase set back to Analyzing passed)
        from benchrun.liveness import describe, live_claim

        from benchrun.sharedstate import shared_state

        claim = live_claim(rd.home, rd.run_id)
        # With shared state the run is analyzed in another pod, whose claim lives in its own home: a home here
        # cannot see it, so there the sealed files alone decide (a healthy run being analyzed read as a failure)
        elsewhere = claim is None and shared_state() is not None
        if claim is None and not elsewhere:
            return True, (f"not signed: {env} is missing and its evidence is sealed, yet no live process is analyzing "
                          "it (status.json says Analyzing, but the run has no live liveness claim): the envelope was "
                          "removed or signing failed: nothing shows its files are the ones it measured")
        who = "in another pod (shared state: its claim is not visible here)" if elsewhere else describe(claim)
        differ = sealed_mismatches(rd, templates)
        if differ:
            return True, (f"not signed yet (phase Analyzing, analyzed {who}), but its sealed evidence "
                          f"changed: {', '.join(differ[:10])}{' ...' if len(differ) > 10 else ''}")
        return False, (f"not signed yet: its evidence is sealed and it is being analyzed (phase Analyzing, "
                       f"{who}); its files match its sealed manifest; it is signed when it finishes: "
                       "verify it then")
    if sealed or phase == "Succeeded":
        shown = f" ({where})" if where else ""
        return True, (f"not signed: {env} is missing, yet the run "
                      f"{f'sealed its evidence{shown}' if sealed else 'succeeded'} (phase {phase}); every run "
                      "benchrun finishes is signed, so the envelope was removed or signing failed: nothing shows "
                      "its files are the ones it measured")
    if phase in TERMINAL_PHASES:
        why = f": {st['message']}" if isinstance(st.get("message"), str) and st["message"] else ""
        return False, (f"not signed: it never finished (phase {phase}{why}), so its evidence was never sealed "
                       "or published: there is nothing to verify")
    return False, (f"not signed yet: the run is {phase} and has sealed no evidence; it is signed when it "
                   "finishes: verify it then")


def sealed_mismatches(rd: Any, templates: Any = ()) -> list[str]:
    """``relpath (why)`` for each file of run ``rd`` that differs from what it sealed: the files
    manifest.json hashes, and every object of the run's object manifests in its artifact stores (the
    version status.json names and the latest, in the stores :func:`sealed_evidence` looks in), manifest.json
    itself included. Empty when everything sealed is unchanged."""
    import json

    from benchrun.errors import BenchrunError
    from benchrun.provenance.signing import run_store_template
    from benchrun.provenance.statement import digest_mismatches
    from benchrun.store import open_store

    bad: list[str] = []
    try:
        doc = json.loads((rd.path / "manifest.json").read_text(encoding="utf-8"))
        sha = (doc.get("summary") or {}).get("sha256") if isinstance(doc, dict) else None
        if not isinstance(sha, dict) or not sha:
            bad.append("manifest.json (no summary.sha256)")
        else:
            bad += digest_mismatches(rd.path, sha, "sha256 differs from manifest.json")
    except FileNotFoundError:
        bad.append("manifest.json (missing)")
    except (OSError, ValueError) as exc:
        bad.append(f"manifest.json (not readable: {exc})")
    try:
        digest = rd.read_status().get("artifact_manifest_digest")
    except BenchrunError:
        digest = None
    from benchrun.warehouse.rebuild import LOCAL_LAYOUTS

    found = False
    own = run_store_template(rd.path)
    for template in dict.fromkeys((own, *LOCAL_LAYOUTS, *templates)):
        try:
            store = open_store(template, rd.home)
            versions = [d for d in dict.fromkeys((digest, None))
                        if store.exists(store.manifest_key(rd.run_id, d))]
            for version in versions:
                stored = store.load_manifest(rd.run_id, version)
                found = True
                bad += digest_mismatches(rd.path, {o.path: o.sha256 for o in stored.objects},
                                         f"sha256 differs from the stored manifest {stored.digest[:16]}")
        except (BenchrunError, OSError) as exc:
            if template == own:  # the run's own store must answer; another run's store may not be ours to read
                bad.append(f"its artifact store {template or '(default)'} ({exc})")
    if digest and not found:
        bad.append(f"artifact_manifest_digest {digest} (no such object manifest in the run's artifact stores)")
    return list(dict.fromkeys(bad))


def sealed_evidence(rd: Any, templates: Any = ()) -> tuple[str | None, str | None]:
    """``(where, error)``: where evidence of run ``rd`` sealed outside its directory shows (None: nowhere
    that could be read), and why a place that must answer could not (None: each did). manifest.json
    and status.json (both in the run directory, both removable) cannot deny it.

    Looked in: every local layout benchrun writes (``rebuild.LOCAL_LAYOUTS``: the default store and one
    prefix per run), the store the run's pinned spec names, the ``templates`` given, and the warehouse
    (a run is curated only after its evidence is sealed). The pinned spec is unsigned while the run has
    no envelope, so it is never the only place looked in: an edited pathTemplate hid the manifest. A
    store of ``templates`` that is not the run's own may not be ours to read: its errors are ignored."""
    from benchrun.errors import BenchrunError
    from benchrun.provenance.signing import run_store_template
    from benchrun.store import open_store
    from benchrun.warehouse.rebuild import LOCAL_LAYOUTS

    own = run_store_template(rd.path)
    errors: list[str] = []
    for template in dict.fromkeys((*LOCAL_LAYOUTS, own, *templates)):
        try:
            store = open_store(template, rd.home)
            if store.exists(store.manifest_key(rd.run_id)):
                return f"an object manifest in {store.uri}", None
        except (BenchrunError, OSError) as exc:
            if template == own or template in LOCAL_LAYOUTS:  # the run's own store, or ours: they must answer
                errors.append(f"its artifact store {template or '(default)'} cannot be read ({exc})")
    try:
        tables = warehouse_tables_of(rd.home, rd.run_id)
    except (BenchrunError, OSError, ValueError) as exc:
        errors.append(f"the warehouse cannot be read ({exc})")
    else:
        if tables:
            return f"rows in the warehouse ({', '.join(tables[:3])}{' ...' if len(tables) > 3 else ''})", None
    return None, "; ".join(errors) or None


def warehouse_tables_of(home: Path, run_id: str) -> list[str]:
    """The warehouse tables holding rows of ``run_id``: its per-run parquet partitions and, where the
    home has Iceberg tables, the tables with a row of it; read only (no catalog or table is made)."""
    from benchrun.warehouse import lake
    from benchrun.warehouse.lakecatalog import catalog_exists
    from benchrun.warehouse.schemas import TABLES
    from benchrun.warehouse.writer import PART, warehouse_root

    out = {t for t in TABLES if (warehouse_root(home) / t / f"run_id={run_id}" / PART).is_file()}
    if lake.enabled() and catalog_exists(home):
        from pyiceberg.expressions import EqualTo

        for table in sorted(set(TABLES) - out):
            tbl = lake._existing_table(home, table)  # None where the catalog has no such table: none is made
            if tbl is None or tbl.current_snapshot() is None:
                continue
            if tbl.scan(row_filter=EqualTo("run_id", run_id), selected_fields=("run_id",), limit=1).to_arrow().num_rows:
                out.add(table)
    return sorted(out)


def walk_store(public_key: Path | None, pinned: tuple[str, ...], home: Path | None = None) -> StoreReport:
    """Verify every signed run (signature, files, stored objects); re-hash every stored manifest."""
    from benchrun.errors import BenchrunError
    from benchrun.paths import benchrun_home
    from benchrun.provenance import envelope_path, verify_run
    from benchrun.provenance.signing import final_signature_missing, run_store_template, verify_stored
    from benchrun.rundir import list_runs
    from benchrun.store import open_store
    from benchrun.store.base import unlisted_run_files

    home = benchrun_home(home)
    report = StoreReport()
    # Keyed by where the store is, not by how a spec spelled it: "objects/" and the default (None)
    # are one store, walked once.
    stores: dict[str, Any] = {}
    by_template: dict[str | None, Any] = {}

    def store_for(template: str | None) -> Any:
        if template not in by_template:
            store = open_store(template, home)
            by_template[template] = stores.setdefault(store.uri, store)
        return by_template[template]

    seen: set[tuple[str, str]] = set()
    runs = [(rd, run_store_template(rd.path)) for rd in list_runs(home)]
    templates = {template for _, template in runs}  # an unsigned run is looked for in each
    for rd, template in runs:
        try:
            store_for(template)
            if not envelope_path(rd.path).is_file():
                failed, why = unsigned(rd, templates)
                if failed:
                    raise BenchrunError(why)
                report.lines.append(f"run {rd.run_id}: {why}")
                digest = rd.read_status().get("artifact_manifest_digest")
                if digest:
                    store = store_for(template)
                    seen.add((rd.run_id, digest))  # checked here, passed or failed: not again below
                    n = store.verify(store.load_manifest(rd.run_id, digest))
                    report.lines.append(f"run {rd.run_id}: {n} stored objects re-hashed: all match")
                continue
            st = verify_run(rd.path, public_key, home=home, pinned=pinned)
            seen.add((rd.run_id, str(st.predicate.get("artifact_manifest_digest"))))
            n = verify_stored(rd.path, st, home)
            missing = final_signature_missing(rd.run_id, rd.read_status(), st)
            if missing:  # its stored objects were checked above; the run itself fails
                raise BenchrunError(missing)
            report.lines.append(f"run {rd.run_id}: signature, {len(st.subjects)} signed files and {n} stored "
                                "objects verified")
            report.lines += [f"run {rd.run_id}: not covered ({why}): {rel}" for rel, why in unlisted_run_files(rd.path)]
        except (BenchrunError, OSError) as exc:
            report.failures.append(f"run {rd.run_id}: {exc}")
            report.lines.append(f"run {rd.run_id}: FAILED: {exc}")
    # Manifests in the stores that no run directory accounts for (latest version per run); the local
    # layouts (the default store, one prefix per run) are walked even when no run directory (or only an
    # edited pinned spec) is left to name them.
    from benchrun.warehouse.rebuild import LOCAL_LAYOUTS

    for layout in LOCAL_LAYOUTS:
        if layout not in by_template:
            try:
                store_for(layout)
            except (BenchrunError, OSError) as exc:
                report.failures.append(f"{'default store' if layout is None else f'local store {layout}'}: {exc}")
    stored: set[str] = set()
    for store in stores.values():
        try:
            listed = store.list_manifest_run_ids()
        except (BenchrunError, OSError) as exc:  # this store's failure, named; the other stores are still walked
            report.failures.append(f"store {store.uri}: its manifests cannot be listed ({exc})")
            report.lines.append(f"store {store.uri}: FAILED: its manifests cannot be listed ({exc})")
            continue
        for run_id in listed:
            stored.add(run_id)
            try:
                manifest = store.load_manifest(run_id)
                if (run_id, manifest.digest) in seen:
                    continue
                seen.add((run_id, manifest.digest))  # the same manifest reached through another store
                n = store.verify(manifest)
                where = store.key_uri(store.manifest_key(run_id, manifest.digest))
                report.lines.append(f"stored run {run_id} (manifest {where}): {n} objects re-hashed: all match")
            except (BenchrunError, OSError) as exc:
                report.failures.append(f"stored run {run_id}: {exc}")
                report.lines.append(f"stored run {run_id}: FAILED: {exc}")
    _warehouse_runs(home, {rd.run_id for rd, _ in runs} | stored, report)
    report.lines.append(f"verify --store: {len(report.failures)} failure(s)")
    return report


def warehouse_run_ids(home: Path) -> dict[str, list[str]]:
    """Run id -> the warehouse tables holding its rows: the Iceberg tables (when they are the
    warehouse) and the per-run parquet partitions (that layout, or what an earlier release left)."""
    from benchrun.warehouse import lake
    from benchrun.warehouse.lakecatalog import catalog_exists
    from benchrun.warehouse.schemas import TABLES
    from benchrun.warehouse.writer import partition_run_ids

    out: dict[str, set[str]] = {}
    for table in sorted(TABLES):
        for run_id in partition_run_ids(home, table):
            out.setdefault(run_id, set()).add(table)
    if lake.enabled() and catalog_exists(home):
        for table in sorted(TABLES):
            for run_id in lake.run_ids(home, table):
                out.setdefault(run_id, set()).add(table)
    return {run_id: sorted(tables) for run_id, tables in sorted(out.items())}


def _warehouse_runs(home: Path, known: set[str], report: StoreReport) -> None:
    """Fail each run the warehouse holds rows of that no run directory (verified above, signed or
    judged unsigned) and no stored manifest stands behind: rows committed under a run id with no
    evidence anywhere are no run's. Rows left of a run `benchrun delete` or retention removed (its
    record says so) are named, not failed: deleting again, or retention, finishes the removal."""
    from benchrun.errors import BenchrunError
    from benchrun.warehouse.removed import removed_runs

    try:
        held = warehouse_run_ids(home)
    except (BenchrunError, OSError, ValueError) as exc:
        report.failures.append(f"warehouse: its run ids cannot be read ({exc})")
        report.lines.append(f"warehouse: FAILED: its run ids cannot be read ({exc})")
        return
    orphans = {run_id: tables for run_id, tables in held.items() if run_id not in known}
    removed = removed_runs(home) if orphans else {}
    for run_id, tables in orphans.items():
        where = f"{len(tables)} table(s): {', '.join(tables[:5])}{' ...' if len(tables) > 5 else ''}"
        if run_id in removed:
            report.lines.append(f"warehouse run {run_id}: rows left in {where} of a run {removed[run_id]} "
                                "(a removal stopped half-way: removing it again finishes it)")
            continue
        why = (f"rows in {where}, but no run directory, signed run or stored manifest stands behind them and "
               "no retention or delete record removed the run: they are no run's evidence (committed by hand?)")
        report.failures.append(f"warehouse run {run_id}: {why}")
        report.lines.append(f"warehouse run {run_id}: FAILED: {why}")
    if held:
        report.lines.append(f"warehouse: {len(held) - len(orphans)} run(s) with rows, each a run or stored run above")
