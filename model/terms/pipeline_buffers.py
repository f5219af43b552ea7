"""The pipeline stage's boundary tensors a GPU keeps beside its layers' activations: stage
outputs left after the send (:func:`pipeline_outputs`) and PyTorch's pipeline receive buffers
(:func:`torch_recv_buffers`), as the activation term (:mod:`model.terms.activations`) adds them;
and the causal-mask tensors of DeepSpeed's pipeline engine (:func:`deepspeed_mask_bytes`,
:func:`deepspeed_load_transient`). Written once over a layout's fields
(:mod:`model.terms.fields`)."""

from __future__ import annotations

from typing import Any

from trainplan.model.comm import pipe_partitioned
from trainplan.model.frameworks import Framework
from trainplan.model.loss_memory import deepspeed_pipe_logits_bytes, output_chunks_bytes
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.terms.activation_fields import output_stage
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.value_head import logits_columns_of
from trainplan.model.xp import exact, maximum, minimum, where

__all__ = [
    "pipeline_outputs",
    "torch_recv_buffers",
    "torch_pipelining",
    "deepspeed_engine",
    "deepspeed_part_divisor",
    "deepspeed_kept_per_microbatch",
    "deepspeed_engine_buffers",
    "deepspeed_backward_rebuilt",
    "deepspeed_mask_bytes",
    "deepspeed_load_transient",
    "boundary_tensors",
]


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
    ``fwd_cache`` until ``backward_one_chunk`` pops it for ``stage_backward``. Under
    ``deepspeed`` the pipeline engine's own rule, whatever the layout's flag
    (:func:`deepspeed_kept_per_microbatch`).
    """
    one = _boundary(arch, c, f, tokens)
    v = f.virtual_stages
    senders = where(output_stage(f), v - 1, v)
    torch_pp = f.lookup(torch_pipelining, (c.training,), "framework")
    dealloc = where(torch_pp == 1, False, f.deallocate_pipeline_outputs)
    kept = where(dealloc, 0, 1) * where(f.pp == 1, 0, 1)
    ds = f.lookup(deepspeed_engine, (), "framework")
    ds_kept = deepspeed_kept_per_microbatch(arch, c, f, tokens)
    return where(ds == 1, ds_kept, kept * one * senders)


def _boundary(arch: Architecture, c: Context, f: Fields, tokens: Any) -> Any:
    """Bytes of one stage boundary tensor on this GPU: ``β·S·h``, ÷ tp with sequence
    parallelism."""
    return c.training.activation_bytes * tokens * arch.hidden_size / where(f.sp, f.tp, 1)


def deepspeed_engine(framework: Any) -> int:
    """1 under the ``deepspeed`` profile (:attr:`model.frameworks.Framework.DEEPSPEED`, a member
    or its value; DeepSpeed's ``PipelineEngine`` runs the pipeline), else 0.

    >>> deepspeed_engine(Framework.DEEPSPEED), deepspeed_engine("deepspeed"), deepspeed_engine("megatron")
    (1, 1, 0)
    """
    return 1 if Framework(framework) is Framework.DEEPSPEED else 0


def deepspeed_part_divisor(c: Context, f: Fields) -> Any:
    """What DeepSpeed's ``PipelineEngine`` divides a stage boundary tensor by before it keeps or
    sends it: tp where it partitions (:func:`model.comm.pipe_partitioned`: ``is_pipe_partitioned``
    and ``is_grad_partitioned`` need a model-parallel group, tp > 1, and a model that is not a
    mixture of experts), else 1. ``PartitionedTensor._partition_tensor``
    (``deepspeed/runtime/utils.py``) keeps a clone of this rank's ``numel/tp`` slice of the
    flattened tensor."""
    split = pipe_partitioned(Framework.DEEPSPEED, c.arch.moe is not None)
    return where(split & (f.tp > 1), f.tp, 1)


def deepspeed_kept_per_microbatch(arch: Architecture, c: Context, f: Fields, tokens: Any) -> Any:
    """Bytes DeepSpeed's ``PipelineEngine`` keeps on this GPU for one micro-batch between its
    forward and its backward, with pp > 1 (``deepspeed/runtime/pipe/engine.py``; ``one`` the
    stage boundary tensor, β·S·h ÷ tp with SP, ``part`` = one ÷ :func:`deepspeed_part_divisor`):

    * every stage but the last: ``part``, the output. ``_exec_forward_pass`` keeps the outputs in
      ``pipe_buffers['outputs'][buffer_id]`` until ``_exec_backward_pass`` sets it to None;
      where it partitions, it replaces the output's data by ``torch.zeros(1)`` and keeps
      ``part.data()``, this rank's slice, else the whole output;
    * every stage but the first, where it does not partition: ``one``, the received input.
      ``_exec_recv_activations`` stores ``recvd`` in ``pipe_buffers['inputs'][buffer_id]``
      (freed by ``_exec_send_grads``) and ``_exec_forward_pass`` runs the stage on
      ``inputs.clone()``, the tensor the first layer saves: the received copy is held beside it.
      Where it partitions, the buffer holds ``part_input.full()``, the very tensor the stage
      runs on (the first layer's saved input): nothing beside.

    The activation term multiplies this by the micro-batches in flight; 0 with pp = 1."""
    one = _boundary(arch, c, f, tokens)
    divisor = deepspeed_part_divisor(c, f)
    first, last = f.stage == 0, output_stage(f)
    kept = where(last, 0, one / divisor) + where(first | (divisor > 1), 0, one)
    return where(f.pp == 1, 0, kept)


def deepspeed_engine_buffers(c: Context, f: Fields, tokens: Any) -> Any:
    """Bytes of the receive buffers DeepSpeed's ``PipelineEngine`` allocates once and keeps for
    the whole run (both phases of the step), on one GPU, with pp > 1
    (``deepspeed/runtime/pipe/engine.py``; ``part`` as in :func:`deepspeed_kept_per_microbatch`):

    * every stage but the first: ``part``, ``pipe_recv_buf`` — ``_exec_recv_activations``
      allocates it from the first message's meta (``_recv_tensor_meta``) and receives every
      micro-batch into it (then clones);
    * every stage but the last: ``part``, the gradient buffer — ``_exec_recv_grads`` allocates
      ``grad_layer`` through ``_allocate_or_extend_buffers`` into ``_grad_layer_buf``, which it
      reuses for every micro-batch.

    Both are dropped only by ``reset_activation_shape``. On the last stage also the fp32 logits
    of ``min(m, 2)`` micro-batches that ``pipe_buffers['outputs']`` keeps there, never emptied
    (:func:`model.loss_memory.deepspeed_pipe_logits_bytes`). 0 under other profiles."""
    arch = c.arch
    one = _boundary(arch, c, f, tokens)
    part = one / deepspeed_part_divisor(c, f)
    first, last = f.stage == 0, output_stage(f)
    vocab = f.lookup(logits_columns_of, (arch, c.vocab_multiple), "framework", "tp")
    logits = deepspeed_pipe_logits_bytes(f.pp, f.m, tokens, vocab, f.tp)
    held = where(first, 0, part) + where(last, logits, part)
    ds = f.lookup(deepspeed_engine, (), "framework")
    return where((ds == 1) & (f.pp > 1), held, 0)


def deepspeed_backward_rebuilt(arch: Architecture, c: Context, f: Fields, tokens: Any) -> Any:
    """Bytes DeepSpeed's ``PipelineEngine`` rebuilds whole for the backward of one micro-batch
    on every stage but the last, where it partitions (:func:`deepspeed_part_divisor` > 1), with
    pp > 1: ``_exec_backward_pass`` (``deepspeed/runtime/pipe/engine.py``, DeepSpeed edaa72212)
    sets the kept output's data to ``part_output.full()`` and passes ``part_grad.full()`` as the
    gradient to ``backward``, two stage boundary tensors (β·S·h ÷ tp with SP, ``one`` of
    :func:`deepspeed_kept_per_microbatch`) beside the rank's slices, held until the stage's
    backward ends (``output_tensors[buffer_id] = None``, ``grad_tensors = None``): beside every
    layer's backward working set. 0 under other profiles."""
    one = _boundary(arch, c, f, tokens)
    ds = f.lookup(deepspeed_engine, (), "framework")
    split = (deepspeed_part_divisor(c, f) > 1) & (f.pp > 1) & (ds == 1)
    return where(split, where(output_stage(f), 0 * one, 2 * one), 0 * one)


def boundary_tensors(c: Context, f: Fields, tokens: Any, in_flight: Any) -> tuple[Any, Any]:
    """(the stage outputs kept for ``in_flight`` micro-batches and PyTorch's receive buffers,
    held with the layers: :func:`pipeline_outputs` × ``in_flight`` + :func:`torch_recv_buffers`;
    the boundary tensors rebuilt for one micro-batch's backward, held with the backward working
    set: :func:`deepspeed_backward_rebuilt`), of the model ``c.arch``."""
    arch = c.arch
    outputs = pipeline_outputs(arch, c, f, tokens) * in_flight
    return outputs + torch_recv_buffers(arch, c, f, tokens), deepspeed_backward_rebuilt(
        arch, c, f, tokens
    )


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


def _deepspeed_pipe(f: Fields) -> Any:
    """True where DeepSpeed's ``PipelineEngine`` runs Megatron-DeepSpeed's ``GPTModelPipe``: the
    ``deepspeed`` profile with pp > 1."""
    return (f.lookup(deepspeed_engine, (), "framework") == 1) & (f.pp > 1)


def deepspeed_mask_bytes(c: Context, f: Fields) -> Any:
    """Bytes of the ``[1, 1, s, s]`` bool causal masks (s the full sequence, one byte an element)
    held for the whole run on one GPU, both phases, under ``deepspeed`` with pp > 1; 0 otherwise.

    * every stage: ``s²``, ``args.attn_mask``. Megatron-DeepSpeed's ``model_provider``
      (``pretrain_gpt.py``, 4efb479d; the ``GPTModelPipe`` branch) builds
      ``torch.tril(torch.ones((1, s, s)))`` on the GPU, ``< 0.5``, and keeps it
      ``.to(torch.bool)`` in ``args`` on every rank.
    * the first stage: ``min(pp, m)·s²`` more. ``get_batch_pipe`` calls
      ``get_ltor_masks_and_position_ids`` (``megatron/utils.py``) without ``skip_mask``, so
      every micro-batch's inputs carry a bool ``[1, 1, s, s]`` mask; DeepSpeed's
      ``PipelineEngine._exec_load_micro_batch`` (``deepspeed/runtime/pipe/engine.py``,
      edaa72212) keeps ``x.clone().detach()`` of each input in
      ``pipe_buffers['inputs'][buffer_id]``, which only ``_exec_send_grads`` clears, and the
      first stage sends no gradient: each buffer's clone stays until a later micro-batch
      overwrites it, across steps and the optimizer step. ``TrainSchedule.num_pipe_buffers``
      (``deepspeed/runtime/pipe/schedule.py``) gives stage 0 ``max(2, min(pp, m))`` buffers,
      ``micro_batch_id % num_pipe_buffers`` fills ``min(pp, m)`` of them.

    ``EmbeddingPipe.forward`` (``megatron/model/language_model.py``) drops the mask when
    ``args.attn_mask`` exists, so no later stage receives it. Left out: the token and position
    ids kept beside it (16·b·s B) and a mask per sequence under ``--reset-attention-mask``.

    E.g. s 16,384, pp 8, m ≥ 8: stage 0 holds 9·16,384² = 2,415,919,104 B, every other stage
    268,435,456 B.
    """
    mask = exact(c.training.seq_len) ** 2
    clones = where(f.stage == 0, minimum(f.pp, f.m), 0)
    return where(_deepspeed_pipe(f), mask * (1 + clones), 0)


def deepspeed_load_transient(c: Context, f: Fields, one_microbatch: Any) -> Any:
    """Bytes beyond the kept activations of every micro-batch in flight that the first and the
    last stage hold while a micro-batch's inputs are built, under ``deepspeed`` with pp > 1;
    ``one_microbatch`` the bytes one micro-batch keeps on the stage (layers, embedding or output
    layer, pipeline buffers); at least 0, 0 on other stages and profiles.

    DeepSpeed's ``TrainSchedule`` (``deepspeed/runtime/pipe/schedule.py``, edaa72212) loads a
    micro-batch on the first and the last stage before its forward, when the stage holds one
    micro-batch fewer than its peak (the previous one's backward is done).
    ``_exec_load_micro_batch`` calls the batch function, Megatron-DeepSpeed's ``get_batch_pipe``
    (``pretrain_gpt.py``, 4efb479d), whose ``get_ltor_masks_and_position_ids``
    (``megatron/utils.py``) builds ``torch.tril(torch.ones((1, s, s)))`` in FP32 on the GPU:
    the ones and their lower triangle, ``8·s²`` bytes, live together (the bool mask made from
    the triangle next, ``5·s²``, is less). On the first stage ``_exec_forward_pass`` runs the
    stage on ``tuple(t.clone() for t in pipe_buffers['inputs'][buffer_id])``: one more bool
    ``s²`` mask held through the stage's whole forward, beside every micro-batch in flight.
    So ``max(8·s² − one_microbatch, s² on the first stage)``.

    E.g. s 16,384 (8·s² = 2,147,483,648 B) on a first stage whose micro-batch keeps 1.5 GB:
    647,483,648 B.
    """
    mask = exact(c.training.seq_len) ** 2
    first, last = f.stage == 0, output_stage(f)
    build = where(first | last, 8 * mask - one_microbatch, 0)
    held = maximum(build, where(first, mask, 0))
    return where(_deepspeed_pipe(f), maximum(held, 0 * held), 0)
