"""The JSON API: each endpoint is the command of the same name with ``--json``, key for key (an
estimate's notes name the page's fields where the command line's name its flags,
:func:`interface.flags.on_page`).

Every endpoint parses its query as the command's options (:mod:`interface.web.params`), calls the
shared function the command calls (:mod:`interface.commands`, :mod:`interface.tabs`) and answers
its object. Bad input raises a :class:`~model.errors.PlannerError`, which the app answers with HTTP
422 and ``{"error": …}``, the line ``trainplan`` prints after ``Error:`` with each flag written
as its query key (:func:`error_line`). A search or frontier with
no layout that fits answers 200 with the CLI's ``status: "infeasible"`` object (the CLI exits 1:
the input was good, the answer is no). ``/api/search`` and ``/api/frontier`` are served by
:mod:`interface.web.stream`, which runs them in a process of their own that stops when the client
goes away; so is ``/api/rlhf-plan``, the RLHF placement search.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from functools import lru_cache
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from trainplan.interface import commands, tabs
from trainplan.interface.cli.query import query_params
from trainplan.interface.flags import as_fields, on_page, refusal, typed_on_page
from trainplan.interface.requests import constraints_of, evaluate_request, search_request
from trainplan.interface.rlhf.plan import plan_problem, plan_request, rlhf_plan_json
from trainplan.interface.tab_requests import TAB_REQUESTS, tab_request
from trainplan.interface.web.body import BODY_DOC, body_pairs
from trainplan.interface.web.params import (
    API_COMMANDS,
    TERMINAL_ONLY,
    openapi_parameters,
    parse,
)
from trainplan.model.errors import InfeasibleError, InputError, PlannerError, check_applicable

__all__ = [
    "router",
    "evaluate_object",
    "search_run",
    "frontier_run",
    "json_response",
    "pairs",
    "error_line",
    "rlhf_plan_check",
    "rlhf_plan_object",
]

router = APIRouter(prefix="/api", tags=["API: the CLI's --json objects"])

BAD_INPUT: dict[int | str, dict[str, Any]] = {
    422: {
        "description": "Bad input: the one line the CLI prints after `Error:`, naming the "
        "parameter, the value and the rule",
        "content": {
            "application/json": {
                "example": {"error": "tp: '0' must be at least 1"},
            }
        },
    }
}
CONFIG = (
    "The text of a Hugging Face config.json (Llama, Mistral, Mixtral, Qwen2, DeepSeek-V3 keys), "
    "instead of model or params: the upload of the planner, the search and the frontier"
)
ACCELERATOR = (
    "A part the accelerator table lacks, instead of gpu: a JSON object with the keys of an "
    "accelerator file (`trainplan gpus --file`; topology/accelerators.toml's, plus base and like), "
    'e.g. {"base": "H100-SXM", "name": "H100-600W", "bf16_tflops": 900, "source": "our '
    'measurement"}'
)
API_ONLY = {"evaluate": ("config", "accelerator"), "search": ("config",), "frontier": ("config",)}
"""Per command, the API's parameters that no option of the command gives (the planner's, the
search's and the frontier's uploaded ``config``; the planner's inline ``accelerator``): a page's
link may carry them too (:func:`interface.web.links.names`)."""
_MODEL_KEYS = (
    *("model", "params", "arch", "layers", "hidden", "heads", "kv_heads", "head_dim"),
    *("ffn_hidden", "vocab"),
)


def pairs(request: Request) -> list[tuple[str, str]]:
    """The query as (name, value) pairs, repeats kept in order."""
    return list(request.query_params.multi_items())


def json_response(data: Any, status: int = 200) -> Response:
    """``data`` as the CLI's ``--json`` writes it (exact integers, Fractions as numbers)."""
    return Response(commands.to_json(data, None), status, media_type="application/json")


