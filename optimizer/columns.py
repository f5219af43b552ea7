"""Many layouts' fields as numpy columns: the search's side of the cost model's field protocol
(:class:`model.terms.fields.Fields`), and the evaluation of a term over a table's candidates.

:class:`ShapeColumns` holds one job's shapes (every field of :class:`model.layout.Layout` the
search varies as a 1-D column; every other field the layout's default, so no term can miss
one) and the links the topology places each axis on. :func:`tabulate` evaluates one term of
:data:`model.terms.TERMS` over them: for each value of the modifiers in the term's scope
(``zero_stage``, ``recompute``) and each group of shapes sharing the term's control fields, it
hands the term a :class:`Columns` view — control fields as scalars, the rest as ``[n, 1]``
columns, the stage index as a ``[1, P]`` row — and reads the figures it needs off the result.

Lookups (:meth:`Columns.lookup`) call the model's exact function once per distinct value of the
fields they read and gather the answers into columns: that is where the tables' speed comes
from (thousands of candidates share a few dozen distinct splits, micro-batches and links).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields as dc_fields
from fractions import Fraction
from typing import Any

import numpy as np

from trainplan.model.expert_groups import expert_placement_tp_of
from trainplan.model.hardware import ClusterLinks
from trainplan.model.layout import (
    Layout,
    Recompute,
    expert_shard_degree_of,
    expert_tp_of,
    num_microbatches_of,
    sequence_parallel_on,
)
from trainplan.model.rank_groups import (
    in_one_domain,
    members_in_domain,
    nodes_in_domain,
    other_in_domain,
    stride_size,
)
from trainplan.model.split import split_rule_of
from trainplan.model.terms import Term
from trainplan.model.terms.fields import LINK_AXES, Context, LinkFields
from trainplan.model.xp import over_arrays
from trainplan.optimizer.case import links_for
from trainplan.topology.placement import two_tier_bandwidth

__all__ = ["ShapeColumns", "Columns", "tabulate", "SHAPE_FIELDS"]

SHAPE_FIELDS = (
    "dp", "tp", "pp", "cp", "cp_kind", "cp_a2a", "ep", "micro_batch_size", "schedule",
    "virtual_stages", "rank_order", "framework", "optimizer",
)  # fmt: skip
"""The :class:`model.layout.Layout` fields a search shape sets; ``zero_stage`` and
``recompute`` are the modifiers; every other field keeps the layout's default."""

_DEFAULTS = Layout()
_PLACED = {"dp": "dp_cp"}
"""A term's axis → :func:`topology.placement.axis_links`' key, where it is not the axis's own."""
_NUMERIC = {"dp", "tp", "pp", "cp", "ep", "micro_batch_size", "virtual_stages"}


