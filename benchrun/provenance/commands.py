"""The provenance commands of the CLI: ``benchrun verify RUN_ID`` and ``benchrun verify --store``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def _verify_one(run_id: str, public_key: Path | None, pinned: tuple[str, ...]) -> list[str]:
    """Verify one run (signature, every signed file, every stored object); the lines to print."""
    from benchrun.errors import BenchrunError
    from benchrun.provenance import envelope_path, verify_run
    from benchrun.provenance.signing import never_signed_why, uncovered_files, verify_stored
    from benchrun.rundir import RunDir

    rd = RunDir.for_run(run_id)
    if not rd.path.is_dir():
        raise BenchrunError(f"no such run {run_id!r} under {rd.path.parent}; `benchrun runs` lists the runs")
    if not envelope_path(rd.path).is_file():
        from benchrun.provenance.store_walk import unsigned

        failed, why = unsigned(rd)  # as `verify --store` judges it
        if failed:
            raise BenchrunError(f"run {run_id}: {why}")
        return [f"run {run_id}: {why} (nothing verified)"]
    st = verify_run(rd.path, public_key, pinned=pinned)
    from benchrun.provenance.signing import final_signature_missing

    missing = final_signature_missing(run_id, rd.read_status(), st)
    if missing:
        raise BenchrunError(missing)
    objects = verify_stored(rd.path, st, rd.home)
    signing = st.predicate.get("signing") or {}
    lines = [
        f"verified {envelope_path(rd.path)}",
        f"  {len(st.subjects)} signed files unchanged ({len(st.predicate.get('published_files') or [])} published "
        f"after the evidence was sealed); artifact_manifest_digest {st.predicate.get('artifact_manifest_digest')}",
        f"  {objects} stored objects re-hashed in the artifact store: all match",
        f"  signed with {signing.get('backend_used')} "
        + (f"(requested: {signing['backend_requested']}) " if signing.get("backend_requested")
           else "(the spec requested no backend) ")
        + f"at {(st.predicate.get('timestamps') or {}).get('signed_utc')}",
    ]
    from benchrun.provenance.statement import missing_partitions

    parts = st.predicate.get("warehouse_partitions")
    if parts is None:
        lines.append("  not covered: the run's warehouse partitions (signed before they were hashed into the statement)")
    else:
        gone = missing_partitions(st, rd.home)
        rows = st.predicate.get("warehouse_rows")
        signed = len(parts) + len(rows or {})
        lines.append(f"  {signed - len(gone)} warehouse partitions unchanged"
                     + (f" (Iceberg: the run's rows of {len(rows)} tables, by content)" if rows else "")
                     + (f"; {len(gone)} no longer present: {', '.join(gone[:5])}" if gone else ""))
    for rel in uncovered_files(rd.path, st):
        why = never_signed_why(rd.run_id, rel) or "added or replaced after signing: not covered by the signature"
        lines.append(f"  not covered: {rel} ({why})")
    from benchrun.store.base import unlisted_run_files

    # links, hidden and scratch files no manifest lists: a symlinked result document was read by show and report
    lines += [f"  not covered ({why}): {rel}" for rel, why in unlisted_run_files(rd.path)]
    return lines


def register(app: typer.Typer) -> None:
    """Add verify to the benchrun app."""

    @app.command("verify")
    def verify(
        run_id: Optional[str] = typer.Argument(None, help="The run whose signed provenance to check."),
        public_key: Path = typer.Option(None, "--public-key", help="PEM ed25519 public key to verify with "
                                        "(default: $BENCHRUN_VERIFY_PUBLIC_KEY or $BENCHRUN_SIGNING_KEY)."),
        trust_keyid: list[str] = typer.Option([], "--trust-keyid", help="Trust the home's own public key only "
                                              "if its fingerprint (keyid) is this one (also "
                                              "$BENCHRUN_TRUSTED_KEYIDS)."),
        store: bool = typer.Option(False, "--store", help="Walk every run and every object manifest in the store."),
    ) -> None:
        """Check a run's DSSE provenance signature, every signed file, and every stored object.

        Exit 0 when all hold (files the signature does not cover are listed); otherwise one
        line per failure and exit 1. With --store, every run of the home is checked. A run
        that never sealed its evidence (canceled, failed before it, still running) is not
        signed and has nothing to verify (exit 0, said so); a finished run without its
        envelope fails. A run whose report figures are still being drawn is waited for first.
        """
        from benchrun.errors import BenchrunError
        from benchrun.paths import existing_home

        pinned = tuple(trust_keyid)
        if store == (run_id is not None):
            raise BenchrunError("verify: give a RUN_ID or --store (not both)")
        home = existing_home("verify")
        from benchrun.report.worker import settle

        settle(home, lambda line: typer.echo(line, err=True))
        if not store:
            for line in _verify_one(run_id, public_key, pinned):
                typer.echo(line)
            return
        from benchrun.provenance.store_walk import walk_store

        report = walk_store(public_key, pinned)
        for line in report.lines:
            typer.echo(line)
        if report.failures:
            raise BenchrunError(f"verify --store: {len(report.failures)} failure(s): " + "; ".join(report.failures))
