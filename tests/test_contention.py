"""Contended replicates in the comparison (benchrun.stats.contention), on fabricated runs."""

from __future__ import annotations

import json

from benchrun.stats.analysis import compare_runs
from benchrun.stats.contention import exclude
from benchrun.stats.synthetic import make_run, seal_run, write_manifest

SPEC = {"spec": {"metrics": {"inference": {"enabled": True, "primary": ["s/tps"]}}}}


def _mark(rd, suite, reps):
    for k in reps:
        p = rd / "structured" / f"{rd.name}_{suite}_r{k}.json"
        doc = json.loads(p.read_text())
        doc["telemetry"] = {"contended": True, "contention_reason": "background CPU 60 %"}
        p.write_text(json.dumps(doc))
    (rd / "reports" / f"{rd.name}_provenance.dsse.json").unlink()  # as the run itself would have recorded and
    write_manifest(rd)  # signed them (else the evidence does not verify)
    seal_run(rd, rd.parent.parent)


def test_contended_replicates_leave_the_comparison_and_the_rows_say_so(tmp_path):
    # before: two contended baseline replicates (15 % low) hid a real 10 % regression
    base = make_run(tmp_path, "base", {("s", "", "tps"): ([100, 100.5, 99.5, 85, 84], "t/s", "higher")}, spec=SPEC)
    cand = make_run(tmp_path, "cand", {("s", "", "tps"): ([90, 90.5, 89.5, 90.2, 89.8], "t/s", "higher")}, spec=SPEC)
    _mark(base, "s", (4, 5))
    _gate, res = compare_runs(base, cand)
    row = res.rows.iloc[0]
    assert row.verdict == "regression" and row.n_baseline == 3
    assert row.contended_baseline == 2 and row.contended_candidate == 0
    assert row.contention == "baseline: 2 contended, excluded"


def test_contended_replicates_the_launcher_failed_stay_failures(tmp_path):
    # review 2026-12-07: a suite that wrote an ok, contended document and was then killed at its
    # timeout (launch record: failed) was "excluded as contended": its failed rows left the table,
    # and 5 of 10 failed candidate launches read 0 failed, exit 0 (refused without the flag)
    vals = [100, 100.5, 99.5, 100.2, 99.8, 100.1, 99.9, 100.3, 99.7, 100.0]
    base = make_run(tmp_path, "base", {("s", "", "tps"): (vals, "t/s", "higher")}, spec=SPEC)
    cand = make_run(tmp_path, "cand", {("s", "", "tps"): (vals, "t/s", "higher")}, spec=SPEC,
                    launches={"s": ["failed"] * 5 + ["ok"] * 5})
    _mark(cand, "s", (1, 2, 3, 4, 5))
    gate, res = compare_runs(base, cand)
    fail = res.rows.set_index("name").loc["failed_replicates"]
    assert (fail.failed_candidate, fail.n_candidate, fail.verdict) == (5, 10, "regression"), fail.to_dict()
    assert res.gating_regression and any("5 of 10 candidate replicates failed" in n for n in res.notes), res.notes


def test_too_few_quiet_replicates_keep_the_contended_ones():
    import pandas as pd

    t = pd.DataFrame({"suite": "s", "case": "", "metric": "m", "unit": "u", "direction": "higher",
                      "replicate": [1, 2, 3, 4], "value": [1.0, 2, 3, 4], "status": "ok"})
    kept, info = exclude(t, {"s": {1, 2}})
    assert len(kept) == 4 and info["s"][1].startswith("kept (only 2 quiet")
    dropped, info = exclude(t, {"s": {1}})
    assert sorted(dropped.replicate) == [2, 3, 4] and info["s"] == (1, "excluded")


