"""Request validation of the reference server: the JSON body of a completion request, checked before it reaches the engine."""

from __future__ import annotations

from typing import Any


def _count_words(body: dict[str, Any], chat: bool) -> int:
    if chat:
        msgs = body.get("messages") or []
        text = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
    else:
        p = body.get("prompt", "")
        text = " ".join(map(str, p)) if isinstance(p, list) else str(p)
    return len(text.split())
