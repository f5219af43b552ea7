"""A layout's fields as the cost model's terms read them: one protocol, two providers.

A *term* (:mod:`model.terms`) is a function ``term(c, f)`` of a :class:`Context` ``c`` (the
model, the training recipe, the accelerator and the cost options: what every candidate of a
search shares) and a :class:`Fields` ``f`` (what a layout chooses). Its body is written once:

* :class:`LayoutFields` provides one :class:`model.layout.Layout` (and one pipeline stage) as
  exact scalars — ints, :class:`fractions.Fraction`, enums — so ``evaluate()`` is exact;
* the search's columns (``optimizer.columns.Columns``) provide the same fields as numpy columns
  of many layouts (``[n, 1]``; the stage index as a ``[1, P]`` row, so per-stage figures come out
  ``[n, P]``), with the layout's default for every field the search does not vary — so no field
  can silently go missing from a term the search evaluates.

Three operations let a term read what is not arithmetic on the fields:

* :meth:`Fields.lookup` — an exact function of a few fields (a parameter count, a layer's
  activation bytes, a layer's roofline time) evaluated once per distinct value of those fields
  (the providers cache; the model's functions are cached themselves);
* :meth:`Fields.per_stage` — the same for a function that answers per pipeline stage;
* :meth:`Fields.stages` — a per-stage expression on every stage (a list for one layout, the
  ``[n, P]`` array as it is for columns), reduced with :func:`stage_max` / :func:`stage_argmax`.

Fields that select a mechanism with ``if`` (the framework, the ZeRO stage, the recompute mode,
the schedule, the pipeline degree, …) are always scalars: the columns provider holds one value of
each *control* field (a term's :attr:`model.terms.Term.control`) and the tables group candidates
by them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from trainplan.model.hardware import DeviceSpec
from trainplan.model.layout import Layout
from trainplan.model.model_spec import ModelSpec
from trainplan.model.moe_run import members_per_domain
from trainplan.model.nvlink_bound import ring_caps
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.timing import CostOptions
from trainplan.model.xp import as_float, is_array, maximum, where

__all__ = [
    "Context",
    "Fields",
    "LinkFields",
    "LayoutFields",
    "SplitFreeKey",
    "AxisLinkLike",
    "world_ranks",
    "stage_max",
    "stage_argmax",
    "stage_take",
    "stage_tuple",
    "LINK_AXES",
    "INSIDE_DOMAIN",
    "axis_members",
    "axis_domains",
    "link_members",
    "link_caps",
]

LINK_AXES = ("tp", "cp", "ep", "dp", "edp", "pp")
"""The axes whose links a term reads (``dp`` is the dp·cp gradient group, ``dp_cp`` in
:mod:`topology.placement`; ``edp`` the expert data-parallel group, ``expert_shard_degree``
ranks)."""

_PLACED = {"dp": ("dp_cp", "shard_degree"), "edp": ("edp", "expert_shard_degree")}
"""A term's axis → (:func:`topology.placement.axis_links`' key, the layout's group size), where
they are not the axis's own name."""


@dataclass(frozen=True, slots=True, eq=False)
class Context:
    """What every candidate of one evaluation or search shares."""

    model: ModelSpec
    training: TrainingSpec
    device: DeviceSpec | None = None
    """None where no term that reads the accelerator is evaluated (activations alone)."""
    options: CostOptions = CostOptions()
    vocab_multiple: int | None = None
    """Pad V to a multiple of this × tp; None = each layout's framework's
    (:func:`model.vocab.vocab_multiple_for`)."""

    @property
    def arch(self) -> Architecture:
        """The architecture (terms that read it run only on models with dimensions)."""
        assert self.model.arch is not None, "a term that reads layers needs the dimensions"
        return self.model.arch

    @property
    def gpu(self) -> DeviceSpec:
        """The accelerator (terms that read it run only where one is given)."""
        assert self.device is not None, "a term that reads the accelerator needs one"
        return self.device


