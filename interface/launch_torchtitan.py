"""The parts of :func:`interface.launch.torchtitan_toml` that read the recipe and the context
parallelism: ``[parallelism] context_parallel_rotate_method`` (:func:`torchtitan_cp`) and
``[compile] enable`` with the pipeline runtime's settings torchtitan has no key for
(:func:`torchtitan_recipe`)."""

from __future__ import annotations

from trainplan.model.context_parallel import torch_rotate_method
from trainplan.model.elementwise import Elementwise, elementwise_mode
from trainplan.model.layout import Layout
from trainplan.model.specs import TrainingSpec

__all__ = ["torchtitan_cp", "torchtitan_recipe"]


def torchtitan_cp(layout: Layout, notes: list[str]) -> list[str]:
    """torchtitan's ``context_parallel_rotate_method`` for ``layout`` at cp > 1: its two values
    (``"allgather"``, the default, and ``"alltoall"``; ``Parallelism`` in
    ``torchtitan/config/job_config.py`` at 248aca2) select PyTorch's ``context_parallel``
    rotater, which is all torchtitan runs. A flavour it has not (Transformer Engine's, Llama 3's
    all-gather of K and V counted as Transformer Engine's, verl's Ulysses) is written as the
    default torchtitan would run anyway, ``"allgather"``, and said in ``notes``: the run's
    memory and time are the plan's with ``cp_kind`` pytorch-allgather, not this plan's."""
    if layout.cp == 1:
        return []
    rotate = torch_rotate_method(layout.cp_kind)
    if not rotate:
        rotate = "allgather"
        notes.append(
            f"cp_kind {layout.cp_kind}: torchtitan has no such context parallelism; it runs "
            "PyTorch's context_parallel, written with its all-gather rotation (cp SDPA calls "
            "merged in FP32): plan it with cp_kind pytorch-allgather for that run's figures"
        )
    return [f'context_parallel_rotate_method = "{rotate}"']


def torchtitan_recipe(layout: Layout, training: TrainingSpec, notes: list[str]) -> list[str]:
    """``[compile] enable`` as the plan counted it; the pipeline runtime's memory settings,
    which torchtitan has no key for, said in ``notes``."""
    compiled = elementwise_mode(layout.framework, training.compile) is Elementwise.COMPILED
    if layout.pp > 1 and training.pipeline_frees_stage_tensors:
        notes.append(
            "pipeline_frees_stage_tensors true: torchtitan has no setting for it "
            "(torch.distributed.pipelining keeps each stage's inputs and outputs until their "
            "backward); the plan's memory assumes a runtime that frees them, as Meta's for Llama 3"
        )
    if layout.pp > 1:
        kept = "keeps" if training.pipeline_keeps_outputs else "keeps no"
        notes.append(
            f"pipeline_keeps_outputs {str(training.pipeline_keeps_outputs).lower()}: torchtitan "
            "has no setting for it; its trainer keeps every micro-batch's logits until "
            "e5ef99aab (2025-10-22) and none since; the plan's last stage "
            f"{kept} logits"
        )
    return ["[compile]", f"enable = {'true' if compiled else 'false'}"]
