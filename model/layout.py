"""One point of the layout space; its legality rules are written once in :mod:`model.legality`
(docs/concepts/conventions.md "Inputs and errors").

Rank order (inner to outer): tp, cp, ep, dp, pp (Megatron-LM's default). The world size is
``G = dp · tp · pp · cp``; the expert-parallel group is carved out of the ``dp · cp`` ranks, so ep
does not multiply G (docs/concepts/conventions.md "Layout").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any

from trainplan.model.context_parallel import CpKind
from trainplan.model.cp_rules import DEFAULT_CP_KIND
from trainplan.model.errors import LayoutError
from trainplan.model.expert_groups import expert_shard_degree_of, expert_tp_of
from trainplan.model.frameworks import DEFAULT_FRAMEWORK, Framework
from trainplan.model.fsdp2_pipeline import default_zero_stage
from trainplan.model.legality import Setting, check_rules
from trainplan.model.model_spec import ModelSpec
from trainplan.model.optimizers import OptimizerKind
from trainplan.model.pipeline import LAYOUT_CHUNKS, Schedule
from trainplan.model.rank_split import chunks_of_rank_counts
from trainplan.model.specs import TrainingSpec
from trainplan.model.split import split_rule_of
from trainplan.model.units import check_limit

__all__ = [
    "Recompute",
    "Layout",
    "validate",
    "LAYOUT_FIELDS",
    "SEARCHED_FIELDS",
    "sequence_parallel_on",
    "expert_tp_of",
    "expert_shard_degree_of",
    "num_microbatches_of",
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
    group of tp·dp·cp/(etp·ep) ranks. None = tp (the textbook convention), except under
    ``deepspeed``: 1, experts replicated over tp as Megatron-DeepSpeed runs them unless
    ``--enable-expert-tensor-parallelism`` (= etp tp); under ``deepspeed`` only 1 and tp
    (:func:`expert_tp_of`)."""
    zero_stage: int = 1
    """ZeRO stage 0–3 over dp·cp (3 = FSDP full sharding); Rajbhandari et al. 2019. What a stage
    holds and sends depends on ``framework`` (:mod:`model.frameworks`)."""
    framework: Framework = DEFAULT_FRAMEWORK
    """The framework profile whose mechanism the stage is: ``megatron``, ``deepspeed``,
    ``fsdp2`` or ``textbook`` (:mod:`model.frameworks`)."""
    optimizer: OptimizerKind = OptimizerKind.ADAM
    """The optimizer whose state and step are counted (:mod:`model.optimizers`): ``adam``,
    ``adam-8bit``, ``adafactor``, ``lion``, ``muon`` or ``soap``; each runs under the frameworks
    that offer it (:func:`model.optimizers.check_optimizer`)."""
    recompute: Recompute = Recompute.NONE
    micro_batch_size: int = 1
    """b, sequences per micro-batch."""
    schedule: Schedule = Schedule.ONE_F_ONE_B
    """The pipeline schedule (:class:`model.pipeline.Schedule`): ``gpipe``, ``1f1b``,
    ``interleaved``, or one that splits the backward into input- and weight-gradient passes —
    ``zb-h1``, ``zb-h2``, ``zb-v``, ``dualpipe``, ``dualpipev`` (:mod:`model.pipeline_zb`;
    which framework runs which: :mod:`model.schedule_support`)."""
    virtual_stages: int = 1
    """v, model chunks per pipeline rank: the interleaved schedule's; 2 under ``zb-v`` and
    ``dualpipev`` (the model cut into 2·pp chunks placed in V order); 1 under ``dualpipe`` (pp
    stages, each rank also holding its mirror stage: :data:`model.pipeline.LAYOUT_CHUNKS`)."""
    sequence_parallel: bool | None = None
    """Megatron sequence parallelism; None = on exactly when tp > 1."""
    rank_order: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
    """Inner to outer order of the axes over the ranks (Megatron-LM's default tp-cp-ep-dp-pp);
    it decides which axis's groups sit inside an NVLink domain (topology.placement)."""
    uneven_stages: bool = True
    """Allow pp·v not dividing L (ends get fewer layers); False makes that an error."""
    stage_layers: tuple[int, ...] | None = None
    """Transformer layers of each model chunk in model order (pp·v counts; or pp counts, one per
    stage — the decoder layers each rank holds, as ``evaluate`` and the search print
    ``layout.stage_layers``, the MTP block apart — cut into chunks by
    :func:`model.rank_split.chunks_of_rank_counts`: the default split's chunks when its
    per-rank sums are these, else each rank's layers as evenly as they go), summing to L;
    None = the default split
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
    Recomputation" page; :func:`model.recompute_counts.recomputed_in_chunks`). With v = 1 the chunk is the
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
            and self.optimizer.__class__ is OptimizerKind
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
            object.__setattr__(self, name, _enum_of(kind, name, value))

    def _chunk_layers(self, counts: object) -> tuple[int, ...]:
        """``stage_layers`` as per-chunk counts (:attr:`stage_layers`)."""
        sizes = _whole_numbers(counts)
        if sizes is None:
            raise LayoutError(f"stage_layers: {counts!r} must be whole numbers >= 0, e.g. 7,8,8,7")
        chunks = self.pp * self.virtual_stages
        if any(n < 0 for n in sizes):
            raise LayoutError(f"stage_layers: {counts!r} must be whole numbers >= 0")
        if len(sizes) == self.pp and chunks != self.pp:  # per rank, as evaluate prints them
            v, rule = self.virtual_stages, self.split_rule
            return chunks_of_rank_counts(sizes, v, self.schedule, rule)
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
        sizes = _whole_numbers(counts)
        if sizes is None:
            raise LayoutError(
                f"recompute_layers: {counts!r} must be whole numbers >= 0, one per pipeline "
                "stage, e.g. 2,4,4,0"
            )
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
        """Whether sequence parallelism is on (:func:`sequence_parallel_on`)."""
        return sequence_parallel_on(self.tp, self.sequence_parallel)

    @property
    def shard_degree(self) -> int:
        """D = dp · cp: ranks that hold replicas of a dense parameter (ZeRO shards over them)."""
        return self.dp * self.cp

    @property
    def split_rule(self) -> bool | str:
        """How the layers are cut into stages when ``stage_layers`` is None: the framework's own
        split with pp > 1 under ``deepspeed`` and ``fsdp2``, else ``uneven_stages``
        (:func:`model.split.split_rule_of`)."""
        return split_rule_of(self.uneven_stages, self.framework, self.pp)

    @property
    def expert_tp(self) -> int:
        """The expert tensor-parallel degree (:func:`expert_tp_of`)."""
        return expert_tp_of(self.tp, self.etp, self.framework, self.ep)

    @property
    def expert_shard_degree(self) -> int:
        """D_e (:func:`expert_shard_degree_of`)."""
        return expert_shard_degree_of(self.tp, self.dp, self.cp, self.etp, self.ep, self.framework)

    def num_microbatches(self, global_batch_size: int) -> int:
        """m = B / (b · dp); exact (see :func:`validate`)."""
        return num_microbatches_of(global_batch_size, self.micro_batch_size, self.dp)

    @classmethod
    def of(cls, **fields: Any) -> Layout:
        """A layout with the defaults that depend on other fields filled in, where the plain
        constructor's are per-field: ``zero_stage`` the framework profile's
        (:func:`model.fsdp2_pipeline.default_zero_stage`: 3 under ``fsdp2``, 2 there with
        pp > 1 as torchtitan's default reshard policy runs it, else 1), ``cp_kind`` the
        framework's own flavour (:data:`model.cp_rules.DEFAULT_CP_KIND`: ``ulysses`` under
        ``deepspeed``, ``pytorch-allgather`` under ``fsdp2``, else the ring) and
        ``virtual_stages`` the split-backward schedule's own (:data:`model.pipeline.LAYOUT_CHUNKS`:
        2 under ``zb-v`` and ``dualpipev``). What ``trainplan evaluate`` builds from its options.

        Parameters are :class:`Layout`'s fields (enums or their names: ``framework="fsdp2"``).

        Raises
        ------
        LayoutError
            An unknown framework or schedule name, or a field :class:`Layout` refuses.

        Examples
        --------
        >>> Layout.of(framework="fsdp2", dp=8).zero_stage, Layout.of(schedule="zb-v").virtual_stages
        (3, 2)
        >>> Layout.of(framework="fsdp2", dp=8, pp=4).zero_stage
        2
        """
        framework = _enum_of(Framework, "framework", fields.get("framework", DEFAULT_FRAMEWORK))
        schedule = str(fields.get("schedule", "")).lower()
        if "virtual_stages" not in fields and schedule in LAYOUT_CHUNKS:
            fields["virtual_stages"] = LAYOUT_CHUNKS[Schedule(schedule)]
        fields.setdefault("zero_stage", default_zero_stage(framework, int(fields.get("pp", 1))))
        if int(fields.get("cp", 1)) > 1:  # the flavour only where there is context parallelism
            fields.setdefault("cp_kind", DEFAULT_CP_KIND[framework])
        return cls(**{**fields, "framework": framework})

    def with_(self, **changes: object) -> Layout:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    def with_splits(self, stage_layers: Any, recompute_layers: Any) -> Layout:
        """``with_(stage_layers=…, recompute_layers=…)``, reading only the two splits (as
        :meth:`__post_init__` reads them); the other fields are this layout's, read when it was
        made. The per-stage tables make tens of thousands of these (:func:`optimizer.
        stage_rules.realization`).

        Raises
        ------
        LayoutError
            A split :meth:`__post_init__` refuses.
        """
        out = object.__new__(Layout)
        for name in LAYOUT_FIELDS:
            object.__setattr__(out, name, getattr(self, name))
        object.__setattr__(out, "recompute_layers", recompute_layers)
        if stage_layers is not None:
            stage_layers = out._chunk_layers(stage_layers)
        object.__setattr__(out, "stage_layers", stage_layers)
        if recompute_layers is not None:
            object.__setattr__(out, "recompute_layers", out._recompute_counts())
        return out

    def validate(
        self, model: ModelSpec, training: TrainingSpec, num_gpus: int | None = None
    ) -> None:
        """Raise the first legality rule this layout breaks (:func:`validate`)."""
        validate(self, model, training, num_gpus)


def _whole_numbers(counts: Any) -> tuple[int, ...] | None:
    """Per-stage counts as ints: a tuple of ints as it is (the per-stage search's layouts),
    else each item of a sequence, or of text split at ``,`` or ``;``, read from its text as a
    whole number; None where one does not read.

    >>> _whole_numbers((7, 8)), _whole_numbers("7, 8;9"), _whole_numbers(["7", 8]), _whole_numbers("7,x")
    ((7, 8), (7, 8, 9), (7, 8), None)
    """
    if counts.__class__ is tuple and all(n.__class__ is int for n in counts):
        return counts
    items = re.split("[,;]", counts) if isinstance(counts, str) else counts
    try:
        return tuple(int(str(n).strip()) for n in items)
    except (TypeError, ValueError):
        return None


def _enum_of(kind: Any, name: str, value: Any) -> Any:
    """``value`` read into the enum ``kind`` (any case), or a LayoutError naming ``name`` and the
    allowed values (the rule of :meth:`Layout._read_enums`)."""
    try:
        return kind(str(value).lower())
    except ValueError:
        allowed = ", ".join(k.value for k in kind)
        raise LayoutError(f"{name}: {value!r} is not one of {allowed}") from None


def sequence_parallel_on(tp: Any, sequence_parallel: bool | None) -> Any:
    """Whether sequence parallelism is on: as asked, and only with tp > 1 (None = exactly when
    tp > 1). Element-wise for arrays of tp.

    Examples
    --------
    >>> sequence_parallel_on(8, None), sequence_parallel_on(8, False), sequence_parallel_on(1, True)
    (True, False, False)
    """
    if sequence_parallel is None:
        return tp > 1
    return (tp > 1) & bool(sequence_parallel)


def num_microbatches_of(global_batch_size: int, micro_batch_size: Any, dp: Any) -> Any:
    """m = B / (b · dp) (exact where :func:`validate` holds). Element-wise for arrays."""
    return global_batch_size // (micro_batch_size * dp)


_ENUM_FIELDS: tuple[tuple[str, type[StrEnum]], ...] = (
    ("recompute", Recompute),
    ("schedule", Schedule),
    ("framework", Framework),
    ("cp_kind", CpKind),
    ("optimizer", OptimizerKind),
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
    layout: Layout,
    model: ModelSpec,
    training: TrainingSpec,
    num_gpus: int | None = None,
    options: Any = None,
    nvlink_domain: int | None = None,
) -> None:
    """Check every legality rule (:data:`model.legality.RULES`); raise the first broken one.
    ``nvlink_domain``: the accelerator's, for the rules on where a group lies (HybridEP's token
    limit across domains, :func:`model.moe_rules.hybridep_tokens_rule`); None skips them.

    Rules: the degrees multiply to ``num_gpus`` (when given); tp divides the attention heads, the
    KV heads and the FFN sizes; with sequence parallelism tp divides s/cp; cp>1 needs s divisible
    by 2·cp (load-balanced causal split, Megatron-LM; every CP flavour), and the CP flavour's own
    rules (:func:`model.cp_rules.check_cp_kind`: Ulysses' heads divisible by cp on a
    tensor-parallel rank, the hybrid's inner degree); ep divides the routed experts and dp·cp
    (etp·ep divides tp·dp·cp when etp is given: Megatron-Core's expert rank groups; etp divides
    the expert FFN), and ep > 1 needs a MoE model; the framework runs the ZeRO stage with these
    axes (:func:`model.frameworks.check_framework`) and its offload (:func:`model.offload.
    check_offload`; activation offload's recompute and MoE rules,
    :func:`model.activation_offload.check_activation_offload`); B divisible by b·dp; pp·v chunks
    at most L (and dividing it when uneven stages are off), or explicit ``stage_layers`` summing
    to L (:mod:`model.split`); the schedule rules of :func:`model.pipeline.check_schedule` and,
    for a split-backward schedule, :func:`model.schedule_cost.check_split_layout` (its
    framework); the pipeline send options of ``options`` (a :class:`model.timing.CostOptions`;
    None: not checked) where the framework and pipeline read them (:mod:`model.key_rules`).

    Raises
    ------
    LayoutError
        Naming the constraint and the numbers.
    """
    B = training.global_batch_size

    def value(name: str) -> Any:
        return layout.num_microbatches(B) if name == "m" else getattr(layout, name)

    setting = Setting.of(model, training, num_gpus, options)
    check_rules(replace(setting, nvlink_domain=nvlink_domain), value)
