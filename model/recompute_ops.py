"""Which of a layer's operations (:func:`model.ops.layer_ops`) selective recomputation runs a
second time in backward: the time (:func:`model.layer_time.layer_time`) and the hardware FLOPs
(:func:`recomputed_forward_flops`) read the same rule.

What is recomputed is a *plan* (:func:`recompute_plan`), a tuple of names:

* Megatron-Core's ``recompute_modules`` (:mod:`model.recompute_modules`) under ``megatron``,
  ``textbook`` and ``deepspeed`` (whose selective mode is Korthikanti's, ``core_attn``). Each
  module's checkpoint re-runs these operations (``megatron/core/transformer/``):

  - ``core_attn``: the attention core (:attr:`model.ops.Op.core`; ``TransformerLayer`` →
    ``SelfAttention._checkpointed_attention_forward``);
  - ``layernorm``: the norms that are modules of their own
    (:func:`model.activation_offload.norm_modules`: MLA's input norm, a MoE layer's pre-MLP
    norm; ``transformer_layer.py`` ``input_layernorm_checkpoint`` /
    ``pre_mlp_norm_checkpoint``, ``CheckpointWithoutOutput``), every norm under the
    ``textbook`` profile (``every_norm``: DeepSeek-V3 §3.2.3 "all RMSNorm operations") —
    memory-bound kernels, no FLOPs;
  - ``mla_up_proj``: ``multi_latent_attention.py`` ``qkv_up_proj_and_rope_apply`` under
    ``qkv_up_checkpoint``: the latent norms (fused into ``linear_q_up_proj`` /
    ``linear_kv_up_proj`` by the Transformer Engine spec), the Q up-projection (the Q
    projection when ``q_lora_rank`` is None: ``linear_q_proj`` of the same function), the KV
    up-projection and the rotary embedding;
  - ``moe_act``: the routed experts' activation (``moe/experts.py`` ``TEGroupedMLP``,
    ``activation_recompute``);
  - ``mlp``: a dense layer's MLP (``transformer_layer.py`` ``recompute_mlp``, not a MoE layer);
  - ``moe``: the whole MoE layer, router to combine (``moe/moe_layer.py`` ``MoELayer.forward``:
    ``tensor_parallel.checkpoint(custom_forward, …)`` when ``moe_layer_recompute``), its
    dispatch and combine all-to-alls included (:func:`repeats_all_to_all`);
  - ``shared_experts``: the shared experts' MLP (``moe_layer.py`` ``shared_experts_compute``).

* :data:`OP_LEVEL` (``fsdp2``'s selective: torchtitan's op-level policy,
  ``torchtitan/distributed/activation_checkpoint.py`` ``_get_default_save_ops`` and the
  ``mm_count`` policy; :mod:`model.op_checkpoint`): the non-reentrant checkpoint re-runs the
  block's forward up to the last tensor backward needs, each saved op answered from its store:
  the SDPA output and every other matmul output are saved, so the matmuls re-run are ``wk``
  (its share ``g/(a + 2g)`` of our fused QKV projection), ``wo`` and, with a gated MLP, ``w3``
  (the up half of the gate+up projection); the norms, the rotary embedding, the attention
  residual add and the MLP activation re-run; the MLP residual add, after the last needed tensor
  (the activation's output, ``w2``'s input), does not. :data:`OP_LEVEL_FP8`: under FP8 every
  GEMM output is saved (``aten._scaled_mm`` is a compute-intensive op), only the memory-bound
  kernels re-run; :data:`OP_LEVEL_FP8_UNSAVED` (``sac_saves_scaled_mm`` false, the save list
  before torchtitan 114151ad4, without ``aten._scaled_mm``): no GEMM output is saved, so every
  GEMM up to the last tensor backward needs re-runs (the QKV, output and gate+up projections;
  the down projection's output feeds only the residual add) with the memory-bound kernels.
  A MoE or MLA layer has its own op list (:func:`model.op_checkpoint.
  op_selective_rows` answers None) and is charged the attention core, as its memory side is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from trainplan.model.activation_offload import norm_modules
from trainplan.model.flops import attention_core_forward_flops, recompute_forward_flops
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Layout, Recompute
from trainplan.model.ops import LayerShape, Op, OpKind, layer_ops
from trainplan.model.packing import Documents
from trainplan.model.precision import Precision
from trainplan.model.recompute_modules import DEFAULT_RECOMPUTE_MODULES, profile_recompute_modules
from trainplan.model.specs import Architecture, AttentionKind, TrainingSpec

__all__ = [
    "OP_LEVEL",
    "OP_LEVEL_FP8",
    "OP_LEVEL_FP8_UNSAVED",
    "recompute_plan",
    "layout_plan",
    "layer_recompute_flops",
    "recompute_flops_of",
    "recomputed_gemm_flops",
    "plan_recomputes_core",
    "recomputed_ops",
    "repeats_all_to_all",
    "RepeatedTp",
    "repeated_tp",
    "recomputes_core",
    "recomputed_forward_flops",
]

OP_LEVEL = "op_level"
"""torchtitan's op-level selective checkpointing (BF16 GEMMs)."""
OP_LEVEL_FP8 = "op_level_fp8"
"""The same with FP8 GEMMs (every GEMM output saved)."""
OP_LEVEL_FP8_UNSAVED = "op_level_fp8_unsaved"
"""FP8 GEMMs under the older save list (no GEMM output saved)."""
_OP_LEVEL_PLANS = (OP_LEVEL, OP_LEVEL_FP8, OP_LEVEL_FP8_UNSAVED)

