"""``tp_block_inputs``: which tensor-parallel plan a recipe under the ``fsdp2`` profile ran (and
:func:`check_pipeline_frees_stage_tensors`, the other ``fsdp2``-only runtime choice).

With tp > 1 and sequence parallelism, each attention and MLP block all-gathers its input from the
tp ranks' sequence shards before the column-parallel QKV and FC1 projections. What autograd keeps
for backward is the framework's mechanism (docs/memory-mechanisms.md, "Tensor parallelism: the
shard or the gathered tensor"):

* ``gathered``: the all-gathered ``[S, h]`` input, whole on every tp rank — torchtitan's DTensor
  plan (``torchtitan/models/common/decoder_sharding.py``: ``SequenceParallel`` norms, the block's
  input redistributed to ``Replicate()`` before ``ColwiseParallel``), the ``fsdp2`` profile's own
  (:attr:`model.frameworks.Framework.gathers_block_inputs`).
* ``sharded``: the local sequence shard, all-gathered again in backward — Megatron-style sequence
  parallelism (``megatron/core/tensor_parallel/layers.py``
  ``LinearWithGradAccumulationAndAsyncCommunication.forward``), as FSDP beside such a tensor
  parallelism runs it: Meta's Llama 3 stack (its published layouts fit only so).

The other profiles' tensor parallelism is fixed: ``megatron`` and ``deepspeed`` keep the shard,
``textbook`` is Korthikanti et al.'s count (the shard). The choice is refused there, with tp 1
(nothing is gathered) and with sequence parallelism off (every tp rank holds the whole input
either way): an option that does not apply is never silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainplan.model.errors import InputError, check_applicable
from trainplan.model.frameworks import Framework

__all__ = ["TP_BLOCK_INPUTS", "gathered_block_inputs", "check_tp_block_inputs"]

TP_BLOCK_INPUTS = ("sharded", "gathered")
"""The values of ``tp_block_inputs`` (``--tp-block-inputs``)."""


def gathered_block_inputs(value: Any) -> bool | None:
    """:attr:`model.specs.TrainingSpec.gathered_block_inputs` for ``tp_block_inputs``: False for
    ``sharded``; None for ``gathered`` and when not given — the framework's own, which is the
    gathered input under ``fsdp2``, the only profile the choice applies to
    (:func:`check_tp_block_inputs`), and the shard under every other profile a search may
    weigh beside it.

    Raises
    ------
    InputError
        A value other than ``sharded`` or ``gathered``.
    """
    if value is None:
        return None
    text = str(value).strip().lower()
    if text not in TP_BLOCK_INPUTS:
        raise InputError(f"tp_block_inputs: {value!r} is not one of {', '.join(TP_BLOCK_INPUTS)}")
    return None if text == "gathered" else False


def check_tp_block_inputs(
    value: Any,
    frameworks: Iterable[Framework],
    tps: Iterable[int],
    sequence_parallel: bool = True,
) -> None:
    """Refuse ``tp_block_inputs`` where it chooses nothing: no ``fsdp2`` among ``frameworks``
    (the profiles evaluated or searched), no tp degree above 1 among ``tps``, or sequence
    parallelism off.

    Raises
    ------
    InputError
        ``tp_block_inputs: 'sharded' does not apply: …``, naming the rule.
    """
    if value is None:
        return
    gathered_block_inputs(value)  # the value itself first
    frameworks = tuple(frameworks)
    names = ", ".join(str(f) for f in frameworks)
    keeps = "keeps" if len(frameworks) == 1 else "keep"
    check_applicable(
        {"tp_block_inputs": value if Framework.FSDP2 not in frameworks else None},
        {
            "tp_block_inputs": f"it chooses the fsdp2 profile's tensor-parallel plan, and "
            f"{names} {keeps} the sequence shard of the blocks' inputs, a mechanism of "
            f"{'its' if len(frameworks) == 1 else 'their'} own (add --framework fsdp2)"
        },
    )
    check_applicable(
        {"tp_block_inputs": value if max(tps, default=1) == 1 else None},
        {"tp_block_inputs": "with tp 1 there is no tensor parallelism and nothing to gather"},
    )
    check_applicable(
        {"tp_block_inputs": value if not sequence_parallel else None},
        {
            "tp_block_inputs": "with sequence parallelism off every tp rank holds the blocks' "
            "whole inputs either way"
        },
    )


def check_pipeline_frees_stage_tensors(
    value: Any,
    frameworks: Iterable[Framework],
    pps: Iterable[int],
    key: str = "pipeline_frees_stage_tensors",
) -> None:
    """Refuse ``pipeline_frees_stage_tensors = true`` (or ``key``, the other PyTorch-pipelining
    choice, ``pipeline_keeps_outputs``) where it changes nothing: no ``fsdp2``
    among ``frameworks`` (the profiles evaluated or searched: only PyTorch's pipeline schedules
    keep the stage tensors it frees, :attr:`model.specs.TrainingSpec.pipeline_frees_stage_tensors`),
    or no pp degree above 1 among ``pps``. False is every profile's default and passes.

    Raises
    ------
    InputError
        ``pipeline_frees_stage_tensors: true applies to …``, naming the rule.

    Examples
    --------
    >>> check_pipeline_frees_stage_tensors(True, (Framework.FSDP2,), (1, 2))
    >>> try:
    ...     check_pipeline_frees_stage_tensors(True, (Framework.MEGATRON,), (2,))
    ... except InputError as err:
    ...     print(err)
    pipeline_frees_stage_tensors: true applies to fsdp2 with pp > 1 (PyTorch's pipelining); megatron keeps no such tensors
    """
    if value is not True:
        return
    frameworks = tuple(frameworks)
    names = ", ".join(str(f) for f in frameworks)
    rule = f"{key}: true applies to fsdp2 with pp > 1 (PyTorch's pipelining); "
    if Framework.FSDP2 not in frameworks:
        keeps = "keeps" if len(frameworks) == 1 else "keep"
        raise InputError(f"{rule}{names} {keeps} no such tensors")
    if max(pps, default=1) == 1:
        raise InputError(f"{rule}with pp 1 there is no pipeline")
