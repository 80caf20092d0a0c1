"""benchrun's load generator side by side with its peers (guidellm, aiperf, inference-perf) against one reference server that logs its own timestamps.

One reference-server process (one token per SSE chunk, decode step ``--step-ms`` + 0.01 ms per
sequence, no prefill cost, ``--tokens`` output tokens, ignore_eos) serves every tool in turn.
Each tool runs the same closed-loop load: ``--requests`` requests of 16 prompt words at
concurrency c, for each c in ``--levels``; tools alternate round by round (the order rotates
each round) so the machine's load falls on all alike. Each tool is a child process in its own
virtual environment (``benchmarks/.peers/<tool>``, pinned versions, made by ``--setup``).

Per request, the tool's own TTFT and E2E (as it reports them) are compared with the server's
for the same request (server: arrival of the request head, kernel stamp -> first / last
token written; CLOCK_MONOTONIC): timing error = |client - server|. Requests are matched by
id: benchrun and aiperf send ``X-Request-Id`` (the server records it); guidellm sends none,
so its ``response_id`` ``cmpl-N`` is the server's ``srv-N``; inference-perf likewise (the
``id`` of its first chunk); its TTFT is its first output token time - its start time, its
E2E its end - start (its own per-request report). Warm-up: benchrun's default
(one request per stream, excluded), aiperf ``--warmup-request-count c`` (excluded), guidellm
none (it has no warm-up option), so guidellm's first wave includes connection set-up.
Achieved rate: matched requests / (last - first server arrival). Client CPU: the child's
user + system CPU over its wall time (whole command, start-up and imports included; cores).

inference-perf (kubernetes-sigs) needs Python >= 3.12 (every release on PyPI): ``--setup``
finds one on PATH or under pyenv, else says so (then leave it out with ``--tools``).

Usage::

    .venv/bin/python benchmarks/loadgen_vs_peers.py --setup      # once: venvs, pinned installs
    .venv/bin/python benchmarks/loadgen_vs_peers.py [--levels 16,32] [--rounds 2] [--requests 320]
        [--tools benchrun,guidellm,aiperf] [--json OUT]

The default (2 rounds x 2 levels x 4 tools x 320 requests) takes about 3-4 minutes here.
The figures in benchmarks/README.md come from this script; nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchrun.loadgen.client import Endpoint, get_json  # noqa: E402
from benchrun.loadgen.refserver import PerfModel, ServerProcess  # noqa: E402

PEERS = ROOT / "benchmarks" / ".peers"
PINS = {"guidellm": "guidellm==0.8.1", "aiperf": "aiperf==0.13.0", "inference-perf": "inference-perf==0.7.0"}
HASH = "0" * 40
BENCHRUN_CHILD = r"""
import json, sys
from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep
from benchrun.loadgen.workload import parse_mix
url, c, n, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
res = run_sweep(SweepConfig(url=url, model="m", mix=tuple(parse_mix(f"16/{tokens}")), points=(LoadPoint("closed_loop", c),),
                            requests_per_point=n, seed=1))
