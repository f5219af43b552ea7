"""Bytes each parallel axis sends per GPU per step (ring algorithms;
docs/concepts/conventions.md "Communication"): data and pipeline parallelism here, the layers'
own tensor-, context- and expert-parallel collectives in :mod:`model.comm_layers`.

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

from trainplan.model.frameworks import Framework
from trainplan.model.mechanisms import Mechanism
from trainplan.model.xp import exact, floor, maximum, minimum, where

__all__ = [
    "AxisTraffic",
    "ring_share",
    "dp_bytes",
    "dp_name",
    "MEGATRON_BUCKET_PARAMS",
    "MEGATRON_BUCKET_PARAMS_PER_RANK",
    "DEEPSPEED_REDUCE_BUCKET",
    "dp_collective_calls",
    "grad_reduce_overlaps",
    "pipe_partitioned",
    "reduces_beside_compute",
    "p2p_overlapped",
    "p2p_waiting_sends",
    "p2p_critical_sends",
    "p2p_exposed_sends",
    "MEGATRON_P2P_CODE",
    "pp_bytes",
    "pp_message_bytes",
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


def ring_share(n: Any) -> Any:
    """(n − 1)/n: the share of a buffer each rank sends in a ring all-gather or reduce-scatter
    (exact for an int n; element-wise for arrays)."""
    return exact(n - 1) / n


def dp_bytes(
    mech: Mechanism, dense: Any, experts: Any, shard: Any, expert_shard: Any, m: Any, again: Any = 0
) -> tuple[Any, Any]:
    """(bytes per step, bytes per micro-batch) one GPU sends for data parallelism: each
    parameter's ring share ``(D − 1)/D`` (dense over D = ``shard``, experts over ``expert_shard``)
    times the mechanism's bytes per parameter once per step plus m times its bytes per
    micro-batch (:meth:`Mechanism.traffic_terms`), plus ``again`` all-gathers of its weights a
    step beyond its own count (:func:`model.fsdp2_pipeline.runtime_regathers`; in the step's
    bytes). Element-wise for arrays of layouts. The layout's own figure, with what FP8 primary
    weights and DeepSpeed's unfetched weights save, is :func:`model.terms.traffic.dp_traffic_bytes`.

    ``textbook``: ZeRO-0/1 ``2·(D−1)/D · 2·P`` (an all-reduce, or a reduce-scatter plus the
    all-gather of the updated weights); ZeRO-2 reduce-scatters every micro-batch:
    ``(1 + m)·(D−1)/D · 2·P``; ZeRO-3 gathers the weights for every micro-batch's forward and
    backward and reduce-scatters every micro-batch: ``3m·(D−1)/D · 2·P`` (Rajbhandari et al.
    2019 §7.2.2's 1.5× at m = 1; :func:`model.mechanisms._textbook`). Physical profiles send
    what their mechanism sends: e.g. Megatron's distributed optimizer a reduce-scatter of FP32
    gradients and an all-gather of bf16 weights once per step, FSDP2 ZeRO-3 two bf16 gathers and
    one FP32 reduce-scatter per micro-batch. P = parameters on this GPU (after tp/pp/ep split).

    Examples
    --------
    Textbook ZeRO-3, 70e9 parameters on dp 64, m = 1: 3·(63/64)·2·70e9 bytes.

    >>> from trainplan.model.mechanisms import mechanism
    >>> dp_bytes(mechanism("textbook", 3), Fraction(70 * 10**9), 0, 64, 1, 1)[0]
    Fraction(413437500000, 1)

    FSDP2 ZeRO-3, m = 1: (2 + 2 + 4)·(63/64)·P, all of it per micro-batch.

    >>> total, per_mb = dp_bytes(mechanism("fsdp2", 3, 2, 4), Fraction(70 * 10**9), 0, 64, 1, 1)
    >>> total == per_mb == 8 * Fraction(63, 64) * 70 * 10**9
    True
    """
    per_step, per_mb = mech.traffic_terms()
    ring = ring_share(shard) * dense + ring_share(expert_shard) * experts
    return ring * (per_step + m * per_mb + mech.weight_bytes * again), ring * per_mb


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
    if framework == Framework.MEGATRON:
        if not overlapped:
            return maximum(1, 0 * layers + 1)
        bucket = maximum(MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_RANK * dp)
        return maximum(1, -floor(-params / bucket))
    if framework == Framework.DEEPSPEED:
        return maximum(1, -floor(-params / DEEPSPEED_REDUCE_BUCKET))
    return maximum(1, layers)


def grad_reduce_overlaps(framework: str, pp: Any, requested: bool, zero_stage: Any = 3) -> Any:
    """Whether the once-per-step data-parallel traffic may overlap computation: as requested
    (``grad_reduce_overlap``: Megatron-Core's ``--overlap-grad-reduce`` and
    ``--overlap-param-gather``, FSDP's prefetch), except under DeepSpeed's pipeline engine
    (``pp > 1``), which reduces the gradients after the pipeline has flushed: its
    ``TrainSchedule.steps`` appends ``ReduceTiedGrads``, ``ReduceGrads`` and ``OptimizerStep``
    to the batch's last step, after that step's backward (``deepspeed/runtime/pipe/schedule.py``;
    ``PipelineEngine._exec_reduce_grads`` in ``deepspeed/runtime/pipe/engine.py`` then
    all-reduces every gradient bucket, nothing left to overlap it), and under DeepSpeed ZeRO-1
    and -2 (``zero_stage``), whose once-per-step traffic ends in the parameters' all-gather
    inside ``step()``, a blocking collective (DeepSpeed edaa72212 ``stage_1_and_2.py``
    ``DeepSpeedZeroOptimizer.step`` → ``runtime/utils.py`` ``all_gather_into_tensor_dp_groups``;
    ZeRO-1's reduction before it, which ``overlap_comm`` could overlap, is charged with it: an
    upper bound). Element-wise in ``pp`` and ``zero_stage``.

    Examples
    --------
    >>> grad_reduce_overlaps("deepspeed", 12, True), grad_reduce_overlaps("deepspeed", 1, True)
    (False, True)
    >>> grad_reduce_overlaps("deepspeed", 1, True, 2)
    False
    >>> grad_reduce_overlaps("megatron", 8, True), grad_reduce_overlaps("megatron", 8, False)
    (True, False)
    """
    if framework != Framework.DEEPSPEED or not requested:
        return requested
    return (pp <= 1) & (zero_stage >= 3)


def reduces_beside_compute(framework: str, zero_stage: int, overlap_comm: bool) -> bool:
    """Whether the framework's data-parallel reductions run on a stream of their own, beside
    the computation: everywhere but DeepSpeed ZeRO-1 and -2 without ``overlap_comm``
    (:attr:`model.specs.TrainingSpec.deepspeed_overlap_comm`). There DeepSpeed edaa72212
    ``deepspeed/runtime/zero/stage_1_and_2.py`` ``DeepSpeedZeroOptimizer.average_tensor`` and
    ``allreduce_and_copy`` take ``get_accelerator().current_stream()`` unless
    ``self.overlap_comm``, so each bucket's reduction (ZeRO-2's every micro-batch, from the
    backward hooks; ZeRO-1's at the accumulation boundary) waits in line with the passes;
    ``zero/config.py`` ``overlap_comm_valid`` turns ``overlap_comm`` on by default only at
    ZeRO-3 (``stage3.py`` reduces on its own stream).

    >>> reduces_beside_compute("deepspeed", 2, False), reduces_beside_compute("deepspeed", 2, True)
    (False, True)
    >>> reduces_beside_compute("deepspeed", 3, False), reduces_beside_compute("megatron", 1, False)
    (True, True)
    """
    return framework != Framework.DEEPSPEED or zero_stage == 3 or overlap_comm


def pipe_partitioned(framework: str, moe: bool = False) -> bool:
    """Whether a pipeline send carries 1/tp of the stage's output and the receiver all-gathers
    it over its tensor-parallel group: DeepSpeed's pipeline engine partitions both the
    activation and its gradient over the model-parallel group when there is one
    (``PipelineEngine.__init__``: ``is_pipe_partitioned`` and ``is_grad_partitioned`` are
    ``is_model_parallel`` and the config's ``pipeline.pipe_partitioned`` /
    ``grad_partitioned``, both true by default in ``deepspeed/runtime/config.py``; the
    gradient's since DeepSpeed PR #1407 of 2021-09; the receiver rebuilds the tensor with
    ``PartitionedTensor.full()``, an all-gather; ``deepspeed/runtime/pipe/engine.py``,
    ``deepspeed/runtime/utils.py``) — except for a mixture-of-experts model (``moe``):
    Megatron-DeepSpeed passes two tensors that need gradients between its stages there, which
    the engine cannot partition, so ``GPTModelPipe.__init__`` (``megatron/model/gpt_model.py``,
    microsoft/Megatron-DeepSpeed f4157bea) asserts that both are off whenever pp > 1 and tp > 1:
    each send is then the stage output as the layer leaves it (÷ tp only with sequence
    parallelism), and nothing is gathered. At tp = 1 or pp = 1 the two readings agree.

    >>> pipe_partitioned("deepspeed"), pipe_partitioned("megatron")
    (True, False)
    >>> pipe_partitioned("deepspeed", moe=True)
    False
    """
    return framework == Framework.DEEPSPEED and not moe


def p2p_overlapped(framework: str, schedule: str, virtual_stages: Any) -> Any:
    """Whether the pipeline's sends and receives run beside computation: Megatron-Core's
    interleaved 1F1B with ``overlap_p2p_comm``, which posts each send and receive
    asynchronously after a chunk's pass and waits for a received tensor only before the pass
    that consumes it (``megatron/core/pipeline_parallel/schedules.py``,
    ``forward_backward_pipelining_with_interleaving``: the ``recv_prev_wait_handles`` /
    ``recv_next_wait_handles`` waited in ``pp_pre_forward`` / ``pp_pre_backward``). It is on
    wherever the schedule is interleaved: Megatron-LM's ``--no-overlap-p2p-communication`` is
    opt-out and ``validate_args`` turns it off only without virtual stages
    (``megatron/training/arguments.py``); Megatron Bridge sets it for ``vp > 1`` and batched,
    blocking p2p otherwise (``CommOverlapConfig``, ``training/comm_overlap.py``); NeMo's 24.07
    launcher configs set ``overlap_p2p_comm: True`` with the interleaved schedule. Without
    virtual stages (1F1B, ``batch_p2p_comm``) and under the other profiles each message waits.
    Element-wise in ``virtual_stages``.

    >>> p2p_overlapped("megatron", "1f1b", 4), p2p_overlapped("megatron", "1f1b", 1)
    (True, False)
    >>> p2p_overlapped("deepspeed", "1f1b", 4)
    False
    """
    if framework != Framework.MEGATRON or schedule not in ("1f1b", "interleaved"):
        return virtual_stages < 0  # False, element-wise (v ≥ 1)
    return virtual_stages > 1


MEGATRON_P2P_CODE = "Megatron-LM d98e8a64dd (2026-08-22, core_v0.19.0 and later)"
"""The Megatron-Core code :func:`p2p_waiting_sends` reads by default, the one the launch flags
target (:mod:`interface.launch`)."""


def p2p_waiting_sends(m: Any, v: Any, pp: Any, warmup_flush: bool, forward_wait: bool) -> Any:
    """Of the ``2·m·v`` pipeline messages of Megatron-Core's interleaved schedule with
    ``overlap_p2p_comm`` (:func:`p2p_overlapped`), how many the last pipeline rank waits on
    after posting: ``megatron/core/pipeline_parallel/schedules.py``,
    ``forward_backward_pipelining_with_interleaving`` (at :data:`MEGATRON_P2P_CODE`).

    * Its warm-up runs ``W = min(m·v, 2(pp − r − 1) + (v − 1)·g)`` forward passes on rank r
      (``get_pp_rank_microbatches``; ``g`` = ``microbatch_group_size_per_vp_stage``, pp by
      default), each followed by a blocking ``send_forward_recv_forward`` (no
      ``overlap_p2p_comm=True``: ``p2p_communication.py`` waits on the requests), and its
      cool-down the same ``W`` backward passes, each a blocking ``send_backward_recv_backward``
      — unless ``overlap_p2p_comm_warmup_flush`` (``warmup_flush``; Megatron-LM's
      ``--overlap-p2p-communication-warmup-flush``, opt-in since 4295be1a6c, core_v0.10.0;
      before it, the warm-up and flush ran their sends asynchronously, as with the flag).
    * Since 260cba7133 (2026-04-16, core_v0.18.0) each forward send is waited on right after it
      is posted (``pp_post_forward`` and the warm-up: "isend() copies asynchronously; wait until
      the copy is done before freeing the source buffer") whenever
      ``deallocate_pipeline_outputs`` is set, which Megatron-LM
      (``megatron/training/argument_utils.py``) and Megatron Bridge (``GPTModelProvider``)
      always set (``forward_wait``; False for earlier code).

    This is the last rank's own count (``r = pp − 1``, ``W = min(m·v, (v − 1)·pp)``); with the
    ``2(pp − 1)`` sends of the fill and the drain it makes the slope of the step in a send's
    time once sends are long against a pass (:func:`p2p_exposed_sends`). Element-wise in
    ``m``, ``v``, ``pp``.

    Examples
    --------
    Meta's Llama 3 405B layout, pp 16, v 8, m 16: W = min(128, 7·16) = 112; every forward send
    (128) waits, and the 112 cool-down backward sends: 240 of 256.

    >>> int(p2p_waiting_sends(16, 8, 16, False, True))
    240
    >>> int(p2p_waiting_sends(16, 8, 16, False, False)), int(p2p_waiting_sends(16, 8, 16, True, True))
    (224, 128)
    >>> int(p2p_waiting_sends(16, 8, 16, True, False))
    0
    """
    warmup = minimum(m * v, (v - 1) * pp)
    backward = 0 * warmup if warmup_flush else warmup
    forward = m * v if forward_wait else backward
    return forward + backward


def p2p_critical_sends(m: Any, v: Any, pp: Any, forward_wait: bool) -> Any:
    """How many pipeline sends of Megatron-Core's interleaved schedule (the code of
    :func:`p2p_waiting_sends`) lie on the step's critical path when a send is short against a
    chunk's pass: the step grows by this many sends' time.

    * ``2·(pp·v − 1)``: the first micro-batch's forward crosses every one of the ``pp·v − 1``
      boundaries between virtual stages and its backward the same ones back, and none of them
      has slack: with ``microbatch_group_size_per_vp_stage`` = pp, rank 0 runs chunk 1 of
      micro-batch 0 right after its pp warm-up forwards, the moment the pipeline loop hands it
      back (``get_schedule_table``), and so on round the loop; a send, waited on or not, delays
      the receiver's pass by its time.
    * With ``forward_wait`` (core_v0.18.0 and later), ``(v − 1)·(m − pp)`` more: the ranks'
      steady phase is paced by their forward passes, each now followed by its send's wait.

    Neither the warm-up flush flag nor the blocking warm-up and cool-down change it: those
    waits fall on ranks that would otherwise idle. Derived from, and checked against, the
    interleaved timeline with each send's wait and latency placed per rank
    (:func:`model.pipeline_p2p.interleaved_send_span`, tests/model/test_pipeline_p2p.py).
    Element-wise in ``m``, ``v``, ``pp`` (``m`` a multiple of pp, as the schedule needs).

    Examples
    --------
    pp 4, v 2, m 8: 2·7 = 14 sends, and 1·4 = 4 more for the forward waits.

    >>> int(p2p_critical_sends(8, 2, 4, False)), int(p2p_critical_sends(8, 2, 4, True))
    (14, 18)
    """
    fill = 2 * (pp * v - 1)
    return fill + (v - 1) * (m - pp) if forward_wait else fill


def p2p_exposed_sends(send: Any, t_f: Any, t_b: Any, critical: Any, longest: Any) -> Any:
    """Seconds Megatron-Core's interleaved schedule with ``overlap_p2p_comm`` adds to the step
    for pipeline sends of ``send`` seconds each, one chunk's forward ``t_f`` and backward
    ``t_b``: the longest of four paths through the timeline, each a count of sends less the
    passes it skips,

    ``max(c·s, (c + 1)·s − min(t_f, t_b), (n − 1)·s − 2·min(t_f, t_b), n·s − (t_f + t_b))``,

    ``c`` = ``critical`` (:func:`p2p_critical_sends`: short sends) and ``n`` = ``longest``,
    ``2(pp − 1)`` + :func:`p2p_waiting_sends` (long sends: the fill and the drain and the last
    rank's own waits). Read
    off the timeline run on symbolic durations (the maximum of linear forms in ``t_f``,
    ``t_b``, ``s``): for the code Megatron-LM runs by default (forward waits, no warm-up
    flush) these are its forms at pp ≥ 3, exactly, over the tests' grid; at pp = 2 the longest
    form has one send fewer (an over-count of at most one send there). Under the other flags
    the first form is exact and the others are the same counts' bound for long sends
    (within a send or two of the timeline at sends up to two chunk forwards). Element-wise.

    Examples
    --------
    c = 18, n = 26 (pp 4, v 2, m 8), chunk passes 1 and 2 ms: a 0.1 ms send adds 18 sends'
    time; a 1 ms send, 26 − 3 = 23 ms.

    >>> round(p2p_exposed_sends(1e-4, 1e-3, 2e-3, 18, 26), 9)
    0.0018
    >>> round(p2p_exposed_sends(1e-3, 1e-3, 2e-3, 18, 26), 9)
    0.023
    """
    shorter = minimum(t_f, t_b)
    return maximum(
        maximum(critical * send, (critical + 1) * send - shorter),
        maximum((longest - 1) * send - 2 * shorter, longest * send - (t_f + t_b)),
    )


def dp_name(mech: Mechanism) -> str:
    """The collectives of a mechanism, named with their dtype and how often they run."""
    dtype = {2: "bf16", 4: "fp32"}.get(mech.reduce_bytes, f"{mech.reduce_bytes}-byte")
    kind = "reduce per rank" if mech.per_rank_reduce else "reduce-scatter"
    reduce = f"{'all-reduce' if mech.all_reduce else kind} ({dtype})"
    reduce += " per micro-batch" if mech.reduce_per_microbatch else ""
    if mech.regathers_after_forward:  # the first forward's and one per micro-batch
        return f"{reduce} + all-gather m + 1 times a step (freed after each forward)"
    parts = [reduce]
    if mech.gathers_per_step:
        times = "" if mech.gathers_per_step == 1 else f"{mech.gathers_per_step} × "
        parts.append(f"{times}all-gather per step")
    if mech.gathers_per_microbatch:
        what = "fwd, bwd" if mech.gathers_per_microbatch == 2 else "fwd"
        parts.append(f"all-gather per micro-batch ({what})")
    return " + ".join(parts)


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
    """Pipeline bytes per step of a middle stage (pp > 1), from plain numbers: exact for ints,
    element-wise for arrays. Per micro-batch (and per model chunk, ``v``) one activation forward
    and one gradient backward of :func:`pp_message_bytes` (``split_over_tp``: each send carries
    1/tp of the activation: the textbook's scatter/gather, Narayanan et al. 2021 §4.1; sequence
    parallelism; DeepSpeed's pipeline engine, :func:`pipe_partitioned`; else Megatron-Core sends
    the whole tensor), plus, with tied embeddings over pp > 1, the once-per-step all-reduce of
    the embedding's gradient between the first and the last stage (``tied_embedding_params`` per
    GPU, ``reduce_bytes`` per element: Megatron-Core's ``_allreduce_word_embedding_grads``). The
    layout's own figure is :func:`model.terms.traffic.pp_traffic_bytes`.

    >>> pp_bytes(8, 1, 1, 1, 8, 1, 4, 2, False, 0, 4)
    Fraction(1024, 1)
    """
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