class _Busy:
    """A launcher whose suite writes its result document itself; the first ``busy`` attempts of
    each replicate say the machine was contended (as the telemetry hook records it)."""

    def __init__(self, busy, fail=None):
        # fail: (replicate, attempt) -> "silent" (times out having written nothing) or "after_write"
        # (the suite wrote an ok document, then the launcher failed it: a timeout after the write)
        self.busy, self.attempts, self.fail = busy, {}, fail or {}

    def launch(self, inv, run_dir, extra_env=None):
        from benchrun.launch.base import LaunchResult

        n = self.attempts[inv.replicate] = self.attempts.get(inv.replicate, 0) + 1
        how = self.fail.get((inv.replicate, n))
        if how == "silent":
            return LaunchResult(inv.run_id, inv.layer, inv.suite, inv.replicate, inv.benchmark_case_id, "failed",
                                "timed out after 10s; process group killed", None, 10.0, 0.0, 0.0, 10.0,
                                inv.log_relpath(), None)
        contended = n <= self.busy.get(inv.replicate, 0)
        doc = {"schema": "benchrun.suite_result/v1", "suite": inv.suite, "replicate": inv.replicate, "status": "ok",
               "metrics": [{"name": "tps", "value": 90.0 if contended else 100.0, "unit": "t/s", "direction": "higher"}],
               "telemetry": {"contended": contended, "contention_reason": "background CPU 70 %" if contended else None}}
        (run_dir / inv.result_relpath()).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / inv.result_relpath()).write_text(json.dumps(doc))
        (run_dir / inv.log_relpath()).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / inv.log_relpath()).write_text(f"attempt {n}\n")
        sample = f"raw/{inv.run_id}_{inv.suite}_r{inv.replicate}_calls.json"  # the suite's raw samples
        (run_dir / sample).write_text(json.dumps({"attempt": n}))
        doc["samples"] = {"calls": sample}
        (run_dir / inv.result_relpath()).write_text(json.dumps(doc))
        status, reason = ("failed", "timed out after 10s; process group killed") if how else ("ok", None)
        return LaunchResult(inv.run_id, inv.layer, inv.suite, inv.replicate, inv.benchmark_case_id, status, reason, 0,
                            0.0, 0.0, 0.0, 0.0, inv.log_relpath(), inv.result_relpath())


def _plan(run_id, reruns):
    from benchrun.plan import Invocation, LayerPlan

    invs = tuple(Invocation(run_id, "micro", "s", k, "bc-1", ("/bin/true",), {}, 10.0) for k in (1, 2, 3))
    return LayerPlan("micro", True, invs, contended_reruns=reruns)


def test_a_contended_replicate_is_launched_again_once_and_the_attempt_is_kept(tmp_path):
    # before: a contended replicate was only flagged; its value (10 % low) stayed the replicate's
    from benchrun.execute import run_layer
    from benchrun.rundir import RunDir

    run_id = "busy-20261202000000-aaaaaaaa"
    rd = RunDir(tmp_path, run_id).create()
    rd.write_status({"run_id": run_id, "phase": "Running", "conditions": []})
    launcher = _Busy({2: 1, 3: 5})  # r2 quiet on its rerun, r3 contended every time
    out = run_layer(_plan(run_id, 1), rd, launcher)
    assert launcher.attempts == {1: 1, 2: 2, 3: 2} and len(out.results) == 3
    r2 = json.loads((rd.path / f"structured/{run_id}_s_r2.json").read_text())
    assert r2["metrics"][0]["value"] == 100.0 and r2["telemetry"]["contended"] is False
    assert r2["contention_rerun"] == {"attempt": 2, "earlier": [f"raw/{run_id}_s_r2_contended1.json",
                                                                  f"raw/{run_id}_s_r2_contended1.log",
                                                                  f"raw/{run_id}_s_r2_contended1_calls.json"],
                                      "earlier_reason": "background CPU 70 %"}
    aside = json.loads((rd.path / f"raw/{run_id}_s_r2_contended1.json").read_text())
    assert aside["metrics"][0]["value"] == 90.0 and (rd.path / f"raw/{run_id}_s_r2_contended1.log").read_text() == "attempt 1\n"
    # the attempt's raw samples went aside with it (the rerun overwrote them) and its document names them there
    assert aside["samples"] == {"calls": f"raw/{run_id}_s_r2_contended1_calls.json"}
    assert json.loads((rd.path / aside["samples"]["calls"]).read_text()) == {"attempt": 1}
    assert json.loads((rd.path / r2["samples"]["calls"]).read_text()) == {"attempt": 2}
    r3 = json.loads((rd.path / f"structured/{run_id}_s_r3.json").read_text())
    assert r3["telemetry"]["contended"] is True and r3["contention_rerun"]["attempt"] == 2  # the budget is one
    from benchrun.stats.contention import contended_replicates, reruns
    from benchrun.stats.load import replicate_table

    assert contended_replicates(rd.path) == {"s": {3}} and reruns(rd.path) == {"s": {"quiet": 1, "contended": 1}}
    assert sorted(replicate_table(rd.path)["replicate"]) == [1, 2, 3]  # the set-aside attempts are not results
    # the layer materialized again with no contention: the earlier materialization's set-aside attempts
    # are not this one's reruns (they were counted as such, 3 "quiet" reruns that never happened); they
    # are kept aside with that materialization's files (earlier1), not counted
    run_layer(_plan(run_id, 1), rd, _Busy({}))
    assert not [p.name for p in (rd.path / "raw").glob(f"{run_id}_s_r*_contended*") if "_earlier" not in p.name]
    assert reruns(rd.path) == {} and contended_replicates(rd.path) == {}
    assert sorted(replicate_table(rd.path)["replicate"]) == [1, 2, 3]
    assert (rd.path / f"raw/{run_id}_s_r2_earlier1_contended1.json").is_file()
    # no budget: launched once each, as before
    rd0 = RunDir(tmp_path, "quiet-20261202000000-bbbbbbbb").create()
    rd0.write_status({"run_id": rd0.run_id, "phase": "Running", "conditions": []})
    launcher = _Busy({2: 1})
    run_layer(_plan(rd0.run_id, 0), rd0, launcher)
    assert launcher.attempts == {1: 1, 2: 1, 3: 1}


