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
  GEMM does not cover (and the SMs NCCL takes from it, :attr:`model.op_time.Clock.nccl_sm_share`;
  not for ``full`` or ``async-tp``, whose kernels are not NCCL's); the forward collectives and
  the backward all-gather before each row-parallel input gradient wait;
  ``full`` (Transformer Engine's userbuffers, Megatron-Core ``--tp-comm-overlap``) — every
  all-gather is pipelined with the GEMM after it and every reduce-scatter with the GEMM before
  it: each waits for what its GEMM does not cover. Under either the all-gathers move
  :func:`model.fp8_gathers.tp_gather_bytes` an element (FP8 under TE's per-tensor recipes);
  ``async-tp`` (torchtitan's ``compile.enable_async_tensor_parallel``: Inductor's micro-pipeline
  pass fuses each all-gather with the matmuls after it and a matmul with the reduce-scatter
  after it when one matmul produces its input, on PyTorch's SymmetricMemory,
  :mod:`model.async_tp`) — the all-gather's local shard is consumed first while the remote ones
  are copied (``torch/distributed/_symmetric_memory/__init__.py``,
  ``_pipelined_multi_all_gather_and_consume``), so each fused collective waits for what the
  GEMM's other (tp − 1)/tp does not cover, the decomposed GEMM adds tp − 1 kernels and a fused
  reduce-scatter its reduction of the tp partial products; the backward reduce-scatter of an
  input gradient summed over several GEMMs (a SwiGLU MLP's ``w1`` and ``w3``) stays NCCL's and
  waits.
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

from dataclasses import dataclass
from functools import lru_cache

from trainplan.model.async_tp import async_tp_collectives
from trainplan.model.comm_sms import contended_wait
from trainplan.model.context_parallel import cp_tensor_bytes, templated_kv_repeat
from trainplan.model.ep_kernels import transfer_seconds
from trainplan.model.layout import Recompute
from trainplan.model.moe_dispatch import all_to_all_sent, transfer_side_bytes
from trainplan.model.moe_kernels import counts_gather_seconds, dispatch_metadata
from trainplan.model.moe_run import exposed_all_to_all
from trainplan.model.op_time import (
    Clock,
    LayerCompute,
    TpOverlap,
    dgrad_seconds,
    layer_compute,
    op_seconds,
    wgrad_seconds,
)
from trainplan.model.ops import (
    CROSS_ENTROPY_EXCHANGES,
    LayerShape,
    embedding_ops,
    output_ops,
)
from trainplan.model.recompute_modules import DEFAULT_RECOMPUTE_MODULES
from trainplan.model.recompute_ops import (
    RepeatedTp,
    recomputed_ops,
    recomputes_core,
    repeated_tp,
    repeats_all_to_all,
)
from trainplan.model.roofline import Collective, LinkTime, collective_seconds
from trainplan.model.templated_time import templated_collectives, templated_merge_seconds
from trainplan.model.torchtitan_experts import torchtitan_dispatch_seconds
from trainplan.model.tp_sm_charge import output_tp_sm_share, tp_sm_share

__all__ = [
    "LayerTime",
    "PARTS",
    "layer_time",
    "ep_all_to_all_seconds",
    "embedding_time",
    "output_time",
]


PARTS = ("compute", "tp_exposed", "cp_exposed", "ep_exposed", "tp", "cp", "ep", "forward")
"""The parts of a :class:`LayerTime`, in the order :func:`model.step_time.stage_parts` combines
them (``forward``: :attr:`LayerTime.forward_only_s`)."""


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Seconds of one micro-batch through a layer (or the embedding / output layer) on one GPU."""

    forward_s: float
    """The forward pass's operations."""
    backward_s: float
    """The backward pass's operations (input and weight gradients)."""
    recompute_s: float
    """Operations recomputed in backward (under selective recomputation those of
    :func:`model.recompute_ops.recomputed_ops`, the whole forward under full or √n)."""
    tp_s: float = 0.0
    """Tensor-parallel collectives if nothing overlapped them."""
    tp_exposed_s: float = 0.0
    """Of those, what the GEMMs do not cover (the mechanism's overlap)."""
    cp_s: float = 0.0
    cp_exposed_s: float = 0.0
    ep_s: float = 0.0
    ep_exposed_s: float = 0.0
    forward_exposed_s: float = 0.0
    """Of the collectives, what the forward's own (tp, cp, ep; not a recomputed forward's, not
    the backward's) leave waiting, by the same overlap rules: what a forward-only pass waits."""

    @property
    def forward_only_s(self) -> float:
        """A forward-only pass (no backward, no recomputation: a ``torch.no_grad`` scoring
        forward): the forward's operations and its own exposed collectives."""
        return self.forward_s + self.forward_exposed_s

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
            self.forward_only_s,
        )

    @property
    def seconds(self) -> float:
        """Operations plus the exposed collectives."""
        return self.compute_s + self.tp_exposed_s + self.cp_exposed_s + self.ep_exposed_s


def _coll(kind: Collective, n: int, sent: float, link: LinkTime | None, c: Clock) -> float:
    return 0.0 if link is None else collective_seconds(kind, n, sent, link, c.params)


def _tp_collectives(
    x: LayerShape, ops: LayerCompute, c: Clock, again: RepeatedTp
) -> tuple[float, float, float]:
    """(all tp collective seconds, exposed seconds, of those the forward's own) of one layer and
    micro-batch; ``again``: the forward collectives a recomputed forward runs once more
    (:func:`model.recompute_ops.repeated_tp`)."""
    tp = x.tp
    if tp == 1 or c.tp_link is None:
        return 0.0, 0.0, 0.0
    one = (tp - 1) / tp * x.beta * x.tokens * x.arch.hidden_size
    mode = c.tp_comm_overlap
    total = exposed = own = 0.0

    def wait(
        seconds: float,
        role: str = "",
        which: str = "",
        overlapped: bool = False,
        first: bool = False,
    ) -> None:
        nonlocal total, exposed, own
        total += seconds
        if overlapped:  # beside its GEMM, which loses φ of its SMs meanwhile
            phi = tp_sm_share(c, role, which)
            seconds = max(0.0, contended_wait(seconds, ops.role(role, which), phi))
        exposed += seconds
        own += seconds if first else 0.0

    halves = _halves(x)
    if x.sequence_parallel and mode is TpOverlap.ASYNC_TP:  # :mod:`model.async_tp`
        total, exposed, own = async_tp_collectives(x, ops, c, again, halves)
    elif x.sequence_parallel:
        gathered = one if c.tp_gather_bytes is None else one * c.tp_gather_bytes / x.beta
        ag = _coll(Collective.ALL_GATHER, tp, gathered, c.tp_link, c)  # FP8 under TE's recipes
        rs = _coll(Collective.REDUCE_SCATTER, tp, one, c.tp_link, c)
        full = mode is TpOverlap.FULL
        for k in range(2):  # forward (and the recomputed forward's collectives)
            for (col, row), repeated in zip(halves, again.halves, strict=False):
                if k == 0 or repeated[0]:
                    wait(ag, col, "forward", full, k == 0)
                if k == 0 or repeated[1]:
                    wait(rs, row, "forward", full, k == 0)
        for col, row in halves:
            wait(ag, row, "dgrad", full)  # the output gradient, gathered
            hidden = mode is not TpOverlap.NONE
            if c.tp_regather:  # the input, gathered again (torchtitan keeps it gathered)
                wait(ag, col, "dgrad", hidden)
            wait(rs, col, "wgrad", hidden)  # the input gradient, scattered
    else:
        ar = _coll(Collective.ALL_REDUCE, tp, 2 * one, c.tp_link, c)
        n_again = sum(any(r) for r in again.halves[: len(halves)])
        for k in range(len(halves) + n_again):  # after each row-parallel linear
            wait(ar, first=k < len(halves))
        for col, _row in halves:
            wait(ar, col, "wgrad", mode is not TpOverlap.NONE)
    wait(_etp_seconds(x, c), first=True)  # the forward's; the backward's and a recomputed one's
    wait(_etp_seconds(x, c) * (1 + again.etp))
    return total, exposed, own


def _halves(x: LayerShape) -> tuple[tuple[str, str], ...]:
    """The (column-, row-parallel) GEMM roles around each pair of tp collectives: attention
    and MLP; a MoE layer without shared experts has no MLP-half collectives (the routed
    experts' tokens move over the expert-TP group only: Megatron-Core
    ``MoEAlltoAllTokenDispatcher``; shared experts run over tp)."""
    halves = (("attn_in", "attn_out"), ("mlp_in", "mlp_out"))
    moe = x.arch.moe
    return halves[:1] if x.moe and moe is not None and not moe.num_shared_experts else halves


def _etp_seconds(x: LayerShape, c: Clock) -> float:
    """Seconds of one pass of a MoE layer's expert-tensor-parallel token collectives: the
    routed tokens all-gathered over etp before the experts and reduce-scattered after, waited
    for; 0 for a dense layer or etp 1."""
    if not (x.moe and x.etp > 1 and x.arch.moe is not None):
        return 0.0
    routed = x.arch.moe.experts_per_token * x.local_tokens * x.arch.hidden_size * x.beta
    sent = (x.etp - 1) * routed
    return _coll(Collective.ALL_GATHER, x.etp, sent, c.tp_link, c) + _coll(
        Collective.REDUCE_SCATTER, x.etp, sent, c.tp_link, c
    )


def _cp_collectives(
    x: LayerShape, core: tuple[float, float], c: Clock, recomputed: bool
) -> tuple[float, float, float]:
    """(cp seconds, exposed, of those the forward's own) of one layer and micro-batch, for the
    flavour the clock carries:
    the K/V exchange over ``cp_ring`` ranks — ``(r − 1)·KV`` forward, twice in backward (K, V
    again and their gradients), once more for a recomputed core; each pass overlapped with the
    core of its pass for a ring, waited for as an all-gather — and the head all-to-alls over
    ``cp_a2a`` ranks, each moving (u − 1)/u of Q + KV + O forward and Q + KV + 2·O backward,
    waited for. The bytes are :func:`model.context_parallel.cp_layer_bytes`'s. Latency by
    placement (:attr:`model.roofline.LinkTime.per_domain` and ``domains`` of the cp link): the
    exchange's ring steps between members of one domain on NVLink — each step of ring attention
    waits for the K/V chunk its neighbour received the step before, so a chunk's path is the
    ring all-gather's, NCCL's ring rule. The hybrid's ring and inner all-to-all each ride their
    own groups' links (:attr:`model.op_time.Clock.cp_link`, :attr:`~model.op_time.Clock.
    cp_a2a_link`: :func:`model.terms.cp_links.cp_clock_links`), the all-to-all one NVLink hop
    at the domain's bandwidth where its u ranks share a domain."""
    if x.cp == 1 or c.cp_link is None:
        return 0.0, 0.0, 0.0
    q, kv, o = (float(v) for v in cp_tensor_bytes(x.arch, x.tp, x.tokens, x.beta))
    r, u = c.cp_ring, c.cp_a2a
    if c.cp_templated and r > 1:
        return templated_collectives(kv * templated_kv_repeat(x.arch), r, core, c, recomputed)
    total = exposed = own = 0.0
    if r > 1:
        forward = _coll(Collective.ALL_GATHER, r, (r - 1) * kv, c.cp_link, c)
        backward = _coll(Collective.ALL_GATHER, r, 2 * (r - 1) * kv, c.cp_link, c)
        passes = [(forward, core[0]), (backward, core[1])] + (
            [(forward, core[0])] if recomputed else []
        )
        ring = sum(p[0] for p in passes)
        total += ring
        hidden = c.cp_ring_hidden and not c.cp_gather  # launch_order_kept: sends first
        exposed += sum(max(0.0, t - cov) for t, cov in passes) if hidden else ring
        own += max(0.0, forward - core[0]) if hidden else forward
    if u > 1:
        share, kv_a2a = (u - 1) / u, kv * c.cp_kv_repeat
        a2a_link = c.cp_link if c.cp_a2a_link is None else c.cp_a2a_link
        forward = _coll(Collective.ALL_TO_ALL, u, share * (q + kv_a2a + o), a2a_link, c)
        backward = _coll(Collective.ALL_TO_ALL, u, share * (q + kv_a2a + 2 * o), a2a_link, c)
        a2a = forward * (2 if recomputed else 1) + backward
        total += a2a
        exposed += a2a
        own += forward
    return total, exposed, own


def ep_all_to_all_seconds(x: LayerShape, c: Clock, full_recompute: bool) -> tuple[float, float]:
    """(forward, backward) seconds of one MoE layer's expert all-to-alls for one micro-batch on
    the busiest expert-parallel rank: a dispatch and a combine in forward (again in a recomputed
    forward under full recomputation) and their transposes in backward
    (:func:`model.ep_kernels.transfer_seconds`), each :func:`model.moe_dispatch.all_to_all_sent`
    of its rows' hidden and side bytes (:func:`model.moe_dispatch.transfer_side_bytes`) over the
    ep link (:attr:`Clock.ep_kernel`); with them the dispatcher's own small collectives
    (:func:`model.moe_kernels.dispatch_metadata`: Megatron-Core's all-to-all of the
    probability, one value per routed row, each way, at the tokens' rule; the forward's
    all-gather of the token counts per expert over the etp × ep ranks at NCCL's latency,
    :func:`model.moe_kernels.counts_gather_seconds`; torchtitan's counts and host wait,
    :func:`model.torchtitan_experts.torchtitan_dispatch_seconds`). What DualPipe reads, per MoE
    layer of a model chunk; (0, 0) without ep."""
    spec = x.arch.moe
    if not x.moe or x.ep == 1 or c.ep_link is None or spec is None:
        return 0.0, 0.0

    def sent(row_bytes: float) -> float:
        return all_to_all_sent(x.moe_run, x.local_tokens, spec.num_experts,
                               spec.experts_per_token, x.ep, c.ep_per_domain, row_bytes,
                               x.expert_passes.deepspeed)  # fmt: skip

    row = x.arch.hidden_size * x.beta
    side = transfer_side_bytes(x.moe_run, row, spec.num_experts, spec.experts_per_token, x.ep,
                               x.etp, c.ep_per_domain)  # fmt: skip
    t = transfer_seconds([sent(row + e) for e in side], x.ep, c.ep_kernel,
                         lambda b: _coll(Collective.ALL_TO_ALL, x.ep, b, c.ep_link, c))  # fmt: skip
    meta = dispatch_metadata(x.expert_passes, x.moe_run.dispatcher)
    probs = _coll(Collective.ALL_TO_ALL, x.ep, sent(x.beta), c.ep_link, c)
    counts = counts_gather_seconds(
        x.etp * x.ep, c.ep_link.scaleup, x.etp * c.ep_link.per_domain, c.ep_link.domains
    )
    forward = t[0] + t[1] + meta.probs_all_to_alls[0] * probs + meta.counts_all_gathers * counts
    forward += torchtitan_dispatch_seconds(meta, spec.num_experts, x.ep, c.ep_link, c.params)
    return forward * (2 if full_recompute else 1), t[2] + t[3] + meta.probs_all_to_alls[1] * probs


def _ep_collectives(
    x: LayerShape, ops: LayerCompute, c: Clock, full_recompute: bool
) -> tuple[float, float, float]:
    """(EP seconds, exposed, the forward's own exposed) of one MoE layer and micro-batch
    (:func:`ep_all_to_all_seconds`), exposed as the run's overlap mechanism leaves them
    (:func:`model.moe_run.exposed_all_to_all`; a forward alone has no backward to pair with:
    every micro-batch unpaired)."""
    forward, backward = ep_all_to_all_seconds(x, c, full_recompute)
    if not forward:
        return 0.0, 0.0, 0.0
    split = (
        ops.forward_s - ops.experts_forward_s,
        ops.backward_s - ops.experts_backward_s,
        ops.experts_forward_s,
        ops.experts_backward_s,
    )
    shared = (ops.shared_fc1_s, ops.shared_fc2_s)
    exposed = exposed_all_to_all(
        x.moe_run.ep_overlap, forward, backward, split, shared, c.ep_unpaired, c.ep_sm_share
    )
    once = ep_all_to_all_seconds(x, c, False)[0]
    alone = exposed_all_to_all(x.moe_run.ep_overlap, once, 0.0, split, shared, 1.0, c.ep_sm_share)
    return forward + backward, exposed, alone


@lru_cache(maxsize=4096)
def layer_time(
    x: LayerShape,
    c: Clock,
    recompute: Recompute,
    plan: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES,
    every_norm: bool = False,
) -> LayerTime:
    """Seconds of one micro-batch through one layer on one GPU (cached per shape and clock).

    Under selective recomputation the recomputed forward is the forward of the operations
    ``plan`` re-runs (:func:`model.recompute_ops.recomputed_ops`: Megatron-Core's recompute
    modules, or torchtitan's op-level policy; ``every_norm``: the ``textbook`` profile's
    ``layernorm``), PyTorch's ring-attention merges with a recomputed core, the context-parallel
    exchange again with it, and the expert all-to-alls again with the ``moe`` module.

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
    bare = Clock(
        c.peak_flops_per_s, c.hbm_bytes_per_s, c.params, cp_ring=c.cp_ring, cp_a2a=c.cp_a2a,
        cp_gather=c.cp_gather, linear_speedup=c.linear_speedup, grouped_fp8=c.grouped_fp8,
        torchao_fp8=c.torchao_fp8, bf16_experts=c.bf16_experts, expert_loop=c.expert_loop,
        grouped_mm=c.grouped_mm, userbuffers=c.userbuffers,
    )  # fmt: skip
    ops = layer_compute(x, bare)
    merge_f, merge_b = templated_merge_seconds(x, c)
    forward, backward = ops.forward_s + merge_f, ops.backward_s + merge_b
    full = recompute in (Recompute.FULL, Recompute.SQRT)
    selective = plan if recompute is Recompute.SELECTIVE else ()
    core_again = full or recomputes_core(x, selective)
    if full:
        recomputed = forward
    else:
        again = recomputed_ops(x, selective, every_norm)
        recomputed = sum(op_seconds(o, bare) for o in again) + (merge_f if core_again else 0.0)
    tp_s, tp_exposed, tp_own = _tp_collectives(x, ops, c, repeated_tp(x, selective, full))
    core = (ops.core_forward_s, ops.core_backward_s)
    cp_s, cp_exposed, cp_own = _cp_collectives(x, core, c, core_again)
    ep_s, ep_exposed, ep_own = _ep_collectives(x, ops, c, full or repeats_all_to_all(x, selective))
    return LayerTime(forward, backward, recomputed, tp_s, tp_exposed, cp_s, cp_exposed, ep_s,
                     ep_exposed, tp_own + cp_own + ep_own)  # fmt: skip


@lru_cache(maxsize=4096)
def embedding_time(x: LayerShape, c: Clock) -> LayerTime:
    """The first stage's input embedding: its operations and the vocab-parallel embedding's tp
    collectives (reduce-scatter with sequence parallelism, else all-reduce, in forward; an
    all-gather of the gradient with sequence parallelism), all exposed."""
    ops = embedding_ops(x)
    forward = sum(op_seconds(o, c) for o in ops)
    backward = sum(op_seconds(o, c, backward=True) for o in ops)
    tp = own = 0.0
    if x.tp > 1 and c.tp_link is not None:
        one = (x.tp - 1) / x.tp * x.beta * x.tokens * x.arch.hidden_size
        if x.sequence_parallel:
            own = _coll(Collective.REDUCE_SCATTER, x.tp, one, c.tp_link, c)
            tp = own + _coll(Collective.ALL_GATHER, x.tp, one, c.tp_link, c)
        else:
            tp = own = _coll(Collective.ALL_REDUCE, x.tp, 2 * one, c.tp_link, c)
    return LayerTime(forward, backward, 0.0, tp, tp, forward_exposed_s=own)


@lru_cache(maxsize=4096)
def output_time(x: LayerShape, c: Clock, vocab: int, loss: str = "none") -> LayerTime:
    """The last stage's final norm, output layer and cross-entropy (``loss``, the
    ``cross_entropy_fusion_impl`` run: :func:`model.ops.output_ops`), with the tp collectives of
    :func:`model.comm_layers.tp_bytes` (the final norm's output gathered in forward and again in
    backward, its gradient reduce-scattered — all-reduced without sequence parallelism — the
    backward pair overlapped as for a column-parallel layer; the cross-entropy's FP32
    exchanges of a few values per token, :data:`model.ops.CROSS_ENTROPY_EXCHANGES`, exposed). A
    value head (:mod:`model.value_head`: verl's ``LinearForLastLayer``, a ``torch.nn.Linear``
    whole on each rank, over its own tokens) runs none."""
    ops = output_ops(x, vocab, loss)
    forward = sum(op_seconds(o, c) for o in ops)
    backward = sum(op_seconds(o, c, backward=True) for o in ops)
    tp = exposed = own = 0.0
    if x.tp > 1 and c.tp_link is not None and not x.arch.value_head:
        one = (x.tp - 1) / x.tp * x.beta * x.tokens * x.arch.hidden_size
        logits = ops[1]
        hidden = c.tp_comm_overlap is not TpOverlap.NONE
        pairs, forward_pairs = [], []  # the forward's: the norm's gather, the loss's exchanges
        if x.sequence_parallel:
            ag = _coll(Collective.ALL_GATHER, x.tp, one, c.tp_link, c)
            rs = _coll(Collective.REDUCE_SCATTER, x.tp, one, c.tp_link, c)
            pairs = [(ag, 0.0), (ag, dgrad_seconds(logits, c) if hidden else 0.0)]
            pairs.append((rs, wgrad_seconds(logits, c) if hidden else 0.0))
            forward_pairs.append((ag, 0.0))
        else:
            ar = _coll(Collective.ALL_REDUCE, x.tp, 2 * one, c.tp_link, c)
            pairs = [(ar, wgrad_seconds(logits, c) if hidden else 0.0)]
        for kind, per_token in CROSS_ENTROPY_EXCHANGES[str(loss)]:
            if kind == "all_reduce":
                sent = 2 * (x.tp - 1) / x.tp * per_token * x.tokens
                exchange = (_coll(Collective.ALL_REDUCE, x.tp, sent, c.tp_link, c), 0.0)
            else:  # each rank's rows gathered: (tp − 1)/tp of the gathered tensor sent
                sent = (x.tp - 1) * per_token * x.tokens
                exchange = (_coll(Collective.ALL_GATHER, x.tp, sent, c.tp_link, c), 0.0)
            pairs.append(exchange)
            forward_pairs.append(exchange)
        tp = sum(p[0] for p in pairs)
        share = output_tp_sm_share(c)  # NCCL's under async and full: no userbuffers there
        exposed = sum(max(0.0, contended_wait(t, covered, share)) for t, covered in pairs)
        own = sum(max(0.0, contended_wait(t, covered, share)) for t, covered in forward_pairs)
    return LayerTime(forward, backward, 0.0, tp, exposed, forward_exposed_s=own)
