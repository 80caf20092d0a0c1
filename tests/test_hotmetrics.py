"""Hot metrics: rendering, labels never carried, the cardinality budget, textfile, a real Pushgateway."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchrun import hotmetrics as hm_mod
from benchrun.errors import BenchrunError
from benchrun.hotmetrics import Budget, publish_run, push, render, write_textfile
from benchrun.pushgateway import PUSHGATEWAY_PASSWORD_ENV, PUSHGATEWAY_USER_ENV
from benchrun.suites.result import SCHEMA, metric
from benchrun.fsio import atomic_write_json

RUN_ID = "hot-20261130090000-abcdef12"
PUSHGATEWAY = Path("/usr/bin/prometheus-pushgateway")
FORBIDDEN = ("request_id", "trace_id", "prompt_hash")
BIG = Budget(max_active_series=10_000, drop_dimensions=["request_id", "trace_id", "prompt_hash"])


def _doc(suite: str, rep: int, status: str, metrics: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema": SCHEMA, "run_id": RUN_ID, "suite": suite, "replicate": rep, "benchmark_case_id": f"{suite}-c",
            "status": status, "reason": None if status == "ok" else "exited with code 1", "synthetic": False,
            "started_utc": "2026-11-30T09:00:01Z", "finished_utc": "2026-11-30T09:00:02Z",
            "parameters": {}, "context": {}, "metrics": metrics, "samples": {}}


def make_run(root: Path, run_id: str = RUN_ID) -> tuple[Path, dict[str, Any]]:
    """A finished run directory by hand: status, launches, manifest and five suite results."""
    rd = root / "runs" / run_id
    for sub in ("structured", "raw", "figures", "reports", "progress"):
        (rd / sub).mkdir(parents=True, exist_ok=True)
    status = {
        "run_id": run_id, "name": "hot", "phase": "Analyzing", "cadence": "canary",
        "benchmark_class_requested": "publication_grade", "benchmark_class_granted": "realism_grade",
        "workload_type": "inference", "selected_scheduler_path": "local", "variable_under_test": "runtime_version",
        "workload_spec_digest": "ab" * 32, "started_utc": "2026-11-30T09:00:00.000000Z", "conditions": [],
        "layers": {"micro": {"status": "succeeded", "ok": 3, "failed": 0, "unavailable": 0, "launches": 3},
                   "component": {"status": "failed", "ok": 2, "failed": 1, "unavailable": 0, "launches": 3},
                   "end_to_end": {"status": "skipped", "ok": 0, "failed": 0, "launches": 0}},
    }
    atomic_write_json(rd / "status.json", status)
    atomic_write_json(rd / "manifest.json", {"manifest_version": 2, "run_id": run_id,
                                             "timestamp_utc": "2026-11-30T09:01:30.500000Z"})
    launches = [{"layer": "micro", "suite": "gemm", "replicate": k, "status": "ok"} for k in (1, 2, 3)]
    launches += [{"layer": "component", "suite": "allreduce", "replicate": k, "status": "ok" if k < 3 else "failed"}
                 for k in (1, 2, 3)]
    atomic_write_json(rd / "structured" / f"{run_id}_launches.json", launches)
    for k, (tf, p99) in enumerate([(1.0, 9.0), (4.0, 7.0), (2.0, 8.0)], start=1):
        rows = [metric("tflops", tf, "TFLOP/s", "higher", case="n=64,fp64"),
                metric("p99_latency_ms", p99, "ms", "lower", case='say "hi"\\now\nnext'),
                metric("weird-name.per/s", 5.0, "1/s", "higher")]
        atomic_write_json(rd / "structured" / f"{run_id}_gemm_r{k}.json", _doc("gemm", k, "ok", rows))
    for k, lat in ((1, 10.0), (2, 30.0)):
        rows = [metric("p50_latency_us", lat, "us", "lower", case="1MiB", rank_id=None),
                metric("rank_p50_time_us", lat + 1, "us", "lower", case="1MiB", rank_id=0),
                metric("rank_p50_time_us", lat + 3, "us", "lower", case="1MiB", rank_id=1),
                # Rows that carry per-request keys: the keys must vanish and the rows merge.
                metric("ttft_ms", lat / 10, "ms", "lower", case="c=1", request_id=f"req-{k}-a", trace_id="t1"),
                metric("ttft_ms", lat / 10 + 2, "ms", "lower", case="c=1", request_id=f"req-{k}-b", trace_id="t2")]
        atomic_write_json(rd / "structured" / f"{run_id}_allreduce_r{k}.json", _doc("allreduce", k, "ok", rows))
    atomic_write_json(rd / "structured" / f"{run_id}_allreduce_r3.json",
                      _doc("allreduce", 3, "failed", [metric("p50_latency_us", 999.0, "us", "lower", case="1MiB")]))
    return rd, status


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, dict(s.labels), s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def find(rows: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> list[float]:
    return [v for n, lab, v in rows if n == name and all(lab.get(k) == want for k, want in labels.items())]


def test_render_medians_of_ok_replicates_with_labels(tmp_path: Path) -> None:
    rd, status = make_run(tmp_path)
    hm = render(rd, status, BIG, primary=["ttft_ms"])
    rows = samples(hm.text)
    assert find(rows, "benchrun_tflops", suite="gemm", case="n=64,fp64", layer="micro", run_name="hot",
                cadence="canary", benchmark_class="realism_grade", run_id=RUN_ID) == [2.0]
    # The failed replicate's 999 is not in the median; only r1 and r2 are ok.
    assert find(rows, "benchrun_p50_latency_us", suite="allreduce", layer="component") == [20.0]
    assert sorted(find(rows, "benchrun_rank_p50_time_us")) == [21.0, 23.0]
    assert find(rows, "benchrun_rank_p50_time_us", rank_id="1") == [23.0]
    # Label values with a quote, a backslash and a newline survive the round trip.
    assert find(rows, "benchrun_p99_latency_ms", case='say "hi"\\now\nnext') == [8.0]
    assert find(rows, "benchrun_weird_name_per_s") == [5.0]
    # Run-level gauges.
    assert find(rows, "benchrun_run_phase", phase="Analyzing") == [1.0]
    assert find(rows, "benchrun_run_duration_seconds") == [90.5]
    assert find(rows, "benchrun_run_replicates", layer="component", outcome="failed") == [1.0]
    assert find(rows, "benchrun_run_replicates", layer="micro", outcome="ok") == [3.0]
    assert not find(rows, "benchrun_run_replicates", layer="end_to_end")
    assert find(rows, "benchrun_suite_replicates", suite="allreduce", status="failed") == [1.0]
    assert find(rows, "benchrun_suite_replicates", suite="gemm", status="ok") == [3.0]
    info = [lab for n, lab, _ in rows if n == "benchrun_run_info"]
    assert info[0]["benchmark_class_requested"] == "publication_grade"
    assert info[0]["workload_spec_digest"] == "ab" * 32
    assert "# TYPE benchrun_tflops gauge" in hm.text
    assert "# HELP benchrun_tflops tflops in TFLOP/s (higher is better)" in hm.text
    assert hm.series_count == len(rows) == hm.series_total and hm.series_dropped == 0


def test_forbidden_and_dropped_labels_never_appear_and_rows_merge(tmp_path: Path) -> None:
    rd, status = make_run(tmp_path)
    # Even with an empty dropDimensions the contract's three labels are never carried.
    hm = render(rd, status, Budget(10_000, []))
    rows = samples(hm.text)
    assert all(f not in lab for _, lab, _ in rows for f in FORBIDDEN)
    for f in FORBIDDEN[:2]:
        assert f not in hm.text
    # ttft rows per replicate: r1 (1, 3) -> 2, r2 (3, 5) -> 4; across replicates -> 3.
    assert find(rows, "benchrun_ttft_ms", case="c=1") == [3.0]
    assert hm.merged_series == 3 and set(hm.labels_removed) == {"request_id", "trace_id"}
    # A spec dimension is dropped too: rank rows merge into one series per case.
    hm2 = render(rd, status, Budget(10_000, ["rank_id", "cadence"]))
    rows2 = samples(hm2.text)
    assert all("rank_id" not in lab and "cadence" not in lab for _, lab, _ in rows2)
    assert find(rows2, "benchrun_rank_p50_time_us") == [22.0]  # r1 median(11,13)=12, r2 32 -> 22


def test_cases_merged_by_a_dropped_case_label_are_counted(tmp_path: Path) -> None:
    """Review 2026-12-07: `dropDimensions: [case]` merged dataloader's pyarrow (522k) and torch (124k)
    samples/s into one median neither case measured, with merged_series 0 and no note."""
    rd, status = make_run(tmp_path)
    for k in (1, 2):
        rows = [metric("samples_per_s", 522_000.0, "1/s", "higher", case="pyarrow"),
                metric("samples_per_s", 124_000.0, "1/s", "higher", case="torch_workers=2")]
        atomic_write_json(rd / "structured" / f"{RUN_ID}_dataloader_r{k}.json", _doc("dataloader", k, "ok", rows))
    kept = render(rd, status, BIG)
    assert sorted(find(samples(kept.text), "benchrun_samples_per_s")) == [124_000.0, 522_000.0]
    hm = render(rd, status, Budget(10_000, [*FORBIDDEN, "case"]))
    assert find(samples(hm.text), "benchrun_samples_per_s") == [323_000.0]
    assert hm.merged_series - kept.merged_series >= 1 and "case" in hm.labels_removed
    assert any("merged because their distinguishing labels are dropped" in n and "case" in n for n in hm.notes)


def test_budget_keeps_run_level_first_and_reports_the_drop(tmp_path: Path) -> None:
    rd, status = make_run(tmp_path)
    full = render(rd, status, BIG, primary=["ttft_ms"])
    run_level = [s for s in full.series if s.priority == hm_mod.PRIORITY_RUN]
    # Room (after 4 series held elsewhere) for the run level, the 3 suite counts and 1 more.
    hm = render(rd, status, Budget(len(run_level) + 4 + 4, []), primary=["ttft_ms"], existing_series=4)
    assert hm.series_count == len(run_level) + 4
    assert hm.dropped_by_budget == {"metric": 4, "detail": 2}
    assert hm.series_dropped == full.series_count - hm.series_count == 6
    names = {s.name for s in hm.series}
    assert "benchrun_ttft_ms" in names and "benchrun_tflops" not in names and "benchrun_run_info" in names
    rows = samples(hm.text)
    assert len(rows) == hm.series_count
    assert sum(1 for n, _, _ in rows if n == "benchrun_suite_replicates") == 3
    # Budget smaller than the run level: still nothing but the most important.
    tiny = render(rd, status, Budget(2, []))
    assert tiny.series_count == 2 and {s.priority for s in tiny.series} == {hm_mod.PRIORITY_RUN}
    assert tiny.series_dropped == full.series_count - 2


def test_textfile_is_atomic_and_counts_other_runs(tmp_path: Path) -> None:
    rd, status = make_run(tmp_path)
    hm = render(rd, status, BIG)
    path = write_textfile(hm, tmp_path / "metrics" / f"{RUN_ID}.prom")
    assert path.read_text() == hm.text
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind
    other = tmp_path / "metrics" / "other-run.prom"
    other.write_text("# HELP x y\n# TYPE x gauge\nx 1\nx{a=\"b\"} 2\n")
    assert hm_mod.textfile_series(path.parent, exclude_run_id=RUN_ID) == 2


def test_publish_without_gateway_writes_the_textfile_and_says_so(tmp_path: Path, monkeypatch) -> None:
    rd, status = make_run(tmp_path)
    monkeypatch.delenv(hm_mod.PUSHGATEWAY_ENV, raising=False)
    hm, pub = publish_run(rd, status, BIG, home=tmp_path)
    assert pub.pushed_to is None and "BENCHRUN_PUSHGATEWAY_URL is not set" in pub.note
    assert pub.textfile == tmp_path / "metrics" / f"{RUN_ID}.prom" and pub.textfile.read_text() == hm.text


def test_metric_names_are_sanitised() -> None:
    assert hm_mod.metric_name("p99-latency.ms") == "benchrun_p99_latency_ms"
    assert hm_mod.metric_name("run_info") == "benchrun_suite_run_info"
    assert hm_mod.label_name("9lives") == "_9lives" and hm_mod.label_name("__x") == "x__x"


# -- a real Pushgateway on loopback ------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_pushgateway(workdir: Path, *extra: str, ready_auth: str | None = None) -> Iterator[str]:
    """The real Debian prometheus-pushgateway on a free loopback port, no persistence."""
    if not PUSHGATEWAY.exists():
        pytest.skip(f"{PUSHGATEWAY} is not installed (Debian package prometheus-pushgateway)")
    port = _free_port()
    log = workdir / "pushgateway.log"
    with log.open("wb") as fh:
        # Debian's build persists to /var/lib/prometheus/pushgateway.data by default, which
        # would leak groups between test runs: an empty --persistence.file keeps it in memory.
        proc = subprocess.Popen([str(PUSHGATEWAY), f"--web.listen-address=127.0.0.1:{port}", "--persistence.file=",
                                 *extra], stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                req = urllib.request.Request(url + "/-/ready")
                if ready_auth:
                    req.add_header("Authorization", ready_auth)
                with urllib.request.urlopen(req, timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"pushgateway did not become ready: {log.read_text()[-2000:]}")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _start_pushgateway(tmp_path_factory.mktemp("pushgateway"))


GATEWAY_USER, GATEWAY_PASSWORD = "bench", "S3cret/PW:x"


@pytest.fixture(scope="module")
def secured_pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real Pushgateway behind basic auth (its --web.config.file, a bcrypt hash as it requires)."""
    bcrypt = pytest.importorskip("bcrypt")
    workdir = tmp_path_factory.mktemp("secured-pushgateway")
    hashed = bcrypt.hashpw(GATEWAY_PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    (workdir / "web.yml").write_text(f"basic_auth_users:\n  {GATEWAY_USER}: '{hashed}'\n")
    token = base64.b64encode(f"{GATEWAY_USER}:{GATEWAY_PASSWORD}".encode()).decode()
    yield from _start_pushgateway(workdir, f"--web.config.file={workdir / 'web.yml'}",
                                  ready_auth=f"Basic {token}")


def test_a_pushgateway_behind_basic_auth(tmp_path: Path, secured_pushgateway: str, monkeypatch) -> None:
    """Credentials from the environment (or the URL's user:password@) reach every request: the
    series count, the push and the delete; without them the gateway's 401 is said, not a crash."""
    rd, status = make_run(tmp_path)
    with pytest.raises(BenchrunError, match="refused the request: HTTP 401"):
        push(render(rd, status, BIG), secured_pushgateway)
    _, pub = publish_run(rd, status, BIG, home=tmp_path, url=secured_pushgateway)
    assert pub.pushed_to is None and "HTTP 401" in pub.push_error and PUSHGATEWAY_USER_ENV in pub.push_error

    monkeypatch.setenv(PUSHGATEWAY_USER_ENV, GATEWAY_USER)
    monkeypatch.setenv(PUSHGATEWAY_PASSWORD_ENV, GATEWAY_PASSWORD)
    hm, pub = publish_run(rd, status, BIG, home=tmp_path, url=secured_pushgateway)
    assert pub.pushed_to == f"{secured_pushgateway}/metrics/job/benchrun/run_id/{RUN_ID}" and pub.push_error is None
    assert hm_mod.gateway_series(secured_pushgateway) >= hm.series_count
    assert GATEWAY_PASSWORD not in pub.note
    assert hm_mod.delete_groups(secured_pushgateway, RUN_ID) == [pub.pushed_to]

    # the same credentials in the URL (percent-encoded), the environment's unset: pushed, never shown
    monkeypatch.delenv(PUSHGATEWAY_USER_ENV)
    monkeypatch.delenv(PUSHGATEWAY_PASSWORD_ENV)
    quoted = urllib.parse.quote(GATEWAY_PASSWORD, safe="")
    url = secured_pushgateway.replace("http://", f"http://{GATEWAY_USER}:{quoted}@")
    _, pub = publish_run(rd, status, BIG, home=tmp_path, url=url)
    assert pub.pushed_to == f"{secured_pushgateway}/metrics/job/benchrun/run_id/{RUN_ID}"
    assert quoted not in pub.note and GATEWAY_PASSWORD not in pub.note
    assert hm_mod.delete_groups(url, RUN_ID) == [pub.pushed_to]


def _gateway_samples(url: str) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        return samples(r.read().decode())


def test_push_to_a_real_pushgateway(tmp_path: Path, pushgateway: str, monkeypatch) -> None:
    rd, status = make_run(tmp_path)
    monkeypatch.setenv(hm_mod.PUSHGATEWAY_ENV, pushgateway)
    hm, pub = publish_run(rd, status, BIG, primary=["ttft_ms"], home=tmp_path)
    assert pub.pushed_to == f"{pushgateway}/metrics/job/benchrun/run_id/{RUN_ID}"
    rows = _gateway_samples(pushgateway)
    ours = [(n, lab, v) for n, lab, v in rows if lab.get("run_id") == RUN_ID and n.startswith("benchrun_")]
    assert len(ours) == hm.series_count
    assert find(ours, "benchrun_tflops", job="benchrun", suite="gemm", case="n=64,fp64") == [2.0]
    assert find(ours, "benchrun_ttft_ms", case="c=1") == [3.0]
    assert find(ours, "benchrun_p99_latency_ms", case='say "hi"\\now\nnext') == [8.0]
    assert find(ours, "benchrun_run_phase", phase="Analyzing") == [1.0]
    assert all(f not in lab for _, lab, _ in rows for f in FORBIDDEN)
    assert find(rows, "push_time_seconds", run_id=RUN_ID)  # the gateway accepted the group

    # A second push replaces the group (PUT), it does not add to it.
    status2 = {**status, "phase": "Succeeded", "finished_utc": "2026-11-30T09:02:00Z"}
    push(render(rd, status2, Budget(3, [])), pushgateway)
    rows = [(n, lab, v) for n, lab, v in _gateway_samples(pushgateway)
            if lab.get("run_id") == RUN_ID and n.startswith("benchrun_")]
    assert len(rows) == 3 and not find(rows, "benchrun_tflops")
    assert find(rows, "benchrun_run_phase", phase="Succeeded") == [1.0]
    assert find(rows, "benchrun_run_duration_seconds") == [120.0]


def test_gateway_series_of_other_runs_count_against_the_budget(tmp_path: Path, pushgateway: str) -> None:
    other_id = "other-20261130090000-00000000"
    rd, status = make_run(tmp_path / "a", other_id)
    other = render(rd, status, Budget(4, []))
    push(other, pushgateway)
    held = hm_mod.gateway_series(pushgateway, exclude_run_id=RUN_ID)
    assert held >= 4 + hm_mod.GATEWAY_SERIES_PER_GROUP
    rd2, status2 = make_run(tmp_path / "b")
    budget = Budget(held + hm_mod.GATEWAY_SERIES_PER_GROUP + 3, [])
    hm, pub = publish_run(rd2, status2, budget, home=tmp_path, url=pushgateway)
    assert hm.existing_series == held + hm_mod.GATEWAY_SERIES_PER_GROUP and hm.series_count == 3
    assert hm.series_dropped == hm.series_total - 3 and pub.pushed_to


def test_groups_and_textfiles_past_retention_days_are_removed_before_the_budget(tmp_path: Path, pushgateway: str) -> None:
    """Found in review: retentionDays was parsed and never used; every run's group stayed on the gateway,
    counted against every later run's maxActiveSeries, until a new run published nothing at all."""
    import os
    import time

    old_id = "old-20261101090000-00000000"
    rd, status = make_run(tmp_path / "a", old_id)
    push(render(rd, status, Budget(4, [])), pushgateway)
    old_text = hm_mod.default_textfile(old_id, tmp_path)
    old_text.parent.mkdir(parents=True, exist_ok=True)
    old_text.write_text("benchrun_x 1\n")
    os.utime(old_text, (time.time() - 3 * 86400, time.time() - 3 * 86400))
    time.sleep(1.2)
    rd2, status2 = make_run(tmp_path / "b")
    budget = Budget(hm_mod.GATEWAY_SERIES_PER_GROUP + 3, [])  # room for this run's 3 only if the old group goes
    hm, pub = publish_run(rd2, status2, budget, home=tmp_path, url=pushgateway, retention_days=1 / 86400)
    assert hm.series_count == 3 and hm.existing_series == hm_mod.GATEWAY_SERIES_PER_GROUP, hm.existing_series
    assert not any(lab.get("run_id") == old_id for _, lab, _ in _gateway_samples(pushgateway))
    assert not old_text.exists() and pub.pushed_to
    # a run within its retention is kept
    hm, pub = publish_run(rd, status, BIG, home=tmp_path, url=pushgateway, retention_days=30)
    assert any(lab.get("run_id") == RUN_ID for _, lab, _ in _gateway_samples(pushgateway))


def test_unreachable_gateway_is_a_clear_error(tmp_path: Path) -> None:
    rd, status = make_run(tmp_path)
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    with pytest.raises(BenchrunError, match=r"Pushgateway http://127\.0\.0\.1:\d+ is unreachable"):
        push(render(rd, status, BIG), url, timeout=2)


def test_an_unreachable_gateway_is_said_and_the_textfile_still_written(tmp_path: Path) -> None:
    """publish_run raised before writing the textfile, so the hot_metrics step failed and with it
    the run (phase Failed, exit 1) whose evidence was complete; the error also showed the URL's
    password, which then stood in status.json and the report."""
    rd, status = make_run(tmp_path)
    url = f"http://bench:S3cretPW@127.0.0.1:{_free_port()}"
    hm, pub = publish_run(rd, status, BIG, home=tmp_path, url=url)
    assert pub.pushed_to is None and "is unreachable" in pub.push_error and "not pushed" in pub.note
    assert pub.textfile.is_file() and samples(pub.textfile.read_text())
    assert "S3cretPW" not in pub.note and "bench:" not in pub.note
    assert hm_mod.group_url(url, RUN_ID) == f"{url.replace('bench:S3cretPW@', '')}/metrics/job/benchrun/run_id/{RUN_ID}"


def test_push_refuses_forbidden_grouping(tmp_path: Path, pushgateway: str) -> None:
    rd, status = make_run(tmp_path)
    with pytest.raises(BenchrunError, match="request_id"):
        push(render(rd, status, BIG), pushgateway, grouping={"request_id": "x"})


def test_gateway_rejection_is_reported(tmp_path: Path, pushgateway: str) -> None:
    # Another group holds benchrun_conflict_probe as a counter: the gateway refuses our gauge (400).
    foreign = f"{pushgateway}/metrics/job/foreign"
    body = b"# TYPE benchrun_conflict_probe counter\nbenchrun_conflict_probe 1\n"
    urllib.request.urlopen(urllib.request.Request(foreign, data=body, method="PUT"), timeout=5).close()
    try:
        rd, status = make_run(tmp_path)
        atomic_write_json(rd / "structured" / f"{RUN_ID}_probe_r1.json",
                          _doc("probe", 1, "ok", [metric("conflict_probe", 1.0, "1", "higher")]))
        with pytest.raises(BenchrunError, match=r"refused the request: HTTP 400 .*conflict_probe.* is not a (COUNTER|GAUGE)"):
            push(render(rd, status, BIG), pushgateway)
    finally:
        urllib.request.urlopen(urllib.request.Request(foreign, method="DELETE"), timeout=5).close()


def test_render_ignores_other_structured_json(tmp_path: Path) -> None:
    rd, status = make_run(tmp_path)
    before = render(rd, status, BIG).text
    (rd / "structured" / f"{RUN_ID}_environment.json").write_text(json.dumps({"python": "3.11"}))
    (rd / "structured" / f"{RUN_ID}_plan_r1.json").write_text(json.dumps([{"suite": "x"}]))
    assert render(rd, status, BIG).text == before


def test_a_damaged_result_names_the_file(tmp_path: Path) -> None:
    rd, status = make_run(tmp_path)
    bad = rd / "structured" / f"{RUN_ID}_gemm_r9.json"
    bad.write_text("{not json")
    with pytest.raises(BenchrunError, match=f"{bad.name}: not readable JSON"):
        render(rd, status, BIG)


def test_row_keys_never_override_structural_labels(tmp_path: Path) -> None:
    rd, status = make_run(tmp_path)
    row = metric("probe", 7.0, "1", "higher", case="x", suite="evil", run_id="other-run", layer="nope",
                 node_name="node-a")
    atomic_write_json(rd / "structured" / f"{RUN_ID}_probe_r1.json", _doc("probe", 1, "ok", [row]))
    rows = samples(render(rd, status, BIG).text)
    assert find(rows, "benchrun_probe", suite="probe", run_id=RUN_ID, case="x", layer="", node_name="node-a") == [7.0]


def test_delete_removes_the_runs_pushgateway_groups(tmp_path: Path, pushgateway: str, monkeypatch) -> None:
    """`benchrun delete` removed the textfile only: the run's Pushgateway group stayed and its
    series counted against every later run's maxActiveSeries."""
    from benchrun.runctl import delete_run

    gone = "gone-20261130090000-00000000"
    kept = "kept-20261130090000-11111111"
    rd, status = make_run(tmp_path, gone)
    atomic_write_json(rd / "status.json", {**status, "phase": "Succeeded"})
    monkeypatch.setenv(hm_mod.PUSHGATEWAY_ENV, pushgateway)
    publish_run(rd, status, BIG, home=tmp_path)
    push(render(rd, status, Budget(3, [])), pushgateway, grouping={"site": "lab"})  # a second group of the run
    rd2, status2 = make_run(tmp_path / "other", kept)
    push(render(rd2, status2, Budget(3, [])), pushgateway)
    held_before = hm_mod.gateway_series(pushgateway, exclude_run_id=kept)

    out = delete_run(gone, home=tmp_path)
    assert f"Pushgateway group {pushgateway}/metrics/job/benchrun/run_id/{gone}" in out.removed
    assert f"Pushgateway group {pushgateway}/metrics/job/benchrun/run_id/{gone}/site/lab" in out.removed
    assert not [lab for _, lab, _ in _gateway_samples(pushgateway) if lab.get("run_id") == gone]
    assert [lab for _, lab, _ in _gateway_samples(pushgateway) if lab.get("run_id") == kept]  # another run's stays
    assert hm_mod.gateway_series(pushgateway, exclude_run_id=kept) < held_before
    assert not (tmp_path / "runs" / gone).exists()
    push(render(rd2, status2, Budget(3, [])), pushgateway)  # tidy: only `kept` remains, then none
    assert hm_mod.delete_groups(pushgateway, kept)
    # the gateway applies a DELETE through its write queue: on a loaded machine a listing right after it
    # still showed the group once (a clean-clone make test); it is gone within a few seconds
    deadline = time.monotonic() + 10
    while hm_mod.delete_groups(pushgateway, kept) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert hm_mod.delete_groups(pushgateway, kept) == []


def test_delete_with_the_gateway_down_keeps_the_group_and_says_so(tmp_path: Path, monkeypatch) -> None:
    from benchrun.runctl import delete_run

    rd, status = make_run(tmp_path)
    atomic_write_json(rd / "status.json", {**status, "phase": "Succeeded"})
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    monkeypatch.setenv(hm_mod.PUSHGATEWAY_ENV, url)
    out = delete_run(RUN_ID, home=tmp_path)
    assert not any("Pushgateway" in r for r in out.removed)
    [note] = [k for k in out.kept if "Pushgateway" in k]
    assert "not deleted" in note and "unreachable" in note and f"{url}/metrics/job/benchrun/run_id/{RUN_ID}" in note


@pytest.mark.slow
def test_a_run_whose_pushgateway_is_down_succeeds_and_says_so(bench_home, canary_doc, write_spec, monkeypatch) -> None:
    """`benchrun run` with an unreachable BENCHRUN_PUSHGATEWAY_URL ended Failed (exit 1): the
    hot_metrics step raised, although every replicate succeeded and the evidence was signed."""
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.report.worker import wait_for_workers
    from benchrun.rundir import RunDir
    from helpers import tiny_spec

    monkeypatch.setenv("BENCHRUN_WARM", "0")
    monkeypatch.setenv(hm_mod.PUSHGATEWAY_ENV, f"http://bench:S3cretPW@127.0.0.1:{_free_port()}")
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [{"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm",
                                                 "parameters": {"sizes": [64], "iterations": 2}}])
    out = CliRunner().invoke(app, ["run", str(write_spec(canary_doc))])
    wait_for_workers(bench_home)
    assert out.exit_code == 0, out.output
    assert "HotMetricsPushed=False (PushgatewayUnavailable)" in out.output
    run_id = next(p.name for p in (bench_home / "runs").iterdir())
    st = RunDir(bench_home, run_id).read_status()
    assert st["phase"] == "Succeeded" and (bench_home / "metrics" / f"{run_id}.prom").is_file()
    assert "S3cretPW" not in (bench_home / "runs" / run_id / "status.json").read_text() + out.output