def test_a_rerun_is_launched_as_its_next_attempt_so_a_serving_suite_salts_it_apart(tmp_path):
    # before: a rerun was launched with the first attempt's env, so a serving suite resent the words
    # its contended attempt had sent, and a long-lived server's prefix cache served the rerun
    from benchrun.execute import run_layer
    from benchrun.loadgen.suite import prompt_salt_of
    from benchrun.rundir import RunDir
    from benchrun.suites._runtime import SuiteContext

    class Recording(_Busy):
        def launch(self, inv, run_dir, extra_env=None):
            self.envs = [*getattr(self, "envs", []), (inv.replicate, dict(inv.env))]
            return super().launch(inv, run_dir, extra_env)

    run_id = "busy-20261202000000-cccccccc"
    rd = RunDir(tmp_path, run_id).create()
    rd.write_status({"run_id": run_id, "phase": "Running", "conditions": []})
    launcher = Recording({2: 2})
    run_layer(_plan(run_id, 2), rd, launcher)
    attempts = [(k, env.get("BENCHRUN_ATTEMPT")) for k, env in launcher.envs]
    assert attempts == [(1, None), (2, None), (2, "2"), (2, "3"), (3, None)]
    salts = [prompt_salt_of(SuiteContext({**env, "BENCHRUN_RUN_ID": run_id, "BENCHRUN_REPLICATE": str(k),
                                          "BENCHRUN_RUN_DIR": str(tmp_path)})) for k, env in launcher.envs]
    assert salts == [f"{run_id}/r1", f"{run_id}/r2", f"{run_id}/r2/a2", f"{run_id}/r2/a3", f"{run_id}/r3"]


