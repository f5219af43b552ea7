"""The notes and refusals a search answer carries, as its JSON says them: the requested values
no layout uses (:func:`unused_note`), what ``--time-limit`` did (:func:`time_limit_note`) and the
object an infeasible search prints (:func:`infeasible_json`). Read by
:mod:`interface.search_commands` for the command line and the web app alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainplan.interface.flags import flag_for, refusal, with_flags
from trainplan.model.errors import InfeasibleError, ScenarioError

if TYPE_CHECKING:
    from trainplan.optimizer.problem import Problem
    from trainplan.optimizer.tables import CostTables

__all__ = [
    "unused_note", "with_unused", "schedule_note", "time_limit_note", "limit_note", "frontier_cut_note",
    "limit_given", "search_meta", "infeasible_json", "params_meta", "params_note",
    "headroom_note", "headroom_notes", "with_headroom",
]  # fmt: skip


_RULE_HEADS = frozenset(
    flag_for(n) for n in ("tp", "pp", "cp", "ep", "zero_stage", "cp_kind", "framework")
)
"""The flags the rules :func:`optimizer.axis_rules.value_refusal` names start with."""


def unused_note(unused: Sequence[tuple[str, int | str, str]]) -> str | None:
    """The one note line naming the values the user asked for that no layout uses, and why
    (:func:`optimizer.axis_rules.unused_values`; the rule as a refusal words it on the command
    line, :func:`interface.flags.refusal`), or None when there are none.

    Examples
    --------
    >>> unused_note([("tp", 3, "tp: 3 does not divide num_attention_heads = 64")])
    'requested values no layout uses: tp 3 (--tp: 3 does not divide num_attention_heads = 64)'
    """
    if not unused:
        return None
    each = [f"{axis} {v} ({refusal(why, _RULE_HEADS)})" for axis, v, why in unused]
    return "requested values no layout uses: " + "; ".join(each)


def schedule_note(schedules: Sequence[Any], layout: Any) -> str | None:
    """The note for an answer without a pipeline (``layout``'s ``pp`` 1) when the schedules
    searched (``schedules``, the space's) leave out ``1f1b``, the one name a pp 1 layout takes
    (:func:`optimizer.space._schedules`: at pp 1 the schedules coincide): the schedule asked
    for did not run; None otherwise.

    >>> schedule_note(["zb-v"], {"pp": 1})[:70]
    'the answer has pp 1 (no pipeline), so schedule zb-v does not run: it i'
    >>> schedule_note(["1f1b", "zb-v"], {"pp": 1}) is None
    True
    """
    asked = [str(s) for s in schedules]
    if layout.get("pp") != 1 or "1f1b" in asked:
        return None
    return (
        f"the answer has pp 1 (no pipeline), so schedule {', '.join(asked)} does not run: it is "
        "labelled 1f1b; give `pp` values above 1 to search pipelines only"
    )


def with_unused(err: InfeasibleError, problem: Problem, tables: CostTables) -> InfeasibleError:
    """``err`` (the search found no layout) with :func:`unused_note`'s line last in its
    explanation when the user asked for values no layout uses (:func:`optimizer.axis_rules.
    unused_values` over the search's own ``tables``): the answer said with a layout says it, so
    does the one without (each value with the rule that refuses it); ``err`` itself otherwise."""
    from trainplan.optimizer.axis_rules import unused_values

    note = unused_note(unused_values(problem, tables))
    if note is None:
        return err
    return InfeasibleError(str(err), [*err.explanation, note], err.status)


def headroom_note(constraints: Any, capacity_bytes: int) -> str | None:
    """What ``--headroom`` did to the search, said beside its answer (None without it): every
    candidate was held to :meth:`optimizer.problem.Constraints.held_bytes` of its usable
    ``capacity_bytes``, so a faster layout that fits the GPU but not that may have been left out;
    the answer's own verdict is against the whole capacity.

    >>> from trainplan.optimizer.problem import Constraints
    >>> note = headroom_note(Constraints(headroom=0.1), 83_210_009_600)
    >>> note[:56], "90% of the 83.21 GB usable (10% kept free)" in note
    ('--headroom 0.1: only layouts that fit 74.89 GB per GPU w', True)
    >>> headroom_note(Constraints(), 83_210_009_600) is None
    True
    """
    from trainplan.interface.render.report import gb

    h = constraints.headroom
    if not h:
        return None
    return (
        f"--headroom {h:g}: only layouts that fit {gb(constraints.held_bytes(capacity_bytes))} "
        f"per GPU were searched, {(1 - h) * 100:g}% of the {gb(capacity_bytes)} usable "
        f"({h * 100:g}% kept free); the verdict compares the peak with the whole "
        f"{gb(capacity_bytes)}"
    )


def headroom_notes(constraints: Any, rows: Sequence[dict[str, Any]]) -> list[str]:
    """:func:`headroom_note` for a frontier's points ``rows`` (each with its ``capacity_bytes``,
    :func:`interface.render.report.frontier_row`): one note per GPU capacity among them, in the
    order first met; none without ``--headroom``.

    >>> from trainplan.optimizer.problem import Constraints
    >>> rows = [{"capacity_bytes": 83_210_009_600}] * 2
    >>> [n[:40] for n in headroom_notes(Constraints(headroom=0.5), rows)]
    ['--headroom 0.5: only layouts that fit 41']
    >>> headroom_notes(Constraints(), rows)
    []
    """
    notes = (headroom_note(constraints, r["capacity_bytes"]) for r in rows)
    return [n for n in dict.fromkeys(notes) if n]


def with_headroom(err: InfeasibleError, constraints: Any) -> InfeasibleError:
    """``err`` (the search found no layout) with a last line saying what ``--headroom`` held the
    memory to, as its answer would (:func:`headroom_note`): its memory line's figure is the
    usable capacity less the headroom; ``err`` itself without one."""
    h = constraints.headroom
    if not h:
        return err
    line = f"--headroom {h:g}: that memory is {(1 - h) * 100:g}% of the GPU's usable bytes ({h * 100:g}% kept free)"
    return InfeasibleError(str(err), [*err.explanation, line], err.status)


def time_limit_note(
    limit: float | None,
    tables_s: float,
    solve_s: float,
    cut: str | None = None,
    before_s: float = 0.0,
) -> str | None:
    """What ``--time-limit`` did when the search took longer (None when it held, or none was
    given): ``cut`` (:meth:`optimizer.tables.CostTables.cut`) the shapes it left out of the cost
    tables, which are filled in blocks of :func:`optimizer.tables.block_shapes` shapes with the
    limit looked at between blocks once some candidate meets the constraints; and CP-SAT gets at least
    :data:`optimizer.search.SOLVE_FLOOR_S` to read an answer. ``before_s``: the command's seconds
    before its search began (loading the model, the accelerator, the solver), which the limit
    counts too (:attr:`interface.requests.SearchRequest.started`).

    >>> time_limit_note(2.0, 0.5, 0.1, None, 1.0) is None
    True
    >>> time_limit_note(2.0, 1.2, 0.1, None, 1.0)[:71]
    'the time limit of 2 s was passed (1.00 s of start-up + 1.20 s of cost t'
    """
    from trainplan.optimizer.search import SOLVE_FLOOR_S
    from trainplan.optimizer.table_blocks import (
        BLOCK_SHAPES,
        FIRST_BLOCK_SHAPES,
        MIN_BLOCK_SHAPES,
    )

    if limit is None or (before_s + tables_s + solve_s <= limit and not cut):
        return None
    startup = f"{before_s:.2f} s of start-up + " if before_s else ""
    if cut:
        return (
            f"{cut}; {startup}{tables_s:.2f} s of cost tables + {solve_s:.2f} s of CP-SAT: the "
            "answer is the best of those, not proven; a longer --time-limit searches the rest"
        )
    return (
        f"the time limit of {limit:g} s was passed ({startup}{tables_s:.2f} s of cost tables + "
        f"{solve_s:.2f} s of CP-SAT): the cost tables are filled in blocks growing from "
        f"{FIRST_BLOCK_SHAPES:,} to {BLOCK_SHAPES:,} shapes (with several jobs, shared among "
        f"them, at least {MIN_BLOCK_SHAPES:,} each), the limit looked at between blocks once a "
        "candidate meets the constraints, "
        f"and CP-SAT is given at least {SOLVE_FLOOR_S:g} s to read an answer; the status says "
        "whether that answer is proven"
    )


def infeasible_json(err: InfeasibleError, web: bool = False) -> dict[str, Any]:
    """What ``search --json`` and ``frontier --json`` print when no layout meets the constraints
    (exit code 1): ``status`` infeasible (or unknown: the time limit ran out before an answer),
    the ``explanation`` lines and the ``message`` (``web``: parameters named as the web API's,
    :func:`interface.flags.with_flags`)."""
    return {
        "status": err.status,
        "explanation": [with_flags(line, web) for line in err.explanation],
        "message": with_flags(str(err), web),
    }


def params_meta(run: Any) -> dict[str, Any]:
    """``params_unproven`` (parameters; null when proven), ``members_probed`` and
    ``params_note`` of a ``params`` search (:class:`optimizer.params_search.ParamsRun`)."""
    from trainplan.optimizer.problem import model_size

    n, probed = len(run.members), run.probed
    note = (
        f"the family's {n:,} members checked largest first: {probed:,} probed; "
        "each larger than the answer does not fit"
        if run.result.params_unproven is None
        else f"{probed:,} of the family's {n:,} members probed"
    )
    if run.problem.jobs and model_size(run.problem.jobs[0]) == max(run.members, default=0):
        note = (  # nothing larger was in the family: the depth cap, not the memory, binds
            f"the answer is the largest of the family's {n:,} members: the depth cap "
            "(max_layers, by default 4 × the model's layers) binds, not the memory; "
            "a deeper member may fit: raise --max-layers"
        )
    return {"params_unproven": run.result.params_unproven, "members_probed": probed,
            "params_note": note + _depth_steps(run)}  # fmt: skip


def _depth_steps(run: Any) -> str:
    """What the note adds on the family's depths (:func:`interface.scenario.family_depths`):
    the step between members, so a depth between two is known untried; "" for a family of
    one member, one whose step is a single layer (a model of under 16 layers: every depth is
    tried), or a model whose depth cannot be read (a config.json that is not found again)."""
    from trainplan.interface.scenario import family_depths
    from trainplan.scenarios.catalogue import get_model

    if not run.problem.jobs:
        return ""
    base = run.problem.jobs[0].case.model.name.split("@L", 1)[0]
    try:
        arch = get_model(base).model.arch
        layers = None if arch is None else arch.num_layers
    except ScenarioError:  # a config.json's family: no catalogue depth to step from
        return ""
    if layers is None:
        return ""
    step = family_depths(layers, None).step
    if len(run.members) < 2 or step == 1:  # one member, or every depth tried: nothing skipped
        return ""
    return (
        f"; members every {step:,} layers (an eighth of {base}'s {layers:,}), "
        "so a depth between two is not tried"
    )


def params_note(result: Any) -> str | None:
    """The ``params`` objective stopped by the time limit: the bracket it proved."""
    bound = result.params_unproven
    if bound is None:
        return None
    return (
        f"--time-limit stopped the family's check: the largest member shown to fit is the answer; "
        f"members up to {bound:,} parameters were not checked (a longer --time-limit proves it)"
    )


def limit_note(result: Any, limit: float | None, before_s: float = 0.0) -> str | None:
    """What the time limit did (:func:`time_limit_note`; a search's ``time_limit_note``,
    ``result`` its :class:`optimizer.search.SearchResult`); under the ``params`` objective the
    family's bracket it left (:func:`params_note`) first, then the cut of the answer's cost
    tables where there is one (a probe cut once it held an allowed candidate)."""
    spent = time_limit_note(
        limit, result.tables_seconds, result.solve_seconds, result.cut, before_s
    )
    bracket = params_note(result)
    if bracket is None:
        return spent
    return f"{bracket}; {spent}" if result.cut else bracket


def frontier_cut_note(cut: str | None, before_s: float = 0.0) -> list[str]:
    """A frontier's note of the shapes a time limit left out of its cost tables
    (:meth:`optimizer.tables.CostTables.cut`; none: []): the layout frontier's
    (:func:`interface.search_commands.frontier_json`) and the per-stage frontier's
    (:mod:`interface.per_stage_frontier_command`), naming the command's ``before_s`` seconds of
    start-up, which the limit counted too (as :func:`time_limit_note` names them).

    >>> frontier_cut_note("cut", 1.5)[0][:48]
    'cut; 1.50 s of start-up counted by the limit: th'
    """
    if cut is None:
        return []
    startup = f"; {before_s:.2f} s of start-up counted by the limit" if before_s else ""
    return [
        f"{cut}{startup}: the points are the frontier of those shapes, not proven; a longer "
        "--time-limit searches the rest"
    ]


def frontier_limit_notes(
    cut: str | None, limit: float | None, result: Any, before_s: float = 0.0
) -> list[str]:
    """What ``--time-limit`` (``limit``, seconds) did to the layout frontier
    (:func:`interface.search_commands.frontier_json`; ``result`` its
    :class:`optimizer.search.FrontierResult`, whose ``tables_seconds`` and ``solve_seconds`` are
    its seconds of cost tables and of CP-SAT): the shapes it left out of the cost tables
    (``cut``, :meth:`optimizer.tables.CostTables.cut`: :func:`frontier_cut_note`), or, where it
    cut none but the tables and CP-SAT took longer than the limit, the note the search prints
    (:func:`time_limit_note`; ``before_s`` the command's seconds before it, which the limit
    counts); [] when the limit held or none was given.

    >>> from types import SimpleNamespace as Seconds
    >>> frontier_limit_notes(None, 5.0, Seconds(tables_seconds=1.0, solve_seconds=2.0))
    []
    >>> frontier_limit_notes(None, None, Seconds(tables_seconds=9.0, solve_seconds=2.0))
    []
    >>> frontier_limit_notes(None, 5.0, Seconds(tables_seconds=5.5, solve_seconds=1.0))[0][:44]
    'the time limit of 5 s was passed (5.50 s of '
    """
    if cut is not None:
        return frontier_cut_note(cut, before_s)
    spent = time_limit_note(limit, result.tables_seconds, result.solve_seconds, None, before_s)
    return [] if spent is None else [spent]


def per_stage_limit_notes(
    cuts: Sequence[str], limit: float | None, seconds: float, before_s: float = 0.0
) -> list[str]:
    """What ``--time-limit`` (``limit``, seconds) did to the per-stage frontier
    (:mod:`interface.per_stage_frontier_command`; ``seconds`` its own wall-clock seconds,
    ``before_s`` the command's before it, which the limit counts too): the
    shapes it left out of each search's cost tables (``cuts``: :func:`frontier_cut_note`), or,
    where it cut none but the frontier took longer than the limit, what the limit could not
    stop (:mod:`optimizer.per_stage_frontier`: the cost tables are filled before the first
    per-stage search, which is given at least :data:`optimizer.search.SOLVE_FLOOR_S` to read a
    point, and the limit is looked at between searches), as the layout frontier says it
    (:func:`frontier_limit_notes`); [] when the limit held or none was given.

    >>> per_stage_limit_notes([], 5.0, 3.0), per_stage_limit_notes([], None, 9.0)
    ([], [])
    >>> per_stage_limit_notes([], 1.0, 2.68)[0][:54]
    'the time limit of 1 s was passed (2.68 s of the fronti'
    >>> per_stage_limit_notes([], 1.0, 0.6, 0.5)[0][:70]
    'the time limit of 1 s was passed (0.50 s of start-up + 0.60 s of the f'
    """
    from trainplan.optimizer.search import SOLVE_FLOOR_S

    if cuts:
        return [note for cut in cuts for note in frontier_cut_note(cut, before_s)]
    if limit is None or before_s + seconds <= limit:
        return []
    startup = f"{before_s:.2f} s of start-up + " if before_s else ""
    return [
        f"the time limit of {limit:g} s was passed ({startup}{seconds:.2f} s of the frontier's "
        "searches): the limit is "
        "looked at between the cost tables' blocks and between per-stage searches, and the "
        f"first per-stage search is given at least {SOLVE_FLOOR_S:g} s to read a point; each "
        "point's plan says whether it is proven"
    ]


def limit_given(err: InfeasibleError, left: float | None, limit: float | None) -> InfeasibleError:
    """``err`` (the ``params`` scan's "no member … within the time limit (S s)", S the seconds
    the search was given: :func:`interface.requests.seconds_left`) naming the ``limit`` the user
    gave and that it counts from the command's start (None: a limit counted from the search's
    start, ``err`` as it is); other errors as they are.

    >>> str(limit_given(InfeasibleError("nothing within the time limit (0.8 s)"), 0.8, 2.0))
    "nothing within the time limit (2 s, counted from the command's start)"
    """
    said = f"({left:g} s)" if left is not None else None
    if limit is None or said is None or said not in str(err):
        return err
    text = str(err).replace(said, f"({limit:g} s, counted from the command's start)")
    return InfeasibleError(text, err.explanation, err.status)


def search_meta(result: Any, jobs: int, limit: float | None, before: float = 0.0) -> dict[str, Any]:
    """The search's own fields of ``search --json``: ``status``, ``solve_seconds``,
    ``tables_seconds``, ``shapes``, ``candidates``, ``jobs``, ``time_limit_seconds``,
    ``time_limit_note`` and, with a limit, ``startup_seconds`` (``before``: the command's seconds
    before its search, which its limit counts, :attr:`interface.requests.SearchRequest.started`;
    :func:`startup_field`)."""
    return {
        "status": result.status,
        "solve_seconds": result.solve_seconds,
        "tables_seconds": result.tables_seconds,
        "shapes": result.num_shapes,
        "candidates": result.num_candidates,
        "jobs": jobs,
        "time_limit_seconds": limit,
        "time_limit_note": limit_note(result, limit, before),
    } | startup_field(limit, before)


def startup_field(limit: float | None, before: float) -> dict[str, float]:
    """``startup_seconds`` of a time-limited command's JSON (``search``, ``frontier``, the
    per-stage search and frontier; ``rlhf-plan`` likewise): ``before``, the command's seconds
    before its search began (loading the model, the accelerator and the solver), which its
    ``limit`` counts; {} without a limit.

    >>> startup_field(2.0, 0.75), startup_field(None, 0.75)
    ({'startup_seconds': 0.75}, {})
    """
    return {} if limit is None else {"startup_seconds": before}
