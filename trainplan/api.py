"""The planner for Python users in five names, each re-exported by :mod:`trainplan` (imported
there only when first used, so ``import trainplan`` stays cheap):

* :func:`evaluate` — one layout's memory, traffic, bubble, step time and MFU (what
  ``trainplan evaluate`` prints);
* :func:`search` — the fastest layout (what ``trainplan search`` prints);
* :class:`Layout` (:class:`trainplan.model.layout.Layout`) and :class:`Case`
  (:class:`trainplan.optimizer.case.Case`: a model, training recipe, layout, accelerator and
  cluster — one setting to evaluate; :meth:`Case.of` builds one from typed values with the
  command line's defaults, :func:`evaluate` parses its parameters and calls it);
* :class:`Scenario` — a scenario file (TOML) read into its typed form, what
  ``trainplan search --scenario FILE`` reads: its search problem, its cases, its search.

Both functions take the command line's parameters by name (``tp=4``, not ``--tp 4``) and refuse
a name they do not know, as the command line does: a ``PlannerError`` naming the parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from trainplan.interface.commands import search_problem
from trainplan.interface.inputs import DIM_KEYS, build_case
from trainplan.interface.requests import SearchRequest, search_request
from trainplan.interface.scenario import (
    CLUSTER_KEYS,
    CONSTRAINT_KEYS,
    SPACE_KEYS,
    TOP_KEYS,
    problem_of,
)
from trainplan.model.errors import InputError
from trainplan.model.estimate import Estimate
from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Problem
from trainplan.optimizer.search import SearchResult
from trainplan.optimizer.search import search as _search
from trainplan.scenarios import DATA_FILES

__all__ = ["evaluate", "search", "Layout", "Case", "Scenario", "SEARCH_PARAMETERS"]


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
    (76587859968, 280.7, 0.4)
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
    ('optimal', 1, 231)

    (dp 8, ZeRO-3: 45.943 s of gathers and reduce-scatters hidden under the computation cost it
    φ·45.943 = 0.259 × 45.943 = 11.91 s, the NCCL SM charge — NCCL runs them as rings on the
    node's 24 channels; 218 s without it.)
    """
    _check_search_parameters(options)
    return _search(search_problem(options), top, time_limit_s, workers)


def _check_search_parameters(options: dict[str, Any]) -> None:
    """Refuse a name :func:`search` does not know (search_problem reads the names it knows:
    another would be dropped silently)."""
    unknown = sorted(set(options) - SEARCH_PARAMETERS)
    if unknown:
        known = ", ".join(sorted(SEARCH_PARAMETERS))
        raise InputError(f"{unknown[0]}: not a search parameter (known: {known})")


@dataclass(frozen=True, slots=True)
class Scenario:
    """A scenario file (TOML: ``docs/guides/search.md``) read into its typed form, with options
    over it: what ``trainplan search --scenario FILE [options]`` reads, built by the command
    line's own loader (:func:`trainplan.interface.requests.search_request`, which reads and checks
    the file with :func:`trainplan.interface.scenario_file.load_scenario`).

    Example
    -------
    >>> import trainplan
    >>> s = trainplan.Scenario.from_name("deepseek-v3-dualpipe")
    >>> s.request.values["gpus"], s.case.model.name, s.case.device.name  # GPUs, model, GPU
    (2048, 'deepseek-v3', 'H800')
    """

    path: Path
    """The file read."""
    request: SearchRequest
    """Its values with the options over them, by table (``values`` at the top, ``space``,
    ``constraints``, ``cluster``), as the search command reads them."""

    @classmethod
    def load(cls, path: str | Path, **options: Any) -> Scenario:
        """The scenario file at ``path``, with ``options`` over its values: :func:`search`'s
        parameters by name (``tp=[1]``, ``gpus=64``; the command line's ``--tp 1``, ``--gpus
        64``), an option given winning over the file's value.

        Raises
        ------
        PlannerError
            An unreadable file, an unknown key or a value of the wrong kind in it (naming the
            file and the key); an option :func:`search` does not know.
        """
        _check_search_parameters({**options, "scenario": path})
        return cls(Path(path), search_request({**options, "scenario": str(path)}))

    @classmethod
    def from_name(cls, name: str, **options: Any) -> Scenario:
        """A scenario the package publishes (:func:`names`: ``deepseek-v3-dualpipe``, DeepSeek-V3's
        pre-training job, docs/pipeline-schedules.md), with ``options`` as :meth:`load` takes
        them.

        Raises
        ------
        InputError
            A name that is not one of :func:`names`.
        """
        if name not in cls.names():
            raise InputError(f"scenario: {name!r} is not a published scenario ({cls.names()})")
        folder = resources.files("trainplan.scenarios")
        return cls.load(Path(str(folder.joinpath(f"{name}.toml"))), **options)

    @staticmethod
    def names() -> list[str]:
        """The published scenarios: the package's top-level ``scenarios/*.toml`` files that are
        scenarios, not data tables (:data:`trainplan.scenarios.DATA_FILES`) or a calibration's
        measurements (``measurements-*.toml``, ``trainplan calibrate``'s input)."""
        files = resources.files("trainplan.scenarios").iterdir()
        stems = [f.name.removesuffix(".toml") for f in files if f.name.endswith(".toml")]
        return sorted(s for s in stems if s not in DATA_FILES and not s.startswith("measurements-"))

    def problem(self) -> Problem:
        """The search problem (:class:`trainplan.optimizer.problem.Problem`: the jobs, each a
        :class:`Case` per model × accelerator × GPU count × batch; the space; the constraints;
        the objective).

        Raises
        ------
        PlannerError
            A value its rule refuses, an unknown model or GPU (the command line's exit 2).
        """
        return problem_of(self.request)

    @property
    def case(self) -> Case:
        """The scenario's one job's :class:`Case` (its layout the defaults; evaluate another with
        ``case.evaluate(layout)``).

        Raises
        ------
        InputError
            A scenario of several jobs (GPU counts, accelerators or batches): use
            ``problem().jobs``.
        """
        jobs = self.problem().jobs
        if len(jobs) != 1:
            raise InputError(
                f"scenario {self.path}: {len(jobs)} jobs (GPU counts × accelerators × batches); "
                "read them from problem().jobs"
            )
        return jobs[0].case

    def search(
        self, top: int = 1, time_limit_s: float | None = None, workers: int = 2
    ) -> SearchResult:
        """The best layout of the scenario, as ``trainplan search --scenario FILE`` finds it
        (:func:`search`'s ``top``, ``time_limit_s``, ``workers`` and result).

        Raises
        ------
        PlannerError
            A bad value in the file or the options (exit 2).
        InfeasibleError
            No layout fits; ``explanation`` names what blocks it (exit 1).
        """
        return _search(self.problem(), top, time_limit_s, workers)


SEARCH_PARAMETERS = frozenset(
    {*TOP_KEYS, *DIM_KEYS, *SPACE_KEYS, *CONSTRAINT_KEYS, *CLUSTER_KEYS, "params", "scenario"}
    - {"space", "constraints", "cluster", "per_stage", "source", "description"}
)
"""The parameters :func:`search` takes: a scenario file's keys (:mod:`trainplan.interface.scenario`:
the model's, the space's, the constraints', the cluster's), the model's dimensions, and
``scenario`` (the file's path); not ``per_stage`` (``trainplan search --per-stage`` is another
search)."""