def test_a_set_aside_attempt_keeps_its_telemetry_and_samples_and_the_warehouse_does_not_read_them(tmp_path):
    # before: the rerun's hook deleted raw/<run>_<suite>_r<k>_telemetry.parquet (the samples that
    # justified the rerun) and the suite overwrote its raw files; the document set aside named the
    # rerun's files
    from benchrun.launch.rerun import set_aside
    from benchrun.plan import Invocation
    from benchrun.rundir import RunDir
    from benchrun.telemetry.facts import sample_files
    from benchrun.telemetry.samples import Sample, read_samples, write_samples

    run_id = "aside-20261202000000-aaaaaaaa"
    rd = RunDir(tmp_path, run_id).create()
    inv = Invocation(run_id, "micro", "s", 2, "bc-1", ("/bin/true",), {}, 10.0)
    tele, prom = f"raw/{run_id}_s_r2_telemetry.parquet", f"raw/{run_id}_s_r2_prometheus.parquet"
    fio, other = f"raw/{run_id}_s_r2_fio.json", f"raw/{run_id}_s_r2_x_r1_telemetry.parquet"  # suite s_r2_x's
    for rel in (tele, prom, other):
        write_samples(rd.path / rel, [Sample(100.0, "psutil", "node", "background_cpu_pct", 60.0, "%", interval_s=1.0)])
    (rd.path / fio).write_text("{}")
    (rd.path / inv.log_relpath()).write_text("attempt 1\n")
    doc = {"schema": "benchrun.suite_result/v1", "suite": "s", "replicate": 2, "status": "ok", "metrics": [],
           "samples": {"fio": fio, "telemetry": tele, "prometheus": prom},
           "telemetry": {"samples": tele, "contended": True, "prometheus": {"status": "ok", "samples": prom}}}
    (rd.path / inv.result_relpath()).parent.mkdir(parents=True, exist_ok=True)
    (rd.path / inv.result_relpath()).write_text(json.dumps(doc))
    moved = set_aside(rd.path, inv, 1)
    new = {rel: rel.replace("_s_r2_", "_s_r2_contended1_") for rel in (tele, prom, fio)}
    assert moved == [f"raw/{run_id}_s_r2_contended1.json", f"raw/{run_id}_s_r2_contended1.log", *sorted(new.values())]
    assert all((rd.path / rel).is_file() and not (rd.path / old).exists() for old, rel in new.items())
    assert read_samples(rd.path / new[tele])["value"].to_pylist() == [60.0]
    aside = json.loads((rd.path / moved[0]).read_text())
    assert aside["samples"] == {"fio": new[fio], "telemetry": new[tele], "prometheus": new[prom]}
    assert aside["telemetry"]["samples"] == new[tele] and aside["telemetry"]["prometheus"]["samples"] == new[prom]
    assert (rd.path / other).is_file()  # another suite's replicate, whose name begins like this one's
    assert [rel for rel, *_ in sample_files(rd.path, run_id)] == [other]  # set aside: not telemetry_slice_fact's
    hashed = rd.write_manifest(status="succeeded", issues=[], suite_steps={})["summary"]["sha256"]
    assert set(new.values()) <= set(hashed)  # still sealed with the run


def test_a_set_aside_attempt_keeps_the_figures_its_suite_drew(tmp_path):
    # before: a serving suite draws figures/<run>_<suite>_r<k>_latency_throughput_<bucket>.png for
    # its replicate (benchrun.loadgen.suite.report) and names them in its document's context.figures;
    # the rerun drew over them, and the attempt set aside named the rerun's figures as its own
    from benchrun.execute import run_layer
    from benchrun.rundir import RunDir

    class Drawing(_Busy):
        def launch(self, inv, run_dir, extra_env=None):
            res = super().launch(inv, run_dir, extra_env)
            fig = f"figures/{inv.run_id}_{inv.suite}_r{inv.replicate}_latency_throughput_all.png"
            (run_dir / fig).parent.mkdir(parents=True, exist_ok=True)
            (run_dir / fig).write_bytes(b"attempt %d" % self.attempts[inv.replicate])
            doc = json.loads((run_dir / inv.result_relpath()).read_text())
            doc["context"] = {"figures": [fig]}
            (run_dir / inv.result_relpath()).write_text(json.dumps(doc))
            return res

    run_id = "draw-20261202000000-aaaaaaaa"
    rd = RunDir(tmp_path, run_id).create()
    rd.write_status({"run_id": run_id, "phase": "Running", "conditions": []})
    run_layer(_plan(run_id, 1), rd, Drawing({2: 1}))
    fig = f"figures/{run_id}_s_r2_latency_throughput_all.png"
    aside_fig = f"figures/{run_id}_s_r2_contended1_latency_throughput_all.png"
    aside = json.loads((rd.path / f"raw/{run_id}_s_r2_contended1.json").read_text())
    assert aside["context"]["figures"] == [aside_fig] and (rd.path / aside_fig).read_bytes() == b"attempt 1"
    r2 = json.loads((rd.path / f"structured/{run_id}_s_r2.json").read_text())
    assert r2["context"]["figures"] == [fig] and (rd.path / fig).read_bytes() == b"attempt 2"
    assert aside_fig in r2["contention_rerun"]["earlier"]
    assert sorted(p.name for p in (rd.path / "figures").glob("*contended*")) == [aside_fig.split("/")[1]]
    hashed = rd.write_manifest(status="succeeded", issues=[], suite_steps={})["summary"]["sha256"]
    assert aside_fig in hashed  # sealed with the run
    # materialized again with no contention: the earlier materialization's set-aside figures go
    # with its other set-aside files (they are not this one's attempts), kept aside under earlier1
    run_layer(_plan(run_id, 1), rd, Drawing({}))
    assert sorted(p.name for p in (rd.path / "figures").glob("*contended*")) == [
        f"{run_id}_s_r2_earlier1_contended1_latency_throughput_all.png"]
    aside = json.loads((rd.path / f"raw/{run_id}_s_r2_earlier1_contended1.json").read_text())
    assert aside["context"]["figures"] == [f"figures/{run_id}_s_r2_earlier1_contended1_latency_throughput_all.png"]


