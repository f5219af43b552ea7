"""FSDP2's all-gather buffers on one GPU: the largest all-gather output (:func:`gather_output_bytes`,
read by the side stream's pool, :func:`model.terms.peak.stream_pool_term`), and the one that
PyTorch's multi-stage pipeline runtime allocates on the compute stream and holds beside the
unsharded parameters it is copied into (:func:`runtime_unshard_term`, in the gathered bytes of
:func:`model.terms.state.model_state_term`).

Read from pytorch/pytorch: ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py`` at
002a76fb (``FSDPCommContext.get_all_gather_streams``, ``FSDPParamGroup.unshard``,
``FSDPParamGroup.wait_for_unshard``), ``_fsdp_collectives.py`` at 010ae4a8
(``foreach_all_gather``, ``_get_param_all_gather_inputs``, ``foreach_all_gather_copy_out``), and
PyTorch 2.13.0 (cf30153c4c) ``torch/distributed/pipelining/schedules.py``
(``_PipelineScheduleRuntime._step_microbatches``: ``UNSHARD`` → ``unshard(async_op=True)`` on
every FSDP unit of the stage; ``_assert_unsharded`` → each handle's ``wait`` →
``wait_for_unshard`` before the stage's next pass).

* **Which stream allocates.** ``get_all_gather_streams`` returns the side streams
  (``all_gather_copy_in_stream``, ``all_gather_stream``) only for a gather that is not
  ``async_op`` in the ``FORWARD`` or ``PRE_BACKWARD`` state — FSDP's own hooks. The runtime's
  ``UNSHARD`` is ``async_op=True`` outside both: ``foreach_all_gather`` then runs under the
  *current* stream, the computation's, so the flat copy-in buffer (``torch.empty`` of the shard
  in ``param_dtype``, ``_get_param_all_gather_inputs``) and the all-gather output (the whole
  unit, ``all_gather_comm.allocate``) come from the compute stream's pool: allocated memory,
  not the side pool that :func:`model.terms.peak.stream_pool_term` counts.
* **How long each lives.** The copy-in buffer is referenced by the split views in
  ``all_gather_inputs`` until ``foreach_all_gather`` returns; the all-gather's input is a view of
  the output (``all_gather_copy_in``'s ``narrow``), so nothing else keeps the buffer, and being
  the same stream's, its block serves the next unit's buffer: one at a time, ``w`` B a shard
  element, ``w·U/D`` at the most. The output lives in ``FSDPParamGroup._all_gather_result``
  until ``wait_for_unshard``, where ``foreach_all_gather_copy_out`` first allocates the unit's
  unsharded parameters (``alloc_all_gather_outputs``, the whole unit again) and copies into
  them, and then — ``async_op``: not kept in ``comm_ctx.all_gather_state`` — drops it
  (``self._all_gather_result = None``).
* **What coexists.** Between ``UNSHARD`` and the wait the chunk's outputs stand in for its
  unsharded parameters, which the memory term already counts whole from the chunk's entry into
  the runtime's window (:func:`model.terms.runtime_window.held_whole_params`). At each unit's
  wait its output and its new parameters are both live: one unit beyond the window, ``w·U``
  (``U`` the largest unit on the GPU, :func:`model.terms.stage_params.units_per_gpu`; under
  torchao's FP8 all-gather the ``uint8`` output and parameters, :func:`gather_output_bytes`).
  The copy-in buffer (``1/D`` of that) is freed before any wait (the ``UNSHARD`` action returns
  before the next compute action's ``_assert_unsharded``): never beside it. So the term is one
  all-gather output, where D > 1 (``world_size == 1`` copies the shard without an output).
* **Where it meets the peak.** At four chunks a rank or more (``ScheduleInterleaved1F1B`` at v ≥
  :data:`model.fsdp2_pipeline.MAX_ACTIVE_STAGES` + 1) the window loses and regains chunks
  through the steady phase (:func:`model.fsdp2_pipeline.runtime_regathers`); replayed
  (:func:`model.fsdp2_replay.replay_passes`' windows), a re-gathered chunk's first pass after
  its ``UNSHARD`` is a backward on every rank at some point (pp 2, v 4, m 4: 5 of rank 0's 11
  entries), waited for with the forward before it done — the steady phase's highest
  activations: counted. At v ≤ 3 every chunk enters once, with the step's first actions, and
  is waited for before its first pass, a forward ahead of the rank's first backward (the
  warm-up's ``(v − 1)·pp + 2·(pp − 1 − r)`` forwards and the one before that backward run
  every chunk's first). No gradient exists then: the unsharded gradients
  (``unsharded_accumulated_grad``) are made by the step's first backward, and
  ``FSDPParamGroup.post_backward`` after the last hands them to ``foreach_reduce`` and drops
  them (``_fsdp_param_group.py`` 002a76fb). The forward/backward peak counts them, ``g`` B a
  parameter of the stage, and one unit's unsharded gradient (the buffers), ``w·U``, as large
  as the output alone (larger under torchao's FP8 all-gather); the activations at a copy-out
  are among those kept at the first backward. So the most a copy-out holds — the window's
  weights with one output, the state's shards, the activations so far, the persistent
  buffers — is under the reported peak by at least the stage's gradients, ``g·P`` (``P ≥ U``;
  the previous step's FP32 sharded gradients, ``4·P/D`` where a trainer keeps them, fall
  inside it): never tight, not counted. ``tests/model/test_fsdp2_runtime_unshard.py``
  evaluates it where it could bind (a hypothesis property over Llama 3 8B and 70B, full
  recompute, sequences of 256–2,048, micro-batch 1, pp 2–4, v 2–3, dp 2–64, tp 1–8, both ZeRO
  stages, with and without the FP8 all-gather; Llama 3 8B at dp 8 × pp 2, v 2, 1,024 tokens:
  rank 0's copy-out 15.58 GB at the most against a peak of 32.12 GB, its gradients 16.06 GB).
* **The side pool's copy-in buffer** (FSDP's own hooks: :func:`model.terms.peak.stream_pool_term`;
  pytorch/pytorch 010ae4a8 ``_fsdp_collectives.py`` ``foreach_all_gather``).
  ``_get_param_all_gather_inputs`` writes the unit's shard, cast to ``param_dtype``, into a new
  flat buffer on the copy-in stream (``torch.empty`` of the shard's elements, ``w·U/D`` bytes);
  the split views of it in ``all_gather_inputs`` keep it until ``foreach_all_gather`` returns,
  after the output is allocated (``all_gather_comm.allocate``) and copied into. So the next
  unit's buffer lives beside both outputs: ``w·U/D`` more at the pool's peak, whatever segments
  the allocator cuts. In backward (``PRE_BACKWARD``) ``wait_for_unshard`` frees each output
  after its copy-out: one output and a buffer at the most.
* **torchao's FP8 cast intermediates (not counted).** Under torchao's FP8 all-gather each
  weight's ``fsdp_pre_all_gather`` (pytorch/ao 36027d82d ``torchao/float8/fsdp_utils.py``
  ``WeightWithDynamicFloat8CastTensor``) returns its FP8 shard, 1 B an element, the other
  parameters sharing the flat ``w``-byte buffer. Making each FP8 shard (``_ToFloat8ConstrFunc.
  forward``, ``float8_training_tensor.py``: ``tensor.to(float32) * scale``, then
  ``to_fp8_saturated``'s ``clamp`` and ``.to(float8)``) holds two FP32 copies of that weight's
  shard at once, ``8·n/D`` for a weight of ``n`` elements, one weight at a time (eager frees
  each before the next), before the output is allocated; without
  ``precompute_float8_dynamic_scale_for_fsdp`` ``tensor_to_amax``'s ``torch.abs`` (one FP32
  copy, freed before the scaling) comes first, no larger. Beside one output and the shards cast
  so far this stays under the pool's figure where ``8·n ≤ (D + 1)·w·U`` less the unit's earlier
  inputs — each of a Llama 3 layer's MLP weights is 27 % of its FP8-gathered elements and they
  come last (``attention`` registers before ``feed_forward``): at D = 2, at the last one,
  4·0.27 + 0.36 of an output (the attention's and two MLP weights' FP8 shards) against 1.5 —
  so it is not counted (the multi-stage runtime's, on the compute stream, likewise stays under
  its copy-out, :func:`runtime_unshard_term`).
"""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.fsdp2_pipeline import MAX_ACTIVE_STAGES, runtime_mechanism
from trainplan.model.mechanism_record import Mechanism
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.fp8_linears import fsdp2_fp8_cut
from trainplan.model.terms.stage_params import units_per_gpu
from trainplan.model.xp import where