class AxisLinkLike(Protocol):
    """What the cost model needs to know of the link an axis rides (:mod:`topology.placement`'s
    ``AxisLink``)."""

    link: str
    bandwidth_bytes_per_s: float | None


@dataclass(slots=True)
class _InsideDomain:
    """An axis link inside one NVLink domain (:class:`model.terms.fields.AxisLinkLike`)."""

    link: str = "nvlink"
    bandwidth_bytes_per_s: float | None = None


INSIDE_DOMAIN: Mapping[str, AxisLinkLike] = {
    a: _InsideDomain() for a in ("tp", "cp", "ep", "dp_cp", "edp", "pp")
}
"""The links :func:`model.estimate.stage_memory` assumes where none are given: every group
inside one NVLink domain, which gives point-to-point communicators the most channels per peer
(:func:`model.terms.comm_memory.p2p_channels_per_peer`): the communicators' larger count."""


@dataclass(frozen=True, slots=True)
class LinkFields:
    """The link one axis's groups ride, as the topology placed it: scalars for one layout,
    ``[n, 1]`` columns for many."""

    bandwidth: Any
    """Bandwidth per GPU per direction of the tier, bytes/s (one NIC's across domains); None
    when unknown (one layout only)."""
    nvlink: Any
    """The group lies in one scale-up domain."""
    span: Any
    """Consecutive ranks containing one group (:func:`topology.placement.axis_span`)."""
    group_size: Any
    """Ranks in one group (1: no traffic)."""
    per_domain: Any = 0
    """Ranks the slowest group has in one NVLink domain (:func:`model.rank_groups.
    fewest_in_domain`, the placement's ``per_domain``); 0: not placed (the span's closed form,
    :func:`model.step_time.link_time_of`)."""
    domains: Any = 0
    """NVLink domains the slowest group's ranks lie on as NCCL counts its nodes
    (:func:`model.rank_groups.nccl_nodes`, the placement's ``domains``); 0: not placed."""
    other_per_domain: Any = 0
    """Of the groups on another number of domains, the fewest members in one
    (:func:`model.rank_groups.other_placement`, the placement's ``other_per_domain``); 0:
    every group on ``domains`` domains, or not placed."""
    other_domains: Any = 0
    """The domains those groups lie on (1: inside one domain); 0 as above."""


class Fields(Protocol):
    """The protocol a term reads a layout through (see the module docstring). Every field of
    :class:`model.layout.Layout`, its derived quantities (``sp``, ``expert_tp``, ``split_rule``, ``shard_degree``,
    ``expert_shard_degree``), ``m`` (micro-batches per step) and ``stage`` (the pipeline stage:
    an int, or a ``[1, P]`` row of stage indices)."""

    dp: Any
    tp: Any
    pp: Any
    cp: Any
    cp_kind: Any
    cp_a2a: Any
    ep: Any
    etp: Any
    zero_stage: Any
    framework: Any
    optimizer: Any
    recompute: Any
    micro_batch_size: Any
    schedule: Any
    virtual_stages: Any
    sequence_parallel: Any
    rank_order: Any
    uneven_stages: Any
    stage_layers: Any
    recompute_layers: Any
    deallocate_pipeline_outputs: Any
    pipeline_scatter_gather: Any
    sp: Any
    expert_tp: Any
    split_rule: Any
    shard_degree: Any
    expert_shard_degree: Any
    m: Any

    @property
    def stage(self) -> Any:
        """The pipeline stage: an int, or a ``[1, P]`` row of stage indices."""
        ...

    def lookup(self, fn: Callable[..., Any], args: tuple[Any, ...], *names: str) -> Any:
        """``fn(*args, *values of names)``: a number, or a tuple of numbers (a list of columns
        for many layouts, ragged tuples padded with 0)."""
        ...

    def lookup_values(self, fn: Callable[..., Any], args: tuple[Any, ...], *values: Any) -> Any:
        """:meth:`lookup` of values computed from the fields (scalars, or ``[n, 1]`` columns)
        rather than of fields by name."""
        ...

    def per_stage(self, fn: Callable[..., Any], args: tuple[Any, ...], *names: str) -> Any:
        """:meth:`lookup` of a function that answers a sequence over the pipeline stages: this
        stage's entry (``[n, P]`` for many layouts)."""
        ...

    def stages(self, fn: Callable[[Any], Any]) -> Any:
        """``fn`` evaluated on every pipeline stage: a list for one layout, ``fn(self)`` (already
        ``[n, P]``) for many."""
        ...

    def link(self, axis: str) -> LinkFields:
        """The link the axis's groups ride (:data:`LINK_AXES`)."""
        ...

    @property
    def links_known(self) -> bool:
        """Whether :meth:`link` may be read (one layout evaluated without links: False)."""
        ...


