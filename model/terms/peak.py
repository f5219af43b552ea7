"""A stage's bytes at its peak: the memory terms summed, and the peak over the step's phases.

One GPU of a pipeline stage holds its model state (:func:`model.terms.state.model_state_term`),
its activations (:func:`model.terms.activations.stage_activations_term`) and, for the whole run,
NCCL's communicator buffers (:func:`model.terms.comm_memory.comm_memory_term`). Its peak is the
larger of two phases (:func:`peak_over_phases`, the one rule the evaluator, the search's tables
and the per-stage tables all apply), with the communicators in both:

* forward/backward: the state with its gathered units and buffers, plus every activation line;
* the optimizer step: the state with the step's extras, no activations live.

Published peaks are mostly the caching allocator's *reserved* bytes. Beside the allocated peak,
:attr:`StageMemory.reserved_bytes` adds what the allocator holds in pools the default stream
cannot use (:func:`stream_pool_term`).

The busiest stage is the one whose peak is largest (the first of equals, :func:`busiest_stage`);
the host's share of an offload is the most any stage puts there, and must fit the host's memory
(:func:`host_fits`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.hardware import DeviceSpec
from trainplan.model.memory import ModelState
from trainplan.model.terms.activations import StageActivations, stage_activations_term
from trainplan.model.terms.comm_memory import comm_memory_term
from trainplan.model.terms.deepspeed_turn import walks_recompute
from trainplan.model.terms.fields import Context, Fields, stage_argmax
from trainplan.model.terms.grad_buffers import stage_embedding
from trainplan.model.terms.persistent_buffers import persistent_buffers_term
from trainplan.model.terms.reduce_pool import reduce_pool_per_gpu
from trainplan.model.terms.runtime_unshard import gather_output_bytes
from trainplan.model.terms.split_free import recompute_free, split_free
from trainplan.model.terms.stage_params import split_params
from trainplan.model.terms.state import model_state_term
from trainplan.model.terms.userbuffers import userbuffers_term
from trainplan.model.xp import is_array, maximum, where

__all__ = [
    "StageMemory",
    "peak_over_phases",
    "held_in_both_phases",
    "stage_memory_term",
    "stream_pool_term",
    "reserved_over_capacity",
    "fit_total",
    "fit_bytes",
    "busiest_stage",
    "host_fits",
]


def peak_over_phases(
    backward_state: Any, activations: Any, optimizer_step_state: Any, held: Any = 0
) -> Any:
    """Bytes at a stage's peak: the larger of forward/backward (``backward_state`` +
    ``activations``) and the optimizer step (``optimizer_step_state``; no activations are
    live), plus ``held``, the framework's tensors live in both phases (its persistent buffers,
    :func:`model.terms.persistent_buffers.persistent_buffers_term`). Exact for one layout;
    element-wise for arrays.

    Examples
    --------
    >>> peak_over_phases(10, 5, 12), peak_over_phases(10, 5, 18), peak_over_phases(10, 5, 18, 2)
    (15, 18, 20)
    """
    return maximum(backward_state + activations, optimizer_step_state) + held


def held_in_both_phases(persistent_buffers: Any, communicators: Any) -> Any:
    """Bytes a stage holds in both phases of the step, beside its state and activations: the
    framework's persistent buffers (``persistent_buffers``: the ``"mpu"`` all-gather buffer,
    DeepSpeed's pipeline receive buffers and Transformer Engine's extra cuBLAS workspaces,
    :func:`model.terms.persistent_buffers.persistent_buffers_term`, in the caching allocator,
    never freed) and NCCL's communicator buffers (``communicators``,
    :func:`model.terms.comm_memory.comm_memory_term`, outside the allocator, for the whole run).
    The one sum :attr:`StageMemory.both_phases_bytes`, the search's tables (both phases' state
    columns, :func:`optimizer.tables.fill_job_rows`) and the search's check against the
    evaluator (:func:`optimizer.search.check_against_evaluate`) read. Bytes; exact for one
    layout, element-wise for arrays.

    Examples
    --------
    >>> held_in_both_phases(3, 5)
    8
    """
    return persistent_buffers + communicators


def fit_total(
    allocated: Any, stream_pool: Any, communicators: Any, allocator_retries_ok: bool = False
) -> Any:
    """Bytes a stage's GPU must find in its usable capacity — the one sum the evaluator's
    :attr:`StageMemory.reserved_total_bytes` and :attr:`StageMemory.total_bytes`, the search's
    tables, the per-stage search, the frontier and ``rlhf-plan`` read: the allocated peak
    (``allocated``, :func:`peak_over_phases` of the framework's tensors), the side streams'
    pools (``stream_pool``, :func:`stream_pool_term`) and NCCL's communicators
    (``communicators``, :func:`model.terms.comm_memory.comm_memory_term`, outside the caching
    allocator, held in both phases). With ``allocator_retries_ok`` the pools are left out: the
    allocated peak decides out-of-memory (:func:`reserved_over_capacity`). All in bytes; exact
    for one layout, element-wise for arrays.

    Examples
    --------
    >>> fit_total(80, 10, 5), fit_total(80, 10, 5, allocator_retries_ok=True)
    (95, 85)
    """
    return allocated + communicators + (0 if allocator_retries_ok else stream_pool)


@dataclass(frozen=True, slots=True)
class StageMemory:
    """Bytes on one GPU of one pipeline stage."""

    stage: int
    num_layers: int
    dense_params: Fraction
    """Non-expert parameters on this GPU (÷ tp)."""
    expert_params: Fraction
    """Routed-expert parameters on this GPU (÷ tp·ep)."""
    state: ModelState
    activations: StageActivations | None
    """None for a size-only model (no dimensions)."""
    communicator_bytes: int = 0
    """NCCL's communicator buffers on this GPU, held for the whole run outside the framework's
    caching allocator (:func:`model.terms.comm_memory.comm_memory_term`; 0 under ``textbook``),
    and Transformer Engine's userbuffers or async TP's symmetric-memory workspace beside them
    (:attr:`userbuffer_bytes`, included)."""
    embedding: Fraction = Fraction(0)
    """Embedding elements on this GPU (:func:`model.terms.grad_buffers.stage_embedding_per_gpu`):
    what the ZeRO table's model state (:func:`model.memory.model_state`) reads for the
    mechanisms that keep the embeddings' gradients wider."""
    stream_pool_bytes: Fraction = Fraction(0)
    """What the caching allocator holds in side streams' pools, idle at the forward/backward
    peak and unusable by the default stream (:func:`stream_pool_term`); in
    :attr:`reserved_bytes`, not in :attr:`allocated_bytes`."""
    persistent_buffers_bytes: Fraction = Fraction(0)
    """The persistent buffers the framework allocates once
    (:func:`model.terms.persistent_buffers.persistent_buffers_term`): the ``"mpu"`` global memory
    buffer (Megatron-Core's output layer on its stage; Megatron-DeepSpeed's layers on every
    stage), DeepSpeed's pipeline receive buffers and Transformer Engine's extra cuBLAS
    workspaces; in the caching allocator, held in both phases."""
    userbuffer_bytes: Fraction = Fraction(0)
    """Of :attr:`communicator_bytes`, Transformer Engine's userbuffers (``tp_comm_overlap =
    full``) or PyTorch's symmetric-memory workspace (``async-tp``;
    :func:`model.terms.userbuffers.userbuffers_term`): outside the caching allocator, held in
    both phases."""

    @property
    def params(self) -> Fraction:
        """The parameters this stage holds on this GPU: :attr:`dense_params` +
        :attr:`expert_params`."""
        return self.dense_params + self.expert_params

    @property
    def backward_bytes(self) -> Fraction:
        """Bytes at the forward/backward peak: model state, gathered units, buffers, every
        activation line (the micro-batches in flight, the recompute transient) and the
        communicators."""
        acts = self.activations.total_bytes if self.activations else 0
        return self.state.backward_bytes + acts + self.both_phases_bytes

    @property
    def both_phases_bytes(self) -> Fraction:
        """Bytes held in both phases beside the state and activations: the persistent buffers
        and the communicators (:func:`held_in_both_phases`)."""
        return Fraction(held_in_both_phases(self.persistent_buffers_bytes, self.communicator_bytes))

    @property
    def allocated_bytes(self) -> Fraction:
        """The peak over the step's phases of what the framework's tensors hold
        (:func:`peak_over_phases`): what ``torch.cuda.max_memory_allocated`` counts, without the
        communicators."""
        acts = self.activations.total_bytes if self.activations else 0
        return peak_over_phases(
            self.state.backward_bytes,
            acts,
            self.state.optimizer_step_bytes,
            self.persistent_buffers_bytes,
        )

    @property
    def reserved_bytes(self) -> Fraction:
        """What ``torch.cuda.max_memory_reserved`` counts at least: :attr:`allocated_bytes` and
        the side streams' pools (:attr:`stream_pool_bytes`). The rest of the allocator's gap
        (freed blocks a later request cannot reuse) is not modelled."""
        return self.allocated_bytes + self.stream_pool_bytes

    @property
    def reserved_total_bytes(self) -> Fraction:
        """What the GPU holds at least when the caching allocator keeps every cached block:
        :attr:`reserved_bytes` and the communicators beside it (what
        :func:`reserved_over_capacity` compares with the usable capacity; :func:`fit_total`)."""
        return fit_total(self.allocated_bytes, self.stream_pool_bytes, self.communicator_bytes)

    @property
    def total_bytes(self) -> Fraction:
        """The peak on the GPU: :attr:`allocated_bytes` and the communicators beside it
        (:func:`fit_total` without the side streams' pools)."""
        return fit_total(
            self.allocated_bytes, self.stream_pool_bytes, self.communicator_bytes, True
        )

    @property
    def peak_phase(self) -> str:
        """``forward-backward`` or ``optimizer-step``: where :attr:`total_bytes` is reached."""
        step = self.state.optimizer_step_bytes + self.both_phases_bytes
        if step > self.backward_bytes:
            return "optimizer-step"
        return "forward-backward"

    @property
    def steady_bytes(self) -> Fraction:
        """Model state (with gathered units) + activations: the steady state the textbook reports,
        without the transient buffers of either phase."""
        acts = self.activations.total_bytes if self.activations else 0
        return self.state.resident_bytes + acts

    @property
    def host_bytes(self) -> Fraction:
        """Bytes on this GPU's share of the host memory: offloaded state and activations."""
        acts = self.activations.offload_host_bytes if self.activations else 0
        return self.state.host_bytes + acts


def stage_memory_term(c: Context, f: Fields, num_layers: int = 0) -> StageMemory:
    """The bytes of pipeline stage ``f.stage`` (:class:`StageMemory`): its model state, for a
    model with dimensions its activations, and where the accelerator is given (its node and NIC
    size the channels) the communicators. All but the activations read the stage's layers and
    not how many it recomputes (:data:`model.terms.TERMS`' scopes; DeepSpeed ZeRO-3's state
    reads them, :func:`model.terms.deepspeed_turn.walks_recompute`): remembered across layouts
    that differ in those counts alone (:func:`model.terms.split_free.recompute_free`)."""
    acts = stage_activations_term(c, f) if c.model.arch is not None else None
    if walks_recompute(f.framework, f.zero_stage):
        held = _held_terms(c, f)
    else:
        held = recompute_free(_held_terms, c, f)
    dense, experts, state, comm, emb, pools, persistent, ub = held
    return StageMemory(
        f.stage, num_layers, dense, experts, state, acts, comm, emb, pools, persistent, ub
    )


def _held_terms(c: Context, f: Fields) -> tuple[Any, ...]:
    """:func:`stage_memory_term`'s terms but the activations: (dense, expert parameters per
    GPU, :class:`~model.memory.ModelState`, communicator bytes with the userbuffers, embedding
    elements, side streams' pools, persistent buffers, userbuffer bytes)."""
    dense, experts = split_params(c, f)
    state = model_state_term(c, f)
    ub = split_free(userbuffers_term, c, f)  # neither reads the splits: once per shape's stage
    comm = (split_free(comm_memory_term, c, f) if c.device is not None else 0) + ub
    emb = stage_embedding(c, f)
    pools = stream_pool_term(c, f)
    held = persistent_buffers_term(c, f)
    return dense, experts, state, comm, emb, pools, held, Fraction(ub)


def stream_pool_term(c: Context, f: Fields) -> Any:
    """Bytes PyTorch's caching allocator reserves on a side stream's pool on one GPU of stage
    ``f.stage``, beyond the allocated peak: FSDP2's all-gather outputs and the next one's copy-in
    buffer, ``(2 + 1/D)·w·U`` under ``fsdp2`` with D = dp·cp > 1 (``w`` bytes per working weight,
    ``U`` the stage's largest unit per GPU, :func:`model.terms.stage_params.units_per_gpu`), and
    DeepSpeed ZeRO-3's reduce-scatter copies (below); 0 otherwise.

    * FSDP2 allocates each unit's all-gather output, the whole unit, on its
      ``all_gather_copy_in_stream`` (``foreach_all_gather``,
      ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``) and copies it out into the
      unsharded parameters on the default stream. In forward, ``FSDPParamGroup.wait_for_unshard``
      (``_fsdp_param_group.py``) keeps the output in ``comm_ctx.all_gather_state`` until the next
      unit's copy-out, after that unit's all-gather output is allocated: two outputs at once.
    * The next unit's flat copy-in buffer beside both outputs, ``w·U/D``
      (:mod:`model.terms.runtime_unshard`, "The side pool's copy-in buffer").
    * The allocator pools blocks per stream: ``get_free_block`` (``c10/cuda/
      CUDACachingAllocator.cpp``) returns a cached block only to a request of the stream that
      allocated it. The copy-in stream's segments, two units' worth at least, stay reserved and
      serve none of the default stream's activations; at the forward/backward peak they are idle.

    Under torchao's FP8 all-gather (:func:`model.fp8_gathers.fp8_param_gathers`) the output
    holds the unit's linear weights at 1 B (``foreach_all_gather`` views every input as
    ``uint8`` when one is, :mod:`model.fsdp2_copies`): the largest output
    :func:`model.terms.fp8_linears.fsdp2_fp8_cut` bytes narrower (none where the embedding or output
    layer, gathered at ``w``, is the largest unit), and the copy-in inputs ``1/D`` of it (torchao's
    cast intermediates, not counted: :mod:`model.terms.runtime_unshard`).

    Under a pipeline schedule the all-gathers run in the first micro-batch's forward (ZeRO-2) or
    in the passes :mod:`model.fsdp2_pipeline` names (ZeRO-3), with the same two outputs. The
    multi-stage runtime's own ``UNSHARD`` gathers (``async_op=True``) allocate on the compute
    stream instead: counted in the allocated bytes (:func:`model.terms.runtime_unshard.
    runtime_unshard_term`), not here. The reduce-scatter stream's pool (the
    sharded gradients, ``reduce_output`` in ``foreach_reduce``) is the gradient term's
    (:func:`model.terms.state.model_state_term` counts it at the peak). The verdict does not
    read this term: before an out-of-memory error the allocator frees every stream's unused
    cached segments (``release_cached_blocks``) and retries.

    Under ``deepspeed`` ZeRO-3 with dp·cp > 1: the segments the gradient buckets' copies leave
    (:func:`model.terms.reduce_pool.reduce_pool_per_gpu`). ``overlap_comm`` is on at stage 3
    (``zero/config.py`` ``overlap_comm_valid``), so ``stage3.py``
    ``__reduce_and_partition_ipg_grads`` reduce-scatters each flush of the IPG bucket
    (``reduce_bucket_size`` ``R``, :data:`model.frameworks.DEEPSPEED_REDUCE_BUCKET_ELEMENTS`)
    inside ``reduce_and_partition_stream``, a side stream, through
    ``comm/coalesced_collectives.py`` ``reduce_scatter_coalesced`` (``reduce_scatter`` on by
    default), which, unless the flush is one tensor the world size divides, ``torch.cat``-s the
    tensors' interleaved partitions into a new buffer as large as the flush (DeepSpeed
    edaa72212). A cached block serves only a request no larger than itself, so each flush larger
    than every one before leaves a segment of its own, rounded up to 2 MiB: the pool is the sum
    of the record-setting flushes, simulated over the stage's gradients in backward order
    (Llama 3 70B at tp 4: 954,204,160 + 975,175,680 B in BF16).
    """
    fw = Framework(f.framework)
    if fw is Framework.DEEPSPEED:
        pool = reduce_pool_per_gpu(c, f)
        return where((f.zero_stage == 3) & (f.shard_degree > 1), pool, 0)
    if fw is not Framework.FSDP2:
        return 0
    output = gather_output_bytes(c, f)  # torchao's FP8 all-gather: the linears as uint8
    shard = maximum(f.shard_degree, 1)
    return where(f.shard_degree > 1, 2 * output + output / shard, 0)  # + the copy-in buffer


def reserved_over_capacity(stages: Any, capacity_bytes: Any) -> Fraction:
    """Bytes by which the most any stage's GPU reserves with its communicators beside it
    (:attr:`StageMemory.reserved_total_bytes`, over the :class:`StageMemory` ``stages``)
    exceeds the usable capacity (bytes, the verdict's
    :meth:`model.hardware.DeviceSpec.usable_bytes`); 0 when it does not. Above 0, the caching
    allocator releases its cached blocks and retries at least once per step.

    What PyTorch does then (``c10/cuda/CUDACachingAllocator.cpp``, ``DeviceCachingAllocator``):
    ``malloc`` first looks for a cached block of the requesting stream (``get_free_block``),
    then calls ``cudaMalloc`` (``alloc_block``); when that fails it frees one oversize block
    (``release_available_cached_blocks``, a no-op unless ``max_split_size_mb`` is set), then
    every cached block that is not split, of every stream (``release_cached_blocks``: it waits
    for the blocks' outstanding events, ``synchronize_and_free_events``, and calls ``cudaFree``
    on each released segment, which synchronises the device; with ``expandable_segments`` it
    unmaps the free pages instead) and retries ``cudaMalloc``, counting ``num_alloc_retries``.
    Only when that retry fails does it raise out-of-memory. So the allocated peak, not the
    reserved one, decides out-of-memory (the verdict, :attr:`StageMemory.total_bytes`, with
    the runtime reserve's fragmentation allowance for free bytes left in split segments, which
    no release returns), and a run whose reserved bytes exceed the memory runs with retries
    (torchtitan's ``DeviceMemoryMonitor.get_peak_stats``, ``torchtitan/components/metrics.py``,
    logs them as a warning).

    At least one per step: a cached block is returned to the device only by a release, so
    without one the default stream's and the side streams' reserved bytes only grow through the
    step, and at its end both pools' peaks would be reserved at once, which is more than the
    memory holds. How many releases a step makes depends on the order of every allocation; the
    time of each (the device synchronisation, ``cudaFree`` and ``cudaMalloc`` of the released
    segments) has no per-operation source, and the step time does not charge it.

    Examples
    --------
    >>> from types import SimpleNamespace as S
    >>> reserved_over_capacity([S(reserved_total_bytes=95), S(reserved_total_bytes=80)], 84)
    Fraction(11, 1)
    >>> reserved_over_capacity([S(reserved_total_bytes=83)], 84)
    Fraction(0, 1)
    """
    most = max(s.reserved_total_bytes for s in stages)
    return max(Fraction(most) - capacity_bytes, Fraction(0))


def fit_bytes(stage: Any, allocator_retries_ok: bool) -> Fraction:
    """The bytes of a :class:`StageMemory` ``stage`` the search, the per-stage search and the
    frontier compare with the capacity: :attr:`StageMemory.reserved_total_bytes`, so that no
    answer relies on the caching allocator's retries, whose time the step does not charge
    (:func:`reserved_over_capacity`); with ``allocator_retries_ok``
    :attr:`StageMemory.total_bytes`, the evaluator's verdict (out-of-memory follows the
    allocated peak).

    Examples
    --------
    >>> from types import SimpleNamespace as S
    >>> st = S(allocated_bytes=75, stream_pool_bytes=15, communicator_bytes=5)
    >>> fit_bytes(st, False), fit_bytes(st, True)
    (Fraction(95, 1), Fraction(80, 1))
    """
    return Fraction(
        fit_total(
            stage.allocated_bytes,
            stage.stream_pool_bytes,
            stage.communicator_bytes,
            allocator_retries_ok,
        )
    )


def busiest_stage(peaks: Any) -> Any:
    """The stage with the most bytes at its peak (the first of equals)."""
    return stage_argmax(peaks)


def host_fits(host_bytes: Any, device: DeviceSpec) -> Any:
    """Whether the host's share of an offload (the most any stage's GPU puts there) fits the
    device's host memory per GPU: True with nothing offloaded; where that memory is unknown,
    None for one layout and True for columns (the search does not refuse what it cannot
    check).

    Examples
    --------
    >>> from trainplan.model.hardware import DeviceSpec
    >>> d = DeviceSpec(name="x", memory_bytes=10, memory_unit="GB", peak_flops_per_s=1.0,
    ...                runtime_reserve_bytes=0, host_memory_bytes=100)
    >>> host_fits(0, d), host_fits(101, d)
    (True, False)
    """
    cap = device.host_memory_bytes
    if is_array(host_bytes):
        return host_bytes <= (cap if cap is not None else float("inf"))
    if not host_bytes:
        return True
    return None if cap is None else host_bytes <= cap
