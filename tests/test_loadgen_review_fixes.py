"""Reviewed defects of the load generator, each against the reference server on a free loopback port:
output tokens counted by the tokenizer when the server sends no usage (several tokens a chunk),
session turns never sent after a failed turn, numpy's percentile for a distribution that censors
no failure, one open-loop schedule whatever ``--workers``, censored percentiles marked by the CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from benchrun.loadgen.content import ContentConfig, SessionShape
from benchrun.loadgen.metrics import PERCENTILES, SLO
from benchrun.loadgen.refserver import Dialect, PerfModel, ServerProcess
from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep
from benchrun.loadgen.schedule import dealt_arrivals
from benchrun.loadgen.workload import VOCABULARY, parse_mix

sys.path.insert(0, str(Path(__file__).resolve().parent))

FAST = PerfModel(prefill_ms_per_token=0.001, decode_base_ms=0.3, decode_ms_per_seq=0.01)


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory) -> str:
    """A word-level tokenizer: every vocabulary word and the server's ``syn`` one token."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(["<unk>", *sorted(set(VOCABULARY) | {"syn"})])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def _cfg(srv: ServerProcess, *, mix: str = "8/17", conc: int = 2, n: int = 8, rate: float | None = None, **kw) -> SweepConfig:
    point = LoadPoint("open_loop", rate, "poisson", 1.0) if rate else LoadPoint("closed_loop", conc)
    kw.setdefault("warmup", 0)
    return SweepConfig(url=srv.url, model="m", api="completions", mix=tuple(parse_mix(mix)), points=(point,),
                       requests_per_point=n, seed=3, **kw)


# -- 1. output tokens without usage: the tokenizer's count of the streamed text ---------------------


@pytest.fixture(scope="module")
def chunky():
    """vLLM with --stream-interval 4: 17 tokens come in chunks of 1, 4, 4, 4, 4; no usage asked."""
    with ServerProcess(FAST, dialect=Dialect(stream_interval=4)) as srv:
        yield srv


def test_the_reference_server_streams_several_tokens_a_chunk(chunky):
    res = run_sweep(_cfg(chunky, n=4))  # usage asked: the counts are the server's
    for r in res.rows:
        assert r["error"] is None and r["chunk_count"] == 5 and r["output_tokens"] == 17
        assert r["token_count_source"] == "usage" and r["chunk_token_method"] == "usage_total_spread"


def test_without_usage_a_tokenizer_counts_the_streamed_text(chunky, word_tokenizer):
    res = run_sweep(_cfg(chunky, include_usage=False, content=ContentConfig(tokenizer=word_tokenizer)))
    assert len(res.rows) == 8
    for r in res.rows:
        assert r["error"] is None and r["usage_output_tokens"] is None and r["chunk_count"] == 5
        assert r["output_tokens"] == 17 and r["token_count_source"] == "tokenizer"  # chunks read 5
        assert r["chunk_token_method"] == "tokenizer_total_spread" and r["chunk_output_tokens"] == 17
        assert r["decode_ms_per_token"] == pytest.approx((r["e2e_ms"] - r["ttft_ms"]) / 16)
        assert len(r["token_gaps_ms"]) == 16  # the gaps agree with the count: 4 per chunk of 4
    s = res.summaries[0]
    assert s["output_tokens_total"] == 8 * 17
    assert s["tokens_per_second"] == pytest.approx(8 * 17 / s["window_s"])
    assert s["n_output_tokens_from_chunks"] == 0 and s["output_tokens_note"] is None


def test_without_usage_or_tokenizer_chunks_still_count_and_say_so(chunky):
    res = run_sweep(_cfg(chunky, include_usage=False, n=4))
    assert {(r["output_tokens"], r["token_count_source"], r["chunk_token_method"]) for r in res.rows} == \
        {(5, "chunks", "one_per_chunk")}
    s = res.summaries[0]
    assert s["n_output_tokens_from_chunks"] == 4 and "one token per streamed chunk" in s["output_tokens_note"]


# -- 2. a failed session turn: the planned turns never sent are counted ------------------------------


def test_planned_turns_never_sent_are_counted_and_not_good(word_tokenizer):
    with ServerProcess(FAST, fault="http500", fault_every=3) as srv:
        res = run_sweep(_cfg(srv, mix="6/4", conc=1, n=20, slo=SLO(e2e_ms=60_000),
                             content=ContentConfig(sessions=SessionShape(turns=4))))
    s = res.summaries[0]
    assert s["n_errors"] > 0 and s["turns_not_sent"] > 0
    # every planned turn is a row or counted as not sent; a failed turn's session sent no later turn
    assert len(res.rows) + s["turns_not_sent"] == 20
    by_session: dict[str, list[dict]] = {}
    for r in res.rows:
        by_session.setdefault(r["session_id"], []).append(r)
    unsent = 0
    for rows in by_session.values():
        rows.sort(key=lambda r: r["turn"])
        failed = [r["turn"] for r in rows if r["error"] is not None]
        if failed:
            assert failed == [rows[-1]["turn"]]
            planned = min(4, 20 - 4 * int(rows[0]["session_id"].rsplit("-s", 1)[1]))
            unsent += planned - rows[-1]["turn"]
    assert s["turns_not_sent"] == unsent
    # attainment over the planned turns: the unsent ones are not good
    assert s["n_good"] == s["n_requests"] and s["slo_attainment"] == pytest.approx(s["n_good"] / 20)
    assert sum(b["turns_not_sent"] for b in res.summaries[1:]) == s["turns_not_sent"]


# -- 3. a distribution that censors no failure keeps numpy's linear percentile -----------------------