json.dump([{"id": r["request_id"], "ttft_ms": r["ttft_ms"], "e2e_ms": r["e2e_ms"]} for r in res.rows if r["error"] is None], sys.stdout)
"""


def _python312() -> str | None:
    """A Python >= 3.12 interpreter that runs (PATH, then pyenv's versions), else None."""
    cands = [shutil.which(n) for n in ("python3.13", "python3.12")]
    cands += [str(p) for p in sorted(Path.home().glob(".pyenv/versions/3.1[2-9]*/bin/python"))]
    for c in cands:
        if c and subprocess.run([c, "-c", "import sys; assert sys.version_info >= (3, 12)"], capture_output=True).returncode == 0:
            return c
    return None


def setup() -> None:
    """Virtual environments with the pinned peers, a word-level tokenizer built here (no hub access) and a local HF cache for it."""
    PEERS.mkdir(parents=True, exist_ok=True)
    for name, pin in PINS.items():
        venv = PEERS / name
        py = _python312() if name == "inference-perf" else sys.executable
        if py is None:
            print(f"{name}: skipped: every release needs Python >= 3.12 and none is installed here")
            continue
        if not (venv / "bin" / "python").exists():
            subprocess.run([py, "-m", "venv", str(venv)], check=True)
        r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", pin])
        print(f"{name}: {pin} {'installed' if r.returncode == 0 else 'FAILED'}")
    tok = PEERS / "hfcache" / "models--benchrun--tok"
    snap = tok / "snapshots" / HASH
    snap.mkdir(parents=True, exist_ok=True)
    (tok / "refs").mkdir(exist_ok=True)
    (tok / "refs" / "main").write_text(HASH)
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from benchrun.loadgen.workload import VOCABULARY\n"
        "from tokenizers import Tokenizer, models, pre_tokenizers, decoders\n"
        "from transformers import PreTrainedTokenizerFast\n"
        "v = {'<unk>': 0, '<s>': 1, '</s>': 2}\n"
        "[v.setdefault(w, len(v)) for w in VOCABULARY]\n"
        "t = Tokenizer(models.WordLevel(v, unk_token='<unk>')); t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()\n"
        "t.decoder = decoders.WordPiece(prefix='##')\n"
        "PreTrainedTokenizerFast(tokenizer_object=t, unk_token='<unk>', bos_token='<s>', eos_token='</s>').save_pretrained(%r)\n"
    ) % (str(ROOT), str(snap))
    subprocess.run([str(PEERS / "guidellm" / "bin" / "python"), "-c", code], check=True)
    rng = np.random.default_rng(0)
    from benchrun.loadgen.workload import make_prompt

    with open(PEERS / "prompts.jsonl", "w", encoding="utf-8") as fh:
        for _ in range(20000):
            fh.write(json.dumps({"prompt": make_prompt(16, rng), "prompt_tokens_count": 16}) + "\n")
    print(f"tokenizer and prompts under {PEERS}")


