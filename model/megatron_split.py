"""The pipeline split Megatron-Core builds from its arguments:
``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` (the end stages'
own counts, the rest even over the middle) or ``--account-for-embedding-in-pipeline-split`` /
``--account-for-loss-in-pipeline-split`` (the embedding and the loss counted as one layer each),
never both (Megatron-Core
``megatron/core/transformer/transformer_block.py``, ``get_num_layers_to_build``; the rules are
checked in ``transformer_config.py``).

Per-chunk layer counts in model order, exact integers, as :mod:`model.split` takes them
(:attr:`model.layout.Layout.stage_layers`); errors are :class:`model.errors.LayoutError` naming
the parameter, the value and the rule.
"""

from __future__ import annotations

from trainplan.model.errors import LayoutError
from trainplan.model.split import chunk_sizes_from_ranks, default_chunk_sizes

__all__ = ["megatron_stage_layers", "accounted_chunk_sizes", "first_last_chunk_sizes"]


def megatron_stage_layers(
    num_layers: int,
    pp: int,
    v: int = 1,
    *,
    first: int | None = None,
    last: int | None = None,
    account_for_embedding: bool = False,
    account_for_loss: bool = False,
) -> tuple[int, ...]:
    """Per-chunk layer counts (model order) as Megatron-Core builds them from its arguments.

    ``first``/``last`` (``--decoder-first-pipeline-num-layers`` /
    ``--decoder-last-pipeline-num-layers``): the first/last stage holds that many layers, the
    other stages share the rest evenly. ``account_for_embedding``/``account_for_loss``
    (``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split``):
    the embedding and the loss count as one layer each, L + 1 (+ 1) is split evenly over the
    pp·v chunks, and the first (last) chunk builds one transformer layer fewer. Megatron-Core
    refuses to combine the two families (its ``transformer_config.py`` checks).

    Raises
    ------
    LayoutError
        When the families are combined, a count is negative or exceeds L, or what Megatron-Core
        asserts divisible is not (the rest over the middle stages; every stage's count by v;
        L + 1 (+ 1) by pp·v).

    Examples
    --------
    Llama 3 405B's 126 layers on 16 stages, embedding and loss accounted: 128 / 16 = 8 slots per
    stage, the first and the last stage give one to the embedding and the loss:

    >>> megatron_stage_layers(126, 16, account_for_embedding=True, account_for_loss=True)
    (7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7)
    >>> megatron_stage_layers(30, 4, first=6, last=6)
    (6, 9, 9, 6)
    """
    accounted = account_for_embedding or account_for_loss
    given = (first is not None) + (last is not None)
    if accounted and given:
        raise LayoutError(
            "first_stage_layers: Megatron-Core does not combine --decoder-first-pipeline-num-layers"
            " / --decoder-last-pipeline-num-layers with --account-for-embedding-in-pipeline-split /"
            " --account-for-loss-in-pipeline-split"
        )
    if not accounted and not given:
        return default_chunk_sizes(num_layers, pp, v)
    if accounted:
        return accounted_chunk_sizes(num_layers, pp, v, account_for_embedding, account_for_loss)
    return first_last_chunk_sizes(num_layers, pp, v, first, last)


def accounted_chunk_sizes(
    num_layers: int, pp: int, v: int, embedding: bool, loss: bool
) -> tuple[int, ...]:
    """Per-chunk layer counts under Megatron-Core's ``--account-for-embedding-in-pipeline-split``
    (``embedding``) / ``--account-for-loss-in-pipeline-split`` (``loss``): L + 1 (+ 1) slots
    split evenly over the pp·v chunks, the first (last) chunk one transformer layer fewer.

    Raises
    ------
    LayoutError
        L + 1 (+ 1) not divisible by pp·v, or a chunk left with fewer than no layers.

    >>> accounted_chunk_sizes(30, 4, 1, True, True)
    (7, 8, 8, 7)
    """
    slots = num_layers + embedding + loss
    if slots % (pp * v):
        raise LayoutError(
            f"account_for_embedding: num_layers {num_layers} + embedding/loss = {slots} is not "
            f"divisible by pp {pp} × virtual_stages {v} = {pp * v}"
        )
    sizes = [slots // (pp * v)] * (pp * v)
    sizes[0] -= embedding
    sizes[-1] -= loss
    if min(sizes) < 0:
        raise LayoutError(
            f"account_for_embedding: {slots} slots over {pp * v} chunks leave a chunk with "
            "fewer layers than none"
        )
    return tuple(sizes)


def first_last_chunk_sizes(
    num_layers: int, pp: int, v: int, first: int | None, last: int | None
) -> tuple[int, ...]:
    """Per-chunk layer counts under Megatron-Core's ``--decoder-first-pipeline-num-layers``
    (``first``) / ``--decoder-last-pipeline-num-layers`` (``last``), at least one given: the
    first/last stage holds that many layers, the other stages share the rest evenly, each
    stage's count then split over its ``v`` chunks (:func:`chunk_sizes_from_ranks`).

    Raises
    ------
    LayoutError
        A count negative or over L, counts that do not cover the layers at pp ≤ 2, or a rest
        that does not split evenly over the middle stages.

    >>> first_last_chunk_sizes(30, 4, 1, 6, None)
    (6, 8, 8, 8)
    """
    given = (first is not None) + (last is not None)
    if pp == 1 or (pp == 2 and given == 2 and (first or 0) + (last or 0) != num_layers):
        raise LayoutError(
            f"first_stage_layers: with pp {pp} the first/last stage counts must cover all "
            f"{num_layers} layers"
        )
    rest, middle = num_layers, pp
    for name, n in (("first_stage_layers", first), ("last_stage_layers", last)):
        if n is None:
            continue
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= num_layers:
            raise LayoutError(f"{name}: {n!r} must be a whole number from 0 to {num_layers}")
        rest, middle = rest - n, middle - 1
    if rest < 0 or (middle and rest % middle) or (not middle and rest):
        raise LayoutError(
            f"first_stage_layers: the {max(rest, 0)} layers left after the first/last stages do "
            f"not split evenly over the other {middle} stages"
        )
    each = rest // middle if middle else 0
    ranks = (
        first if first is not None else each,
        *([each] * (pp - 2)),
        last if last is not None else each,
    )
    return chunk_sizes_from_ranks(ranks, v)