__all__ = ["RUNTIME_UNSHARD_SOURCE", "gather_output_bytes", "runtime_unshard_term"]

RUNTIME_UNSHARD_SOURCE = (
    "pytorch/pytorch 002a76fb torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py "
    "FSDPCommContext.get_all_gather_streams (async_op: the current stream), "
    "FSDPParamGroup.wait_for_unshard (async_op: the output dropped after the copy-out); "
    "010ae4a8 _fsdp_collectives.py foreach_all_gather / foreach_all_gather_copy_out; "
    "PyTorch 2.13.0 cf30153c4c torch/distributed/pipelining/schedules.py "
    "_PipelineScheduleRuntime._step_microbatches (UNSHARD, _assert_unsharded)"
)


def gather_output_bytes(c: Context, f: Fields) -> Any:
    """Bytes of FSDP2's largest all-gather output on one GPU of stage ``f.stage``: ``w·U``, ``w``
    the working weight bytes and ``U`` the stage's largest unit per GPU
    (:func:`model.terms.stage_params.units_per_gpu`), less :func:`model.terms.fp8_linears.
    fsdp2_fp8_cut` under torchao's FP8 all-gather (``foreach_all_gather`` views every input as
    ``uint8`` when one is: the linear weights at 1 B). Whatever the framework (the callers
    choose where it applies). Element-wise over the search's columns."""
    unit_dense, unit_expert = units_per_gpu(c, f)
    output = c.training.weight_bytes * (unit_dense + unit_expert)
    cut = fsdp2_fp8_cut(c, f)
    return output if cut is None else output - cut


