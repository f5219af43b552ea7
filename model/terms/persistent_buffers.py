"""The persistent buffers a framework allocates once and holds for the whole run, in both phases of
the step, inside PyTorch's caching allocator: the ``"mpu"`` all-gather buffer, DeepSpeed's pipeline
receive buffers, Transformer Engine's extra cuBLAS workspaces and its placeholder weight
gradients (:func:`persistent_buffers_term`;
``StageMemory.persistent_buffers_bytes``, JSON ``memory.persistent_buffers_bytes``).

The ``"mpu"`` buffer. Megatron-Core's output layer is ``tensor_parallel.ColumnParallelLinear`` (``megatron/core/models/
gpt/gpt_model.py``, ``self.output_layer``), whatever the transformer layers' spec. Under sequence
parallelism with tp > 1 its forward, ``LinearWithGradAccumulationAndAsyncCommunication.forward``
(``megatron/core/tensor_parallel/layers.py``, at d98e8a64dd), all-gathers the ``[s/tp, b, h]``
input into ``get_global_memory_buffer().get_tensor(dim_size, input.dtype, "mpu")``, and its
backward gathers the saved local input again into the same named tensor. ``GlobalMemoryBuffer``
(``megatron/core/utils.py``) keeps each ``(name, dtype)`` buffer in ``self.buffer`` and only grows
it when a larger size is requested; nothing frees it. So from the first forward on, one GPU of the
stage that holds the output layer keeps ``β·b·(s/cp)·h`` bytes (the full sequence of the
micro-batch on this rank, ``β`` bytes per activation element) in the caching allocator for the
whole run: at the forward/backward peak and at the optimizer step alike (held in both phases,
:func:`model.terms.peak.peak_over_phases`).

Not in another figure: the output layer saves its *local* input for backward (the kept
activations, :mod:`model.stage_bytes`), and the backward working set
(:mod:`model.backward_working`) counts the transformer layers' re-gathered inputs, which under the
``megatron`` profile's Transformer Engine layers are Transformer Engine's own buffers, not this one.

Profiles: ``megatron`` as above. ``deepspeed``: Megatron-DeepSpeed's ``parallel_lm_logits``
(``megatron/model/language_model.py``) and its transformer layers' column-parallel projections
(``megatron/core/tensor_parallel/layers.py``, microsoft/Megatron-DeepSpeed f4157bea) call the same
``linear_with_grad_accumulation_and_async_allreduce`` with ``sequence_parallel``: in forward and
in backward they all-gather the ``[s/tp, b, h]`` input into the same ``"mpu"`` tensor, so one
``β·b·(s/cp)·h`` buffer sits, from the first forward on, in both phases, on every stage that
runs one of them (:mod:`model.backward_working` leaves it out of the layers' re-gathered input
for that reason): a stage holding transformer layers (``ParallelTransformerLayerPipe``: QKV and
FC1 are ``ColumnParallelLinear``) or the output layer (``GPTModelPipe``'s ``_logits_helper`` →
``parallel_lm_logits``, or ``LMHeadPipe``'s ``ColumnParallelLinear``; ``megatron/model/
gpt_model.py``, ``megatron/model/transformer.py``). A stage left without transformer layers
(L < pp) that holds only the embedding (``EmbeddingPipe``: ``VocabParallelEmbedding`` and a
scatter to the sequence-parallel region, no gather) runs none, so holds none. Beside it
DeepSpeed's pipeline engine keeps its receive buffers
(:func:`model.terms.pipeline_buffers.deepspeed_engine_buffers`), also allocated once, and, with
pp > 1, the ``[1, 1, s, s]`` bool causal masks of Megatron-DeepSpeed's ``GPTModelPipe``
(:func:`model.terms.pipeline_buffers.deepspeed_mask_bytes`): ``args.attn_mask`` on every stage
and, on the first, the clone of each micro-batch's mask the pipeline engine keeps in its input
buffers, overwritten only. ``fsdp2`` has no such buffer (DTensor's all-gathers are ordinary
tensors); ``textbook`` counts no runtime buffer.

Also held here, under ``megatron``: Transformer Engine's cuBLAS workspaces beyond the plain one
(:func:`model.terms.userbuffers.te_workspace_term`), tensors of the caching allocator allocated
at the first userbuffers or grouped GEMM and kept for the run; and Transformer Engine's
placeholder weight gradients (:func:`model.terms.dummy_wgrads.dummy_wgrads_term`): with the
weight gradients accumulated inside the GEMM into ``main_grad``, autograd is handed a tensor of
the weight's shape that ``get_dummy_wgrad`` caches once per distinct (shape, dtype), one per
distinct linear-weight shape of the rank's layers and the output layer, in the weights' dtype,
from the first backward on (none in a forward-only scoring role, none under Apex's
``distributed_fused_adam``).
"""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.terms.activation_fields import LAYER_FIELDS, end_stages, stage_layer_counts
from trainplan.model.terms.dummy_wgrads import dummy_wgrads_term
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.pipeline_buffers import (
    deepspeed_engine,
    deepspeed_engine_buffers,
    deepspeed_mask_bytes,
)
from trainplan.model.terms.userbuffers import te_workspace_term
from trainplan.model.xp import exact, where

