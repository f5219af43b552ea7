"""The layout space: legal *shapes* (degrees, micro-batch, schedule) and the modifiers
(zero_stage, recompute) the search chooses among.

Legality is decided by :func:`model.legality.legality` alone — the rules
:func:`model.layout.validate` checks for the evaluator, evaluated over columns of candidates —
so the search never re-types a rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import product

import numpy as np

from trainplan.model.context_parallel import DEFAULT_SEARCHED_CP_KINDS, CpKind
from trainplan.model.cp_rules import FSDP2_SEARCHED
from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import (
    DEFAULT_FRAMEWORK,
    ZERO_STAGES,
    DistributedOptimizer,
    Framework,
)
from trainplan.model.layout import Layout, Recompute
from trainplan.model.legality import Setting, legality, refusal
from trainplan.model.model_spec import ModelSpec
from trainplan.model.moe_run import DROPLESS
from trainplan.model.offload import NO_OFFLOAD
from trainplan.model.optimizers import OptimizerKind
from trainplan.model.pipeline import LAYOUT_CHUNKS, SPLIT_BACKWARD, Schedule
from trainplan.model.recompute_modules import DEFAULT_RECOMPUTE_MODULES
from trainplan.model.schedule_support import SCHEDULE_SUPPORT
from trainplan.model.specs import TrainingSpec
from trainplan.optimizer.columns import ShapeColumns
from trainplan.optimizer.virtual_stages import (
    divisors,
    virtual_stage_options,
)

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
_SCHEDULE_ORDER = {
    Schedule.ONE_F_ONE_B: 0,
    Schedule.INTERLEAVED: 1,
    Schedule.GPIPE: 2,
    Schedule.ZB_H1: 3,
    Schedule.ZB_H2: 4,
    Schedule.ZB_V: 5,
    Schedule.DUALPIPE_V: 6,
    Schedule.DUALPIPE: 7,
}


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
    optimizer: OptimizerKind = OptimizerKind.ADAM
    """The optimizer (:mod:`model.optimizers`): Adam unless the space allows others."""
    optimizer_rank: int = 0
    """Position of ``optimizer`` in the space's list (tie-break: earlier first)."""

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
            optimizer=self.optimizer,
        )

    @property
    def tie_key(self) -> tuple[int, ...]:
        """Tie-break order among shapes of equal step time: fewer model-parallel GPUs
        (tp·pp·cp), then smaller tp, pp, cp, CP flavours in the space's order (the hybrid's
        smaller inner degree first), smaller ep, smaller micro-batch, schedule 1F1B <
        interleaved < GPipe, fewer virtual stages, rank orders and frameworks in the space's
        order, then optimizers in the space's order."""
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
            self.optimizer_rank,
        )


