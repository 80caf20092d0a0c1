"""Helpers for building test spec documents (import as `from helpers import ...`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading


def tiny_layers(micro: list[dict], component: list[dict] | None = None, end_to_end: list[dict] | None = None) -> list[dict]:
    """A layers section with the given suites (a layer with none is disabled)."""
    out = []
    for name, suites in (("micro", micro), ("component", component or []), ("end_to_end", end_to_end or [])):
        out.append({"name": name, "enabled": bool(suites), "objective": f"{name} (test)", "suites": suites})
    return out


@contextlib.contextmanager
def threaded_server(**kw):
    """A RefServer on its own event loop in a thread (tests that do not measure timing)."""
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    from benchrun.loadgen.refserver import RefServer

    srv = RefServer(**kw)
    port = asyncio.run_coroutine_threadsafe(srv.start(), loop).result(10)
    try:
        yield srv, f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(srv.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()
