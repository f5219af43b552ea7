"""How a vocabulary is split over the tensor-parallel ranks: padded as the framework pads it, and
never into fractional rows.

The input embedding and the output layer are split on their V rows over the tp ranks
(Megatron-LM's ``VocabParallelEmbedding`` and vocab-parallel output layer). Each profile pads V
its own way (:data:`VOCAB_MULTIPLE`); ``--pad-vocab N`` overrides it. Every figure that reads V
per rank (weights, gradients, optimizer state, logits, the tied-embedding all-reduce) reads
:func:`padded_vocab`; parameter counts and FLOPs keep the model's own V (the padded rows' logits,
under 1% of the output layer's FLOPs for Llama 3 at tp 8, are not counted).
"""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.xp import maximum

__all__ = ["VOCAB_MULTIPLE", "vocab_multiple_for", "padded_vocab"]

VOCAB_MULTIPLE: dict[Framework, int] = {
    Framework.MEGATRON: 128,
    Framework.DEEPSPEED: 1,
    Framework.FSDP2: 1,
    Framework.TEXTBOOK: 1,
}
"""How each profile pads the vocabulary, as :func:`padded_vocab`'s multiple (the rows the tp
ranks hold together are V rounded up to a multiple of it × tp):

* ``megatron`` 128: Megatron-LM pads V with dummy tokens to a multiple of
  ``make_vocab_size_divisible_by`` (default 128, ``megatron/training/arguments.py``) × the
  tensor-parallel size (``_vocab_size_with_padding``, ``megatron/training/tokenizer/
  tokenizer.py``): Llama 3's 128,256 becomes 129,024 at tp 8.
* ``deepspeed`` 1: the DeepSpeed engine does not pad (Megatron-DeepSpeed pads as Megatron-LM:
  give ``--pad-vocab 128``); a vocabulary tp does not divide is held as whole rows, ⌈V/tp⌉ on
  the busiest rank.
* ``fsdp2`` 1: torchtitan keeps the tokenizer's V; a tensor-parallel embedding or output layer
  is a DTensor sharded on its rows, which ``Shard(0)`` splits as ``torch.chunk`` does (⌈V/tp⌉
  rows on the first ranks, fewer on the last).
* ``textbook`` 1: V/tp, in whole rows.
"""


def vocab_multiple_for(framework: Framework, given: int | None = None) -> int:
    """The vocabulary padding multiple a layout uses: ``given`` (``--pad-vocab``) when set, else
    its framework's (:data:`VOCAB_MULTIPLE`).

    Examples
    --------
    >>> vocab_multiple_for(Framework.MEGATRON), vocab_multiple_for(Framework.FSDP2, 64)
    (128, 64)
    """
    return VOCAB_MULTIPLE[framework] if given is None else given


def padded_vocab(vocab_size: int, multiple: Any = 1, tp: Any = 1) -> Any:
    """The vocabulary rows the tp ranks hold together: V rounded up to a multiple of
    ``multiple · tp`` — Megatron-LM's ``_vocab_size_with_padding`` with
    ``make_vocab_size_divisible_by`` = ``multiple`` (128 by default there). ``multiple`` 1 (or
    less) pads only to whole rows per rank: tp·⌈V/tp⌉, the rows the busiest rank holds times tp
    (a vocabulary tp does not divide is never split into fractional rows). Works on arrays of tp
    and of multiples (the search's tables).

    Examples
    --------
    >>> padded_vocab(50257, 128, 8)
    51200
    >>> padded_vocab(128256)
    128256
    >>> padded_vocab(151655, 1, 8)  # 8 ranks of ⌈151655/8⌉ = 18957 rows
    151656
    """
    step = maximum(multiple, 1) * tp
    return -(-vocab_size // step) * step