class ShapeColumns:
    """One job's shapes as 1-D columns, with the links of each axis
    (:func:`topology.placement.axis_links`' rule on a two-tier cluster; per shape from the cluster
    graph with fabric options)."""

    def __init__(
        self,
        shapes: Sequence[Any],
        global_batch_size: int,
        links: ClusterLinks | None = None,
        fabric: tuple[tuple[str, Any], ...] = (),
        values: dict[str, Any] | None = None,
    ) -> None:
        """``shapes``: :class:`optimizer.space.Shape` objects (or anything with their fields);
        ``values``: the columns themselves instead (candidates not yet made shapes). ``links``:
        the cluster's two tiers (None: no term that reads links is evaluated)."""
        self.shapes = tuple(shapes)
        self.global_batch_size = global_batch_size
        self.values: dict[str, Any] = {}
        if values is not None:
            self.values = dict(values)
            self.n = len(next(iter(values.values())))
        else:
            self.n = len(self.shapes)
            for name in SHAPE_FIELDS:
                items = [getattr(s, name) for s in self.shapes]
                self.values[name] = _as_column(items, name in _NUMERIC)
        self.links = {} if links is None else self._links(links, fabric)
        self._groups: dict[tuple[str, ...], list[tuple[tuple[Any, ...], np.ndarray]]] = {}
        self.memo: dict[Any, Any] = {}

    def _links(
        self, cluster: ClusterLinks, fabric: tuple[tuple[str, Any], ...]
    ) -> dict[str, tuple[np.ndarray, ...]]:
        """Per axis: (bandwidth of its tier, every group in one scale-up domain, span, the
        slowest group's members per domain and NCCL's node count of it, and those of the groups
        on another number of domains, :func:`model.rank_groups.other_placement`), [N] (the
        group's size is the fields', :meth:`Columns.link`): :func:`topology.placement.
        axis_links`' rule, the arrays' way."""
        v = self.values
        out: dict[str, tuple[Any, ...]] = {
            a: (np.zeros(self.n), np.zeros(self.n, dtype=bool), *np.zeros((5, self.n), np.int64))
            for a in LINK_AXES
        }
        if fabric:  # a cluster graph: each shape's links (no closed form)
            for n, s in enumerate(self.shapes):
                placed = links_for(s.layout(1, Recompute.NONE), cluster, fabric)
                for axis in LINK_AXES:
                    link = placed[_PLACED.get(axis, axis)]
                    out[axis][0][n] = link.bandwidth_bytes_per_s or 0.0
                    out[axis][1][n] = link.link == "nvlink"
                    out[axis][2][n] = link.span
                    out[axis][3][n] = link.per_domain
                    out[axis][4][n] = link.domains
                    out[axis][5][n] = link.other_per_domain
                    out[axis][6][n] = link.other_domains
            return out
        orders = v["rank_order"].tolist()
        domain, node = cluster.nvlink_domain, cluster.nccl_node
        for order in dict.fromkeys(orders):
            rows = np.array([o == order for o in orders])
            degrees = {a: v[a][rows] for a in ("tp", "cp", "ep", "dp", "pp")}
            degrees["etp"] = expert_placement_tp_of(
                degrees["tp"], None, v["framework"][rows], degrees["ep"]
            )
            total = degrees["dp"] * degrees["tp"] * degrees["pp"] * degrees["cp"]
            for axis in LINK_AXES:
                stride, size = stride_size(degrees, _PLACED.get(axis, axis), tuple(order))
                span = stride * size
                out[axis][0][rows] = two_tier_bandwidth(span, cluster, total)
                out[axis][1][rows] = in_one_domain(span, total, domain)
                out[axis][2][rows] = span
                out[axis][3][rows] = members_in_domain(stride, size, total, domain)
                out[axis][4][rows] = nodes_in_domain(stride, size, total, domain, node)
                out[axis][5][rows], out[axis][6][rows] = other_in_domain(
                    stride, size, total, domain, node
                )
        return out

    def groups(self, control: Sequence[str]) -> list[tuple[tuple[Any, ...], np.ndarray]]:
        """(values of the ``control`` shape fields, [N] rows) of each group of shapes sharing
        them, in first-seen order."""
        key = tuple(control)
        if key not in self._groups:
            columns = [self.values[c].tolist() for c in key]
            keys = list(zip(*columns, strict=True)) if columns else [()] * self.n
            found: dict[tuple[Any, ...], list[int]] = {}
            for i, k in enumerate(keys):
                found.setdefault(k, []).append(i)
            self._groups[key] = [(k, np.array(r, dtype=np.int64)) for k, r in found.items()]
        return self._groups[key]

    def view(self, rows: np.ndarray, scalars: dict[str, Any]) -> Columns:
        """The shapes of ``rows`` as a :class:`Columns` view, the ``scalars`` fields fixed."""
        return Columns(self, rows, scalars)


def _as_column(items: Sequence[Any], numeric: bool) -> np.ndarray:
    """A 1-D column of ``items``: int64 for degrees, objects otherwise (enums, tuples, None)."""
    if numeric:
        return np.array(items, dtype=np.int64)
    column = np.empty(len(items), dtype=object)
    column[:] = list(items)
    return column


def _column(values: Any) -> Any:
    """A 1-D column as ``[n, 1]``; scalars unchanged."""
    return values[:, None] if isinstance(values, np.ndarray) else values


def _number(x: Any) -> Any:
    """An exact number as what numpy holds: a float (Fractions, ints), a bool as it is."""
    if isinstance(x, bool | np.bool_):
        return x
    return float(x)