def test_an_earlier_materializations_contended_attempts_are_kept_aside_with_its_document(tmp_path):
    # before: materializing the layer again deleted the earlier materialization's contended attempts
    # (raw/<run>_s_r<k>_contended<j>*) before its result document was set aside as earlier<i>: that
    # document's contention_rerun.earlier named files that no longer existed, the evidence gone
    from benchrun.execute import run_layer
    from benchrun.rundir import RunDir, contention_reruns
    from benchrun.stats.contention import contended_replicates, reruns
    from benchrun.stats.load import replicate_table

    run_id = "again-20261202000000-aaaaaaaa"
    rd = RunDir(tmp_path, run_id).create()
    rd.write_status({"run_id": run_id, "phase": "Running", "conditions": []})
    run_layer(_plan(run_id, 1), rd, _Busy({2: 1}))  # r2: contended, then quiet on its rerun
    pre = f"{run_id}_s_r2_earlier1"
    raw = rd.path / "raw"
    for _ in range(2):  # materialized again, twice: no contention (the second leaves earlier1 as it is)
        run_layer(_plan(run_id, 1), rd, _Busy({}))
        # the first materialization's final attempt, set aside with its contended one, which it names there
        earlier = json.loads((raw / f"{pre}.json").read_text())
        assert earlier["contention_rerun"]["earlier"] == [f"raw/{pre}_contended1.json", f"raw/{pre}_contended1.log",
                                                          f"raw/{pre}_contended1_calls.json"]
        assert all((rd.path / rel).is_file() for rel in earlier["contention_rerun"]["earlier"])
        assert earlier["samples"] == {"calls": f"raw/{pre}_calls.json"}
        assert json.loads((raw / f"{pre}_calls.json").read_text()) == {"attempt": 2}
        aside = json.loads((raw / f"{pre}_contended1.json").read_text())
        assert aside["metrics"][0]["value"] == 90.0 and (raw / f"{pre}_contended1.log").read_text() == "attempt 1\n"
        assert aside["samples"] == {"calls": f"raw/{pre}_contended1_calls.json"}
        assert json.loads((raw / f"{pre}_contended1_calls.json").read_text()) == {"attempt": 1}
        assert not [p.name for p in raw.glob(f"{run_id}_s_r*_contended*") if "_earlier1_" not in p.name]
        # not this materialization's reruns, nor its results
        assert contention_reruns(rd.path, run_id) == {} and reruns(rd.path) == {}
        assert contended_replicates(rd.path) == {} and sorted(replicate_table(rd.path)["replicate"]) == [1, 2, 3]


def test_rows_say_how_many_were_launched_again_and_what_was_done(tmp_path):
    import pandas as pd

    from benchrun.stats.contention import annotate

    rows = pd.DataFrame({"suite": ["s", "t"]})
    annotate(rows, {"s": (1, "excluded")}, {}, {"s": {"quiet": 1, "contended": 1}}, {})
    assert rows.rerun_baseline.tolist() == [2, 0] and rows.contended_baseline.tolist() == [1, 0]
    assert rows.contention.tolist() == ["baseline: 2 contended and launched again, 1 quiet on the rerun; "
                                        "1 still contended, excluded", ""]