_NORM_OPS = {"attn_norm": "input norm", "mlp_norm": "pre-MLP norm"}
_MLA_UP = ("Q latent norm", "Q up-projection", "KV latent norm", "KV up-projection")


def recompute_plan(
    recompute: Recompute,
    op_selective: bool,
    modules: tuple[str, ...],
    fp8_gemms: bool,
    saves_scaled_mm: bool = True,
) -> tuple[str, ...]:
    """What selective recomputation re-runs under a profile (the module docstring): () unless
    ``recompute`` is selective; :data:`OP_LEVEL` (or :data:`OP_LEVEL_FP8`, or
    :data:`OP_LEVEL_FP8_UNSAVED` without ``saves_scaled_mm``) where the profile runs
    torchtitan's op-level policy (``op_selective``); else Megatron-Core's ``modules``.

    >>> recompute_plan(Recompute.SELECTIVE, False, ("core_attn",), False)
    ('core_attn',)
    >>> recompute_plan(Recompute.SELECTIVE, True, ("core_attn",), True)
    ('op_level_fp8',)
    >>> recompute_plan(Recompute.FULL, False, ("mlp",), False)
    ()
    """
    if recompute is not Recompute.SELECTIVE:
        return ()
    if op_selective:
        if not fp8_gemms:
            return (OP_LEVEL,)
        return (OP_LEVEL_FP8 if saves_scaled_mm else OP_LEVEL_FP8_UNSAVED,)
    return modules


def layout_plan(
    framework: Framework, recompute: Recompute, training: TrainingSpec
) -> tuple[tuple[str, ...], bool]:
    """(:func:`recompute_plan` of a layout's framework and recompute mode under the recipe's
    ``recompute_modules`` and precision, ``every_norm``: the ``textbook`` profile's
    ``layernorm`` takes every norm)."""
    fp8 = training.precision is Precision.FP8
    # eager attention has its own op list: Korthikanti's count, as the memory side keeps it
    op_level = framework.op_selective and training.flash_attention
    # the modules the profile re-runs (Megatron-DeepSpeed's own layers: none with flash
    # attention; its FP8 layer, Transformer Engine's, the core); its eager attention with
    # DeepSpeed's sequence parallelism (cp > 1) is charged the core's recomputation that it
    # does not run (a control field here: cp is not), over-counted time
    modules = profile_recompute_modules(
        framework.value, training.recompute_modules, training.flash_attention, 1, fp8
    )
    plan = recompute_plan(recompute, op_level, modules, fp8, training.sac_saves_scaled_mm)
    return plan, framework is Framework.TEXTBOOK


def _op_level(x: LayerShape) -> bool:
    """Whether torchtitan's op list applies (a dense flash-attention non-MLA layer)."""
    return not x.moe and x.flash_attention and x.arch.attention is not AttentionKind.MLA


def _module_ops(module: str, x: LayerShape, ops: tuple[Op, ...], every_norm: bool) -> list[Op]:
    """The operations of ``ops`` that Megatron-Core's recompute ``module`` re-runs."""
    mla = x.arch.attention is AttentionKind.MLA
    if module == "core_attn":
        return [o for o in ops if o.core]
    if module == "layernorm":
        if every_norm:
            return [o for o in ops if o.kind is OpKind.MEMORY and "norm" in o.name]
        names = {_NORM_OPS[m] for m in norm_modules(mla, x.moe)}
        return [o for o in ops if o.name in names]
    if module == "mla_up_proj" and mla:
        up: tuple[str, ...] = (*_MLA_UP, "rotary embedding")
        if x.arch.mla is not None and x.arch.mla.q_lora_rank is None:
            up += ("Q projection",)
        return [o for o in ops if o.name in up]
    if module == "moe_act" and x.moe:
        return [o for o in ops if o.name == "experts activation"]
    if module == "mlp" and not x.moe:
        return [o for o in ops if o.name.startswith("MLP ") and o.name != "MLP residual"]
    if module == "moe" and x.moe:
        start = next(i for i, o in enumerate(ops) if o.name == "router")
        return list(ops[start:-1])  # router to the shared experts; not the residual add
    if module == "shared_experts" and x.moe:
        return [o for o in ops if o.name.startswith("shared experts")]
    return []