def _doc(name: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    return {"parameters": openapi_parameters(name, extra)}


def evaluate_object(query: list[tuple[str, str]]) -> dict[str, Any]:
    """``trainplan evaluate --json`` of the query (with ``config``: the uploaded model)."""
    params, own = parse("evaluate", query, API_ONLY["evaluate"])
    params.pop("as_json")
    per_stage = params.pop("per_stage")
    if "config" in own:
        why = "the uploaded config.json is the model; give the config, a model or a size"
        check_applicable({k: params.get(k) for k in _MODEL_KEYS}, dict.fromkeys(_MODEL_KEYS, why))
        params["model_spec"] = commands.uploaded_model(own["config"])
    if "accelerator" in own:
        why = "the accelerator object is the part; give it or a gpu name, not both"
        check_applicable({"gpu": params.get("gpu")}, {"gpu": why})
        params["gpu"] = commands.inline_accelerator(own["accelerator"])
    out = commands.evaluate_json(evaluate_request(params, per_stage))
    fields = page_fields("evaluate")
    out["notes"] = [on_page(note, fields) for note in out["notes"]]
    return out


@lru_cache(maxsize=16)
def page_fields(name: str) -> frozenset[str]:
    """The query parameters of command ``name`` (the page's form fields are named as them)."""
    return frozenset(q.name for q in query_params(name, TERMINAL_ONLY))


@lru_cache(maxsize=1)
def api_fields() -> frozenset[str]:
    """Every query key of the API's commands (:data:`~interface.web.params.API_COMMANDS`)."""
    return frozenset().union(*(page_fields(name) for name in API_COMMANDS))


def error_line(err: PlannerError, path: str = "", pairs: Collection[tuple[str, str]] = ()) -> str:
    """The API's line refusing bad input (HTTP 422, a stream's ``error`` event): the command
    line's, each flag that is a query key written as that key (``--tp: '0' …`` as ``tp: '0' …``,
    ``--set host_link_gbps`` as ``host-link-gbps``; :func:`interface.flags.on_page`), so it names
    what the API's user typed and the page's field it belongs next to. ``path`` (the request's,
    ``/api/pipeline``): the keys of that command only, so a parameter two commands spell apart
    is named as this one's field — the pipeline's ``stages``, not evaluate's ``pp``
    (``microbatches: 6 must be a multiple of stages = 4``), and a flag of another command as
    that command's key after (``/api/rlhf-plan?algorithm=dpo``: DPO's textbook accounting takes
    ``policy-params``, ``/api/rlhf``'s); else every command's keys. ``pairs`` (the request's
    query, a POST body's included): the head parameter and a percent named as typed
    (:func:`interface.flags.typed_on_page`)."""
    name = path.removeprefix("/api/").partition("/")[0]
    fields = page_fields(name) if name in API_COMMANDS else api_fields()
    line = as_fields(refusal(str(err), fields, web=True), api_fields())
    return typed_on_page(line, pairs, fields)


_RESULTS: OrderedDict[tuple[Any, ...], commands.SearchRun | InfeasibleError] = OrderedDict()
_RESULTS_LOCK = threading.Lock()
CACHED_RESULTS = 32
"""Searches and frontiers kept by their parsed inputs (deterministic: a fixed seed), so the page's
figure and CSV download reuse the run the page showed."""


def _key(kind: str, kw: dict[str, Any]) -> tuple[Any, ...]:
    return (kind, *sorted((k, repr(v)) for k, v in kw.items() if k != "as_json"))


def run_key(kind: str, query: list[tuple[str, str]]) -> tuple[Any, ...]:
    """The cache key of a ``search`` or ``frontier`` query (its parsed inputs, the uploaded
    config's text among them).

    Raises
    ------
    PlannerError
        What the command refuses while reading its options.
    """
    return _run_options(kind, query)[1]


def _run_options(kind: str, query: list[tuple[str, str]]) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """(``search``'s or ``frontier``'s options as :func:`search_request` takes them, their cache
    key): with ``config`` (the page's upload), the model is the file's
    (:func:`interface.commands.uploaded_model`, as ``evaluate``'s), given to the request as a
    scenario value (``model_spec``) that the options' model keys may not also give.

    Raises
    ------
    PlannerError
        What the command refuses while reading its options; ``config`` with a model, a size or
        dimensions; a config the reader refuses (naming the key).
    """
    kw, own = parse(kind, query, API_ONLY[kind])
    # the query's constraints refused here, before a job's process and its tables start (the
    # job reads them again with a scenario's: interface.requests.search_request)
    constraints_of({k: kw.get(k) for k in ("headroom", "min_mfu")})
    key = _key(kind, {**kw, **own})
    if "config" in own:
        why = "the uploaded config.json is the model; give the config, a model or a size"
        check_applicable({k: kw.get(k) for k in _MODEL_KEYS}, dict.fromkeys(_MODEL_KEYS, why))
        kw["scenario"] = {"model_spec": commands.uploaded_model(own["config"])}
    return kw, key


def cached(key: tuple[Any, ...]) -> commands.SearchRun | InfeasibleError | None:
    """The kept result for ``key``, or None."""
    with _RESULTS_LOCK:
        if key in _RESULTS:
            _RESULTS.move_to_end(key)
            return _RESULTS[key]
    return None


def remember(key: tuple[Any, ...], result: commands.SearchRun | InfeasibleError) -> None:
    """Keep ``result`` for ``key`` (the last :data:`CACHED_RESULTS`)."""
    with _RESULTS_LOCK:
        _RESULTS[key] = result
        while len(_RESULTS) > CACHED_RESULTS:
            _RESULTS.popitem(last=False)


def cached_run(key: tuple[Any, ...], run: Callable[[], commands.SearchRun]) -> Any:
    """``run()``'s SearchRun (or its InfeasibleError, returned) for the inputs ``key``
    (:func:`_key`), computed once."""
    hit = cached(key)
    if hit is not None:
        return hit
    try:
        result: commands.SearchRun | InfeasibleError = run()
    except InfeasibleError as err:
        result = err
    remember(key, result)
    return result


def search_run(query: list[tuple[str, str]], **progress: Any) -> Any:
    """The SearchRun (or InfeasibleError) of ``trainplan search`` for the query; ``progress``:
    :func:`interface.commands.search_json`'s ``on_tables`` and ``on_solution``."""
    kw, key = _run_options("search", query)
    top, maximize = kw.pop("top"), kw.pop("maximize")
    request = search_request(kw, "params" if maximize else None)
    if request.per_stage:  # the CLI's search --per-stage --json object
        if top != 1 or maximize:
            raise InputError("per_stage: takes neither --top nor --maximize (one plan, step time)")
        return cached_run(key, lambda: commands.per_stage_json(request))
    return cached_run(
        key, lambda: commands.search_json(request, top, maximize, web=True, **progress)
    )


def frontier_run(query: list[tuple[str, str]], **progress: Any) -> Any:
    """The SearchRun (or InfeasibleError) of ``trainplan frontier`` for the query."""
    kw, key = _run_options("frontier", query)
    against, on_tables = kw.pop("against"), progress.get("on_tables")
    searches = kw.pop("per_stage_searches", None)
    request = search_request(kw)
    commands.check_searches_apply(searches, request.per_stage)
    if request.per_stage:  # the CLI's frontier --per-stage --json object
        return cached_run(
            key, lambda: commands.per_stage_frontier_json(request, against, None, searches)
        )
    return cached_run(key, lambda: commands.frontier_json(request, against, on_tables, web=True))


def rlhf_plan_check(query: list[tuple[str, str]]) -> None:
    """Read an ``rlhf-plan`` query as the command reads its options, before its job starts
    (:mod:`interface.web.stream`): the workload, the model, the accelerator.

    Raises
    ------
    PlannerError
        What ``trainplan rlhf-plan`` refuses while reading its options
        (:func:`interface.rlhf.plan.plan_request`, :func:`~interface.rlhf.plan.plan_problem`).
    """
    kw, _ = parse("rlhf-plan", query)
    plan_problem(plan_request(kw))


def rlhf_plan_object(
    query: list[tuple[str, str]], progress: Callable[[str, int, int], None] | None = None
) -> dict[str, Any]:
    """``trainplan rlhf-plan --json`` of the query, the search run whole within its
    ``time-limit`` (:func:`interface.rlhf.plan.rlhf_plan_json`); no placement fits: the command's
    ``status: "infeasible"`` object. ``progress(stage, done, total)``: the search's, as
    :func:`optimizer.rlhf.search.search_placement` calls it (``tables`` per pool size and role,
    then ``solve`` per CP-SAT solve of 3). The no-fit lines name the page's fields
    (:func:`interface.flags.on_page`)."""
    kw, _ = parse("rlhf-plan", query)
    out = rlhf_plan_json(kw, progress, web=True)
    if "explanation" in out:
        fields = page_fields("rlhf-plan")
        out["explanation"] = [on_page(line, fields) for line in out["explanation"]]
    return out


def run_object(result: Any) -> dict[str, Any]:
    """A SearchRun's JSON object, or the CLI's infeasible object; each answer's notes, search's
    ``time_limit_note`` and ``params_note``, and the per-stage frontier's ``proof`` name the
    page's fields where the command line's name its flags (:func:`interface.flags.on_page`)."""
    fields = page_fields("search")
    if isinstance(result, InfeasibleError):
        out = commands.infeasible_json(result, web=True)
        return {**out, "explanation": [on_page(line, fields) for line in out["explanation"]]}
    out = dict(result.json)

    def paged(answer: dict[str, Any]) -> dict[str, Any]:
        notes = answer.get("notes")
        return answer if notes is None else {**answer, "notes": [on_page(n, fields) for n in notes]}

    for key in ("top", "answers"):
        if key in out:
            out[key] = [paged(a) for a in out[key]]
    if "proof" in out:  # the per-stage frontier's headline: its --per-stage-searches as the field
        out["proof"] = on_page(out["proof"], page_fields("frontier"))
    for key in ("time_limit_note", "params_note"):  # search's: "a longer time-limit"
        if out.get(key):
            out[key] = on_page(out[key], fields)
    return paged(out)


@router.get(
    "/evaluate",
    responses=BAD_INPUT,
    openapi_extra=_doc("evaluate", {"config": CONFIG, "accelerator": ACCELERATOR}),
)
def evaluate(request: Request) -> Response:
    """The planner, `trainplan evaluate --json`: memory per GPU, ZeRO table, traffic per axis,
    bubble, step time, MFU/HFU, assumptions, defaults used."""
    return json_response(evaluate_object(pairs(request)))


@router.post("/evaluate", responses=BAD_INPUT, openapi_extra={**_doc("evaluate", {}), **BODY_DOC})
async def evaluate_post(request: Request) -> Response:
    """`GET /api/evaluate` with its parameters in a JSON body (:mod:`interface.web.body`): for a
    config.json too large for a URL."""
    query = await body_pairs(request)
    return json_response(await run_in_threadpool(evaluate_object, query))


def _tab(name: str, query: list[tuple[str, str]], drop: tuple[str, ...]) -> dict[str, Any]:
    kw, _ = parse(name, query)
    for key in ("as_json", *drop):
        kw.pop(key, None)
    return tabs.TAB_REPORTS[name](tab_request(TAB_REQUESTS[name], kw))


def pipeline_object(query: list[tuple[str, str]]) -> dict[str, Any]:
    """``trainplan pipeline --json`` of the query (the last few kept: a long timeline takes
    seconds, and the page asks for its figures and numbers separately)."""
    return _pipeline_cached(tuple(query))


@lru_cache(maxsize=8)
def _pipeline_cached(query: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    return _tab("pipeline", list(query), ("width", "png", "svg"))


TIMELINE = (
    "true (default) or false: false leaves out `timeline`, the passes of every stage (65,536 of "
    "them at 64 stages × 512 micro-batches), when only the figures are wanted"
)


def ckpt_object(query: list[tuple[str, str]]) -> dict[str, Any]:
    """``trainplan ckpt --json`` of the query."""
    return _tab("ckpt", query, ("play", "delay", "gif", "chart"))


@router.get(
    "/pipeline", responses=BAD_INPUT, openapi_extra=_doc("pipeline", {"timeline": TIMELINE})
)
def pipeline(request: Request) -> Response:
    """Pipeline bubble, `trainplan pipeline --json`: the simulated timeline per stage, the bubble
    both ways with their formulas, micro-batches held per stage."""
    query = pairs(request)
    own = [v for k, v in query if k == "timeline"]
    r = pipeline_object([(k, v) for k, v in query if k != "timeline"])
    if own:
        if len(own) > 1 or own[0].strip().lower() not in ("true", "false"):
            raise InputError(f"timeline: {', '.join(map(repr, own))} must be true or false")
        if own[0].strip().lower() == "false":
            r = {k: v for k, v in r.items() if k != "timeline"}
    return json_response(r)


@router.get("/mfu", responses=BAD_INPUT, openapi_extra=_doc("mfu"))
def mfu(request: Request) -> Response:
    """MFU and HFU, `trainplan mfu --json`: from a measured step, a throughput or a FLOP rate;
    attention FLOPs and recomputation."""
    return json_response(_tab("mfu", pairs(request), ()))


@router.get("/ckpt", responses=BAD_INPUT, openapi_extra=_doc("ckpt"))
def ckpt(request: Request) -> Response:
    """Activation checkpointing, `trainplan ckpt --json`: every step of the walk, the peak held
    against no checkpointing, the recompute overhead, tensors held over time."""
    return json_response(ckpt_object(pairs(request)))


@router.get("/rlhf", responses=BAD_INPUT, openapi_extra=_doc("rlhf"))
def rlhf(request: Request) -> Response:
    """RLHF, `trainplan rlhf --json`: the networks' resident memory, FLOPs and time by phase."""
    kw, _ = parse("rlhf", pairs(request))
    return json_response(commands.rlhf_json(kw))


@router.get("/gpus", responses=BAD_INPUT)
def gpus(request: Request) -> Response:
    """The accelerator table, `trainplan gpus --json`, each row with its source."""
    parse("gpus", pairs(request))
    return json_response(commands.gpus_json())


@router.get("/models", responses=BAD_INPUT)
def models(request: Request) -> Response:
    """The model catalogue, `trainplan models --json`, each model with its source."""
    parse("models", pairs(request))
    return json_response(commands.models_json())
