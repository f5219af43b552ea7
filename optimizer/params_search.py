"""The ``params`` objective (``trainplan search --maximize params``): the largest member of a model
family that fits, then its fastest layout — one family member at a time instead of one CP-SAT
model over every member's tables.

The family (:func:`interface.scenario._family`: the catalogue model's depth varied, width kept)
holds members of distinct parameter counts (:func:`optimizer.problem.model_size`), each with one
job per accelerator, GPU count and batch. The answer of the one-model formulation — maximise the
chosen candidate's parameter count, then the objective (ns per step), then the tie-break — is,
member by member, the largest member with an allowed candidate (:func:`optimizer.rules.allowed`:
legal, fitting, meeting the constraints), searched alone for its fastest layout
(:func:`optimizer.search.search`, the same tables, objective and tie-break). Answers equal the
exhaustive oracle's (:func:`optimizer.enumerate.best`; tests/optimizer/test_params_search.py).

The probes (a probe = the member's cost tables, :func:`optimizer.tables.build_tables` with
``fit_only``: a job none of whose candidates fits gets no time terms, the slower part of its
tables) go largest member first, and the first that fits is the answer, proven: every larger
member was shown not to fit. Fit need not be monotone in depth (a shape's pp·v chunks at most the
layers, :func:`model.split.check_chunks`; a member's shapes are its own,
:func:`optimizer.space.legal_shapes`), so no member above the answer is skipped; the scan costs
one probe per member above the answer, the fewest an exact answer can cost without a bound that
rules a member out unseen. A probe of a member that does not fit costs only its memory terms.

A time limit is checked between probes and, within a probe, between its blocks of shapes once
the probe holds an allowed candidate (:func:`optimizer.tables.build_tables`' ``enough``: the
verdict "fits" is then proven, and the member's answer is the best of the rows held, said as
:attr:`optimizer.search.SearchResult.cut`; a probe with no allowed candidate is built whole, so
that "does not fit" is proven too). A limit that stops the scan before a member fits turns to a
bisection of the members below (fit is usually monotone: log₂ n probes, run past the limit so that
an answer comes rather than none). It returns the largest fitting member found, ``feasible``, with
:attr:`optimizer.search.SearchResult.params_unproven` the parameter count of the largest member
not probed: the true answer lies between the two.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from trainplan.model.errors import InfeasibleError, InputError
from trainplan.optimizer.cpsat import LayoutModel, interrupted
from trainplan.optimizer.problem import Objective, Problem, model_size
from trainplan.optimizer.rules import allowed
from trainplan.optimizer.search import (
    SOLVE_FLOOR_S,
    Progress,
    SearchResult,
    layout_model,
    prepare,
    search,
)
from trainplan.optimizer.tables import CostTables, TableProgress, build_tables

__all__ = ["ParamsRun", "family_members", "params_search"]

Prepared = tuple[CostTables, LayoutModel, float]


@dataclass(frozen=True, slots=True)
class ParamsRun:
    """The ``params`` search's answer and the winning member's prepared tables and model."""

    result: SearchResult
    """Answers of the largest fitting member (then smaller ones for ``top``), ``optimal`` when
    every larger member was shown not to fit; ``tables_seconds`` all probes' tables."""
    prepared: Prepared
    """The first answer's member: its tables, model and tables' seconds."""
    problem: Problem
    """That member's problem (its jobs only; objective step time: ns per step, as ``params``'
    second key)."""
    probed: int
    """Members whose tables were built."""
    members: tuple[int, ...]
    """Each member's parameter count, ascending (:func:`family_members`)."""


def family_members(problem: Problem) -> list[tuple[int, Problem]]:
    """Each distinct parameter count of ``problem``'s jobs (ascending) with the problem of its
    jobs only, objective step time (the ``params`` objective's second key, ns per step)."""
    sizes = sorted({model_size(job) for job in problem.jobs})
    return [
        (
            n,
            replace(
                problem,
                jobs=tuple(j for j in problem.jobs if model_size(j) == n),
                objective=Objective.STEP_TIME,
            ),
        )
        for n in sizes
    ]


def _probe(
    member: Problem, on_tables: TableProgress | None = None, deadline: float | None = None
) -> tuple[CostTables, bool, float]:
    """A member's tables (``fit_only``; ``on_tables(shapes done, shapes)`` after each job or
    block), whether a candidate is allowed, and the seconds. Past ``deadline``
    (:func:`time.perf_counter`; None: none) the tables are cut once they hold an allowed
    candidate (:func:`optimizer.tables.build_tables`' ``enough``, the search's own mask): the
    verdict "fits" is then proven, and the member's search is over those rows
    (:attr:`optimizer.search.SearchResult.cut`); a member with no allowed candidate is built
    whole, so "does not fit" stays proven."""
    t0 = time.perf_counter()
    try:
        tables = build_tables(
            member, on_tables, deadline, fit_only=True,
            enough=lambda held: bool(allowed(member, held).any()),
        )  # fmt: skip
    except InputError:  # every shape breaks a rule at this depth (the space's refusal)
        return None, False, time.perf_counter() - t0  # type: ignore[return-value]
    ok = bool(len(tables.shapes)) and bool(allowed(member, tables).any())
    return tables, ok, time.perf_counter() - t0


