"""The pages' figures and the frontier's CSV: the API's objects drawn by :mod:`interface.render.plots`
(SVG, text kept as text) and written by :func:`interface.render.report.csv_text` — the same charts and
CSV the CLI writes with ``--png``/``--svg``/``--chart``/``--csv``, never a second computation.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from trainplan.interface.cli.query import query_params
from trainplan.interface.render import plots
from trainplan.interface.render.report import csv_text
from trainplan.interface.web.api import (
    ACCELERATOR,
    API_ONLY,
    BAD_INPUT,
    CONFIG,
    ckpt_object,
    evaluate_object,
    frontier_run,
    json_response,
    pairs,
    pipeline_object,
    run_object,
)
from trainplan.interface.web.body import BODY_DOC, body_pairs
from trainplan.interface.web.params import openapi_parameters
from trainplan.model.errors import InfeasibleError

__all__ = ["router", "planner_link", "planner_links"]

router = APIRouter(prefix="/api/figures", tags=["figures and downloads"])
SVG: dict[int | str, dict[str, Any]] = {
    200: {"content": {"image/svg+xml": {}}, "description": "The figure as SVG"},
    **BAD_INPUT,
}
CSV: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {}}, "description": "frontier.csv"},
    **BAD_INPUT,
}
_CACHE = "private, max-age=300"  # a figure depends on its query alone


def _svg(draw: Any) -> Response:
    return Response(plots.svg(draw), media_type="image/svg+xml", headers={"Cache-Control": _CACHE})


def _doc(name: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    return {"parameters": openapi_parameters(name, extra)}


@router.get(
    "/memory",
    response_class=Response,
    responses=SVG,
    openapi_extra=_doc("evaluate", {"config": CONFIG, "accelerator": ACCELERATOR}),
)
def memory(request: Request) -> Response:
    """The planner's memory per GPU as stacked bars against the capacity, with the verdict
    (the evaluate object of the same query)."""
    d = evaluate_object(pairs(request))
    return _svg(lambda out: plots.memory_chart(d, out))


@router.post("/memory", response_class=Response, responses=SVG, openapi_extra=BODY_DOC)
async def memory_post(request: Request) -> Response:
    """`GET /api/figures/memory` with its parameters in a JSON body (:mod:`interface.web.body`):
    the planner page's, whose config.json may be too large for a URL."""
    d = await run_in_threadpool(evaluate_object, await body_pairs(request))
    return _svg(lambda out: plots.memory_chart(d, out))


@router.get("/pipeline", response_class=Response, responses=SVG, openapi_extra=_doc("pipeline"))
def pipeline(request: Request) -> Response:
    """The pipeline timeline per stage (`trainplan pipeline --svg`)."""
    r = pipeline_object(pairs(request))
    return _svg(lambda out: plots.pipeline_chart(r, out))


@router.get("/ckpt-step", response_class=Response, responses=SVG, openapi_extra=_doc("ckpt"))
def ckpt_step(request: Request) -> Response:
    """One step of the checkpointing walk (a frame of `trainplan ckpt --gif`); `step` 1 … 3n,
    default 1."""
    query = pairs(request)
    if not any(k == "step" for k, _ in query):
        query.append(("step", "1"))
    r = ckpt_object(query)
    return _svg(lambda out: plots.ckpt_frame(r, 0, out))


@router.get("/ckpt-held", response_class=Response, responses=SVG, openapi_extra=_doc("ckpt"))
def ckpt_held(request: Request) -> Response:
    """Tensors held over time against no checkpointing (`trainplan ckpt --chart`)."""
    r = ckpt_object([(k, v) for k, v in pairs(request) if k != "step"])
    return _svg(lambda out: plots.held_chart(r, out))


_SEARCHED = {
    "dp": "dp",
    "tp": "tp",
    "pp": "pp",
    "cp": "cp",
    "ep": "ep",
    "zero_stage": "zero",
    "recompute": "recompute",
    "micro_batch_size": "micro-batch",
    "schedule": "schedule",
    "virtual_stages": "virtual-stages",
    "framework": "framework",
    "gpu": "gpu",
    "global_batch_size": "global-batch",
    "seq_len": "seq-len",
    "rank_order": "rank-order",
    "cp_kind": "cp-kind",
    "cp_a2a": "cp-a2a",
    "recompute_layers": "recompute-layers",
}
"""A layout's fields (a search answer's or a frontier row's) as the planner's query names: the
searched decisions, the CP flavour, and a per-stage plan's recomputed layers per stage (lists as
the planner's comma-separated form); a per-stage plan's split goes as its ``chunk_layers`` (per
model chunk: a stage's total need not divide by v)."""


