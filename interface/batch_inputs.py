"""The global batch given in tokens, and the notes on inputs a published run does not have: a
batch no published run comes near, a sequence past the model's trained context,
multi-token-prediction modules added to a model published without them.

Engineers quote a batch in tokens (Llama 3 405B: 16M tokens a step, Llama Team, The Llama 3 Herd
of Models (2024), arXiv 2407.21783, §3.4.1); the planner's ``global_batch_size`` counts sequences
(Megatron-LM's ``--global-batch-size``, megatron/training/arguments.py). ``global_batch_tokens``
gives it in tokens: a whole number of sequences of ``seq_len``, turned into sequences here, once,
before the recipe is read (:func:`with_batch_in_sequences`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainplan.interface.model_inputs import count_of
from trainplan.model.errors import InputError, check_applicable
from trainplan.model.model_spec import ModelSpec
from trainplan.model.params import count_params
from trainplan.model.specs import TrainingSpec
from trainplan.model.units import parse_count
from trainplan.optimizer.case import DEFAULT_SEQ_LEN

__all__ = [
    "LARGEST_PUBLISHED_BATCH_TOKENS",
    "TOKENS_NOTE_ABOVE",
    "sequences_of_tokens",
    "with_batch_in_sequences",
    "input_notes",
]

LARGEST_PUBLISHED_BATCH_TOKENS = 15_360 * 4_096
"""Tokens a step of the largest published pre-training batch the catalogue holds: DeepSeek-V3's
15,360 sequences of 4,096 tokens = 62,914,560 (DeepSeek-AI, DeepSeek-V3 Technical Report (2024),
arXiv 2412.19437, §4.2 "Hyper-Parameters"); Llama 3 405B's is 16M (arXiv 2407.21783 §3.4.1)."""

TOKENS_NOTE_ABOVE = 10**9
"""Tokens a step above which a batch given in sequences is noted as such: 10^9, about 16 times
:data:`LARGEST_PUBLISHED_BATCH_TOKENS` — a batch this large is almost surely a token count typed
as sequences (``--global-batch 4,000,000`` meant 4M tokens, planned as 4M sequences)."""


def sequences_of_tokens(value: Any, seq_len: int, key: str = "global_batch_tokens") -> int:
    """Sequences of a batch of ``value`` tokens (a count: ``16e6``, ``16,000,000``) at
    ``seq_len`` tokens a sequence.

    Raises
    ------
    InputError
        ``value`` not a whole positive count (:func:`model.units.parse_count`), or not a whole
        number of sequences: ``global_batch_tokens: 1,000 is not a whole number of sequences of
        8,192 (8,192 is 1)``.

    >>> sequences_of_tokens("16,777,216", 8192)
    2048
    """
    tokens = parse_count(value, key)
    if tokens % seq_len:
        lo, hi = tokens // seq_len, tokens // seq_len + 1
        nearest = f"{lo * seq_len:,} is {lo:,}, " if lo else ""
        raise InputError(
            f"{key}: {tokens:,} is not a whole number of sequences of {seq_len:,} "
            f"({nearest}{hi * seq_len:,} is {hi:,})"
        )
    return tokens // seq_len


def with_batch_in_sequences(
    params: Mapping[str, Any], published: Mapping[str, int]
) -> dict[str, Any]:
    """``params`` with ``global_batch_tokens`` (when given) replaced by ``global_batch_size``,
    in sequences of ``seq_len`` (given, else the model's published one, ``published["seq_len"]``,
    else :data:`optimizer.case.DEFAULT_SEQ_LEN`, as :func:`optimizer.case.training_of` reads it).

    Raises
    ------
    InputError
        Both ``global_batch_size`` and ``global_batch_tokens`` given; tokens that are not a whole
        number of sequences (:func:`sequences_of_tokens`).
    """
    out = dict(params)
    tokens = out.pop("global_batch_tokens", None)
    if tokens is None:
        return out
    check_applicable(
        {"global_batch_tokens": tokens if "global_batch_size" in out else None},
        {
            "global_batch_tokens": "give the batch in sequences (`global_batch_size`) or in "
            "tokens, not both"
        },
    )
    seq_len = count_of(out, "seq_len", published.get("seq_len", DEFAULT_SEQ_LEN))
    out["global_batch_size"] = sequences_of_tokens(tokens, seq_len)
    return out


def input_notes(
    params: Mapping[str, Any], published: ModelSpec, model: ModelSpec, training: TrainingSpec
) -> tuple[str, ...]:
    """The notes on ``params`` (each one line) planned as given but unlike any published run:

    - a batch given in sequences (``global_batch_size``, not ``global_batch_tokens``) of more
      than :data:`TOKENS_NOTE_ABOVE` tokens a step, said to count sequences;
    - ``seq_len`` over the context ``model`` was trained at
      (a catalogue model's ``[published] context_length``, with its source there): people
      extend context, so it is planned, but said;
    - ``mtp_layers`` given to a model published without multi-token prediction (``published``,
      the model as read, before ``mtp_layers``): counted, as Megatron-LM builds the MTP block
      of any GPT model given ``--mtp-num-layers`` (gpt_builders.py ``gpt_builder``, the last
      decoder layer's spec, commit d98e8a64dd), and said with the parameters it adds.
    """
    notes = []
    tokens = training.global_batch_size * training.seq_len
    if "global_batch_size" in params and tokens > TOKENS_NOTE_ABOVE:
        notes.append(
            f"global_batch_size: {training.global_batch_size:,} counts sequences: × "
            f"{training.seq_len:,} tokens = {tokens:,} tokens a step, "
            f"{tokens / LARGEST_PUBLISHED_BATCH_TOKENS:,.0f} × the largest published batch "
            f"(DeepSeek-V3: 15,360 × 4,096 = {LARGEST_PUBLISHED_BATCH_TOKENS:,} tokens, arXiv "
            "2412.19437 §4.2); for a batch in tokens give `global_batch_tokens`"
        )
    context = model.extra.get("context_length")
    if context is not None and "seq_len" in params and training.seq_len > context:
        notes.append(
            f"seq_len: {training.seq_len:,} tokens is over the {context:,} {model.name} was "
            "trained at (planned as a context extension would run it)"
        )
    before, after = published.arch, model.arch
    if before is not None and after is not None and before.mtp_layers == 0 < after.mtp_layers:
        added = count_params(after).total - count_params(before).total
        notes.append(
            f"mtp_layers: {after.mtp_layers} multi-token-prediction "
            f"module{'s' if after.mtp_layers > 1 else ''} added to "
            f"{model.name}, published without one: {added:,} parameters counted on the last "
            "pipeline stage, in its memory, FLOPs and time (DeepSeek-V3 §2.2's module; "
            "Megatron-LM's --mtp-num-layers builds it on any GPT model)"
        )
    return tuple(notes)