def _allowed(values: tuple[int, ...] | None, candidates: list[int]) -> list[int]:
    return candidates if values is None else [c for c in candidates if c in values]


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    """Allowed values per decision; None means every legal value."""

    num_gpus: int
    tp: tuple[int, ...] | None = None
    max_tp: int | None = None
    """Largest tensor-parallel degree tried (``--max-tp``), a cap applied to each GPU count's
    divisors where the shapes are built (:func:`_candidates`), so a cap far above the GPU count
    costs nothing: no list of 1..cap is ever made; None = no cap."""
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = (1,)
    ep: tuple[int, ...] | None = None
    micro_batch_size: tuple[int, ...] | None = None
    max_micro_batch_size: int = 8
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    recomputes: tuple[Recompute, ...] = tuple(Recompute)
    schedules: tuple[Schedule, ...] = tuple(Schedule)
    virtual_stages: tuple[int, ...] | None = None
    """Virtual stages tried with the interleaved schedule; None: :func:`virtual_stage_options`
    of each pipeline degree."""
    rank_orders: tuple[tuple[str, ...], ...] = (DEFAULT_RANK_ORDER,)
    """Rank orders the search may choose among (the first is preferred on ties)."""
    frameworks: tuple[Framework, ...] = (DEFAULT_FRAMEWORK,)
    """Framework profiles the search may choose among (the first is preferred on ties); each
    shape's ZeRO stages are that framework's (:data:`model.frameworks.ZERO_STAGES`)."""
    cp_kinds: tuple[CpKind, ...] = DEFAULT_SEARCHED_CP_KINDS
    """CP flavours the search may choose among on shapes with cp > 1 (the first is preferred
    on ties; a shape with cp = 1 has none), each under the frameworks that run it; default
    ring, all-gather, Ulysses and PyTorch's two
    (:data:`model.context_parallel.DEFAULT_SEARCHED_CP_KINDS`)."""
    cp_a2a: tuple[int, ...] | None = None
    """Inner all-to-all degrees tried with ``a2a+p2p``; None = every legal one (dividing cp,
    strictly between 1 and cp, and the heads on a tensor-parallel rank)."""
    optimizers: tuple[OptimizerKind, ...] = (OptimizerKind.ADAM,)
    """Optimizers the search may choose among (the first is preferred on ties): Adam only
    unless the user allows others (:mod:`model.optimizers`); each under the frameworks that run
    it."""
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
        object.__setattr__(self, "recomputes", tuple(Recompute(r) for r in self.recomputes))
        if not self.cp_kinds:
            raise LayoutError("search: give at least one --cp-kind")
        object.__setattr__(self, "cp_kinds", tuple(CpKind(k) for k in self.cp_kinds))
        if not self.optimizers:
            raise LayoutError("search: give at least one --optimizer")
        object.__setattr__(self, "optimizers", tuple(OptimizerKind(o) for o in self.optimizers))
        for fw in self.frameworks:
            if not set(ZERO_STAGES[fw]) & set(self.zero_stages):
                raise LayoutError(
                    f"zero: {', '.join(map(str, self.zero_stages))} has no stage of --framework "
                    f"{fw} (it models {', '.join(map(str, ZERO_STAGES[fw]))})"
                )


def _schedules(
    space: SearchSpace, pp: int, num_layers: int | None = None
) -> list[tuple[Schedule, int]]:
    if pp == 1:  # no pipeline: the schedules coincide; keep one
        return [(Schedule.ONE_F_ONE_B, 1)]
    # a schedule only where a framework of the space runs it (schedule_support)
    runs = {s for s in space.schedules for fw in space.frameworks if fw in SCHEDULE_SUPPORT[s]}
    out: list[tuple[Schedule, int]] = [
        (s, 1) for s in space.schedules if s in {Schedule.ONE_F_ONE_B, Schedule.GPIPE} & runs
    ]
    if Schedule.INTERLEAVED in runs:
        given = space.virtual_stages
        tried = virtual_stage_options(num_layers, pp) if given is None else given
        out += [(Schedule.INTERLEAVED, v) for v in tried if v > 1]
    return out + [(s, LAYOUT_CHUNKS[s]) for s in space.schedules if s in SPLIT_BACKWARD & runs]


def _candidates(model: ModelSpec, training: TrainingSpec, space: SearchSpace) -> dict[str, list]:
    """Every (tp, cp, pp, dp, ep, b, schedule, v) of the space whose degrees multiply to the GPU
    count, dp dividing B and b dividing B/dp (the space itself, before any rule), as lists."""
    G, B = space.num_gpus, training.global_batch_size
    moe = model.arch is not None and model.arch.moe is not None
    out: dict[str, list] = {k: [] for k in ("tp", "cp", "pp", "dp", "ep", "micro_batch_size")}
    out["schedule"], out["virtual_stages"] = [], []
    tps = [t for t in divisors(G) if space.max_tp is None or t <= space.max_tp]
    for tp in _allowed(space.tp, tps):
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
                layers = model.arch.num_layers if model.arch is not None else None
                for ep, b, (schedule, v) in product(eps, mbs, _schedules(space, pp, layers)):
                    for key, value in zip(
                        ("tp", "cp", "pp", "dp", "ep", "micro_batch_size", "schedule",
                         "virtual_stages"), (tp, cp, pp, dp, ep, b, schedule, v), strict=True,
                    ):  # fmt: skip
                        out[key].append(value)
    return out