def test_a_publication_layer_pod_launches_a_contended_replicate_again(tmp_path, monkeypatch):
    # before: the layer Job's pod (benchrun.launch.inpod) ran each replicate once whatever its
    # telemetry said, so publication-grade runs on Kubernetes never used contendedReruns
    from benchrun.launch import inpod, local
    from benchrun.launch.podspec import Placement, layer_job_manifest

    run_id = "pub-20261204000000-cccccccc"
    run_dir = tmp_path / "run"  # a pod's run directory is not <home>/runs/<id>
    invs = _plan(run_id, 1).invocations
    (run_dir / "structured").mkdir(parents=True)
    (run_dir / "structured" / f"{run_id}_plan.json").write_text(json.dumps([i.to_json() for i in invs]))
    busy = _Busy({2: 1, 3: 5})
    monkeypatch.setattr(local, "LocalLauncher", lambda: busy)
    assert inpod.main(["--run-dir", str(run_dir), "--run-id", run_id, "--layer", "micro",
                       "--contended-reruns", "1"]) == 0
    assert busy.attempts == {1: 1, 2: 2, 3: 2}
    assert json.loads((run_dir / f"structured/{run_id}_s_r2.json").read_text())["contention_rerun"]["attempt"] == 2
    assert (run_dir / f"raw/{run_id}_s_r2_contended1.json").is_file()  # kept (uploaded with the rest)
    reported = json.loads((run_dir / inpod.results_relpath(run_id, "micro")).read_text())
    assert [r["replicate"] for r in reported] == [1, 2, 3]
    # the layer's budget reaches the pod's command line (and is absent when there is none)
    image = "registry.example/bench@sha256:" + "b" * 64
    invs = [i.__class__(**{**i.to_json(), "argv": tuple(i.argv), "image": image}) for i in invs]
    job = layer_job_manifest(invs, namespace="default", placement=Placement(queue_name="q"), contended_reruns=1)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-2:] == ["--contended-reruns", "1"]
    once = layer_job_manifest(invs, namespace="default", placement=Placement(queue_name="q"))
    assert "--contended-reruns" not in once["spec"]["template"]["spec"]["containers"][0]["args"]
    # the pod's deadline allows the reruns: 3 replicates of 10 s and a minute each, once more
    deadline = [j["spec"]["template"]["spec"]["activeDeadlineSeconds"] for j in (job, once)]
    assert deadline[0] - deadline[1] == 3 * 10 + 180


def test_a_real_busy_machine_makes_a_spec_relaunch_its_replicate_by_default(tmp_path, monkeypatch):
    # the default budget is one relaunch (it was 0: a contended replicate was only flagged unless the
    # spec asked); here the telemetry hook itself sees a busy process beside the suite
    import subprocess
    import sys
    from pathlib import Path

    from benchrun.execute import run_layer
    from benchrun.launch.local import LocalLauncher
    from benchrun.plan import Invocation, LayerPlan, base_env, plan_run
    from benchrun.rundir import RunDir
    from benchrun.spec.validation import load_spec
    from benchrun.telemetry.hook import RATE_ENV

    root = Path(__file__).resolve().parents[1]
    run_id = "local-busy-20261205000000-cccccccc"
    plans = plan_run(load_spec(root / "specs/local/canary.yaml").run, run_id, tmp_path / "plan")
    assert {p.contended_reruns for p in plans if p.enabled} == {1}  # the canary does not set it: the default
    import os

    threshold = 40.0 / (os.cpu_count() or 1)  # one busy core is 100/N % of an N-core machine
    monkeypatch.setenv("BENCHRUN_CONTENTION_PCT", f"{threshold:g}")
    monkeypatch.delenv("BENCHRUN_PROMETHEUS_URL", raising=False)
    rd = RunDir(tmp_path, run_id).create()
    rd.write_status({"run_id": run_id, "phase": "Running", "conditions": []})
    env = {**base_env(), "BENCHRUN_RUN_ID": run_id, "BENCHRUN_RUN_DIR": str(rd.path), "BENCHRUN_SUITE": "s",
           "BENCHRUN_REPLICATE": "1", RATE_ENV: "20"}
    suite = ("import time\nfrom benchrun.suites._runtime import main\n"
             "def run(ctx):\n    time.sleep(1.0)\n    ctx.add_metric('answer', 42.0, 'units', 'higher', case='c1')\n"
             "main(run)\n")
    inv = Invocation(run_id, "micro", "s", 1, "bc-x", (sys.executable, "-c", suite), env, 60.0)
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        out = run_layer(LayerPlan("micro", True, (inv,), contended_reruns=plans[0].contended_reruns), rd,
                        LocalLauncher())
    finally:
        burner.kill()
        burner.wait()
    assert [r.status for r in out.results] == ["ok"]
    doc = json.loads((rd.path / f"structured/{run_id}_s_r1.json").read_text())
    aside = json.loads((rd.path / f"raw/{run_id}_s_r1_contended1.json").read_text())
    assert aside["telemetry"]["contended"] is True and f"threshold {threshold:g} %" in aside["telemetry"]["contention_reason"]
    assert doc["contention_rerun"]["attempt"] == 2 and doc["contention_rerun"]["earlier_reason"]
    assert (rd.path / f"raw/{run_id}_s_r1_contended1.log").exists()
    # the busy attempt's samples (the evidence for the rerun) are kept aside, not deleted by the rerun
    assert aside["samples"]["telemetry"] == aside["telemetry"]["samples"] == f"raw/{run_id}_s_r1_contended1_telemetry.parquet"
    assert doc["samples"]["telemetry"] == f"raw/{run_id}_s_r1_telemetry.parquet"
    from benchrun.telemetry.samples import read_samples

    assert read_samples(rd.path / aside["samples"]["telemetry"]).num_rows > 0
    from benchrun.telemetry.conditions import apply_run_conditions

    cond = next(c for c in apply_run_conditions(rd)["conditions"] if c["type"] == "ReplicatesUncontended")
    assert cond["status"] == "False" and "launched again after a contended attempt (trials.contendedReruns): 1, 0 of them quiet on the rerun" in cond["message"]