def test_a_rows_measurement_details_are_no_labels_only_its_identity_keys_are(tmp_path: Path) -> None:
    """fio's rows carry job_runtime_ms and, on p99s, samples (an I/O count), gemm's and training's p99s
    carry samples: each became a label, so every replicate was its own series (fio bandwidth three times,
    67.1 / 128.2 / 170.2, not their median) and, as "detail", the first dropped under a budget."""
    rd, status = make_run(tmp_path)
    for k, (bw, runtime, p99, n) in enumerate([(128.2, 150, 2.0, 6036), (170.2, 151, 4.0, 3314),
                                               (67.1, 156, 3.0, 4877)], start=1):
        rows = [metric("bandwidth_mib_per_s", bw, "MiB/s", "higher", case="rand_write", job_runtime_ms=runtime),
                metric("p99_clat_ms", p99, "ms", "lower", case="rand_write", job_runtime_ms=runtime, samples=n),
                metric("rank_p50_time_us", 10.0 + k, "us", "lower", case="1MiB", rank_id=0, node_name="n0")]
        atomic_write_json(rd / "structured" / f"{RUN_ID}_fio_r{k}.json", _doc("fio", k, "ok", rows))
    hm = render(rd, status, BIG, primary=["p99_clat_ms"])
    rows = samples(hm.text)
    assert find(rows, "benchrun_bandwidth_mib_per_s", suite="fio") == [128.2]
    assert find(rows, "benchrun_p99_clat_ms", suite="fio") == [3.0]
    assert not [lab for _, lab, _ in rows if "samples" in lab or "job_runtime_ms" in lab]
    # identity keys stay labels: one series per rank and node
    assert find(rows, "benchrun_rank_p50_time_us", suite="fio", rank_id="0", node_name="n0") == [12.0]
    prio = {s.name: s.priority for s in hm.series if ("suite", "fio") in s.labels}
    assert prio["benchrun_p99_clat_ms"] == hm_mod.PRIORITY_PRIMARY
    assert prio["benchrun_bandwidth_mib_per_s"] == hm_mod.PRIORITY_METRIC
    assert prio["benchrun_rank_p50_time_us"] == hm_mod.PRIORITY_DETAIL


