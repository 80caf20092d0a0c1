"""The provenance commands of the CLI: ``benchrun verify RUN_ID``."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add verify to the benchrun app."""

    @app.command("verify")
    def verify(
        run_id: str = typer.Argument(..., help="The run whose signed provenance to check."),
        public_key: Path = typer.Option(None, "--public-key", help="PEM ed25519 public key to verify with "
                                        "(default: the signing key's public half)."),
    ) -> None:
        """Check a run's DSSE provenance signature and that every signed file is unchanged.

        Exit 0 when both hold; otherwise one line saying what failed and exit 1.
        """
        from benchrun.provenance import envelope_path, verify_run
        from benchrun.rundir import RunDir

        rd = RunDir.for_run(run_id)
        if not rd.path.is_dir():
            from benchrun.errors import BenchrunError

            raise BenchrunError(f"run {run_id}: no run directory under {rd.path.parent}")
        st = verify_run(rd.path, public_key)
        signing = st.predicate.get("signing") or {}
        typer.echo(f"verified {envelope_path(rd.path)}")
        typer.echo(f"  {len(st.subjects)} signed files unchanged; artifact_manifest_digest "
                   f"{st.predicate.get('artifact_manifest_digest')}")
        typer.echo(f"  signed with {signing.get('backend_used')} (requested: {signing.get('backend_requested')}) "
                   f"at {(st.predicate.get('timestamps') or {}).get('signed_utc')}")
