"""Step time's options (:class:`CostOptions`) and the single-efficiency time model.

Two time models (``time_model``): ``roofline`` (the default for the physical framework
profiles) times each operation and collective (:mod:`model.step_time`); ``single`` is the
first model, kept by name and always used by the ``textbook`` profile:

``step_s = ideal_compute_s × (1 + bubble_ratio) + Σ_axis (1 − overlap_axis) × comm_s(axis)``
(docs/concepts/conventions.md "Step time and MFU"), where ``ideal_compute_s = m × t_mb`` and ``t_mb`` is the slowest
stage's forward + backward (+ recomputation) of one micro-batch on one GPU:
hardware FLOPs ÷ (tp·cp) ÷ (peak × kernel_efficiency). A collective's time is its bytes over the
link's bandwidth per GPU per direction (no latency term).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from trainplan.model.errors import InputError
from trainplan.model.flops import (
    MfuConvention,
    attention_core_forward_flops,
    layer_matmul_weights,
    output_forward_flops,
)
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Layout, Recompute
from trainplan.model.op_time import TpOverlap
from trainplan.model.packing import Documents
from trainplan.model.recompute_modules import DEFAULT_RECOMPUTE_MODULES
from trainplan.model.recompute_ops import layout_plan, plan_recomputes_core, recomputed_gemm_flops
from trainplan.model.roofline import GENERATION_OF, RooflineParams, generation_of
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.step_passes import GRAD_CLIP_SCALINGS
from trainplan.model.userbuffers_gemm import DEFAULT_UB_CONFIG, check_ub_config
from trainplan.model.xp import maximum, where

__all__ = [
    "TimeModel",
    "DEFAULT_OVERLAP",
    "axis_overlap",
    "DEFAULT_KERNEL_EFFICIENCY",
    "KERNEL_EFFICIENCY_BY_GENERATION",
    "KERNEL_EFFICIENCY_HALF_HIDDEN",
    "kernel_efficiency_for",
    "ATTENTION_EFFICIENCY_BY_GENERATION",
    "attention_efficiency_for",
    "GENERATION_OF",
    "CostOptions",
    "GRAD_STATS_GROUPS",
    "stage_microbatch_flops",
    "stage_microbatch_attention_flops",
    "microbatch_flop_terms",
    "layers_core_flops",
    "stage_hardware_flops",
    "stage_peak_seconds",
    "core_passes",
    "exposed_seconds",
]

GRAD_STATS_GROUPS: tuple[str, ...] = ("intra_dist_opt_instance", "world")
"""The values of :attr:`CostOptions.grad_stats_group`: Megatron-Core's gradient-statistics group
of today (its own world-sized communicator) and before Megatron-LM 8c1e094afe (the default
group)."""

DEFAULT_KERNEL_EFFICIENCY = 0.75
"""Fallback fraction of the dense peak, used only where no calibrated rule applies: a
:class:`CostOptions` built directly, or a model without dimensions. Not a sourced figure: the
planner's defaults come from :func:`kernel_efficiency_for`, calibrated on published runs
(:mod:`interface.fidelity`). Override with ``--kernel-efficiency``."""

DEFAULT_OVERLAP: Mapping[str, float] = MappingProxyType(
    {"dp": 0.5, "tp": 0.0, "pp": 0.0, "cp": 0.5, "ep": 0.0}
)
"""Fraction of each axis's communication hidden behind compute (0 = fully exposed):
dp 0.5 (gradient reduce-scatter / all-gather bucketed against backward and forward, but the last
bucket and the optimizer step wait); tp 0 (sequence-parallel collectives sit between dependent
matmuls); dp and tp re-fitted with the kernel efficiency on published runs
(once by a grid over 0, 0.25, 0.5, 0.75, 1 on published runs; that fit is retired);
pp 0 (p2p on the critical path of each micro-batch); cp 0.5 (ring attention overlaps
the next K/V chunk with attention on the current one); ep 0 (dispatch/combine gate the experts).
Override per axis with ``--overlap axis=fraction``."""

KERNEL_EFFICIENCY_BY_GENERATION: Mapping[str, float] = MappingProxyType(
    {"A100": 0.60, "H100": 0.56}
)
"""Large-model kernel efficiency by accelerator generation of the single model, once fitted on
published runs (A100 on Megatron-LM Table 1, H100 on Llama 3 Table 4; that fit is retired: the
project fits no constant to end-to-end runs, ``trainplan calibrate`` fits the user's own).
Same-architecture parts share their generation's figure (:data:`GENERATION_OF`);
accelerators never calibrated use the newest calibrated one (H100) — an assumption, stated in
the output, that keeps a multi-accelerator search from favouring an uncalibrated part."""

ATTENTION_EFFICIENCY_BY_GENERATION: Mapping[str, float] = MappingProxyType({"H100": 0.35})
"""Fraction of the dense peak the FlashAttention kernel reaches on the attention core (QKᵀ and
scores·V, forward and backward), by generation. H100: 0.35, FlashAttention-2 on Hopper ("only
35% utilization on H100 GPUs", Shah et al. 2024, FlashAttention-3, arXiv 2407.08608, abstract);
Llama 3 405B (2024) trained before FlashAttention-3, which reaches up to 75% in forward — pass
``--attention-efficiency`` for it. A100: no separate figure; FlashAttention-2 reaches 50–73% of
peak there (Dao 2023, arXiv 2307.08691, abstract), the range of the matmul efficiency, so the
core runs at the kernel efficiency. Without FlashAttention the core is batched matmuls and
softmax, also at the kernel efficiency."""

KERNEL_EFFICIENCY_HALF_HIDDEN = 750
"""h₀ of the hidden-size rule ``efficiency = e∞ · h/(h + h₀)`` (calibrated with
:data:`KERNEL_EFFICIENCY_BY_GENERATION`). Per token and layer the matmuls cost ∝ h² FLOPs while
the memory-bound element-wise kernels (norms, activations, dropout, residuals, softmax) move
∝ h bytes, so their time relative to the matmuls falls as h₀/h: a small model reaches a smaller
share of the peak (Megatron-LM Table 1: 44% at h 2304, 52% at h 25600)."""


def axis_overlap(overlap: Mapping[str, float], axis: str) -> float:
    """The single model's overlap fraction of ``axis`` (:data:`DEFAULT_OVERLAP`, ``--overlap``):
    the expert data-parallel group's (``edp``) is dp's, the same mechanism on another group."""
    return overlap["dp" if axis == "edp" else axis]


def kernel_efficiency_for(device_name: str, hidden_size: int | None = None) -> float:
    """The kernel-efficiency default for an accelerator and a model's hidden size h:
    ``e∞ · h/(h + h₀)`` with its generation's calibrated e∞
    (:data:`KERNEL_EFFICIENCY_BY_GENERATION`, keyed by the name before the first ``-``: "A100",
    "H100") and :data:`KERNEL_EFFICIENCY_HALF_HIDDEN`; an unlisted accelerator, or no h, gives
    :data:`DEFAULT_KERNEL_EFFICIENCY`; an accelerator without a calibration uses the H100's.
    ``--kernel-efficiency`` overrides it.

    Examples
    --------
    >>> kernel_efficiency_for("B200", 8192) == kernel_efficiency_for("H200", 8192) == kernel_efficiency_for("H100-SXM", 8192)
    True
    >>> kernel_efficiency_for("A100-80GB", 10**9) <= KERNEL_EFFICIENCY_BY_GENERATION["A100"]
    True
    """
    if hidden_size is None:
        return DEFAULT_KERNEL_EFFICIENCY
    generation = generation_of(device_name) or "H100"
    e_inf = KERNEL_EFFICIENCY_BY_GENERATION[generation]
    return e_inf * hidden_size / (hidden_size + KERNEL_EFFICIENCY_HALF_HIDDEN)


def attention_efficiency_for(device_name: str) -> float | None:
    """The FlashAttention core's default efficiency for an accelerator
    (:data:`ATTENTION_EFFICIENCY_BY_GENERATION`, by :data:`GENERATION_OF`; uncalibrated parts use
    the H100's); None where the core runs at the kernel efficiency (A100).

    Examples
    --------
    >>> attention_efficiency_for("H100-SXM"), attention_efficiency_for("A100-80GB")
    (0.35, None)
    """
    generation = generation_of(device_name) or "H100"
    return ATTENTION_EFFICIENCY_BY_GENERATION.get(generation)


class TimeModel(StrEnum):
    """``roofline``: every operation on the roofline and every collective by its mechanism
    (:mod:`model.step_time`; physical profiles); ``single``: one kernel efficiency for all
    FLOPs and one overlap fraction per axis (the ``textbook`` profile always uses it)."""

    ROOFLINE = "roofline"
    SINGLE = "single"


@dataclass(frozen=True, slots=True, kw_only=True)
class CostOptions:
    """Knobs of the step-time and MFU model; every default is stated in the output."""

    kernel_efficiency: float = DEFAULT_KERNEL_EFFICIENCY
    """The single model's fraction of the dense peak for all FLOPs."""
    overlap: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_OVERLAP))
    """The single model's hidden fraction of each axis's communication."""
    mfu_convention: MfuConvention = MfuConvention.SIX_N
    causal_attention_flops: bool = False
    """Count the attention core's (query, key) pairs as the mask keeps them — s(s+1)/2 per
    causal sequence, fewer under a sliding window or chunks (FlashAttention skips the masked
    blocks; :mod:`model.attention`). Off: s² per layer, Megatron-LM's and PaLM's full count and
    what an unfused kernel computes, windows included."""
    attention_efficiency: float | None = None
    """Fraction of the dense peak of the FlashAttention core (QKᵀ, scores·V; forward, backward
    and recomputed), used when FlashAttention is on; None = ``kernel_efficiency``
    (:data:`ATTENTION_EFFICIENCY_BY_GENERATION`)."""
    time_model: TimeModel = TimeModel.ROOFLINE
    """Which time model physical profiles use (:class:`TimeModel`); ``textbook`` is always
    ``single``."""
    roofline: RooflineParams | None = None
    """The roofline model's efficiencies and latencies; None = the accelerator's defaults
    (:func:`model.roofline.roofline_params_for`)."""
    tp_comm_overlap: TpOverlap | None = None
    """How tensor-parallel collectives overlap GEMMs (:class:`model.op_time.TpOverlap`); None =
    the framework's own default (:func:`model.op_time.tp_overlap_for`)."""
    attention_kernel: str | None = None
    """The attention kernel the run uses, whose published curves time the FlashAttention core
    (:data:`model.attention_rates.ATTENTION_KERNELS`); None = the one the layout's framework runs on
    the part (:func:`model.attention_rates.default_attention_kernel`: cuDNN on Hopper and Blackwell
    under Megatron-Core and torchtitan, FlashAttention-2 on A100 and under DeepSpeed)."""
    grad_reduce_overlap: bool = True
    """Overlap the once-per-step data-parallel reduction with the last micro-batch's backward
    and the weight all-gather with the next forward (Megatron-Core ``--overlap-grad-reduce``,
    ``--overlap-param-gather``); False: they wait (Megatron-LM 2021's DDP all-reduce)."""
    p2p_overlap: bool = True
    """Run the pipeline's sends and receives beside computation where the framework's
    interleaved schedule does (Megatron-Core ``overlap_p2p_comm``, on by default with virtual
    stages since Megatron-LM of 2023-05: :func:`model.comm.p2p_overlapped`); False: every
    message waits (Megatron-LM of 2021–2022, batched blocking sends)."""
    p2p_warmup_flush: bool = False
    """Run the interleaved schedule's warm-up and cool-down sends asynchronously as well
    (Megatron-LM ``--overlap-p2p-communication-warmup-flush``, default off since core 0.10; the
    launch flags write it when on; code before core 0.10 behaves as with it on). False: they
    wait (:func:`model.comm.p2p_waiting_sends`)."""
    p2p_forward_send_wait: bool = True
    """The interleaved schedule waits on each forward send right after posting it, before
    freeing the output (Megatron-Core 0.18 and later with ``deallocate_pipeline_outputs``, which
    Megatron-LM and Megatron Bridge set; the code the launch flags target). False: Megatron-Core
    before 0.18 (:func:`model.comm.p2p_waiting_sends`)."""
    nccl_sm_charge: bool = True
    """Charge the SMs an NCCL collective's thread blocks hold (NVLink SHARP's channels,
    :func:`model.comm_sms.collective_sm_share`) to the computation a data-parallel collective,
    Megatron-Core's asynchronous tensor-parallel one (every layer and the output layer) or an
    overlapped NCCL expert all-to-all (the ``alltoall`` dispatcher,
    :func:`model.comm_sms.dispatcher_sm_share`) hides under (roofline model). On by
    default: the cost is a per-operation measurement (H200, ``φ`` = 0.239 at 16 blocks), with
    it the validation goals improve beside the fitted GEMM efficiency (dense 9.9 → 9.3 %, MoE
    23.5 → 23.2 %, beyond 15 % 23 → 19 of 77), so the double count once feared does not show;
    without it the search takes per-micro-batch ZeRO-3 gathers as free (Llama 3 70B on 64 H100s
    chose Megatron-FSDP at m 128). Caveat: the published runs that set ``NCCL_NVLS_ENABLE=0``
    hold the ring's channels, whose count NCCL's topology search decides, not these
    (``docs/time-model-sources.md`` §2 has the figures). False: the collectives cost nothing."""
    nccl_channel_setup: bool = True
    """Count, in each NCCL communicator's bytes, the device allocations of its channels' set-up
    (:func:`model.terms.comm_memory.channel_setup_bytes`: three 2 MiB allocations a channel
    and two a communicator, for the collective channel count rounded up to a power of two: 196
    MiB inside an H100 node (32), 100 MiB for a ring across nodes (16); measured on an H200 at
    388 MiB for a one-rank communicator's 64). On by default; ``false`` leaves out what the
    cuMem allocator's 2 MiB granule makes of these small allocations (``NCCL_CUMEM_ENABLE=0``
    is not modelled)."""
    nccl_nvls: bool = True
    """NCCL runs NVLink SHARP where the part has it (``NCCL_NVLS_ENABLE``, default on where the
    device supports multicast: :func:`model.nvls.nvls_on`): each ring communicator with ≥ 2 GPUs
    on a node holds NVLS's credits, and one inside an NVLink domain its buffers too (256 MiB +
    2 MiB on 8 H100s: :mod:`model.terms.nvls_memory`), and the step time credits an all-reduce
    inside the domain NVLS's speed-up (:func:`model.op_rates.params_in_force`). False:
    ``NCCL_NVLS_ENABLE=0`` (Megatron Bridge's performance recipes): neither."""
    tp_comm_overlap_cfg: str = DEFAULT_UB_CONFIG
    """Transformer Engine's userbuffers configuration under ``tp_comm_overlap = full``
    (:data:`model.userbuffers_gemm.UB_CONFIGS`: each overlapped GEMM's method, SMs and SM
    margin): ``te``, Transformer Engine's own defaults (what Megatron-LM passes without
    ``--tp-comm-overlap-cfg``), ``te-1`` before Transformer Engine 2.0, or a Megatron Bridge or
    NeMo launcher configuration by its name. Read only under ``full``."""
    grad_stats_group: str = "intra_dist_opt_instance"
    """The group Megatron-Core's distributed optimizer reduces its gradient statistics (the grad
    norm, the zero count) over, by Megatron's own name (:data:`GRAD_STATS_GROUPS`):
    ``intra_dist_opt_instance`` (the default, today's Megatron-Core: the world-sized
    ``_INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP`` of ``parallel_state.py``, a communicator of its
    own, added by Megatron-LM 8c1e094afe of 2025-04-22) or ``world`` (Megatron-Core before it:
    ``DistributedOptimizer.get_model_parallel_group`` at core_v0.8.0 and
    ``get_grad_stats_parallel_group`` at core_r0.11.0 return None, the default group, whose ring
    is counted already; so does Apex's DistributedFusedAdam under NeMo,
    ``MegatronDistributedFusedAdam.grad_norm``). Read by
    :func:`model.terms.comm_groups.grad_stats_rings` (``megatron``, ZeRO ≥ 1)."""
    use_multi_rank_bucket_allreduce: bool = True
    """DeepSpeed ZeRO-1/2's ``zero_optimization.use_multi_rank_bucket_allreduce`` (DeepSpeed
    ``deepspeed/runtime/zero/config.py``, default true since PR #4695, v0.12.4 of 2023-11): each
    IPG bucket all-reduced whole (``stage_1_and_2.py`` ``average_tensor`` →
    ``allreduce_and_scatter``), twice a reduce-scatter's bytes. False: the per-rank reduce of
    the DeepSpeed before it (one ``dist.reduce`` to each owning rank, a reduce-scatter's bytes;
    :mod:`model.deepspeed_mechanisms`). Ignored by other frameworks and by ``BF16_Optimizer``."""
    grad_clip_scaling: str = "every_step"
    """When Megatron's clip scales the gradients (:data:`model.step_passes.GRAD_CLIP_SCALINGS`);
    ``megatron`` only (:func:`model.step_setting_rules.check_megatron_step_settings`)."""
    loss_scaling: bool = False
    """Megatron's FP16 optimizer unscales the gradients every step
    (:data:`model.step_passes.UNSCALE_BYTES`); ``megatron`` only
    (:func:`model.step_setting_rules.check_megatron_step_settings`)."""
    lp_grads_set_to_none: bool = False
    """DeepSpeed ``BF16_Optimizer``'s ``clear_lp_grads`` before each backward frees the BF16
    gradients (DeepSpeed 56c522386 of 2022-04 to b418cf6c1 of 2025-03), so each backward's
    gradient becomes ``.grad`` without an add; False (today's code, edaa72212): it zeroes them
    and autograd adds into them, 8 B a parameter more per backward
    (:mod:`model.deepspeed_accumulate`). Ignored elsewhere."""

    def __post_init__(self) -> None:
        for name, kind in (
            ("time_model", TimeModel),
            ("tp_comm_overlap", TpOverlap),
        ):
            value = getattr(self, name)
            if value is None and name == "tp_comm_overlap":
                continue
            try:
                object.__setattr__(self, name, kind(str(value).lower()))
            except ValueError:
                allowed = ", ".join(k.value for k in kind)
                raise InputError(f"{name}: {value!r} is not one of {allowed}") from None
        check_ub_config(self.tp_comm_overlap_cfg)
        if self.grad_stats_group not in GRAD_STATS_GROUPS:
            allowed = ", ".join(GRAD_STATS_GROUPS)
            raise InputError(f"grad_stats_group: {self.grad_stats_group!r} is not one of {allowed}")
        if (clip := self.grad_clip_scaling) not in GRAD_CLIP_SCALINGS:
            allowed = ", ".join(GRAD_CLIP_SCALINGS)
            raise InputError(f"grad_clip_scaling: {clip!r} is not one of {allowed}")
        if not 0 < self.kernel_efficiency <= 1:
            raise InputError(f"kernel_efficiency: {self.kernel_efficiency} must be in (0, 1]")
        if self.attention_efficiency is not None and not 0 < self.attention_efficiency <= 1:
            raise InputError(f"attention_efficiency: {self.attention_efficiency} must be in (0, 1]")
        object.__setattr__(self, "mfu_convention", MfuConvention(self.mfu_convention))
        merged = dict(DEFAULT_OVERLAP)
        for axis, value in self.overlap.items():
            if axis not in DEFAULT_OVERLAP:
                raise InputError(f"overlap: unknown axis {axis!r} (dp, tp, pp, cp, ep)")
            if not 0 <= value <= 1:
                raise InputError(f"overlap {axis}: {value} must be in [0, 1]")
            merged[axis] = float(value)
        object.__setattr__(self, "overlap", MappingProxyType(merged))


def stage_microbatch_flops(
    arch: Architecture,
    layers: tuple[int, ...],
    last: bool,
    layout: Layout,
    training: TrainingSpec,
    causal: bool = False,
) -> int:
    """Hardware FLOPs of one micro-batch on one pipeline stage (all its tp·cp ranks together):
    3 × forward of its layers (and of the output layer on the last stage) + recomputation.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, TrainingSpec
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1)
    >>> stage_microbatch_flops(gpt, (0,), True, Layout(), t) == 3 * (24 * 4 * 64 + 4 * 16 * 8 + 2 * 4 * 8 * 16)
    True
    """
    moe = sum(map(arch.is_moe_layer, layers))
    s, b = training.seq_len, layout.micro_batch_size
    plan, every_norm = layout_plan(Framework(layout.framework), layout.recompute, training)
    terms = microbatch_flop_terms(arch, s, b, layout.recompute, causal, plan, every_norm)
    core = b * layers_core_flops(arch, layers, s, causal)
    passes = core_passes(layout.recompute, plan_recomputes_core(arch, plan))
    return stage_hardware_flops(terms, len(layers) - moe, moe, last, core, passes)


@lru_cache(maxsize=4096)
def microbatch_flop_terms(
    arch: Architecture,
    s: int,
    b: int,
    recompute: Recompute,
    causal: bool,
    plan: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES,
    every_norm: bool = False,
) -> tuple[int, int, int, int, int]:
    """FLOPs of one micro-batch of ``b`` sequences of ``s`` tokens (whole, all tp·cp ranks),
    the terms a stage's time is built from besides its attention core
    (:func:`layers_core_flops`): (matmul forward of a dense layer, of a MoE layer; forward of the
    output layer with the MTP modules' head passes and projections; recomputed matmul forward of a
    dense layer, of a MoE layer). Exact integers (:mod:`model.flops`); they grow with b. A layer's
    matmuls depend only on its kind (dense or MoE); its attention core also on its span. Under
    selective recomputation the recomputed matmuls are those ``plan`` re-runs
    (:func:`model.recompute_ops.recomputed_gemm_flops`; none for ``core_attn``)."""
    kinds = [arch.kind_index(False), arch.kind_index(True)]  # a layer of each kind, if any
    full = recompute in (Recompute.FULL, Recompute.SQRT)
    f_dense, f_moe = (0 if j is None else 2 * s * b * layer_matmul_weights(arch, j) for j in kinds)
    r_dense, r_moe = (f_dense, f_moe) if full else (0, 0)
    if recompute is Recompute.SELECTIVE:
        r_dense, r_moe = (
            0 if j is None else recomputed_gemm_flops(arch, moe, s, b, plan, every_norm)
            for moe, j in ((False, kinds[0]), (True, kinds[1]))
        )
    return f_dense, f_moe, output_forward_flops(arch, s, b), r_dense, r_moe


@lru_cache(maxsize=4096)
def layers_core_flops(
    arch: Architecture,
    layers: tuple[int, ...],
    s: int,
    causal: bool,
    docs: Documents | None = None,
) -> int:
    """Forward FLOPs of the attention cores (QKᵀ, scores·V) of ``layers`` for one sequence of
    ``s`` tokens (:func:`model.flops.attention_core_forward_flops`; each layer by its span, so a
    stage of Gemma 3's local layers costs less than one holding its global layers). × b for a
    micro-batch of b sequences."""
    return sum(attention_core_forward_flops(arch, j, s, 1, causal, docs) for j in layers)


def stage_hardware_flops(
    terms: Sequence[Any], n_dense: Any, n_moe: Any, last: Any, core: Any, passes: int
) -> Any:
    """Hardware FLOPs of one micro-batch on a stage of ``n_dense`` dense and ``n_moe`` MoE
    layers (``last``: it holds the output layer) whose attention cores take ``core`` FLOPs
    forward: ``3 × forward + recomputed forward`` of :func:`microbatch_flop_terms`, and the core
    ``passes`` times (:func:`core_passes`). Exact for ints; element-wise for arrays of layouts."""
    f_dense, f_moe, out, r_dense, r_moe = terms
    forward = n_dense * f_dense + n_moe * f_moe + where(last, out, 0)
    return 3 * forward + n_dense * r_dense + n_moe * r_moe + passes * core


def stage_peak_seconds(
    terms: Sequence[Any],
    n_dense: Any,
    n_moe: Any,
    last: Any,
    core: Any,
    passes: int,
    efficiency: float,
    attention_efficiency: float | None,
    linear_speedup: float = 1.0,
) -> Any:
    """Peak-seconds (FLOPs ÷ efficiency) of one micro-batch on a stage: its hardware FLOPs at
    ``efficiency``; with ``attention_efficiency`` the attention core's ``passes`` passes
    (3, or 4 when recomputed) at that efficiency instead; with ``linear_speedup`` ≠ 1 the
    transformer layers' linear GEMMs (everything but the attention core and the output layer;
    the MoE router's small GEMM included) ``linear_speedup`` times faster
    (:func:`model.precision.linear_speedup`: FP8). Divide by (tp·cp) and the BF16 peak for
    seconds on one GPU."""
    total = stage_hardware_flops(terms, n_dense, n_moe, last, core, passes)
    if attention_efficiency is None and linear_speedup == 1.0:
        return total / efficiency
    cores = passes * core
    core_efficiency = efficiency if attention_efficiency is None else attention_efficiency
    if linear_speedup == 1.0:
        return (total - cores) / efficiency + cores / core_efficiency
    output = 3 * where(last, terms[2], 0)
    linear = total - cores - output
    return (output + linear / linear_speedup) / efficiency + cores / core_efficiency


def stage_microbatch_attention_flops(
    arch: Architecture,
    layers: tuple[int, ...],
    layout: Layout,
    training: TrainingSpec,
    causal: bool = False,
) -> int:
    """Of :func:`stage_microbatch_flops`, the attention core's (QKᵀ and scores·V): 3 × its
    forward per layer, plus once more when it is recomputed (:func:`core_passes`).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, TrainingSpec
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1)
    >>> stage_microbatch_attention_flops(gpt, (0,), Layout(recompute="selective"), t) == 4 * 512
    True
    """
    core = layout.micro_batch_size * layers_core_flops(arch, layers, training.seq_len, causal)
    plan, _ = layout_plan(Framework(layout.framework), layout.recompute, training)
    return core_passes(layout.recompute, plan_recomputes_core(arch, plan)) * core


def core_passes(recompute: Recompute, recomputed_core: bool = True) -> int:
    """Passes of the attention core per micro-batch: forward and backward (3 forwards' worth),
    and once more when it is recomputed (full or √n; selective when its plan re-runs the core,
    ``recomputed_core``: :func:`model.recompute_ops.plan_recomputes_core`)."""
    if recompute is Recompute.SELECTIVE:
        return 4 if recomputed_core else 3
    return 3 if recompute is Recompute.NONE else 4


def exposed_seconds(
    seconds: Any,
    microbatch_seconds: Any,
    microbatches: Any,
    overlap: float,
    window_s: Any,
) -> Any:
    """Seconds of an axis's communication left exposed in a step.

    ``seconds`` is the whole step's traffic over the link; ``microbatch_seconds`` the part that
    recurs once per micro-batch (per-micro-batch gradient reduce-scatters, ZeRO-3 gathers),
    for one micro-batch. The once-per-step part and the last micro-batch's share overlap as the
    axis's ``overlap`` fraction says (conventions "Step time and MFU"); each earlier micro-batch's collective runs under
    the next micro-batch's compute (``window_s``, one micro-batch on the slowest stage), and
    only what exceeds that window is exposed:

    ``(1 − o)·(c_step + c_mb) + (m − 1)·max(0, c_mb − window)``

    With no per-micro-batch part this is the single model's ``(1 − o)·seconds``; without a window
    (unknown compute time) every micro-batch's collective is treated like the last.

    Examples
    --------
    >>> exposed_seconds(10.0, 0.0, 8, 0.5, 1.0)
    5.0
    >>> exposed_seconds(8 * 2.0, 2.0, 8, 0.5, 1.5)  # 2 s per micro-batch under a 1.5 s window
    4.5
    """
    step_part = seconds - microbatches * microbatch_seconds
    if window_s is None:
        return (1 - overlap) * seconds
    hidden_behind = maximum(0.0, microbatch_seconds - window_s) * (microbatches - 1)
    return (1 - overlap) * (step_part + microbatch_seconds) + hidden_behind
