"""The run directory: status transitions, conditions, manifest, failure marking."""

import json

from benchrun.rundir import RunDir, artifact_role, list_runs, mark_run_failed

RUN = "r-20260101000000-0000abcd"


def test_conditions_keep_transition_time_until_status_changes(tmp_path):
    rd = RunDir(tmp_path, RUN).create()
    rd.write_status({"run_id": RUN, "conditions": [], "created_utc": "x"})
    first = rd.set_condition("Signed", False, "A", "m")["conditions"][0]["lastTransitionTime"]
    again = rd.set_condition("Signed", False, "B", "m2")["conditions"][0]
    assert again["lastTransitionTime"] == first and again["reason"] == "B"
    flipped = rd.set_condition("Signed", True, "C")["conditions"][0]
    assert flipped["status"] == "True" and flipped["lastTransitionTime"] >= first


def test_phases_and_restart(tmp_path):
    rd = RunDir(tmp_path, RUN).create()
    rd.write_status({"run_id": RUN, "conditions": []})
    rd.set_phase("Running")
    st = rd.set_phase("Succeeded")
    assert st["finished_utc"]
    st = rd.set_phase("Running")
    assert st["finished_utc"] is None and st["phase"] == "Running"


def test_manifest_hashes_every_file_but_the_live_status(tmp_path):
    rd = RunDir(tmp_path, RUN).create()
    rd.write_status({"run_id": RUN, "conditions": []})
    (rd.path / "raw" / f"{RUN}_gemm_r1.log").write_text("log\n")
    (rd.path / "structured" / f"{RUN}_gemm_r1.json").write_text("{}\n")
    m = rd.write_manifest(status="partial", issues=["x"], suite_steps={"micro": {"planned": 2, "ok": 1}})
    assert m["manifest_version"] == 2 and m["status"] == m["suite_status"] == "partial"
    assert m["success"] is False and m["completeness"] == 0.5
    assert set(m["files"]) == {f"raw/{RUN}_gemm_r1.log", f"structured/{RUN}_gemm_r1.json"}
    assert m["summary"]["sha256"][f"raw/{RUN}_gemm_r1.log"] == __import__("hashlib").sha256(b"log\n").hexdigest()
    assert m["artifact_roles"][f"raw/{RUN}_gemm_r1.log"] == "log"
    assert json.loads((rd.path / "manifest.json").read_text()) == m


def test_artifact_roles():
    assert artifact_role("structured/r_environment.json") == "environment"
    assert artifact_role("raw/r_fio_r1_fio.json") == "raw_output"
    assert artifact_role("reports/r_report.html") == "report"


def test_mark_run_failed_only_once_and_not_terminal(tmp_path):
    rd = RunDir(tmp_path, RUN).create()
    rd.write_status({"run_id": RUN, "conditions": [], "phase": "Running", "created_utc": "1"})
    assert mark_run_failed(tmp_path, RUN, "orchestrator crashed")
    st = rd.read_status()
    assert st["phase"] == "Failed" and st["message"] == "orchestrator crashed"
    assert not mark_run_failed(tmp_path, RUN, "again")
    assert [r.run_id for r in list_runs(tmp_path)] == [RUN]


def test_eta_weighs_each_remaining_replicate_by_its_own_suite():
    from benchrun.execute import Progress

    p = {"planned": {"micro/fast": 3, "micro/slow": 3, "component/new": 2},
         "walls": {"micro/fast": [1.0, 1.0], "micro/slow": [10.0]}}
    # fast: 1 left x 1 s; slow: 2 left x 10 s; new: 2 x overall mean (12/3 = 4 s)
    assert Progress.eta(p) == 1.0 + 20.0 + 8.0
    assert Progress.eta({"planned": {"a": 1}, "walls": {}}) is None


def test_a_layer_run_again_counts_its_launches_once(tmp_path):
    """Review: a layer re-executed (a retry) added to done, failed and walls: 8 of 5 done, sealed as such."""
    from benchrun.execute import Progress
    from benchrun.launch.base import LaunchResult
    from benchrun.plan import LayerPlan

    rd = RunDir(tmp_path, RUN).create()
    prog = Progress(rd)
    prog.begin_run([LayerPlan("micro", True, ())])

    def res(k, status, wall):
        return LaunchResult(run_id=RUN, layer="micro", suite="gemm", replicate=k, benchmark_case_id="c", status=status,
                            reason=None, exit_code=0, wall_s=wall, t_request=0.0, t_spawned=0.0, t_finished=0.0,
                            log="", result=None)

    for k in (1, 2, 3):
        prog.finish(res(k, "failed" if k == 3 else "ok", 2.0))
    for k in (2, 3):  # the retry runs replicates 2 and 3 again; 3 now succeeds
        prog.finish(res(k, "ok", 4.0))
    p = rd.read_progress()
    assert (p["done"], p["failed"]) == (3, 0) and sorted(p["walls"]["micro/gemm"]) == [2.0, 4.0, 4.0]


def test_atomic_writes_leave_readable_files_and_no_temporaries(tmp_path):
    import pytest

    from benchrun.fsio import atomic_path, atomic_write_json

    target = atomic_write_json(tmp_path / "a.json", {"x": 1})
    assert target.stat().st_mode & 0o777 == 0o644
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "b.bin") as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("crash mid-write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_atomic_path_keeps_a_mode_the_writer_chose(tmp_path):
    import os

    from benchrun.fsio import atomic_path

    with atomic_path(tmp_path / "ro.json") as tmp:
        tmp.write_text("{}")
        os.chmod(tmp, 0o444)
    assert (tmp_path / "ro.json").stat().st_mode & 0o777 == 0o444


def test_show_all_counts_a_replicate_lost_part_way_as_failed_as_the_comparison_does():
    """Review: `show --all` said failed 0 where `compare`'s failed_replicates row said 1 (a replicate unavailable
    while the others of its suite measured: the device went away); a suite unavailable throughout stays none."""
    from benchrun.execute import summarise
    from benchrun.launch.base import LaunchResult

    def res(suite, k, status):
        metrics = [{"name": "v", "value": 1.0 + k, "unit": "u", "case": ""}] if status == "ok" else []
        return LaunchResult(run_id=RUN, layer="micro", suite=suite, replicate=k, benchmark_case_id="c", status=status,
                            reason=None, exit_code=0, wall_s=1.0, t_request=0.0, t_spawned=0.0, t_finished=0.0,
                            log="", result=None, metrics=metrics)

    rows = summarise([res("probe", 1, "ok"), res("probe", 2, "ok"), res("probe", 3, "unavailable"),
                      res("gpu", 1, "unavailable"), res("gpu", 2, "unavailable")])
    by = {r["suite"]: (r["n_ok"], r["n_failed"]) for r in rows}
    assert by == {"probe": (2, 1), "gpu": (0, 0)}
