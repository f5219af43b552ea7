"""Activation bytes of a pipeline's end stages outside its transformer layers, per micro-batch:
:func:`embedding_bytes` (the input embedding's dropout mask, the output layer's and the loss's
inputs, an MTP block's projection inputs) and :func:`mtp_recompute_transient` (what an MTP
module's recompute brings back). Read by :mod:`model.terms.activations` for the evaluator and
the search's arrays alike (element-wise over columns).

**MTP modules.** Each of D MTP modules on the last stage keeps what the main head keeps for its
own pass through the shared head, the shifted embedding's norm input ``β·S·h``, the
projection's input ``[S, 2h]``, ``2·β·S·h`` (each ÷ tp with SP); the hidden state's norm input is
a tensor the heads already keep, except with ``mtp_copied`` (:func:`mtp_copied`:
Megatron-Core), where it is ``β·S·h`` more (÷ tp with SP): the previous final norm's output
(the decoder's, or the previous module's), which no head keeps, the heads reading a copy,
``torch.cat(hidden_states_list)`` (``MultiTokenPredictionBlock.forward``, Megatron-LM
d98e8a64dd and 92c8482e6d), each head's input one chunk of it (``process_mtp_loss``,
``torch.chunk``). With ``mtp_checkpointed`` (``recompute`` full or √n, the MTP block
recomputed whole) Megatron-Core checkpoints each module's ``_proj_and_transformer_layer`` as
one unit (``MultiTokenPredictionLayer._checkpointed_forward``, d98e8a64dd; the same unit, its
final norm inside, at 92c8482e6d): it keeps only that call's inputs — the shifted embedding
(the ``β·S·h`` checkpoint the MTP block's layer form already counts) and the hidden state
(counted as above) — so the module's projection input and its final norm's input are not kept (they are back while it recomputes:
:func:`mtp_recompute_transient`); its head's input (the chunk of the copy) and its logits are.

One MTP module (h 8, S 4, V 16, β 2, FP32 logits): its head pass (2·2·4·8 + 4·4·16) and its norm and projection inputs
(3·2·4·8) more; checkpointed, its head pass less the final norm's input (2·4·8 + 4·4·16);
with Megatron-Core's copied heads, the hidden state's 2·4·8 more in either case.

>>> from fractions import Fraction; from trainplan.model.specs import Architecture
>>> mtp = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
...                    ffn_hidden_size=32, vocab_size=16, mtp_layers=1)
>>> embedding_bytes(mtp, False, True, Fraction(4), 1, False, 2, 16)  # 2·384 + 192
Fraction(960, 1)
>>> embedding_bytes(mtp, False, True, Fraction(4), 1, False, 2, 16, mtp_checkpointed=True)
Fraction(704, 1)
>>> [embedding_bytes(mtp, False, True, Fraction(4), 1, False, 2, 16, False, False, 4, c, True)
...  for c in (False, True)]  # copied: 960 + 64, 704 + 64
[Fraction(1024, 1), Fraction(768, 1)]
"""

from __future__ import annotations

from typing import Any

from trainplan.model.specs import Architecture
from trainplan.model.xp import where

__all__ = ["embedding_bytes", "mtp_copied", "mtp_recompute_transient"]