SPLIT_FREE: tuple[str, ...] = tuple(
    f.name for f in fields(Layout) if f.name not in ("stage_layers", "recompute_layers")
)
"""The :class:`~model.layout.Layout` fields a layer's own figures may read
(:meth:`LayoutFields.split_free_key`): all but the per-stage splits."""


class SplitFreeKey:
    """:meth:`LayoutFields.split_free_key`'s values, hashed once: a dictionary key that the
    per-stage tables' memos (:func:`model.terms.split_free.split_free`) look up several times
    per row. Equal where the values are equal."""

    __slots__ = ("values", "_hash")

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values
        self._hash = hash(values)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SplitFreeKey) and self.values == other.values


class LayoutFields:
    """One layout as exact scalars, at one pipeline stage (:class:`Fields`).

    ``links`` are :func:`topology.placement.axis_links`' (keys ``tp cp ep dp_cp edp pp``); None
    when no term that reads links is evaluated (memory only)."""

    layout: Layout
    stage: int
    m: int
    _links: Mapping[str, AxisLinkLike] | None
    _split_free: SplitFreeKey | None

    def __init__(
        self,
        layout: Layout,
        global_batch_size: int,
        stage: int = 0,
        links: Mapping[str, AxisLinkLike] | None = None,
    ) -> None:
        self.layout = layout
        self.stage = stage
        self.m = layout.num_microbatches(global_batch_size)
        self._links = links
        self._split_free = None

    def __getattr__(self, name: str) -> Any:
        """A field of the layout (or one it derives, ``sp``, ``shard_degree``, …), kept on this
        object after its first read, so later reads are plain attribute reads: the layout is
        frozen, and this object's ``layout`` is not replaced once read (:meth:`at` and
        :meth:`with_zero_stage` make new objects)."""
        value = getattr(self.layout, name)
        self.__dict__[name] = value
        return value

    def split_free_key(self) -> SplitFreeKey | None:
        """What this layout is at its stage apart from the per-stage splits: every
        :class:`~model.layout.Layout` field but ``stage_layers`` and ``recompute_layers``
        (:data:`SPLIT_FREE`), the stage, the micro-batches a step and the links (by identity:
        the caller keeps them alive beside the key), built once per object. Two layouts of one
        key differ only in how the layers are split over the stages and how many each
        recomputes — what the per-stage tables vary row by row
        (:func:`optimizer.stage_rules.realization`); None where no key applies (no links:
        memory only)."""
        if self._links is None:
            return None
        if self._split_free is None:
            lay = self.layout
            values = (*(getattr(lay, n) for n in SPLIT_FREE), self.stage, self.m, id(self._links))
            self._split_free = SplitFreeKey(values)
        return self._split_free

    @property
    def links_object(self) -> Mapping[str, AxisLinkLike] | None:
        """The links this layout's terms read (kept alive beside :meth:`split_free_key`)."""
        return self._links

    def at(self, stage: int) -> LayoutFields:
        """The same layout at pipeline stage ``stage``."""
        return self._of(self.layout, stage)

    def _of(self, layout: Layout, stage: int) -> LayoutFields:
        """``layout`` at ``stage`` with this object's micro-batches a step and links."""
        out = object.__new__(LayoutFields)
        out.layout, out.stage, out.m, out._links = layout, stage, self.m, self._links
        out._split_free = None
        return out

    def with_zero_stage(self, zero_stage: int) -> LayoutFields:
        """The same layout, stage and links under ZeRO stage ``zero_stage`` (the ZeRO table's
        rows, :func:`model.estimate.estimate`; the micro-batches a step do not depend on it).

        Raises
        ------
        LayoutError
            A stage :meth:`model.layout.Layout.with_` refuses."""
        return self._of(self.layout.with_(zero_stage=zero_stage), self.stage)

    def lookup(self, fn: Callable[..., Any], args: tuple[Any, ...], *names: str) -> Any:
        return fn(*args, *[getattr(self, n) for n in names])

    def lookup_values(self, fn: Callable[..., Any], args: tuple[Any, ...], *values: Any) -> Any:
        return fn(*args, *values)

    def per_stage(self, fn: Callable[..., Any], args: tuple[Any, ...], *names: str) -> Any:
        return fn(*args, *[getattr(self, n) for n in names])[self.stage]

    def stages(self, fn: Callable[[Any], Any]) -> list[Any]:
        return [fn(self.at(i)) for i in range(self.layout.pp)]

    @property
    def links_known(self) -> bool:
        return self._links is not None

    def link(self, axis: str) -> LinkFields:
        if self._links is None:
            raise AssertionError("a term that reads links was given no links")
        key, degree = _PLACED.get(axis, (axis, axis))
        link = self._links.get(key)
        if link is None:
            return LinkFields(None, False, 0, 1)
        size = getattr(link, "group_size", None)
        if size is None:  # a bare AxisLinkLike: degree from the layout
            size = getattr(self.layout, degree)
        return LinkFields(
            None if link.link == "none" else link.bandwidth_bytes_per_s,
            link.link == "nvlink",
            getattr(link, "span", 0),
            size if link.link != "none" else 1,
            getattr(link, "per_domain", 0),
            getattr(link, "domains", 0),
            getattr(link, "other_per_domain", 0),
            getattr(link, "other_domains", 0),
        )


