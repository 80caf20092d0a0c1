"""Prompt salts: each replicate (and each run) sends its own prompt words, so a server's prefix
cache (vLLM's automatic prefix caching, SGLang's radix cache, the reference server's) cannot hit
an earlier replicate's prompts, while the seed alone still decides what is drawn: buckets,
lengths, shared prefixes and sessions.

Found in review: three replicates of a suite sent byte-identical prompts (seeded by the seed, the
point, the worker; the seed defaulting to 0), and against the reference server with its prefix
cache on their hit rates read 0.000, 0.996, 0.996.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

from benchrun.errors import BenchrunError
from benchrun.loadgen.content import ContentConfig, SessionShape, SharedPrefix, Source
from benchrun.loadgen.refserver import ServerProcess
from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep
from benchrun.loadgen.suite import prompt_salt_of
from benchrun.loadgen.tokens import HFTokenizer
from benchrun.loadgen.workload import VOCABULARY, make_prompt, parse_mix, worker_rng

from test_loadgen_content import server  # noqa: F401 - a fixture: the reference server, its prefix cache on

MIX = [{"inputTokens": 48, "outputTokens": 4, "weight": 0.5}, {"inputTokens": 24, "outputTokens": 2, "weight": 0.5}]


def _log(srv: ServerProcess) -> dict[str, dict]:
    with urllib.request.urlopen(srv.url + "/debug/requests", timeout=10) as r:
        return {x["request_id"]: x for x in json.load(r)["requests"]}


def _prompt(rec: dict) -> str:
    got = rec["received"]
    return got["prompt"] if "prompt" in got else "\n".join(m["content"] for m in got["messages"])


def _seq(request_id: str) -> int:
    return int(request_id.rsplit("-", 1)[1])


def _replicate(srv: ServerProcess, run_dir: Path, run_id: str, replicate: int) -> tuple[list[dict], dict, dict]:
    """One replicate of serving_sweep against ``srv``: its rows in send order, its ``all`` summary, its context."""
    from benchrun.suites import serving_sweep
    from benchrun.suites._runtime import SuiteContext

    params = {"endpoint": srv.url, "concurrency": [2], "requests_per_point": 16, "warmup": 0}
    ctx = SuiteContext({"BENCHRUN_RUN_ID": run_id, "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": "serving_sweep",
                        "BENCHRUN_REPLICATE": str(replicate), "BENCHRUN_CASE_ID": "case-1",
                        "BENCHRUN_PARAMS": json.dumps(params),
                        "BENCHRUN_WORKLOAD": json.dumps({"model": "m", "sequenceLengthMix": MIX,
                                                         "concurrencyModel": "closed_loop"})})
    serving_sweep.run(ctx)
    rows = pq.read_table(run_dir / ctx.samples["requests"]).to_pylist()
    rows.sort(key=lambda r: _seq(r["request_id"]))
    log = _log(srv)
    for r in rows:
        r["prompt"] = _prompt(log[r["request_id"]])
    [summary] = [s for s in ctx.serving if s["bucket"] == "all"]
    return rows, summary, ctx.context


def test_replicates_send_their_own_prompts_and_miss_each_others_prefix_cache(server, tmp_path):
    one, s1, c1 = _replicate(server, tmp_path / "a", "run-1", 1)
    two, s2, c2 = _replicate(server, tmp_path / "b", "run-1", 2)
    assert len(one) == len(two) == 16 and all(r["error"] is None for r in one + two)
    # the frozen workload is the same: every request's bucket and lengths, in order
    drawn = [(r["bucket"], r["input_tokens_requested"], r["output_tokens_requested"]) for r in one]
    assert drawn == [(r["bucket"], r["input_tokens_requested"], r["output_tokens_requested"]) for r in two]
    assert {b for b, _, _ in drawn} == {"48/4", "24/2"}
    # ... and the words are not: no request shares even its first 4-word block with the other replicate's
    for a, b in zip(one, two):
        assert len(a["prompt"].split()) == len(b["prompt"].split()) == a["input_tokens_requested"]
        assert a["prompt"].split()[:4] != b["prompt"].split()[:4]
        assert set(b["prompt"].split()) <= set(VOCABULARY)
    # the server's prefix cache: replicate 2 finds nothing of replicate 1 (before: 0.996)
    assert s1["prefix_cache_hit_rate"] < 0.05 and s2["prefix_cache_hit_rate"] < 0.05
    # each run says which salt it sent
    assert c1["loadgen"]["config"]["prompt_salt"] == "run-1/r1" and c2["loadgen"]["config"]["prompt_salt"] == "run-1/r2"
    # the same salt sends the same prompts (a replicate rerun is reproducible), which the cache, on, hits
    again, s3, _ = _replicate(server, tmp_path / "c", "run-1", 1)
    assert [r["prompt"] for r in again] == [r["prompt"] for r in one]
    assert s3["prefix_cache_hit_rate"] > 0.9
    # another run's replicate 1 is another salt
    other, _, _ = _replicate(server, tmp_path / "d", "run-2", 1)
    assert all(a["prompt"].split()[:4] != b["prompt"].split()[:4] for a, b in zip(one, other))


def _sweep(srv: ServerProcess, salt: str | None, content: ContentConfig | None, *, api: str = "completions",
           n: int = 12) -> tuple[list[dict], dict]:
    cfg = SweepConfig(url=srv.url, model="m", api=api, mix=tuple(parse_mix("8/3")), points=(LoadPoint("closed_loop", 2),),
                      requests_per_point=n, warmup=0, seed=3, content=content, prompt_salt=salt)
    res = run_sweep(cfg)
    assert [r["error"] for r in res.rows] == [None] * n
    log = _log(srv)
    rows = sorted(res.rows, key=lambda r: (int(r["session_id"].rsplit("-s", 1)[1]), r["turn"]) if r["session_id"]
                  else (_seq(r["request_id"]), 0))
    for r in rows:
        r["rec"] = log[r["request_id"]]
        r["prompt"] = _prompt(r["rec"])
    return rows, res.summaries[0]


def test_a_salt_keeps_shared_prefixes_shared_within_its_run(server):
    sp = ContentConfig(shared_prefix=SharedPrefix(prefixes=2, suffixes=3, prefix_tokens=24))
    a, sa = _sweep(server, "salt-a", sp, n=18)
    b, sb = _sweep(server, "salt-b", sp, n=18)
    # the same draws: which prefix and which bucket each request took
    assert [(r["prefix_id"], r["bucket"]) for r in a] == [(r["prefix_id"], r["bucket"]) for r in b]
    prefixes_a = {r["prefix_id"]: tuple(r["prompt"].split()[:24]) for r in a}
    prefixes_b = {r["prefix_id"]: tuple(r["prompt"].split()[:24]) for r in b}
    # within a run every request of a prefix sends the same prefix; across salts the prefixes differ
    assert all(tuple(r["prompt"].split()[:24]) == prefixes_a[r["prefix_id"]] for r in a)
    assert all(tuple(r["prompt"].split()[:24]) == prefixes_b[r["prefix_id"]] for r in b)
    assert not set(prefixes_a.values()) & set(prefixes_b.values())
    # the intended sharing still reaches the cache; the other salt's prefixes do not add to it
    assert sa["prefix_cache_hit_rate"] > 0.5 and sb["prefix_cache_hit_rate"] == pytest.approx(sa["prefix_cache_hit_rate"], abs=0.05)


def test_a_salted_session_resends_its_own_history(server):
    shape = ContentConfig(sessions=SessionShape(turns=2))
    a, _ = _sweep(server, "salt-a", shape, api="chat", n=8)
    b, _ = _sweep(server, "salt-b", shape, api="chat", n=8)
    assert [(r["turn"], r["bucket"], r["input_tokens_requested"]) for r in a] == \
        [(r["turn"], r["bucket"], r["input_tokens_requested"]) for r in b]
    for rows in (a, b):
        by_session: dict[str, list[dict]] = {}
        for r in rows:
            by_session.setdefault(r["session_id"], []).append(r)
        for first, second in by_session.values():
            msgs = second["rec"]["received"]["messages"]
            assert msgs[0]["content"] == first["rec"]["received"]["messages"][0]["content"]
    firsts = lambda rows: [r["rec"]["received"]["messages"][0]["content"] for r in rows if r["turn"] == 1]  # noqa: E731
    assert all(x.split()[:4] != y.split()[:4] for x, y in zip(firsts(a), firsts(b)))


def _bpe(tmp_path: Path) -> str:
    """A byte-level BPE with a small vocabulary: common words are one token, others several."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rng = np.random.default_rng(0)
    weights = np.linspace(3.0, 0.05, len(VOCABULARY))
    corpus = [" ".join(rng.choice(VOCABULARY, size=40, p=weights / weights.sum())) for _ in range(300)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(tmp_path / "bpe.json"))
    return str(tmp_path / "bpe.json")