def test_suites_with_underscores_in_their_names_are_published(tmp_path: Path, monkeypatch) -> None:
    """``<run>_serving_workflow_r1.json`` is run <run>'s serving_workflow, not run ``<run>_serving``'s
    workflow: a reader that took the run id as everything up to the last '_' before the suite left
    every underscored suite (serving_workflow, serving_sweep, job_startup) out of the hot metrics."""
    monkeypatch.delenv("BENCHRUN_PUSHGATEWAY_URL", raising=False)
    rd, status = make_run(tmp_path)
    for suite, name, values in (("serving_workflow", "ttft_ms", (25.0, 27.0, 26.0)),
                                ("job_startup", "startup_s", (1.0, 3.0, 2.0))):
        for k, v in enumerate(values, start=1):
            atomic_write_json(rd / "structured" / f"{RUN_ID}_{suite}_r{k}.json",
                              _doc(suite, k, "ok", [metric(name, v, "ms", "lower", case="c=4")]))
    hm, published = publish_run(rd, status, BIG, home=tmp_path)
    rows = samples(published.textfile.read_text(encoding="utf-8"))
    assert find(rows, "benchrun_ttft_ms", suite="serving_workflow", case="c=4") == [26.0]
    assert find(rows, "benchrun_startup_s", suite="job_startup") == [2.0]
    assert find(rows, "benchrun_suite_replicates", suite="serving_workflow", status="ok") == [3.0]