def _legal(setting: Setting, values: dict[str, list], **fixed: object) -> np.ndarray:
    """[n] whether each candidate of ``values`` (the ``fixed`` fields the same for all) breaks
    no legality rule (:func:`model.legality.legality`)."""
    columns = {k: _column(v) for k, v in values.items()}
    n = len(next(iter(columns.values())))
    table = ShapeColumns((), setting.training.global_batch_size, values=columns)
    legal, _ = legality(setting, table.view(np.arange(n), dict(fixed)))
    return np.broadcast_to(np.asarray(legal, dtype=bool).reshape(-1), (n,))


def _column(items: list) -> np.ndarray:
    if items and all(isinstance(x, int) and not isinstance(x, bool) for x in items):
        return np.array(items, dtype=np.int64)
    column = np.empty(len(items), dtype=object)
    column[:] = items
    return column


def legal_shapes(model: ModelSpec, training: TrainingSpec, space: SearchSpace) -> list[Shape]:
    """Every shape of ``space`` that the legality rules accept (:func:`model.legality.legality`,
    the rules :func:`model.layout.validate` checks), in tie-break order: the axes' rules (with
    the textbook profile at ZeRO-1, no offload and the default MoE dispatch, which break none of
    them), each CP flavour's
    (:func:`_with_cp_kinds`), and each framework of the space that runs one of its ZeRO stages
    with the shape's pp and the recipe's offload (:func:`_with_frameworks`)."""
    values = _candidates(model, training, space)
    if not values["tp"]:
        return []
    # the framework- and recompute-dependent recipe choices (offload, the MoE dispatcher and its
    # overlap, the recompute modules, the distributed optimizer, Megatron-Core's fused loss and
    # FP8 primary weights, the op-level save list) are checked with each framework and recompute
    # mode in the tables (optimizer.job_rows._legal), not here
    plain = replace(
        training, offload=NO_OFFLOAD, moe_run=DROPLESS, recompute_modules=DEFAULT_RECOMPUTE_MODULES,
        distributed_optimizer=DistributedOptimizer.MCORE, cross_entropy_fusion_impl="none",
        fp8_param_gather=False, fsdp_double_buffer=False, deepspeed_overlap_comm=False,
        flat_parameters=False,
        sac_saves_scaled_mm=True, seq_parallel_communication_data_type="fp32",
        bias_dropout_fusion=True,
    )  # fmt: skip
    axes = Setting(model, plain, space.num_gpus)
    legal = _legal(axes, values, framework=Framework.TEXTBOOK, zero_stage=1,
                   recompute=Recompute.NONE)  # fmt: skip
    keys = ("dp", "tp", "pp", "cp", "ep", "micro_batch_size", "schedule", "virtual_stages")
    base = [
        Shape(**{k: values[k][i] for k in keys}, rank_order=space.rank_orders[0])
        for i in np.flatnonzero(legal)
    ]
    with_kinds = [v for shape in base for v in _with_cp_kinds(shape, space, model, axes)]
    ordered = [
        replace(v, rank_order=order, order_rank=k) if k else v
        for v in with_kinds
        for k, order in enumerate(space.rank_orders)
    ]
    shapes = _with_frameworks(ordered, space, model, training)
    return sorted(shapes, key=lambda s: s.tie_key)


def _with_cp_kinds(
    shape: Shape, space: SearchSpace, model: ModelSpec, axes: Setting
) -> list[Shape]:
    """``shape`` (legal with the ring) under each CP flavour of the space whose own rules
    accept under at least one framework of the space (:func:`model.legality.refusal`: the
    context-parallel rule, whose head rule is the framework's; :func:`_runs_cp` checks each
    framework) — the hybrid once per legal inner degree; a shape with cp = 1 once, as it is."""
    if shape.cp == 1:
        return [shape]
    out = []
    for rank, kind in enumerate(space.cp_kinds):
        inner: list[int | None] = [None]
        if kind is CpKind.HYBRID:
            inner = [u for u in _allowed(space.cp_a2a, divisors(shape.cp)) if 1 < u < shape.cp]
        for u in inner:
            if any(not _cp_refusal(axes, shape, fw, kind, u) for fw in space.frameworks):
                out.append(replace(shape, cp_kind=kind, cp_a2a=u, cp_kind_rank=rank))
    return out


