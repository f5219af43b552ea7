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
"""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.xp import where

__all__ = ["reduce_waiting_share"]


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
