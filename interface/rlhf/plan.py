"""``trainplan rlhf-plan`` as plain data, one path for the command line and the web API
(``/api/rlhf-plan``): the command's parsed options made its request
(:class:`~interface.tab_requests.RLHFPlanRequest`), the placement problem of that request
(:class:`~optimizer.rlhf.tables.RLHFProblem`, the workload read by
:func:`interface.rlhf.faithful.rlhf_inputs`), and the JSON object of the search's answer
(:func:`interface.rlhf.report.result_dict`) or of its proof that nothing fits.

The command line wraps the search in its Ctrl-C handling and its progress bar
(:mod:`interface.cli.rlhf`); the API runs it whole (:func:`rlhf_plan_json`), bounded by the same
``time_limit`` option.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trainplan.interface.flags import with_flags
from trainplan.interface.requests import startup_seconds
from trainplan.interface.rlhf.faithful import RLHFInputs, rlhf_inputs
from trainplan.interface.rlhf.report import result_dict
from trainplan.interface.tab_requests import RLHFPlanRequest, RLHFRequest, tab_request
from trainplan.interface.tab_values import jsonable
from trainplan.model.errors import InfeasibleError
from trainplan.optimizer.rlhf.search import search_placement
from trainplan.optimizer.rlhf.tables import RLHFProblem

__all__ = ["SEARCH_OPTIONS", "plan_request", "plan_problem", "plan_json", "infeasible_json",
           "rlhf_plan_json"]  # fmt: skip

SEARCH_OPTIONS = ("offload", "time_limit", "workers", "started")
"""``rlhf-plan``'s own options (the search's), beside the workload options it shares with
``trainplan rlhf`` (:class:`~interface.tab_requests.RLHFRequest`)."""
_DISPLAY = ("as_json", "width")
"""Options of the output only: ``--json`` and the text timeline's ``--width``."""


def plan_request(kw: Mapping[str, Any]) -> RLHFPlanRequest:
    """The request of ``rlhf-plan``'s parsed options by name (click's parameters, or the web's
    query parsed as them): the workload's options (text, read by the RLHF tab's parser),
    ``offload`` (bool: let trainable roles offload), ``time_limit`` (seconds, a positive number,
    or None: no limit), ``workers`` (CP-SAT threads, a count), ``started`` (the
    :func:`time.perf_counter` reading the limit counts from; None: the search's start);
    ``as_json`` and ``width`` are ignored.

    Raises
    ------
    InputError
        A name that is not an option of the workload (:func:`interface.tab_requests.tab_request`).
    """
    work = {k: v for k, v in kw.items() if k not in (*SEARCH_OPTIONS, *_DISPLAY)}
    limit = kw.get("time_limit")
    return RLHFPlanRequest(
        tab_request(RLHFRequest, work),
        bool(kw.get("offload", True)),
        float(limit) if limit else None,
        int(kw.get("workers", 2)),
        kw.get("started"),
    )


def plan_problem(request: RLHFPlanRequest) -> tuple[RLHFInputs, RLHFProblem]:
    """(the workload read, the placement problem) of ``request``: the spec, the accelerator, the
    GPUs and their links of :func:`interface.rlhf.faithful.rlhf_inputs` (no placement options:
    the search chooses the placement), with the request's ``offload``.

    Raises
    ------
    InputError, ScenarioError
        A bad workload value, an unknown model or accelerator (:func:`rlhf_inputs`).
    """
    inp = rlhf_inputs(request.workload, placement=False)
    return inp, RLHFProblem(inp.spec, inp.device, inp.gpus, inp.links, offload=request.offload)


def plan_json(inp: RLHFInputs, result: Any, interrupted: bool = False) -> dict[str, Any]:
    """``rlhf-plan --json`` of a finished search: :func:`interface.rlhf.report.result_dict`
    (the workload, ``status``, ``best``, ``colocated``, ``split``, the solve times…) made JSON
    values, with ``interrupted``: True when Ctrl-C stopped the search (the command line only)."""
    out: dict[str, Any] = jsonable(result_dict(inp, result))
    out["interrupted"] = interrupted
    return out


def infeasible_json(err: InfeasibleError, web: bool = False) -> dict[str, Any]:
    """``rlhf-plan --json`` when no placement fits (proven): ``status: "infeasible"``, the
    ``explanation`` (one line per role that fits no pool on its own; each backticked parameter
    as its flag, ``web``: as the web's, :func:`interface.flags.with_flags`) and the ``message``."""
    lines = [with_flags(line, web) for line in err.explanation]
    return {"status": "infeasible", "explanation": lines, "message": str(err)}


def rlhf_plan_json(
    kw: Mapping[str, Any],
    progress: Callable[[str, int, int], None] | None = None,
    web: bool = False,
) -> dict[str, Any]:
    """``trainplan rlhf-plan --json`` of the command's parsed options, the search run whole
    within ``time_limit`` (out of time: ``status`` ``feasible`` with the best found, or
    ``unknown`` with none, never ``infeasible``; :func:`optimizer.rlhf.search.search_placement`);
    no placement fits: :func:`infeasible_json`. ``progress(stage, done, total)``: as
    ``search_placement`` takes it; ``web``: the no-fit lines name parameters as the web does.
    With a time limit, ``startup_seconds`` as the command prints it (the seconds from
    ``started`` to the search, which the limit counts; 0 where the limit counts from the
    search's start, as the web API's does).

    Raises
    ------
    InputError, ScenarioError
        Bad input, as the command refuses it (:func:`plan_request`, :func:`plan_problem`).
    """
    request = plan_request(kw)
    inp, problem = plan_problem(request)
    try:
        result = search_placement(problem, request.time_limit, request.workers, progress)
    except InfeasibleError as err:
        return infeasible_json(err, web)
    out = plan_json(inp, result)
    if request.time_limit is not None:  # as the command's: the seconds before the search
        out["startup_seconds"] = startup_seconds(request.started)
    return out