def test_a_rerun_that_fails_counts_as_failed_however_it_failed(tmp_path):
    # before (review, 2026-12-05): reruns were counted from the result documents that stayed, so a
    # rerun that timed out having written nothing vanished from the counts (the condition called the
    # machine quiet), and one the launcher failed after its suite wrote ok was called quiet
    from benchrun.execute import run_layer
    from benchrun.rundir import RunDir
    from benchrun.stats.contention import reruns
    from benchrun.telemetry.conditions import apply_run_conditions, rerun_outcomes

    run_id = "local-rr-20261205000000-dddddddd"
    rd = RunDir(tmp_path, run_id).create()
    rd.write_status({"run_id": run_id, "phase": "Running", "conditions": []})
    launcher = _Busy({1: 1, 2: 1, 3: 1}, fail={(1, 2): "silent", (2, 2): "after_write"})
    out = run_layer(_plan(run_id, 1), rd, launcher)
    assert [r.status for r in out.results] == ["failed", "failed", "ok"]
    assert not (rd.path / f"structured/{run_id}_s_r1.json").exists()  # the timed-out rerun wrote nothing
    (rd.path / "structured" / f"{run_id}_s_r9.json").write_text("{not json")  # unreadable: skipped, not raised
    assert rerun_outcomes(rd) == (3, 1, 2)
    assert reruns(rd.path) == {"s": {"failed": 2, "quiet": 1}}
    cond = next(c for c in apply_run_conditions(rd)["conditions"] if c["type"] == "ReplicatesUncontended")
    assert cond["status"] == "True" and cond["message"].startswith("no replicate that stayed saw background CPU")
    assert "(trials.contendedReruns): 3, 1 of them quiet on the rerun, 2 failed on it" in cond["message"]
    import pandas as pd

    from benchrun.stats.contention import annotate

    rows = pd.DataFrame({"suite": ["s"]})
    annotate(rows, {}, {}, reruns(rd.path), {})
    assert rows.contention.tolist() == ["baseline: 3 contended and launched again, 1 quiet on the rerun, 2 failed on it"]