class Columns:
    """Some shapes of a :class:`ShapeColumns` as :class:`model.terms.fields.Fields`: control
    and modifier fields scalars, the rest ``[n, 1]`` columns, ``stage`` the ``[1, P]`` row."""

    def __init__(self, table: ShapeColumns, rows: np.ndarray, scalars: dict[str, Any]) -> None:
        self._table = table
        self._rows = rows
        self._flat: dict[str, Any] = {}
        for name, values in table.values.items():
            self._flat[name] = scalars[name] if name in scalars else values[rows]
        for name, value in scalars.items():
            self._flat.setdefault(name, value)
        for f in dc_fields(Layout):
            self._flat.setdefault(f.name, getattr(_DEFAULTS, f.name))
        flat = self._flat
        flat["sp"] = sequence_parallel_on(flat["tp"], flat["sequence_parallel"])
        flat["expert_tp"] = expert_tp_of(flat["tp"], flat["etp"], flat["framework"], flat["ep"])
        flat["split_rule"] = _split_rule(flat["uneven_stages"], flat["framework"], flat["pp"])
        flat["shard_degree"] = flat["dp"] * flat["cp"]
        flat["expert_shard_degree"] = expert_shard_degree_of(
            flat["tp"], flat["dp"], flat["cp"], flat["etp"], flat["ep"], flat["framework"]
        )
        flat["m"] = num_microbatches_of(
            table.global_batch_size, flat["micro_batch_size"], flat["dp"]
        )
        self._scalars = {k: v for k, v in flat.items() if not isinstance(v, np.ndarray)}
        self._cols: dict[str, Any] = {}

    @property
    def n(self) -> int:
        return len(self._rows)

    @property
    def stage(self) -> np.ndarray:
        """[1, P] stage indices (P = pp, a control field of every term with a stage axis)."""
        pp = self._flat["pp"]
        if isinstance(pp, np.ndarray):
            raise AssertionError("pp must be a control field (the stage axis is sized by it)")
        return np.arange(int(pp))[None, :]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        cols = self.__dict__["_cols"]
        if name not in cols:
            try:
                cols[name] = _column(self.__dict__["_flat"][name])
            except KeyError:
                raise AttributeError(name) from None
        return cols[name]

    # ------------------------------------------------------------------ lookups
    def _key(self, fn: Callable[..., Any], args: tuple[Any, ...], names: tuple[str, ...]) -> Any:
        fixed = tuple((n, self._scalars[n]) for n in names if n in self._scalars)
        return (fn, args, names, fixed, id(self._table), self._rows.tobytes())

    def _distinct(self, values: Sequence[Any]) -> tuple[list[tuple[Any, ...]], np.ndarray]:
        """The distinct tuples of ``values`` (each a scalar or a 1-D column) and [n] each row's
        index among them."""
        varying = [i for i, v in enumerate(values) if isinstance(v, np.ndarray)]
        if not varying:
            return [tuple(values)], np.zeros(self.n, dtype=np.int64)
        rows = list(zip(*(values[i].tolist() for i in varying), strict=True))
        positions: dict[tuple[Any, ...], int] = {}
        index = np.fromiter(
            (positions.setdefault(r, len(positions)) for r in rows), dtype=np.int64, count=len(rows)
        )
        template = list(values)
        keys = []
        for r in positions:
            for i, x in zip(varying, r, strict=True):
                template[i] = x
            keys.append(tuple(template))
        return keys, index

    def _gather(self, answers: list[Any], index: np.ndarray, per_stage: bool) -> Any:
        """The answers gathered per row: a column ``[n, 1]`` (``[n, P]`` per stage), or a tuple
        of them for tuple answers (ragged tuples padded with 0)."""
        if isinstance(answers[0], str):  # a rule's reason: objects
            texts = np.empty(len(answers), dtype=object)
            texts[:] = answers
            return texts[index][:, None]
        rows = answers if per_stage else [[a] for a in answers]  # [K][P] entries
        many = isinstance(rows[0][0], tuple)
        if many:
            width = max(len(e) for r in rows for e in r)
            rows = [[e if len(e) == width else (*e, *(0,) * (width - len(e))) for e in r]
                    for r in rows]  # fmt: skip
        boolean = all(type(x) is bool for r in rows for e in r for x in (e if many else (e,)))
        table = np.array(rows, dtype=bool if boolean else float)  # [K, P or 1(, width)]
        picked = table[index]
        if not many:
            return picked
        return tuple(picked[:, :, j] for j in range(picked.shape[2]))

    def _evaluate(
        self, fn: Callable[..., Any], args: tuple[Any, ...], values: Sequence[Any], per_stage: bool
    ) -> Any:
        keys, index = self._distinct(values)
        answers = [fn(*args, *k) for k in keys]
        if len(keys) == 1 and not per_stage:  # one answer for every row: as numpy numbers
            one = answers[0]
            if isinstance(one, str):
                return one
            return tuple(map(_number, one)) if isinstance(one, tuple) else _number(one)
        return self._gather(answers, index, per_stage)

    def lookup(self, fn: Callable[..., Any], args: tuple[Any, ...], *names: str) -> Any:
        memo = self._table.memo
        key = self._key(fn, args, names)
        if key not in memo:
            memo[key] = self._evaluate(fn, args, [self._flat[n] for n in names], False)
        return memo[key]

    def lookup_values(self, fn: Callable[..., Any], args: tuple[Any, ...], *values: Any) -> Any:
        flat = [v.reshape(-1) if isinstance(v, np.ndarray) and v.size == self.n else v
                for v in values]  # fmt: skip
        if any(isinstance(v, np.ndarray) and v.size == 1 for v in flat):
            flat = [v.item() if isinstance(v, np.ndarray) and v.size == 1 else v for v in flat]
        return self._evaluate(fn, args, flat, False)

    def per_stage(self, fn: Callable[..., Any], args: tuple[Any, ...], *names: str) -> Any:
        memo = self._table.memo
        key = ("stage", *self._key(fn, args, names))
        if key not in memo:
            memo[key] = self._evaluate(fn, args, [self._flat[n] for n in names], True)
        return memo[key]

    def stages(self, fn: Callable[[Any], Any]) -> Any:
        return fn(self)

    @property
    def links_known(self) -> bool:
        return True

    def link(self, axis: str) -> LinkFields:
        bandwidth, nvlink, span, per_domain, domains, *other = self._table.links[axis]
        rows = self._rows
        size = {"dp": "shard_degree", "edp": "expert_shard_degree"}.get(axis, axis)
        return LinkFields(
            bandwidth[rows][:, None], nvlink[rows][:, None], span[rows][:, None],
            getattr(self, size), per_domain[rows][:, None], domains[rows][:, None],
            other[0][rows][:, None], other[1][rows][:, None],
        )  # fmt: skip


