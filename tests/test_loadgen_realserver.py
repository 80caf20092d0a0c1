"""Issue 30 (3): the load generator against a real OpenAI-compatible server nobody here wrote.

``transformers serve`` (the pinned transformers in the ``test`` extra, torch CPU) serves a
two-layer Llama whose config, random weights and word-level tokenizer are made here; nothing
is downloaded. The server ends its streams on a ``finish_reason`` chunk with ``usage`` and no
``[DONE]``, and rejects vLLM's ``ignore_eos`` with a 422: with defaults every request of a
sweep failed (422, then ``no_done``). One server start for the module (most of its wall time is
the server's imports); a few seconds of load.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep
from benchrun.loadgen.workload import VOCABULARY, parse_mix
from helpers import stop_process

pytestmark = pytest.mark.slow

SPECIALS = ["<unk>", "<s>", "</s>", "<|user|>", "<|end|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|user|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def _make_model(d: Path) -> None:
    """A 2-layer Llama (hidden 32) with random weights and a word-level tokenizer over the
    load generator's prompt vocabulary, so a prompt of n words is n tokens."""
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = list(dict.fromkeys([*VOCABULARY, "hello"]))
    vocab = {t: i for i, t in enumerate(SPECIALS + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins tokens with spaces
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "pad_token": "<unk>", "model_max_length": 4096}))
    (d / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    h, inter, layers, v = 32, 64, 2, len(vocab)
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": 2,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 2048, "vocab_size": v,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "dtype": "float32", "hidden_act": "silu"}))
    # never stop early on a special token: every request yields exactly max_tokens tokens
    (d / "generation_config.json").write_text(json.dumps({
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "suppress_tokens": list(range(len(SPECIALS)))}))
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    t = {"model.embed_tokens.weight": w(v, h), "lm_head.weight": w(v, h), "model.norm.weight": np.ones(h, np.float32)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t |= {p + "input_layernorm.weight": np.ones(h, np.float32), p + "post_attention_layernorm.weight": np.ones(h, np.float32),
              p + "self_attn.q_proj.weight": w(h, h), p + "self_attn.k_proj.weight": w(h, h),
              p + "self_attn.v_proj.weight": w(h, h), p + "self_attn.o_proj.weight": w(h, h),
              p + "mlp.gate_proj.weight": w(inter, h), p + "mlp.up_proj.weight": w(inter, h),
              p + "mlp.down_proj.weight": w(h, inter)}
    save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    exe = Path(sys.executable).with_name("transformers")
    if not exe.exists():
        pytest.fail("transformers is not installed: `pip install -e '.[test]'` installs the pinned transformers[serving]")
    d = tmp_path_factory.mktemp("tiny-llama")
    _make_model(d)
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(d / "hf-home"),
           "OMP_NUM_THREADS": "1"}
    log = open(d / "serve.log", "w+")
    proc = subprocess.Popen([str(exe), "serve", str(d), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"transformers serve did not come up: {log.read()[-2000:]}")
            time.sleep(0.5)
        yield url, str(d)
    finally:
        stop_process(proc, 15)
        log.close()
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_sweep_against_transformers_serve_measures_every_request(served, api):
    url, model = served
    cfg = SweepConfig(url=url, model=model, api=api, mix=tuple(parse_mix("16/8")),
                      points=(LoadPoint("closed_loop", 1), LoadPoint("closed_loop", 4)), requests_per_point=8,
                      request_timeout_s=60.0)
    res = run_sweep(cfg)
    assert [r["error"] for r in res.rows] == [None] * 16
    assert all(r["ttft_ms"] > 0 and r["e2e_ms"] >= r["ttft_ms"] for r in res.rows)
    # usage check: the server's counts agree with the chunks and the prompt (less the template's fixed tokens)
    assert all(r["usage_output_tokens"] == 8 and r["output_token_discrepancy"] == 0 for r in res.rows)
    assert all(r["input_token_discrepancy"] == 0 for r in res.rows), [r["usage_input_tokens"] for r in res.rows]
    found = res.context["server_dialect"]
    assert found["ignore_eos"] is False and found["probes"][0]["http_status"] == 422
    assert found["stream_end"] == "finish_reason" and {r["stream_end"] for r in res.rows} == {"finish_reason"}
    assert found["prompt_token_overhead"] == (3 if api == "chat" else 0)
    for s in res.summaries:
        if s["bucket"] == "all":
            assert s["n_requests"] == 8 and s["n_errors"] == 0 and s["ttft_ms_p50"] is not None


# -- issue 29 part A: request content against the real server ---------------------------------


def _vocab_dataset(path: Path, n: int = 12) -> Path:
    """A generic JSONL of prompts in the tiny model's vocabulary (so the server's tokenizer and
    ours must agree word for word), with output lengths of their own."""
    rng = np.random.default_rng(5)
    rows = [{"prompt": " ".join(rng.choice(VOCABULARY, size=int(rng.integers(3, 20)))), "output_tokens": int(rng.integers(2, 7))}
            for _ in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_dataset_workload_against_transformers_serve_agrees_with_the_tokenizer(served, api, tmp_path):
    from benchrun.loadgen.content import ContentConfig
    from benchrun.loadgen.dataset import load_dataset
    from benchrun.loadgen.tokens import HFTokenizer

    url, model = served
    data = _vocab_dataset(tmp_path / "prompts.jsonl")
    cfg = SweepConfig(url=url, model=model, api=api, mix=tuple(parse_mix("16/8")), points=(LoadPoint("closed_loop", 2),),
                      requests_per_point=8, request_timeout_s=60.0, content=ContentConfig(dataset=str(data), tokenizer=model))
    res = run_sweep(cfg)
    assert [r["error"] for r in res.rows] == [None] * 8
    tok = HFTokenizer(model)
    entries = load_dataset(data).entries
    for r in res.rows:
        e = entries[r["dataset_index"]]
        assert r["input_tokens_requested"] == tok.count(e.prompts[0]) == len(e.prompts[0].split())
        # the server's usage: our count plus its fixed overhead (BOS or chat template), and the
        # reply exactly the dataset's output length
        assert r["input_token_discrepancy"] == 0 and r["usage_output_tokens"] == e.output_tokens
    s = res.summaries[0]
    assert s["input_token_mismatches"] == 0 and s["output_token_mismatches"] == 0 and s["usage_compared"] == 8


def test_prompts_built_by_the_tokenizer_have_the_servers_token_counts(served):
    from benchrun.loadgen.content import ContentConfig

    url, model = served
    cfg = SweepConfig(url=url, model=model, api="completions", mix=tuple(parse_mix("23/4")), points=(LoadPoint("closed_loop", 2),),
                      requests_per_point=6, request_timeout_s=60.0, content=ContentConfig(tokenizer=model))
    res = run_sweep(cfg)
    assert [r["error"] for r in res.rows] == [None] * 6
    overhead = res.context["server_dialect"]["prompt_token_overhead"]
    assert all(r["input_tokens_requested"] == 23 and r["usage_input_tokens"] == 23 + overhead for r in res.rows)


def test_a_session_workload_against_transformers_serve_carries_the_servers_replies(served):
    from benchrun.loadgen.content import ContentConfig, SessionShape

    url, model = served
    cfg = SweepConfig(url=url, model=model, api="chat", mix=tuple(parse_mix("6/5")), points=(LoadPoint("closed_loop", 2),),
                      requests_per_point=6, request_timeout_s=60.0,
                      content=ContentConfig(tokenizer=model, sessions=SessionShape(turns=3, think_time_s=0.01)))
    res = run_sweep(cfg)
    assert [r["error"] for r in res.rows] == [None] * 6
    assert sorted((r["session_id"], r["turn"]) for r in res.rows) == sorted((s, t) for s in {r["session_id"] for r in res.rows} for t in (1, 2, 3))
    for r in res.rows:
        k = r["turn"]
        # our count: every message's content (the user turns of 6 and the server's replies of 5,
        # re-tokenized); the template adds 2 tokens a message and 1 for the reply: the probe's
        # one-message overhead (3) covers turn 1, each later turn adds two messages (4 tokens)
        assert r["input_tokens_requested"] == 6 * k + 5 * (k - 1)
        assert r["input_token_discrepancy"] == 4 * (k - 1), (k, r["usage_input_tokens"])
        assert r["usage_output_tokens"] == 5
    assert set(res.summaries[0]["ttft_ms_p50_by_turn"]) == {"1", "2", "3"}
