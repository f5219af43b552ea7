"""One point of the layout space, and every legality rule in one place
(docs/concepts/conventions.md "Inputs and errors").

Rank order (inner to outer): tp, cp, ep, dp, pp (Megatron-LM's default). The world size is
``G = dp · tp · pp · cp``; the expert-parallel group is carved out of the ``dp · cp`` ranks, so ep
does not multiply G (docs/concepts/conventions.md "Layout").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from enum import StrEnum

from trainplan.model.activation_offload import check_activation_offload
from trainplan.model.context_parallel import CpKind, check_cp_kind
from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import DEFAULT_FRAMEWORK, Framework, check_framework
from trainplan.model.offload import check_offload
from trainplan.model.pipeline import Schedule, check_schedule
from trainplan.model.precision import check_fp8_param_gather
from trainplan.model.recompute_modules import check_recompute_modules
from trainplan.model.specs import Architecture, AttentionKind, ModelSpec, TrainingSpec
from trainplan.model.split import (
    check_chunks,
    check_stage_layers,
    chunk_sizes_from_ranks,
    stage_chunks,
)
from trainplan.model.units import check_limit

__all__ = [
    "Recompute",
    "Layout",
    "validate",
    "check_expert_parallel",
    "LAYOUT_FIELDS",
    "SEARCHED_FIELDS",
]


class Recompute(StrEnum):
    """Activation recomputation: ``none``; ``sqrt`` (Chen et al. 2016, checkpoints every
    round(√n) layers); ``selective`` (attention core only, Korthikanti et al. 2022 §5);
    ``full`` (every layer from its input). Not ordered: compare memory results, not modes."""

    NONE = "none"
    SQRT = "sqrt"
    SELECTIVE = "selective"
    FULL = "full"


_ORDERS: set[tuple[str, ...]] = set()
"""Rank orders already checked (each a permutation of the five axes)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Parallel degrees and training knobs of one run. Degrees of 1 mean the axis is off."""

    dp: int = 1
    """Data-parallel degree (replicas of the model, beyond cp)."""
    tp: int = 1
    """Tensor-parallel degree (Megatron-LM intra-layer)."""
    pp: int = 1
    """Pipeline-parallel degree (stages)."""
    cp: int = 1
    """Context-parallel degree (the sequence split over cp ranks; how they exchange attention's
    inputs is ``cp_kind``)."""
    cp_kind: CpKind = CpKind.RING
    """How the cp ranks exchange attention's inputs: ``ring`` (K/V point to point),
    ``all-gather`` (K/V all-gathered, Llama 3), ``ulysses`` (all-to-all over heads) or
    ``a2a+p2p`` (Ulysses inside groups of ``cp_a2a``, ring across); Megatron-Core's
    ``--cp-comm-type`` (:mod:`model.context_parallel`). Anything but ``ring`` needs cp > 1."""
    cp_a2a: int | None = None
    """The inner all-to-all degree of ``a2a+p2p`` (Megatron-Core
    ``--hierarchical-context-parallel-sizes cp_a2a cp/cp_a2a``); None for every other kind."""
    ep: int = 1
    """Expert-parallel degree (routed experts split; carved out of dp·cp, or of tp·dp·cp when
    ``etp`` differs from tp)."""
    etp: int | None = None
    """Expert tensor-parallel degree (Megatron-Core ``--expert-tensor-parallel-size``): routed
    experts are split over etp·ep ranks and their optimizer state over the expert data-parallel
    group of tp·dp·cp/(etp·ep) ranks. None = tp (the textbook convention)."""
    zero_stage: int = 1
    """ZeRO stage 0–3 over dp·cp (3 = FSDP full sharding); Rajbhandari et al. 2019. What a stage
    holds and sends depends on ``framework`` (:mod:`model.frameworks`)."""
    framework: Framework = DEFAULT_FRAMEWORK
    """The framework profile whose mechanism the stage is: ``megatron``, ``deepspeed``,
    ``fsdp2`` or ``textbook`` (:mod:`model.frameworks`)."""
    recompute: Recompute = Recompute.NONE
    micro_batch_size: int = 1
    """b, sequences per micro-batch."""
    schedule: Schedule = Schedule.ONE_F_ONE_B
    virtual_stages: int = 1
    """v, model chunks per pipeline rank (interleaved schedule only)."""
    sequence_parallel: bool | None = None
    """Megatron sequence parallelism; None = on exactly when tp > 1."""
    rank_order: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
    """Inner to outer order of the axes over the ranks (Megatron-LM's default tp-cp-ep-dp-pp);
    it decides which axis's groups sit inside an NVLink domain (topology.placement)."""
    uneven_stages: bool = True
    """Allow pp·v not dividing L (ends get fewer layers); False makes that an error."""
    stage_layers: tuple[int, ...] | None = None
    """Transformer layers of each model chunk in model order (pp·v counts; or pp counts, one per
    stage, each divided evenly over its v chunks), summing to L; None = the default split
    (:mod:`model.split`). Zeros are allowed (Megatron-Core's custom pipeline layouts; an
    embedding-only first or loss-only last stage). Stored per chunk. As text, the counts with
    ``,`` or ``;`` between them (``7,8,8,7``: always a list here, never one number)."""
    recompute_layers: tuple[int, ...] | None = None
    """Per pipeline stage (pp counts), how many transformer layers of each of its model chunks
    are fully recomputed in backward — the first min(N, chunk's layers) layers of every chunk
    the stage holds, each from its input, as Megatron-LM's ``--recompute-granularity full
    --recompute-method block --recompute-num-layers N`` does (``megatron/core/transformer/
    transformer_block.py``, ``_checkpointed_forward``: the block is one model chunk's layers, so
    N is per chunk — per virtual pipeline stage when interleaved, NeMo's "Activation
    Recomputation" page; :func:`model.split.recomputed_in_chunks`). With v = 1 the chunk is the
    stage: its first N layers. The other layers keep ``recompute`` (``none`` or ``selective``).
    None = every layer keeps ``recompute``. A count of the stage's largest chunk = ``full``
    there; 0 = the base mode. One count per stage, 0 ≤ count ≤ the layers of the stage's
    largest model chunk (the stage's layers when v = 1). Mist (EuroSys 2025) and AdaPipe
    (ASPLOS 2024) choose such counts per stage."""
    deallocate_pipeline_outputs: bool = True
    """Free a stage's output tensor once it is sent to the next stage (Megatron-LM's
    ``deallocate_pipeline_outputs``, on in Megatron-Core; Llama 3 §3.3.2). False keeps one
    ``β·S·h`` (÷ tp with SP) per model chunk in flight, as Korthikanti et al. 2022 Appendix B's
    "without deallocation" line (:func:`model.memory.stage_activations`)."""

    pipeline_scatter_gather: bool = False
    """Megatron-LM's scatter/gather optimisation (Narayanan et al. 2021 §4.1,
    ``--scatter-gather-tensors-in-pipeline``, on by default in Megatron-LM 2021; no longer in
    Megatron-Core): without sequence parallelism each pipeline send carries 1/tp of the
    activation and the receiver all-gathers it over NVLink. Physical profiles only (the textbook
    always sends 1/tp)."""

    def __post_init__(self) -> None:
        if not (  # the common case first: every enum field already an enum (the search's shapes)
            self.recompute.__class__ is Recompute
            and self.schedule.__class__ is Schedule
            and self.framework.__class__ is Framework
            and self.cp_kind.__class__ is CpKind
        ):
            self._read_enums()
        names = _DEGREE_FIELDS
        if self.etp is not None:
            names += ("etp",)
        if self.cp_a2a is not None:
            names += ("cp_a2a",)
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise LayoutError(f"{name}: {value!r} must be a whole number >= 1")
            check_limit(name, value)
        order = (
            tuple(self.rank_order.split("-"))
            if isinstance(self.rank_order, str)
            else tuple(str(a) for a in self.rank_order)
        )
        if order not in _ORDERS and sorted(order) != ["cp", "dp", "ep", "pp", "tp"]:
            raise LayoutError(
                f"rank_order: {'-'.join(order)!r} must order each of tp, cp, ep, dp, pp once"
            )
        _ORDERS.add(order)
        object.__setattr__(self, "rank_order", order)
        if self.stage_layers is not None:
            object.__setattr__(self, "stage_layers", self._chunk_layers(self.stage_layers))
        if self.recompute_layers is not None:
            object.__setattr__(self, "recompute_layers", self._recompute_counts())
        if self.zero_stage not in (0, 1, 2, 3):
            raise LayoutError(f"zero_stage: {self.zero_stage!r} must be 0, 1, 2 or 3")

    def _read_enums(self) -> None:
        """Each enum field given as text (any case; aliases where the enum has them) read into
        its enum, or a LayoutError naming the field and the allowed values."""
        for name, kind in _ENUM_FIELDS:
            value = getattr(self, name)
            if isinstance(value, kind):
                continue
            try:
                object.__setattr__(self, name, kind(str(value).lower()))
            except ValueError:
                allowed = ", ".join(k.value for k in kind)
                raise LayoutError(f"{name}: {value!r} is not one of {allowed}") from None

    def _chunk_layers(self, counts: object) -> tuple[int, ...]:
        """``stage_layers`` as per-chunk counts (:attr:`stage_layers`)."""
        items = re.split("[,;]", counts) if isinstance(counts, str) else counts
        try:
            sizes = tuple(int(str(n).strip()) for n in items)  # type: ignore[attr-defined]
        except (TypeError, ValueError):
            raise LayoutError(
                f"stage_layers: {counts!r} must be whole numbers >= 0, e.g. 7,8,8,7"
            ) from None
        chunks = self.pp * self.virtual_stages
        if any(n < 0 for n in sizes):
            raise LayoutError(f"stage_layers: {counts!r} must be whole numbers >= 0")
        if len(sizes) == self.pp and chunks != self.pp:
            return chunk_sizes_from_ranks(sizes, self.virtual_stages)
        if len(sizes) != chunks:
            raise LayoutError(
                f"stage_layers: {len(sizes)} counts for pp {self.pp} × virtual_stages "
                f"{self.virtual_stages} = {chunks} model chunks (give one per stage, or one per "
                "model chunk in model order)"
            )
        return sizes

    def _recompute_counts(self) -> tuple[int, ...]:
        """``recompute_layers`` as pp whole numbers >= 0 (:attr:`recompute_layers`)."""
        counts = self.recompute_layers
        items = re.split("[,;]", counts) if isinstance(counts, str) else counts
        try:
            sizes = tuple(int(str(n).strip()) for n in items)  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise LayoutError(
                f"recompute_layers: {counts!r} must be whole numbers >= 0, one per pipeline "
                "stage, e.g. 2,4,4,0"
            ) from None
        if any(n < 0 for n in sizes):
            raise LayoutError(f"recompute_layers: {counts!r} must be whole numbers >= 0")
        if len(sizes) != self.pp:
            raise LayoutError(
                f"recompute_layers: {len(sizes)} counts for pp {self.pp} (give one per stage)"
            )
        return sizes

    def recomputed_on(self, stage: int) -> int | None:
        """Layers fully recomputed on pipeline stage ``stage`` (:attr:`recompute_layers`), or
        None when every layer keeps ``recompute``."""
        return None if self.recompute_layers is None else self.recompute_layers[stage]

    @property
    def num_gpus(self) -> int:
        """G = dp · tp · pp · cp."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def sp(self) -> bool:
        """Whether sequence parallelism is on."""
        return (
            self.tp > 1
            if self.sequence_parallel is None
            else bool(self.sequence_parallel and self.tp > 1)
        )

    @property
    def shard_degree(self) -> int:
        """D = dp · cp: ranks that hold replicas of a dense parameter (ZeRO shards over them)."""
        return self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """The expert tensor-parallel degree: ``etp``, or tp when not set."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_shard_degree(self) -> int:
        """D_e = tp · dp · cp / (etp · ep): ranks that hold replicas of an expert parameter (the
        expert data-parallel group; dp·cp/ep when etp = tp)."""
        return self.tp * self.dp * self.cp // (self.expert_tp * self.ep)

    def num_microbatches(self, global_batch_size: int) -> int:
        """m = B / (b · dp); exact (see :func:`validate`)."""
        return global_batch_size // (self.micro_batch_size * self.dp)

    def with_(self, **changes: object) -> Layout:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]


