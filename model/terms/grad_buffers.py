"""Gradient buffers a mechanism keeps in a dtype of their own: the embeddings' FP32 gradients
under Apex's ``DistributedFusedAdam`` as NeMo runs it (:attr:`model.mechanisms.Mechanism.
embedding_grad_bytes`).

* :func:`stage_embedding_per_gpu` — the embedding elements each pipeline stage holds on one GPU
  (exact, cached on what it reads);
* :func:`embedding_grad_term` — the term: the extra gradient bytes of those elements on the
  stage ``f.stage``, read by :func:`model.terms.state.model_state_term` (so by evaluate, the
  search's tables and the per-stage search alike).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.mechanisms import Mechanism
from trainplan.model.model_spec import ModelSpec
from trainplan.model.params import count_params, padded_vocab, shares_embedding_with_last_stage
from trainplan.model.split import output_rank
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.split_key import SPLIT_FIELDS, SplitKey
from trainplan.model.terms.stage_params import busiest_stage, stage_params_per_gpu
from trainplan.model.vocab import vocab_multiple_for

__all__ = [
    "stage_embedding_per_gpu",
    "stage_embedding",
    "busiest_embedding",
    "embedding_grad_term",
    "EMBEDDING_FIELDS",
]

EMBEDDING_FIELDS = ("tp", "pp", "virtual_stages", "framework", "schedule")
"""What :func:`stage_embedding_per_gpu` reads of a layout (the framework for its vocabulary
padding)."""


@lru_cache(maxsize=4096)
def stage_embedding_per_gpu(
    model: ModelSpec, tp: int, pp: int, v: int, vocab_multiple: int, schedule: Any = None
) -> tuple[Fraction, ...]:
    """Per pipeline stage, the embedding elements on one GPU: on the first stage the word
    embedding (vocabulary-parallel, the padded ``V·h ÷ tp``) and the learned position
    embedding (whole on every tp rank); on the rank of the last model chunk
    (:func:`model.split.output_rank`), when it is not the first, its copy of a tied embedding
    (:func:`model.params.shares_embedding_with_last_stage`). An untied output layer is not an
    embedding. Zeros for a size-only model.

    Examples
    --------
    GPT-3 175B (h 12,288, V 50,257 padded to 50,688 at tp 4: multiple 128 × 4; 2,048 learned
    positions; tied) on pp 2: 50,688 · 12,288 ÷ 4 + 2,048 · 12,288 = 180,879,360 on the first
    stage, the tied copy 155,713,536 on the second.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> stage_embedding_per_gpu(get_model("gpt3-175b").model, 4, 2, 1, 128)
    (Fraction(180879360, 1), Fraction(155713536, 1))
    """
    arch = model.arch
    if arch is None:
        return (Fraction(0),) * pp
    vocab = padded_vocab(arch.vocab_size, vocab_multiple, tp)
    word = vocab * arch.hidden_size
    positions = count_params(arch, vocab).embedding - word
    out = [Fraction(0)] * pp
    out[0] += Fraction(word, tp) + positions
    last = output_rank(pp, v, schedule)
    if last != 0 and shares_embedding_with_last_stage(arch):
        out[last] += Fraction(word, tp)
    return tuple(out)


def _stage_embedding(
    model: ModelSpec, given: int | None, tp: int, pp: int, v: int, framework: Any, schedule: Any
) -> tuple[Fraction, ...]:
    multiple = vocab_multiple_for(framework, given)
    return stage_embedding_per_gpu(model, tp, pp, v, multiple, schedule)


def stage_embedding(c: Context, f: Fields) -> Any:
    """:func:`stage_embedding_per_gpu` of stage ``f.stage`` (0 for a size-only model)."""
    if c.model.arch is None:
        return Fraction(0)
    return f.per_stage(_stage_embedding, (c.model, c.vocab_multiple), *EMBEDDING_FIELDS)


def _busiest_embedding(model: ModelSpec, given: int | None, *fields: Any) -> Fraction:
    key = SplitKey.of(model, given, *fields)
    stage = busiest_stage(stage_params_per_gpu(key))
    return stage_embedding_per_gpu(model, key.tp, key.pp, key.v, key.vocab_multiple, key.schedule)[
        stage
    ]


def busiest_embedding(c: Context, f: Fields) -> Any:
    """:func:`stage_embedding_per_gpu` of the stage with the most parameters
    (:func:`model.terms.stage_params.busiest_params`' stage, whose optimizer steps longest);
    0 for a size-only model."""
    if c.model.arch is None:
        return Fraction(0)
    return f.lookup(_busiest_embedding, (c.model, c.vocab_multiple), *SPLIT_FIELDS)


def embedding_grad_term(c: Context, f: Fields, mech: Mechanism) -> Any:
    """Gradient bytes on one GPU of stage ``f.stage`` beyond what ``mech`` counts for its
    embeddings, where it keeps their gradients wider than the others
    (:meth:`Mechanism.embedding_grad_extra` of :func:`stage_embedding_per_gpu`); 0 otherwise.
    Their reduce-scatter shard (÷ D) at the step is not added. Exact for one layout;
    element-wise over columns."""
    if not mech.embedding_grad_extra(1):
        return 0
    return mech.embedding_grad_extra(stage_embedding(c, f))