def _cp_refusal(
    setting: Setting, shape: Shape, framework: Framework, kind: CpKind, cp_a2a: int | None
) -> str:
    """The context-parallel rules' refusal of ``shape`` with flavour ``kind`` (inner degree
    ``cp_a2a``) under ``framework`` (:func:`model.legality.refusal`), or ""."""
    return refusal(
        setting, cp=shape.cp, cp_kind=kind, cp_a2a=cp_a2a, tp=shape.tp, sp=shape.tp > 1,
        framework=framework, pp=shape.pp,
    )  # fmt: skip


def _with_frameworks(
    shapes: list[Shape], space: SearchSpace, model: ModelSpec, training: TrainingSpec
) -> list[Shape]:
    """Each shape under each framework of the space that runs at least one allowed ZeRO stage
    with its pp and the recipe's offload (:func:`model.legality.refusal`: the framework and
    offload rules)."""
    setting = Setting(model, training, space.num_gpus)
    named = space.cp_kinds != DEFAULT_SEARCHED_CP_KINDS
    out: list[Shape] = []
    for rank, fw in enumerate(space.frameworks):
        runs = {
            pp: any(
                not refusal(setting, framework=fw, zero_stage=z, pp=pp) for z in space.zero_stages
            )
            for pp in {s.pp for s in shapes}
        }
        optimizers = [
            (k, o)
            for k, o in enumerate(space.optimizers)
            if any(
                not refusal(setting, optimizer=o, framework=fw, zero_stage=z)
                for z in space.zero_stages
            )
        ]
        for s in shapes:
            if not (
                runs[s.pp]
                and _runs_split(setting, s, fw)
                and _runs_schedule(setting, s, fw)
                and _runs_cp(setting, s, fw, named)
            ):
                continue
            for k, o in optimizers:
                same = (fw, rank, o, k) == (s.framework, s.framework_rank, s.optimizer, 0)
                out.append(
                    s
                    if same
                    else replace(
                        s, framework=fw, framework_rank=rank, optimizer=o, optimizer_rank=k
                    )
                )
    return out


def _runs_cp(setting: Setting, shape: Shape, framework: Framework, named: bool) -> bool:
    """Whether ``framework`` runs the shape's CP flavour (the legality rules
    :func:`model.cp_rules.check_cp_framework` and :func:`model.cp_rules.check_cp_kind`, whose
    head rule is the framework's): a flavour the framework does not run is not
    tabulated under it; with the default flavours (``named`` False) ``fsdp2`` takes
    torchtitan's only (:data:`model.cp_rules.FSDP2_SEARCHED`)."""
    if shape.cp > 1 and not named and framework is Framework.FSDP2:
        return shape.cp_kind in FSDP2_SEARCHED
    return not _cp_refusal(setting, shape, framework, shape.cp_kind, shape.cp_a2a)


def _runs_split(setting: Setting, shape: Shape, framework: Framework) -> bool:
    """Whether ``framework``'s own split cuts the model into the shape's pp·v stages (the
    legality rule ``split``: :func:`model.split.check_chunks` under the framework's rule,
    :func:`model.split.split_rule_of`; DeepSpeed's needs a layer on every stage)."""
    return not refusal(
        setting, pp=shape.pp, virtual_stages=shape.virtual_stages, uneven_stages=True,
        stage_layers=None, framework=framework,
    )  # fmt: skip


def _runs_schedule(setting: Setting, shape: Shape, framework: Framework) -> bool:
    """Whether ``framework`` runs the shape's schedule with its micro-batches (the legality
    rule :func:`model.schedule_cost.check_split_layout`)."""
    m = setting.training.global_batch_size // (shape.dp * shape.micro_batch_size)
    return not refusal(
        setting, pp=shape.pp, m=m, schedule=shape.schedule,
        virtual_stages=shape.virtual_stages, framework=framework,
    )  # fmt: skip
