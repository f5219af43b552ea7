"""Phases outside forward, backward and the optimizer step that can hold more than the step.

* **Model construction under ZeRO-3 without partitioned initialisation.** DeepSpeed builds the
  model the user hands it. Unless it was built inside ``deepspeed.zero.Init``
  (``deepspeed/runtime/zero/partition_parameters.py``, class ``Init``), its parameters carry no
  ``ds_id``, and ``DeepSpeedEngine._configure_distributed_model`` (``deepspeed/runtime/
  engine.py``) casts the whole module to bf16 (``self.module.bfloat16()``) and moves it to the
  GPU (``self.module.to(self.device)``: "zero.Init() handles device placement of model" applies
  only to a zero-init model). ZeRO-3 partitions it only afterwards
  (``DeepSpeedZeRoOffload._convert_to_zero_parameters`` in ``parameter_offload.py`` runs
  ``Init(module=module)`` on the built module). For that moment every rank holds a whole copy of
  its (tensor- and pipeline-parallel) part of the model in the working dtype:
  :func:`construction_peak_bytes`. Under ZeRO-1 and -2 the whole working copy is the steady
  state anyway. torchtitan (``fsdp2``) builds under ``torch.device("meta")`` and materialises
  only the shards (``model.to_empty(device=...)`` then ``init_weights()`` after
  ``fully_shard``; ``train.py`` at 9dec370); Megatron-Core creates each rank's tensor- and
  pipeline-parallel part directly, which is its steady state.
* **Checkpoint saves.** The asynchronous savers stage a copy of the rank's state in host memory
  (Megatron-Core's ``--async-save``, ``megatron/core/dist_checkpointing/strategies/
  async_utils.py``; torchtitan's ``async_mode = "async_with_pinned_mem"``, DCP's
  ``DefaultStager``): :func:`checkpoint_staging_host_bytes`. The synchronous savers write the
  rank's shards from the GPU without gathering them (``torch.distributed.checkpoint`` saves
  DTensors shard by shard; Megatron's ``dist_checkpointing`` saves sharded tensors), so no GPU
  phase is larger than the step.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import Framework

__all__ = ["construction_peak_bytes", "checkpoint_staging_host_bytes"]


def construction_peak_bytes(
    framework: Framework | str,
    zero_stage: int,
    params: Any,
    weight_bytes: int = 2,
    partitioned_init: bool = False,
) -> Any:
    """GPU bytes per rank while the model is built, before ZeRO-3 partitions it:
    ``weight_bytes · params`` (``params`` the parameters on this GPU after tensor, pipeline and
    expert parallelism, before ZeRO) for ``deepspeed`` at ZeRO-3 without ``partitioned_init``
    (``deepspeed.zero.Init``); 0 where the phase holds no more than the step (every other
    profile and stage; see the module docstring). Exact for Fractions; element-wise for arrays.

    Examples
    --------
    Llama 3 70B at tp 8, bf16: 70.6e9 / 8 parameters × 2 B = 17.6 GB on every rank, whatever
    the data-parallel degree.

    >>> construction_peak_bytes("deepspeed", 3, 70_553_706_496 // 8)
    17638426624
    >>> construction_peak_bytes("deepspeed", 3, 10**9, partitioned_init=True)
    0
    >>> construction_peak_bytes("fsdp2", 3, 10**9)
    0
    """
    whole = Framework(framework) is Framework.DEEPSPEED and zero_stage == 3
    return weight_bytes * params if whole and not partitioned_init else 0


def checkpoint_staging_host_bytes(state_bytes: Any, gradient_bytes: Any) -> Any:
    """Host bytes per GPU an asynchronous checkpoint save stages: the rank's model state less
    its gradients (the working weights, the master weights and the optimizer's moments, as the
    rank holds them: ``state_bytes`` the model state on the GPU, ``gradient_bytes`` its
    gradients). 0 for a synchronous save (nothing is staged).

    Examples
    --------
    >>> checkpoint_staging_host_bytes(16_000, 2_000)
    14000
    """
    return state_bytes - gradient_bytes
