"""The spec commands of the CLI: ``benchrun validate``, ``benchrun digest``, ``benchrun crd``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the pydantic model costs ~0.5 s to import; `benchrun --help` needs none of it
    from benchrun.spec.validation import DocumentResult


def _label(result: DocumentResult) -> str:
    where = result.file if result.index == 0 else f"{result.file} (document {result.index + 1})"
    name = result.summary.get("name")
    return f"{where}: {name}" if isinstance(name, str) else where


def _describe(result: DocumentResult) -> str:
    s = result.summary
    parts = [str(s.get(k)) for k in ("benchmarkClass", "workloadType", "cadence") if s.get(k)]
    parts.append(f"{s.get('suites', 0)} suites")
    return ", ".join(parts)


def exit_code(results: list[DocumentResult]) -> int:
    """2 when a file is unreadable or not YAML, 1 when a document is invalid, else 0."""
    if any(r.fatal for r in results):
        return 2
    if any(not r.valid for r in results):
        return 1
    return 0


def register(app: typer.Typer) -> None:
    """Add validate, digest and crd to the benchrun app."""

    @app.command("validate")
    def validate(
        paths: list[Path] = typer.Argument(..., help="Spec files or folders (every *.yaml / *.yml inside)."),
        as_json: bool = typer.Option(False, "--json", help="One JSON object per document, one per line."),
    ) -> None:
        """Check BenchmarkRun documents against the model and every admission rule.

        Exit 0 when all are valid, 1 when any is invalid, 2 when a file cannot be read, is
        not YAML or holds more than one document (a spec file holds exactly one BenchmarkRun).
        """
        from benchrun.spec.validation import validate_path

        results: list[DocumentResult] = []
        for path in paths:
            results.extend(validate_path(path))
        if as_json:
            for result in results:
                typer.echo(json.dumps(result.to_json(), ensure_ascii=False, sort_keys=True))
        else:
            for result in results:
                if result.skipped:
                    typer.echo(f"skip    {_label(result)}: {result.summary.get('skipped')}")
                elif result.valid:
                    typer.echo(f"valid   {_label(result)} ({_describe(result)})")
                    for warning in result.warnings:
                        typer.echo(f"  warning: {warning}")
                else:
                    tag = "error  " if result.fatal else "invalid"
                    typer.echo(f"{tag} {_label(result)}: {len(result.errors)} error(s)")
                    for error in result.errors:
                        typer.echo(f"  {error}")
            checked = [r for r in results if not r.skipped]
            valid = sum(r.valid for r in checked)
            typer.echo(f"{len(checked)} document(s): {valid} valid, {len(checked) - valid} with errors")
        raise typer.Exit(exit_code(results))

    @app.command("digest")
    def digest(
        file: Path = typer.Argument(..., help="A file holding one BenchmarkRun."),
        as_json: bool = typer.Option(False, "--json", help="Print a JSON object."),
    ) -> None:
        """Print the spec_digest and workload_spec_digest of a valid spec (sha256, canonical JSON)."""
        from benchrun.spec.validation import load_spec

        loaded = load_spec(file)
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "file": str(file),
                        "spec_digest": loaded.spec_digest,
                        "workload_spec_digest": loaded.workload_spec_digest,
                    }
                )
            )
        else:
            typer.echo(f"spec_digest           {loaded.spec_digest}")
            typer.echo(f"workload_spec_digest  {loaded.workload_spec_digest}")

    @app.command("crd")
    def crd(
        write: bool = typer.Option(False, "--write", help="Write the committed copies (specs/crd/ and "
                                   "deploy/kustomize/base/) instead of printing."),
    ) -> None:
        """Print the BenchmarkRun CustomResourceDefinition (generated from the model)."""
        from benchrun.spec.crd import crd_yaml, write_committed

        if write:
            for path in write_committed():
                typer.echo(f"wrote {path}")
            return
        typer.echo(crd_yaml(), nl=False)