def _query_value(value: Any) -> str:
    """A layout field as the planner's query writes it: lists comma-separated (``38,42``)."""
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


_NOT_CARRIED = {"gpus", "stage-layers", *_SEARCHED.values()}


URL_LIMIT = 8000
"""Characters of a link's URL over which the frontier chart's point links leave the uploaded
``config`` out (the page's POST threshold, ``POST_LIMIT`` in interface/web/static/app.js: a
385 KB config.json in each point's link made the SVG megabytes, and a click a GET the HTTP
server refuses with a bare 400); the page gives those points the table's links, which open the
planner with the file from the tab's storage."""


def planner_link(
    query: list[tuple[str, str]], row: dict[str, Any], limit: int | None = None
) -> str:
    """The planner page of a frontier point: the search's model and cluster options (those the
    planner has, the uploaded ``config`` among them) with the point's layout, so the planner shows
    the point's figures. With ``limit`` (characters), a link longer than it leaves ``config``
    out (:data:`URL_LIMIT`)."""
    planner = {q.name for q in query_params("evaluate")} | set(API_ONLY["evaluate"])
    kept = [(k, v) for k, v in query if k.replace("_", "-") in planner - _NOT_CARRIED]
    layout = [
        (name, _query_value(row[key]))
        for key, name in _SEARCHED.items()
        if row.get(key) is not None
    ]
    if row.get("recompute_layers") is not None and row.get("chunk_layers"):
        layout.append(("stage-layers", _query_value(row["chunk_layers"])))
    link = "/planner?" + urlencode(kept + layout + [("gpus", str(row["num_gpus"]))])
    if limit is not None and len(link) > limit:
        return planner_link([(k, v) for k, v in query if k != "config"], row)
    return link


def planner_links(query: list[tuple[str, str]], obj: dict[str, Any]) -> list[str]:
    """The planner page of each layout in a search's or frontier's object (its answer and the
    next ones, or its points, in order); none for an infeasible one."""
    if "points" in obj:
        rows = obj["points"]
    else:
        answers = obj.get("answers") or ([obj, *obj.get("top", [])] if "layout" in obj else [])
        rows = [
            {**a["layout"], "gpu": a["gpu"]["name"], "num_gpus": a["num_gpus"]} for a in answers
        ]
    return [planner_link(query, r) for r in rows]


def _frontier_svg(query: list[tuple[str, str]]) -> Response:
    """The frontier chart of ``query`` (each point a link to its layout on the planner page), or
    the infeasible search's object, HTTP 409."""
    result = frontier_run(query)
    if isinstance(result, InfeasibleError):
        return json_response(run_object(result), 409)
    rows, against = result.json["points"], result.json["against"]
    links = [planner_link(query, r, URL_LIMIT) for r in rows]
    return _svg(lambda out: plots.frontier_chart(rows, against, out, links, listed=False))


def _frontier_csv(query: list[tuple[str, str]]) -> Response:
    """The frontier of ``query`` as CSV (a download), or the infeasible search's object, 409."""
    result = frontier_run(query)
    if isinstance(result, InfeasibleError):
        return json_response(run_object(result), 409)
    return Response(
        csv_text(result.json["points"]),
        media_type="text/csv",
        headers={"Content-Disposition": 'attachment; filename="frontier.csv"'},
    )


@router.get(
    "/frontier",
    response_class=Response,
    responses=SVG,
    openapi_extra=_doc("frontier", {"config": CONFIG}),
)
def frontier(request: Request) -> Response:
    """The frontier chart (`trainplan frontier --png x.svg`), each point a link to its layout on
    the planner page."""
    return _frontier_svg(pairs(request))


@router.post("/frontier", response_class=Response, responses=SVG, openapi_extra=BODY_DOC)
async def frontier_post(request: Request) -> Response:
    """`GET /api/figures/frontier` with its parameters in a JSON body (:mod:`interface.web.body`):
    the frontier page's, whose config.json may be too large for a URL."""
    return await run_in_threadpool(_frontier_svg, await body_pairs(request))


@router.get(
    "/frontier.csv",
    response_class=Response,
    responses=CSV,
    openapi_extra=_doc("frontier", {"config": CONFIG}),
)
def frontier_csv(request: Request) -> Response:
    """The frontier as CSV, as `trainplan frontier --csv` writes it (a download)."""
    return _frontier_csv(pairs(request))


@router.post("/frontier.csv", response_class=Response, responses=CSV, openapi_extra=BODY_DOC)
async def frontier_csv_post(request: Request) -> Response:
    """`GET /api/figures/frontier.csv` with its parameters in a JSON body: the frontier page's
    download when its query is too long for a URL."""
    return await run_in_threadpool(_frontier_csv, await body_pairs(request))
