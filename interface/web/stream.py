"""Search and frontier, whole (``/api/search``, ``/api/frontier``) or with their progress for the
page's progress indicator (``…/stream``): newline-delimited JSON events as the search goes —
``tables`` (shapes tabulated of all; once more with ``cut``, what a time limit left out of the
cost tables, in the CLI's words, before the solve), ``solution`` (CP-SAT's solutions so far and the best
objective as text) — then ``result``, the object of ``/api/search`` or ``/api/frontier`` for the
same query. ``/api/rlhf-plan``, the RLHF placement search, runs as a job too, whole or with its
progress (``/api/rlhf-plan/stream``: ``tables``, then ``solve`` per CP-SAT solve, then
``result``, the object of ``/api/rlhf-plan``).

Each search runs in a process of its own (:mod:`interface.web.jobs`), streamed or not: when the
client goes away before the result (the page's Cancel button aborts the request, a script's client
times out or is stopped), the process is terminated and the work stops. Bad input found before
the first event (every input the CLI refuses) is HTTP 422 with the CLI's line, as on every
endpoint; the result is kept in the API's cache, so the figure and the CSV that follow reuse it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from trainplan.interface.commands import to_json
from trainplan.interface.web import jobs
from trainplan.interface.web.api import (
    BAD_INPUT,
    CONFIG,
    cached,
    json_response,
    pairs,
    remember,
    rlhf_plan_check,
    run_key,
    run_object,
)
from trainplan.interface.web.body import BODY_DOC, body_pairs
from trainplan.interface.web.figures import planner_links
from trainplan.interface.web.params import openapi_parameters

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["API: the CLI's --json objects"])
NDJSON: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"application/x-ndjson": {}},
        "description": 'One JSON event a line: {"event": "tables", "done", "total"} (once '
        'more with "cut", the words of a time limit that cut the cost tables short, before the '
        "solve), "
        '{"event": "solution", "count", "best"}, then {"event": "result", "result": {…}, '
        '"planner": [the planner page of each layout], "cached": true when the same search '
        "answered earlier (its times are that run's)}; closing the connection before the "
        "result stops the search",
    },
    **BAD_INPUT,
}
WAIT_S = 0.25
"""How often the wait for a search's first event looks whether the client has gone."""


def _result(query: list[tuple[str, str]], result: Any, saved: bool = False) -> dict[str, Any]:
    """The stream's last event: the object, each layout's planner link, and ``cached``: True
    when the API's cache answered (the same search run earlier: the object's own times,
    ``tables_seconds`` and ``solve_seconds``, are that run's, not this request's)."""
    obj = run_object(result)
    return {"event": "result", "result": obj, "planner": planner_links(query, obj), "cached": saved}