def _split_rule(uneven: Any, framework: Any, pp: Any) -> Any:
    """:func:`model.split.split_rule_of` per row (an object column where a field is a column)."""
    if any(isinstance(v, np.ndarray) for v in (uneven, framework, pp)):
        return np.frompyfunc(split_rule_of, 3, 1)(uneven, framework, pp)
    return split_rule_of(uneven, framework, pp)


def _tabulate_both(
    term: Term, c: Context, table: ShapeColumns, modifiers: dict[str, tuple[Any, ...]],
    read: Callable[[Any], tuple[Any, ...]], P: int, skip: Any, fixed: dict[str, Any],
) -> list[np.ndarray]:  # fmt: skip
    """:func:`tabulate` of a term that reads both the ZeRO stage and the recompute mode: arrays
    ``[N, Z, R, P]`` (per stage) or ``[N, Z, R]``; a group whose control values the term says do
    not read the recompute mode (:attr:`model.terms.Term.reads_recompute`) is evaluated once per
    ZeRO stage and copied to every mode."""
    zs, rs = modifiers["zero_stage"], modifiers["recompute"]
    control = [f for f in term.control if f not in ("zero_stage", "recompute")]
    per_mode = term.reads_recompute or (lambda _: True)
    shape = (table.n, len(zs), len(rs), *((P,) if term.per_stage else ()))
    out: list[np.ndarray] | None = None
    for zi, z in enumerate(zs):
        for key, rows in table.groups(control):
            once = None
            for ri, r in enumerate(rs):
                scalars = {**fixed, **dict(zip(control, key, strict=True))}
                scalars |= {"zero_stage": z, "recompute": r}
                if skip is not None and skip(scalars, rows):
                    continue
                if once is None or per_mode(scalars):
                    once = read(term.fn(c, table.view(rows, scalars)))
                out = out or [np.zeros(shape) for _ in once]
                pp = int(scalars["pp"]) if "pp" in scalars else 1
                for target, figure in zip(out, once, strict=True):
                    if term.per_stage:
                        target[rows, zi, ri, :pp] = _broadcast(figure, (len(rows), pp))
                    else:
                        target[rows, zi, ri] = _broadcast(figure, (len(rows), 1))[:, 0]
    return out or [np.zeros(shape)]


