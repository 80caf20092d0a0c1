"""``benchrun render``: every object a run would create on the cluster, created nowhere.

The objects are the launcher's own: the same planner, the same ``LauncherSettings`` (from
``BENCHRUN_LAUNCHER_*``, as the Dagster definitions read them) and the same manifest
builders (``KubernetesLauncher.manifests``: a Job per replicate, a JobSet per gang, one layer
Job per publication-grade layer), so what is reviewed (or committed for GitOps) is what a run
submits. The run id is a placeholder
(``<name>-00000000000000-<digest8>``) unless one is given; Pipes bootstrap variables are
absent (a Dagster run adds them at launch time). The class and scheduler path are admission's: a
publication-grade spec the launcher cannot honour renders as the realism-grade run it would be (the
downgrade is said on stderr), and a spec asking for slinky on a launcher without slurm-bridge is
refused as its admission would be.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError

EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Rendered:
    """What ``benchrun render`` shows for a spec: the objects a run would create, the benchmark class and
    scheduler path it would be admitted with, and what its admission would say (a downgrade)."""

    objects: list[dict[str, Any]]
    benchmark_class: str  # granted: publication_grade | realism_grade
    scheduler_path: str  # kueue | kueue+slinky
    warnings: tuple[str, ...] = ()


def render_objects(spec: Path, *, launcher: str | None = None, run_id: str | None = None,
                   home: Path | None = None) -> list[dict[str, Any]]:
    """The Jobs (and JobSets, for multi-node suites) of every enabled layer, in launch order
    (:func:`render_run`'s objects)."""
    return render_run(spec, launcher=launcher, run_id=run_id, home=home).objects


def render_run(spec: Path, *, launcher: str | None = None, run_id: str | None = None,
               home: Path | None = None) -> Rendered:
    """What a run of ``spec`` would create: a Job per replicate, or, when publication grade is granted,
    one Job per layer without a gang. The class is the one admission would grant
    (``lifecycle.class_granted``, the launcher's offer and the signing the spec asks for): a
    publication-grade spec the launcher cannot honour (a moving image tag, no dedicated nodes, a
    signature this installation cannot make) renders as the realism-grade run it would be, the
    downgrade said in ``warnings`` as its ``PublicationGuaranteesMet`` condition would say it. The
    scheduler path is the launcher's for the spec's ``intent.schedulerPath`` (refused, as at admission,
    when it asks for slinky on a launcher without slurm-bridge)."""
    from benchrun.launch.kubernetes import KubernetesLauncher
    from benchrun.launch.settings import LauncherSettings
    from benchrun.lifecycle import class_granted, downgrade_reason
    from benchrun.paths import benchrun_home, validate_run_id
    from benchrun.plan import plan_run
    from benchrun.spec import load_spec

    settings = LauncherSettings.from_env(kind=launcher)
    if settings.kind != "kubernetes":
        raise BenchrunError(
            "launcher kind is 'local': suites run as processes here and nothing is created on a cluster; "
            "render what the Kubernetes launcher would create with --launcher kubernetes "
            "(or BENCHRUN_LAUNCHER_KIND=kubernetes)")
    loaded = load_spec(spec)
    run = loaded.run
    if run_id is None:
        stem = "".join(ch if ch.isalnum() else "-" for ch in run.metadata.name.lower()).strip("-")[:39] or "run"
        run_id = f"{stem}-00000000000000-{loaded.spec_digest.removeprefix('sha256:')[:8]}"
    validate_run_id(run_id)
    path = settings.scheduler_path_for(run.spec.intent.scheduler_path)  # refused as admission refuses it
    home = Path(settings.run_home) if settings.run_home else benchrun_home(home)
    run_dir = home / "runs" / run_id
    plans = plan_run(run, run_id, run_dir, home=home, record_plan=False)  # a preview records nothing
    suites = [s for layer in run.spec.layers if layer.enabled for s in layer.suites]
    can_publish, why = settings.publication_offer_for(suites)
    granted = class_granted(run.spec, can_publish)
    downgrade = downgrade_reason(run.spec, can_publish, why)
    warnings = (f"publication_grade asked for, realism_grade granted: {downgrade}; the objects are those of "
                "the realism-grade run",) if downgrade else ()
    placement = settings.placement(granted == "publication_grade", run_home=str(home), cadence=run.spec.intent.cadence,
                                   scheduler_path=path)
    # the launcher's own choice per layer: a publication layer is one Job, else a Job or JobSet per replicate
    k8s = KubernetesLauncher(None, None, settings.namespace, placement, gang=settings.gang_options())
    objects = []
    for plan in plans:
        for obj in k8s.manifests(plan.invocations, plan.contended_reruns):
            if obj["kind"] == "Job":
                KubernetesLauncher._model(obj)  # dagster-k8s names any field the API would not know
            objects.append(obj)
    return Rendered(objects, granted, path, warnings)


def register(app: Any) -> None:
    import typer

    @app.command("render")
    def render(
        spec: Path = typer.Argument(..., help="A BenchmarkRun spec file."),
        launcher: str = typer.Option(None, "--launcher", help="Launcher kind (default: BENCHRUN_LAUNCHER_KIND)."),
        output: str = typer.Option("yaml", "-o", "--output", help="yaml (one document per object) or json (a v1 List)."),
        run_id: str = typer.Option(None, "--run-id", help="Run id to render with (default: a placeholder)."),
    ) -> None:
        """Print every object a run of SPEC would create on the cluster, without creating any.

        The Jobs carry the Kueue labels, per-suite resources and their fixed names; the launcher
        settings come from BENCHRUN_LAUNCHER_* as in the Dagster definitions.
        """
        import json

        import yaml

        if output not in ("yaml", "json"):
            raise BenchrunError(f"-o/--output: {output!r} is not a format; use yaml or json")
        rendered = render_run(spec, launcher=launcher, run_id=run_id)
        objects = rendered.objects
        for warning in rendered.warnings:  # what the run's admission would say (a downgrade)
            typer.echo(f"warning: {warning}", err=True)
        from benchrun.launch.settings import LauncherSettings

        chosen = LauncherSettings.from_env(kind=launcher)
        if not chosen.run_volume_claim and not chosen.outputs_uri:
            typer.echo("warning: no way back for the suites' files (BENCHRUN_LAUNCHER_OUTPUTS_URI or _RUN_VOLUME_CLAIM): "
                       "each pod's run directory is an emptyDir that ends with the pod, so a suite's sample files are "
                       "lost; set BENCHRUN_LAUNCHER_OUTPUTS_URI=s3://bucket/prefix as deploy/ does (or a "
                       "ReadWriteMany claim: deploy/kustomize/shared-volume)", err=True)
        if output == "json":
            typer.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2, sort_keys=False))
        else:
            typer.echo(yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True), nl=False)
