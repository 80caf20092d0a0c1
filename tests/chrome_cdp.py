"""Render a local HTML file in headless Chromium through its DevTools protocol (tests only).

Opens the page in a fresh profile with networking features off, collects console messages
and uncaught exceptions from the first byte, evaluates an expression, takes a screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--remote-debugging-port=0", "--window-size=1300,900"]


@dataclass
class PageResult:
    screenshot: bytes
    value: Any
    console: list[dict[str, Any]] = field(default_factory=list)  # {"level", "text"}
    exceptions: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [m["text"] for m in self.console if m["level"] in ("error", "assert")] + self.exceptions


def render(html_path: Path, expression: str, timeout: float = 60.0) -> PageResult:
    import websocket  # websocket-client (a dependency of kubernetes)

    # Chromium's helper processes can still write to the profile for a moment after the browser
    # ends: the whole process group is ended and waited for, and cleanup tolerates a straggler.
    with tempfile.TemporaryDirectory(prefix="benchrun-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            port = _devtools_port(proc, timeout)
            deadline = time.monotonic() + timeout
            while True:
                targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
                pages = [t for t in targets if t.get("type") == "page"]
                if pages or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True)
            try:
                return _drive(ws, html_path.resolve().as_uri(), expression, deadline)
            finally:
                ws.close()
        finally:
            _end_group(proc)


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM to Chromium's own process group (only the processes this test started), then
    SIGKILL to whatever is left of it after a grace period."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _devtools_port(proc: subprocess.Popen, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
        if m:
            return int(m.group(1))
    raise RuntimeError("chromium did not start its DevTools endpoint:\n" + "".join(seen[-20:]))


def _drive(ws: Any, url: str, expression: str, deadline: float) -> PageResult:
    next_id = iter(range(1, 10_000))
    console: list[dict[str, Any]] = []
    exceptions: list[str] = []
    loaded = False

    def call(method: str, **params: Any) -> dict[str, Any]:
        nonlocal loaded
        mid = next(next_id)
        ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            _event(msg)

    def _event(msg: dict[str, Any]) -> None:
        nonlocal loaded
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled":
            console.append({"level": p.get("type"), "text": " ".join(str(a.get("value", a.get("description", "")))
                                                                     for a in p.get("args", []))})
        elif method == "Log.entryAdded":
            e = p.get("entry", {})
            console.append({"level": e.get("level"), "text": e.get("text", "")})
        elif method == "Runtime.exceptionThrown":
            exceptions.append(json.dumps(p.get("exceptionDetails", {}))[:500])
        elif method == "Page.loadEventFired":
            loaded = True

    for domain in ("Page", "Runtime", "Log"):
        call(f"{domain}.enable")
    call("Page.navigate", url=url)
    while not loaded:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not finish loading")
        _event(json.loads(ws.recv()))
    value = call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")
    shot = base64.b64decode(call("Page.captureScreenshot", format="png")["data"])
    return PageResult(shot, value, console, exceptions)
