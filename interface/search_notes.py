"""The notes and refusals a search answer carries, as its JSON says them: the requested values
no layout uses (:func:`unused_note`), what ``--time-limit`` did (:func:`time_limit_note`) and the
object an infeasible search prints (:func:`infeasible_json`). Read by
:mod:`interface.search_commands` for the command line and the web app alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainplan.interface.flags import flag_for, refusal, with_flags
from trainplan.model.errors import InfeasibleError

if TYPE_CHECKING:
    from trainplan.optimizer.problem import Problem
    from trainplan.optimizer.tables import CostTables

__all__ = ["unused_note", "with_unused", "time_limit_note", "infeasible_json"]


_RULE_HEADS = frozenset(flag_for(n) for n in ("tp", "pp", "cp", "ep", "zero_stage", "cp_kind"))
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


def time_limit_note(limit: float | None, tables_s: float, solve_s: float) -> str | None:
    """What ``--time-limit`` did when the search took longer (None when it held, or none was
    given): a job's cost tables are built whole once started (jobs not started in time are left
    out), and CP-SAT gets at least :data:`optimizer.search.SOLVE_FLOOR_S` to read an answer."""
    from trainplan.optimizer.search import SOLVE_FLOOR_S

    if limit is None or tables_s + solve_s <= limit:
        return None
    return (
        f"the time limit of {limit:g} s was passed ({tables_s:.2f} s of cost tables + "
        f"{solve_s:.2f} s of CP-SAT): a job's tables are built whole once started, and CP-SAT "
        f"is given at least {SOLVE_FLOOR_S:g} s to read an answer; the status says whether "
        "that answer is proven"
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