@pytest.mark.parametrize("kind", ["words", "bpe"])
def test_a_salt_changes_the_words_not_the_draws_nor_the_lengths(tmp_path, kind):
    content = ContentConfig(tokenizer=_bpe(tmp_path) if kind == "bpe" else None)
    counter = HFTokenizer(content.tokenizer) if content.tokenizer else None
    mix = tuple(parse_mix("16/2@0.5,40/3@0.5"))

    def turns(salt: str | None) -> list:
        src = Source(content, mix, 9, 0, 0, salt=salt)
        return [src.single() for _ in range(30)]

    plain, a, a2, b = turns(None), turns("x"), turns("x"), turns("y")
    assert [(t.bucket, t.tokens, t.out_tokens) for t in a] == [(t.bucket, t.tokens, t.out_tokens) for t in plain] \
        == [(t.bucket, t.tokens, t.out_tokens) for t in b]
    assert [t.text for t in a] == [t.text for t in a2]  # the same salt: the same prompts
    assert all(x.text.split()[:4] != y.text.split()[:4] for x, y in zip(a, b))
    assert all(x.text != y.text for x, y in zip(a, plain))
    if counter is not None:  # exact lengths in the tokenizer's tokens, salted or not
        assert all(counter.count(t.text) == int(t.bucket.split("/")[0]) for t in a + b)