__all__ = ["mpu_buffer_bytes", "persistent_buffers_term"]


def mpu_buffer_bytes(beta: int, micro_batch_size: Any, tokens: Any, hidden: int) -> Any:
    """Bytes of the ``"mpu"`` all-gather buffer (the output layer's, under ``megatron``) on one
    GPU: ``β·b·(s/cp)·h`` (``beta`` bytes per activation element, ``micro_batch_size``
    sequences, ``tokens`` = s/cp of each on this rank, ``hidden`` the model width). Exact for
    ints and Fractions; element-wise for arrays.

    Examples
    --------
    Llama 3 70B (h 8192), s 8192, b 1, BF16: 2·8192·8192 = 134,217,728 B.

    >>> mpu_buffer_bytes(2, 1, 8192, 8192)
    134217728
    """
    return beta * micro_batch_size * tokens * hidden


def persistent_buffers_term(c: Context, f: Fields) -> Any:
    """Bytes of the persistent buffers the framework allocates once on one GPU of stage
    ``f.stage`` (see the module docstring), held in both phases: :func:`mpu_buffer_bytes` on
    the rank holding the output layer (:func:`model.terms.activation_fields.end_stages`; not a
    value head's, a plain ``torch.nn.Linear``: :mod:`model.value_head`) under
    ``megatron``, under ``deepspeed`` on that rank and on every rank holding a transformer layer
    (:func:`model.terms.activation_fields.stage_layer_counts`), with tp > 1 and sequence
    parallelism; under
    ``deepspeed`` with pp > 1 also the pipeline engine's receive buffers
    (:func:`model.terms.pipeline_buffers.deepspeed_engine_buffers`) and the bool causal masks
    of Megatron-DeepSpeed's ``GPTModelPipe`` (:func:`model.terms.pipeline_buffers.
    deepspeed_mask_bytes`: ``args.attn_mask`` on every stage, the input buffers' clones on the
    first); under ``megatron``
    Transformer Engine's extra cuBLAS workspaces
    (:func:`model.terms.userbuffers.te_workspace_term`) and its cached placeholder weight
    gradients (:func:`model.terms.dummy_wgrads.dummy_wgrads_term`); else 0 (and 0 for a
    size-only model).

    Scope: tp, etp, cp, micro_batch_size, sequence_parallel, pp, virtual_stages, uneven_stages,
    stage_layers, schedule, framework, dp (through m). Control: pp, framework.
    """
    arch = c.model.arch
    if arch is None or Framework(f.framework) not in (Framework.MEGATRON, Framework.DEEPSPEED):
        return 0
    _, last = end_stages(f)
    tokens = exact(c.training.seq_len) / f.cp
    one = mpu_buffer_bytes(
        c.training.activation_bytes, f.micro_batch_size, tokens, arch.hidden_size
    )
    ds = f.lookup(deepspeed_engine, (), "framework")
    n_layers, _ = f.per_stage(stage_layer_counts, (arch,), *LAYER_FIELDS)
    head = not arch.value_head  # verl's value head: a torch.nn.Linear, no gather (model.value_head)
    runs_gather = (last & head) | ((ds == 1) & (n_layers > 0))
    mpu = where(runs_gather & f.sp & (f.tp > 1), one, 0)
    sequences = tokens * f.micro_batch_size
    engine = deepspeed_engine_buffers(c, f, sequences) + deepspeed_mask_bytes(c, f)
    return mpu + engine + te_workspace_term(c, f) + dummy_wgrads_term(c, f)
