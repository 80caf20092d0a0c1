"""``benchrun render``: every object a run would create on the cluster, created nowhere.

The objects are the launcher's own: the same planner, the same ``LauncherSettings`` (from
``BENCHRUN_LAUNCHER_*``, as the Dagster definitions read them) and the same manifest
builders (``KubernetesLauncher.manifests``: a Job per replicate, a JobSet per gang, one layer
Job per publication-grade layer), so what is reviewed (or committed for GitOps) is what a run
submits. The run id is a placeholder
(``<name>-00000000000000-<digest8>``) unless one is given; Pipes bootstrap variables are
absent (a Dagster run adds them at launch time).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError

EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)


def render_objects(spec: Path, *, launcher: str | None = None, run_id: str | None = None,
                   home: Path | None = None) -> list[dict[str, Any]]:
    """The Jobs (and JobSets, for multi-node suites) of every enabled layer, in launch order: a
    Job per replicate, or, when publication grade is granted, one Job per layer without a gang."""
    from benchrun.launch.kubernetes import KubernetesLauncher
    from benchrun.launch.settings import LauncherSettings
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
    home = Path(settings.run_home) if settings.run_home else benchrun_home(home)
    run_dir = home / "runs" / run_id
    plans = plan_run(run, run_id, run_dir, home=home, record_plan=False)  # a preview records nothing
    suites = [s for layer in run.spec.layers if layer.enabled for s in layer.suites]
    if run.spec.intent.benchmark_class == "publication_grade":
        for layer in run.spec.layers:
            for s in layer.suites if layer.enabled else []:
                image = s.image or settings.image
                if "@sha256:" not in image:
                    where = (f"spec.layers[{layer.name}].suites[{s.name}].image" if s.image else
                             f"BENCHRUN_LAUNCHER_IMAGE (the image of spec.layers[{layer.name}].suites[{s.name}], "
                             "which names none)")
                    raise BenchrunError(
                        f"{where}: {image!r} is a moving tag (no @sha256:): a tag can be pointed at another image, "
                        "and a publication-grade run records exactly what ran; pin the image by digest "
                        "(name@sha256:<64 hex>, from `docker buildx imagetools inspect`)")
    can_publish, _why = settings.publication_offer_for(suites)
    publication = run.spec.intent.benchmark_class == "publication_grade" and can_publish
    placement = settings.placement(publication, run_home=str(home), cadence=run.spec.intent.cadence)
    # the launcher's own choice per layer: a publication layer is one Job, else a Job or JobSet per replicate
    k8s = KubernetesLauncher(None, None, settings.namespace, placement, gang=settings.gang_options())
    objects = []
    for plan in plans:
        for obj in k8s.manifests(plan.invocations, plan.contended_reruns):
            if obj["kind"] == "Job":
                KubernetesLauncher._model(obj)  # dagster-k8s names any field the API would not know
            objects.append(obj)
    return objects


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
        objects = render_objects(spec, launcher=launcher, run_id=run_id)
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