def test_a_tight_budget_keeps_the_specs_primary_selectors(tmp_path: Path) -> None:
    """The spec names primaries as selectors (``serving_workflow/ttft_ms[c=4]``, as
    bench_assets.publish_assets passes them): those series are kept before the other metrics, and
    the same metric in another suite or case is not a primary."""
    rd, status = make_run(tmp_path)
    for k in (1, 2, 3):
        rows = [metric("ttft_ms", 20.0 + k, "ms", "lower", case="c=4"),
                metric("ttft_ms", 40.0 + k, "ms", "lower", case="c=1"),
                metric("p99_latency_ms", 30.0 + k, "ms", "lower", case="c=4")]
        atomic_write_json(rd / "structured" / f"{RUN_ID}_serving_workflow_r{k}.json",
                          _doc("serving_workflow", k, "ok", rows))
    primary = ["serving_workflow/ttft_ms[c=4]", "serving_workflow/p99_latency_ms[c=4]", "tflops"]
    full = render(rd, status, BIG, primary=primary)
    first = [s for s in full.series if s.priority <= hm_mod.PRIORITY_SUITE_COUNTS]
    tight = render(rd, status, Budget(len(first) + 3, []), primary=primary)
    kept = {(s.name, dict(s.labels).get("suite"), dict(s.labels).get("case")) for s in tight.series
            if s.priority > hm_mod.PRIORITY_SUITE_COUNTS}
    assert kept == {("benchrun_ttft_ms", "serving_workflow", "c=4"),
                    ("benchrun_p99_latency_ms", "serving_workflow", "c=4"),
                    ("benchrun_tflops", "gemm", "n=64,fp64")}
    assert tight.dropped_by_budget.get("primary", 0) == 0 and tight.dropped_by_budget["metric"] > 0
    # The gemm p99 (another suite) and the c=1 ttft (another case) are ordinary metrics.
    prio = {(s.name, dict(s.labels).get("suite"), dict(s.labels).get("case")): s.priority for s in full.series}
    assert prio[("benchrun_p99_latency_ms", "gemm", 'say "hi"\\now\nnext')] == hm_mod.PRIORITY_METRIC
    assert prio[("benchrun_ttft_ms", "serving_workflow", "c=1")] == hm_mod.PRIORITY_METRIC