class _Watched:
    """A search or frontier of the query running as a job (:mod:`interface.web.jobs`), its events
    read while the client stays: :meth:`next` answers None once the client has gone (the caller
    then cancels the job, which terminates its process)."""

    def __init__(
        self,
        kind: str,
        request: Request,
        query: list[tuple[str, str]],
        key: tuple[Any, ...] | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.request, self.key = request, key
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def put(event: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(self.queue.put_nowait, event)

        self.job, _ = jobs.run_job(kind, query, put)

    async def next(self) -> dict[str, Any] | None:
        """The job's next event (``done`` with its result kept in the API's cache under the
        watch's key, when it has one); None when the client has gone."""
        while True:
            try:
                event = await asyncio.wait_for(self.queue.get(), WAIT_S)
            except TimeoutError:
                if await self.request.is_disconnected():
                    return None
                continue
            if event["event"] == "done" and self.key is not None:
                remember(self.key, event["result"])
            return event


async def _whole(kind: str, request: Request, query: list[tuple[str, str]]) -> Response:
    """``/api/search`` or ``/api/frontier`` of ``query`` (the GET form's, or the POST form's
    body): the object once the job ends; HTTP 499 and the job's process terminated when the
    client goes away first."""
    key = run_key(kind, query)  # bad options: 422 before anything runs
    hit = cached(key)
    if hit is not None:
        return json_response(run_object(hit))
    event = await _end(_Watched(kind, request, query, key))
    if isinstance(event, Response):
        return event
    return json_response(run_object(event["result"]))


async def _end(watched: _Watched) -> dict[str, Any] | Response:
    """The job's ``done`` event once it ends; HTTP 499 and the job's process terminated when
    the client goes away first; a job's refusal (``error``) HTTP 422 with its line."""
    try:
        event = await watched.next()
        while event is not None and event["event"] not in ("done", "error"):
            event = await watched.next()
    finally:  # the client went away, the server stops, or the job ended
        watched.job.cancel()
    if event is None:
        return Response(status_code=499)  # the client closed the request
    if event["event"] == "error":
        return json_response({"error": event["error"]}, 422)
    return event


async def _stream(kind: str, request: Request, query: list[tuple[str, str]]) -> Response:
    key = run_key(kind, query)  # bad options: 422 before anything runs
    hit = cached(key)
    if hit is not None:
        return StreamingResponse(
            iter([to_json(_result(query, hit, saved=True), None) + "\n"]),
            media_type="application/x-ndjson",
        )
    return await _events(
        _Watched(kind, request, query, key), lambda done: _result(query, done["result"])
    )


async def _events(
    watched: _Watched, finish: Callable[[dict[str, Any]], dict[str, Any]]
) -> Response:
    """The job's events as newline-delimited JSON, its ``done`` event sent as ``finish`` makes
    it (the ``result`` event); a refusal before the first event is HTTP 422 with its line, HTTP
    499 when the client went away first; the job's process is terminated when the stream ends
    (its result sent, or the client gone)."""

    async def next_event() -> dict[str, Any] | None:
        """The job's next event as the stream sends it; None when the client has gone."""
        event = await watched.next()
        if event is not None and event["event"] == "done":
            return finish(event)
        return event

    try:
        first = await next_event()
    except BaseException:
        watched.job.cancel()
        raise
    if first is None:
        watched.job.cancel()
        return Response(status_code=499)  # the client closed the request
    if first["event"] == "error":
        return json_response({"error": first["error"]}, 422)

    async def lines() -> AsyncIterator[str]:
        event: dict[str, Any] | None = first
        try:
            while event is not None:
                yield to_json(event, None) + "\n"
                if event["event"] in ("result", "error"):
                    return
                event = await next_event()
        finally:  # the client went away (Starlette cancels the stream), or the job ended
            watched.job.cancel()

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.get(
    "/search",
    responses=BAD_INPUT,
    openapi_extra={"parameters": openapi_parameters("search", {"config": CONFIG})},
)
async def search(request: Request) -> Response:
    """The best layout, `trainplan search --json`: the answer's evaluate object with `status`
    (optimal, feasible, infeasible), the objective and the solve times. Closing the connection
    before the answer stops the search."""
    return await _whole("search", request, pairs(request))


@router.get(
    "/frontier",
    responses=BAD_INPUT,
    openapi_extra={"parameters": openapi_parameters("frontier", {"config": CONFIG})},
)
async def frontier(request: Request) -> Response:
    """The Pareto frontier, `trainplan frontier --json`: `points`, one CSV row each. Closing the
    connection before the answer stops the work."""
    return await _whole("frontier", request, pairs(request))


@router.get(
    "/search/stream",
    response_class=Response,
    responses=NDJSON,
    openapi_extra={"parameters": openapi_parameters("search", {"config": CONFIG})},
)
async def search_stream(request: Request) -> Response:
    """`/api/search` with its progress as it runs (the search page's indicator)."""
    return await _stream("search", request, pairs(request))


@router.get(
    "/frontier/stream",
    response_class=Response,
    responses=NDJSON,
    openapi_extra={"parameters": openapi_parameters("frontier", {"config": CONFIG})},
)
async def frontier_stream(request: Request) -> Response:
    """`/api/frontier` with its progress as it runs (the frontier page's indicator)."""
    return await _stream("frontier", request, pairs(request))


@router.post("/search", responses=BAD_INPUT, openapi_extra=BODY_DOC)
async def search_post(request: Request) -> Response:
    """`GET /api/search` with its parameters in a JSON body (:mod:`interface.web.body`)."""
    return await _whole("search", request, await body_pairs(request))


@router.post("/frontier", responses=BAD_INPUT, openapi_extra=BODY_DOC)
async def frontier_post(request: Request) -> Response:
    """`GET /api/frontier` with its parameters in a JSON body (:mod:`interface.web.body`)."""
    return await _whole("frontier", request, await body_pairs(request))


@router.post("/search/stream", response_class=Response, responses=NDJSON, openapi_extra=BODY_DOC)
async def search_stream_post(request: Request) -> Response:
    """`GET /api/search/stream` with its parameters in a JSON body."""
    return await _stream("search", request, await body_pairs(request))


@router.post("/frontier/stream", response_class=Response, responses=NDJSON, openapi_extra=BODY_DOC)
async def frontier_stream_post(request: Request) -> Response:
    """`GET /api/frontier/stream` with its parameters in a JSON body."""
    return await _stream("frontier", request, await body_pairs(request))


@router.get(
    "/rlhf-plan",
    responses=BAD_INPUT,
    openapi_extra={"parameters": openapi_parameters("rlhf-plan")},
)
async def rlhf_plan(request: Request) -> Response:
    """RLHF placement, `trainplan rlhf-plan --json`: the fastest placement of a PPO or GRPO
    step (each role's GPU pool, its parallelism, offload, the engine's memory fraction), the best
    colocated and split ones beside it, `status` (optimal, feasible, unknown, infeasible).
    `time-limit` bounds the search as it bounds the command's; closing the connection before
    the answer stops it."""
    query = pairs(request)
    rlhf_plan_check(query)  # bad options: 422 before anything runs
    event = await _end(_Watched("rlhf-plan", request, query, None))
    if isinstance(event, Response):
        return event
    return json_response(event["result"])


@router.get(
    "/rlhf-plan/stream",
    response_class=Response,
    responses={
        200: {
            "content": {"application/x-ndjson": {}},
            "description": 'One JSON event a line: {"event": "tables", "done", "total"} (pool '
            'sizes × roles costed), {"event": "solve", "done", "total"} (CP-SAT solves begun of '
            '3: the best, the best colocated, the best split placement), then {"event": '
            '"result", "result": {the object of /api/rlhf-plan}}; closing the connection before '
            "the result stops the search",
        },
        **BAD_INPUT,
    },
    openapi_extra={"parameters": openapi_parameters("rlhf-plan")},
)
async def rlhf_plan_stream(request: Request) -> Response:
    """`/api/rlhf-plan` with its progress as it runs (the RLHF tab's placement plan)."""
    query = pairs(request)
    rlhf_plan_check(query)  # bad options: 422 before anything runs
    return await _events(
        _Watched("rlhf-plan", request, query, None),
        lambda done: {"event": "result", "result": done["result"]},
    )


@router.get("/jobs")
def running_jobs() -> Response:
    """The searches, frontiers and RLHF placement searches running now, each in its own process (`kind`,
    `pid`, `seconds`, `query`); one whose page cancelled it is gone within a second."""
    return json_response(jobs.running())
