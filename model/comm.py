"""Bytes each parallel axis sends per GPU per step (ring algorithms;
docs/concepts/conventions.md "Communication").

For a ring collective over n ranks of a buffer of S bytes each GPU sends ``(n−1)/n·S`` for an
all-gather or reduce-scatter and ``2·(n−1)/n·S`` for an all-reduce (Thakur, Rabenseifner & Gropp
2005; NCCL-tests PERFORMANCE.md "bus bandwidth"). ``S_tok = (s/cp)·b`` tokens per micro-batch on a
rank; β = 2 bytes per activation element; m micro-batches per step; "passes" = forward + backward
(+ the recomputed forward under full or √n recomputation).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainplan.model.context_parallel import cp_collective, cp_degrees, cp_layer_bytes, kv_repeat
from trainplan.model.frameworks import Mechanism, mechanism
from trainplan.model.layout import Layout, Recompute
from trainplan.model.moe import all_to_all_bytes
from trainplan.model.moe_run import DROPLESS, MoERun, mean_rows_sent
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.xp import exact, floor, maximum, where

__all__ = [
    "AxisTraffic",
    "dp_traffic",
    "tp_traffic",
    "pp_traffic",
    "cp_traffic",
    "ep_traffic",
    "dp_bytes",
    "dp_name",
    "MEGATRON_BUCKET_PARAMS",
    "MEGATRON_BUCKET_PARAMS_PER_RANK",
    "DEEPSPEED_REDUCE_BUCKET",
    "dp_collective_calls",
    "tp_bytes",
    "pp_bytes",
    "pp_message_bytes",
    "cp_bytes",
    "ep_bytes",
]


@dataclass(frozen=True, slots=True)
class AxisTraffic:
    """What one axis sends per GPU per step."""

    axis: str
    """dp, tp, pp, cp or ep."""
    collective: str
    """The collective(s), named."""
    group_size: int
    """Ranks in one group of this axis."""
    bytes_per_step: Fraction
    """Bytes sent by one GPU per optimizer step."""
    microbatch_bytes: Fraction = Fraction(0)
    """Of ``bytes_per_step``, what recurs once per micro-batch, for one micro-batch (per-micro-
    batch gradient reduce-scatters and ZeRO-3 gathers; 0 when everything is sent once per step).
    Exposed time treats it apart (:func:`model.estimate.time_terms`)."""
    hidden_bytes: Fraction = Fraction(0)
    """Of ``bytes_per_step``, what the framework runs under a matmul by construction, so it is
    never exposed (Megatron-Core's backward re-gather of a sequence-parallel input, launched
    asynchronously under the input-gradient GEMM)."""


def _ring(n: Any) -> Any:
    """(n − 1)/n: the share of a buffer each rank sends in a ring all-gather or reduce-scatter
    (exact for an int n; element-wise for arrays)."""
    return exact(n - 1) / n


def dp_traffic(
    dense_params: Fraction,
    expert_params: Fraction,
    layout: Layout,
    training: TrainingSpec,
    zero_stage: int | None = None,
    regather_per_microbatch: bool = False,
) -> AxisTraffic:
    """Data-parallel traffic over D = dp·cp ranks (experts over D_e), as the layout's framework
    runs the ZeRO stage (:meth:`model.frameworks.Mechanism.traffic_terms`): per parameter
    ``(D−1)/D × (bytes once per step + m × bytes per micro-batch)``.

    ``textbook``: ZeRO-0/1/2 ``2·(D−1)/D · 2·P`` (an all-reduce, or a reduce-scatter plus the
    all-gather of the updated weights); ZeRO-3 adds one all-gather: ``3·(D−1)/D · 2·P`` (1.5×;
    Rajbhandari et al. 2019 §7); ``regather_per_microbatch`` gathers before every micro-batch's
    forward and backward instead: ``(D−1)/D·2·P·(1 + 2m)``. Physical profiles send what their
    mechanism sends: e.g. Megatron's distributed optimizer a reduce-scatter of FP32 gradients and
    an all-gather of bf16 weights once per step, FSDP2 ZeRO-3 two bf16 gathers and one FP32
    reduce-scatter per micro-batch. P = parameters on this GPU (after tp/pp/ep split).

    Examples
    --------
    >>> from trainplan.model.specs import TrainingSpec
    >>> t = TrainingSpec(seq_len=1, global_batch_size=64)
    >>> lay = Layout(dp=64, zero_stage=3, framework="textbook")
    >>> dp_traffic(Fraction(70 * 10**9), Fraction(0), lay, t).bytes_per_step
    Fraction(413437500000, 1)

    FSDP2 ZeRO-3, m = 1: (2 + 2 + 4)·(63/64)·P, all of it per micro-batch.

    >>> f = dp_traffic(Fraction(70 * 10**9), Fraction(0), lay.with_(framework="fsdp2"), t)
    >>> f.bytes_per_step == f.microbatch_bytes == 8 * Fraction(63, 64) * 70 * 10**9
    True
    """
    stage = layout.zero_stage if zero_stage is None else zero_stage
    mech = mechanism(
        layout.framework,
        stage,
        training.weight_bytes,
        training.gradient_bytes,
        training.optimizer_bytes,
        regather_per_microbatch,
        pipelined=layout.pp > 1,
    )
    m = layout.num_microbatches(training.global_batch_size)
    total, per_mb = dp_bytes(
        mech, dense_params, expert_params, layout.shard_degree, layout.expert_shard_degree, m
    )
    return AxisTraffic("dp", dp_name(mech), layout.shard_degree, total, per_mb)


def dp_bytes(
    mech: Mechanism, dense: Any, experts: Any, shard: Any, expert_shard: Any, m: Any
) -> tuple[Any, Any]:
    """(bytes per step, bytes per micro-batch) one GPU sends for data parallelism: each
    parameter's ring share ``(D − 1)/D`` (dense over D = ``shard``, experts over ``expert_shard``)
    times the mechanism's bytes per parameter once per step plus m times its bytes per
    micro-batch (:meth:`Mechanism.traffic_terms`). Element-wise for arrays of layouts."""
    per_step, per_mb = mech.traffic_terms()
    ring = _ring(shard) * dense + _ring(expert_shard) * experts
    return ring * (per_step + m * per_mb), ring * per_mb


MEGATRON_BUCKET_PARAMS = 40_000_000
"""Megatron-Core DDP's smallest default bucket (parameters): ``bucket_size = max(40000000,
1000000 * dp_group.size())`` when none is given, and one bucket of everything without
``overlap_grad_reduce`` (``megatron/core/distributed/distributed_data_parallel.py``,
``DistributedDataParallel.__init__``)."""

MEGATRON_BUCKET_PARAMS_PER_RANK = 1_000_000
"""… and its growth per data-parallel rank (same place: larger groups get larger buckets so
that each rank's ring chunk stays bandwidth-bound)."""

DEEPSPEED_REDUCE_BUCKET = 500_000_000
"""DeepSpeed ZeRO's ``reduce_bucket_size`` default, elements reduced at a time
(``deepspeed/runtime/zero/config.py``, ``DeepSpeedZeroConfig.reduce_bucket_size =
Field(pp_int(5e8))``); its ``allgather_bucket_size`` default is the same 5e8."""


def dp_collective_calls(framework: str, params: Any, layers: Any, dp: Any, overlapped: bool) -> Any:
    """Calls each data-parallel collective is split into per step (or per micro-batch), the
    framework's gradient buckets over the ``params`` one GPU holds: Megatron-Core
    ``⌈P / max(4·10⁷, 10⁶·dp)⌉`` with ``overlap_grad_reduce`` (``overlapped``), one call
    without; DeepSpeed ``⌈P / 5·10⁸⌉`` (:data:`DEEPSPEED_REDUCE_BUCKET`); FSDP2 one per
    module — a transformer block, ``layers`` (torchtitan's ``fully_shard`` per block); the
    textbook likewise one per layer. At least 1; element-wise for arrays.

    Examples
    --------
    A 70B model's busiest stage, 8.75e9 parameters per GPU, dp 64 under Megatron-Core: buckets
    of max(4e7, 6.4e7) = 6.4e7 parameters, 137 calls; DeepSpeed 18; FSDP2 its 10 blocks.

    >>> [int(dp_collective_calls(f, 8.75e9, 10, 64, True)) for f in ("megatron", "deepspeed", "fsdp2")]
    [137, 18, 10]
    >>> dp_collective_calls("megatron", 8.75e9, 10, 64, False)
    1
    """
    if framework == "megatron":
        if not overlapped:
            return maximum(1, 0 * layers + 1)
        bucket = maximum(MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_RANK * dp)
        return maximum(1, -floor(-params / bucket))
    if framework == "deepspeed":
        return maximum(1, -floor(-params / DEEPSPEED_REDUCE_BUCKET))
    return maximum(1, layers)


def dp_name(mech: Mechanism) -> str:
    """The collectives of a mechanism, named with their dtype and how often they run."""
    dtype = {2: "bf16", 4: "fp32"}.get(mech.reduce_bytes, f"{mech.reduce_bytes}-byte")
    reduce = f"{'all-reduce' if mech.all_reduce else 'reduce-scatter'} ({dtype})"
    reduce += " per micro-batch" if mech.reduce_per_microbatch else ""
    parts = [reduce]
    if mech.gathers_per_step:
        times = "" if mech.gathers_per_step == 1 else f"{mech.gathers_per_step} × "
        parts.append(f"{times}all-gather per step")
    if mech.gathers_per_microbatch:
        what = "fwd, bwd" if mech.gathers_per_microbatch == 2 else "fwd"
        parts.append(f"all-gather per micro-batch ({what})")
    return " + ".join(parts)


def _passes(recompute: Recompute, attention_core: bool = False) -> int:
    extra = recompute in (Recompute.FULL, Recompute.SQRT) or (
        attention_core and recompute is Recompute.SELECTIVE
    )
    return 2 + int(extra)


def tp_traffic(
    arch: Architecture,
    num_layers: int,
    layout: Layout,
    training: TrainingSpec,
    first: bool = False,
    last: bool = False,
    num_moe_layers: int = 0,
) -> AxisTraffic:
    """Tensor-parallel traffic of one pipeline stage holding ``num_layers`` layers
    (``num_moe_layers`` of them MoE; ``first`` / ``last``: it holds the embedding / the output
    layer). ``one`` = ``(t−1)/t·β·S_tok·h``, one all-gather or reduce-scatter of a layer's input.

    ``textbook`` (conventions "Communication"; Korthikanti et al. 2022 §4.2.2): per layer, per micro-batch, per pass
    (forward, backward, recomputed forward) 2 all-gathers + 2 reduce-scatters with sequence
    parallelism, or 2 all-reduces without — ``4·one`` either way.

    Physical profiles (Megatron-Core's mechanism): with sequence parallelism the backward all-
    gathers each column-parallel layer's input again for its weight gradient (the forward kept
    only the local shard: ``LinearWithGradAccumulationAndAsyncCommunication``), so backward
    sends ``6·one`` — the re-gather launched asynchronously under the input-gradient GEMM, so it
    is counted as traffic but never exposed (:attr:`AxisTraffic.hidden_bytes`); the first stage
    reduce-scatters (SP) or all-reduces the vocab-parallel embedding's output (``2·one`` over
    forward and backward); the last stage gathers the final norm's output for the vocab-parallel
    output layer and again in backward, and reduce-scatters its gradient (``3·one``; without SP
    an all-reduce of the input gradient, ``2·one``), and the vocab-parallel cross-entropy all-
    reduces three fp32 values per token (max logit, Σ exp, target logit;
    ``vocab_parallel_cross_entropy``); a MoE layer runs the attention half's collectives and
    the MLP half's only for its shared experts (``SharedExpertMLP`` over the tp group): the
    routed experts' dispatcher uses the expert-TP group alone — with expert tensor parallelism
    (etp > 1) it all-gathers the routed tokens over etp before the experts and reduce-scatters
    after (Megatron-Core ``MoEAlltoAllTokenDispatcher``), forward, backward and recomputed
    forward; with etp 1 a MoE layer without shared experts sends nothing over tp in its MLP.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, TrainingSpec
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1)
    >>> tb = Layout(tp=2, framework="textbook")
    >>> tp_traffic(arch, 1, tb, t).bytes_per_step == 2 * 4 * Fraction(1, 2) * 2 * 4 * 8
    True
    >>> tp_traffic(arch, 1, tb.with_(framework="megatron"), t).bytes_per_step == 10 * 32
    True
    """
    expert_tp = layout.expert_tp if num_moe_layers and arch.moe is not None else 1
    if layout.tp == 1 and expert_tp == 1:
        return AxisTraffic("tp", "none", 1, Fraction(0))
    m = layout.num_microbatches(training.global_batch_size)
    recompute = layout.recompute in (Recompute.FULL, Recompute.SQRT)
    total, hidden = tp_bytes(
        arch, num_layers, num_moe_layers, first, last, layout.tp, expert_tp, layout.cp,
        layout.micro_batch_size, m, training.seq_len, training.activation_bytes, layout.sp,
        layout.framework.physical, recompute,
    )  # fmt: skip
    name = "all-gather + reduce-scatter" if layout.sp else "all-reduce"
    if layout.framework.physical and expert_tp > 1:
        name += " (+ etp token all-gather/reduce-scatter)"
    return AxisTraffic("tp", name, layout.tp, total, Fraction(0), hidden)


def _shared_experts(arch: Architecture) -> bool:
    """Whether the model's MoE layers have shared experts, a dense MLP over the tp group
    (Megatron-Core ``moe/shared_experts.py`` ``SharedExpertMLP``: ``tp_group=pg_collection.tp``,
    sequence-parallel all-gather before ``linear_fc1`` and reduce-scatter after ``linear_fc2``)."""
    return arch.moe is not None and arch.moe.num_shared_experts > 0


def tp_bytes(
    arch: Architecture,
    num_layers: Any,
    num_moe_layers: Any,
    first: Any,
    last: Any,
    tp: Any,
    expert_tp: Any,
    cp: Any,
    b: Any,
    m: Any,
    seq_len: Any,
    beta: int,
    sp: Any,
    physical: Any,
    recompute: bool,
    keeps_gathered: bool = False,
) -> tuple[Any, Any]:
    """(bytes per step, of them hidden under a GEMM) of :func:`tp_traffic`, from plain numbers:
    exact for ints, element-wise for arrays of layouts. ``recompute``: full or √n (a recomputed
    forward sends its collectives again). ``keeps_gathered``: the blocks' all-gathered inputs
    are kept for backward (:func:`model.memory.keeps_gathered_inputs`: torchtitan's plan, whose
    ``PrepareModuleInput`` redistributes the input to ``Replicate`` as an autograd op the
    column-parallel linears save), so sequence parallelism sends no second all-gather in backward
    (Megatron-Core gathers the input again for the weight gradient)."""
    tokens = exact(seq_len) / cp * b
    one = _ring(tp) * beta * tokens * arch.hidden_size
    regather = where(physical & sp, 0 if keeps_gathered else 2, 0)
    # attention and MLP halves; a MoE layer's MLP half runs tp collectives only for its shared
    # experts (physical profiles: the dispatcher uses the expert-TP group, counted below)
    moe_mlp = 0 if _shared_experts(arch) else num_moe_layers
    halves = 2 * num_layers - where(physical, moe_mlp, 0)
    per_mb = (8 + regather + (4 if recompute else 0)) * one * halves / 2
    hidden = regather * one * halves / 2 * m
    boundary = where(first, 2 * one, 0) + where(
        last, where(sp, 3, 2) * one + 3 * 2 * _ring(tp) * 4 * tokens, 0
    )  # the embedding's and the output layer's collectives; cross-entropy's fp32 all-reduces
    per_mb = per_mb + where(physical, boundary, 0)
    if arch.moe is not None:
        local = tokens / where(sp, tp, 1)
        routed = arch.moe.experts_per_token * local * arch.hidden_size * beta
        etp = 2 * (expert_tp - 1) * routed * (3 if recompute else 2) * num_moe_layers
        per_mb = per_mb + where(physical, etp, 0)
    return per_mb * m, hidden


def pp_traffic(
    hidden_size: int,
    layout: Layout,
    training: TrainingSpec,
    tied_embedding_params: Fraction = Fraction(0),
    reduce_bytes: int = 4,
) -> AxisTraffic:
    """Pipeline traffic of a middle stage: per micro-batch (and per model chunk with
    interleaving) one activation forward and one gradient backward. ``textbook``: each of
    ``β·S_tok·h/tp`` bytes (scatter/gather over tp; Narayanan et al. 2021 §4.1). Physical
    profiles: ``β·S_tok·h/tp`` with sequence parallelism (the tensor is already split), the full
    ``β·S_tok·h`` without it (Megatron-Core sends the whole tensor) unless
    :attr:`Layout.pipeline_scatter_gather` (Megatron-LM 2021); plus, with tied embeddings
    over pp > 1, the once-per-step all-reduce of the embedding's gradient between the first and
    the last stage (``tied_embedding_params`` per GPU, ``reduce_bytes`` per element:
    Megatron-Core's ``_allreduce_word_embedding_grads``).

    Examples
    --------
    >>> from trainplan.model.specs import TrainingSpec
    >>> t = TrainingSpec(seq_len=4, global_batch_size=8)
    >>> pp_traffic(8, Layout(pp=2, framework="textbook"), t).bytes_per_step
    Fraction(1024, 1)
    """
    if layout.pp == 1:
        return AxisTraffic("pp", "none", 1, Fraction(0))
    m = layout.num_microbatches(training.global_batch_size)
    physical = layout.framework.physical
    total = pp_bytes(
        hidden_size, layout.tp, layout.cp, layout.micro_batch_size, m, layout.virtual_stages,
        training.seq_len, training.activation_bytes,
        layout.sp or not physical or layout.pipeline_scatter_gather,
        tied_embedding_params if physical else 0, reduce_bytes,
    )  # fmt: skip
    name = "send/recv (point-to-point)"
    if tied_embedding_params and physical:
        name += " + tied-embedding all-reduce"
    return AxisTraffic("pp", name, layout.pp, total)


def pp_bytes(
    hidden_size: int,
    tp: Any,
    cp: Any,
    b: Any,
    m: Any,
    v: Any,
    seq_len: Any,
    beta: int,
    split_over_tp: Any,
    tied_embedding_params: Any,
    reduce_bytes: Any,
) -> Any:
    """Bytes per step of :func:`pp_traffic` (pp > 1), from plain numbers: exact for ints,
    element-wise for arrays. ``split_over_tp``: each send carries 1/tp of the activation."""
    one = pp_message_bytes(hidden_size, tp, cp, b, seq_len, beta, split_over_tp)
    # the tied embedding's all-reduce over its 2 ranks: 2·(1/2)·bytes per element
    return 2 * one * m * v + reduce_bytes * tied_embedding_params


def pp_message_bytes(
    hidden_size: int, tp: Any, cp: Any, b: Any, seq_len: Any, beta: int, split_over_tp: Any
) -> Any:
    """Bytes of one pipeline message (an activation or its gradient, one micro-batch, one model
    chunk): ``β·(s/cp)·b·h``, ÷ tp when ``split_over_tp``. Exact for ints; element-wise for arrays.

    Examples
    --------
    >>> pp_message_bytes(8, 2, 1, 1, 4, 2, True)
    Fraction(32, 1)
    """
    tokens = exact(seq_len) / cp * b
    return beta * tokens * hidden_size / where(split_over_tp, tp, 1)


def cp_traffic(
    arch: Architecture, num_layers: int, layout: Layout, training: TrainingSpec
) -> AxisTraffic:
    """Context-parallel traffic of a stage holding ``num_layers`` layers, as the layout's CP
    flavour (:attr:`Layout.cp_kind`) exchanges attention's inputs, per layer and micro-batch
    (:func:`model.context_parallel.cp_layer_bytes`): the ring passes each rank's K/V chunk
    ``β·S_tok·(K + V dims)/tp`` cp − 1 hops forward, twice that backward (K, V and their
    gradients) and once more when the attention core is recomputed (full, √n and selective
    recomputation); the all-gather sends the same bytes (all-gather of K/V forward, re-gather
    and reduce-scatter of dK/dV backward: Llama 3 §3.3.2, Transformer Engine); Ulysses
    all-to-alls Q, K, V and O over heads ((cp−1)/cp of each, forward and backward: Jacobs et al.
    2023); the hybrid does Ulysses inside groups of ``cp_a2a`` and the ring across. MLA
    exchanges the expanded a·(d_qk) keys and a·d_v values. Liu et al. 2023 (Ring Attention).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, TrainingSpec
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> t = TrainingSpec(seq_len=8, global_batch_size=1)
    >>> cp_traffic(arch, 1, Layout(cp=2), t).bytes_per_step
    Fraction(384, 1)
    >>> cp_traffic(arch, 1, Layout(cp=2, cp_kind="ulysses"), t).bytes_per_step
    Fraction(288, 1)
    """
    if layout.cp == 1:
        return AxisTraffic("cp", "none", 1, Fraction(0))
    m = layout.num_microbatches(training.global_batch_size)
    ring, a2a = cp_degrees(layout.cp_kind, layout.cp, layout.cp_a2a)
    total = cp_bytes(
        arch, num_layers, layout.cp, ring, a2a, layout.tp, layout.micro_batch_size, m,
        training.seq_len, training.activation_bytes,
        _passes(layout.recompute, attention_core=True) > 2,
        kv_repeat(layout.cp_kind, a2a, layout.tp, arch),
    )  # fmt: skip
    name = cp_collective(layout.cp_kind, layout.cp, layout.cp_a2a)
    return AxisTraffic("cp", name, layout.cp, total)


def cp_bytes(
    arch: Architecture,
    num_layers: Any,
    cp: Any,
    ring: Any,
    a2a: Any,
    tp: Any,
    b: Any,
    m: Any,
    seq_len: Any,
    beta: int,
    recomputed: bool,
    kv_rep: Any = 1,
) -> Any:
    """Bytes per step of :func:`cp_traffic`, from plain numbers (exact for ints, element-wise
    for arrays): :func:`model.context_parallel.cp_layer_bytes` of the ``S_tok = (s/cp)·b``
    tokens on a rank, times layers and micro-batches. ``ring`` and ``a2a``: the degrees of the
    K/V exchange and of the head all-to-all (:func:`model.context_parallel.cp_degrees`: the ring
    and the all-gather (cp, 1), Ulysses (1, cp)); ``recomputed``: the attention core runs again
    in backward; ``kv_rep``: verl's repeated K/V heads (:func:`model.context_parallel.kv_repeat`)."""
    tokens = exact(seq_len) / cp * b
    per_layer = cp_layer_bytes(arch, ring, a2a, tp, tokens, beta, recomputed, kv_rep)
    return per_layer * num_layers * m


def ep_traffic(
    arch: Architecture, num_moe_layers: int, layout: Layout, training: TrainingSpec
) -> AxisTraffic:
    """Expert-parallel all-to-all: per MoE layer, per micro-batch, dispatch and combine in
    forward and again in backward (and in a recomputed forward), each sending the (ep−1)/ep of
    the ``k·T·h`` routed token copies that go to other ranks (uniform routing), ``T`` = tokens on
    this GPU (``S_tok/tp`` with sequence parallelism). Lepikhin et al. 2020 (GShard) §2;
    DeepSeek-V3 §3.2.2.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, MoESpec, TrainingSpec
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32,
    ...     vocab_size=16, moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=16))
    >>> t = TrainingSpec(seq_len=4, global_batch_size=2)
    >>> ep_traffic(arch, 1, Layout(dp=2, ep=2), t).bytes_per_step
    Fraction(256, 1)
    """
    if layout.ep == 1 or arch.moe is None:
        return AxisTraffic("ep", "none", 1, Fraction(0))
    m = layout.num_microbatches(training.global_batch_size)
    total = ep_bytes(
        arch, num_moe_layers, layout.ep, layout.tp, layout.cp, layout.micro_batch_size, m,
        training.seq_len, training.activation_bytes, layout.sp, _passes(layout.recompute) > 2,
        training.moe_run,
    )  # fmt: skip
    return AxisTraffic("ep", "all-to-all (dispatch + combine)", layout.ep, total)


def ep_bytes(
    arch: Architecture,
    num_moe_layers: Any,
    ep: Any,
    tp: Any,
    cp: Any,
    b: Any,
    m: Any,
    seq_len: Any,
    beta: int,
    sp: Any,
    recompute: bool,
    run: MoERun = DROPLESS,
) -> Any:
    """Bytes per step of :func:`ep_traffic`, from plain numbers (exact for ints, element-wise
    for arrays); ``recompute``: full or √n (a recomputed forward dispatches again). Each
    dispatch and combine moves :func:`model.moe.all_to_all_bytes` of the rows the run's routing
    sends (:func:`model.moe_run.mean_rows_sent`: ``k·T`` dropless, ``E·C`` padded to capacity) —
    every byte a GPU sends, whichever link it rides (DeepEP's de-duplication shortens the
    scale-out share of the time, :func:`model.moe_run.all_to_all_sent`, not what the dispatch
    moves)."""
    if arch.moe is None:
        return 0 * ep
    tokens = exact(seq_len) / cp * b / where(sp, tp, 1)
    rows = mean_rows_sent(run, tokens, arch.moe.num_experts, arch.moe.experts_per_token)
    one = all_to_all_bytes(rows, arch.hidden_size, beta, ep)
    return 2 * one * (3 if recompute else 2) * num_moe_layers * m