def params_search(
    problem: Problem,
    top: int = 1,
    time_limit_s: float | None = None,
    workers: int = 2,
    progress: Progress | None = None,
    on_tables: TableProgress | None = None,
    progress_of: Callable[[Problem, Prepared], Progress | None] | None = None,
) -> ParamsRun:
    """The largest family member that fits and its fastest layout (module docstring);
    ``on_tables(shapes done, shapes)`` as each member's tables are built (Ctrl-C's check);
    ``progress_of(member, prepared)``: the solver's progress for a member's search (its unit read
    off its tables), in place of ``progress``.

    Raises
    ------
    InfeasibleError
        No member fits (the smallest member's own refusal, which names the blocking families),
        or the time limit ran out before any member was shown to fit (status ``unknown``).
    """
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    members = family_members(problem)
    best, unproven, fits, tables, spent = _scan(members, deadline, on_tables)
    if best < 0:
        return _none_fits(problem, members, unproven, time_limit_s)
    solving = (progress, progress_of)
    return _answers(members, tables, fits, best, top, deadline, workers, solving, spent, unproven)


def _scan(members, deadline, on_tables):
    """The largest member that fits (-1: none shown), the largest member not probed when the
    time limit stopped the scan (its parameters; None: proven), each probed member's verdict,
    the fitting members' tables and the probes' seconds (module docstring)."""
    n = len(members)
    fits: dict[int, bool] = {}
    tables: dict[int, CostTables] = {}
    spent = 0.0

    def probe(i: int) -> bool:
        nonlocal spent
        t, ok, sec = _probe(members[i][1], on_tables, deadline)
        spent += sec
        fits[i] = ok
        if ok:
            tables[i] = t
        return ok

    best, unproven = -1, None
    for i in range(n - 1, -1, -1):  # largest first: the first that fits is the answer, proven
        if deadline is not None and fits and time.perf_counter() > deadline:
            unproven = members[i][0]
            break
        if probe(i):
            best = i
            break
    if unproven is not None:  # stopped: bisect the members below for an answer (log₂ n probes,
        # past the time limit: an answer rather than none), the bracket above left unproven
        lo, hi = -1, max(k for k in range(n) if k not in fits) + 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if probe(mid):
                lo = mid
            else:
                hi = mid
        best = lo
    return best, unproven, fits, tables, spent


def _answers(
    members, tables, fits, best, top, deadline, workers, solving, spent, unproven
) -> ParamsRun:
    """Up to ``top`` answers from the largest fitting member ``best`` down (each member's own
    search: its fastest layouts), as the one-model formulation's top-k; Ctrl-C ends them with
    those found (:func:`optimizer.search.search`'s own top-k does the same within a member)."""
    answers: list = []
    status, seconds, first = "optimal", 0.0, None
    shapes = candidates = 0
    cuts: list[tuple[int, str]] = []  # (parameters, words) of each member whose tables were cut
    for i in range(best, -1, -1):
        if len(answers) >= top:
            break
        if answers and interrupted():  # Ctrl-C (optimizer.solver.interrupt): the answers so far
            status = "feasible"
            break
        if i not in fits:
            t, ok, sec = _probe(members[i][1], None, deadline)
            spent += sec
            fits[i] = ok
            if ok:
                tables[i] = t
        if not fits[i]:
            continue
        member = members[i][1]
        t0 = time.perf_counter()
        prepared = (tables[i], layout_model(member, tables[i]), 0.0)
        spent += time.perf_counter() - t0
        left = None if deadline is None else max(SOLVE_FLOOR_S, deadline - time.perf_counter())
        progress, progress_of = solving
        on = progress_of(member, prepared) if progress_of else progress
        result = search(member, top - len(answers), left, workers, on, prepared=prepared)
        if first is None:
            first = (prepared, member)
        answers += result.answers
        cuts += [(members[i][0], result.cut)] if result.cut else []
        seconds += result.solve_seconds
        shapes += result.num_shapes
        candidates += result.num_candidates
        if result.status != "optimal":
            status = "feasible"
    assert first is not None  # members[best] fits
    if unproven is not None:
        status = "feasible"
    prepared, member = first
    cut = _cut_words(cuts)
    result = SearchResult(
        status, tuple(answers), seconds, spent, shapes, candidates, params_unproven=unproven,
        cut=cut,
    )  # fmt: skip
    sizes = tuple(n for n, _ in members)
    return ParamsRun(result, (prepared[0], prepared[1], spent), member, len(fits), sizes)


def _cut_words(cuts: list[tuple[int, str]]) -> str | None:
    """What the time limit left out of the answering members' tables (``(parameters, words)``
    each, :meth:`optimizer.tables.CostTables.cut`): one member's words as they are, several
    each headed by its parameters; None: nothing."""
    if len(cuts) <= 1:
        return cuts[0][1] if cuts else None
    return "; ".join(f"the member of {n:,} parameters: {c}" for n, c in cuts)


def _none_fits(problem, members, unproven, time_limit_s) -> ParamsRun:
    """No member shown to fit: the time limit's refusal, or the smallest member's own (its
    search names the families that leave nothing)."""
    if unproven is not None:
        raise InfeasibleError(
            "search: no member of the model family shown to fit within the time limit "
            f"({time_limit_s:g} s); give a longer --time-limit",
            ["solver: no answer within the limits"],
            status="unknown",
        )
    smallest = members[0][1]
    prepared = prepare(smallest)  # raises the rule that refuses every layout, exit 2
    search(smallest, 1, None, 2, None, prepared=prepared)  # raises: nothing fits
    raise AssertionError("a member without an allowed candidate has an answer")