def test_without_a_salt_the_seeds_own_words_are_sent():
    from benchrun.loadgen import client as http
    from benchrun.loadgen.records import _specs

    cfg = SweepConfig(url="http://127.0.0.1:1", model="m", mix=tuple(parse_mix("6/2")), points=(LoadPoint("closed_loop", 1),),
                      requests_per_point=3, seed=4)
    ep = http.Endpoint.from_url(cfg.url, "completions")
    sent = [json.loads(s.body)["prompt"] for s in _specs(cfg, ep, 0, 0, "n", 0, 3)]
    rng = worker_rng(4, 0, 0, 0)
    want = []
    for _ in range(3):
        rng.random()  # the bucket draw
        want.append(make_prompt(6, rng))
    assert sent == want


def test_the_suites_salt_is_the_run_and_replicate_unless_given():
    ctx = lambda **p: SimpleNamespace(params=p, run_id="run-7", replicate=3, suite="serving_sweep")  # noqa: E731
    assert prompt_salt_of(ctx()) == "run-7/r3"
    assert prompt_salt_of(ctx(prompt_salt="fixed")) == "fixed"
    assert prompt_salt_of(ctx(prompt_salt="none")) is None and prompt_salt_of(ctx(prompt_salt=False)) is None
    with pytest.raises(BenchrunError, match="parameter prompt_salt must be a string"):
        prompt_salt_of(ctx(prompt_salt=[1]))