def embedding_bytes(
    arch: Architecture,
    first: Any,
    last: Any,
    tokens: Any,
    tp: Any,
    sequence_parallel: Any,
    activation_bytes: int,
    vocab: Any,
    gathered: Any = False,
    norms_recomputed: Any = False,
    logit_bytes: Any = 4,
    mtp_checkpointed: Any = False,
    mtp_copied: Any = False,
) -> Any:
    """Activation bytes of the embedding and the output layer per micro-batch on one GPU of a
    stage: the input embedding's dropout mask ``S·h`` (÷ tp with SP) on the ``first`` stage of a
    model with dropout; on the ``last`` stage the final norm's and the output projection's inputs
    ``2·β·S·h`` (÷ tp with SP) and what the loss keeps of the logits, ``logit_bytes·S·V/tp`` (V
    the padded rows, ``vocab``; the FP32 softmax, 4, or Transformer Engine's fused loss's BF16
    gradient in the logits buffer, 2: :func:`model.loss_memory.loss_kept_bytes_per_element`),
    with final-logit soft-capping also tanh's output ``β·S·V/tp`` (Gemma 2); D MTP modules,
    ``mtp_checkpointed``, ``mtp_copied``: the module docstring. S = tokens a micro-batch. With
    ``gathered`` (``fsdp2``, :attr:`model.frameworks.Framework.gathers_block_inputs`) the output
    projection keeps the final norm's all-gathered output, whole on every tp rank (torchtitan
    ``decoder_sharding.py`` ``pre_lm_head_norm_config``: ``Replicate`` before ``lm_head``). With
    ``norms_recomputed`` (DeepSeek-V3 §3.2.3; :attr:`model.activations.ActivationContext.
    every_norm`) the final norm's output, the output projection's input and an MTP module's
    projection input are not kept.

    Examples
    --------
    >>> from fractions import Fraction; from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> embedding_bytes(arch, False, True, Fraction(4), 1, False, 2, 16)  # 2·2·4·8 + 4·4·16
    Fraction(384, 1)
    >>> embedding_bytes(arch, False, True, Fraction(4), 1, False, 2, 16, norms_recomputed=True)
    Fraction(320, 1)
    """
    h, beta, d = arch.hidden_size, activation_bytes, arch.mtp_layers
    sp_div = where(sequence_parallel, tp, 1)
    dropout = tokens * h / sp_div if arch.dropout else 0
    logits = (logit_bytes + (beta if arch.final_logit_softcapping else 0)) * tokens * vocab / tp
    kept_norm_output = where(norms_recomputed, 0, 1)
    norm_output = kept_norm_output * beta * tokens * h / where(gathered, 1, sp_div)
    one = beta * tokens * h / sp_div
    head = one + norm_output + logits
    # a norm's and the projection's inputs; checkpointed: less the final norm's input (the shifted
    # embedding is the layer form's checkpoint); the hidden state where the heads read a copy
    kept_inputs = where(mtp_checkpointed, -1, 1 + 2 * kept_norm_output) + where(mtp_copied, 1, 0)
    output = (1 + d) * head + d * kept_inputs * one
    return where(first, dropout, 0) + where(last, output, 0)


def mtp_recompute_transient(
    arch: Architecture, last: Any, tokens: Any, tp: Any, sequence_parallel: Any,
    activation_bytes: int, mtp_checkpointed: Any,
) -> Any:  # fmt: skip
    """Bytes an MTP module's recomputation brings back beyond its transformer layer's own (which
    the layer forms' transient counts), on the stage that holds the MTP blocks, once (the
    modules recompute one after another in backward): its projection's input ``[S, 2h]`` and its
    final norm's input, ``3·β·S·h`` (÷ tp with SP), which :func:`embedding_bytes` does not keep
    under ``mtp_checkpointed``; 0 otherwise or without MTP blocks. The module's norm inputs are
    the checkpoint's own tensors (``tensor_parallel.checkpoint`` detaches them, sharing their
    storage).

    >>> from fractions import Fraction
    >>> from trainplan.model.specs import Architecture
    >>> mtp = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16, mtp_layers=1)
    >>> mtp_recompute_transient(mtp, True, Fraction(4), 1, False, 2, True)  # 3·2·4·8
    Fraction(192, 1)
    """
    if not arch.mtp_layers:
        return 0
    one = activation_bytes * tokens * arch.hidden_size / where(sequence_parallel, tp, 1)
    return where(last & mtp_checkpointed, 3 * one, 0)


def mtp_copied(framework: Any) -> bool:
    """Whether ``framework``'s shared head reads a copy of the hidden states, so that each MTP
    module's incoming hidden state is kept apart from the heads' inputs (its norm's input, or
    its checkpoint's): Megatron-Core's ``MultiTokenPredictionBlock.forward`` returns
    ``torch.cat(hidden_states_list)`` and ``process_mtp_loss`` feeds the heads its chunks
    (Megatron-LM d98e8a64dd and 92c8482e6d, ``megatron/core/transformer/
    multi_token_prediction.py``). The other profiles model MTP as the report describes it
    (DeepSeek-V3 §2.2), the hidden state being the tensor the main head's final norm keeps.

    >>> mtp_copied("megatron"), mtp_copied("textbook")
    (True, False)
    """
    return str(framework) == "megatron"
