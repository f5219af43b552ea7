"""Where FSDP2's once-per-step gradient reduce-scatter runs under PyTorch's pipeline schedules:
after the stage's last backward, with the compute stream waiting for it.

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
"""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.xp import where

__all__ = ["reduce_waiting_share"]


def reduce_waiting_share(framework: str, pp: Any, virtual_stages: Any) -> Any:
    """The share of a stage's once-per-step gradient reduction that waits whole after its last
    backward (module docstring): ``1/v`` for FSDP2 under a pipeline schedule (``pp > 1``), 0
    elsewhere (Megatron-Core, DeepSpeed and FSDP2 at ``pp = 1`` reduce under the last
    micro-batch's backward, or wait whole by :func:`model.comm.grad_reduce_overlaps`).
    Element-wise in ``pp`` and ``virtual_stages``.

    >>> reduce_waiting_share("fsdp2", 4, 1), reduce_waiting_share("fsdp2", 8, 2)
    (1.0, 0.5)
    >>> reduce_waiting_share("fsdp2", 1, 1), reduce_waiting_share("megatron", 8, 1)
    (0.0, 0.0)
    """
    if framework != Framework.FSDP2:
        return 0.0
    return where(pp > 1, 1.0 / virtual_stages, 0.0)
