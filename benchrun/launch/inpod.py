"""The publication-grade layer runner: one pod runs every replicate of a layer, in order.

For publication grade the Kubernetes launcher creates one Job per layer
(``podspec.layer_job_manifest``): one Kueue admission, the same dedicated node for every
replicate, no queue wait between replicates. Its container runs::

    python -m benchrun.launch.inpod --run-dir RUN_DIR --layer LAYER

which reads the run's plan (``structured/<run>_plan.json``, on the shared run volume),
runs the layer's invocations in the planned interleaved order with the local launcher (so
each replicate gets its log, result, timeout handling and host telemetry exactly as on a
workstation, here on the GPU node), and after each replicate appends its LaunchResult to
``raw/<run>_<layer>_layer_results.json`` (read by the orchestrator for progress) and copies
the replicate's log to stdout (so the Pipes messages in it reach the Dagster run through the
pod log). A replicate whose telemetry says contended is launched again, up to
``--contended-reruns`` times (the layer's ``spec.trials.contendedReruns``; ``benchrun.launch.rerun``,
the rule the local runner uses; the contended attempts stay in raw/ and, without a run volume,
are uploaded with the rest). Exit status 0 once every replicate ran, whatever their verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from benchrun.plan import Invocation
from benchrun.fsio import atomic_write_json

# The orchestrator host's values that would break the image (its PATH, HOME, interpreter).
HOST_ONLY_ENV = ("PATH", "HOME", "TMPDIR", "CUDA_VISIBLE_DEVICES", "PYTHONPATH")
# What the pod passes on to every suite it runs (Pipes bootstrap, node identity, capture).
PASS_ON_PREFIXES = ("DAGSTER_PIPES_", "BENCHRUN_NODE_NAME", "BENCHRUN_POD_", "BENCHRUN_CAPTURE_ENVIRONMENT",
                    "NVIDIA_VISIBLE_DEVICES", "BENCHRUN_RESULT_STDOUT")


def results_relpath(run_id: str, layer: str) -> str:
    return f"raw/{run_id}_{layer}_layer_results.json"


def layer_invocations(run_dir: Path, run_id: str, layer: str) -> list[Invocation]:
    """The layer's invocations from the pinned plan, runnable in this container."""
    plan = json.loads((run_dir / "structured" / f"{run_id}_plan.json").read_text(encoding="utf-8"))
    out = []
    for d in plan:
        if d.get("layer") != layer:
            continue
        argv = list(d["argv"])
        if os.path.isabs(argv[0]) and not os.path.exists(argv[0]):
            # the orchestrator's interpreter or venv script: the image has its own on PATH
            base = os.path.basename(argv[0])
            argv[0] = sys.executable if base.startswith("python") else base
        env = {k: v for k, v in d["env"].items() if k not in HOST_ONLY_ENV}
        env.update({k: os.environ[k] for k in HOST_ONLY_ENV if k in os.environ})
        env["BENCHRUN_RUN_DIR"] = str(run_dir)  # this pod's run directory (what it uploads, with outputs_uri)
        fields = {**d, "argv": tuple(argv), "env": env}
        out.append(Invocation(**fields))
    return out


def main(argv: list[str] | None = None) -> int:
    from benchrun.launch.local import LocalLauncher
    from benchrun.launch.rerun import launch_with_reruns
    from benchrun.telemetry import flush_prometheus

    parser = argparse.ArgumentParser(prog="benchrun.launch.inpod")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--layer", required=True)
    parser.add_argument("--contended-reruns", type=int, default=0,
                        help="launch a replicate whose telemetry says contended again, up to this many times")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    extra = {k: v for k, v in os.environ.items() if k.startswith(PASS_ON_PREFIXES)}
    extra.pop("BENCHRUN_RESULT_STDOUT", None)  # results are files on the shared volume here
    launcher = LocalLauncher()
    results: list[dict] = []
    target = run_dir / results_relpath(args.run_id, args.layer)
    for inv in layer_invocations(run_dir, args.run_id, args.layer):
        print(f"benchrun: {inv.layer}/{inv.suite} r{inv.replicate} starting", flush=True)
        res = launch_with_reruns(lambda attempt: launcher.launch(attempt, run_dir, extra_env=extra), run_dir, inv,
                                 args.contended_reruns)
        try:
            sys.stdout.write((run_dir / res.log).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            pass
        print(f"benchrun: {inv.layer}/{inv.suite} r{inv.replicate} {res.status}"
              + (f" ({res.reason})" if res.reason else ""), flush=True)
        results.append(res.to_json())
        atomic_write_json(target, results)
    flush_prometheus()  # what the layer's last planned replicate did not already wait for
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