def test_a_replicate_its_suite_judged_invalid_pushes_its_count_not_its_metrics(tmp_path: Path) -> None:
    # membw's arrays inside the cache measure cache bandwidth: before, the gauge benchrun_triad_gb_per_s
    # carried it under the name of memory bandwidth to dashboards and alert rules, with no word of it
    rd, status = make_run(tmp_path)
    for k, gbs in enumerate((300.0, 310.0, 12.0), start=1):  # r3 judged valid (arrays past the cache)
        doc = _doc("membw", k, "ok", [metric("triad_gb_per_s", gbs, "GB/s", "higher", case="threads=2")])
        doc["context"] = {"verdict": "invalid" if k < 3 else "valid",
                          "verdict_reasons": ["each array is 30.5 MiB, under 4x the L3 cache"] if k < 3 else []}
        atomic_write_json(rd / "structured" / f"{RUN_ID}_membw_r{k}.json", doc)
    hm = render(rd, status, BIG)
    rows = samples(hm.text)
    assert find(rows, "benchrun_triad_gb_per_s", suite="membw") == [12.0]
    assert find(rows, "benchrun_suite_invalid_replicates", suite="membw") == [2.0]
    assert find(rows, "benchrun_suite_replicates", suite="membw", status="ok") == [3.0]
    assert not find(rows, "benchrun_suite_invalid_replicates", suite="gemm")
    assert any("membw: 2 replicate(s) judged their own measurement invalid" in n for n in hm.notes)
    doc["context"] = {"verdict": "invalid", "verdict_reasons": []}  # every replicate invalid: no gauge at all
    atomic_write_json(rd / "structured" / f"{RUN_ID}_membw_r3.json", doc)
    rows = samples(render(rd, status, BIG).text)
    assert not find(rows, "benchrun_triad_gb_per_s") and find(rows, "benchrun_suite_invalid_replicates") == [3.0]