def test_a_launch_that_sends_a_replicate_again_salts_it_apart():
    # before: a contended rerun, the confirmation round (the run's id and replicate numbers again) and
    # a pod put in place of an evicted one all sent the words their replicate's first launch had sent
    from benchrun.suites._runtime import SuiteContext

    def salt(shared=False, **env):
        base = {"BENCHRUN_RUN_ID": "run-7", "BENCHRUN_REPLICATE": "3", "BENCHRUN_RUN_DIR": "/tmp", **env}
        return prompt_salt_of(SuiteContext(base), shared=shared)

    assert salt() == "run-7/r3"
    assert salt(BENCHRUN_ATTEMPT="2") == "run-7/r3/a2"
    assert salt(BENCHRUN_LAUNCH_SCOPE="confirmation") == "run-7/r3/confirmation"
    assert salt(BENCHRUN_LAUNCH_SCOPE="confirmation", BENCHRUN_ATTEMPT="2") == "run-7/r3/confirmation/a2"
    assert salt(BENCHRUN_POD_UID="u-1") == "run-7/r3/pod-u-1" != salt(BENCHRUN_POD_UID="u-2")
    assert salt(shared=True, BENCHRUN_POD_UID="u-1") == "run-7/r3"  # a replicate's load pods share one salt
    assert len({salt(), salt(BENCHRUN_ATTEMPT="2"), salt(BENCHRUN_LAUNCH_SCOPE="confirmation")}) == 3
    assert salt(BENCHRUN_PARAMS=json.dumps({"prompt_salt": "fixed"}), BENCHRUN_ATTEMPT="2") == "fixed"  # given: kept


def _cli(args: list[str], monkeypatch, capsys) -> dict:
    from benchrun import cli

    monkeypatch.setattr(sys, "argv", ["benchrun", *args])
    with pytest.raises(SystemExit) as info:
        cli.main()
    out = capsys.readouterr()
    assert info.value.code in (0, 3), out.err
    return json.loads(out.out)


def test_the_cli_salts_each_run_unless_told_otherwise(server, tmp_path, monkeypatch, capsys):
    def run(*extra: str) -> tuple[str | None, list[str]]:
        doc = _cli(["loadgen", "--url", server.url, "--model", "m", "--mix", "12/2", "--concurrency", "1",
                    "--requests", "4", "--warmup", "0", "--out", str(tmp_path), "--json", "--allow-invalid", *extra],
                   monkeypatch, capsys)
        rows = pq.read_table(tmp_path / doc["files"]["requests"]).to_pylist()
        log = _log(server)
        return doc["context"]["config"]["prompt_salt"], [_prompt(log[r["request_id"]]) for r in
                                                         sorted(rows, key=lambda r: _seq(r["request_id"]))]

    (s1, p1), (s2, p2) = run(), run()
    assert s1 != s2 and s1.startswith("loadgen-") and all(a != b for a, b in zip(p1, p2))
    (f1, q1), (f2, q2) = run("--prompt-salt", "fixed"), run("--prompt-salt", "fixed")
    assert f1 == f2 == "fixed" and q1 == q2
    (n1, r1), (n2, r2) = run("--prompt-salt", "none"), run("--prompt-salt", "none")
    assert n1 is None is n2 and r1 == r2 != q1


# -- follow-ups found in review ----------------------------------------------------------------


