"""No part of a URL's user:password@ in any message, condition, record, log line or metadata.

The URLs are the awkward forms: no scheme (``user:password@host:port``, which prometheus_client
accepts), an unencoded ``#``, ``/``, ``?`` or ``@`` in the password, and a percent-encoded one.
A parser that reads ``user`` as the scheme, or the ``#`` as the start of a fragment, finds no
credentials, and a redaction that trusts it shows them whole. Each password is checked by its
pieces too (the part before the ``#`` is as secret as the whole).
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import threading
import urllib.parse
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable, Iterator

import pytest

from benchrun import hotmetrics as hm_mod
from benchrun.errors import BenchrunError
from benchrun.fsio import atomic_write_json
from benchrun.hotmetrics import Budget, publish_run, push, render
from benchrun.urlsafe import redact

USER = "usrQzx"
# (id, URL with {scheme}, {host} to fill in, the password's pieces that must never be shown)
CASES = [
    ("no-scheme", "{noscheme}" + USER + ":NoSchemePw1@{host}", ["NoSchemePw1"]),
    ("hash", "{scheme}" + USER + ":HashLeft#HashRight@{host}", ["HashLeft", "HashRight"]),
    ("slash", "{scheme}" + USER + ":SlashLeft/SlashRight@{host}", ["SlashLeft", "SlashRight"]),
    ("question", "{scheme}" + USER + ":QueryLeft?QueryRight@{host}", ["QueryLeft", "QueryRight"]),
    ("at", "{scheme}" + USER + ":AtLeft@AtRight@{host}", ["AtLeft", "AtRight"]),
    ("encoded", "{scheme}" + USER + ":" + urllib.parse.quote("PctLeft#PctRight/x?y@z", safe="") + "@{host}",
     ["PctLeft", "PctRight"]),
]
IDS = [c[0] for c in CASES]
RUN_ID = "hot-20261130090000-abcdef12"
BIG = Budget(max_active_series=10_000, drop_dimensions=[])


def url_for(template: str, scheme: str, host: str) -> str:
    return template.format(scheme=scheme, noscheme="", host=host)


def assert_clean(texts: Iterable[Any], pieces: list[str]) -> None:
    """None of the password's pieces, nor the user name, in any of ``texts`` (dumped as JSON when not text)."""
    for text in texts:
        shown = text if isinstance(text, str) else json.dumps(text, default=str)
        for piece in [*pieces, USER]:
            assert piece not in shown, f"{piece!r} shown in: {shown[:600]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def make_run():
    from test_hotmetrics import make_run as _make_run

    return _make_run


# -- the Pushgateway ---------------------------------------------------------------------------


