"""Server dialects, detected before measuring: whether ``ignore_eos`` is accepted, how streams end, a prompt's fixed token overhead.

OpenAI-compatible servers differ in what they accept and send: vLLM and SGLang take vLLM's
``ignore_eos``, ``transformers serve`` and OpenAI reject an unknown field (HTTP 422/400);
some end a stream on ``data: [DONE]``, others on a chunk with ``finish_reason`` (and
``usage``) and the end of the body; a chat template adds a fixed number of prompt tokens.
:func:`resolve` settles these once, before the sweep, with at most three tiny requests
(``max_tokens`` 2), and returns what it found for the result's context.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import Any

from benchrun.loadgen import client as http
from benchrun.loadgen.config import SweepConfig

# What each named kind is known to accept; "auto" probes (and reads /v1/models' owned_by).
ACCEPTS_IGNORE_EOS = {"vllm": True, "sglang": True, "tgi": False, "openai": False}
PROBE_TOKENS = 2


def kind_from_models(server_info: dict[str, Any]) -> str | None:
    """The server kind /v1/models names in ``owned_by`` (vLLM says "vllm", SGLang "sglang")."""
    owners = " ".join(server_info.get("owned_by") or []).lower()
    for kind in ("vllm", "sglang", "tgi"):
        if kind in owners:
            return kind
    return None


async def _probe(ep: http.Endpoint, cfg: SweepConfig, prompt: str, ignore_eos: bool, include_usage: bool, rid: str) -> http.Outcome:
    pool = http.ConnectionPool(ep)
    body = http.build_body(ep, cfg.model, prompt, PROBE_TOKENS, ignore_eos=ignore_eos, include_usage=include_usage)
    head = http.build_head(ep, "POST", ep.path, len(body), {"X-Request-Id": rid})
    out = http.Outcome()
    try:
        await http.stream_request(pool, head, body, out, timeout_s=min(cfg.request_timeout_s, 60.0))
    finally:
        await pool.close()
    return out


def _summary(rid: str, prompt: str, ignore_eos: bool, out: http.Outcome) -> dict[str, Any]:
    return {
        "request_id": rid,
        "prompt": prompt,
        "ignore_eos": ignore_eos,
        "http_status": out.status,
        "ok": out.error is None,
        "error": out.error,
        "stream_end": out.terminator,
        "usage_prompt_tokens": out.usage_prompt,
        "usage_completion_tokens": out.usage_completion,
    }


def _rejects(out: http.Outcome, field: str) -> bool:
    return out.status is not None and 400 <= out.status < 500 and field in (out.error or "")


def resolve(cfg: SweepConfig, ep: http.Endpoint, server_info: dict[str, Any]) -> tuple[SweepConfig, dict[str, Any]]:
    """``cfg`` with ``ignore_eos`` and ``prompt_token_overhead`` settled, and the record of how.

    ``ignore_eos`` given explicitly wins; else a named kind decides; else (``auto``) the
    kind /v1/models names, else a probe with ``ignore_eos`` (kept when the server takes it,
    dropped when a 4xx names it). The overhead is the server's ``usage.prompt_tokens`` for an
    empty prompt (one word, less one, where an empty prompt fails), 0 when the server reports
    no usage. ``stream_options`` is dropped when a 4xx names it.
    """
    found: dict[str, Any] = {"server_kind_requested": cfg.server_kind, "probes": []}
    kind = cfg.server_kind
    if kind == "auto":
        named = kind_from_models(server_info)
        found["server_kind_from_models"] = named
        kind = named or "auto"
    ignore = cfg.ignore_eos
    source = "given" if ignore is not None else ("server kind" if kind in ACCEPTS_IGNORE_EOS else "probe")
    if ignore is None and kind in ACCEPTS_IGNORE_EOS:
        ignore = ACCEPTS_IGNORE_EOS[kind]
    include_usage = cfg.include_usage

    def run(prompt: str, ie: bool) -> http.Outcome:
        rid = f"benchrun-probe-{os.urandom(3).hex()}-{len(found['probes'])}"
        out = asyncio.run(_probe(ep, cfg, prompt, ie, include_usage, rid))
        found["probes"].append(_summary(rid, prompt, ie, out))
        return out

    out = run("", True if ignore is None else ignore)
    if ignore is None:
        if _rejects(out, "ignore_eos"):
            ignore = False
            out = run("", False)
        else:
            ignore = True
    if out.error is not None and include_usage and _rejects(out, "stream_options"):
        include_usage = False  # token counts then come from the chunks
        out = run("", ignore)
    overhead_from = "empty prompt"
    if out.error is not None and not (out.status is not None and 400 <= out.status < 500 and http.unknown_field_hint(out.error or "")):
        # an empty prompt is refused by some servers (or breaks them): one word, less one
        out = run("hello", ignore)
        overhead_from = "one-word prompt less one"
    overhead = 0
    if out.error is None and out.usage_prompt is not None:
        overhead = max(0, out.usage_prompt - (1 if overhead_from != "empty prompt" else 0))
    else:
        overhead_from = "none measured (the probe failed or the server reports no usage)"
    found.update(
        {
            "server_kind": kind if kind != "auto" else ("accepts ignore_eos" if ignore else "rejects ignore_eos"),
            "ignore_eos": bool(ignore),
            "ignore_eos_decided_by": source,
            "stream_end": out.terminator,
            "include_usage": include_usage,
            "usage_in_stream": out.usage_prompt is not None,
            "prompt_token_overhead": overhead,
            "prompt_token_overhead_from": overhead_from,
            "probe_ok": out.error is None,
        }
    )
    if out.error is not None:
        found["probe_error"] = out.error
    return dataclasses.replace(cfg, ignore_eos=bool(ignore), include_usage=include_usage, prompt_token_overhead=overhead), found
