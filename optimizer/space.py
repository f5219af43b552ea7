"""The layout space: legal *shapes* (degrees, micro-batch, schedule) and the modifiers
(zero_stage, recompute) the search chooses among.

Legality is decided by :func:`model.layout.validate` alone — the same rules the evaluator
applies — so the search never re-types a divisibility rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trainplan.model.activation_offload import check_activation_offload
from trainplan.model.context_parallel import (
    DEFAULT_SEARCHED_CP_KINDS,
    CpKind,
    check_cp_kind,
)
from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import DEFAULT_FRAMEWORK, ZERO_STAGES, Framework, check_framework
from trainplan.model.layout import Layout, Recompute, validate
from trainplan.model.offload import NO_OFFLOAD, Offload, check_offload
from trainplan.model.pipeline import Schedule
from trainplan.model.precision import check_fp8_param_gather
from trainplan.model.recompute_modules import DEFAULT_RECOMPUTE_MODULES, check_recompute_modules
from trainplan.model.specs import ModelSpec, TrainingSpec

DEFAULT_RANK_ORDER: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
"""Megatron-LM's default order, inner to outer."""

__all__ = [
    "Shape",
    "SearchSpace",
    "divisors",
    "legal_shapes",
    "ZERO_PREFERENCE",
    "RECOMPUTE_PREFERENCE",
]

ZERO_PREFERENCE = (1, 2, 0, 3)
"""Tie-break among ZeRO stages of equal step time: ZeRO-1 (the common default), then 2, 0, 3."""
RECOMPUTE_PREFERENCE = (Recompute.NONE, Recompute.SELECTIVE, Recompute.SQRT, Recompute.FULL)
"""Tie-break among recompute modes of equal step time: less recomputation first."""
_SCHEDULE_ORDER = {Schedule.ONE_F_ONE_B: 0, Schedule.INTERLEAVED: 1, Schedule.GPIPE: 2}


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending.

    Examples
    --------
    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True, slots=True, order=False)
class Shape:
    """A layout without its modifiers: degrees, micro-batch size, schedule, virtual stages."""

    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    micro_batch_size: int
    schedule: Schedule
    virtual_stages: int
    rank_order: tuple[str, ...] = DEFAULT_RANK_ORDER
    """Inner-to-outer axis order over the ranks (decides which axes ride NVLink)."""
    order_rank: int = 0
    """Position of ``rank_order`` in the space's list (tie-break: earlier first)."""
    framework: Framework = DEFAULT_FRAMEWORK
    """The framework profile whose mechanisms this shape's ZeRO stages are."""
    framework_rank: int = 0
    """Position of ``framework`` in the space's list (tie-break: earlier first)."""
    cp_kind: CpKind = CpKind.RING
    """How the cp ranks exchange attention's inputs (:mod:`model.context_parallel`); ``ring``
    when cp = 1."""
    cp_a2a: int | None = None
    """The inner all-to-all degree of ``a2a+p2p``; None for every other kind."""
    cp_kind_rank: int = 0
    """Position of ``cp_kind`` in the space's list (tie-break: earlier first)."""

    def layout(
        self, zero_stage: int, recompute: Recompute | str, framework: Framework | str | None = None
    ) -> Layout:
        """The full layout with these modifiers (``framework``: another profile than the
        shape's)."""
        return Layout(
            dp=self.dp,
            tp=self.tp,
            pp=self.pp,
            cp=self.cp,
            cp_kind=self.cp_kind,
            cp_a2a=self.cp_a2a,
            ep=self.ep,
            zero_stage=zero_stage,
            recompute=recompute if isinstance(recompute, Recompute) else Recompute(recompute),
            micro_batch_size=self.micro_batch_size,
            schedule=self.schedule,
            virtual_stages=self.virtual_stages,
            rank_order=self.rank_order,
            framework=self.framework if framework is None else Framework(framework),
        )

    @property
    def tie_key(self) -> tuple[int, ...]:
        """Tie-break order among shapes of equal step time: fewer model-parallel GPUs
        (tp·pp·cp), then smaller tp, pp, cp, CP flavours in the space's order (the hybrid's
        smaller inner degree first), smaller ep, smaller micro-batch, schedule 1F1B <
        interleaved < GPipe, fewer virtual stages, rank orders and frameworks in the space's
        order."""
        return (
            self.tp * self.pp * self.cp,
            self.tp,
            self.pp,
            self.cp,
            self.cp_kind_rank,
            self.cp_a2a or 0,
            self.ep,
            self.micro_batch_size,
            _SCHEDULE_ORDER[self.schedule],
            self.virtual_stages,
            self.order_rank,
            self.framework_rank,
        )