@pytest.mark.parametrize("template,pieces", [c[1:] for c in CASES], ids=IDS)
def test_a_pushgateway_password_is_never_shown(template, pieces, tmp_path: Path, make_run, monkeypatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """publish_run, push, delete_groups, group_url and `benchrun delete`'s note, with nothing listening:
    not pushed, said, the textfile written, and no piece of the password anywhere."""
    from benchrun.runctl import delete_run

    url = url_for(template, "http://", f"127.0.0.1:{_free_port()}")
    rd, status = make_run(tmp_path)
    shown: list[Any] = []
    with caplog.at_level(logging.DEBUG):
        hm, pub = publish_run(rd, status, BIG, home=tmp_path, url=url)
        assert pub.pushed_to is None and pub.push_error and pub.textfile.is_file()
        shown += [pub.note, pub.push_error, hm.notes]
        with pytest.raises(BenchrunError) as pushed:
            push(render(rd, status, BIG), url, timeout=2)
        with pytest.raises(BenchrunError) as deleted:
            hm_mod.delete_groups(url, RUN_ID, timeout=2)
        shown += [str(pushed.value), str(deleted.value), hm_mod.group_url(url, RUN_ID)]
        atomic_write_json(rd / "status.json", {**status, "phase": "Succeeded"})
        monkeypatch.setenv(hm_mod.PUSHGATEWAY_ENV, url)
        out = delete_run(RUN_ID, home=tmp_path)
        shown += [out.kept, out.removed]
        assert any("Pushgateway" in k and "not deleted" in k for k in out.kept)
    shown += [caplog.text]
    assert_clean(shown, pieces)


class _GarbageServer:
    """A TCP server that answers every connection with a line that is not HTTP (http.client's BadStatusLine,
    an HTTPException and not an OSError)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.recv(65536)
                    conn.sendall(b"not http at all\r\n\r\n")
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def garbage_server() -> Iterator[_GarbageServer]:
    server = _GarbageServer()
    yield server
    server.close()


def test_a_gateway_that_does_not_speak_http_is_said_not_raised(tmp_path: Path, make_run, garbage_server) -> None:
    """http.client's own errors (BadStatusLine, InvalidURL: HTTPException, not OSError) went
    uncaught through gateway_groups, push and delete_groups and failed the hot_metrics step."""
    url = f"http://{USER}:Garbage%23Pw@127.0.0.1:{garbage_server.port}"
    rd, status = make_run(tmp_path)
    hm, pub = publish_run(rd, status, BIG, home=tmp_path, url=url)
    assert pub.pushed_to is None and "is unreachable" in pub.push_error and pub.textfile.is_file()
    with pytest.raises(BenchrunError, match="is unreachable"):
        push(hm, url, timeout=2)
    with pytest.raises(BenchrunError, match="is unreachable"):
        hm_mod.delete_groups(url, RUN_ID, timeout=2)
    assert_clean([pub.note], ["Garbage"])


@pytest.mark.slow
def test_the_hot_metrics_asset_with_an_unusable_gateway_url_is_a_condition(bench_home: Path, monkeypatch) -> None:
    """With `http://user:S3cret#PW@host:port` the hot_metrics step failed on http.client.InvalidURL
    and its STEP_FAILURE showed part of the password; now: the step succeeds, HotMetricsPushed is
    False (PushgatewayUnavailable), and status.json, the events and the metadata show none of it."""
    import dagster as dg

    from bench_assets.partitions import benchmark_run_partitions
    from bench_assets.publish_assets import hot_metrics
    from benchrun.spec import load_spec_bytes
    from test_provenance import RUN_ID as PROV_RUN_ID, make_sealed_run

    raw = (Path(__file__).resolve().parent.parent / "specs/local/canary.yaml").read_bytes()
    rd = make_sealed_run(bench_home, spec_bytes=raw, spec_digest=load_spec_bytes(raw, "canary.yaml").spec_digest)
    monkeypatch.setenv(hm_mod.PUSHGATEWAY_ENV, f"http://{USER}:S3cretLeft#PWright@127.0.0.1:{_free_port()}")
    run_evidence = dg.AssetSpec("run_evidence", partitions_def=benchmark_run_partitions)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(benchmark_run_partitions.name, [PROV_RUN_ID])
        result = dg.materialize([run_evidence, hot_metrics], instance=instance, partition_key=PROV_RUN_ID,
                                raise_on_error=False)
        events = [str(e) for e in result.all_events]
        logs = [str(r) for r in instance.all_logs(result.run_id)]
    assert result.success, "\n".join(e for e in events if "FAILURE" in e)[:3000]
    cond = {c["type"]: c for c in rd.read_status()["conditions"]}["HotMetricsPushed"]
    assert (cond["status"], cond["reason"]) == ("False", "PushgatewayUnavailable")
    meta = {k: v.value for k, v in result.asset_materializations_for_node("hot_metrics")[0].metadata.items()}
    assert meta["pushed_to"] == "not pushed"
    assert_clean([(rd.path / "status.json").read_text(), meta, *events, *logs], ["S3cretLeft", "PWright"])


# -- Prometheus --------------------------------------------------------------------------------


@pytest.mark.parametrize("template,pieces", [c[1:] for c in CASES], ids=IDS)
def test_a_prometheus_password_is_never_in_a_result_document(template, pieces, tmp_path: Path, monkeypatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """BENCHRUN_PROMETHEUS_URL went whole into configured_url's ValueError, and from there into every
    replicate's telemetry.prometheus.reason (sealed and signed); `#` in the password made
    range_queries hit UnboundLocalError, so the replicate's Prometheus record was lost silently."""
    from benchrun.launch.local import LocalLauncher
    from benchrun.plan import Invocation, base_env
    from benchrun.rundir import RunDir
    from benchrun.telemetry.hook import RATE_ENV, pod_prometheus
    from benchrun.telemetry.prometheus import URL_ENV, configured_url, query_replicate

    url = url_for(template, "http://", f"127.0.0.1:{_free_port()}")
    monkeypatch.setenv(URL_ENV, url)
    run_id = "t-20260101000000-abcdef12"
    rd = RunDir(tmp_path, run_id).create()
    shown: list[Any] = []
    with caplog.at_level(logging.DEBUG):
        try:
            configured_url()
        except ValueError as exc:
            shown.append(str(exc))
        env = {**base_env(), "BENCHRUN_RUN_ID": run_id, "BENCHRUN_RUN_DIR": str(rd.path), "BENCHRUN_SUITE": "s",
               "BENCHRUN_REPLICATE": "1", RATE_ENV: "5"}
        code = ("from benchrun.suites._runtime import main\n"
                "main(lambda ctx: ctx.add_metric('answer', 42.0, 'units', 'higher'))\n")
        inv = Invocation(run_id, "micro", "s", 1, "bc-x", (sys.executable, "-c", code), env, 60.0)
        res = LocalLauncher().launch(inv, rd.path)
        assert res.status == "ok"
        doc_text = (rd.path / res.result).read_text()
        prom = json.loads(doc_text)["telemetry"]["prometheus"]
        assert prom["status"] == "unavailable" and prom["reason"]
        # the raw URL straight to the query (documented never to raise): unavailable, with a reason
        record = query_replicate(url, inv, rd.path, 1.0e9, 1.0e9 + 5, node_name="n")
        assert record["status"] == "unavailable" and record["reason"]
        pod = pod_prometheus(inv, rd.path, {"node_name": "n", "container_started_utc": "2026-01-01T00:00:00Z",
                                            "container_finished_utc": "2026-01-01T00:00:05Z"})
        assert pod is not None and pod["status"] == "unavailable"
        shown += [doc_text, record, pod, (rd.path / res.result).read_text()]
    shown += [caplog.text]
    assert_clean(shown, pieces)


# -- the load generator, the S3 settings and preflight ------------------------------------------


@pytest.mark.parametrize("template,pieces", [c[1:] for c in CASES], ids=IDS)
def test_the_other_url_settings_never_show_a_password(template, pieces, tmp_path: Path, monkeypatch) -> None:
    """The serving endpoint and --server-metrics (refused before anything echoes them), the shared
    state and load-pod store URIs, the S3 endpoint in a store error, and preflight's checks."""
    import botocore.exceptions as bex

    from benchrun import preflight, sharedstate
    from benchrun.loadgen.endpoint import Endpoint, EndpointError
    from benchrun.loadgen.loadpods import LoadPods
    from benchrun.loadgen.runner import LoadPoint, SweepConfig
    from benchrun.loadgen.workload import parse_mix
    from benchrun.store.s3 import S3Store

    http_url = url_for(template, "http://", "127.0.0.1:8000")
    s3_url = url_for(template, "s3://", "bucket/prefix")
    shown: list[Any] = []
    with pytest.raises(EndpointError) as ep:
        Endpoint.from_url(http_url)
    with pytest.raises(EndpointError) as ep_ftp:
        Endpoint.from_url(url_for(template, "ftp://", "prom:9090"))
    shown += [str(ep.value), str(ep_ftp.value)]
    cfg = SweepConfig(url="http://127.0.0.1:8000", model="m", mix=tuple(parse_mix("16/8")),
                      points=(LoadPoint("closed_loop", 1),), requests_per_point=1, server_metrics_url=http_url + "/metrics")
    with pytest.raises(BenchrunError) as sm:
        cfg.check()
    shown.append(str(sm.value))

    monkeypatch.setenv(sharedstate.ENV, s3_url)
    with pytest.raises(BenchrunError) as ss:
        sharedstate.shared_state()
    shown.append(str(ss.value))
    shown.append(preflight._store_check())
    shown.append(preflight._outputs_check(SimpleNamespace(run_volume_claim=None, outputs_uri=s3_url, env_secret=None),
                                          None, "ns"))
    with pytest.raises(BenchrunError) as lp:
        LoadPods(0, 2, s3_url, RUN_ID, "uid", 5.0, client=object())
    shown.append(str(lp.value))

    store = S3Store("bucket", "", endpoint_url=http_url, client=object())

    def unreachable() -> None:
        raise bex.EndpointConnectionError(endpoint_url="http://127.0.0.1:9")

    with pytest.raises(BenchrunError) as s3:
        store._call("put", unreachable)
    shown.append(str(s3.value))
    assert_clean([str(c) if not isinstance(c, str) else c for c in shown], pieces)


def test_redact_fails_closed() -> None:
    assert redact("http://u:p@h:1/x?q#f") == "http://h:1/x?q#f"
    assert redact("u:p@h:9091") == "h:9091"
    assert redact("http://u:a#b@h:1") == "http://<redacted>"
    assert redact("http://u:a/b@h:1/x") == "http://<redacted>"
    assert redact("http://u:a@b@h:1") == "http://h:1"
    assert redact("u:a?b@h") == "<redacted>"
    assert redact("http://h:1/plain") == "http://h:1/plain"


def test_preflight_does_not_echo_the_s3_endpoints_credentials(monkeypatch) -> None:
    # security review: the artifact-store check printed boto3's message whole, which names the endpoint
    # it could not reach (BENCHRUN_S3_ENDPOINT_URL, user:password@ and all)
    from benchrun import preflight
    from benchrun.urlsafe import redact_in

    monkeypatch.setenv("BENCHRUN_SHARED_STATE", "s3://bucket/benchrun")
    monkeypatch.setenv("BENCHRUN_S3_ENDPOINT_URL", "http://minio:s3cr3t-pw@127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    check = preflight._store_check()
    assert check.ok is False and "s3cr3t" not in str(check) and "127.0.0.1:9" in str(check), str(check)
    assert redact_in('Could not connect to "http://u:p@h:9/b"') == 'Could not connect to "http://<redacted>@h:9/b"'
    # the shared state's own errors quoted botocore's the same way
    from benchrun.sharedstate import shared_state

    with pytest.raises(BenchrunError) as caught:
        shared_state().pull_tree(Path("/nonexistent-home"), "runs/x/")
    assert "s3cr3t" not in str(caught.value) and "EndpointConnectionError" in str(caught.value), str(caught.value)
