"""Seconds of one operation, and of one layer's operations, on one GPU: each :mod:`model.ops`
operation on the roofline (:mod:`model.roofline`; the attention core from the kernel's measured
curves where the clock names one, :func:`model.attention_rates.attention_fractions`; a grouped
GEMM as Transformer Engine runs it, or as torchtitan's ``torch._grouped_mm``), and the
:class:`Clock` — the accelerator, the links and the overlap mechanisms — that every layer's
time (:mod:`model.layer_time`) reads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from trainplan.model.attention_rates import attention_fractions, ring_fractions, window_fractions
from trainplan.model.core_spans import CoreSpan
from trainplan.model.grouped_gemm import (
    GroupedFp8,
    dense_requantise_seconds,
    expert_cast_seconds,
    grouped_shape,
)
from trainplan.model.op_rates import dense_wave_efficiency
from trainplan.model.ops import WGRAD_ACCUMULATE_BYTES, LayerShape, Op, OpKind, layer_ops
from trainplan.model.roofline import (
    LinkTime,
    RooflineParams,
    attention_seconds,
    gemm_seconds,
    memory_seconds,
)
from trainplan.model.torchao_rates import TorchaoFp8, cast_seconds
from trainplan.model.torchtitan_experts import grouped_mm_seconds
from trainplan.model.tp_overlap import (
    TP_OVERLAP_FRAMEWORKS,
    TpOverlap,
    check_tp_overlap,
    tp_overlap_for,
    tp_overlap_run,
)
from trainplan.model.userbuffers_gemm import (
    UB_STREAMS,
    Userbuffers,
    partials_sum_seconds,
)

__all__ = [
    "tp_overlap_for",
    "tp_overlap_run",
    "TP_OVERLAP_FRAMEWORKS",
    "check_tp_overlap",
    "TpOverlap",
    "Clock",
    "TE_COMPUTE_STREAMS",
    "expert_loop_of",
    "op_seconds",
    "expert_quantise_seconds",
    "dgrad_seconds",
    "wgrad_seconds",
    "LayerCompute",
    "layer_compute",
    "PASSES",
]


@dataclass(frozen=True, slots=True)
class Clock:
    """What the roofline clock reads besides the layer: the accelerator, its fitted and sourced
    figures, the links of the tp, cp and ep groups (None at degree 1) and the overlap mechanisms."""

    peak_flops_per_s: float
    hbm_bytes_per_s: float
    params: RooflineParams
    tp_link: LinkTime | None = None
    cp_link: LinkTime | None = None
    """The K/V exchange's link: the cp group's, or the hybrid's rings' (:func:`model.terms.
    cp_links.cp_clock_links`)."""
    ep_link: LinkTime | None = None
    tp_comm_overlap: TpOverlap = TpOverlap.ASYNC
    cp_ring: int = 1
    """Ranks of the K/V exchange (ring or all-gather; the hybrid's across groups), 1 = off
    (:func:`model.context_parallel.cp_degrees`)."""
    cp_a2a: int = 1
    """Ranks of the head all-to-all (Ulysses; the hybrid's inside a group), 1 = off."""
    cp_gather: bool = False
    """The K/V exchange is an all-gather before the core (exposed) rather than a ring."""
    linear_speedup: float | tuple[float, float, float] = 1.0
    """How much faster the transformer layers' linear GEMMs run than in BF16, one figure or
    (forward, input gradient, weight gradient) (:func:`model.op_rates.fp8_linear_speedups`:
    the FP8 recipe's published speed-up on the part's family); the output layer and the MoE
    router stay BF16 (:data:`BF16_GEMMS`)."""
    cp_kv_repeat: int = 1
    """Times each K/V head crosses the head all-to-all (verl's ``ulysses-kv-repeat``,
    :func:`model.context_parallel.kv_repeat`); 1 for every other flavour."""
    ep_per_domain: int = 0
    """Members of the expert-parallel group in each NVLink domain (``g`` of
    :func:`model.step_time.all_to_all_bandwidth`) under DeepEP or HybridEP; 0 = unknown (their
    once-per-rank sends counted as in one domain; :func:`model.moe_dispatch.dispatch_copies`)."""
    ep_unpaired: float = 1.0
    """The share of micro-batches whose expert all-to-alls have no partner to hide under
    (:func:`model.moe_run.unpaired_share`; 1 unless the combined-1F1B overlap is on)."""
    tp_regather: bool = True
    """Sequence parallelism gathers a column-parallel linear's input again in backward for its
    weight gradient (Megatron-Core); False where the gathered input is kept
    (:func:`model.memory.keeps_gathered_inputs`: torchtitan's plan)."""
    cp_templated: str = ""
    """PyTorch's ``context_parallel`` rotate method (``allgather`` or ``alltoall``; torchtitan,
    :func:`model.context_parallel.torch_rotate_method`): cp SDPA calls per pass with the K/V
    exchange under them, FP32 merges, dK/dV passed on in FP32; "" for the other flavours."""
    ep_sm_share: float = 0.0
    """``φ``: the share of its rate the computation beside the expert dispatcher's kernels loses
    while they run (:func:`model.comm_sms.dispatcher_sm_share`: DeepEP's 20 blocks, measured;
    NCCL's all-to-all at its collectives' ``φ`` under ``nccl_sm_charge``): what an overlapped
    all-to-all costs the computation it hides under."""
    grouped_fp8: GroupedFp8 | None = None
    """How the linear layers' FP8 GEMMs run where Transformer Engine caches FP8 weights, dense and
    grouped alike (:func:`model.grouped_gemm.grouped_fp8_rates`: the per-expert casts, and the
    kernel-only speed-ups and each GEMM's own casts where profiled, else :attr:`linear_speedup`)."""
    torchao_fp8: TorchaoFp8 | None = None
    """How the linear layers' FP8 GEMMs run where they are torchao's ``Float8Linear`` (the fsdp2
    profile under the tensorwise recipe on a part torchao measured,
    :func:`model.torchao_time.torchao_fp8_rates`):
    the FP8 GEMM at its kernel speed-up plus torchao's casts of each GEMM's operands, by shape;
    None: at :attr:`linear_speedup` or :attr:`grouped_fp8`."""
    bf16_experts: bool = False
    """The routed experts' GEMMs (:data:`ROUTED_EXPERT_GEMMS`) stay BF16 under fp8 while the
    other linear layers run FP8 (:func:`model.moe_kernels.experts_stay_bf16`: torchtitan's
    ``Float8LinearConverter`` swaps ``nn.Linear`` modules only)."""
    expert_loop: bool = False
    """The routed experts run one after another, each its own GEMMs (DeepSpeed's
    ``Experts.forward``, ``deepspeed/moe/experts.py``: a loop over the local experts' modules,
    then ``torch.cat``; :func:`expert_loop_of`), not as Transformer Engine's grouped GEMM."""
    nccl_sm_share: float = 0.0
    """``φ`` of the tensor-parallel group's NCCL collectives beside computation (measured at the
    blocks of the algorithm NCCL runs them as, :func:`model.terms.sm_shares.tp_sm_share_of`; 0
    unless :class:`model.timing.CostOptions` ``nccl_sm_charge``): what an asynchronous
    tensor-parallel collective costs the GEMM it hides under (:func:`model.tp_sm_charge.tp_sm_share`), and the
    output layer's under ``full`` too (:func:`model.tp_sm_charge.output_tp_sm_share`)."""
    grouped_mm: bool = False
    """The routed experts run as PyTorch's ``torch._grouped_mm``, one kernel per pass for all
    local experts (torchtitan's ``GroupedExperts``, the ``fsdp2`` profile:
    :func:`model.torchtitan_experts.grouped_mm_of`), at the measured grouped/dense ratio
    (:func:`model.torchtitan_experts.grouped_mm_seconds`), not as Transformer Engine's."""
    tp_gather_bytes: int | None = None
    """Bytes per element of the activations sequence parallelism all-gathers over tp
    (:func:`model.fp8_gathers.tp_gather_bytes`: 1 under Transformer Engine's per-tensor FP8
    recipes, the tensors quantised before the gather); None: the layer's ``beta``. The
    reduce-scatters stay at ``beta``."""
    userbuffers: Userbuffers | None = None
    """Transformer Engine's userbuffers configuration resolved for the layer's tp
    (:func:`model.userbuffers_gemm.userbuffers_for`; set under ``tp_comm_overlap = full`` with
    sequence parallelism at tp > 1): the GEMMs next to the tp collectives run cut into its
    chunks on the SMs it leaves them (:func:`_linear`); None: whole, on every SM."""
    ep_kernel: tuple[float, float] | None = None
    """(dispatch, combine) bytes/s of DeepEP's or HybridEP's own kernels for an expert-parallel
    group inside one NVLink domain, counted as the kernels count (:mod:`model.ep_kernels`);
    None: the all-to-all rule (NCCL's share of the link)."""
    cp_ring_hidden: bool = True
    """The ring's K/V sends start before the attention core they hide under; False where the
    run does not keep its launches in order (:func:`model.launch_order.launch_order_kept`):
    each pass then waits whole."""
    cp_a2a_link: LinkTime | None = None
    """The head all-to-all's link where it is not :attr:`cp_link`: the hybrid's inner group,
    placed on its own (:func:`model.terms.cp_links.cp_clock_links`); None: :attr:`cp_link`."""


def expert_loop_of(framework: str) -> bool:
    """Whether the framework profile runs its local experts in a loop (:attr:`Clock.expert_loop`):
    ``deepspeed`` only.

    >>> expert_loop_of("deepspeed"), expert_loop_of("megatron")
    (True, False)
    """
    return str(framework) == "deepspeed"


TE_COMPUTE_STREAMS = 4
"""CUDA streams Transformer Engine spreads a grouped GEMM's per-expert GEMMs over
(``transformer_engine/common/util/multi_stream.cpp`` ``get_num_compute_streams``)."""

BF16_GEMMS = frozenset({"router", "output layer (logits)"})
"""GEMMs with weights that FP8 recipes keep in BF16 (DeepSeek-V3 §3.3; Transformer Engine
leaves the output head and the router to PyTorch)."""

EXPERT_LINEARS = ("experts up", "experts down")
"""The routed experts' FC1 and FC2 GEMMs (:func:`model.ops.layer_ops`' names), in that order."""
ROUTED_EXPERT_GEMMS = frozenset(EXPERT_LINEARS)
"""The routed experts' GEMMs: BF16 under a clock with :attr:`Clock.bf16_experts`."""


def _gemm(
    m: float,
    n: float,
    k: float,
    batch: float,
    c: Clock,
    extra: float = 0.0,
    fp8: bool = False,
    which: int = 0,
    shape: float | None = None,
    cast_rows: float | None = None,
    taken: int = 0,
) -> float:
    """A GEMM on the clock at the part's sustained peak (:attr:`RooflineParams.clock_fraction`);
    ``fp8``: at the FP8 rate with 1-byte operands and a BF16 output — that peak × the
    :attr:`Clock.linear_speedup` of pass ``which`` (0 forward, 1 input gradient, 2 weight
    gradient), or under :attr:`Clock.grouped_fp8` (Transformer Engine caching FP8 weights, dense
    and grouped GEMMs alike) × the kernel-only speed-up plus, in the forward and input gradient,
    the cast of the GEMM's own ``cast_rows × k`` quantised operand (the input, the output
    gradient; ``cast_rows`` defaults to ``m``), so the casts' share follows the shape;
    ``shape``: the useful share of its tiles (a grouped GEMM's, :func:`_expert_gemm`); None: a
    dense GEMM's own (:func:`model.op_rates.dense_wave_efficiency`), on all the part's SMs but
    ``taken``."""
    peak, p = c.peak_flops_per_s * c.params.clock_fraction, c.params
    if shape is None:
        shape = dense_wave_efficiency(p.part, m, n, batch, taken)
    if not fp8:
        return gemm_seconds(m, n, k, batch, peak, c.hbm_bytes_per_s, p, 2, extra, shape)
    g, ao = c.grouped_fp8, c.torchao_fp8
    kernel = None if g is None else g.kernel_speedup
    if ao is not None and g is None:
        peak *= ao.kernel_speedup
    else:
        peak *= _speedups(c)[which] if kernel is None else kernel[which]
    t = gemm_seconds(m, n, k, batch, peak, c.hbm_bytes_per_s, p, 1, extra + m * n * batch, shape)
    if ao is not None and g is None:
        return t + cast_seconds(m, k, n, batch, c.hbm_bytes_per_s, c.params, ao, which)
    if g is None or g.cast_s_per_element is None or which == 2:
        return t
    return t + g.cast_s_per_element[which] * (m if cast_rows is None else cast_rows) * k * batch


def _expert_gemm(
    op: Op, c: Clock, mnk: tuple[float, float, float], which: int, extra: float = 0.0
) -> float:
    """Pass ``which`` of the routed experts' grouped GEMM, ``op.batch`` experts of output
    ``[m, n]`` and depth ``k`` each (:func:`model.grouped_gemm.grouped_shape`: the wave rule, or
    the M block where no SM count is sourced). Under :attr:`Clock.grouped_fp8` the FP8 kernels
    run at their kernel-only speed-up and the forward and input gradient add the cast of their
    ``m × k`` quantised operand per expert (the input rows, the output gradient; :func:`_gemm`).
    Under :attr:`Clock.grouped_mm` (torchtitan) one ``torch._grouped_mm`` instead
    (:func:`model.torchtitan_experts.grouped_mm_seconds`)."""
    m, n, k = mnk
    if c.grouped_mm:  # torchtitan: one torch._grouped_mm, BF16
        peak = c.peak_flops_per_s * c.params.clock_fraction
        return grouped_mm_seconds(mnk, op.batch, which, peak, c.hbm_bytes_per_s, c.params, extra)
    if c.expert_loop:  # one dense GEMM per expert, each with its own tiles and waves
        rows, w = m, dense_wave_efficiency(c.params.part, m, n, 1)
    else:
        rows, w = grouped_shape(c.params.part, m, n, op.batch, which != 2)
    t = _gemm(rows, n, k, op.batch, c, extra, _fp8(op, c), which, w, m)
    return t + expert_quantise_seconds(op, c, which)


def expert_quantise_seconds(op: Op, c: Clock, which: int) -> float:
    """Seconds the per-expert quantisations add to pass ``which`` (0 forward, 1 input gradient,
    2 weight gradient) of a grouped GEMM of ``op.batch`` local experts under
    :attr:`Clock.grouped_fp8`, beyond the GEMM's own cast (:func:`model.grouped_gemm.
    expert_cast_seconds`: the launches of casting one expert at a time, FC1's bias gradient,
    a saved BF16 input quantised again for the weight gradient); 0 for a BF16 run, a dense GEMM
    or a clock without :attr:`Clock.grouped_fp8`.

    >>> from trainplan.model.grouped_gemm import GroupedFp8
    >>> from trainplan.model.roofline import RooflineParams
    >>> c = Clock(989.4e12, 3.35e12, RooflineParams(gemm_efficiency=0.74), linear_speedup=1.9,
    ...           grouped_fp8=GroupedFp8((1.9, 1.9, 1.9), (2e-12, 2e-12), 4))
    >>> fc1 = Op("experts up", OpKind.GEMM, m=2048, n=1536, k=2048, batch=16, weights=True)
    >>> round(expert_quantise_seconds(fc1, c, 0) * 1e6, 1)  # 15 experts more × 4 kernels × 3 µs
    180.0
    >>> expert_quantise_seconds(fc1, c, 2)  # the forward's column-wise copies
    0.0
    """
    g, names = c.grouped_fp8, EXPERT_LINEARS
    if g is None or not _is_grouped(op) or not _fp8(op, c) or op.name not in names:
        return 0.0
    mnk, linear = (op.m, op.n, op.k), names.index(op.name)
    return expert_cast_seconds(g, linear, which, mnk, op.batch, c.hbm_bytes_per_s, c.params)


def _speedups(c: Clock) -> tuple[float, float, float]:
    s = c.linear_speedup
    return (s, s, s) if isinstance(s, float | int) else s


def _fp8(op: Op, c: Clock) -> bool:
    """Whether ``op`` runs at the FP8 rate: a linear layer's GEMM (it has a weight) under a
    clock with a linear speedup, not one of :data:`BF16_GEMMS`, nor a routed expert's
    (:data:`ROUTED_EXPERT_GEMMS`) under :attr:`Clock.bf16_experts`."""
    if c.bf16_experts and op.name in ROUTED_EXPERT_GEMMS:
        return False
    return _speedups(c) != (1.0, 1.0, 1.0) and op.weights and op.name not in BF16_GEMMS


def _attention(op: Op, c: Clock, backward: bool) -> float:
    """The fused attention core: the share-weighted sum over the spans of the layers it stands
    for (:attr:`model.ops.Op.spans`; one span of :attr:`Op.flops` when it names none) of each
    span's time, at the published kernel's efficiency for its call length, head dimensions and
    mask (a sliding window's band at :func:`model.attention_rates.window_fractions`, else
    :func:`model.attention_rates.attention_fractions`) over the FLOPs its mask keeps where the
    clock names a kernel with curves on the part, else at
    :attr:`RooflineParams.attention_efficiency` over its FLOPs. Every span moves the same
    Q, K, V and O bytes."""
    spans = op.spans or (CoreSpan(1.0, op.flops, op.masked_flops),)
    return sum(s.share * _span_seconds(op, s, c, backward) for s in spans)


def _span_seconds(op: Op, span: CoreSpan, c: Clock, backward: bool) -> float:
    """Seconds of one span's core (:func:`_attention`)."""
    moved = op.backward_bytes if backward else op.forward_bytes
    params, flops = c.params, span.flops
    peak = c.peak_flops_per_s * params.clock_fraction
    found = None
    if params.attention_kernel is not None and op.seq_len >= 1:
        found = _kernel_fractions(op, span, c, params.attention_kernel, params.part)
    if found is not None:
        params, flops = params.with_(attention_efficiency=found[int(backward)]), span.masked_flops
    elif params.attention_efficiency is None:  # the core at the GEMM rule's large-k figure
        params = params.with_(attention_efficiency=params.gemm_efficiency)
    return attention_seconds(flops * (2 if backward else 1), moved, peak, c.hbm_bytes_per_s, params)


def _kernel_fractions(
    op: Op, span: CoreSpan, c: Clock, kernel: str, part: str
) -> tuple[float, float] | None:
    """(forward, backward) fractions of one span's kernel calls on one GPU: a band's one
    windowed call at ``Op.seq_len`` (:func:`model.attention_rates.window_fractions`); a ring's
    (Transformer Engine's ``p2p``, PyTorch's ``context_parallel``; the hybrid's ring after its
    head all-to-all) one causal and r − 1 unmasked calls on the rank's chunk
    (:func:`model.attention_rates.ring_fractions`; the chunk is s/r, ``Op.seq_len`` × the head
    all-to-all's degree), Ulysses' one causal call on the whole sequence; otherwise (the
    all-gather, a chunked or document-masked core) one causal call at ``Op.seq_len``."""
    if span.window is not None:
        return window_fractions(kernel, part, op.head_dims, int(op.seq_len), span.window)
    if not span.ring_split or c.cp_gather:
        return attention_fractions(kernel, part, op.head_dims, int(op.seq_len))
    chunk = int(op.seq_len * c.cp_a2a)
    return ring_fractions(kernel, part, op.head_dims, chunk, c.cp_ring)


def op_seconds(op: Op, c: Clock, backward: bool = False) -> float:
    """Seconds of one operation's forward (or backward) kernel(s) on one GPU. A GEMM's backward
    is its input-gradient GEMM ``[m, n] × [n, k]`` and, when it has a weight, its weight-gradient
    GEMM ``[k, m] × [m, n]`` accumulated into FP32 (:data:`model.ops.WGRAD_ACCUMULATE_BYTES`);
    the FlashAttention core's backward is twice its forward FLOPs; a memory-bound operation
    moves its ``backward_bytes`` and pays ``t_kernel`` per kernel it launches
    (:attr:`model.ops.Op.backward_kernels`: PyTorch's eager operators, :mod:`model.elementwise`).

    Examples
    --------
    >>> from trainplan.model.roofline import RooflineParams
    >>> c = Clock(312e12, 2.039e12, RooflineParams(gemm_efficiency=0.74))
    >>> norm = Op("norm", OpKind.MEMORY, forward_bytes=4e8, backward_bytes=6e8)
    >>> round(op_seconds(norm, c, backward=True) * 1e6, 2)  # 6e8 / (0.9·2.039e12) + 3 µs
    329.96
    """
    if op.kind is OpKind.MEMORY:  # one t_kernel in memory_seconds, the rest per kernel
        moved = op.backward_bytes if backward else op.forward_bytes
        kernels = op.backward_kernels if backward else op.forward_kernels
        launches = (kernels - 1) * c.params.kernel_overhead_s
        return memory_seconds(moved, c.hbm_bytes_per_s, c.params) + launches
    if op.kind is OpKind.ATTENTION:
        return _attention(op, c, backward)
    if not backward:
        if _is_grouped(op):
            return _grouped(op, c) + _expert_gemm(op, c, (op.m, op.n, op.k), 0)
        return _linear(op, c, 0, (op.m, op.n, op.k))
    return dgrad_seconds(op, c) + wgrad_seconds(op, c)


def _linear(
    op: Op, c: Clock, which: int, mnk: tuple[float, float, float], extra: float = 0.0
) -> float:
    """Pass ``which`` (0 forward, 1 input gradient, 2 weight gradient) of a dense GEMM, output
    ``[m, n]``, depth ``k`` (the weight gradient: with its saved BF16 input quantised again
    where the layer saves one, :func:`model.grouped_gemm.dense_requantise_seconds`); where
    :attr:`Clock.userbuffers` overlaps it (by the op's role) as
    Transformer Engine runs it (:mod:`model.userbuffers_gemm`): ``chunks`` GEMMs of the chunk's
    shape (:meth:`~model.userbuffers_gemm.UbGemm.chunk`), their tiles and waves together on all
    the part's SMs but the ``taken`` ones, plus the launches its streams do not hide and, after a
    ring-exchange reduce-scatter, the sum of its partial chunks."""
    m, n, k = mnk
    ub = c.userbuffers.gemm(op.role, which) if c.userbuffers is not None and op.role else None
    if which == 2 and _fp8(op, c):  # a saved BF16 input quantised again (grouped_gemm)
        extra_s = dense_requantise_seconds(c.grouped_fp8, op.name, op.m * op.k * op.batch,
                                           c.hbm_bytes_per_s, c.params)  # fmt: skip
    else:
        extra_s = 0.0
    if ub is None:
        return _gemm(m, n, k, op.batch, c, extra, _fp8(op, c), which) + extra_s
    rows, cols = ub.chunk(m, n)
    t = _gemm(rows, cols, k, op.batch * ub.chunks, c, extra, _fp8(op, c), which, None,
              m / ub.chunks, ub.taken)  # fmt: skip
    t += _launch_gaps(ub.chunks, UB_STREAMS, c)
    if ub.reduce:
        t += partials_sum_seconds(m * n * op.batch, ub.chunks, 2, c.hbm_bytes_per_s, c.params)
    return t + extra_s


def _is_grouped(op: Op) -> bool:
    """The experts' grouped GEMMs: a weight per group (``batch`` local experts)."""
    return op.weights and op.batch > 1


def _grouped(op: Op, c: Clock) -> float:
    """The launch gaps a grouped GEMM adds beyond one kernel's: Transformer Engine's
    ``GroupedLinear`` runs one cuBLAS GEMM per expert over :data:`TE_COMPUTE_STREAMS` streams
    (``transformer_engine/common/gemm/cublaslt_gemm.cu`` ``multi_stream_cublas_gemm``), so
    ``ceil(groups / 4) − 1`` more t_kernel; under :attr:`Clock.expert_loop` (DeepSpeed's loop
    over its experts, one stream) ``groups − 1`` more; none under :attr:`Clock.grouped_mm`
    (one kernel)."""
    if not _is_grouped(op) or c.grouped_mm:
        return 0.0
    return _launch_gaps(op.batch, 1 if c.expert_loop else TE_COMPUTE_STREAMS, c)


def _launch_gaps(kernels: float, streams: int, c: Clock) -> float:
    """The t_kernel of ``kernels`` GEMM calls spread over ``streams`` streams beyond one
    kernel's: ``ceil(kernels / streams) − 1``."""
    return (math.ceil(kernels / streams) - 1) * c.params.kernel_overhead_s


def dgrad_seconds(op: Op, c: Clock) -> float:
    if _is_grouped(op):
        return _grouped(op, c) + _expert_gemm(op, c, (op.m, op.k, op.n), 1)
    return _linear(op, c, 1, (op.m, op.k, op.n))


def wgrad_seconds(op: Op, c: Clock) -> float:
    if not op.weights:  # QKᵀ and scores·V: both "gradients" are activation gradients
        return _gemm(op.k, op.n, op.m, op.batch, c)
    extra = WGRAD_ACCUMULATE_BYTES * op.k * op.n * op.batch
    if _is_grouped(op):
        return _grouped(op, c) + _expert_gemm(op, c, (op.k, op.n, op.m), 2, extra)
    return _linear(op, c, 2, (op.k, op.n, op.m), extra)


@dataclass(frozen=True, slots=True)
class LayerCompute:
    """The operations of one layer and micro-batch on one GPU, without its collectives: what
    does not depend on the links (cached once per layer shape and accelerator)."""

    forward_s: float
    backward_s: float
    core_forward_s: float
    """The attention core's forward (what selective recomputation repeats)."""
    core_backward_s: float
    roles: dict[str, tuple[float, float, float]]
    """Per GEMM role (``attn_in`` …): seconds of its forward, input-gradient and weight-gradient
    GEMMs (what a tensor-parallel collective can hide behind)."""
    shared_fc1_s: float = 0.0
    """The shared experts' first GEMM(s) and activation, forward (what
    ``moe_shared_expert_overlap`` runs beside the dispatch)."""
    shared_fc2_s: float = 0.0
    """The shared experts' last GEMM, forward (beside the combine)."""
    experts_forward_s: float = 0.0
    """The routed experts' grouped GEMMs and activation, forward (what combined 1F1B runs
    beside the other micro-batch's dispatch and its own backward dispatch)."""
    experts_backward_s: float = 0.0
    """The same, backward."""

    def role(self, name: str, which: str) -> float:
        """Seconds of the ``which`` (forward, dgrad, wgrad) GEMMs of role ``name`` (0 if none)."""
        k = PASSES.index(which)
        return self.roles[name][k] if name in self.roles else 0.0


PASSES = ("forward", "dgrad", "wgrad")
"""The passes of a GEMM role, in :attr:`LayerCompute.roles`' order."""


@lru_cache(maxsize=4096)
def layer_compute(x: LayerShape, c: Clock) -> LayerCompute:
    """:class:`LayerCompute` of a layer shape on the accelerator of ``c`` (its links unread)."""
    ops = layer_ops(x)
    roles: dict[str, tuple[float, float, float]] = {}
    for name in ("attn_in", "attn_out", "mlp_in", "mlp_out"):
        picked = [o for o in ops if o.role == name]
        if picked:
            roles[name] = (
                sum(op_seconds(o, c) for o in picked),
                sum(dgrad_seconds(o, c) for o in picked),
                sum(wgrad_seconds(o, c) for o in picked),
            )
    return LayerCompute(
        sum(op_seconds(o, c) for o in ops),
        sum(op_seconds(o, c, backward=True) for o in ops),
        sum(op_seconds(o, c) for o in ops if o.core),
        sum(op_seconds(o, c, backward=True) for o in ops if o.core),
        roles,
        *_shared_forward(ops, c),
        sum(op_seconds(o, c) for o in ops if o.name.startswith("experts")),
        sum(op_seconds(o, c, backward=True) for o in ops if o.name.startswith("experts")),
    )


def _shared_forward(ops: tuple[Op, ...], c: Clock) -> tuple[float, float]:
    """(FC1 and activation, FC2) forward seconds of a MoE layer's shared experts (0, 0 without)."""
    shared = [o for o in ops if o.name.startswith("shared experts")]
    if not shared:
        return 0.0, 0.0
    return sum(op_seconds(o, c) for o in shared[:-1]), op_seconds(shared[-1], c)
