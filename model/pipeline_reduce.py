"""Where a pipeline stage's once-per-step gradient reduction runs when the schedule launches it
after the stage's last backward rather than under it: FSDP2's reduce-scatter under PyTorch's
pipeline schedules, and Megatron-Core's interleaved schedule with ``align_grad_reduce``.

Sources (PyTorch 2.13, ``torch/distributed/pipelining`` and ``torch/distributed/fsdp/
_fully_shard``):

* ``_PipelineStageBase.backward_maybe_with_nosync`` (``stage.py``) calls
  ``set_requires_gradient_sync(False)`` before every micro-batch's backward, the last one
  included, so no backward hook reduces anything.
* ``perform_reduce_grad`` (``stage.py``; "REDUCE_GRAD action is scheduled after all
  microbatches W, B actions") turns the sync back on, calls every FSDP parameter group's
  ``post_backward()`` (the reduce-scatters, on FSDP's reduce-scatter stream) and then
  ``_root_post_backward_final_callback()`` (``_fsdp_state.py``), whose
  ``FSDPParamGroup.finalize_backward`` (``_fsdp_param_group.py``) and the retained
  reduce-scatter states make the compute stream wait on their events: nothing the stage
  computes after it can start before its gradients are reduced.
* A one-chunk schedule (``ScheduleGPipe``, ``Schedule1F1B``, ``schedules.py``
  ``_step_microbatches``) calls it once, after waiting for the last backward's sends. The first
  stage runs the step's last backward (the last micro-batch's gradient reaches it last), so its
  reduce-scatter follows the pipeline's last computation with nothing to hide under; a later
  stage ``s`` finishes ``s`` backwards earlier and its own reduce-scatter ends before the first
  stage's when the stages are equal. The whole reduction waits.
* A multi-chunk schedule (``_PipelineScheduleRuntime``: ``ScheduleInterleaved1F1B``,
  ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV``) lowers its actions through
  ``_add_reduce_grad``, one ``REDUCE_GRAD`` per chunk right after that chunk's last backward
  (B or W). The first rank runs the step's last backward, its first stage's: that chunk's
  reduce-scatter, ``1/v`` of the rank's, waits whole. The rank's other chunks reduce while it
  still has backwards to run; they are charged as the other once-per-step traffic
  (:func:`model.step_time.dp_exposed_seconds`), a lower figure: the compute stream waits for
  each of them too, so they are hidden only where the rank would idle anyway (its cool-down
  gaps).

Megatron-Core (NVIDIA/Megatron-LM d98e8a64dd, ``megatron/core/pipeline_parallel/schedules.py``),
with ``overlap_grad_reduce``:

* ``megatron/training/training.py`` (l. 4356) sets ``config.grad_sync_func`` to each model
  chunk's ``start_grad_sync`` whenever ``align_grad_reduce`` is on, its default
  (``megatron/training/config/common_config.py``: ``align_grad_reduce: bool = True``; Megatron
  Bridge 97ad8cc6f ``src/megatron/bridge/training/setup.py`` the same).
* The interleaved schedule (``forward_backward_pipelining_with_interleaving``) keeps the
  gradient sync disabled through every backward when ``grad_sync_func`` is set
  (``backward_step_helper_preprocess`` enables it only when it is None), so no bucket's
  reduction starts from a backward hook (``param_and_grad_buffer.py`` ``register_grad_ready``
  starts a bucket only when ``is_last_microbatch``). ``backward_step_helper_postprocess``
  launches a chunk's ``grad_sync_func`` — all its buckets at once — ``pipeline_parallel_rank``
  virtual micro-batches after that chunk's last backward ("we launch asynchronous
  communication at the same time across the pipeline-parallel group"), and the chunks still
  unsynchronised at the end are launched after the cool-down ("Launch any remaining grad
  reductions"). Pipeline rank 0 launches each chunk's reduction right after its last backward;
  its model chunk 0 runs the step's last backward, so that chunk's reduction, ``1/v`` of the
  rank's, waits whole, as under FSDP2. On a later rank ``r`` chunk 0's launch falls past the
  last backward and goes with the remaining ones, right after that rank's last backward, which
  ends about ``r`` backwards before rank 0's: for equal stages it ends no later than rank 0's.
* The one-chunk schedule (``forward_backward_pipelining_without_interleaving``) enables the
  sync for the last micro-batch's backward on the first stage (``grad_sync_first_stage``), so
  its buckets reduce under that backward (the overlap :func:`model.step_time.dp_exposed_seconds`
  charges); the other stages launch theirs after their own last backward, earlier than the
  first stage's end. Megatron-LM runs ``interleaved`` at ``v = 1`` as that schedule
  (``megatron/training/arguments.py`` sets ``virtual_pipeline_model_parallel_size = 1`` to
  None).

Not counted: rank 0's chunk 0 also holds the input embedding, whose gradient reduces in the
same launch; the share here is the stage's ``1/v`` (its layers' share).

The parameters' all-gathers of the next step (the distributed optimizer's, with
``--overlap-param-gather``) follow the same alignment under the interleaved schedule
(:func:`chunked_param_gathers`), Megatron-LM d98e8a64dd:

* ``megatron/training/training.py`` (l. 4360) sets ``config.param_sync_func`` to each model
  chunk's ``start_param_sync`` where ``overlap_param_gather`` and ``align_param_gather`` (its
  default; ``arguments.py`` turns it off only without a virtual pipeline). NeMo's distributed
  Adam hands the schedule its own ``param_sync_func`` alike (NeMo 24.07, Megatron-Core
  338af514: the same schedule code, below).
* ``forward_backward_pipelining_with_interleaving`` (``schedules.py``) calls
  ``param_sync_func`` for chunks 0 and 1 before the first forward ("Synchronize params for
  first two model chunks"), and ``forward_step_helper_preprocess`` launches chunk ``k + 1``'s
  (``1 < k + 1 < v``) where virtual micro-batch ``id + pipeline_parallel_rank`` is chunk
  ``k``'s first: on rank 0 as chunk ``k``'s first forward starts, ``r`` forwards earlier on
  rank ``r``. ``start_param_sync`` (``distributed_data_parallel.py``) dispatches all the
  chunk's buckets at once; the forward pre-hook (``_make_forward_pre_hook`` →
  ``finish_param_sync(skip_next_bucket_dispatch=True)`` under ``align_param_gather``) waits for
  each bucket as its module's forward starts.
* A chunk's first forward is its first micro-batch's: micro-batches run in groups of
  ``microbatch_group_size_per_vp_stage`` (``pp`` by default) per chunk, so chunk ``k + 1``'s
  first forward comes ``pp`` chunk-forwards after chunk ``k``'s, all in the warm-up (``(v − 1)
  · pp + 2(pp − r − 1)`` forwards before the first backward). Each later chunk's gathers
  therefore have ``pp`` chunk-forwards of rank 0 to hide under; chunk 1's ``pp − 1`` (chunk
  0's other micro-batches, its gathers queued behind chunk 0's on the group's stream);
  chunk 0's only its own first forward, bucket by bucket.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.xp import where

__all__ = ["reduce_waiting_share", "chunked_param_gathers"]


def reduce_waiting_share(framework: str, pp: Any, virtual_stages: Any) -> Any:
    """The share of a stage's once-per-step gradient reduction that waits whole after its last
    backward (module docstring): ``1/v`` for FSDP2 under a pipeline schedule (``pp > 1``) and for
    Megatron-Core's interleaved schedule (``v > 1``; its ``align_grad_reduce`` launch), 0
    elsewhere (Megatron-Core's one-chunk schedule and DeepSpeed reduce under the last
    micro-batch's backward, FSDP2 at ``pp = 1`` too, or they wait whole by
    :func:`model.comm.grad_reduce_overlaps`). Element-wise in ``pp`` and ``virtual_stages``.

    >>> reduce_waiting_share("fsdp2", 4, 1), reduce_waiting_share("fsdp2", 8, 2)
    (1.0, 0.5)
    >>> reduce_waiting_share("fsdp2", 1, 1), reduce_waiting_share("megatron", 8, 1)
    (0.0, 0.0)
    >>> reduce_waiting_share("megatron", 4, 8), reduce_waiting_share("deepspeed", 8, 1)
    (0.125, 0.0)
    """
    if framework == Framework.FSDP2:
        return where(pp > 1, 1.0 / virtual_stages, 0.0)
    if framework == Framework.MEGATRON:
        return where((pp > 1) & (virtual_stages > 1), 1.0 / virtual_stages, 0.0)
    return 0.0


def chunked_param_gathers(framework: str, pp: Any, virtual_stages: Any) -> Any:
    """Whether a stage's once-per-step parameter all-gathers run chunk by chunk under the
    interleaved schedule's forwards (module docstring: Megatron-Core's ``param_sync_func``
    with ``align_param_gather``), :func:`model.dp_exposure.interleaved_gather_seconds`: under
    ``megatron`` at ``pp > 1`` and ``v > 1``; elsewhere they overlap as the other once-per-step
    traffic (:func:`model.dp_exposure.dp_exposed_seconds`). Element-wise in ``pp`` and
    ``virtual_stages``.

    >>> chunked_param_gathers("megatron", 8, 6), chunked_param_gathers("megatron", 8, 1)
    (True, False)
    >>> chunked_param_gathers("fsdp2", 8, 2), chunked_param_gathers("deepspeed", 8, 1)
    (False, False)
    """
    if framework == Framework.MEGATRON:
        return (pp > 1) & (virtual_stages > 1)
    return False
