"""Activation offload's tensors still on the GPU beside the layer never offloaded
(:mod:`model.activation_offload`): the device→host copies not yet finished when a forward
ends, and the layer a backward pre-reloads for the next micro-batch. Source: Megatron-LM
d98e8a64dd ``megatron/core/pipeline_parallel/fine_grained_activation_offload.py``; PyTorch's
caching allocator ``c10/cuda/CUDACachingAllocator.cpp``. Units: bytes on one GPU, seconds.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.xp import maximum, where

__all__ = ["copy_excess_bytes", "offload_backlog_bytes", "prefetched_layers"]


def copy_excess_bytes(per_layer: Any, forward_s: Any, link_bytes_per_s: float) -> Any:
    """Bytes of a layer's device→host copy (``per_layer``) that the next layer's forward
    (``forward_s``) does not cover at ``link_bytes_per_s``: ``max(0, x − t_f·B)``. The copy
    stream's backlog grows by this much per layer (:func:`offload_backlog_bytes`) and the
    forward's exposed copy time is it ÷ B
    (:func:`model.activation_offload.activation_offload_seconds`). Exact for
    numbers; element-wise for arrays.

    >>> copy_excess_bytes(457e6, 3.6e-3, 64e9), copy_excess_bytes(100e6, 3.6e-3, 64e9)
    (226600000.0, 0.0)
    """
    return maximum(per_layer - forward_s * link_bytes_per_s, 0 * per_layer)


def offload_backlog_bytes(
    per_layer: Any, layers: Any, offloaded: Any, forward_s: Any, link_bytes_per_s: float
) -> Any:
    """Bytes of offloaded tensors whose device→host copy has not finished when a micro-batch's
    forward over ``layers`` layers ends, of which the first ``offloaded`` offload ``per_layer``
    bytes each, one layer's forward taking ``forward_s``.

    Megatron-LM d98e8a64dd ``megatron/core/pipeline_parallel/fine_grained_activation_offload.py``:
    ``ChunkOffloadHandler.bulk_offload_group`` queues each group's copies on the ``d2h_stream``
    at the end of its module's forward and calls ``record_stream(d2h_stream)`` on every GPU
    tensor before dropping it; nothing bounds the copies in flight unless
    ``fine_grained_offloading_max_inflight_offloads`` is set (``_drain_offload_pending`` returns
    at once for its default, None, and the planner's launch line sets none). PyTorch's caching
    allocator (``c10/cuda/CUDACachingAllocator.cpp``, ``DeviceCachingAllocator::free``) keeps a
    block freed with stream uses out of its pool until an event recorded on that stream at the
    free completes (``insert_events``, ``process_events``): the storage stays on the GPU until
    its copy is done. (Only an allocation that fails waits for every such event,
    ``release_cached_blocks`` → ``synchronize_and_free_events``, and then returns to the driver
    only segments that are not split — no bound to plan on.)

    The copies form a queue served at ``B`` = ``link_bytes_per_s``: layer i's (x bytes)
    arrives when its forward ends, at ``i·t_f``. At ``n·t_f`` what is still queued is the
    largest, over the starting layer i, of the bytes since i less what the link carried since:
    ``max(0, x − (n − L)·t_f·B) + (L − 1)·max(0, x − t_f·B)`` for ``L`` = ``offloaded``
    (:func:`copy_excess_bytes`) — the last offloaded layer's copy, less what the layers after it
    cover, and the backlog of the others. ``L`` = n where the last layer is offloaded, n − 1
    where Megatron keeps it (``should_bulk_offload``: the group about to be used at once, on the
    stage whose backward follows its forward). 0 where no layer offloads. Exact for numbers;
    element-wise for arrays.

    Examples
    --------
    6 layers of 0.457 GB at 64 GB/s, 3.6 ms of forward each (0.2304 GB carried per layer):
    the last layer's 0.457 GB plus 5 × 0.2266 GB of backlog; with the last layer kept,
    5 × 0.2266 GB; copies faster than the forward leave only the last one's.

    >>> round(offload_backlog_bytes(457e6, 6, 6, 3.6e-3, 64e9) / 1e9, 4)
    1.59
    >>> round(offload_backlog_bytes(457e6, 6, 5, 3.6e-3, 64e9) / 1e9, 4)
    1.133
    >>> offload_backlog_bytes(100e6, 6, 6, 3.6e-3, 64e9), offload_backlog_bytes(100e6, 6, 0, 1, 1)
    (100000000.0, 0)
    """
    drained = forward_s * link_bytes_per_s
    last = maximum(per_layer - (layers - offloaded) * drained, 0 * per_layer)
    backlog = last + (offloaded - 1) * copy_excess_bytes(per_layer, forward_s, link_bytes_per_s)
    return where(offloaded > 0, backlog, 0)


def prefetched_layers(pipelined: Any, last_stage: Any, steady: Any) -> Any:
    """Layers of a later micro-batch reloaded before its backward and held through the forward
    that reaches the stage's peak: 1 on a stage that is not the last of a pipeline (pp > 1)
    and runs a backward before a forward while its peak's micro-batches are held (``steady``:
    more micro-batches than it holds in flight, and not GPipe), else 0.

    ``ChunkOffloadHandler.bulk_reload`` (Megatron-LM d98e8a64dd ``fine_grained_activation_
    offload.py``): when a backward has reloaded all its own groups it pre-reloads the last layer
    of the next backward chunk (``pre_reload_last_layer``) if that micro-batch has finished its
    forward — on a stage with micro-batches in flight, the next one in 1F1B order; its tensors
    stay on the GPU through the forward that follows. On the last stage the next backward chunk
    is the micro-batch not yet run forward, and the rule does not reload it.

    >>> prefetched_layers(True, False, True), prefetched_layers(True, True, True)
    (1, 0)
    """
    return where(pipelined, where(last_stage, 0, where(steady, 1, 0)), 0)