_UNSAVED_GEMMS = ("QKV projection", "output projection", "MLP gate+up projection", "MLP FC1")
"""The GEMMs re-run when none is saved: all but the MLP's last (its output feeds only the
residual add, which backward does not need)."""


def _op_level_ops(x: LayerShape, ops: tuple[Op, ...], plan: str) -> list[Op]:
    """The operations torchtitan's op-level policy ``plan`` re-runs (the module docstring)."""
    out = [o for o in ops if o.kind is OpKind.MEMORY and o.name != "MLP residual"]
    if plan == OP_LEVEL_FP8:
        return out
    if plan == OP_LEVEL_FP8_UNSAVED:
        gemms = [o for o in ops if o.kind is OpKind.GEMM and o.name in _UNSAVED_GEMMS]
        return [o for o in ops if any(o is p for p in (*out, *gemms))]
    a, g = x.arch.num_attention_heads, x.arch.kv_heads
    for o in ops:
        if o.name == "QKV projection":  # wk of wq | wk | wv
            out.append(replace(o, n=o.n * g / (a + 2 * g)))
        elif o.name == "output projection":  # wo
            out.append(o)
        elif o.name == "MLP gate+up projection":  # w3 of w1 | w3
            out.append(replace(o, n=o.n / 2))
    return out


def recomputed_ops(
    x: LayerShape, plan: tuple[str, ...], every_norm: bool = False
) -> tuple[Op, ...]:
    """The operations of :func:`model.ops.layer_ops` (whole, or a GEMM's share) that ``plan``
    (:func:`recompute_plan`) runs once more in backward, each once, in layer order.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> llama = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...     num_kv_heads=1, ffn_hidden_size=16, vocab_size=16, mlp="swiglu")
    >>> x = LayerShape(llama, False, 4, 1, 1)
    >>> [o.name for o in recomputed_ops(x, ("core_attn", "mlp"))]
    ['attention core (FlashAttention)', 'MLP gate+up projection', 'MLP SwiGLU', 'MLP down projection']
    >>> [(o.name, float(o.n)) for o in recomputed_ops(x, (OP_LEVEL,)) if o.kind is OpKind.GEMM]
    [('QKV projection', 4.0), ('output projection', 8.0), ('MLP gate+up projection', 16.0)]
    """
    ops = layer_ops(x)
    if plan and plan[0] in _OP_LEVEL_PLANS:
        if _op_level(x):
            return tuple(_op_level_ops(x, ops, plan[0]))
        plan = DEFAULT_RECOMPUTE_MODULES
    chosen = {id(o) for m in plan for o in _module_ops(m, x, ops, every_norm)}
    return tuple(o for o in ops if id(o) in chosen)


def recomputes_core(x: LayerShape, plan: tuple[str, ...]) -> bool:
    """Whether ``plan`` re-runs the attention core (and so its context-parallel exchange)."""
    return any(o.core for o in recomputed_ops(x, plan))


def repeats_all_to_all(x: LayerShape, plan: tuple[str, ...]) -> bool:
    """Whether ``plan`` re-runs a MoE layer's dispatch and combine (the ``moe`` module)."""
    return x.moe and "moe" in plan


@dataclass(frozen=True, slots=True)
class RepeatedTp:
    """The tensor-parallel forward collectives a recomputed forward runs once more."""

    halves: tuple[tuple[bool, bool], tuple[bool, bool]]
    """(all-gather, reduce-scatter — the all-reduce without sequence parallelism) of the
    attention half and of the MLP half (a MoE layer's shared experts)."""
    etp: bool = False
    """A MoE layer's expert-TP gather and scatter of the routed tokens."""


