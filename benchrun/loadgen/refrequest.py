"""Request validation of the reference server: the JSON body of a completion request, checked strictly before it reaches the engine.

A client's body is untrusted: JSON nested deeper than the parser allows, a number sent as a
string (``"max_tokens": "7"``), ``prompt: null``, a string where ``messages`` must be a list,
or ``max_tokens: 1e308`` each get a 400 naming the field, never an unhandled exception or a
request that holds an engine slot forever. With ``reject_unknown_fields`` (a strict server,
like ``transformers serve``) a field outside the OpenAI API is a 422 naming it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

MAX_TOKENS_LIMIT = 65536  # the default cap on max_tokens (--max-tokens-limit)

_COMMON = frozenset({
    "model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "n", "stop", "seed",
    "user", "presence_penalty", "frequency_penalty", "logprobs", "logit_bias",
})
KNOWN_FIELDS = {
    "completions": _COMMON | {"prompt", "echo", "best_of", "suffix"},
    "chat": _COMMON | {"messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice",
                       "response_format", "parallel_tool_calls"},
}
EXTENSIONS = frozenset({"ignore_eos", "min_tokens"})  # vLLM's; a lenient server accepts them


class BadRequest(ValueError):
    """A request the server refuses: the HTTP status and a message naming the field."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class CompletionRequest:
    """What the engine needs from a valid body."""

    body: dict[str, Any]
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    model: str | None
    text: str = ""  # the prompt's text (chat: the messages' contents joined by spaces)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _text_of_content(content: Any, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for i, p in enumerate(content):
            if not (isinstance(p, dict) and isinstance(p.get("text"), str)):
                raise BadRequest(400, f"{where}[{i}] must be an object with a string 'text'")
            parts.append(p["text"])
        return " ".join(parts)
    raise BadRequest(400, f"{where} must be a string or a list of text parts")


def parse_completion(raw: bytes, chat: bool, *, max_tokens_limit: int = MAX_TOKENS_LIMIT,
                     reject_unknown_fields: bool = False, chat_template_tokens: int = 0) -> CompletionRequest:
    """The validated request in ``raw``; BadRequest (400, or 422 for an unknown field) otherwise."""
    try:
        body = json.loads(raw or b"{}")
    except RecursionError:
        raise BadRequest(400, "request body nests JSON too deeply") from None
    except ValueError as exc:  # includes UnicodeDecodeError and over-long integers
        raise BadRequest(400, f"request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest(400, "request body must be a JSON object")
    api = "chat" if chat else "completions"
    allowed = KNOWN_FIELDS[api] if reject_unknown_fields else KNOWN_FIELDS[api] | EXTENSIONS
    unknown = sorted(set(body) - allowed)
    if unknown and reject_unknown_fields:
        raise BadRequest(422, "Unexpected fields in the request: {" + ", ".join(repr(u) for u in unknown) + "}")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(400, "model must be a string")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest(400, "stream must be true or false")
    so = body.get("stream_options")
    if so is not None and not (isinstance(so, dict) and isinstance(so.get("include_usage", False), bool)):
        raise BadRequest(400, "stream_options must be an object whose include_usage is true or false")
    for name in ("ignore_eos", "echo"):
        if body.get(name) is not None and not isinstance(body[name], bool):
            raise BadRequest(400, f"{name} must be true or false")
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        if body.get(name) is not None and not _is_number(body[name]):
            raise BadRequest(400, f"{name} must be a number")
    mt_field = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    mt = body.get(mt_field)
    if mt is None:
        max_tokens = 16
    elif isinstance(mt, bool) or not isinstance(mt, int):
        raise BadRequest(400, f"{mt_field} must be an integer")
    elif not 1 <= mt <= max_tokens_limit:
        raise BadRequest(400, f"{mt_field} must be between 1 and {max_tokens_limit} (this server's limit, --max-tokens-limit)")
    else:
        max_tokens = mt
    if chat:
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise BadRequest(400, "messages must be a non-empty list of message objects")
        texts = []
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise BadRequest(400, f"messages[{i}] must be an object with a string 'role'")
            texts.append(_text_of_content(m.get("content"), f"messages[{i}].content"))
        text = " ".join(texts)
        prompt_tokens = len(text.split()) + chat_template_tokens
    else:
        p = body.get("prompt")
        if isinstance(p, str):
            text = p
        elif isinstance(p, list) and p and all(isinstance(x, str) for x in p):
            text = " ".join(p)
        else:
            raise BadRequest(400, "prompt must be a string or a non-empty list of strings")
        prompt_tokens = len(text.split())
    include_usage = bool(so.get("include_usage")) if isinstance(so, dict) else False
    return CompletionRequest(body, prompt_tokens, max_tokens, bool(stream), include_usage, model, text)
