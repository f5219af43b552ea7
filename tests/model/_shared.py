"""The project's reference tables, read from the installed package (``scenarios/published.toml``
and ``scenarios/examples.toml``, each table with its source): nothing outside the repository;
and the check that the search's tables read the evaluator's terms (:func:`search_matches_evaluate`)."""

from __future__ import annotations

from typing import Any

from trainplan import scenarios

NO_STEP_MECHANISMS: dict[str, Any] = dict(
    forward_s=0.0, reduce_s=0.0, step_forward_s=0.0, upfront=(0, 1), chunk_gather_s=0.0,
    chunks=1, chunk_group=1,
)  # fmt: skip
"""The keywords :func:`model.dp_exposure.dp_exposed_seconds` requires, for a layout with none of
their mechanisms: no forward gathers, reduction or first-forward gathers a micro-batch, nothing
waited up front (PyTorch's runtime), no chunked gathers (Megatron-Core's interleaving)."""

_FILES = {"published.toml": "published", "seed_examples.toml": "examples"}


def load(name: str) -> dict[str, Any]:
    """A data file of the package by its file name (``published.toml``, ``seed_examples.toml``)."""
    return scenarios.data(_FILES[name])


def table_rows(name: str, table: str) -> list[dict[str, Any]]:
    """Rows of a ``[[table]]`` with ``columns`` and ``rows``, as dicts."""
    tab = load(name)[table][0]
    return [dict(zip(tab["columns"], row, strict=True)) for row in tab["rows"]]


def table_meta(name: str, table: str) -> dict[str, Any]:
    """The ``[[table]]`` itself (``rel``, ``note``…)."""
    return load(name)[table][0]


def search_matches_evaluate(case: Any, num_gpus: int, space: Any) -> list[Any]:
    """The search's tables (float64 arrays over candidates) for ``case`` on ``num_gpus`` over
    ``space`` against the evaluator on every legal candidate, the two objective terms to the
    nanosecond (:data:`optimizer.search.NS_TOLERANCE`); the layouts checked."""
    from trainplan.model.estimate import objective_ns
    from trainplan.optimizer.problem import Job, Problem
    from trainplan.optimizer.search import NS_TOLERANCE
    from trainplan.optimizer.tables import build_tables

    tables = build_tables(Problem(jobs=(Job(case, num_gpus, "case"),), space=space))
    checked = []
    for s, z, r in zip(*tables.legal.nonzero(), strict=True):
        lay = tables.shapes[s].layout(tables.zero_stages[z], tables.recomputes[r])
        t1, t2 = objective_ns(case.evaluate(lay).time_terms)
        assert abs(t1 - tables.t1_at(s, z, r)) <= NS_TOLERANCE, lay
        assert abs(t2 - tables.t2_ns[s, z, r]) <= NS_TOLERANCE, lay
        checked.append(lay)
    return checked
