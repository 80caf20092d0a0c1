"""Issue 29 part A: request content (datasets, a local tokenizer's exact lengths, shared prefixes,
multi-turn sessions), each checked against what the reference server itself logged it received.

One reference server for the module (a subprocess, ``--record-bodies`` and a 4-word-block
prefix cache); each sweep is a few dozen tiny requests. The tokenizers are built here from the
load generator's own vocabulary (a word-level one, where a word is a token, and a small BPE
one trained locally, where many words are several tokens); nothing is downloaded.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from benchrun.errors import BenchrunError
from benchrun.loadgen.content import ContentConfig, SessionShape, SharedPrefix
from benchrun.loadgen.dataset import DatasetError, load_dataset
from benchrun.loadgen.metrics import VerdictPolicy
from benchrun.loadgen.refserver import Dialect, PerfModel, ServerProcess
from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep
from benchrun.loadgen.tokens import HFTokenizer, TokenizerError, WordCounter
from benchrun.loadgen.workload import VOCABULARY, parse_mix, split_by

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "specs/datasets/benchrun-conversations.jsonl"
FAST = PerfModel(prefill_ms_per_token=0.001, decode_base_ms=0.3, decode_ms_per_seq=0.01)


def _word_tokenizer(d: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = sorted({w.strip(".,?:;!") .lower() for line in SHIPPED.read_text().splitlines()
                    for t in json.loads(line)["conversations"] for w in t["value"].split()} | set(VOCABULARY) | {"syn"})
    vocab = {t: i for i, t in enumerate(["<unk>", *words])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = d / "word" / "tokenizer.json"
    path.parent.mkdir()
    tok.save(str(path))
    return path.parent


def _bpe_tokenizer(d: Path) -> Path:
    """A byte-level BPE with a small vocabulary: common words are one token, others several."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    rng = np.random.default_rng(0)
    # a skewed corpus: the first words are frequent (whole tokens), the rest stay split
    weights = np.linspace(3.0, 0.05, len(VOCABULARY))
    corpus = [" ".join(rng.choice(VOCABULARY, size=40, p=weights / weights.sum())) for _ in range(300)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = d / "bpe.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def toks(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    return {"word": str(_word_tokenizer(d)), "bpe": str(_bpe_tokenizer(d))}


@pytest.fixture(scope="module")
def server():
    srv = ServerProcess(FAST, record_bodies=True, dialect=Dialect(prefix_cache_block=4))
    try:
        yield srv
    finally:
        srv.stop()


def _log(srv: ServerProcess, ids: list[str]) -> dict[str, dict]:
    with urllib.request.urlopen(srv.url + "/debug/requests", timeout=10) as r:
        recs = {x["request_id"]: x for x in json.load(r)["requests"]}
    return {i: recs[i] for i in ids}


def _sweep(srv, content, *, api="completions", mix="8/4", conc=2, n=12, seed=0, rate=None, arrival="poisson", **kw):
    point = LoadPoint("open_loop", rate, arrival, 0.5 if arrival == "gamma" else 1.0) if rate else LoadPoint("closed_loop", conc)
    cfg = SweepConfig(url=srv.url, model="m", api=api, mix=tuple(parse_mix(mix)), points=(point,),
                      requests_per_point=n, warmup=0, seed=seed, content=content, **kw)
    res = run_sweep(cfg)
    assert [r["error"] for r in res.rows] == [None] * n
    return res, _log(srv, [r["request_id"] for r in res.rows])


def _prompt(rec: dict) -> str:
    got = rec["received"]
    return got["prompt"] if "prompt" in got else " ".join(m["content"] for m in got["messages"])


# -- tokenizer ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_prompts_are_built_to_exact_token_lengths(toks, kind):
    tok = HFTokenizer(toks[kind])
    rng = np.random.default_rng(1)
    for n in (1, 2, 7, 33, 128, 301):
        text = tok.build(n, rng)
        assert tok.count(text) == n, (n, text)
    prefix = tok.build(20, rng)
    suffix = tok.build(9, rng, after=prefix)
    assert tok.count(prefix + " " + suffix) == 29
    if kind == "bpe":  # the BPE really splits words: exact lengths are not word counts
        assert len(text.split()) < 301


def test_a_tokenizer_that_cannot_be_read_is_named(tmp_path):
    with pytest.raises(TokenizerError, match="no tokenizer.json"):
        HFTokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=r"tokenizer.json: cannot be read"):
        HFTokenizer(tmp_path)