def axis_members(c: Context, f: Fields, axis: str) -> Any:
    """Ranks of ``axis``'s slowest group in one NVLink domain of the accelerator, as NCCL's
    latency model counts its domains (:func:`model.nccl_latency.steps_latency`'s
    ``per_domain``): the whole group where it lies in one domain, else the placement's
    ``per_domain`` (:func:`model.moe_run.members_per_domain`, the span's closed form for a link
    built without a placement); at least 1 (a link of unknown span: every ring step over the
    network). The tp, cp and ep clocks (:mod:`model.terms.roofline`) and the dp and edp
    collectives (:mod:`model.terms.dp_time`) read it. An int, or ``[n, 1]`` columns. Units:
    ranks."""
    link = f.link(axis)
    members = members_per_domain(
        link.nvlink, link.span, link.group_size, c.gpu.placement_domain, link.per_domain
    )
    return maximum(members, 1)


def axis_domains(c: Context, f: Fields, axis: str) -> Any:
    """NVLink domains of ``axis``'s slowest group as NCCL counts a communicator's nodes
    (``comm->nNodes``, :func:`model.rank_groups.nccl_nodes`; what its ring's network steps and
    its tree's levels read, :func:`model.nccl_latency.steps_latency`'s ``domains``): 1 where
    the group lies in one domain, else the placement's ``domains``; 0 for a link built without
    a placement (``⌈n ∕`` :func:`axis_members` ``⌉`` then, the groups that line up with the
    domains). An int, or ``[n, 1]`` columns. Units: domains."""
    link = f.link(axis)
    return where(link.nvlink, 1, link.domains)