def test_ttft_keeps_numpys_percentile_when_every_failure_came_after_its_first_token():
    with ServerProcess(FAST, fault="close_midstream", fault_every=4) as srv:
        res = run_sweep(_cfg(srv, mix="8/8", conc=2, n=24, request_timeout_s=10.0))
    errs = [r for r in res.rows if r["error"] is not None]
    assert errs and all(r["first_token_mono_ns"] is not None for r in errs)
    ttft = [r["ttft_ms"] for r in res.rows if r["error"] is None] + \
        [(r["first_token_mono_ns"] - r["send_mono_ns"]) / 1e6 for r in errs]
    s = res.summaries[0]
    for name, q in PERCENTILES.items():
        assert s[f"ttft_ms_{name}"] == pytest.approx(float(np.percentile(ttft, q)), rel=1e-12), name
    assert "ttft_ms" not in s["percentiles_censored"]
    assert s["percentiles_censored"]["e2e_ms"]  # still censored where failures have no value


def test_decode_keeps_numpys_percentile_when_every_failure_came_before_its_first_token():
    with ServerProcess(FAST, fault="http500", fault_every=4) as srv:
        res = run_sweep(_cfg(srv, mix="8/8", conc=2, n=24))
    errs = [r for r in res.rows if r["error"] is not None]
    assert errs and all(r["first_token_mono_ns"] is None for r in errs)
    decode = [r["decode_ms_per_token"] for r in res.rows if r["error"] is None]
    s = res.summaries[0]
    for name, q in PERCENTILES.items():
        assert s[f"decode_ms_per_token_{name}"] == pytest.approx(float(np.percentile(decode, q)), rel=1e-12), name


# -- 4. one open-loop schedule whatever the worker count ----------------------------------------------


@pytest.fixture(scope="module")
def server():
    with ServerProcess(FAST) as srv:
        yield srv


def _offsets(res) -> list[float]:
    t = sorted(r["scheduled_mono_ns"] for r in res.rows)
    return [(x - t[0]) / 1e9 for x in t]


def test_the_measured_open_loop_schedule_is_the_same_with_one_worker_or_two(server):
    got = {w: _offsets(run_sweep(_cfg(server, mix="8/4", n=12, rate=150.0, workers=w))) for w in (1, 2)}
    want = dealt_arrivals(LoadPoint("open_loop", 150.0, "poisson", 1.0), 12, None, 3, 0, 0, 1, 1)
    assert got[1] == pytest.approx(want, abs=2e-9)
    assert got[2] == pytest.approx(want, abs=2e-9)
    assert want[-1] == pytest.approx(11 / 150.0)  # the first at 0, the last at (n - 1)/rate


# -- the CLI marks a censored percentile as a lower bound ---------------------------------------------


def test_the_cli_marks_censored_percentiles_and_writes_turns_not_sent(tmp_path, monkeypatch, capsys):
    from helpers import cli_in_process

    with ServerProcess(FAST, fault="http500", fault_every=2) as srv:
        code, out, err = cli_in_process(
            ["loadgen", "--url", srv.url, "--model", "m", "--mix", "8/4", "--concurrency", "1", "--requests", "12",
             "--warmup", "0", "--session-turns", "3", "--slo", "e2e_ms=60000", "--out", str(tmp_path), "--allow-invalid"],
            monkeypatch, capsys)
    assert code == 0, err
    doc = json.loads(next((tmp_path / "structured").glob("*_loadgen_summary.json")).read_text())
    s = next(p for p in doc["points"] if p["bucket"] == "all")
    assert s["turns_not_sent"] > 0 and "p99" in s["percentiles_censored"]["e2e_ms"]
    assert s["slo_attainment"] == pytest.approx(s["n_good"] / 12)
    assert f"e2e p99 ≥{s['e2e_ms_p99']:.1f} ms" in err  # the progress line
    assert f"≥{s['e2e_ms_p99']:.1f}" in out  # the table


def test_a_tokenizer_count_below_the_chunk_count_keeps_the_chunks():
    """Found in the re-review: a tokenizer that merges the model's pieces gave output_tokens below the
    number of chunks with text, each of which carries a token at least (5 chunks read 2 tokens), and
    decode_ms_per_token disagreed with the per-chunk gaps. The chunks' count is the floor; a count above
    it is spread over them (the first chunk one token)."""
    from benchrun.loadgen.client import Outcome
    from benchrun.loadgen.records import tokenizer_count

    class Words:
        def count(self, text: str) -> int:
            return len(text.split())

    out = Outcome()
    out.generated, out.chunk_tokens = ["Hel", "lo", " wor", "ld", "!"], [1] * 5
    assert tokenizer_count(out, Words()) == 5 and out.chunk_tokens == [1] * 5  # was: 2
    out.generated, out.chunk_tokens = ["a", " b c d e", " f g h i", " j k l m", " n o p q"], [1] * 5
    assert tokenizer_count(out, Words()) == 17 and out.chunk_tokens == [1, 4, 4, 4, 4]
    assert out.chunk_token_method == "tokenizer_total_spread"


def test_a_tokenizer_whose_count_never_grows_is_an_error_not_a_hang(tmp_path):
    """Found while writing the test above: a tokenizer that reads any text as one token (no
    pre-tokenizer) made prompt building loop forever; it is a TokenizerError naming the tokenizer."""
    from tokenizers import Tokenizer, models

    from benchrun.loadgen.tokens import TokenizerError, load_counter

    tok = Tokenizer(models.WordLevel(vocab={"<unk>": 0}, unk_token="<unk>"))
    path = tmp_path / "one.json"
    tok.save(str(path))
    with pytest.raises(TokenizerError, match="fewer than the 8 asked"):
        load_counter(str(path)).build(8, np.random.default_rng(0))