def runtime_unshard_term(c: Context, f: Fields, mech: Mechanism) -> Any:
    """Bytes on one GPU of stage ``f.stage`` that PyTorch's multi-stage runtime holds beyond the
    window's whole weights at the forward/backward peak (the module docstring): one all-gather
    output (:func:`gather_output_bytes`) beside the unsharded parameters it is copied into, under
    ``fsdp2`` run by torch.distributed.pipelining (:attr:`~model.mechanism_record.Mechanism.
    torch_pipelining`, not Meta's runtime: :func:`model.fsdp2_pipeline.runtime_mechanism`) with
    ``interleaved`` at more than :data:`model.fsdp2_pipeline.MAX_ACTIVE_STAGES` chunks a rank
    and a shard degree above 1; 0 elsewhere (at v ≤ 3 each copy-out comes before the rank's
    first backward, under the peak by at least the stage's gradients: the module docstring).
    Source: :data:`RUNTIME_UNSHARD_SOURCE`.
    Element-wise over the search's columns (``virtual_stages``, ``shard_degree``)."""
    if Framework(f.framework) is not Framework.FSDP2 or str(f.schedule) != "interleaved":
        return 0
    if not runtime_mechanism(mech, c.training.pipeline_frees_stage_tensors).torch_pipelining:
        return 0
    regathers = (f.virtual_stages > MAX_ACTIVE_STAGES) & (f.shard_degree > 1)
    output = gather_output_bytes(c, f)
    return where(regathers, output, 0 * output)
