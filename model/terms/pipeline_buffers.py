"""The pipeline stage's boundary tensors a GPU keeps beside its layers' activations: stage
outputs left after the send (:func:`pipeline_outputs`) and PyTorch's pipeline receive buffers
(:func:`torch_recv_buffers`), as the activation term (:mod:`model.terms.activations`) adds them.
Written once over a layout's fields (:mod:`model.terms.fields`)."""

from __future__ import annotations

from typing import Any

from trainplan.model.loss_memory import output_chunks_bytes
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.terms.activation_fields import output_stage
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.xp import where

__all__ = ["pipeline_outputs", "torch_recv_buffers", "torch_pipelining"]


def pipeline_outputs(arch: Architecture, c: Context, f: Fields, tokens: Any) -> Any:
    """Bytes of the stage outputs one micro-batch leaves on this GPU when they are not
    deallocated after the send: one ``β·S·h`` tensor (÷ tp with sequence parallelism) per model
    chunk that sends (v on every stage but the last, v − 1 there).

    The output of a pipeline stage is sent to the next stage, but autograd keeps the tensor for
    the backward pass; only its ``grad_fn`` is needed. Megatron-LM's
    ``deallocate_pipeline_outputs`` (``megatron/core/pipeline_parallel/schedules.py``,
    ``deallocate_output_tensor``) replaces its data with a scalar after the send; Korthikanti et
    al. 2022 (arXiv 2205.05198) Appendix B shows the saving on the 530B model's first stage, and
    Llama 3 (arXiv 2407.21783) §3.3.2 deallocates stage inputs and outputs the same way.
    Under ``fsdp2`` nothing deallocates them: PyTorch's ``_PipelineStageBase.forward_one_chunk``
    (``torch/distributed/pipelining/stage.py``) keeps each chunk's ``output_tuple`` in
    ``fwd_cache`` until ``backward_one_chunk`` pops it for ``stage_backward``.
    """
    one = c.training.activation_bytes * tokens * arch.hidden_size / where(f.sp, f.tp, 1)
    v = f.virtual_stages
    senders = where(output_stage(f), v - 1, v)
    torch_pp = f.lookup(torch_pipelining, (c.training,), "framework")
    dealloc = where(torch_pp == 1, False, f.deallocate_pipeline_outputs)
    kept = where(dealloc, 0, 1) * where(f.pp == 1, 0, 1)
    return kept * one * senders


def torch_recv_buffers(arch: Architecture, c: Context, f: Fields, tokens: Any) -> Any:
    """Bytes of the receive buffers PyTorch's pipeline stages allocate once and keep, under
    ``fsdp2`` with pp > 1: ``PipelineStage._prepare_forward_infra`` makes one activation buffer
    per micro-batch (``args_recv_info[chunk_id]``, ``_make_tensor_from_meta``) on every stage but
    the first, ``_prepare_backward_infra`` one gradient buffer per micro-batch
    (``grad_recv_info[mb_index]``, ``_create_grad_recv_info``) on every stage but the last
    (``torch/distributed/pipelining/stage.py``). Each is a stage boundary tensor, ``β·S·h`` (÷ tp
    with SP); a rank holds ``v`` stages. 0 for the other profiles (Megatron-Core receives into
    tensors it allocates per message)."""
    one = c.training.activation_bytes * tokens * arch.hidden_size / where(f.sp, f.tp, 1)
    v = f.virtual_stages
    first, last = f.stage == 0, output_stage(f)
    stages = where(first, v - 1, v) + where(last, v - 1, v)
    torch_pp = f.lookup(torch_pipelining, (c.training,), "framework")
    return torch_pp * where(f.pp == 1, 0, 1) * f.m * one * stages


def torch_pipelining(training: TrainingSpec, framework: Any) -> int:
    """1 where the profile runs PyTorch's pipeline schedules (``fsdp2``, as torchtitan does),
    which keep their stage outputs and receive buffers, and where the trainer asks for them
    (:attr:`model.specs.TrainingSpec.pipeline_keeps_outputs`) the last stage's outputs until the
    next step (:func:`model.loss_memory.output_chunks_bytes`: ``output_chunks``), else 0; 0 also
    where the recipe's runtime frees them (:attr:`model.specs.TrainingSpec.pipeline_frees_stage_tensors`)."""
    if training.pipeline_frees_stage_tensors:
        return 0
    return 1 if output_chunks_bytes(framework, 2, 1, 1, 1, 1, 1) else 0
