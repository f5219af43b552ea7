"""Seconds of one micro-batch through one layer on one GPU: its operations on the roofline
(:mod:`model.ops`, :mod:`model.roofline`) and the tensor-, context- and expert-parallel
collectives it waits for, each overlapped as the framework's mechanism overlaps it.

Overlap by mechanism (not one fraction per axis):

* **Tensor parallelism** (``tp_comm_overlap``): ``none`` — every collective waits (Megatron-LM
  2021, the code of Narayanan et al.'s Table 1); ``async`` (Megatron-LM since 2022 and
  Megatron-Core, the default) — in backward a column-parallel linear launches the all-gather of
  its input for the weight gradient before its input-gradient GEMM and the reduce-scatter
  (all-reduce without sequence parallelism) of that input gradient before its weight-gradient
  GEMM (``LinearWithGradAccumulationAndAsyncCommunication``), so each waits only for what its
  GEMM does not cover; the forward collectives and the backward all-gather before each
  row-parallel input gradient wait; ``full`` (Transformer Engine's userbuffers,
  Megatron-Core ``--tp-comm-overlap``) — every all-gather is pipelined with the GEMM after it
  and every reduce-scatter with the GEMM before it: each waits for what its GEMM does not cover;
  ``async-tp`` (torchtitan's ``compile.enable_async_tensor_parallel``: Inductor's micro-pipeline
  pass fuses each all-gather with the matmul after it and each matmul with the reduce-scatter
  after it, forward and backward, on PyTorch's SymmetricMemory) — the all-gather's local shard is
  consumed first while the remote ones are copied (``torch/distributed/_symmetric_memory/
  __init__.py``, ``_pipelined_multi_all_gather_and_consume``), so each collective waits for what
  the GEMM's other (tp − 1)/tp does not cover, and the decomposed GEMM adds tp − 1 kernels.
* **Context parallelism** (the layout's ``cp_kind``, :mod:`model.context_parallel`, the same
  tensors it counts): ``ring`` — ring attention sends the next K/V chunk while the attention
  core computes on the current one (Liu et al. 2023; Megatron-Core/Transformer Engine): per pass
  only what exceeds the core's time waits; ``all-gather`` — K and V are gathered before the core
  and the gather waits (Llama 3 §3.3.2: "the all-gather communication latency is exposed");
  ``ulysses`` — the head all-to-alls of Q, K, V before the core and of O after it wait (they
  gate the core); ``a2a+p2p`` — the all-to-alls inside the group wait, the ring across groups
  overlaps as the ring does.
* **Expert parallelism** (the recipe's :class:`model.moe_run.MoERun`): dispatch and combine
  all-to-alls wait (they gate the experts) unless Megatron-Core's ``moe_shared_expert_overlap``
  (shared experts beside the forward all-to-alls) or ``overlap_moe_expert_parallel_comm`` (one
  micro-batch's all-to-alls under another's computation) hides part of them
  (:func:`model.moe_run.exposed_all_to_all`).

A collective's own time is :func:`model.roofline.collective_seconds` over the axis's link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

from trainplan.model.context_parallel import cp_tensor_bytes
from trainplan.model.errors import InputError
from trainplan.model.layout import Recompute
from trainplan.model.moe_run import (
    all_to_all_sent,
    exposed_all_to_all,
    grouped_rows,
)
from trainplan.model.op_rates import attention_fractions
from trainplan.model.ops import (
    WGRAD_ACCUMULATE_BYTES,
    LayerShape,
    Op,
    OpKind,
    embedding_ops,
    layer_ops,
    output_ops,
)
from trainplan.model.roofline import (
    Collective,
    LinkTime,
    RooflineParams,
    attention_seconds,
    collective_seconds,
    gemm_seconds,
    memory_seconds,
)
from trainplan.model.xp import where

__all__ = [
    "TpOverlap",
    "TP_OVERLAP_FRAMEWORKS",
    "check_tp_overlap",
    "Clock",
    "LayerTime",
    "PARTS",
    "op_seconds",
    "LayerCompute",
    "layer_compute",
    "layer_time",
    "ep_all_to_all_seconds",
    "embedding_time",
    "output_time",
    "stage_parts",
]


class TpOverlap(StrEnum):
    """How tensor-parallel collectives overlap GEMMs (see the module docstring)."""

    NONE = "none"
    ASYNC = "async"
    FULL = "full"
    ASYNC_TP = "async-tp"


TP_OVERLAP_FRAMEWORKS: dict[TpOverlap, tuple[str, ...]] = {
    TpOverlap.FULL: ("megatron", "deepspeed", "textbook"),
    TpOverlap.ASYNC_TP: ("fsdp2",),
}
"""The framework profiles that run a tensor-parallel overlap mechanism (the others run under
every profile): Transformer Engine's userbuffers (``full``) under Megatron-Core (and
Megatron-DeepSpeed's TE layers); torchtitan's async TP (``async-tp``) only in torchtitan, the
``fsdp2`` profile (``torchtitan/distributed/compile.py`` ``_maybe_enable_async_tp``)."""


def check_tp_overlap(overlap: TpOverlap, framework: str) -> None:
    """Refuse a tensor-parallel overlap mechanism the framework does not have.

    Raises
    ------
    InputError
        ``async-tp`` outside torchtitan (``fsdp2``), ``full`` under ``fsdp2``.

    Examples
    --------
    >>> try:
    ...     check_tp_overlap(TpOverlap.ASYNC_TP, "megatron")
    ... except InputError as err:
    ...     print(err)
    tp_comm_overlap: async-tp (torchtitan's enable_async_tensor_parallel) needs framework fsdp2, not megatron
    """
    allowed = TP_OVERLAP_FRAMEWORKS.get(overlap)
    if allowed is not None and str(framework) not in allowed:
        name = {
            TpOverlap.ASYNC_TP: "torchtitan's enable_async_tensor_parallel",
            TpOverlap.FULL: "Transformer Engine's userbuffers",
        }[overlap]
        raise InputError(
            f"tp_comm_overlap: {overlap} ({name}) needs framework {' or '.join(allowed)}, "
            f"not {framework}"
        )


@dataclass(frozen=True, slots=True)
class Clock:
    """What the roofline clock reads besides the layer: the accelerator, its fitted and sourced
    figures, the links of the tp, cp and ep groups (None at degree 1) and the overlap mechanisms."""

    peak_flops_per_s: float
    hbm_bytes_per_s: float
    params: RooflineParams
    tp_link: LinkTime | None = None
    cp_link: LinkTime | None = None
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
    :func:`model.step_time.all_to_all_bandwidth`); 0 = unknown (no de-duplication counted)."""
    ep_unpaired: float = 1.0
    """The share of micro-batches whose expert all-to-alls have no partner to hide under
    (:func:`model.moe_run.unpaired_fraction`; 1 unless the combined-1F1B overlap is on)."""


TE_COMPUTE_STREAMS = 4
"""CUDA streams Transformer Engine spreads a grouped GEMM's per-expert GEMMs over
(``transformer_engine/common/util/multi_stream.cpp`` ``get_num_compute_streams``)."""

BF16_GEMMS = frozenset({"router", "output layer (logits)"})
"""GEMMs with weights that FP8 recipes keep in BF16 (DeepSeek-V3 §3.3; Transformer Engine
leaves the output head and the router to PyTorch)."""


PARTS = ("compute", "tp_exposed", "cp_exposed", "ep_exposed", "tp", "cp", "ep")
"""The parts of a :class:`LayerTime`, in the order :func:`stage_parts` combines them."""


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Seconds of one micro-batch through a layer (or the embedding / output layer) on one GPU."""

    forward_s: float
    """The forward pass's operations."""
    backward_s: float
    """The backward pass's operations (input and weight gradients)."""
    recompute_s: float
    """Operations recomputed in backward (the attention core under selective recomputation,
    the whole forward under full or √n)."""
    tp_s: float = 0.0
    """Tensor-parallel collectives if nothing overlapped them."""
    tp_exposed_s: float = 0.0
    """Of those, what the GEMMs do not cover (the mechanism's overlap)."""
    cp_s: float = 0.0
    cp_exposed_s: float = 0.0
    ep_s: float = 0.0
    ep_exposed_s: float = 0.0

    @property
    def compute_s(self) -> float:
        """forward + backward + recomputed operations."""
        return self.forward_s + self.backward_s + self.recompute_s

    @property
    def parts(self) -> tuple[float, ...]:
        """The :data:`PARTS`, in order."""
        return (
            self.compute_s,
            self.tp_exposed_s,
            self.cp_exposed_s,
            self.ep_exposed_s,
            self.tp_s,
            self.cp_s,
            self.ep_s,
        )

    @property
    def seconds(self) -> float:
        """Operations plus the exposed collectives."""
        return self.compute_s + self.tp_exposed_s + self.cp_exposed_s + self.ep_exposed_s


def _gemm(
    m: float,
    n: float,
    k: float,
    batch: float,
    c: Clock,
    extra: float = 0.0,
    fp8: bool = False,
    which: int = 0,
) -> float:
    """A GEMM on the clock at the part's sustained peak (:attr:`RooflineParams.clock_fraction`);
    ``fp8``: at the FP8 rate (that peak × the :attr:`Clock.linear_speedup` of pass ``which``:
    0 forward, 1 input gradient, 2 weight gradient) with 1-byte operands and a BF16 output."""
    peak = c.peak_flops_per_s * c.params.clock_fraction
    if not fp8:
        return gemm_seconds(m, n, k, batch, peak, c.hbm_bytes_per_s, c.params, 2, extra)
    peak *= _speedups(c)[which]
    return gemm_seconds(m, n, k, batch, peak, c.hbm_bytes_per_s, c.params, 1, extra + m * n * batch)


def _speedups(c: Clock) -> tuple[float, float, float]:
    s = c.linear_speedup
    return (s, s, s) if isinstance(s, float | int) else s


def _fp8(op: Op, c: Clock) -> bool:
    """Whether ``op`` runs at the FP8 rate: a linear layer's GEMM (it has a weight) under a
    clock with a linear speedup, not one of :data:`BF16_GEMMS`."""
    return _speedups(c) != (1.0, 1.0, 1.0) and op.weights and op.name not in BF16_GEMMS


def _attention(op: Op, c: Clock, backward: bool) -> float:
    """The fused attention core: at the published kernel's efficiency for its chunk length,
    head dimensions and causal mask over the FLOPs the mask keeps
    (:func:`model.op_rates.attention_fractions`) where the clock names a kernel with curves on
    the part, else at :attr:`RooflineParams.attention_efficiency` over :attr:`Op.flops`."""
    moved = op.backward_bytes if backward else op.forward_bytes
    params, flops = c.params, op.flops
    peak = c.peak_flops_per_s * params.clock_fraction
    found = None
    if params.attention_kernel is not None and op.seq_len >= 1:
        found = attention_fractions(
            params.attention_kernel, params.part, op.head_dims, int(op.seq_len)
        )
    if found is not None:
        params, flops = params.with_(attention_efficiency=found[int(backward)]), op.masked_flops
    elif params.attention_efficiency is None:  # the core at the GEMM rule's large-k figure
        params = params.with_(attention_efficiency=params.gemm_efficiency)
    return attention_seconds(flops * (2 if backward else 1), moved, peak, c.hbm_bytes_per_s, params)


def op_seconds(op: Op, c: Clock, backward: bool = False) -> float:
    """Seconds of one operation's forward (or backward) kernel(s) on one GPU. A GEMM's backward
    is its input-gradient GEMM ``[m, n] × [n, k]`` and, when it has a weight, its weight-gradient
    GEMM ``[k, m] × [m, n]`` accumulated into FP32 (:data:`model.ops.WGRAD_ACCUMULATE_BYTES`);
    the FlashAttention core's backward is twice its forward FLOPs; a memory-bound kernel moves
    its ``backward_bytes``.

    Examples
    --------
    >>> from trainplan.model.roofline import RooflineParams
    >>> c = Clock(312e12, 2.039e12, RooflineParams(gemm_efficiency=0.74))
    >>> norm = Op("norm", OpKind.MEMORY, forward_bytes=4e8, backward_bytes=6e8)
    >>> round(op_seconds(norm, c, backward=True) * 1e6, 2)  # 6e8 / (0.9·2.039e12) + 3 µs
    329.96
    """
    if op.kind is OpKind.MEMORY:
        moved = op.backward_bytes if backward else op.forward_bytes
        return memory_seconds(moved, c.hbm_bytes_per_s, c.params)
    if op.kind is OpKind.ATTENTION:
        return _attention(op, c, backward)
    if not backward:
        return _grouped(op, c) + _gemm(_rows(op), op.n, op.k, op.batch, c, fp8=_fp8(op, c))
    return _dgrad(op, c) + _wgrad(op, c)


def _is_grouped(op: Op) -> bool:
    """The experts' grouped GEMMs: a weight per group (``batch`` local experts)."""
    return op.weights and op.batch > 1


def _rows(op: Op) -> float:
    """A GEMM's M rows as its kernel computes them: a grouped GEMM's each group rounded up to
    its M tile (:func:`model.moe_run.grouped_rows`)."""
    return grouped_rows(op.m) if _is_grouped(op) else op.m


def _grouped(op: Op, c: Clock) -> float:
    """The launch gaps a grouped GEMM adds beyond one kernel's: Transformer Engine's
    ``GroupedLinear`` runs one cuBLAS GEMM per expert over :data:`TE_COMPUTE_STREAMS` streams
    (``transformer_engine/common/gemm/cublaslt_gemm.cu`` ``multi_stream_cublas_gemm``), so
    ``ceil(groups / 4) − 1`` more t_kernel."""
    if not _is_grouped(op):
        return 0.0
    return (math.ceil(op.batch / TE_COMPUTE_STREAMS) - 1) * c.params.kernel_overhead_s


def _dgrad(op: Op, c: Clock) -> float:
    return _grouped(op, c) + _gemm(_rows(op), op.k, op.n, op.batch, c, fp8=_fp8(op, c), which=1)


def _wgrad(op: Op, c: Clock) -> float:
    if not op.weights:  # QKᵀ and scores·V: both "gradients" are activation gradients
        return _gemm(op.k, op.n, op.m, op.batch, c)
    extra = WGRAD_ACCUMULATE_BYTES * op.k * op.n * op.batch
    return _grouped(op, c) + _gemm(op.k, op.n, op.m, op.batch, c, extra, fp8=_fp8(op, c), which=2)


def _coll(kind: Collective, n: int, sent: float, link: LinkTime | None, c: Clock) -> float:
    return 0.0 if link is None else collective_seconds(kind, n, sent, link, c.params)


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
        k = ("forward", "dgrad", "wgrad").index(which)
        return self.roles[name][k] if name in self.roles else 0.0


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
                sum(_dgrad(o, c) for o in picked),
                sum(_wgrad(o, c) for o in picked),
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


def _tp_collectives(
    x: LayerShape, ops: LayerCompute, c: Clock, full_recompute: bool
) -> tuple[float, float]:
    """(all tp collective seconds, exposed seconds) of one layer and micro-batch."""
    tp = x.tp
    if tp == 1 or c.tp_link is None:
        return 0.0, 0.0
    one = (tp - 1) / tp * x.beta * x.tokens * x.arch.hidden_size
    mode = c.tp_comm_overlap
    total = exposed = 0.0

    def wait(seconds: float, covered: float, overlapped: bool) -> None:
        nonlocal total, exposed
        total += seconds
        exposed += max(0.0, seconds - covered) if overlapped else seconds

    passes = 2 if full_recompute else 1
    halves: tuple[tuple[str, str], ...] = (("attn_in", "attn_out"), ("mlp_in", "mlp_out"))
    moe = x.arch.moe
    if x.moe and moe is not None and not moe.num_shared_experts:
        # the routed experts' tokens move over the expert-TP group only (below): no MLP-half
        # collectives (Megatron-Core MoEAlltoAllTokenDispatcher; shared experts run over tp)
        halves = halves[:1]
    if x.sequence_parallel and mode is TpOverlap.ASYNC_TP:
        # each collective fused with its matmul; the input kept gathered (no re-gather)
        ag = _coll(Collective.ALL_GATHER, tp, one, c.tp_link, c)
        rs = _coll(Collective.REDUCE_SCATTER, tp, one, c.tp_link, c)
        share, split = (tp - 1) / tp, (tp - 1) * c.params.kernel_overhead_s
        fused = [(ag, ("forward", 0)), (rs, ("forward", 1))] * passes
        fused += [(ag, ("dgrad", 1)), (rs, ("dgrad", 0))]
        for col, row in halves:
            for seconds, (which, k) in fused:
                wait(seconds, share * ops.role((col, row)[k], which), True)
                exposed += split
    elif x.sequence_parallel:
        ag = _coll(Collective.ALL_GATHER, tp, one, c.tp_link, c)
        rs = _coll(Collective.REDUCE_SCATTER, tp, one, c.tp_link, c)
        full = mode is TpOverlap.FULL
        for _ in range(passes):  # forward (and the recomputed forward)
            for col, row in halves:
                wait(ag, ops.role(col, "forward"), full)
                wait(rs, ops.role(row, "forward"), full)
        for col, row in halves:
            wait(ag, ops.role(row, "dgrad"), full)  # the output gradient, gathered
            hidden = mode is not TpOverlap.NONE
            wait(ag, ops.role(col, "dgrad"), hidden)  # the input, gathered again
            wait(rs, ops.role(col, "wgrad"), hidden)  # the input gradient, scattered
    else:
        ar = _coll(Collective.ALL_REDUCE, tp, 2 * one, c.tp_link, c)
        for _ in range(len(halves) * passes):  # after each row-parallel linear
            wait(ar, 0.0, False)
        for col, _row in halves:
            wait(ar, ops.role(col, "wgrad"), mode is not TpOverlap.NONE)
    if x.moe and x.etp > 1 and x.arch.moe is not None:
        routed = x.arch.moe.experts_per_token * x.local_tokens * x.arch.hidden_size * x.beta
        sent = (x.etp - 1) * routed
        per_pass = _coll(Collective.ALL_GATHER, x.etp, sent, c.tp_link, c) + _coll(
            Collective.REDUCE_SCATTER, x.etp, sent, c.tp_link, c
        )
        wait(per_pass * (passes + 1), 0.0, False)
    return total, exposed


def _cp_collectives(
    x: LayerShape, core: tuple[float, float], c: Clock, recomputed: bool
) -> tuple[float, float]:
    """(cp seconds, exposed) of one layer and micro-batch, for the flavour the clock carries:
    the K/V exchange over ``cp_ring`` ranks — ``(r − 1)·KV`` forward, twice in backward (K, V
    again and their gradients), once more for a recomputed core; each pass overlapped with the
    core of its pass for a ring, waited for as an all-gather — and the head all-to-alls over
    ``cp_a2a`` ranks, each moving (u − 1)/u of Q + KV + O forward and Q + KV + 2·O backward,
    waited for. The bytes are :func:`model.context_parallel.cp_layer_bytes`'s."""
    if x.cp == 1 or c.cp_link is None:
        return 0.0, 0.0
    q, kv, o = (float(v) for v in cp_tensor_bytes(x.arch, x.tp, x.tokens, x.beta))
    r, u = c.cp_ring, c.cp_a2a
    total = exposed = 0.0
    if r > 1:
        forward = _coll(Collective.ALL_GATHER, r, (r - 1) * kv, c.cp_link, c)
        backward = _coll(Collective.ALL_GATHER, r, 2 * (r - 1) * kv, c.cp_link, c)
        passes = [(forward, core[0]), (backward, core[1])] + (
            [(forward, core[0])] if recomputed else []
        )
        ring = sum(p[0] for p in passes)
        total += ring
        exposed += ring if c.cp_gather else sum(max(0.0, t - cov) for t, cov in passes)
    if u > 1:
        share, kv_a2a = (u - 1) / u, kv * c.cp_kv_repeat
        forward = _coll(Collective.ALL_TO_ALL, u, share * (q + kv_a2a + o), c.cp_link, c)
        backward = _coll(Collective.ALL_TO_ALL, u, share * (q + kv_a2a + 2 * o), c.cp_link, c)
        a2a = forward * (2 if recomputed else 1) + backward
        total += a2a
        exposed += a2a
    return total, exposed


def ep_all_to_all_seconds(x: LayerShape, c: Clock, full_recompute: bool) -> tuple[float, float]:
    """(forward, backward) seconds of one MoE layer's expert all-to-alls for one micro-batch on
    the busiest expert-parallel rank: a dispatch and a combine in forward (again for a
    recomputed forward under full recomputation) and their two transposes in backward, each of
    :func:`model.moe_run.all_to_all_sent` bytes (routing, padding, imbalance, de-duplication)
    over the ep link. What a schedule that hides one micro-batch's all-to-alls under another's
    computation (DualPipe) reads, per MoE layer of a model chunk; (0, 0) without ep."""
    spec = x.arch.moe
    if not x.moe or x.ep == 1 or c.ep_link is None or spec is None:
        return 0.0, 0.0
    sent = all_to_all_sent(
        x.moe_run, x.local_tokens, spec.num_experts, spec.experts_per_token, x.ep,
        c.ep_per_domain, x.arch.hidden_size * x.beta,
    )  # fmt: skip
    one = _coll(Collective.ALL_TO_ALL, x.ep, sent, c.ep_link, c)
    return 2 * one * (2 if full_recompute else 1), 2 * one


def _ep_collectives(
    x: LayerShape, ops: LayerCompute, c: Clock, full_recompute: bool
) -> tuple[float, float]:
    """(EP seconds, exposed) of one MoE layer and micro-batch
    (:func:`ep_all_to_all_seconds`), exposed as the run's overlap mechanism leaves them
    (:func:`model.moe_run.exposed_all_to_all`)."""
    forward, backward = ep_all_to_all_seconds(x, c, full_recompute)
    if not forward:
        return 0.0, 0.0
    split = (
        ops.forward_s - ops.experts_forward_s,
        ops.backward_s - ops.experts_backward_s,
        ops.experts_forward_s,
        ops.experts_backward_s,
    )
    shared = (ops.shared_fc1_s, ops.shared_fc2_s)
    exposed = exposed_all_to_all(
        x.moe_run.ep_overlap, forward, backward, split, shared, c.ep_unpaired
    )
    return forward + backward, exposed


@lru_cache(maxsize=4096)
def layer_time(x: LayerShape, c: Clock, recompute: Recompute) -> LayerTime:
    """Seconds of one micro-batch through one layer on one GPU (cached per shape and clock).

    Examples
    --------
    >>> from trainplan.model.roofline import RooflineParams
    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> c = Clock(312e12, 2.039e12, RooflineParams(gemm_efficiency=0.74))
    >>> t = layer_time(LayerShape(gpt, False, 4, 1, 1), c, Recompute.NONE)
    >>> t.tp_s, t.seconds == t.compute_s
    (0.0, True)
    """
    bare = Clock(c.peak_flops_per_s, c.hbm_bytes_per_s, c.params, linear_speedup=c.linear_speedup)
    ops = layer_compute(x, bare)
    forward, backward = ops.forward_s, ops.backward_s
    full = recompute in (Recompute.FULL, Recompute.SQRT)
    if full:
        recomputed = forward
    elif recompute is Recompute.SELECTIVE:
        recomputed = ops.core_forward_s
    else:
        recomputed = 0.0
    tp_s, tp_exposed = _tp_collectives(x, ops, c, full)
    core = (ops.core_forward_s, ops.core_backward_s)
    cp_s, cp_exposed = _cp_collectives(x, core, c, recompute is not Recompute.NONE)
    ep_s, ep_exposed = _ep_collectives(x, ops, c, full)
    return LayerTime(
        forward, backward, recomputed, tp_s, tp_exposed, cp_s, cp_exposed, ep_s, ep_exposed
    )


@lru_cache(maxsize=4096)
def embedding_time(x: LayerShape, c: Clock) -> LayerTime:
    """The first stage's input embedding: its operations and the vocab-parallel embedding's tp
    collectives (reduce-scatter with sequence parallelism, else all-reduce, in forward; an
    all-gather of the gradient with sequence parallelism), all exposed."""
    ops = embedding_ops(x)
    forward = sum(op_seconds(o, c) for o in ops)
    backward = sum(op_seconds(o, c, backward=True) for o in ops)
    tp = 0.0
    if x.tp > 1 and c.tp_link is not None:
        one = (x.tp - 1) / x.tp * x.beta * x.tokens * x.arch.hidden_size
        if x.sequence_parallel:
            tp = _coll(Collective.REDUCE_SCATTER, x.tp, one, c.tp_link, c)
            tp += _coll(Collective.ALL_GATHER, x.tp, one, c.tp_link, c)
        else:
            tp = _coll(Collective.ALL_REDUCE, x.tp, 2 * one, c.tp_link, c)
    return LayerTime(forward, backward, 0.0, tp, tp)


@lru_cache(maxsize=4096)
def output_time(x: LayerShape, c: Clock, vocab: int) -> LayerTime:
    """The last stage's final norm, output layer and cross-entropy, with the tp collectives of
    :func:`model.comm.tp_bytes` (the final norm's output gathered in forward and again in
    backward, its gradient reduce-scattered — all-reduced without sequence parallelism — the
    backward pair overlapped as for a column-parallel layer; the cross-entropy's three FP32
    all-reduces of one value per token, exposed)."""
    ops = output_ops(x, vocab)
    forward = sum(op_seconds(o, c) for o in ops)
    backward = sum(op_seconds(o, c, backward=True) for o in ops)
    tp = exposed = 0.0
    if x.tp > 1 and c.tp_link is not None:
        one = (x.tp - 1) / x.tp * x.beta * x.tokens * x.arch.hidden_size
        logits = ops[1]
        hidden = c.tp_comm_overlap is not TpOverlap.NONE
        pairs = []
        if x.sequence_parallel:
            ag = _coll(Collective.ALL_GATHER, x.tp, one, c.tp_link, c)
            rs = _coll(Collective.REDUCE_SCATTER, x.tp, one, c.tp_link, c)
            pairs = [(ag, 0.0), (ag, _dgrad(logits, c) if hidden else 0.0)]
            pairs.append((rs, _wgrad(logits, c) if hidden else 0.0))
        else:
            ar = _coll(Collective.ALL_REDUCE, x.tp, 2 * one, c.tp_link, c)
            pairs = [(ar, _wgrad(logits, c) if hidden else 0.0)]
        ce = _coll(Collective.ALL_REDUCE, x.tp, 2 * (x.tp - 1) / x.tp * 4 * x.tokens, c.tp_link, c)
        pairs += [(ce, 0.0)] * 3
        tp = sum(p[0] for p in pairs)
        exposed = sum(max(0.0, t - covered) for t, covered in pairs)
    return LayerTime(forward, backward, 0.0, tp, exposed)


def stage_parts(
    dense: tuple[float, ...],
    moe: tuple[float, ...],
    embedding: tuple[float, ...],
    output: tuple[float, ...],
    n_dense: Any,
    n_moe: Any,
    first: Any,
    last: Any,
) -> list[Any]:
    """Each of the :data:`PARTS` of one micro-batch on a stage of ``n_dense`` dense and ``n_moe``
    MoE layers (``first``: it holds the embedding; ``last``: the output layer), from the
    :attr:`LayerTime.parts` of each kind: ``n_dense·dense + n_moe·moe + [first]·embedding +
    [last]·output``. Floats for one stage; element-wise for arrays of stages (the search's
    tables), in the same order of operations so both give the same float."""
    return [
        n_dense * d + n_moe * m + where(first, e, 0.0) + where(last, o, 0.0)
        for d, m, e, o in zip(dense, moe, embedding, output, strict=True)
    ]