def test_replicates_left_out_of_the_comparison_are_shown_where_users_look(tmp_path, monkeypatch):
    """The headline (`run`/`show`, the report) gave the median and n of all 5 candidate replicates
    beside the change over the 4 the comparison kept, and neither `compare` nor the report's
    comparison table had an n: only the JSON said one contended replicate was excluded."""
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.report.html import build_report
    from benchrun.stats.analysis import trial_statistics_for_run, write_comparison, write_trial_statistics

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "250")
    base = make_run(tmp_path, "base", {("s", "", "tps"): ([100, 100.5, 99.5, 100.2, 99.8], "t/s", "higher")},
                    spec=SPEC)
    cand = make_run(tmp_path, "cand", {("s", "", "tps"): ([97, 96.5, 97.5, 97.2, 130], "t/s", "higher")}, spec=SPEC)
    _mark(cand, "s", (5,))
    text = CliRunner().invoke(app, ["compare", "base", "cand"]).output
    line = next(x for x in text.splitlines() if "s/tps" in x)
    assert "5/4 ‡" in line, text
    assert "‡ s: candidate: 1 contended, excluded" in text, text
    gate, res = compare_runs(base, cand)
    write_comparison(gate, res, "base", cand)
    write_trial_statistics(trial_statistics_for_run(cand), cand)
    html = build_report(cand).read_text()
    headline, details = html[html.index("id='headline'"):html.index("id='details'")], html[html.index("id='details'"):]
    assert "5 (4 compared) ‡" in headline
    assert "the change against the baseline is over the 4 replicates the comparison kept, not all 5 " \
           "(their median 97.1): candidate: 1 contended, excluded" in headline
    assert "5/4 ‡" in details and "‡ s: candidate: 1 contended, excluded" in details
    shown = CliRunner().invoke(app, ["show", "cand"]).output
    assert "5 (4 compared) ‡" in shown, shown
    assert "‡ s/tps: the change against the baseline is over the 4 replicates the comparison kept, not all 5 " \
           "(their median 97.1): candidate: 1 contended, excluded" in " ".join(shown.split()), shown


def test_the_n_column_marks_only_rows_whose_replicates_were_left_out():
    from benchrun.stats.reading import left_out, n_shown

    quiet_rerun = "candidate: 1 contended and launched again, 1 quiet on the rerun"
    assert n_shown({"n_baseline": 5, "n_candidate": 5, "contention": quiet_rerun}) == "5/5"
    assert n_shown({"n_baseline": 5, "n_candidate": 3, "failed_candidate": 2}) == "5/3 ‡"
    assert left_out({"failed_candidate": 2, "failed_baseline": 0}) == "candidate: 2 failed replicates"
    # contended replicates kept (too few quiet ones) are said too: until 2026-12-07 they were not,
    # and a baseline measured wholly on a busy machine read a plain 5/5 everywhere
    kept = "candidate: 2 contended, kept (only 2 quiet replicates, fewer than 3)"
    assert left_out({"contention": kept}) == kept
    assert left_out({"name": "failed_replicates", "failed_candidate": 1}) == ""  # its n is the launches


def test_a_launch_cut_short_by_a_cancel_is_set_aside_not_read_as_the_runs(tmp_path):
    """Review 2026-12-08: a cancel landed while gemm r2 ran; its suite had written an ok result just before,
    which the launch record (and `show`) never listed, but the report's statistics counted (n 2, not 1)."""
    import pytest

    from benchrun.execute import run_layer
    from benchrun.rundir import RunDir
    from benchrun.stats.load import replicate_table

    run_id = "cut-20261202000000-aaaaaaaa"
    rd = RunDir(tmp_path, run_id).create()
    rd.write_status({"run_id": run_id, "phase": "Running", "conditions": []})

    class Canceled(_Busy):
        def launch(self, inv, run_dir, extra_env=None):
            res = super().launch(inv, run_dir, extra_env)
            if inv.replicate == 2:  # the result is written; the cancel arrives before the launch returns
                raise KeyboardInterrupt
            return res

    with pytest.raises(KeyboardInterrupt):
        run_layer(_plan(run_id, 0), rd, Canceled({}))
    record = json.loads((rd.path / f"structured/{run_id}_launches.json").read_text())
    assert [(r["suite"], r["replicate"]) for r in record] == [("s", 1)]
    assert sorted(replicate_table(rd.path)["replicate"]) == [1]  # was [1, 2]
    assert not (rd.path / f"structured/{run_id}_s_r2.json").exists()
    kept = json.loads((rd.path / f"raw/{run_id}_s_r2_earlier1.json").read_text())  # kept, not read
    assert kept["status"] == "ok" and kept["samples"] == {"calls": f"raw/{run_id}_s_r2_earlier1_calls.json"}
