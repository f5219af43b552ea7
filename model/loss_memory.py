"""The loss's working set on the last pipeline stage: what the cross entropy holds beyond the
fp32 logits backward keeps.

:func:`model.end_stage_bytes.embedding_bytes` counts what backward *keeps* of the loss, per
micro-batch in flight: the fp32 (log-)softmax of the logits, ``4·S·V/tp`` bytes (S tokens of
the micro-batch on this rank, V the padded vocabulary). Around that kept tensor the loss
allocates more for a moment, once per micro-batch: the BF16 logits the output layer returns,
the fp32 copy the loss is computed on, the gradients of backward. The peak of that working set,
in bytes per element of the local logits ``[S, V/tp]``, is a property of the framework's loss
code; this module gives it with the code it comes from, and :func:`loss_transient_bytes` the
bytes beyond the kept ``4·S·V/tp``, counted once on the last stage (like the recompute
transient, :class:`model.memory.StageActivations`).

* ``megatron`` (Megatron-LM's unfused
  ``_VocabParallelCrossEntropy``, ``megatron/core/tensor_parallel/cross_entropy.py``):
  ``calculate_logits_max`` takes ``vocab_parallel_logits.float()`` while the caller still holds
  the BF16 logits, then subtracts the maximum, exponentiates and normalises *in place*
  (``calculate_predicted_logits``, ``calculate_cross_entropy_loss``) and saves that softmax.
  Backward turns the saved softmax into the gradient in place (``calculate_gradients``); the
  autograd engine casts the fp32 gradient to the BF16 input's dtype (``validate_outputs``) while
  the fp32 one is still referenced. Peak: 2 + 4 = **6 B** per element, in forward and in backward.
* ``deepspeed`` (Megatron-DeepSpeed 4efb479d): ``megatron/model/gpt_model.py``
  ``post_language_model_processing`` calls the loss on ``output.float()``, an fp32 copy, while
  the BF16 logits are still referenced, and its older ``_VocabParallelCrossEntropy.forward``
  (``megatron/core/tensor_parallel/cross_entropy.py``) subtracts the maximum *out of place*
  into a new fp32 tensor, which it exponentiates, normalises in place and saves:
  2 + 4 + 4 = **10 B** at the forward's peak.
  With DeepSpeed's sequence parallelism (Ulysses, cp > 1) the loss is
  ``megatron/core/sequence_parallel/cross_entropy.py`` ``_VocabSequenceParallelCrossEntropy``:
  ``softmax(x)`` (saved) and ``softmax.log()`` beside the fp32 copy and the BF16 logits,
  2 + 4 + 4 + 4 = **14 B**.
* ``deepspeed`` with pp > 1 (Megatron-DeepSpeed's ``GPTModelPipe`` run by DeepSpeed's
  ``PipelineEngine``, DeepSpeed edaa72212 ``deepspeed/runtime/pipe/engine.py``): the pipeline
  module's last function is ``float16_to_fp32`` (``megatron/model/module.py``: ``val.float()``),
  so the module returns the **fp32** logits; the BF16 ones are freed as soon as they are
  converted (``PipelineModule.forward`` moves on, and ``float()``'s backward saves nothing).
  ``_exec_forward_pass`` stores the module's output in ``pipe_buffers['outputs'][buffer_id]``
  and computes ``CrossEntropy`` (``gpt_model.py``: ``output.contiguous().float()``, no copy of
  an fp32 tensor) on it; on the last stage ``_exec_backward_pass`` runs ``backward(self.loss)``
  and returns *before* the line that sets ``pipe_buffers['outputs'][buffer_id] = None`` (the
  other stages reach it). The buffer is only overwritten by the forward of the micro-batch
  that next uses it (``TrainSchedule._buffer_idx``: ``micro_batch_id % num_pipe_buffers``,
  ``num_pipe_buffers = max(2, min(stages − stage_id, micro_batches))`` = 2 on the last stage),
  and the engine never empties it between steps. So the last stage holds the fp32 logits of
  ``min(m, 2)`` micro-batches, ``4·min(m, 2)·S·V/tp``, for the whole run, at the optimizer
  step too (:func:`deepspeed_pipe_logits_bytes`; held in both phases beside the persistent
  buffers). Beside those the loss's own moments are: the new fp32 logits being converted
  beside the BF16 ones while the buffer still holds the micro-batch it is about to overwrite
  (2 + 4 B), the out-of-place subtraction (4 B, the softmax kept; the fp32 logits are the
  buffer's), and at the output layer's backward the gradient formed in the saved softmax
  (4 B) beside its BF16 cast (2 B): **6 B** at the peak beyond the held logits (14 B per
  local logit in all from m = 2 on).
* ``fsdp2`` (torchtitan: ``cross_entropy_loss`` in ``torchtitan/components/loss.py``,
  ``train.py``'s ``loss_fn`` at 9dec370: ``F.cross_entropy(pred.flatten(0, 1).float(), labels)``;
  the trainer deletes ``pred`` before ``loss.backward()``):

  - tp = 1, PyTorch's own ``cross_entropy`` = ``log_softmax`` + ``nll_loss``: forward holds the
    BF16 logits, their fp32 copy and the fp32 log-softmax (2 + 4 + 4 = 10 B); ``log_softmax``
    saves its output (4 B kept). Backward: ``nll_loss_backward`` writes a zero-filled fp32
    gradient of the log-softmax, and ``_log_softmax_backward_data`` a new fp32 gradient of its
    input while the saved output is still held: 4 + 4 + 4 = **12 B**.
  - tp > 1, loss parallelism (``torch.distributed.tensor.parallel.loss_parallel``, which
    torchtitan enables with tp: ``parallel_dims.loss_parallel_enabled``): ``_log_softmax``
    (``torch/distributed/tensor/parallel/loss.py``) holds the input, ``shifted = x − max`` and
    ``exp(shifted)`` at once beside the BF16 logits (2 + 4 + 4 + 4 = 14 B) and returns a new
    fp32 result (kept). Backward's ``_nll_loss_and_log_softmax_backward`` computes
    ``(grad_input + torch.exp(x)) * grad_output`` on a zero-filled ``grad_input``: the saved
    log-softmax, ``grad_input``, the exponential, their sum and the product, four fp32 tensors at
    a time (the exponential is freed once summed): **16 B**.
* ``textbook``: the convention counts what is kept, no transient (0 beyond the kept 4 B).

* ``megatron`` with a fused loss (:class:`CrossEntropyFusion`, Megatron-Core's
  ``cross_entropy_loss_fusion`` and ``cross_entropy_fusion_impl``, chosen in
  ``LanguageModule.compute_language_model_loss``,
  ``megatron/core/models/common/language_module/language_module.py``):

  - ``native``: ``fused_vocab_parallel_cross_entropy`` (``megatron/core/fusions/
    fused_cross_entropy.py``) runs the same ``VocabParallelCrossEntropy`` steps as the unfused
    loss, each group compiled into one kernel (``jit_fuser``): ``calculate_logits_max`` returns
    the fp32 copy while the caller holds the BF16 logits (2 + 4), the softmax is formed in place
    and saved (4 kept), and ``calculate_gradients`` turns it into the gradient in place and
    returns ``grad_input.to(torch.bfloat16)`` (4 + 2). The same **6 B** peak and 4 B kept as
    ``none``; fewer passes over the logits (:mod:`model.ops`).
  - ``te``: Transformer Engine's ``parallel_cross_entropy`` (``transformer_engine/pytorch/
    cross_entropy.py``, ``CrossEntropyFunction``; kernels in ``transformer_engine/pytorch/
    triton/cross_entropy.py`` from v2.2, ``transformer_engine/common/triton/cross_entropy.py``
    from v2.10). ``cross_entropy_forward`` reads the logits with an online softmax
    (``online_softmax_kernel``: three fp32 numbers per row, the row's max, sum and target logit,
    all-gathered over tp) and ``cross_entropy_kernel`` writes the gradient **into the logits
    buffer itself** (``tl.store(X_ptr + X_offsets, ...)``), which ``forward`` returns and saves
    for backward (``ctx.save_for_backward``); ``cross_entropy_backward`` scales it in place
    (``element_mul_kernel``) and hands that same buffer back. Kept and peak: the BF16 logits,
    **β = 2 B** per element, nothing beside them but the per-row statistics (``m_d_X_y``:
    ``12·(1 + tp) + 4`` B per token; not counted, under 0.01 % of the logits at V/tp ≥ 16,000).
    That is Transformer Engine up to v2.17, the releases NeMo's containers ship through 2026-04.
    From v2.18 (``01bbe3eea``, 2026-07-09, "Fix the numerical issue with the Fused CE loss")
    ``cross_entropy_forward`` allocates an fp32 ``grad_input`` instead (4 B kept, a 6 B peak:
    the unfused figures), and Megatron-LM since ``168cb15d70`` (2026-06-03) refuses
    ``te`` in its own arguments (``validate_args``); Megatron Bridge still sets it.

Megatron-Core's default is the unfused loss (``ModelParallelConfig.cross_entropy_loss_fusion =
False``, ``cross_entropy_fusion_impl = 'native'``; ``--cross-entropy-loss-fusion`` is off unless
given); Megatron Bridge turns the fusion on (``GPTModelProvider.cross_entropy_loss_fusion =
True``) and its performance recipes set ``te`` (``scripts/performance/utils/overrides.py``
``_set_common_perf_overrides``). torchtitan's ``experiments/graph_trainer/chunked_loss.py``
bounds the working set to one chunk of the sequence (not modelled: torchtitan's default is the
whole-sequence loss above).

Under a PyTorch pipeline schedule (``fsdp2`` with pp > 1) whose caller asks for the outputs
(torchtitan before e5ef99aab, 2025-10-22: :attr:`model.specs.TrainingSpec.pipeline_keeps_outputs`;
since then its trainer passes ``return_outputs=False`` and nothing is kept) the last stage keeps
every micro-batch's output, the BF16 logits, until the next step: ``_PipelineStageBase.
forward_one_chunk`` (``torch/distributed/pipelining/stage.py``) appends the stage's output to
``output_chunks`` for the schedule to merge, and ``clear_runtime_states`` empties that list only
when the next ``step()`` begins. The loss is computed on that output (``_maybe_compute_loss``
in ``schedules.py``), so no ``del pred`` frees it as torchtitan's trainer does without a
pipeline. At the last micro-batch's backward all ``m`` outputs are held:
:func:`output_chunks_bytes`, ``m·β·S·V/tp``.

Without that list (the default) the last stage still holds each micro-batch's output until its
backward ends: ``forward_one_chunk`` stores ``(output_tuple, flatten_input_tensors)`` in
``self.fwd_cache[fwd_chunk_id]`` on every stage, and ``backward_one_chunk`` pops it into the local
``stage_output`` and runs the whole backward of the chunk (the loss, the output layer, every
layer) before it returns (pytorch 0138610331 ``torch/distributed/pipelining/stage.py``); no
``del pred`` frees the BF16 logits as torchtitan's trainer does without a pipeline. So under
``fsdp2`` with pp > 1 the loss's peak holds ``β·S·V/tp`` more (14 B at tp = 1, 18 B with loss
parallelism) and so does every layer's backward of that micro-batch
(:func:`pipeline_pred_bytes`); none of it at the optimizer step.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from trainplan.model.errors import InputError, LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.xp import exact, minimum, where

__all__ = [
    "CrossEntropyFusion",
    "LOSS_KEPT_BYTES",
    "check_cross_entropy_fusion",
    "cross_entropy_fusion_of",
    "loss_kept_bytes_per_element",
    "loss_peak_bytes_per_element",
    "loss_transient_bytes",
    "output_chunks_bytes",
    "deepspeed_pipe_logits_bytes",
    "pipeline_pred_bytes",
]


class CrossEntropyFusion(StrEnum):
    """Which cross entropy Megatron-Core runs (``cross_entropy_fusion_impl``, named as Megatron
    Bridge's config names it; the module docstring derives each one's bytes)."""

    NONE = "none"
    """The unfused ``vocab_parallel_cross_entropy`` (``cross_entropy_loss_fusion = False``,
    Megatron-LM's default)."""
    NATIVE = "native"
    """Megatron-Core's ``fused_vocab_parallel_cross_entropy`` (``--cross-entropy-loss-fusion
    --cross-entropy-fusion-impl native``)."""
    TE = "te"
    """Transformer Engine's ``parallel_cross_entropy`` (``--cross-entropy-loss-fusion
    --cross-entropy-fusion-impl te``; Megatron Bridge's performance recipes)."""


LOSS_KEPT_BYTES = 4
"""Bytes per local logit element that backward keeps of the loss: the fp32 (log-)softmax
(:func:`model.end_stage_bytes.embedding_bytes`' ``4·S·V/tp``)."""

DEEPSPEED_ULYSSES_LOSS_BYTES = 14
"""Bytes per local logit at the peak of Megatron-DeepSpeed's sequence-parallel loss
(``_VocabSequenceParallelCrossEntropy``: BF16 logits, their fp32 copy, softmax and its log; the
module docstring)."""

DEEPSPEED_PIPE_LOSS_BYTES = 6
"""Bytes per local logit at the peak of the loss under DeepSpeed's pipeline engine (pp > 1),
beyond the fp32 logits its pipe buffers hold (:func:`deepspeed_pipe_logits_bytes`; the module
docstring)."""

_PEAK: dict[Framework, tuple[int, int]] = {
    # (tp = 1, tp > 1): bytes per element of the local logits at the loss's peak
    Framework.MEGATRON: (6, 6),
    Framework.DEEPSPEED: (10, 10),
    Framework.FSDP2: (12, 16),
    Framework.TEXTBOOK: (LOSS_KEPT_BYTES, LOSS_KEPT_BYTES),
}


def cross_entropy_fusion_of(value: CrossEntropyFusion | str | None) -> CrossEntropyFusion:
    """The :class:`CrossEntropyFusion` named ``value`` (None: ``none``, Megatron-LM's default).

    Raises
    ------
    InputError
        ``cross_entropy_fusion_impl: 'fused' is not one of none, native, te``.

    Examples
    --------
    >>> cross_entropy_fusion_of("TE"), cross_entropy_fusion_of(None)
    (<CrossEntropyFusion.TE: 'te'>, <CrossEntropyFusion.NONE: 'none'>)
    """
    try:
        return CrossEntropyFusion(str(value or "none").lower())
    except ValueError:
        allowed = ", ".join(x.value for x in CrossEntropyFusion)
        raise InputError(f"cross_entropy_fusion_impl: {value!r} is not one of {allowed}") from None


def check_cross_entropy_fusion(framework: Framework | str, impl: CrossEntropyFusion | str) -> None:
    """Refuse a fused loss under a profile that does not run Megatron-Core's
    ``compute_language_model_loss``.

    Raises
    ------
    LayoutError
        One line naming ``cross_entropy_fusion_impl``, the value and the rule.

    Examples
    --------
    >>> check_cross_entropy_fusion("megatron", "te")
    >>> check_cross_entropy_fusion("fsdp2", "none")
    """
    fusion = cross_entropy_fusion_of(impl)
    if fusion is not CrossEntropyFusion.NONE and Framework(framework) is not Framework.MEGATRON:
        raise LayoutError(
            f"cross_entropy_fusion_impl: {fusion} is Megatron-Core's fused loss "
            f"(compute_language_model_loss); {framework} runs its own loss (use `framework` "
            "megatron, or none)"
        )


def loss_kept_bytes_per_element(
    framework: Framework | str, impl: CrossEntropyFusion | str = "none", beta: int = 2
) -> int:
    """Bytes per element of the local logits ``[S, V/tp]`` that backward keeps of the loss:
    the fp32 (log-)softmax, :data:`LOSS_KEPT_BYTES`, except under Transformer Engine's fused
    loss (``impl`` ``te``, ``megatron``), which keeps the logits buffer it wrote the gradient
    into, ``beta`` bytes (the logits' dtype; the module docstring).

    Examples
    --------
    >>> loss_kept_bytes_per_element("megatron"), loss_kept_bytes_per_element("megatron", "te")
    (4, 2)
    >>> loss_kept_bytes_per_element("megatron", "native"), loss_kept_bytes_per_element("fsdp2")
    (4, 4)
    """
    te = cross_entropy_fusion_of(impl) is CrossEntropyFusion.TE
    return beta if te and Framework(framework) is Framework.MEGATRON else LOSS_KEPT_BYTES


def loss_peak_bytes_per_element(
    framework: Framework | str,
    tp: int,
    impl: CrossEntropyFusion | str = "none",
    beta: int = 2,
    cp: int = 1,
    pp: int = 1,
) -> int:
    """Bytes per element of the local logits ``[S, V/tp]`` that the profile's loss holds at
    its peak, what backward keeps included (the module docstring derives each figure from the
    framework's code); ``impl`` the fused loss Megatron-Core runs (:class:`CrossEntropyFusion`),
    ``beta`` the logits' bytes per element, ``cp`` the context-parallel degree (DeepSpeed's
    Ulysses loss, 14 B), ``pp`` the pipeline degree (DeepSpeed's pipeline engine: 6 B beyond the
    fp32 logits it holds, :data:`DEEPSPEED_PIPE_LOSS_BYTES`).

    Examples
    --------
    >>> loss_peak_bytes_per_element("megatron", 8), loss_peak_bytes_per_element("fsdp2", 1)
    (6, 12)
    >>> loss_peak_bytes_per_element("fsdp2", 8), loss_peak_bytes_per_element("textbook", 8)
    (16, 4)
    >>> loss_peak_bytes_per_element("megatron", 8, "native"), loss_peak_bytes_per_element(
    ...     "megatron", 8, "te")
    (6, 2)
    >>> loss_peak_bytes_per_element("deepspeed", 8), loss_peak_bytes_per_element(
    ...     "deepspeed", 8, pp=4)
    (10, 6)
    """
    if Framework(framework) is Framework.MEGATRON and cross_entropy_fusion_of(impl) is (
        CrossEntropyFusion.TE
    ):
        return beta
    if Framework(framework) is Framework.DEEPSPEED and pp > 1:
        return DEEPSPEED_PIPE_LOSS_BYTES
    if Framework(framework) is Framework.DEEPSPEED and cp > 1:
        return DEEPSPEED_ULYSSES_LOSS_BYTES
    single, parallel = _PEAK[Framework(framework)]
    return single if tp == 1 else parallel


def loss_transient_bytes(
    framework: Framework | str,
    tokens: Any,
    vocab: Any,
    tp: Any,
    impl: CrossEntropyFusion | str = "none",
    beta: int = 2,
    pp: int = 1,
) -> Any:
    """Bytes the loss holds for a moment beyond what backward keeps of it, on one GPU of the
    last stage: ``(peak − kept)·S·V/tp`` (:func:`loss_peak_bytes_per_element`,
    :func:`loss_kept_bytes_per_element`), with ``tokens`` S of one micro-batch on this rank and
    ``vocab`` V the padded vocabulary, ``pp`` the pipeline degree. Counted once (one
    micro-batch's loss runs at a time). Exact for Fractions; element-wise for arrays of ``tp``.

    Examples
    --------
    Llama 3 8B at s 32,768 on one GPU's sequence (torchtitan, tp 1): 8 B beyond the kept 4 B
    per logit, 8·32,768·128,256 B = 33.6 GB.

    >>> loss_transient_bytes("fsdp2", 32_768, 128_256, 1)
    Fraction(33621540864, 1)
    >>> loss_transient_bytes("megatron", 8192, 128_256, 8)  # 2·8,192·16,032
    Fraction(262668288, 1)
    >>> loss_transient_bytes("megatron", 8192, 128_256, 8, "te")  # in place: nothing beside
    Fraction(0, 1)
    """
    single, parallel = (
        loss_peak_bytes_per_element(framework, n, impl, beta, pp=pp) for n in (1, 2)
    )
    extra = where(tp == 1, single, parallel) - loss_kept_bytes_per_element(framework, impl, beta)
    return extra * exact(tokens) * vocab / tp


def output_chunks_bytes(
    framework: Framework | str, pp: Any, m: Any, tokens: Any, vocab: Any, tp: Any, beta: int
) -> Any:
    """Bytes of the last stage's outputs that PyTorch's pipeline schedules keep in
    ``output_chunks`` until the next step (module docstring): ``m·β·S·V/tp`` under ``fsdp2``
    with pp > 1 (``m`` micro-batches per step, ``tokens`` S of one micro-batch on this rank,
    ``vocab`` V the padded vocabulary, ``beta`` bytes per logit as the output layer returns
    it); 0 for the other profiles (Megatron-Core's schedule keeps the loss, not the logits;
    DeepSpeed's pipeline engine keeps two micro-batches' fp32 logits,
    :func:`deepspeed_pipe_logits_bytes`) and without a pipeline (torchtitan's trainer deletes ``pred`` before
    backward). Exact for Fractions; element-wise for arrays.

    Examples
    --------
    Llama 3.1 405B under torchtitan, 8 micro-batches of 4 × 8,192 tokens, tp 8 (loss
    parallelism: V/tp = 16,032 columns), BF16 logits: 8·2·32,768·16,032 B = 8.4 GB.

    >>> output_chunks_bytes("fsdp2", 8, 8, 4 * 8192, 128_256, 8, 2)
    Fraction(8405385216, 1)
    >>> output_chunks_bytes("fsdp2", 1, 8, 8192, 128_256, 8, 2), output_chunks_bytes(
    ...     "megatron", 8, 8, 8192, 128_256, 8, 2)
    (0, 0)
    """
    if Framework(framework) is not Framework.FSDP2:
        return 0
    return where(pp > 1, exact(m) * beta * exact(tokens) * vocab / tp, 0)


def deepspeed_pipe_logits_bytes(pp: Any, m: Any, tokens: Any, vocab: Any, tp: Any) -> Any:
    """Bytes of the fp32 logits DeepSpeed's pipeline engine holds on one GPU of the last stage,
    with pp > 1, for the whole run (module docstring: ``pipe_buffers['outputs']``, never
    emptied on the last stage, two buffers there): ``4·min(m, 2)·S·V/tp`` (``m`` micro-batches
    per step, ``tokens`` S of one micro-batch on this rank, ``vocab`` V the padded vocabulary);
    0 with pp = 1. Exact for Fractions; element-wise for arrays.

    Examples
    --------
    Mixtral 8x7B (V 32,000), 16 micro-batches of 32,768 tokens, tp 1: 4·2·32,768·32,000 B =
    8.39 GB; one micro-batch a step, one buffer used: half that.

    >>> deepspeed_pipe_logits_bytes(2, 16, 32_768, 32_000, 1)
    Fraction(8388608000, 1)
    >>> deepspeed_pipe_logits_bytes(2, 1, 32_768, 32_000, 1), deepspeed_pipe_logits_bytes(
    ...     1, 16, 32_768, 32_000, 1)
    (Fraction(4194304000, 1), 0)
    """
    held = 4 * minimum(exact(m), 2) * exact(tokens) * vocab / tp
    return where(pp > 1, held, 0)


def pipeline_pred_bytes(
    framework: Framework | str, pp: Any, tokens: Any, vocab: Any, tp: Any, beta: int
) -> Any:
    """Bytes of the last stage's output, the logits, that PyTorch's pipeline stage holds in
    ``fwd_cache`` until that micro-batch's backward ends (module docstring): ``β·S·V/tp`` under
    ``fsdp2`` with pp > 1 (``tokens`` S of one micro-batch on this rank, ``vocab`` V the padded
    vocabulary, ``beta`` bytes per logit as the output layer returns it), beside the loss and
    every layer's backward of the micro-batch; 0 for the other profiles and without a pipeline.
    Exact for Fractions; element-wise for arrays.

    Examples
    --------
    Llama 3 8B at 8,192 tokens, tp 1, BF16 logits: 2·8,192·128,256 B = 2.10 GB.

    >>> pipeline_pred_bytes("fsdp2", 2, 8192, 128_256, 1, 2)
    Fraction(2101346304, 1)
    >>> pipeline_pred_bytes("fsdp2", 1, 8192, 128_256, 1, 2), pipeline_pred_bytes(
    ...     "deepspeed", 2, 8192, 128_256, 1, 2)
    (0, 0)
    """
    if Framework(framework) is not Framework.FSDP2:
        return 0
    return where(pp > 1, beta * exact(tokens) * vocab / tp, 0)
