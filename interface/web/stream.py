"""Search and frontier with their progress, for the page's progress indicator: newline-delimited
JSON events as the search goes — ``tables`` (shapes tabulated of all), ``solution`` (CP-SAT's
solutions so far and the best objective as text) — then ``result``, the object of
``/api/search`` or ``/api/frontier`` for the same query.

Bad input found before the first event (every input the CLI refuses) is HTTP 422 with the CLI's
line, as on every endpoint; the run is the one the cache keeps, so the figure and the CSV that
follow reuse it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from trainplan.interface.commands import to_json
from trainplan.interface.flags import with_flags
from trainplan.interface.web.api import (
    BAD_INPUT,
    frontier_run,
    json_response,
    pairs,
    run_object,
    search_run,
)
from trainplan.interface.web.figures import planner_links
from trainplan.interface.web.params import openapi_parameters
from trainplan.model.errors import PlannerError

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["API: the CLI's --json objects"])
_LOG = logging.getLogger("trainplan.web")
NDJSON: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"application/x-ndjson": {}},
        "description": 'One JSON event a line: {"event": "tables", "done", "total"}, '
        '{"event": "solution", "count", "best"}, then {"event": "result", "result": {…}, '
        '"planner": [the planner page of each layout]}',
    },
    **BAD_INPUT,
}


def _work(run: Callable[..., Any], query: list[tuple[str, str]], put: Callable[[dict], None]):
    """The search in a thread, its progress and its end put as events."""
    progress = {
        "on_tables": lambda done, total: put({"event": "tables", "done": done, "total": total}),
        "on_solution": lambda count, best: put({"event": "solution", "count": count, "best": best}),
    }
    try:
        obj = run_object(run(query, **progress))
        put({"event": "result", "result": obj, "planner": planner_links(query, obj)})
    except PlannerError as err:
        put({"event": "error", "error": with_flags(str(err))})
    except Exception:  # a bug: logged on the server, one line to the page, no trace
        _LOG.exception("search failed")
        put({"event": "error", "error": "internal error; the server's log has the details"})


async def _stream(run: Callable[..., Any], query: list[tuple[str, str]]) -> Response:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def put(event: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, event)

    threading.Thread(target=_work, args=(run, query, put), daemon=True).start()
    first = await queue.get()
    if first["event"] == "error":
        return json_response({"error": first["error"]}, 422)

    async def lines() -> AsyncIterator[str]:
        event = first
        yield to_json(event, None) + "\n"
        while event["event"] not in ("result", "error"):
            event = await queue.get()
            yield to_json(event, None) + "\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson")


@router.get(
    "/search/stream",
    response_class=Response,
    responses=NDJSON,
    openapi_extra={"parameters": openapi_parameters("search")},
)
async def search_stream(request: Request) -> Response:
    """`/api/search` with its progress as it runs (the search page's indicator)."""
    return await _stream(search_run, pairs(request))


@router.get(
    "/frontier/stream",
    response_class=Response,
    responses=NDJSON,
    openapi_extra={"parameters": openapi_parameters("frontier")},
)
async def frontier_stream(request: Request) -> Response:
    """`/api/frontier` with its progress as it runs (the frontier page's indicator)."""
    return await _stream(frontier_run, pairs(request))