def test_bpe_prompts_reach_the_server_at_exact_length_and_its_word_count_mismatches_are_counted(server, toks):
    res, log = _sweep(server, ContentConfig(tokenizer=toks["bpe"]), mix="24/4", n=10)
    tok = HFTokenizer(toks["bpe"])
    for r in res.rows:
        received = _prompt(log[r["request_id"]])
        assert tok.count(received) == 24 == r["input_tokens_requested"]
        # the reference server counts words; its usage agrees only where words are tokens
        assert r["usage_input_tokens"] == len(received.split())
    mismatched = sum(1 for r in res.rows if r["usage_input_tokens"] != 24)
    assert mismatched > 0 and res.summaries[0]["input_token_mismatches"] == mismatched
    assert res.summaries[0]["usage_compared"] == 10
    assert res.context["content"]["tokenizer"].startswith("tokenizers:")


# -- datasets -------------------------------------------------------------------------------


def _write_variants(d: Path) -> dict[str, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    conv = [json.loads(x) for x in SHIPPED.read_text().splitlines()]
    out = {"sharegpt_jsonl": SHIPPED}
    (d / "conv.json").write_text(json.dumps(conv))
    out["sharegpt_json"] = d / "conv.json"
    rows = [{"prompt": c["conversations"][0]["value"], "output_tokens": 3 + i % 5} for i, c in enumerate(conv)]
    (d / "generic.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out["jsonl"] = d / "generic.jsonl"
    pq.write_table(pa.Table.from_pylist(rows), d / "generic.parquet")
    out["parquet"] = d / "generic.parquet"
    return out


def test_every_layout_reads_the_same_prompts(tmp_path):
    files = _write_variants(tmp_path)
    firsts = {k: [e.prompts[0] for e in load_dataset(p).entries] for k, p in files.items()}
    assert len({tuple(v) for v in firsts.values()}) == 1 and len(firsts["jsonl"]) == 24
    assert load_dataset(files["sharegpt_jsonl"]).format == "sharegpt"
    assert load_dataset(files["parquet"]).format == "parquet"
    gen = load_dataset(files["jsonl"])
    assert gen.format == "jsonl" and [e.output_tokens for e in gen.entries][:3] == [3, 4, 5]
    multi = load_dataset(files["sharegpt_json"]).entries[0]
    assert len(multi.prompts) == 2 and len(multi.replies) == 2


@pytest.mark.parametrize("text, fmt, match", [
    ('{"prompt": "a"}\nnot json\n', "auto", r"bad.jsonl:2: not JSON"),
    ('{"text": "a"}\n', "jsonl", r"bad.jsonl:1: needs a string 'prompt'"),
    ('{"prompt": "a", "output_tokens": -2}\n', "jsonl", "output_tokens must be a positive integer"),
    ('{"prompt": "  "}\n', "jsonl", "no usable entry"),
    ('{"conversations": [{"from": "gpt", "value": "hi"}]}\n', "sharegpt", "no usable entry"),
    ('{"prompt": "a"}\n', "csv", "format 'csv' is not one of"),
])
def test_a_bad_dataset_is_named_with_its_line_and_the_fix(tmp_path, text, fmt, match):
    p = tmp_path / "bad.jsonl"
    p.write_text(text)
    with pytest.raises(DatasetError, match=match):
        load_dataset(p, fmt)


def test_a_changed_dataset_is_refused_against_its_pinned_sha256(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"prompt": "one two"}\n')
    pinned = load_dataset(p).sha256
    p.write_text('{"prompt": "one three"}\n')
    with pytest.raises(DatasetError, match="differs from the pinned"):
        load_dataset(p, expect_sha256=pinned)
    with pytest.raises(BenchrunError, match="differs from the pinned"):
        SweepConfig(url="http://127.0.0.1:9", model="m", mix=tuple(parse_mix("8/4")), points=(LoadPoint("closed_loop", 1),),
                    requests_per_point=1, content=ContentConfig(dataset=str(p), dataset_sha256=pinned)).check()


def test_dataset_prompts_reach_the_server_seeded_and_counted(server, toks, tmp_path):
    files = _write_variants(tmp_path)
    entries = load_dataset(files["jsonl"]).entries
    content = ContentConfig(dataset=str(files["jsonl"]), tokenizer=toks["word"])
    res, log = _sweep(server, content, n=30, seed=3)
    for r in res.rows:
        e = entries[r["dataset_index"]]
        rec = log[r["request_id"]]
        assert rec["received"]["prompt"] == e.prompts[0]
        assert rec["max_tokens"] == e.output_tokens == r["output_tokens_requested"]
        assert r["bucket"] == "dataset"
    # with a word-level tokenizer the server's count (words) and ours agree: no mismatch
    assert res.summaries[0]["input_token_mismatches"] == 0 and res.summaries[0]["output_token_mismatches"] == 0
    assert [s["bucket"] for s in res.summaries] == ["all", "dataset"]
    # a seeded permutation: 24 entries, each once, before any repeats
    order = [r["dataset_index"] for r in sorted(res.rows, key=lambda r: int(r["request_id"].rsplit("-", 1)[1]))]
    assert sorted(order[:24]) == list(range(24))
    again, _ = _sweep(server, content, n=30, seed=3)
    other, _ = _sweep(server, content, n=30, seed=4)
    key = lambda rr: [r["dataset_index"] for r in sorted(rr.rows, key=lambda r: int(r["request_id"].rsplit("-", 1)[1]))]
    assert key(again) == order and key(other) != order
    assert res.context["content"]["dataset"]["entries"] == 24


def test_sharegpt_output_lengths_come_from_the_replies(server, toks):
    res, log = _sweep(server, ContentConfig(dataset=str(SHIPPED), tokenizer=toks["word"]), n=8)
    tok = HFTokenizer(toks["word"])
    entries = load_dataset(SHIPPED).entries
    for r in res.rows:
        assert r["output_tokens_requested"] == tok.count(entries[r["dataset_index"]].replies[0])
        assert log[r["request_id"]]["max_tokens"] == r["output_tokens_requested"]


# -- shared prefixes ------------------------------------------------------------------------


def test_shared_prefix_prompts_share_their_prefixes_and_the_cache_hit_rate_is_the_servers(server):
    sp = SharedPrefix(prefixes=2, suffixes=3, prefix_tokens=32)
    res, log = _sweep(server, ContentConfig(shared_prefix=sp), mix="8/4", n=24, conc=3, seed=11)
    prompts = {r["request_id"]: log[r["request_id"]]["received"]["prompt"].split() for r in res.rows}
    prefixes = {tuple(p[:32]) for p in prompts.values()}
    assert len(prefixes) == 2
    for r in res.rows:
        words = prompts[r["request_id"]]
        assert len(words) == 40 == r["input_tokens_requested"] == r["usage_input_tokens"]
        assert r["prefix_id"] in (0, 1)
    by_prefix: dict[tuple, set] = {}
    for p in prompts.values():
        by_prefix.setdefault(tuple(p[:32]), set()).add(tuple(p[32:]))
    assert all(len(s) <= 3 for s in by_prefix.values())
    # the hit rate in the summary is the server's own: its cached tokens over its prompt tokens
    recs = [log[r["request_id"]] for r in res.rows]
    want = sum(x["cached_tokens"] for x in recs) / sum(x["prompt_tokens"] for x in recs)
    assert res.summaries[0]["prefix_cache_hit_rate"] == pytest.approx(want)
    assert want > 0.5  # 32 of 40 words are shared after each prefix's first request
    # prefixes depend on the seed only: another point (another worker stream) sees the same
    res2, log2 = _sweep(server, ContentConfig(shared_prefix=sp), mix="8/4", n=6, conc=1, seed=11)
    assert {tuple(log2[r["request_id"]]["received"]["prompt"].split()[:32]) for r in res2.rows} <= prefixes


# -- sessions -------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_sessions_carry_history_in_order_with_think_time(server, api):
    think = 0.03
    res, log = _sweep(server, ContentConfig(sessions=SessionShape(turns=3, think_time_s=think)), api=api,
                      mix="6/5", n=10, conc=2)
    sessions: dict[str, list[dict]] = {}
    for r in res.rows:
        sessions.setdefault(r["session_id"], []).append(r)
    assert sorted(len(v) for v in sessions.values()) == [1, 3, 3, 3]  # 10 turns: 3 + 3 + 3 + 1
    for rows in sessions.values():
        rows.sort(key=lambda r: r["turn"])
        assert [r["turn"] for r in rows] == list(range(1, len(rows) + 1))
        users: list[str] = []
        for k, r in enumerate(rows):
            rec = log[r["request_id"]]
            if api == "chat":
                msgs = rec["received"]["messages"]
                assert [m["role"] for m in msgs] == ["user", "assistant"] * k + ["user"]
                # the history is what was sent before, with the server's own replies
                assert [m["content"] for m in msgs[0:-1:2]] == users
                assert all(m["content"] == " syn" * 5 for m in msgs[1::2])
                users.append(msgs[-1]["content"])
            else:
                parts = rec["received"]["prompt"].split("\n")
                assert len(parts) == 2 * k + 1 and parts[0:-1:2] == users
                users.append(parts[-1])
            assert len(users[-1].split()) == 6
            # what we counted equals the server's count, turn after turn, as the history grows
            assert r["input_tokens_requested"] == rec["prompt_tokens"] == 6 * (k + 1) + 5 * k
            if k:
                prev = log[rows[k - 1]["request_id"]]
                # sent after the previous reply ended and the think time, as the server saw it: its
                # last_token_ns is stamped after its socket write returned, so a server process
                # descheduled there stamps it after the client already read the reply (seen: 2.3 ms
                # on a loaded machine); 5 ms of slack. The client's own clocks are checked exactly below.
                assert rec["arrival_ns"] - prev["last_token_ns"] >= (think - 0.005) * 1e9
                assert r["scheduled_mono_ns"] >= rows[k - 1]["end_mono_ns"] + think * 1e9 - 1
    s = res.summaries[0]
    assert set(s["ttft_ms_p50_by_turn"]) == {"1", "2", "3"} and s["sessions"] == 4
    assert s["input_token_mismatches"] == 0
    # a later turn's prompt starts with the earlier turns: the server's prefix cache hits it
    assert s["prefix_cache_hit_rate"] > 0.3


def test_open_loop_starts_sessions_at_the_rate(server):
    res, log = _sweep(server, ContentConfig(sessions=SessionShape(turns=2)), api="chat", mix="4/3", n=8, rate=50.0)
    firsts = sorted(r["scheduled_mono_ns"] for r in res.rows if r["turn"] == 1)
    assert len(firsts) == 4
    span_s = (firsts[-1] - firsts[0]) / 1e9
    assert span_s == pytest.approx(3 / 50.0, rel=1e-6)  # the rescaled Poisson schedule: (n - 1) / rate


def test_content_options_are_checked(tmp_path):
    from benchrun.loadgen.content import content_from_options

    with pytest.raises(BenchrunError, match="is not N,M,P"):
        content_from_options(None, "auto", None, None, 0.0, "4,8")
    with pytest.raises(BenchrunError, match="--think-time needs --session-turns"):
        content_from_options(None, "auto", None, None, 1.0, None)
    assert content_from_options(None, "auto", None, None, 0.0, None) is None
    bad = ContentConfig(dataset=str(SHIPPED), shared_prefix=SharedPrefix(1, 1, 1))
    with pytest.raises(BenchrunError, match="exclusive"):
        bad.check()
    with pytest.raises(BenchrunError, match="turns must be >= 1"):
        ContentConfig(sessions=SessionShape(0)).check()
    assert WordCounter().count(" a  b ") == 2


def test_content_across_worker_processes_and_a_timed_session_point(server):
    res, log = _sweep(server, ContentConfig(dataset=str(SHIPPED)), n=12, conc=4, workers=2)
    entries = load_dataset(SHIPPED).entries
    assert {r["worker"] for r in res.rows} == {0, 1}
    assert all(log[r["request_id"]]["received"]["prompt"] == entries[r["dataset_index"]].prompts[0] for r in res.rows)
    # one permutation per point dealt across the workers: the same entries as one worker sends
    one, _ = _sweep(server, ContentConfig(dataset=str(SHIPPED)), n=12, conc=4)
    assert sorted(r["dataset_index"] for r in res.rows) == sorted(r["dataset_index"] for r in one.rows)
    cfg = SweepConfig(url=server.url, model="m", api="chat", mix=tuple(parse_mix("4/3")), points=(LoadPoint("closed_loop", 2),),
                      duration_s=0.3, warmup=0, content=ContentConfig(sessions=SessionShape(turns=2, think_time_s=0.01)))
    timed = run_sweep(cfg)
    assert len(timed.rows) >= 4 and all(r["error"] is None for r in timed.rows)
    turns = {}
    for r in timed.rows:
        turns.setdefault(r["session_id"], []).append(r["turn"])
    # every session starts at turn 1 and goes in order; only the deadline cuts a session short
    assert all(sorted(t) == list(range(1, len(t) + 1)) for t in turns.values())
    assert max(len(t) for t in turns.values()) == 2


def test_a_pinned_dataset_resolved_on_another_host_is_found_by_its_tail(tmp_path, monkeypatch):
    from benchrun.loadgen.content import locate_dataset

    (tmp_path / "specs/datasets").mkdir(parents=True)
    (tmp_path / "specs/datasets/d.jsonl").write_text('{"prompt": "x"}\n')
    monkeypatch.chdir(tmp_path)  # a pod's working directory holds the image's specs/
    found = locate_dataset("/work/elsewhere/specs/datasets/d.jsonl", "0" * 64)
    assert found == str(tmp_path / "specs/datasets/d.jsonl")
    with pytest.raises(DatasetError, match="differs from the pinned"):  # and its bytes are still checked
        load_dataset(found, expect_sha256="0" * 64)
    assert locate_dataset("/work/elsewhere/specs/datasets/d.jsonl", None) == "/work/elsewhere/specs/datasets/d.jsonl"


def test_a_runs_own_dataset_copy_absent_in_a_pod_is_found_in_the_image_by_its_sha256(tmp_path, monkeypatch):
    # the run reads structured/<run_id>_dataset.<ext> (its own copy); a pod without the run
    # volume has the image's specs/ only, where no path ends like the copy's
    import hashlib

    from benchrun.loadgen.content import locate_dataset

    (tmp_path / "specs/datasets").mkdir(parents=True)
    (tmp_path / "specs/datasets/other.jsonl").write_text('{"prompt": "y"}\n')
    (tmp_path / "specs/datasets/d.jsonl").write_text('{"prompt": "x"}\n')
    monkeypatch.chdir(tmp_path)
    sha = hashlib.sha256(b'{"prompt": "x"}\n').hexdigest()
    copy = "/home/runs/r-1/structured/r-1_dataset.jsonl"
    assert locate_dataset(copy, sha) == str(tmp_path / "specs/datasets/d.jsonl")
    assert locate_dataset(copy, "0" * 64) == copy  # no such bytes: the path as given, whose read then fails
    # a dataset kept outside specs/ (data/ of the repository) is found too
    (tmp_path / "data").mkdir()
    (tmp_path / "data/conv.jsonl").write_text('{"prompt": "z"}\n')
    (tmp_path / ".venv/lib").mkdir(parents=True)
    (tmp_path / ".venv/lib/conv.jsonl").write_text('{"prompt": "z"}\n')  # hidden folders are not searched
    z = hashlib.sha256(b'{"prompt": "z"}\n').hexdigest()
    assert locate_dataset(copy, z) == str(tmp_path / "data/conv.jsonl")


def test_closed_loop_sessions_with_think_time_are_judged_on_active_sessions(server):
    # think time dwarfs the turns: requests in flight are a fraction of c, sessions are not (60 requests:
    # at 24, a full clean-clone test run read 3.47 active sessions once, where 3.98-3.99 is usual even
    # beside three busy loops; a longer point dilutes a stall of the test process)
    res, _ = _sweep(server, ContentConfig(sessions=SessionShape(turns=3, think_time_s=0.05)), api="chat",
                    mix="6/5", n=60, conc=4, policy=VerdictPolicy(percentile="p50"))
    s = res.summaries[0]
    assert s["requests_in_flight"] < 0.5 * 4 < 0.9 * 4 <= s["active_sessions"] == s["achieved_concurrency"]
    assert not [r for r in s["verdict_reasons"] if "concurrency" in r or "active sessions" in r]
    # without sessions nothing changes: achieved concurrency is requests in flight
    plain, _ = _sweep(server, None, mix="6/5", n=8, conc=2)
    p = plain.summaries[0]
    assert "active_sessions" not in p and p["achieved_concurrency"] == p["requests_in_flight"]


def test_dataset_entries_are_dealt_from_one_permutation_whatever_the_worker_count(tmp_path):
    from benchrun.loadgen.content import Source
    from benchrun.loadgen.workload import split_evenly

    p = tmp_path / "ds.jsonl"
    p.write_text("".join(json.dumps({"prompt": f"prompt number {i}", "output_tokens": 4}) + "\n" for i in range(1000)))
    content, mix = ContentConfig(dataset=str(p)), tuple(parse_mix("8/8"))

    def sent(n_workers: int, n: int = 400, warm: int = 0, point: int = 0) -> list[int]:
        by_index = {}
        for w, n_w in enumerate(split_evenly(n, n_workers)):
            src = Source(content, mix, 0, point, w, n_workers)
            for _ in range(split_evenly(warm, n_workers)[w]):
                src.single(warmup=True)
            for k in range(n_w):
                by_index[w + k * n_workers] = src.single().dataset_index
        return [by_index[g] for g in range(n)]

    base = sent(1)
    assert len(set(base)) == 400  # no entry twice before the dataset is used up
    for n_workers in (2, 4, 16):
        assert sent(n_workers) == base  # the same sequence, request for request
    assert sent(4, warm=7) == base  # warm-up draws its own permutation
    assert sent(1, point=1) != base  # another point: another permutation
    wrapped = sent(3, n=2500)  # past the end: a fresh permutation each pass
    assert sorted(wrapped[:1000]) == sorted(wrapped[1000:2000]) == list(range(1000)) and wrapped[:1000] != wrapped[1000:2000]


def test_an_entry_without_a_length_asks_the_same_length_whatever_the_worker_count(tmp_path):
    """Its length came from the worker's own generator, drawn in the worker's order: the same
    entry asked 2 tokens with one worker and 9 with two."""
    from benchrun.loadgen.content import Source
    from benchrun.loadgen.workload import split_evenly

    p = tmp_path / "ds.jsonl"
    p.write_text("".join(json.dumps({"prompt": f"prompt number {i} please"}) + "\n" for i in range(50)))
    content, mix = ContentConfig(dataset=str(p)), tuple(parse_mix("8/2@0.5,8/9@0.5"))

    def sent(n_workers: int, n: int = 120, point: int = 0) -> list[tuple[int, int]]:
        by_index = {}
        for w, n_w in enumerate(split_evenly(n, n_workers)):
            src = Source(content, mix, 5, point, w, n_workers)
            for k in range(n_w):
                t = src.single()
                by_index[w + k * n_workers] = (t.dataset_index, t.out_tokens)
        return [by_index[g] for g in range(n)]

    base = sent(1)
    assert {o for _, o in base} == {2, 9}  # drawn from the mix
    for n_workers in (2, 3, 7):
        assert sent(n_workers) == base


def test_refserver_metrics_count_its_prefix_cache_hits(server):
    from benchrun.loadgen import servermetrics

    def hits_and_queries() -> tuple[float, float]:
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
            v = servermetrics.parse(r.read().decode())
        return v["vllm:prefix_cache_hits_total"], v["vllm:prefix_cache_queries_total"]

    h0, q0 = hits_and_queries()
    res, _ = _sweep(server, ContentConfig(shared_prefix=SharedPrefix(2, 3, 32)), mix="8/4", n=12, conc=2)
    h1, q1 = hits_and_queries()
    cached = sum(r["usage_cached_tokens"] for r in res.rows)
    # /metrics reported 0 hits whatever the cache did: it read a counter the engine never had
    assert cached > 0 and h1 - h0 == cached
    assert q1 - q0 == sum(r["usage_input_tokens"] for r in res.rows)


def test_dataset_entries_dealt_over_unequal_worker_shares_are_one_workers(tmp_path):
    # closed loop c=3 over 2 workers sends 2/3 and 1/3 of the requests: the entries still follow
    # the one permutation, request for request, as with one worker
    from benchrun.loadgen.content import Source
    from benchrun.loadgen.workload import dealt_index, split_by

    content, mix = ContentConfig(dataset=str(SHIPPED)), tuple(parse_mix("8/8"))
    one = Source(content, mix, 0, 0, 0, 1)
    base = [one.single().dataset_index for _ in range(40)]
    for weights in ([2, 1], [9, 8], [1, 1, 3]):
        shares = split_by(40, weights)
        by_index = {}
        for w, n_w in enumerate(shares):
            src = Source(content, mix, 0, 0, w, len(shares), shares)
            for k in range(n_w):
                by_index[dealt_index(shares, w, k)] = src.single().dataset_index
        assert [by_index[g] for g in range(40)] == base, weights


@pytest.mark.parametrize("conc", [2, 3])
def test_sessions_are_planned_once_and_dealt_whole_whatever_the_worker_count(server, conc):
    # 20 turns of 3 are 7 sessions (the last of 2 turns); split 10/10 turns per worker first, two
    # workers sent 8 sessions (4 each, each worker's last cut to 1 turn) of other entries
    content = ContentConfig(dataset=str(SHIPPED), sessions=SessionShape(turns=3))

    def sessions(workers: int) -> dict[str, list[tuple[int, int]]]:
        res, _ = _sweep(server, content, api="chat", mix="4/3", n=20, conc=conc, workers=workers)
        assert len({r["session_id"] for r in res.rows}) == 7
        out: dict[str, list[tuple[int, int]]] = {}
        for r in sorted(res.rows, key=lambda r: r["turn"]):
            out.setdefault(r["session_id"].rsplit("-", 1)[1], []).append((r["dataset_index"], r["turn"]))
        return out

    one, two = sessions(1), sessions(2)
    assert len(one) == 7 and sorted(len(t) for t in one.values()) == [2] + [3] * 6
    assert two == one  # the same sessions (by index in the point), entries and turns


def test_open_loop_sessions_over_workers_start_on_one_dealt_schedule(server):
    """Each worker drew its own session starts at rate/workers and rescaled them to the same span:
    the three workers started a session each at the go time (and three at the end)."""
    from benchrun.loadgen.schedule import dealt_arrivals

    content = ContentConfig(sessions=SessionShape(turns=2))
    res, _ = _sweep(server, content, rate=40.0, n=24, workers=3, seed=3)
    starts = sorted(r["scheduled_mono_ns"] for r in res.rows if r["turn"] == 1)
    assert len(starts) == 12 and len(set(starts)) == 12  # no two sessions at the same instant
    point = LoadPoint("open_loop", 40.0)
    want = sorted(x for w in range(3) for x in dealt_arrivals(point, 12, None, 3, 0, w, 3, 1))
    assert [(t - starts[0]) / 1e9 for t in starts] == pytest.approx(want, abs=1e-6)  # the plain open loop's schedule
    # worker w starts sessions w, w + 3, ...: the same sessions whatever the schedule
    assert all(int(r["session_id"].rsplit("-s", 1)[1]) % 3 == r["worker"] for r in res.rows)


@pytest.mark.parametrize("workers", [1, 3])
def test_open_loop_sessions_start_on_the_plain_open_loops_schedule(server, workers):
    """One rule (schedule.open_loop_offsets) draws the arrivals of requests and the starts of
    sessions: 12 sessions of 2 turns start when 12 plain requests of the same seed are sent, on
    one worker (its own draw) and over three (one schedule dealt)."""

    def sched(res, first_turns):
        t = sorted(r["scheduled_mono_ns"] for r in res.rows if not first_turns or r["turn"] == 1)
        return [(x - t[0]) / 1e9 for x in t]

    for arrival in ("poisson", "gamma"):
        kw = dict(rate=40.0, workers=workers, seed=5, arrival=arrival)
        plain, _ = _sweep(server, None, n=12, **kw)
        sess, _ = _sweep(server, ContentConfig(sessions=SessionShape(turns=2)), n=24, **kw)
        assert len(sched(plain, False)) == 12
        assert sched(sess, True) == pytest.approx(sched(plain, False), abs=1e-6)


def test_session_plans_deal_whole_sessions_in_proportion_to_the_streams():
    from benchrun.loadgen.sessions import session_plans
    from benchrun.loadgen.workload import parse_mix as pm

    cfg = SimpleNamespace(content=ContentConfig(dataset=str(SHIPPED), sessions=SessionShape(turns=4)),
                          mix=tuple(pm("4/3")), seed=0)

    def plans(weights):
        got = {}
        for w in range(len(weights)):
            for p in session_plans(cfg, 0, w, "n", 0, 50, len(weights), weights):
                got[p.session_id.rsplit("-s", 1)[1]] = (w, [(t.dataset_index, t.text) for t in p.turns])
        return got

    one = plans([1])
    assert len(one) == 13 and len(one["12"][1]) == 2  # 50 turns of 4: 12 sessions and one of 2
    for weights in ([1, 1], [9, 8], [2, 1, 1]):
        got = plans(weights)
        assert {k: v[1] for k, v in got.items()} == {k: v[1] for k, v in one.items()}
        per_worker = [sum(1 for v in got.values() if v[0] == w) for w in range(len(weights))]
        assert per_worker == split_by(13, weights)


def test_sharegpt_replies_stay_with_their_prompts_past_empty_or_consecutive_human_turns(tmp_path):
    """Found in review: an empty human turn was filtered out after prompts and replies were paired by
    position, and two human turns in a row shifted every later pair: prompt k got reply k + 1."""
    from benchrun.loadgen.dataset import load_dataset

    conv = [{"from": "human", "value": ""}, {"from": "gpt", "value": "answer to nothing"},
            {"from": "human", "value": "first question"}, {"from": "gpt", "value": "first answer"},
            {"from": "human", "value": "second,"}, {"from": "human", "value": "continued"},
            {"from": "gpt", "value": "second answer"}, {"from": "human", "value": "last, unanswered"}]
    (tmp_path / "d.json").write_text(json.dumps([{"conversations": conv}]))
    e = load_dataset(tmp_path / "d.json").entries[0]
    assert e.prompts == ("first question", "second,\ncontinued", "last, unanswered")
    assert e.replies == ("first answer", "second answer")


def test_a_jsonl_record_holding_a_line_separator_is_one_record(tmp_path):
    """str.splitlines broke JSONL records at U+2028, U+2029 and U+0085, which JSON strings may hold
    unescaped (json.dumps(..., ensure_ascii=False) writes them): a valid file was refused as not JSON."""
    from benchrun.loadgen.dataset import load_dataset

    prompts = ["Hello\u2028world", "second \x85 NEL", "para\u2029graph \x1c sep"]
    path = tmp_path / "d.jsonl"
    path.write_text("\r\n".join(json.dumps({"prompt": p}, ensure_ascii=False) for p in prompts) + "\r\n",
                    encoding="utf-8")
    assert [e.prompts for e in load_dataset(path).entries] == [(p,) for p in prompts]


def test_surrogate_halves_never_end_a_sweep(tmp_path, toks):
    """JSON admits lone \\uD8xx escapes: a dataset prompt holding one, or a reply streamed as an emoji's
    two halves in two chunks, reached the tokenizers library, which refused the string ("TextInputSequence
    must be str"), and the whole sweep ended."""
    from types import SimpleNamespace

    from benchrun.loadgen.dataset import load_dataset
    from benchrun.loadgen.records import tokenizer_count

    path = tmp_path / "sur.jsonl"
    path.write_text('{"prompt": "hello \\ud83d world"}\n{"prompt": "pair \\ud83d\\ude00 ok"}\n', encoding="utf-8")
    entries = load_dataset(path).entries
    assert [e.prompts[0] for e in entries] == ["hello \ufffd world", "pair \U0001F600 ok"]
    tok = HFTokenizer(toks["bpe"])
    assert tok.count("\ud83d") == tok.count("\ufffd") and tok.count("\ud83d" + "\ude00") == tok.count("\U0001F600")
    out = SimpleNamespace(generated=["a ", "\ud83d", "\ude00"], chunk_tokens=[1, 1, 1], chunk_token_method=None)
    assert tokenizer_count(out, tok) == max(3, tok.count("a \U0001F600"))
