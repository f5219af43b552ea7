"""The planner for Python users in four names, each re-exported by :mod:`trainplan` (imported
there only when first used, so ``import trainplan`` stays cheap):

* :func:`evaluate` — one layout's memory, traffic, bubble, step time and MFU (what
  ``trainplan evaluate`` prints);
* :func:`search` — the fastest layout (what ``trainplan search`` prints);
* :class:`Layout` (:class:`trainplan.model.layout.Layout`) and :class:`Case`
  (:class:`trainplan.optimizer.case.Case`: a model, training recipe, layout, accelerator and
  cluster — the project's name for one scenario to evaluate).

Both functions take the command line's parameters by name (``tp=4``, not ``--tp 4``) and refuse
a name they do not know, as the command line does: a ``PlannerError`` naming the parameter.
"""

from __future__ import annotations

from typing import Any

from trainplan.interface.commands import search_problem
from trainplan.interface.inputs import DIM_KEYS, build_case
from trainplan.interface.scenario import CLUSTER_KEYS, CONSTRAINT_KEYS, SPACE_KEYS, TOP_KEYS
from trainplan.model.errors import InputError
from trainplan.model.estimate import Estimate
from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case
from trainplan.optimizer.search import SearchResult
from trainplan.optimizer.search import search as _search

__all__ = ["evaluate", "search", "Layout", "Case", "SEARCH_PARAMETERS"]


def evaluate(**params: Any) -> Estimate:
    """Evaluate one layout, as ``trainplan evaluate`` does with the same parameters.

    Parameters are :func:`trainplan.interface.inputs.build_case`'s: ``model`` (a catalogue
    name, ``trainplan models``), ``gpu`` (``trainplan gpus``), the degrees ``dp tp pp cp ep``,
    ``micro_batch_size``, ``global_batch_size`` (sequences), ``seq_len`` (tokens),
    ``zero_stage``, ``recompute``, ``schedule``… Omitted ones take the command line's defaults.

    Returns
    -------
    Estimate
        Bytes as exact integers (``peak.total_bytes``: the busiest stage's bytes per GPU), times
        in seconds (``step_s``), rates as 0–1 fractions (``mfu``, ``bubble_fraction``).

    Raises
    ------
    PlannerError
        An unknown parameter, model or GPU, a bad value, or a layout that breaks a legality rule
        (:class:`trainplan.model.errors.LayoutError`).

    Example
    -------
    >>> import trainplan
    >>> e = trainplan.evaluate(model="llama3-70b", gpu="H100-SXM", dp=2, tp=4, pp=8)
    >>> int(e.peak.total_bytes), round(e.step_s, 1), round(e.mfu, 3)  # bytes per GPU, s, MFU
    (75050647552, 277.1, 0.405)
    """
    return build_case(params).evaluate()


def search(
    *,
    top: int = 1,
    time_limit_s: float | None = None,
    workers: int = 2,
    **options: Any,
) -> SearchResult:
    """The best layout (least step time unless ``objective`` says otherwise) of ``gpus`` GPUs
    (a count, or a range ``"1024..16384"``), as ``trainplan search`` finds it — CP-SAT over the
    cost model's tables (:func:`trainplan.optimizer.search.search`).

    ``options`` are the command's own, by parameter name: ``model``, ``gpus``, ``gpu``,
    ``seq_len`` (tokens), ``global_batch`` (sequences), ``objective``, the space (``tp``, ``pp``
    … as lists, ``max_tp``, ``zero``, ``recompute``, ``schedule``), the constraints
    (``headroom``, ``min_mfu``), the cluster options, and ``scenario`` (a TOML file's path;
    the options given win over its values). ``top`` > 1 returns the next best distinct layouts
    too; ``time_limit_s`` bounds the whole search, seconds (None: until proven); ``workers``:
    CP-SAT threads.

    Returns
    -------
    SearchResult
        ``status`` (``optimal``, ``feasible``), ``best.estimate`` (as :func:`evaluate` returns
        it), ``best.job`` (the GPU count and accelerator chosen), ``tables_seconds``,
        ``solve_seconds``.

    Raises
    ------
    PlannerError
        An unknown option, model or GPU, or a bad value (the command line's exit 2).
    InfeasibleError
        No layout fits; ``explanation`` names what blocks it (the command line's exit 1).

    Example
    -------
    >>> import trainplan
    >>> r = trainplan.search(model="llama3-8b", gpus=8, gpu="H100-SXM")
    >>> r.status, r.best.estimate.layout.tp, round(r.best.estimate.step_s)  # seconds per step
    ('optimal', 2, 230)
    """
    unknown = sorted(set(options) - SEARCH_PARAMETERS)
    if unknown:  # search_problem reads the names it knows: another would be dropped silently
        known = ", ".join(sorted(SEARCH_PARAMETERS))
        raise InputError(f"{unknown[0]}: not a search parameter (known: {known})")
    return _search(search_problem(options), top, time_limit_s, workers)


SEARCH_PARAMETERS = frozenset(
    {*TOP_KEYS, *DIM_KEYS, *SPACE_KEYS, *CONSTRAINT_KEYS, *CLUSTER_KEYS, "params", "scenario"}
    - {"space", "constraints", "cluster", "per_stage", "source", "description"}
)
"""The parameters :func:`search` takes: a scenario file's keys (:mod:`trainplan.interface.scenario`:
the model's, the space's, the constraints', the cluster's), the model's dimensions, and
``scenario`` (the file's path); not ``per_stage`` (``trainplan search --per-stage`` is another
search)."""