def test_a_tokenizers_filler_words_are_salted_too(tmp_path):
    """The tokenizer's prompt builder tops a prompt up with one-token filler words drawn by
    ``rng.permutation``, which the salt did not see: every salt ended a prompt on the same fillers
    (12 of these 40 prompts ended on the same word under two salts). Now they are renamed among the
    fillers, while the random stream is used as before: the lengths stay exact and the draws after a
    prompt are the seed's."""
    from benchrun.loadgen.workload import salt_permutation, salted

    tok = HFTokenizer(_bpe(tmp_path))
    same_end = 0
    for k in range(40):
        texts, states = {}, set()
        for salt in (None, "x", "y"):
            rng = np.random.default_rng([7, k])
            texts[salt] = tok.build(10 + k, salted(rng, salt_permutation(salt)))
            assert tok.count(texts[salt]) == 10 + k and set(texts[salt].split()) <= set(VOCABULARY)
            states.add(json.dumps(rng.bit_generator.state))
        assert len(states) == 1  # the same draws, salted or not
        same_end += texts["x"].split()[-1] == texts["y"].split()[-1]
        again = tok.build(10 + k, salted(np.random.default_rng([7, k]), salt_permutation("x")))
        assert again == texts["x"]  # the same salt, the same prompt
    assert same_end == 0


def test_a_salt_beside_a_trace_is_refused_by_the_suite(tmp_path):
    """The CLI refuses --prompt-salt beside --trace; the suite took the parameter and ignored it."""
    from benchrun.suites import serving_sweep
    from benchrun.suites._runtime import SuiteContext

    tr = tmp_path / "t.jsonl"
    tr.write_text("".join(json.dumps({"timestamp": 20 * i, "input_length": 8, "output_length": 2}) + "\n" for i in range(3)))
    env = {"BENCHRUN_RUN_ID": "r1", "BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": "serving_sweep",
           "BENCHRUN_REPLICATE": "1", "BENCHRUN_CASE_ID": "case-1",
           "BENCHRUN_PARAMS": json.dumps({"trace": str(tr), "prompt_salt": "mine"}),
           "BENCHRUN_WORKLOAD": json.dumps({"model": "m", "concurrencyModel": "open_loop"})}
    with pytest.raises(BenchrunError, match=r"parameter trace replays the trace's own prompts .*; parameter prompt_salt "
                                            "cannot apply to it: leave it out"):
        serving_sweep.run(SuiteContext(env))
    # and `benchrun validate` says so before any replicate runs (its check is the suite's own)
    assert any("parameter prompt_salt cannot apply to it" in c for c in serving_sweep.conflicts(
        {"trace": "t.jsonl", "prompt_salt": "mine"}, {"concurrencyModel": "open_loop"}))


def test_a_dataset_run_records_no_salt(server, tmp_path, monkeypatch, capsys):
    """A dataset's prompts are sent as written: the run recorded the salt it never applied."""
    ds = tmp_path / "d.jsonl"
    ds.write_text("".join(json.dumps({"prompt": f"say {w} twice", "output_tokens": 2}) + "\n" for w in VOCABULARY[:6]))
    content = ContentConfig(dataset=str(ds))
    cfg = SweepConfig(url=server.url, model="m", mix=tuple(parse_mix("8/2")), points=(LoadPoint("closed_loop", 1),),
                      requests_per_point=4, warmup=0, content=content, prompt_salt="mine")
    assert cfg.prompt_salt is None
    assert SweepConfig(url=server.url, model="m", mix=cfg.mix, points=cfg.points, prompt_salt="mine").prompt_salt == "mine"
    for extra in ([], ["--prompt-salt", "mine"]):
        doc = _cli(["loadgen", "--url", server.url, "--model", "m", "--concurrency", "1", "--requests", "4",
                    "--warmup", "0", "--out", str(tmp_path / "out"), "--json", "--allow-invalid", "--dataset", str(ds),
                    *extra], monkeypatch, capsys)
        assert doc["context"]["config"]["prompt_salt"] is None
        rows = pq.read_table(tmp_path / "out" / doc["files"]["requests"]).to_pylist()
        log = _log(server)
        assert {_prompt(log[r["request_id"]]) for r in rows} <= {f"say {w} twice" for w in VOCABULARY[:6]}