def _broadcast(value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A term's figure (a scalar, a Fraction, ``[n, 1]``, ``[1, P]`` or ``[n, P]``) as a float
    array of ``shape``."""
    if isinstance(value, Fraction | int | float | np.number):
        value = float(value)
    return np.broadcast_to(np.asarray(value, dtype=float), shape)


def tabulate(
    term: Term,
    c: Context,
    table: ShapeColumns,
    modifiers: dict[str, tuple[Any, ...]],
    read: Callable[[Any], tuple[Any, ...]],
    P: int,
    skip: Callable[[dict[str, Any], np.ndarray], bool] | None = None,
    fixed: dict[str, Any] | None = None,
) -> list[np.ndarray]:
    """``term`` over every shape of ``table`` and every value of the modifiers in its scope:
    the figures ``read`` takes off each result, each an array ``[N, M, P]`` (per stage; stages
    beyond a shape's pp hold 0) or ``[N, M]``, M the modifier values (1 when the term reads
    none). ``skip(scalars, rows)`` leaves a group's rows 0 (a ZeRO stage its framework does not
    run with its pp). ``fixed``: layout fields outside the term's scope set for every row (the
    pipeline term's ZeRO stage, which it reads only through
    :func:`model.launch_order.launch_order_kept`: :mod:`optimizer.launch_tables`)."""
    with over_arrays():
        return _tabulate(term, c, table, modifiers, read, P, skip, fixed or {})


def _tabulate(
    term: Term,
    c: Context,
    table: ShapeColumns,
    modifiers: dict[str, tuple[Any, ...]],
    read: Callable[[Any], tuple[Any, ...]],
    P: int,
    skip: Callable[[dict[str, Any], np.ndarray], bool] | None,
    fixed: dict[str, Any],
) -> list[np.ndarray]:
    mods = [m for m in ("zero_stage", "recompute") if m in term.scope]
    if len(mods) > 1:
        return _tabulate_both(term, c, table, modifiers, read, P, skip, fixed)
    values = modifiers[mods[0]] if mods else (None,)
    control = [f for f in term.control if f not in mods]
    out: list[np.ndarray] | None = None
    for mi, value in enumerate(values):
        for key, rows in table.groups(control):
            scalars = {**fixed, **dict(zip(control, key, strict=True))}
            if mods:
                scalars[mods[0]] = value
            if skip is not None and skip(scalars, rows):
                continue
            view = table.view(rows, scalars)
            figures = read(term.fn(c, view))
            if out is None:
                shape = (table.n, len(values), P) if term.per_stage else (table.n, len(values))
                out = [np.zeros(shape) for _ in figures]
            pp = int(scalars["pp"]) if "pp" in scalars else 1
            for target, figure in zip(out, figures, strict=True):
                if term.per_stage:
                    target[rows, mi, :pp] = _broadcast(figure, (len(rows), pp))
                else:
                    target[rows, mi] = _broadcast(figure, (len(rows), 1))[:, 0]
    if out is None:
        shape = (table.n, len(values), P) if term.per_stage else (table.n, len(values))
        return [np.zeros(shape)]
    return out