def _child(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None, timeout: float = 600) -> tuple[str, float, float]:
    """(stdout, wall s, cpu s) of one child command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({r.returncode}): {(r.stderr or r.stdout)[-1500:]}")
    return r.stdout, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_benchrun(url: str, c: int, n: int, tokens: int, work: Path) -> tuple[list[dict], float, float]:
    out, wall, cpu = _child([str(ROOT / ".venv" / "bin" / "python"), "-c", BENCHRUN_CHILD, url, str(c), str(n), str(tokens)],
                            env={"PYTHONPATH": str(ROOT)})
    return json.loads(out), wall, cpu


def run_guidellm(url: str, c: int, n: int, tokens: int, work: Path) -> tuple[list[dict], float, float]:
    out = work / "guidellm.json"
    scenario = {"spec": {
        "backend": {"kind": "openai_http", "target": url, "model": "m", "request_format": "/v1/completions"},
        "profile": {"kind": "concurrent", "streams": c},
        "tokenizer": {"kind": "huggingface_auto", "model": str(PEERS / "hfcache" / "models--benchrun--tok" / "snapshots" / HASH)},
        "data": [{"kind": "json_file", "path": str(PEERS / "prompts.jsonl")}],
        "constraints": [{"kind": "max_requests", "count": n}],
        "outputs": [{"kind": "json", "path": str(out)}]}}
    data = work / f"prompts_{tokens}.jsonl"
    if not data.exists():  # the output length rides in the dataset's count column, as guidellm maps it
        with open(PEERS / "prompts.jsonl", encoding="utf-8") as src, open(data, "w", encoding="utf-8") as dst:
            for line in src:
                dst.write(json.dumps({**json.loads(line), "output_tokens_count": tokens}) + "\n")
    scenario["spec"]["data"] = [{"kind": "json_file", "path": str(data)}]
    sc = work / "guidellm_scenario.json"
    sc.write_text(json.dumps(scenario))
    _, wall, cpu = _child([str(PEERS / "guidellm" / "bin" / "guidellm"), "run", "-c", str(sc), "--disable-console"],
                          env={"HF_HUB_OFFLINE": "1"}, cwd=str(work))
    doc = json.loads(out.read_text())
    rows = []
    for r in doc["benchmarks"][0]["requests"]["successful"]:
        rid = r.get("response_id") or ""
        rows.append({"id": "srv-" + rid.split("-", 1)[1] if rid.startswith("cmpl-") else rid,
                     "ttft_ms": r["time_to_first_token_ms"], "e2e_ms": r["request_latency"] * 1000.0, "tokens": r.get("output_tokens")})
    return rows, wall, cpu


def run_aiperf(url: str, c: int, n: int, tokens: int, work: Path) -> tuple[list[dict], float, float]:
    art = work / "aiperf"
    shutil.rmtree(art, ignore_errors=True)
    _, wall, cpu = _child([str(PEERS / "aiperf" / "bin" / "aiperf"), "profile", "--model", "m", "--url", url, "--endpoint-type", "completions",
                           "--streaming", "--concurrency", str(c), "--request-count", str(n), "--warmup-request-count", str(c),
                           "--tokenizer", "benchrun/tok", "--synthetic-input-tokens-mean", "16", "--synthetic-input-tokens-stddev", "0",
                           "--output-tokens-mean", str(tokens), "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
                           "--random-seed", "1", "--output-artifact-dir", str(art), "--ui-type", "none"],
                          env={"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(PEERS / "hfcache")}, cwd=str(work))
    rows = []
    for line in (art / "profile_export.jsonl").read_text().splitlines():
        rec = json.loads(line)
        m = rec.get("metrics") or {}
        if rec["metadata"].get("benchmark_phase") != "profiling" or "time_to_first_token" not in m:
            continue
        rows.append({"id": rec["metadata"]["x_request_id"], "ttft_ms": m["time_to_first_token"]["value"], "e2e_ms": m["request_latency"]["value"]})
    return rows, wall, cpu


def run_inference_perf(url: str, c: int, n: int, tokens: int, work: Path) -> tuple[list[dict], float, float]:
    out = work / "inference-perf"
    shutil.rmtree(out, ignore_errors=True)
    tok = PEERS / "hfcache" / "models--benchrun--tok" / "snapshots" / HASH
    cfg = {  # JSON is YAML: no YAML writer needed here
        "load": {"type": "concurrent", "num_workers": 1, "stages": [{"num_requests": n, "concurrency_level": c}]},
        "api": {"type": "completion", "streaming": True},
        "server": {"type": "vllm", "model_name": "m", "base_url": url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tok)},
        "data": {"type": "random", "input_distribution": {"min": 16, "max": 16, "mean": 16, "type": "fixed"},
                 "output_distribution": {"min": tokens, "max": tokens, "mean": tokens, "type": "fixed"}},
        "report": {"request_lifecycle": {"summary": True, "per_request": True}},
        "storage": {"local_storage": {"path": str(out)}},
    }
    cf = work / "inference-perf.yml"
    cf.write_text(json.dumps(cfg))
    _, wall, cpu = _child([str(PEERS / "inference-perf" / "bin" / "inference-perf"), "--config_file", str(cf)],
                          env={"HF_HUB_OFFLINE": "1"}, cwd=str(work))
    rows = []
    for r in json.loads((out / "per_request_lifecycle_metrics.json").read_text()):
        if r.get("error") is not None:
            continue
        resp = r["info"]["response_metrics"]
        times = resp.get("output_token_times") or resp.get("chunk_times") or []
        rid = json.loads(resp["response_chunks"][0]).get("id", "") if resp.get("response_chunks") else ""
        if not times:
            continue
        rows.append({"id": "srv-" + rid.split("-", 1)[1] if rid.startswith("cmpl-") else rid,
                     "ttft_ms": (times[0] - r["start_time"]) * 1000.0, "e2e_ms": (r["end_time"] - r["start_time"]) * 1000.0})
    return rows, wall, cpu


TOOLS = {"benchrun": run_benchrun, "guidellm": run_guidellm, "aiperf": run_aiperf, "inference-perf": run_inference_perf}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--setup", action="store_true", help="make the peers' venvs, the tokenizer and the prompts, then exit")
    p.add_argument("--levels", default="16,32")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--requests", type=int, default=320)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--step-ms", type=float, default=1.0)
    p.add_argument("--tools", default="benchrun,guidellm,aiperf,inference-perf")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.setup:
        setup()
        return
    tools = [t for t in a.tools.split(",") if t]
    for t in tools:
        if t not in TOOLS:
            raise SystemExit(f"unknown tool {t!r}; known: {', '.join(TOOLS)}")
        if t != "benchrun" and not (PEERS / t / "bin").exists():
            raise SystemExit(f"{t} is not installed: run {sys.argv[0]} --setup")
    levels = [int(x) for x in a.levels.split(",")]
    load0 = os.getloadavg()
    t_start = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    errs: dict[tuple[str, int], dict[str, list[float]]] = {}
    perf = PerfModel(decode_base_ms=a.step_ms, decode_ms_per_seq=0.01, prefill_ms_per_token=0.0, max_batch=256)
    with ServerProcess(perf) as srv, tempfile.TemporaryDirectory() as tmp:
        ep = Endpoint.from_url(srv.url)
        for rnd in range(a.rounds):
            order = tools[rnd % len(tools):] + tools[:rnd % len(tools)]
            for c in levels:
                for tool in order:
                    rows, wall, cpu = TOOLS[tool](srv.url, c, a.requests, a.tokens, Path(tmp))
                    truth = {r["request_id"]: r for r in asyncio.run(get_json(ep, "/debug/requests", 30))["requests"]}
                    e = errs.setdefault((tool, c), {"ttft": [], "e2e": [], "rate": [], "cpu": [], "unmatched": []})
                    arrivals = []
                    miss = 0
                    for r in rows:
                        g = truth.get(r["id"])
                        if g is None or g.get("first_token_ns") is None or r["ttft_ms"] is None:
                            miss += 1
                            continue
                        e["ttft"].append(abs(r["ttft_ms"] - (g["first_token_ns"] - g["arrival_ns"]) / 1e6))
                        e["e2e"].append(abs(r["e2e_ms"] - (g["last_token_ns"] - g["arrival_ns"]) / 1e6))
                        arrivals.append(g["arrival_ns"])
                    if len(arrivals) >= 2:
                        e["rate"].append((len(arrivals) - 1) / ((max(arrivals) - min(arrivals)) / 1e9))
                    e["cpu"].append(cpu / wall)
                    e["unmatched"].append(miss)
                    print(f"round {rnd} c={c} {tool}: {len(rows)} rows, {miss} unmatched, TTFT err p99 "
                          f"{np.percentile(e['ttft'][-len(arrivals):], 99) if arrivals else float('nan'):.3f} ms, wall {wall:.1f} s", file=sys.stderr)
    load1 = os.getloadavg()
    out = {"started": t_start, "loadavg_start": load0, "loadavg_end": load1, "args": vars(a), "results": []}
    print(f"\n{t_start}; load average {load0[0]:.2f} -> {load1[0]:.2f}")
    print("| streams | tool | n | TTFT err p50 | TTFT err p99 | E2E err p50 | E2E err p99 | achieved req/s | client CPU (cores) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in levels:
        for tool in tools:
            e = errs[(tool, c)]
            q = lambda xs, k: float(np.percentile(xs, k)) if xs else float("nan")  # noqa: E731
            row = {"streams": c, "tool": tool, "n": len(e["ttft"]), "ttft_err_p50_ms": q(e["ttft"], 50), "ttft_err_p99_ms": q(e["ttft"], 99),
                   "e2e_err_p50_ms": q(e["e2e"], 50), "e2e_err_p99_ms": q(e["e2e"], 99), "achieved_rps": float(np.mean(e["rate"])) if e["rate"] else None,
                   "client_cpu_cores": float(np.mean(e["cpu"])), "unmatched": sum(e["unmatched"])}
            out["results"].append(row)
            print(f"| {c} | {tool} | {row['n']} | {row['ttft_err_p50_ms']:.3f} ms | {row['ttft_err_p99_ms']:.3f} ms | {row['e2e_err_p50_ms']:.3f} ms | "
                  f"{row['e2e_err_p99_ms']:.3f} ms | {row['achieved_rps'] or float('nan'):.1f} | {row['client_cpu_cores']:.2f} |")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
