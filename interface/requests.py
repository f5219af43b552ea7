"""Each command's inputs as one frozen request, built once where they enter.

Three boundaries give a command its inputs: click's options (the command line, and the web API,
whose query :mod:`interface.cli.query` parses as the command's own options), a scenario TOML file
with ``--set KEY=VALUE`` over it (:mod:`interface.scenario`, :mod:`interface.scenario_keys`), and a
Python caller's dict (:mod:`trainplan.api`, a sweep's point, an example's table). Each is turned into
the command's request here, with one set of rules for how they combine: a scenario file's value
under ``--set``'s under an option's; a key that ``--set`` and an option of the command both give is
refused (:func:`interface.scenario_keys.merge`), whatever the two values. What the request holds is
then read by :func:`interface.inputs.build_case` (evaluate) and
:func:`interface.scenario.problem_of` (search, frontier, the per-stage search), never merged again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from trainplan.interface.flags import as_keys
from trainplan.interface.scenario_file import CLUSTER_KEYS, SPACE_KEYS, load_scenario
from trainplan.interface.scenario_keys import merge, table_of
from trainplan.model.errors import InputError, PlannerError
from trainplan.model.quantities import FRACTION_RULE
from trainplan.model.units import parse_number

if TYPE_CHECKING:  # the search's module brings numpy, which evaluate does not load
    from trainplan.optimizer.problem import Constraints

__all__ = [
    "EvaluateRequest",
    "SearchRequest",
    "evaluate_request",
    "search_request",
    "parse_overlap",
    "PER_STAGE_SHAPES",
]

PER_STAGE_SHAPES: int | None = None
"""The shapes each per-stage search takes by default (``--per-stage-shapes``): None, every
legal shape whose model state can fit (:func:`optimizer.stage_bases.ranked_bases`)."""

_EMPTY: tuple[Any, ...] = (None, (), [], {})
"""What an option left unset holds (click gives None, or () for a repeatable option)."""


def _given(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if not _unset(v)}


def _unset(value: Any) -> bool:
    return any(value is e or (type(value) is type(e) and value == e) for e in _EMPTY)


def parse_overlap(values: tuple[str, ...] | list[str]) -> dict[str, float]:
    """``AXIS=FRACTION`` texts (``--overlap dp=0.5``, repeatable) as {axis: fraction hidden behind
    compute}; the fractions' range is checked by the cost model's options.

    Raises
    ------
    InputError
        An item that is not AXIS=FRACTION.
    """
    out = {}
    for item in values:
        axis, sep, frac = item.partition("=")
        try:
            out[axis.strip()] = float(frac)
        except ValueError:
            raise InputError(f"--overlap: {item!r} must be AXIS=FRACTION, e.g. dp=0.5") from None
        if not sep:
            raise InputError(f"--overlap: {item!r} must be AXIS=FRACTION, e.g. dp=0.5")
    return out


def _overlap(value: Any) -> dict[str, float]:
    return value if isinstance(value, dict) else parse_overlap(tuple(value or ()))


@dataclass(frozen=True, slots=True)
class EvaluateRequest:
    """``trainplan evaluate``'s inputs (and ``example``'s, the web's ``/api/evaluate``): the
    planner's parameters by name (docs/concepts/conventions.md), ``--set``'s keys among them."""

    params: Mapping[str, Any]
    """Every parameter given, by name (``tp``, ``seq_len``, ``host_link_gbps``…; none unset,
    ``overlap`` as {axis: fraction}); values as their boundary read them (numbers exact or
    text), each parsed and checked against its rule by :func:`interface.inputs.build_case`."""
    per_stage: bool = False
    """Also list every pipeline stage (``--per-stage``)."""


def evaluate_request(
    options: EvaluateRequest | Mapping[str, Any], per_stage: bool = False
) -> EvaluateRequest:
    """The request of evaluate's options by name (click's parameters, a TOML table's, a caller's
    dict; a request is returned as it is): ``set`` (``--set``'s {key: value}) merged in, a key a
    flag also gives refused.

    Raises
    ------
    InputError
        ``--set seq_len: --seq-len gives it too (8192); give one of them``; an ``overlap`` item
        that is not AXIS=FRACTION.
    """
    if isinstance(options, EvaluateRequest):
        return options
    params = _given(options)
    sets = params.pop("set", None) or {}
    merge(params, sets)
    params.update(sets)
    params["overlap"] = _overlap(params.get("overlap"))
    return EvaluateRequest(MappingProxyType(params), bool(per_stage))


_TOP_OPTIONS: tuple[str, ...] = (
    *("model", "params", "arch", "layers", "hidden", "heads", "kv_heads", "ffn_hidden"),
    *("vocab", "head_dim", "gpus", "gpu", "seq_len", "global_batch", "global_batch_tokens"),
    *("objective", "tokens", "gpu_hour_price", "max_layers", "mtp_layers"),
)
"""The search options read at a scenario file's top level (the rest go to its tables)."""
_CONSTRAINT_OPTIONS = ("headroom", "min_mfu", "tp_in_nvlink", "allocator_retries_ok")


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """``trainplan search``'s and ``frontier``'s inputs (the per-stage search's too): a scenario
    file's values, ``--set``'s over them and the options over both, merged once, by table."""

    values: Mapping[str, Any]
    """The top-level keys (``model``, ``gpus``, ``gpu``, ``seq_len``, ``global_batch``,
    ``objective``, ``tokens``, ``gpu_hour_price``…), as given (numbers exact or text)."""
    space: Mapping[str, Any]
    """The ``[space]`` table: the layouts searched (``tp``, ``framework``…)."""
    constraints: Mapping[str, Any]
    """The ``[constraints]`` table: ``headroom``, ``min_mfu``, ``tp_in_nvlink``,
    ``allocator_retries_ok``."""
    cluster: Mapping[str, Any]
    """The ``[cluster]`` table: links, the recipe, the time model."""
    per_stage: bool = False
    """Choose each stage's layers and recomputed layers too (``--per-stage``, the key
    ``per_stage``)."""
    per_stage_shapes: int | None = PER_STAGE_SHAPES
    """Shapes each per-stage search takes (None: every one)."""
    time_limit: float | None = None
    """Seconds for the whole search (None: no limit), counted from :attr:`started`."""
    started: float | None = None
    """The :func:`time.perf_counter` reading from which :attr:`time_limit` counts: the command's
    start on the command line (:func:`interface.cli.clock.command_started`: its wall clock, loading the
    model, the accelerator and the solver included); None: when the search begins (the web, a
    library caller)."""
    workers: int | None = None
    """CP-SAT workers (``--workers``); None: the search's own default
    (:attr:`layout_workers`, :attr:`stage_workers`)."""
    scenario_file: str | None = None
    """The scenario file's path the values were read from (None: none)."""
    file_keys: frozenset[str] = frozenset()
    """The keys whose value is the file's (no option or ``--set`` over it): a refusal of one
    names the file and the key (:meth:`said_by_file`)."""

    def said_by_file(self, err: PlannerError) -> PlannerError:
        """``err`` as the scenario file's refusal when the value it refuses is the file's (its
        head, the parameter before its first ``:``, is one of :attr:`file_keys`): headed
        ``scenario PATH:``, its parameters written as the file's keys
        (:func:`interface.flags.as_keys`), not as flags the user did not type; else ``err``."""
        text = str(err)
        if self.scenario_file is None or text.split(":", 1)[0] not in self.file_keys:
            return err
        return type(err)(f"scenario {self.scenario_file}: {as_keys(text)}")

    @property
    def layout_workers(self) -> int:
        """CP-SAT workers of the layout search and frontier: :attr:`workers`, else
        :data:`optimizer.solver.LAYOUT_WORKERS`."""
        from trainplan.optimizer.solver import LAYOUT_WORKERS

        return self.workers or LAYOUT_WORKERS

    @property
    def stage_workers(self) -> int:
        """CP-SAT workers of the per-stage search and its frontier: :attr:`workers`, else
        :data:`optimizer.solver.STAGE_WORKERS` (one: the same split on every run)."""
        from trainplan.optimizer.solver import STAGE_WORKERS

        return self.workers or STAGE_WORKERS


def _tables(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: dict(values.get(name) or {}) for name in ("space", "constraints", "cluster")}


def merged_request(
    file_values: Mapping[str, Any], options: Mapping[str, Any], **run: Any
) -> SearchRequest:
    """The request of a scenario's values (as a file holds them: the tables nested) with
    ``options`` over them (the same shape; an option unset leaves the file's value), and ``run``
    (the :class:`SearchRequest` fields past the tables)."""
    top = {**file_values, **_given(options)}
    tables, given = _tables(file_values), _tables(options)
    if "framework" in file_values:  # one profile or a list, at the top or in [space]
        tables["space"] = {"framework": file_values["framework"], **tables["space"]}
    for name in tables:
        tables[name].update(_given(given[name]))
    for name in ("space", "constraints", "cluster", "framework"):
        top.pop(name, None)
    return SearchRequest(
        values=MappingProxyType(top),
        space=MappingProxyType(tables["space"]),
        constraints=MappingProxyType(tables["constraints"]),
        cluster=MappingProxyType(tables["cluster"]),
        **run,
    )


def _scenario_values(options: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario's values: ``options["scenario"]`` is a file's path (read and checked), or its
    values already read and checked (a sweep's point), with ``--set``'s keys over them."""
    scenario = options.get("scenario")
    if isinstance(scenario, dict):
        out = dict(scenario)
    else:
        out = dict(load_scenario(scenario)) if scenario else {}
    for key, value in (options.get("set") or {}).items():
        table = table_of(key)
        if table is None:
            out[key] = value
        else:
            out[table] = {**out.get(table, {}), key: value}
    return out


LEAST_LEFT_S = 0.01
"""The least :func:`seconds_left` gives a search whose limit was spent before it began (a
positive limit: the search's first block of cost tables and its solver's least time still run,
and the answer says the limit cut it)."""


def seconds_left(limit: float | None, started: float | None) -> float | None:
    """What a time limit of ``limit`` seconds counted from ``started`` (a
    :func:`time.perf_counter` reading; None: now) leaves now, s, at least :data:`LEAST_LEFT_S`;
    None without a limit. The command line passes this to the search so that ``--time-limit``
    bounds the command's wall clock (:attr:`SearchRequest.started`); the search's figures are
    its own.

    >>> seconds_left(None, 0.0), seconds_left(5.0, None), seconds_left(1.0, -1e9)
    (None, 5.0, 0.01)
    """
    if limit is None:
        return None
    spent = 0.0 if started is None else time.perf_counter() - started
    return max(LEAST_LEFT_S, limit - spent)


def limit_start(request: SearchRequest) -> float:
    """The :func:`time.perf_counter` reading ``request``'s time limit counts from: its
    :attr:`~SearchRequest.started`, else now (the search's start)."""
    return time.perf_counter() if request.started is None else request.started


def startup_seconds(started: float | None) -> float:
    """Seconds from ``started`` (:attr:`SearchRequest.started`; None: 0) to now: what the
    command spent before its search began, counted by its time limit."""
    return 0.0 if started is None else max(0.0, time.perf_counter() - started)


def search_request(
    options: SearchRequest | Mapping[str, Any], objective: str | None = None
) -> SearchRequest:
    """The request of search's or frontier's options by name (click's parameters; the web's
    query parsed as them; a caller's dict): ``scenario`` (a path, or values already checked),
    ``set`` ({key: value}), the options of the scenario keys, ``per_stage`` and
    ``per_stage_shapes``, ``time_limit``, ``started`` (:attr:`SearchRequest.started`), ``workers``;
    ``objective`` overrides (``params`` for
    ``--maximize params``).

    Raises
    ------
    PlannerError
        An unreadable scenario file; a key ``--set`` and an option both give (``--per-stage``
        with ``--set per_stage=true`` among them); ``per_stage_shapes`` without the per-stage
        search; an ``overlap`` item that is not AXIS=FRACTION.
    """
    if isinstance(options, SearchRequest):
        return options
    merge(options, options.get("set") or {})
    file_values = _scenario_values(options)
    path = options.get("scenario") if isinstance(options.get("scenario"), str | Path) else None
    given: dict[str, Any] = {k: options.get(k) for k in _TOP_OPTIONS}
    if objective:
        given["objective"] = objective
    given["space"] = {k: options.get(k) for k in SPACE_KEYS}
    given["constraints"] = {k: options.get(k) for k in _CONSTRAINT_OPTIONS}
    given["cluster"] = {k: options.get(k) for k in CLUSTER_KEYS - {"overlap"}}
    if options.get("overlap"):
        given["cluster"]["overlap"] = _overlap(options["overlap"])
    flag = options.get("per_stage")
    per_stage = bool(flag if flag is not None else file_values.get("per_stage"))
    limit = options.get("time_limit")
    request = merged_request(
        file_values,
        given,
        per_stage=per_stage,
        per_stage_shapes=per_stage_shapes(per_stage, options.get("per_stage_shapes")),
        time_limit=None if limit is None else float(limit),
        started=options.get("started"),
        workers=int(options["workers"]) if options.get("workers") else None,
        scenario_file=None if path is None else str(path),
        file_keys=_file_keys(load_scenario(path), options) if path else frozenset(),
    )
    try:  # refused now, before any table or solver is loaded
        constraints_of(request.constraints)
    except PlannerError as err:
        raise request.said_by_file(err) from None
    return request


def _file_keys(file_values: Mapping[str, Any], options: Mapping[str, Any]) -> frozenset[str]:
    """The keys of a scenario file (its tables' too) that no option or ``--set`` gives."""
    sets = options.get("set") or {}
    keys = set()
    for key, value in file_values.items():
        inner = value if key in ("space", "constraints", "cluster") else {key: value}
        keys |= {k for k in inner if options.get(k) in (None, (), []) and k not in sets}
    return frozenset(keys)


def constraints_of(values: Mapping[str, Any]) -> Constraints:
    """The search's :class:`~optimizer.problem.Constraints` of a request's ``[constraints]``
    table (numbers as :func:`model.units.parse_number` reads them: ``1e3``, ``4,000,000``).

    Raises
    ------
    InputError
        A value that is not a number; headroom outside [0, 1) or min_mfu outside (0, 1]
        (:class:`~optimizer.problem.Constraints`, the value echoed as
        :func:`model.units.shown_number` writes it).
    """
    mfu = values.get("min_mfu")
    from trainplan.optimizer.problem import Constraints

    headroom = parse_number(values.get("headroom") or 0, "headroom")
    min_mfu = None if mfu is None else parse_number(mfu, "min_mfu")
    try:
        return Constraints(
            headroom=float(headroom),
            min_mfu=None if min_mfu is None else float(min_mfu),
            tp_in_nvlink=bool(values.get("tp_in_nvlink")),
            allocator_retries_ok=bool(values.get("allocator_retries_ok")),
        )
    except InputError as err:  # the rule is the Constraints'; how a share is written, here
        if str(err).startswith("min_mfu"):  # min_mfu's refusal says it itself (an MFU of 40%)
            raise
        raise InputError(f"{err} ({FRACTION_RULE})") from None


def per_stage_shapes(per_stage: bool, shapes: int | None) -> int | None:
    """``--per-stage-shapes`` as the per-stage search takes it: ``shapes`` or the default (None:
    every shape).

    Raises
    ------
    InputError
        ``shapes`` given without ``--per-stage`` (it would do nothing).
    """
    if shapes is not None and not per_stage:
        raise InputError(
            f"per_stage_shapes: {shapes} applies to the per-stage search only; add --per-stage "
            "(or per_stage = true in the scenario)"
        )
    return PER_STAGE_SHAPES if shapes is None else shapes