_ENUM_FIELDS: tuple[tuple[str, type[StrEnum]], ...] = (
    ("recompute", Recompute),
    ("schedule", Schedule),
    ("framework", Framework),
    ("cp_kind", CpKind),
)
"""The fields read by name into their enum (a ``str`` is accepted and converted)."""
_DEGREE_FIELDS: tuple[str, ...] = (
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "micro_batch_size",
    "virtual_stages",
)
"""The fields that must be whole numbers >= 1 (``etp`` and ``cp_a2a`` too when given)."""

LAYOUT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Layout))
"""Every field of :class:`Layout`, in order (the one list the CLI, catalogue and reports use)."""

SEARCHED_FIELDS: tuple[str, ...] = (
    "dp",
    "tp",
    "pp",
    "cp",
    "cp_kind",
    "ep",
    "zero_stage",
    "recompute",
    "micro_batch_size",
    "schedule",
    "virtual_stages",
    "framework",
)
"""The fields a published layout states and the search chooses (CSV columns, catalogue keys)."""


def validate(
    layout: Layout, model: ModelSpec, training: TrainingSpec, num_gpus: int | None = None
) -> None:
    """Check every legality rule; raise the first broken one.

    Rules: the degrees multiply to ``num_gpus`` (when given); tp divides the attention heads, the
    KV heads and the FFN sizes; with sequence parallelism tp divides s/cp; cp>1 needs s divisible
    by 2·cp (load-balanced causal split, Megatron-LM; every CP flavour), and the CP flavour's own
    rules (:func:`model.context_parallel.check_cp_kind`: Ulysses' heads divisible by cp on a
    tensor-parallel rank, the hybrid's inner degree); ep divides the routed experts and dp·cp
    (etp·ep divides tp·dp·cp when etp is given: Megatron-Core's expert rank groups; etp divides
    the expert FFN), and ep > 1 needs a MoE model; the framework runs the ZeRO stage with these
    axes (:func:`model.frameworks.check_framework`) and its offload (:func:`model.offload.
    check_offload`; activation offload's recompute and MoE rules,
    :func:`model.activation_offload.check_activation_offload`); B divisible by b·dp; pp·v chunks at most L
    (and dividing it when uneven stages are off), or explicit ``stage_layers`` summing to L
    (:mod:`model.split`); the schedule rules of :func:`model.pipeline.check_schedule`.

    Raises
    ------
    LayoutError
        Naming the constraint and the numbers.
    """
    lay = layout
    if num_gpus is not None and lay.num_gpus != num_gpus:
        raise LayoutError(
            f"gpus: dp {lay.dp} × tp {lay.tp} × pp {lay.pp} × cp {lay.cp} = {lay.num_gpus}, "
            f"not {num_gpus}"
        )
    s, B = training.seq_len, training.global_batch_size
    if B % (lay.micro_batch_size * lay.dp):
        raise LayoutError(
            f"global_batch_size: {B} is not divisible by micro_batch_size {lay.micro_batch_size} "
            f"× dp {lay.dp} = {lay.micro_batch_size * lay.dp}"
        )
    check_framework(lay.framework, lay.zero_stage, lay.pp)
    check_offload(lay.framework, lay.zero_stage, training.offload)
    has_moe = model.arch is None or model.arch.kind_index(True) is not None
    has_mla = model.arch is None or model.arch.mla is not None
    check_activation_offload(
        lay.framework, lay.recompute, training.offload.activations, has_moe, lay.recompute_layers,
        has_mla,
    )  # fmt: skip
    check_recompute_modules(
        lay.framework, lay.recompute, training.recompute_modules, has_moe, has_mla
    )
    check_fp8_param_gather(lay.framework, training.fp8_param_gather)
    expert_ranks = lay.tp * lay.shard_degree
    if lay.etp is None and lay.shard_degree % lay.ep:
        raise LayoutError(f"ep: {lay.ep} must divide dp × cp = {lay.shard_degree}")
    if lay.etp is not None and lay.etp > lay.tp:
        raise LayoutError(
            f"etp: {lay.etp} above tp = {lay.tp} is not modelled (etp's token collectives ride "
            "the tp group's link)"
        )
    if lay.etp is not None and expert_ranks % (lay.ep * lay.expert_tp):
        raise LayoutError(
            f"ep: etp {lay.expert_tp} × ep {lay.ep} = {lay.ep * lay.expert_tp} must divide "
            f"tp × dp × cp = {expert_ranks} (the expert groups are carved out of those ranks)"
        )
    check_schedule(lay.pp, lay.num_microbatches(B), lay.schedule, lay.virtual_stages)
    if str(lay.schedule) == "interleaved" and lay.pp < 2:
        raise LayoutError(
            "schedule: interleaved needs pp ≥ 2 (Megatron-LM's virtual pipeline interleaves "
            "model chunks across pipeline stages), not pp 1; use 1f1b"
        )
    if lay.sequence_parallel and lay.tp == 1:
        raise LayoutError(
            "sequence_parallel: splits the tp group's activations and needs tp ≥ 2, not tp 1"
        )
    arch = model.arch
    if arch is None:
        if lay.stage_layers is not None:
            raise LayoutError(
                "stage_layers: a stage layout needs the model's layers (a catalogue model, a "
                "config.json or --layers), not a size only"
            )
        if lay.ep > 1:
            raise LayoutError(f"ep: {lay.ep} needs a MoE model with dimensions, not a size only")
    else:
        _check_architecture(lay, model)
    if lay.cp > 1 and s % (2 * lay.cp):
        raise LayoutError(f"cp: seq_len {s} is not divisible by 2 × cp = {2 * lay.cp}")
    check_cp_kind(lay.cp_kind, lay.cp, lay.cp_a2a, lay.tp, arch)
    if lay.sp and (s // lay.cp) % lay.tp:
        raise LayoutError(
            f"tp: sequence parallelism needs seq_len / cp = {s // lay.cp} divisible by tp = {lay.tp}"
        )


def check_expert_parallel(ep: int, model: ModelSpec) -> None:
    """The rule of an expert-parallel degree against the model's experts: ep > 1 needs a MoE
    model, and ep divides the routed experts (each ep rank holds num_experts / ep of them:
    Megatron-Core ``transformer/moe/moe_layer.py`` ``BaseMoELayer.__init__`` asserts
    ``num_moe_experts % ep_size == 0``). Used by :func:`validate` and by the search for each
    degree the user allows.

    Raises
    ------
    LayoutError
        ``ep: 16 does not divide num_experts = 8``.
    """
    arch = model.arch
    if arch is None or ep == 1:
        return
    if arch.moe is None:
        raise LayoutError(f"ep: {ep} > 1 needs a MoE model; {model.name} is dense")
    _check_divides("ep", ep, "num_experts", arch.moe.num_experts)


def _check_architecture(lay: Layout, model: ModelSpec) -> None:
    arch = model.arch
    assert arch is not None
    _check_divides("tp", lay.tp, "num_attention_heads", arch.num_attention_heads)
    if arch.attention is AttentionKind.MHA:
        _check_divides("tp", lay.tp, "num_kv_heads", arch.kv_heads)
    _check_divides("tp", lay.tp, "ffn_hidden_size", arch.ffn_hidden_size)
    check_expert_parallel(lay.ep, model)
    if arch.moe is None:
        if lay.etp is not None:
            raise LayoutError(f"etp: {lay.etp} needs a MoE model; {model.name} is dense")
    else:
        axis = "tp" if lay.etp is None else "etp"
        _check_divides(
            axis, lay.expert_tp, "expert_ffn_hidden_size", arch.moe.expert_ffn_hidden_size
        )
    chunks = lay.pp * lay.virtual_stages
    if lay.stage_layers is not None:
        check_stage_layers(arch.num_layers, lay.pp, lay.virtual_stages, lay.stage_layers)
    else:
        check_chunks(arch.num_layers, lay.pp, lay.virtual_stages, lay.uneven_stages)
        if arch.num_layers % chunks and not lay.uneven_stages:
            raise LayoutError(
                f"pp: {lay.pp} × virtual_stages {lay.virtual_stages} = {chunks} does not divide "
                f"num_layers = {arch.num_layers} (allow uneven stages or choose a divisor)"
            )
    if lay.recompute_layers is not None:
        _check_recompute_layers(lay, arch)


def _check_recompute_layers(lay: Layout, arch: Architecture) -> None:
    """The per-stage recomputation counts' rules (:attr:`Layout.recompute_layers`)."""
    counts = lay.recompute_layers
    assert counts is not None
    shown = ",".join(map(str, counts))
    if lay.recompute not in (Recompute.NONE, Recompute.SELECTIVE):
        raise LayoutError(
            f"recompute_layers: {shown} needs recompute none or selective for the other "
            f"layers, not {lay.recompute}"
        )
    v = lay.virtual_stages
    for i, k in enumerate(counts):
        chunks = stage_chunks(arch, lay.pp, v, lay.uneven_stages, i, lay.stage_layers)
        largest = max(len(c) for c in chunks)
        if k <= largest:
            continue
        if v == 1:
            raise LayoutError(
                f"recompute_layers: {k} on stage {i} is more than its {largest} layers "
                "(each count must be at most its stage's layers)"
            )
        raise LayoutError(
            f"recompute_layers: {k} on stage {i} is more than its largest model chunk's "
            f"{largest} layers (with virtual_stages {v} the count is per model chunk, as "
            "Megatron-LM's --recompute-num-layers; each must be at most its stage's largest chunk)"
        )


def _check_divides(axis: str, degree: int, what: str, value: int) -> None:
    if value % degree:
        raise LayoutError(f"{axis}: {degree} does not divide {what} = {value}")
