"""Multi-turn sessions: session plans and the phase that runs them, each turn sent after the previous reply and a think time, with the history carried.

A session is ``turns`` user turns (synthetic at the mix's lengths, or a dataset entry's human
turns in order). Turn ``k + 1`` is sent ``think_time_s`` after turn ``k``'s reply ended, and
carries the whole history: on the chat API every earlier user turn and the server's own reply
to it as messages; on completions one text of them joined by newlines. A turn that fails ends
its session (its later turns would carry a history the server never produced); on a
request-count point those planned turns are counted (``turns_not_sent`` in the point's summary)
and ``slo_attainment`` counts them as not good (docs/loadgen-workloads.md).

Load: closed loop ``c`` runs ``c`` sessions at once (a slot starts the next session when its
session ends); open loop starts sessions at the point's arrival times (``rate`` is sessions
per second): with several workers, one schedule of the point's sessions at the full rate, dealt
to them as the sessions are (:func:`benchrun.loadgen.schedule.dealt_arrivals`), so their starts
together are the stated process, not ``workers`` starts at once at both ends. A point's request count counts turns: ``n`` requests are ``ceil(n / turns)``
sessions, the last one shortened, planned once for the point and dealt whole to the workers
(:func:`session_plans`). Warm-up sessions are single turns. Rows carry ``session_id``
and ``turn`` (1-based); the schedule of a later turn is its reply's end plus the think time.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Iterator

from benchrun.loadgen import client as http
from benchrun.loadgen.config import LoadPoint
from benchrun.loadgen.content import Source, Turn, history_tokens, turn_spec
from benchrun.loadgen.records import _Spec, _WorkerState
from benchrun.loadgen.schedule import _one, open_loop_offsets
from benchrun.loadgen.workload import dealt_index, split_by

CLOCK = time.perf_counter_ns


@dataclass
class SessionPlan:
    """One session to run: its id, its user turns and the counter for its history."""

    session_id: str
    turns: list[Turn]
    source: Source


def session_plans(cfg: Any, point_index: int, worker: int, nonce: str, n_warm: int, n: int | None,
                  n_workers: int = 1, weights: list[int] | None = None) -> Iterator[SessionPlan]:
    """Warm-up plans (one turn each), then this worker's sessions.

    With a request count, ``n`` is the point's turns over all its ``n_workers`` workers: the
    point's sessions are planned once (``ceil(n / turns)`` of them, the last shortened; session
    ``j`` takes the dataset's ``j``-th entry of the point's permutation, or draws seeded by ``j``)
    and whole sessions are dealt to the workers in proportion to ``weights`` (a closed loop's
    streams per worker; default equal), so the same seed sends the same sessions whatever the
    worker count. Timed (``n`` None): endless, worker ``w`` taking sessions ``w, w + n_workers, ...``."""
    src = Source(cfg.content, cfg.mix, cfg.seed, point_index, worker, n_workers, salt=getattr(cfg, "prompt_salt", None))
    shape = cfg.content.sessions
    for k in range(n_warm):
        yield SessionPlan(f"{nonce}-p{point_index}-w{worker}-wus{k}", src.conversation(1, warmup=True), src)
    if n is None:
        k = 0
        while True:
            j = worker + k * n_workers
            yield SessionPlan(f"{nonce}-p{point_index}-w{worker}-s{j}", src.conversation(shape.turns, index=j), src)
            k += 1
    count = -(-n // shape.turns)
    shares = split_by(count, weights if weights is not None else [1] * n_workers)
    for k in range(shares[worker]):
        j = dealt_index(shares, worker, k)
        turns = min(shape.turns, n - j * shape.turns)
        yield SessionPlan(f"{nonce}-p{point_index}-w{worker}-s{j}", src.conversation(turns, index=j), src)


async def session_phase(
    st: _WorkerState,
    pool: http.ConnectionPool,
    plans: Any,
    n: int | None,
    point: LoadPoint,
    conc_w: int,
    rate_w: float,
    phase_s: float,
    duration_s: float | None,
    stream: int,
    point_index: int,
    start_ns: int | None = None,
) -> list[tuple[_Spec, http.Outcome, int]]:
    """Run the sessions of one phase (the signature of :func:`benchrun.loadgen.schedule._phase`)."""
    cfg = st.cfg
    done: list[tuple[_Spec, http.Outcome, int]] = []
    timeout_s = cfg.request_timeout_s
    think_ns = int(cfg.content.sessions.think_time_s * 1e9)
    start = start_ns if start_ns is not None else CLOCK()
    deadline = start + int(duration_s * 1e9) if duration_s is not None else None
    api = st.endpoint.api

    async def run(plan: SessionPlan, at: int) -> int:
        history: list[tuple[str, str]] = []
        end = at
        for k, turn in enumerate(plan.turns):
            if deadline is not None and at >= deadline:
                break
            delay = at - CLOCK()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            spec = _Spec()
            turn_spec(spec, cfg, st.endpoint, f"{plan.session_id}-t{k + 1}", turn, history,
                      history_tokens(plan.source.counter, api, history, turn))
            spec.session_id = plan.session_id
            spec.turn = k + 1
            spec.scheduled_ns = at
            item = await _one(pool, spec, timeout_s, keep_text=True, count_text=st.counter is not None)
            done.append(item)
            end = item[2]
            out = item[1]
            if out.error is not None:
                if stream == 1 and n is not None:  # the planned turns never sent: in the point's attainment
                    for t in plan.turns[k + 1:]:
                        st.turns_not_sent[t.bucket] = st.turns_not_sent.get(t.bucket, 0) + 1
                break
            history.append((turn.text, "".join(out.text or [])))
            at = end + think_ns
        return end

    it = iter(plans)
    if point.load_model == "closed_loop":

        async def slot() -> None:
            prev = start
            while deadline is None or CLOCK() < deadline:
                plan = next(it, None)
                if plan is None:
                    return
                prev = await run(plan, prev)

        await asyncio.gather(*(slot() for _ in range(conc_w)))
        return done
    plans_list = list(plans) if n is not None else None
    count = len(plans_list) if plans_list is not None else None
    # the plain open loop's rule, over sessions: with several workers ONE schedule of the point's
    # sessions (total), dealt as the sessions are (worker w has sessions w, w + workers, ...:
    # session_plans); the measured phase of a count-ended point has requests_per_point turns
    total = -(-cfg.requests_per_point // cfg.content.sessions.turns) if cfg.requests_per_point is not None else None
    offsets = open_loop_offsets(st, point, count, total, duration_s, rate_w, phase_s, stream, point_index, start_ns)
    source = iter(plans_list) if plans_list is not None else it
    tasks = []
    for off in offsets:
        plan = next(source, None)
        if plan is None:
            break
        target = start + int(off * 1e9)
        delay = target - CLOCK()
        if delay > 0:
            await asyncio.sleep(delay / 1e9)
        tasks.append(asyncio.ensure_future(run(plan, target)))
    await asyncio.gather(*tasks)
    return done