def link_members(bandwidth: Any, scaleup: Any, members: Any) -> Any:
    """An axis's members per NVLink domain as its clock's :attr:`model.roofline.LinkTime.
    per_domain` reads them (:func:`axis_members`, or the expert dispatch's
    :func:`model.terms.ep_link.ep_dispatch_members`), on the link ``bandwidth`` (bytes/s, 0:
    none) of tier ``scaleup``; 1 where they change no hop (a scale-up link, all of whose steps
    ride NVLink, or no link), so they add no distinct clocks to the search's tables. Units:
    ranks.

    >>> link_members(400e9, False, 8), link_members(900e9, True, 64), link_members(0.0, False, 8)
    (8, 1, 1)
    """
    return where(scaleup | (bandwidth <= 0), 1, members)


def link_caps(c: Context, f: Fields, axis: str, bandwidth: Any, scaleup: Any) -> tuple[Any, Any]:
    """``(NIC, NVLink)`` bytes/s a direction of ``axis``'s link as its clock's
    :attr:`model.roofline.LinkTime.nic_bytes_per_s` and :attr:`~model.roofline.LinkTime.
    nvlink_bytes_per_s` read them, on the link ``bandwidth`` (bytes/s, 0: none) of tier
    ``scaleup`` (:func:`model.terms.roofline.axis_link`): one GPU's share of the tier the
    topology placed (:attr:`LinkFields.bandwidth`, one NIC's across domains, a what-if's
    included) and the accelerator's NVLink (:attr:`model.hardware.DeviceSpec.
    nvlink_bytes_per_s`, the cap :func:`model.step_time.rings_bandwidth` applied); ``(0, 0)``
    where they change nothing (a scale-up link or none: :func:`model.nvlink_bound.ring_caps`,
    the rule the rollout engines' collectives read too), so they add no distinct clocks to the
    search's tables. Floats, or ``[n, 1]`` columns."""
    raw = f.link(axis).bandwidth
    nic = as_float(raw if raw is not None else 0.0)
    return ring_caps(scaleup, bandwidth, nic, float(c.gpu.nvlink_bytes_per_s or 0.0))


def world_ranks(f: Fields) -> Any:
    """The layout's ranks, ``dp·tp·pp·cp`` (expert parallelism is carved out of the dp·cp
    block and the expert tensor-parallel order etp-ep-edp out of tp·cp·dp, so the expert
    layout has the same ranks): the world whose groups the placements count
    (:func:`model.nccl_channels.group_placements`). An int, or ``[n, 1]`` columns. Units: ranks."""
    return f.dp * f.tp * f.pp * f.cp


def stage_max(values: Any) -> Any:
    """The largest of a per-stage figure: ``max`` of a list (one layout), the maximum over the
    last axis of an ``[n, P]`` array, kept ``[n, 1]``.

    Examples
    --------
    >>> stage_max([3, 5, 5])
    5
    """
    if is_array(values):
        return values.__array_namespace__().max(values, axis=-1, keepdims=True)
    return max(values)


def stage_argmax(values: Any) -> Any:
    """The first stage holding the largest of a per-stage figure (an int; ``[n, 1]`` indices
    for arrays).

    Examples
    --------
    >>> stage_argmax([3, 5, 5])
    1
    """
    if is_array(values):
        return values.__array_namespace__().argmax(values, axis=-1, keepdims=True)
    return max(range(len(values)), key=lambda i: (values[i], -i))


def stage_take(values: Any, index: Any) -> Any:
    """A per-stage figure at stage ``index`` (:func:`stage_argmax`'s)."""
    if is_array(values):
        return values.__array_namespace__().take_along_axis(values, index, axis=-1)
    return values[index]


def stage_tuple(values: Any) -> tuple[Any, ...]:
    """A per-stage figure that is a tuple, as a tuple of per-stage figures: a list of tuples
    (one layout) transposed; a tuple of ``[n, P]`` arrays (columns) as it is.

    Examples
    --------
    >>> stage_tuple([(1, 2), (3, 4)])
    ([1, 3], [2, 4])
    """
    if isinstance(values, list):
        return tuple(list(v) for v in zip(*values, strict=True))
    return tuple(values)
