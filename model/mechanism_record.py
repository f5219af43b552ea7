"""The record of a framework's mechanism: :class:`Mechanism`, a ZeRO stage's buffers and
collectives per parameter (:func:`model.mechanisms.mechanism` makes one per framework and stage;
:mod:`model.frameworks` says what each stage is in each framework).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.xp import is_array, maximum, minimum, where

__all__ = ["Mechanism"]


@dataclass(frozen=True, slots=True)
class Mechanism:
    """One framework's ZeRO stage as buffers and collectives, per parameter of a stage.

    Byte fields are bytes per parameter: ``*_full`` held whole on every replica, ``*_sharded``
    held as a ``1/D`` shard. A *unit* is the largest set of parameters the framework gathers or
    reduces at once: one transformer layer, or the embedding / output layer.
    """

    framework: Framework
    zero_stage: int
    name: str
    """The framework's own name for the mechanism."""
    weights_full: int
    """Working (bf16) weights held whole for the whole step."""
    weights_sharded: int
    """Weights kept as a shard (ZeRO-3's bf16 partition; FSDP2's FP32 sharded parameter)."""
    grads_full: int
    """Gradient buffer held whole (accumulated over micro-batches, reduced once per step)."""
    grads_sharded: int
    """Gradient accumulator held as a shard (reduced every micro-batch, or the textbook's)."""
    optimizer_full: int
    """Optimizer state (FP32 master and moments, where not counted as weights) held whole."""
    optimizer_sharded: int
    """Optimizer state held as a shard."""
    weight_bytes: int = 2
    """Bytes per working (bf16) weight element: what a gathered unit holds and an all-gather
    moves."""
    step_full: int = 0
    """Bytes per parameter, whole, that exist only while the optimizer steps (Megatron-Core
    without the distributed optimizer copies 16-bit gradients to FP32 for the step)."""
    step_sharded: int = 0
    """Bytes per parameter, ÷ D, that exist only while the optimizer steps (DeepSpeed's FP32
    gradient partition; Megatron's distributed optimizer's FP32 copy of 16-bit gradients)."""
    step_cap_elements: int | None = None
    """When the step materialises ``step_sharded`` one sub-group at a time: the sub-group size
    in elements (DeepSpeed ZeRO-3's ``sub_group_size``); None = the whole partition."""
    gathered_units: int = 0
    """Units held gathered in bf16 at once (current + prefetched), each whole beside the local
    shard: every framework all-gathers into a new unsharded buffer and keeps its shard apart
    (FSDP2 ``FSDPParam.init_all_gather_outputs``, ``torch.empty`` of the padded unsharded size,
    the FP32 sharded parameter apart; DeepSpeed ``partition_parameters.py``, the full buffer
    beside ``ds_tensor``; Megatron-FSDP ``DataParallelBuffer.fetch_bucket`` →
    ``allocate_bucket_storage`` for a distributed buffer); with :attr:`prefetch_elements` the
    fewest (:meth:`units_held`)."""
    prefetch_elements: int = 0
    """Where the prefetch is sized in elements rather than in units (Megatron-FSDP): the
    all-gather prefetches following units until it holds this many elements beyond the unit
    being computed (:meth:`units_held`); 0 = :attr:`gathered_units` whatever the unit's size."""
    unit_grad_bytes: int = 0
    """Bytes per parameter of one unit's unsharded gradients live in backward before its
    reduce-scatter (FSDP2: the bf16 gradient and its FP32 copy for the reduction)."""
    bucket_bytes: int = 0
    """Fixed communication buckets live in backward, bytes (DeepSpeed's IPG bucket)."""
    host_accumulation_bytes: int = 0
    """Bytes per offloaded optimizer element of the host buffers that accumulate gradients over
    the micro-batches of a step under optimizer offload (DeepSpeed ZeRO-1/2:
    ``stage_1_and_2.py`` ``async_accumulate_grad_in_cpu_via_gpu`` keeps one buffer per
    parameter of the rank's partition, in the parameter's dtype, ``accumulated_grads_in_cpu``);
    only with more than one micro-batch per step."""
    offload_staging_bytes: int = 0
    """Under optimizer offload, bytes per element of the stage's largest parameter tensor that
    the mechanism keeps for the whole run as a gradient staging buffer on the GPU, and as its
    twin on the host (DeepSpeed ZeRO-1/2: ``stage_1_and_2.py``
    ``DeepSpeedZeroOptimizer.__init__`` allocates ``temp_grad_buffer_for_gpu_offload`` and
    ``temp_grad_buffer_for_cpu_offload`` of ``largest_param_numel`` elements in the parameters'
    dtype; :func:`model.offload.offload_staging_bytes`); 0 = none."""
    bucket_persists: bool = False
    """The buckets are allocated once and held through the optimizer step too (DeepSpeed
    ZeRO-3: ``stage3.py`` allocates each IPG bucket's buffer in ``__init__`` and frees it only
    in ``offload_states``), not only in backward."""
    embedding_grad_bytes: int = 0
    """Bytes per gradient element of the embeddings (word and learned positions, and the last
    stage's copy of a tied embedding) where the mechanism keeps them in a dtype of their own;
    0 = the other gradients' (:func:`model.terms.grad_buffers.embedding_grad_term` adds the
    difference)."""
    reduce_bytes: int = 2
    """Bytes per gradient element on the wire."""
    all_reduce: bool = False
    """The reduction is an all-reduce (ZeRO-0; DeepSpeed ZeRO-1/2's multi-rank bucket
    all-reduce) rather than a reduce-scatter."""
    per_rank_reduce: bool = False
    """The reduction is one reduce to each owning rank in turn (DeepSpeed ZeRO-1/2 with
    ``use_multi_rank_bucket_allreduce`` false): on a ring each rank sends ``(D − 1)/D`` of the
    bucket over the D reduces, a reduce-scatter's bytes, and it is timed as one."""
    reduce_per_microbatch: bool = False
    """Gradients are reduced after every micro-batch's backward, not once per step."""
    gathers_per_step: int = 0
    """All-gathers of the bf16 weights per step (after the sharded optimizer's update; the
    textbook's ZeRO-3 counts two)."""
    gathers_per_microbatch: int = 0
    """All-gathers of the bf16 weights per micro-batch (ZeRO-3: forward and backward; FSDP
    ``reshard_after_forward=False``: forward)."""
    regathers_after_forward: bool = False
    """A forward frees each unit and the next pass that finds it freed gathers it again, the
    backward leaving it whole (FSDP2's ZeRO-3 under a pipeline schedule,
    :mod:`model.fsdp2_pipeline`): :attr:`gathers_per_step` is the step's first forward's,
    :attr:`gathers_per_microbatch` the m others, run by forwards or by backwards as the
    schedule orders them (:func:`model.fsdp2_pipeline.regather_forward_share`)."""
    step_gathers_in_forward: bool = False
    """The once-per-step all-gathers run in the step's first forward, each unit's as the
    forward reaches it (FSDP2 under a pipeline schedule: the first ``pre_forward`` finds the
    units sharded, the later passes find them whole), so only that forward can hide them
    (:func:`model.dp_exposure.dp_exposed_seconds`)."""
    torch_pipelining: bool = False
    """Run by torch.distributed.pipelining's schedules (FSDP2 with pp > 1, as torchtitan runs
    it), whose multi-stage runtime gathers a model chunk whole ahead of its first pass and frees
    it when it leaves the next three chunks the rank computes: re-gathers beyond the counts
    above at four chunks a rank or more (:func:`model.fsdp2_pipeline.runtime_regathers`) and the
    first chunk's gather waited for whole (:func:`model.fsdp2_pipeline.upfront_gather`)."""
    non_units_gathered: bool = False
    """The parameters outside every unit (the embedding, the output layer) stay gathered from
    their first use to the step's end, beside the :attr:`gathered_units` (Megatron-FSDP:
    only ``fsdp_unit_modules`` get the release hooks; :meth:`non_unit_gathered`)."""
    reduce_queue_elements_floor: int = 0
    """Where the unsharded gradient buckets wait in a reduce-scatter queue sized in elements
    (Megatron-FSDP): the floor of its capacity, ``max(floor, 2 × unit)`` elements
    (:meth:`reduce_queue_elements`); 0 = one unit's :attr:`unit_grad_bytes`."""
    double_buffer: bool = False
    """Megatron-FSDP's ``fsdp_double_buffer``: gathered weights and gradient buckets come from
    persistent pools of two units (:meth:`units_held`, :meth:`reduce_queue_elements`,
    :meth:`pool_bytes`)."""
    accumulate_bytes: int = 0
    """Bytes per parameter element moved through HBM on the compute stream in each backward
    after a step's first (with the forward before it), to accumulate or stage its gradients
    beyond the weight-gradient GEMMs' output, and its gathered weights (DeepSpeed's:
    :func:`model.deepspeed_accumulate.accumulate_bytes`; FSDP2's copies around its
    collectives: :func:`model.fsdp2_copies.fsdp2_copy_bytes`); 0 where the accumulation is
    fused into the GEMM or runs off the compute stream."""
    accumulate_first_bytes: int = 0
    """The same in a step's first backward (the gradients were freed at the step)."""
    chunks_at_once: int = 1
    """Model chunks whose passes one GPU computes at once, each holding its own
    :meth:`units_held` gathered (the count × this): 2 where the schedule overlaps one chunk's
    forward with another's backward (DualPipe, DualPipeV under ``textbook``:
    :func:`model.overlapped_chunks.overlapped_mechanism`); 1 elsewhere."""
    source: str = ""

    @property
    def gathered_what(self) -> str | None:
        """What the gathered weights are, in words (the memory report's line): the unit being
        computed and the prefetched one(s), and where :attr:`non_units_gathered` the embedding
        and output layer held whole; None where nothing is gathered per unit.

        >>> from trainplan.model.mechanisms import Framework, mechanism
        >>> mechanism("megatron", 3).gathered_what
        'current + prefetched layers, embedding, output'
        >>> mechanism("fsdp2", 3).gathered_what, mechanism("megatron", 1).gathered_what
        ('current + next unit', None)
        >>> mechanism("deepspeed", 3).gathered_what
        'layers kept for reuse, output, prefetch'
        """
        if not self.gathered_units:
            return None
        if self.non_units_gathered:
            return "current + prefetched layers, embedding, output"
        if self.framework is Framework.DEEPSPEED and self.zero_stage == 3:
            return "layers kept for reuse, output, prefetch"  # model.deepspeed_gathered
        if self.chunks_at_once > 1:
            return f"current + next unit of {self.chunks_at_once} chunks at once"
        return "current + next unit"

    def units_held(self, unit: Any) -> Any:
        """Units held gathered at once when the largest holds ``unit`` elements on this GPU:
        :attr:`gathered_units`, or with :attr:`prefetch_elements` the unit computed and as
        many following ones as the prefetch takes to reach that many elements,
        ``1 + max(1, ⌈prefetch_elements / unit⌉)`` (Megatron-FSDP, :func:`_megatron_fsdp`); each
        × :attr:`chunks_at_once`. Element-wise for arrays; :attr:`gathered_units` where ``unit`` is 0.

        >>> from trainplan.model.mechanisms import Framework, mechanism
        >>> m = mechanism("megatron", 3)
        >>> m.units_held(218_112_000), m.units_held(855_654_400), m.units_held(0)
        (4, 2, 2)
        >>> mechanism("fsdp2", 3).units_held(218_112_000)
        2
        """
        if not self.prefetch_elements:  # fixed, or a pool of two under fsdp_double_buffer
            return self.gathered_units * self.chunks_at_once
        some = maximum(unit, 1)
        following = maximum(-(-self.prefetch_elements // some), 1)
        return where(unit > 0, 1 + following, self.gathered_units) * self.chunks_at_once

    def reduce_queue_elements(
        self,
        unit: Any,
        first: Any,
        layers: Any,
        padded: Any = None,
        held: Any = 0,
        expert: Any = 0,
        single: Any = True,
    ) -> Any:
        """Gradient elements alive at once in backward on one GPU of a stage whose ``layers``
        transformer layers each hold ``unit`` elements, allocated as buckets of ``padded``
        elements (:func:`model.megatron_fsdp_buckets.padded_layer_unit`; None or 0 = ``unit``),
        behind first buckets of ``first`` elements (those of the parameters outside the layers
        reduced before the layers' backward: the output layer's, the final norm's, the MTP
        modules'), beside a bucket of ``held`` elements alive through the whole backward: the
        most the reduce-scatter queue, the bucket being filled and that one hold
        (:data:`model.mechanisms.MEGATRON_FSDP_QUEUE_SOURCE`). Element-wise for arrays; exact
        for Fractions.

        The layers' buckets as whole units: :func:`whole_unit_queue_elements`.
        A shared bucket with the input embedding, whose gradient completes last, is alive
        throughout: ``held`` more at every point.

        A MoE layer's ``expert`` elements (of its ``unit``; 0 = a dense layer, every layer of the
        stage alike) are a bucket group of their own, reduced apart from the layer's dense
        parameters (:func:`moe_queue_elements`); ``single``: every bucket group and the head are
        one bucket each (the exact count), else the bound that holds however they split.

        Under :attr:`double_buffer` the pool holds two units (``_enforce_double_buffer_
        limit``: at most one other unit, the output layer's bucket counting as one, beside the
        unit filling), the pool's buffers persist, and the buckets outside the layers come from
        the fallback allocator beside them: ``2·padded + first + held``.

        The peak adds the queue to every activation line
        (:mod:`model.terms.peak`; docs/memory-mechanisms.md says why that bound is kept).

        >>> from trainplan.model.mechanisms import mechanism
        >>> m = mechanism("megatron", 3)
        >>> m.reduce_queue_elements(1_000_000_000, 0, 80)  # C = 2e9: two queued + 2
        4000000000
        >>> m.reduce_queue_elements(1_000_000_000, 0, 80, held=500)  # beside a held bucket
        4000000500
        >>> m.reduce_queue_elements(1_451_270_144, 0, 32, expert=1_409_286_144)  # 3 units + D
        4395794432
        >>> mechanism("megatron", 3, double_buffer=True).reduce_queue_elements(10, 25, 80)
        45
        """
        size = unit if padded is None else maximum(padded, unit)
        if self.double_buffer:
            return where(unit > 0, minimum(layers, 2) * size + first, first) + held
        capacity = maximum(self.reduce_queue_elements_floor, 2 * unit)
        whole = whole_unit_queue_elements(size, first, layers, capacity)
        if is_array(expert) or expert:
            apart = moe_queue_elements(unit, expert, first, layers, capacity, single)
            whole = where(expert > 0, apart, whole)
        return where(unit > 0, whole, first) + held

    def pool_bytes(self, unit: Any, unit_weight_bytes: Any) -> Any:
        """Bytes :attr:`double_buffer`'s persistent pools hold through the optimizer step, for
        layer units of ``unit`` elements whose gathered weights take ``unit_weight_bytes``:
        two units of weights and two of gradients (``reduce_bytes`` per element), allocated
        once by ``get_global_memory_buffer()`` and never freed; 0 without the double buffer.

        >>> from trainplan.model.mechanisms import mechanism
        >>> mechanism("megatron", 3, double_buffer=True).pool_bytes(10, 20), mechanism("megatron", 3).pool_bytes(10, 20)
        (120, 0)
        """
        if not self.double_buffer:
            return 0
        return 2 * (unit_weight_bytes + unit * self.reduce_bytes)

    def memory_terms(
        self,
        params: Any,
        replicas: Any,
        unit: Any,
        whole_unit: Any = None,
        wrapped: Any = None,
        held: Any = None,
    ) -> tuple[Any, ...]:
        """(weights, gradients, optimizer, gathered, unit buffers, step extra) bytes on one GPU
        for ``params`` parameters replicated over ``replicas`` ranks, whose largest unit holds
        ``unit`` of them (all counts per GPU, after tp/pp/ep). ``whole_unit``: the elements of
        the whole unit this class's ``unit`` is part of (a MoE layer's dense and expert
        parameters are one unit, gathered and prefetched together: :meth:`units_held`);
        None = ``unit``. ``wrapped``: whether the framework gathers these parameters at all
        (None: where ``replicas`` > 1, they are sharded; FSDP2 wraps a module on a mesh of one
        rank too, :func:`model.memory.mechanism_memory`). ``held``: of ``params``, those whose
        :attr:`weights_full` are whole at the peak (FSDP2 under PyTorch's multi-stage runtime:
        the largest window of chunks, :func:`model.terms.runtime_window.held_whole_params`);
        None = all. The fixed :attr:`bucket_bytes` are not included (one bucket serves every
        parameter class).

        Exact for Fraction ``params``/``unit``; element-wise for arrays of layouts
        (:mod:`model.xp`).

        Examples
        --------
        DeepSpeed ZeRO-2, P = 13e9 on N = 8 GPUs: ``2P + 20P/N`` at the step = 58.5e9 B —
        ``estimate_zero2_model_states_mem_needs``'s ``2P + 18P/N`` (55.25e9) plus the BF16 flat
        gradient partition the step concatenates beside its FP32 cast, ``2P/N``
        (``stage_1_and_2.py`` ``DeepSpeedZeroOptimizer.step``).

        >>> from trainplan.model.mechanisms import Framework, mechanism
        >>> from fractions import Fraction
        >>> m = mechanism(Framework.DEEPSPEED, 2)
        >>> w, g, o, _, _, step = m.memory_terms(Fraction(13 * 10**9), 8, Fraction(0))
        >>> w + g + o + step
        Fraction(58500000000, 1)
        """
        d = replicas
        shard = params / d
        weights = self.weights_full * (params if held is None else held)
        weights = weights + self.weights_sharded * shard
        grads = self.grads_full * params + self.grads_sharded * shard
        opt = self.optimizer_full * params + self.optimizer_sharded * shard
        # each gathered unit whole, beside the local shard (none when nothing is sharded); the
        # textbook's convention counts what lies beyond the shard, (d − 1)/d of each unit
        held = self.units_held(unit if whole_unit is None else whole_unit)
        gathers = d > 1 if wrapped is None else wrapped
        whole = unit if self.framework.physical else unit - unit / d
        gathered = where(gathers, held * self.weight_bytes * whole, 0 * unit)
        if self.step_cap_elements is not None:
            shard = minimum(shard, self.step_cap_elements)
        step = self.step_full * params + self.step_sharded * shard
        buffers = self.unit_grad_bytes * unit
        return weights, grads, opt, gathered, buffers, step

    def non_unit_gathered(self, elements: Any, replicas: Any) -> Any:
        """Bytes of ``elements`` parameters outside every unit (the stage's embedding and output
        layer, per GPU), gathered whole beside their shard where :attr:`non_units_gathered` and
        ``replicas`` > 1; else 0. Element-wise for arrays.

        >>> from trainplan.model.mechanisms import Framework, mechanism
        >>> mechanism("megatron", 3).non_unit_gathered(800, 8), mechanism("fsdp2", 3).non_unit_gathered(800, 8)
        (1600, 0)
        """
        if not self.non_units_gathered:
            return 0
        return where(replicas > 1, self.weight_bytes * elements, 0 * elements)

    def embedding_grad_extra(self, embedding: Any) -> Any:
        """Gradient bytes beyond :attr:`grads_full` of ``embedding`` elements (whole on the
        GPU) where the mechanism keeps the embeddings' gradients wider than the others
        (:attr:`embedding_grad_bytes`); 0 otherwise.

        >>> from trainplan.model.mechanisms import Framework, mechanism
        >>> m = mechanism("megatron", 1, gradient_bytes=2, distributed_optimizer="distributed_fused_adam")
        >>> m.embedding_grad_extra(100), mechanism("megatron", 1).embedding_grad_extra(100)
        (200, 0)
        """
        extra = self.embedding_grad_bytes - self.grads_full
        return extra * embedding if self.embedding_grad_bytes and extra > 0 else 0

    @property
    def forward_regathers(self) -> bool:
        """Whether a forward frees each unit it gathered, so that a forward-only pass gathers
        every unit again each micro-batch (ZeRO-3's gather for forward and backward;
        :attr:`regathers_after_forward`).

        >>> from trainplan.model.mechanisms import mechanism
        >>> mechanism("fsdp2", 3, pipelined=True).forward_regathers
        True
        >>> mechanism("fsdp2", 2).forward_regathers, mechanism("fsdp2", 2, pipelined=True).forward_regathers
        (False, False)
        """
        return self.gathers_per_microbatch >= 2 or self.regathers_after_forward

    def traffic_terms(self) -> tuple[int, int]:
        """(bytes per parameter sent once per step, bytes per parameter sent per micro-batch),
        each to be multiplied by ``(D − 1)/D · P`` (ring collectives; an all-reduce moves twice
        the reduce-scatter's bytes).

        Examples
        --------
        Megatron's distributed optimizer: reduce-scatter of FP32 gradients and all-gather of the
        bf16 weights, once per step: 4 + 2.

        >>> from trainplan.model.mechanisms import Framework, mechanism
        >>> mechanism(Framework.MEGATRON, 1).traffic_terms()
        (6, 0)
        """
        reduce = self.reduce_bytes * (2 if self.all_reduce else 1)
        per_step = self.weight_bytes * self.gathers_per_step
        per_mb = self.weight_bytes * self.gathers_per_microbatch
        if self.reduce_per_microbatch:
            per_mb += reduce
        else:
            per_step += reduce
        return per_step, per_mb


def whole_unit_queue_elements(size: Any, first: Any, layers: Any, capacity: Any) -> Any:
    """Gradient elements alive at once in Megatron-FSDP's backward on one GPU of a stage whose
    ``layers`` transformer layers are each one bucket of ``size`` elements (padded), behind
    head buckets of ``first`` elements, under a reduce-scatter queue of ``capacity`` elements
    (:meth:`Mechanism.reduce_queue_elements`). Element-wise for arrays; exact for Fractions.

    The queue: a unit's bucket exists from its first gradient until popped; before a finished
    bucket is queued, buckets are popped (oldest first) while the queued ones' allocated
    (padded) sizes exceed ``C = max(floor, 2·unit)``, ``unit`` at its parameters' elements (the
    mean unit: a stage's layers are alike). So ``n = ⌊C / size⌋`` stay queued after a drain and
    ``n + 2`` are alive while the next layer fills: three where ``C = 2·unit`` and the padding
    adds anything, four only where it adds none. The buckets outside the layers
    (:func:`model.megatron_fsdp_buckets.non_unit_buckets`) reduced first wait at the head
    beside ``j = ⌊(C − first) / size⌋ + 1`` layers (none where ``first > C``), popped when the
    next is queued: ``first + (j + 1)·size``; no more layers than the stage holds.

    >>> whole_unit_queue_elements(1_000_000_000, 0, 80, 2_000_000_000)  # two queued + 2
    4000000000
    >>> whole_unit_queue_elements(200_000_000, 0, 80, 1_000_000_000)  # five queued + 2
    1400000000
    >>> whole_unit_queue_elements(1_000_000_000, 0, 3, 2_000_000_000)  # three layers only
    3000000000
    >>> whole_unit_queue_elements(300_000_000, 100_000_000, 80, 1_000_000_000)  # output + 4 + 1
    1600000000
    >>> whole_unit_queue_elements(1_000_000_064, 0, 80, 2_000_000_000)  # padded: one queued + 2
    3000000192
    """
    some = maximum(size, 1)
    steady = minimum(capacity // some + 2, layers) * size
    with_first = where(first > capacity, 0, (capacity - first) // some + 1)
    head = first + minimum(with_first + 1, layers) * size
    return maximum(steady, head)


def moe_queue_elements(
    unit: Any, expert: Any, first: Any, layers: Any, capacity: Any, single: Any = True
) -> Any:
    """Gradient elements Megatron-FSDP's reduce-scatter queue, the buckets being filled and
    those at its head hold at once on one GPU of a stage whose ``layers`` MoE layers each hold
    ``unit`` elements, ``expert`` of them routed-expert parameters, behind head buckets of
    ``first`` elements, under a queue of ``capacity`` elements (``suggested_RS_queue_
    capacity``): :meth:`Mechanism.reduce_queue_elements` for a MoE stage. Element-wise for
    arrays; exact for Fractions.

    The code (Megatron-LM ``megatron_fsdp/param_and_grad_buffer.py``, d98e8a64dd):
    ``_get_parameter_groups`` keys the buckets by dtype, ``is_expert_param`` (``".experts."`` in
    the name: the routed experts; the router, shared experts, attention and norms are dense)
    and FSDP unit, and step 4 makes each (unit, expert or not) pair one bucket group; ``Grad
    ReducePipeline.reduce_gradients`` reduces a group once all its parameters' gradients are in,
    first draining the queue (``wait_for_previous_grad_reduce``: pop the oldest bucket while the
    queued buckets exceed ``capacity``), then queueing its buckets. A layer's backward fills its
    expert group ``E = expert`` and queues it before its attention completes the dense group
    ``D = unit − E``; ``D`` is counted as allocated while ``E`` fills (the router's and the
    shared experts' gradients may arrive first). What the queue keeps after a drain is the longest run of the latest groups within
    ``capacity`` (``E, D, E, …``), so at the expert group's drain ``(j + 2)·unit`` (``j·unit + E``
    ≤ capacity, ``j`` ≤ layers − 2) or ``(j + 1)·unit + D`` (``j·unit`` ≤ capacity) are alive,
    at the dense group's ``(j + 1)·unit`` or ``(j + 1)·unit + D`` (``j·unit + D`` ≤ capacity);
    while the whole history fits, ``first + i·unit`` at layer ``i`` (``first + (i − 1)·unit − D``
    ≤ capacity at its expert group's drain). The largest of these is the count where each group
    and the head are one bucket (``single``), the groups at their parameters' elements (the
    padding to a multiple of shard × chunk, :func:`model.megatron_fsdp_buckets.bucket_elements`,
    is not counted for MoE layers, as before).

    Otherwise (FP8 primary weights split a group by dtype; several head buckets) the queue's
    drain may stop inside a group, and the bound that holds however they split is counted: what
    the queue keeps after a drain is at most ``capacity`` and at most everything queued before,
    so ``max(first + unit, min(capacity, first + (L − 1)·unit − D) + D + unit,
    min(capacity, first + (L − 1)·unit) + unit)``.

    Mixtral 8x7B at dp 32 (E = 8 × 3 × 4,096 × 14,336 = 1,409,286,144, D = 41,984,000: unit
    1,451,270,144, capacity 2·unit): four units counted as whole items; with the groups apart
    ``3·unit + D`` (three expert groups and four dense ones).

    >>> u, e = 1_451_270_144, 1_409_286_144
    >>> moe_queue_elements(u, e, 131_076_096, 32, 2 * u) == 3 * u + (u - e)
    True
    >>> moe_queue_elements(u, e, 131_076_096, 32, 2 * u, single=False) == 3 * u + (u - e)
    True
    >>> moe_queue_elements(u, e, 0, 1, 2 * u) == u  # one layer: its two groups
    True
    """
    d = unit - expert
    exact = _moe_exact(unit, expert, d, first, layers, capacity)
    bound = maximum(
        first + unit,
        maximum(
            where(layers > 1, minimum(capacity, first + (layers - 1) * unit - d) + d + unit, 0),
            minimum(capacity, first + (layers - 1) * unit) + unit,
        ),
    )
    return where(single, exact, bound)


def _moe_exact(unit: Any, expert: Any, d: Any, first: Any, layers: Any, capacity: Any) -> Any:
    """:func:`moe_queue_elements` where every bucket group and the head are one bucket."""
    some = maximum(unit, 1)
    two = maximum(layers - 2, 0)
    j_even, j_odd, j_dense = capacity // some, (capacity - expert) // some, (capacity - d) // some
    expert_drain = where(
        layers > 1,
        maximum((minimum(j_even, two) + 1) * unit + d, (minimum(j_odd, two) + 2) * unit),
        0,
    )
    dense_drain = maximum(
        (minimum(j_even, layers - 1) + 1) * unit,
        where(layers > 1, (minimum(j_dense, two) + 1) * unit + d, 0),
    )
    fits = minimum(layers, maximum((capacity - first + d) // some + 1, 1))
    return maximum(first + fits * unit, maximum(expert_drain, dense_drain))