def test_a_serving_point_judged_invalid_beyond_its_request_count_pushes_its_count_not_its_metrics(tmp_path: Path) -> None:
    # review: a serving suite judges each load point (context.verdicts) and its replicate stays ok; a c=4
    # point with 31 % errors (its p99 among the failed requests) was pushed as benchrun_p99_latency_ms{case="c=4"}.
    # Only that point's rows leave; the other point, the sweep's capacity and the canary's few-request points stay
    from benchrun.loadgen.metrics import VerdictPolicy, verdict

    def judged(n: int, errors: int = 0) -> dict[str, Any]:
        v, why = verdict(load_model="closed_loop", offered_load=4, n_completed=n, n_errors=errors,
                         error_kinds={"http_500": errors} if errors else {}, stats={"achieved_concurrency": 4.0},
                         client={}, policy=VerdictPolicy())
        return {"verdict": v, "reasons": why}  # both invalid: 24 requests < 368 (the canary's), or errors too

    rd, status = make_run(tmp_path)
    for k, p99 in enumerate((5000.0, 40.0, 42.0), start=1):
        rows = [metric("p99_latency_ms", p99, "ms", "lower", case="c=4"), metric("ttft_ms", 20.0 + k, "ms", "lower", case="c=4"),
                metric("p99_latency_ms", 30.0 + k, "ms", "lower", case="c=1"),
                metric("capacity_at_slo", 1.0, "concurrency", "higher", case="sweep")]
        doc = _doc("serving_sweep", k, "ok", rows)
        doc["context"] = {"verdicts": {"c=1": judged(24), "c=4": judged(22, errors=10) if k == 1 else judged(24)}}
        atomic_write_json(rd / "structured" / f"{RUN_ID}_serving_sweep_r{k}.json", doc)
    hm = render(rd, status, BIG)
    rows = samples(hm.text)
    assert find(rows, "benchrun_p99_latency_ms", suite="serving_sweep", case="c=4") == [41.0]  # not 42.0 (with 5000)
    assert find(rows, "benchrun_ttft_ms", suite="serving_sweep", case="c=4") == [22.5]
    assert find(rows, "benchrun_p99_latency_ms", suite="serving_sweep", case="c=1") == [32.0]  # all three replicates
    assert find(rows, "benchrun_capacity_at_slo", suite="serving_sweep", case="sweep") == [1.0]
    assert find(rows, "benchrun_suite_invalid_points", suite="serving_sweep", case="c=4") == [1.0]
    assert not find(rows, "benchrun_suite_invalid_points", case="c=1")
    assert not find(rows, "benchrun_suite_invalid_replicates", suite="serving_sweep")
    assert find(rows, "benchrun_suite_replicates", suite="serving_sweep", status="ok") == [3.0]
    assert any("serving_sweep [c=4]: 1 replicate(s) judged their own measurement invalid (by the load generator)" in n
               for n in hm.notes)
    # the canary on a healthy machine: every point invalid only for its 24 requests, every figure pushed
    path = rd / "structured" / f"{RUN_ID}_serving_sweep_r1.json"
    doc = json.loads(path.read_text())
    doc["context"]["verdicts"]["c=4"] = judged(24)
    atomic_write_json(path, doc)
    rows = samples(render(rd, status, BIG).text)
    assert find(rows, "benchrun_p99_latency_ms", suite="serving_sweep", case="c=4") == [42.0]  # 5000, 40, 42
    assert not find(rows, "benchrun_suite_invalid_points") and not find(rows, "benchrun_suite_invalid_replicates")


def test_a_replicate_the_launcher_failed_after_it_wrote_ok_is_counted_failed_and_not_pushed(tmp_path: Path) -> None:
    # review: gemm r2 wrote an ok document and was then killed at its timeout; the launch record says failed.
    # It was pushed as ok (benchrun_suite_replicates ok 3) and its 4.0 was in the median (2.0 -> 1.5 now)
    rd, status = make_run(tmp_path)
    path = rd / "structured" / f"{RUN_ID}_launches.json"
    rows = json.loads(path.read_text())
    for r in rows:
        if r["suite"] == "gemm" and r["replicate"] == 2:
            r["status"] = "failed"
    atomic_write_json(path, rows)
    found = samples(render(rd, status, BIG).text)
    assert find(found, "benchrun_tflops", suite="gemm") == [1.5]
    assert find(found, "benchrun_suite_replicates", suite="gemm", status="ok") == [2.0]
    assert find(found, "benchrun_suite_replicates", suite="gemm", status="failed") == [1.0]