def repeated_tp(x: LayerShape, plan: tuple[str, ...], full: bool) -> RepeatedTp:
    """Which tensor-parallel forward collectives run again: every one under full recomputation;
    under Megatron-Core's ``mlp`` the dense MLP's (its checkpoint holds ``linear_fc1``'s gather
    and ``linear_fc2``'s scatter), under ``moe`` or ``shared_experts`` the shared experts' (over
    tp) and with ``moe`` the routed tokens' expert-TP pair; under torchtitan's op-level policy
    the all-gathers (``all_gather_into_tensor`` is not among the saved ops; the
    ``reduce_scatter_tensor`` outputs are). The attention core, the norms, ``mla_up_proj`` and
    ``moe_act`` hold no collective.

    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> repeated_tp(LayerShape(gpt, False, 4, 1, 2), ("mlp",), False).halves
    ((False, False), (True, True))
    """
    if full:
        return RepeatedTp(((True, True), (True, True)), True)
    if plan and plan[0] in _OP_LEVEL_PLANS and _op_level(x):
        return RepeatedTp(((True, False), (True, False)))
    mlp = ("mlp" in plan) if not x.moe else bool({"moe", "shared_experts"} & set(plan))
    return RepeatedTp(((False, False), (mlp, mlp)), x.moe and "moe" in plan)


def recomputed_forward_flops(x: LayerShape, plan: tuple[str, ...], every_norm: bool) -> float:
    """Forward FLOPs of :func:`recomputed_ops` on one GPU: the GEMMs' ``2·m·n·k·batch`` and the
    attention core's :attr:`model.ops.Op.flops` (memory-bound kernels count none)."""
    ops = recomputed_ops(x, plan, every_norm)
    return sum(o.gemm_flops if o.kind is OpKind.GEMM else o.flops for o in ops)


def recomputed_gemm_flops(
    arch: Architecture,
    moe: bool,
    seq_len: int,
    batch: int,
    plan: tuple[str, ...],
    every_norm: bool,
) -> int:
    """Forward FLOPs of the GEMMs outside the attention core that ``plan`` re-runs in a layer of
    the kind (MoE or dense) for ``batch`` sequences, whole layer over all ranks: the
    :func:`recomputed_ops` of the layer unsharded (tp 1, so the replicated MLA down-projections
    and the router count once, as :func:`model.flops.layer_forward_flops` counts them),
    ``2·m·n·k·batch`` each, rounded to whole FLOPs; 0 for the default plan (``core_attn``)."""
    x = LayerShape(arch, moe, seq_len, batch, 1)
    again = recomputed_ops(x, plan, every_norm)
    return round(sum(o.gemm_flops for o in again if o.kind is OpKind.GEMM and not o.core))


def plan_recomputes_core(arch: Architecture, plan: tuple[str, ...]) -> bool:
    """Whether ``plan`` re-runs the attention core of a layer of either kind the model has (the
    single model counts the core per stage, not per kind)."""
    kinds = {arch.is_moe_layer(j) for j in range(arch.num_layers)}
    return any(recomputes_core(LayerShape(arch, moe, 1, 1, 1), plan) for moe in kinds)


def layer_recompute_flops(
    arch: Architecture,
    seq_len: int,
    batch: int,
    causal: bool,
    docs: Documents | None,
    plan: tuple[str, ...],
    every_norm: bool,
    index: int,
    recompute: Recompute,
    attention_core: bool = True,
) -> int:
    """Forward FLOPs recomputed in backward for layer ``index`` and ``batch`` sequences (whole
    layer, all ranks): :func:`model.flops.recompute_forward_flops` unless selective; under
    selective the attention core's exact :func:`model.flops.attention_core_forward_flops` when
    ``plan`` re-runs it, plus :func:`recomputed_gemm_flops`. The default plan (``core_attn``)
    gives the core alone, as before per-module recomputation was counted. ``attention_core``
    False: the core's FLOPs left out (the ``6n`` hardware FLOPs,
    :func:`model.flops.step_flops`); the norms, activations and rotary embeddings a plan re-runs
    count no FLOPs either way."""
    if recompute is not Recompute.SELECTIVE:
        return recompute_forward_flops(
            arch, index, seq_len, batch, recompute, causal, docs, attention_core
        )
    moe = arch.is_moe_layer(index)
    gemms = recomputed_gemm_flops(arch, moe, seq_len, batch, plan, every_norm)
    if not attention_core or not recomputes_core(LayerShape(arch, moe, 1, 1, 1), plan):
        return gemms
    return gemms + attention_core_forward_flops(arch, index, seq_len, batch, causal, docs)


def recompute_flops_of(
    arch: Architecture, training: TrainingSpec, layout: Layout, causal: bool
) -> Callable[[int, Recompute, bool], int]:
    """:func:`layer_recompute_flops` of a layout's whole step (``global_batch_size``
    sequences) under its framework's plan (:func:`layout_plan`), as
    :func:`model.flops.step_flops`' ``recomputed_of`` takes it."""
    plan, every_norm = layout_plan(Framework(layout.framework), layout.recompute, training)
    return partial(
        layer_recompute_flops, arch, training.seq_len, training.global_batch_size, causal,
        training.documents, plan, every_norm,
    )  # fmt: skip