def _allowed(values: tuple[int, ...] | None, candidates: list[int]) -> list[int]:
    return candidates if values is None else [c for c in candidates if c in values]


DEFAULT_VIRTUAL_STAGES: tuple[int, ...] = (2, 3, 4, 8)
"""Virtual stages the search tries with interleaving: Megatron-LM Table 1's 2 and 3, 4, and
Llama 3 405B's 8 (one-layer chunks, §3.3.2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    """Allowed values per decision; None means every legal value."""

    num_gpus: int
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = (1,)
    ep: tuple[int, ...] | None = None
    micro_batch_size: tuple[int, ...] | None = None
    max_micro_batch_size: int = 8
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recomputes: tuple[Recompute, ...] = tuple(Recompute)
    schedules: tuple[Schedule, ...] = tuple(Schedule)
    virtual_stages: tuple[int, ...] = DEFAULT_VIRTUAL_STAGES
    """Virtual stages tried with the interleaved schedule."""
    rank_orders: tuple[tuple[str, ...], ...] = (DEFAULT_RANK_ORDER,)
    """Rank orders the search may choose among (the first is preferred on ties)."""
    frameworks: tuple[Framework, ...] = (DEFAULT_FRAMEWORK,)
    """Framework profiles the search may choose among (the first is preferred on ties); each
    shape's ZeRO stages are that framework's (:data:`model.frameworks.ZERO_STAGES`)."""
    cp_kinds: tuple[CpKind, ...] = DEFAULT_SEARCHED_CP_KINDS
    """CP flavours the search may choose among on shapes with cp > 1 (the first is preferred
    on ties; a shape with cp = 1 has none); default ring, all-gather and Ulysses
    (:data:`model.context_parallel.DEFAULT_SEARCHED_CP_KINDS`)."""
    cp_a2a: tuple[int, ...] | None = None
    """Inner all-to-all degrees tried with ``a2a+p2p``; None = every legal one (dividing cp,
    strictly between 1 and cp, and the heads on a tensor-parallel rank)."""
    extra: dict[str, object] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.num_gpus < 1:
            raise LayoutError(f"gpus: {self.num_gpus} must be at least 1")
        if not self.zero_stages or not self.recomputes or not self.schedules:
            raise LayoutError(
                "search: zero stages, recompute modes and schedules must not be empty"
            )
        if not self.frameworks:
            raise LayoutError("search: give at least one --framework")
        object.__setattr__(self, "frameworks", tuple(Framework(f) for f in self.frameworks))
        if not self.cp_kinds:
            raise LayoutError("search: give at least one --cp-kind")
        object.__setattr__(self, "cp_kinds", tuple(CpKind(k) for k in self.cp_kinds))
        for fw in self.frameworks:
            if not set(ZERO_STAGES[fw]) & set(self.zero_stages):
                raise LayoutError(
                    f"zero: {', '.join(map(str, self.zero_stages))} has no stage of --framework "
                    f"{fw} (it models {', '.join(map(str, ZERO_STAGES[fw]))})"
                )


def _schedules(space: SearchSpace, pp: int) -> list[tuple[Schedule, int]]:
    if pp == 1:  # no pipeline: the schedules coincide; keep one
        return [(Schedule.ONE_F_ONE_B, 1)]
    out: list[tuple[Schedule, int]] = [
        (s, 1) for s in space.schedules if s is not Schedule.INTERLEAVED
    ]
    if Schedule.INTERLEAVED in space.schedules:
        out += [(Schedule.INTERLEAVED, v) for v in space.virtual_stages if v > 1]
    return out


def legal_shapes(model: ModelSpec, training: TrainingSpec, space: SearchSpace) -> list[Shape]:
    """Every shape of ``space`` that :func:`model.layout.validate` accepts, in tie-break order."""
    G, B = space.num_gpus, training.global_batch_size
    moe = model.arch is not None and model.arch.moe is not None
    shapes = []
    for tp in _allowed(space.tp, divisors(G)):
        for cp in _allowed(space.cp, divisors(G // tp)):
            for pp in _allowed(space.pp, divisors(G // (tp * cp))):
                dp = G // (tp * cp * pp)
                if B % dp:
                    continue
                eps = _allowed(space.ep, divisors(dp * cp)) if moe else [1]
                mbs = [
                    b
                    for b in _allowed(space.micro_batch_size, divisors(B // dp))
                    if b <= space.max_micro_batch_size
                ]
                for ep in eps:
                    for b in mbs:
                        plain = None  # whether the plain (1F1B) schedule is legal
                        for schedule, v in _schedules(space, pp):
                            shape = Shape(dp, tp, pp, cp, ep, b, schedule, v, space.rank_orders[0])
                            if schedule is not Schedule.INTERLEAVED and plain is not None:
                                ok = plain  # GPipe and 1F1B obey the same rules
                            elif schedule is Schedule.INTERLEAVED and plain is False:
                                ok = False  # interleaving only adds rules (m % pp, pp·v chunks)
                            else:
                                ok = _legal(shape, model, training, G)
                            if schedule is not Schedule.INTERLEAVED:
                                plain = ok
                            if not ok:
                                continue
                            # neither the CP flavour's rules nor the rank order change the rest
                            variants = [shape] if cp == 1 else _with_cp_kinds(shape, space, model)
                            for variant in variants:
                                for k, order in enumerate(space.rank_orders):
                                    base = variant  # built with the first order, rank 0
                                    if k:
                                        base = replace(variant, rank_order=order, order_rank=k)
                                    shapes += _with_frameworks(
                                        base, space, pp, training.offload,
                                        training.recompute_modules, training.fp8_param_gather,
                                    )  # fmt: skip
    return sorted(shapes, key=lambda s: s.tie_key)


def _legal(shape: Shape, model: ModelSpec, training: TrainingSpec, num_gpus: int) -> bool:
    """Whether :func:`model.layout.validate` accepts the shape's axes (each framework's ZeRO
    stages are checked by :func:`_with_frameworks`)."""
    try:  # the axes only: offload is a framework's mechanism, checked with it
        axes = replace(training, offload=NO_OFFLOAD)
        validate(shape.layout(1, Recompute.NONE, Framework.TEXTBOOK), model, axes, num_gpus)
    except LayoutError:
        return False
    return True


def _with_cp_kinds(shape: Shape, space: SearchSpace, model: ModelSpec) -> list[Shape]:
    """``shape`` (legal with the ring) under each CP flavour of the space whose own rules
    :func:`model.context_parallel.check_cp_kind` accepts — the hybrid once per legal inner
    degree; a shape with cp = 1 once, as it is."""
    if shape.cp == 1:
        return [shape]
    out = []
    for rank, kind in enumerate(space.cp_kinds):
        inner: list[int | None] = [None]
        if kind is CpKind.HYBRID:
            inner = [u for u in _allowed(space.cp_a2a, divisors(shape.cp)) if 1 < u < shape.cp]
        for u in inner:
            try:
                check_cp_kind(kind, shape.cp, u, shape.tp, model.arch)
            except LayoutError:
                continue
            out.append(replace(shape, cp_kind=kind, cp_a2a=u, cp_kind_rank=rank))
    return out


def recipe_refusal(
    space: SearchSpace, training: TrainingSpec, has_moe: bool, has_mla: bool = True
) -> str | None:
    """Why no framework of ``space`` can run the recipe's offload at any allowed ZeRO stage
    (the first framework's rule, as :func:`model.offload.check_offload` and
    :func:`model.activation_offload.check_activation_offload` state it), or None when one can:
    a search that finds no shape says this instead of a generic "no legal combination"."""
    first = None
    for fw in space.frameworks:
        for z in space.zero_stages:
            try:
                check_offload(fw, z, training.offload)
                check_activation_offload(
                    fw, "none", training.offload.activations, has_moe, None, has_mla
                )
                check_recompute_modules(
                    fw, "selective", training.recompute_modules, has_moe, has_mla
                )
                check_fp8_param_gather(fw, training.fp8_param_gather)
            except LayoutError as err:
                first = first or str(err)
                continue
            return None
    return first


def _with_frameworks(
    base: Shape,
    space: SearchSpace,
    pp: int,
    offload: Offload = NO_OFFLOAD,
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES,
    fp8_param_gather: bool = False,
) -> list[Shape]:
    """``base`` under each framework of the space that runs at least one allowed ZeRO stage
    with ``pp`` pipeline stages (:func:`model.frameworks.check_framework`), the recipe's
    offload (:func:`model.offload.check_offload`), its per-module recomputation
    (:func:`model.recompute_modules.check_recompute_modules`) and FP8 primary weights
    (:func:`model.precision.check_fp8_param_gather`)."""
    out = []
    for rank, fw in enumerate(space.frameworks):
        for z in space.zero_stages:
            try:
                check_framework(fw, z, pp)
                check_offload(fw, z, offload)
                check_recompute_modules(fw, "selective", recompute_modules, True, True)
                check_fp8_param_gather(fw, fp8_param_gather)
            except LayoutError:
                continue
            same = fw is base.framework and rank == base.framework_rank
            out.append(base if same else replace(base, framework=fw, framework_rank=rank))
            break
    return out
