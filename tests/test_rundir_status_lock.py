"""status.json's read-modify-writes are serialised (RunDir.status_lock): concurrent updates of one run
from several processes lose nothing."""

from __future__ import annotations

import multiprocessing as mp

from benchrun.rundir import RunDir

WRITERS, WRITES = 4, 60


def _writer(home: str, run_id: str, i: int) -> None:
    rd = RunDir.for_run(run_id, home)
    for j in range(WRITES):
        if j % 3 == 2:
            rd.set_condition(f"W{i}", True, "Writing", str(j))
        else:
            rd.update_status(**{f"writer_{i}": j})


def test_concurrent_updates_lose_no_write(tmp_path):
    # before: each writer wrote back the copy it had read; writers' fields and conditions went missing
    rd = RunDir.for_run("locked-run", tmp_path).create()
    rd.write_status({"run_id": "locked-run", "conditions": []})
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), "locked-run", i)) for i in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    st = rd.read_status()
    assert st["status_seq"] == 1 + WRITERS * WRITES  # every write built on the one before it
    assert {st.get(f"writer_{i}") for i in range(WRITERS)} == {WRITES - 2}
    assert {c["type"]: c["message"] for c in st["conditions"]} == {f"W{i}": str(WRITES - 1) for i in range(WRITERS)}


def test_the_lock_is_reentrant_and_fields_can_be_dropped(tmp_path):
    rd = RunDir.for_run("r1", tmp_path).create()
    rd.write_status({"run_id": "r1", "conditions": [], "confirmation_progress": {"launches": 3}})
    with rd.status_lock():
        rd.update_status(phase="Analyzing")  # the same thread takes it again
        rd.drop_status_fields("confirmation_progress")
    st = rd.read_status()
    assert st["phase"] == "Analyzing" and "confirmation_progress" not in st
    assert rd.status_lock_path.is_file()
