"""The routed token-rows of a MoE layer, per micro-batch, on the busiest expert-parallel rank: the
one rule the clock's expert GEMMs, permutation and all-to-all (:mod:`model.ops`,
:mod:`model.moe_dispatch`) and the memory of the routed tensors
(:meth:`model.activations.ActivationContext.routed_row_factors`, :mod:`model.moe_working_set`)
read, for the routing of a :class:`model.moe_run.MoERun` (capacity factor, padding, imbalance):

* :func:`rank_rows` — rows the busiest rank's local experts receive, whole rows;
* :func:`mean_rows_sent` — rows one rank puts into a dispatch on average;
* :func:`deepspeed_slots` — DeepSpeed's ``E·C`` buffer rows, padded on both sides;
* :func:`row_factors` — (sent, received) ÷ the balanced dropless ``k·T``, ep = 1 and
  DeepSpeed's buffers in;
* :func:`routed_rows` — the same as rows for the clock.

Sources are cited per function.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from trainplan.model.moe import expert_capacity
from trainplan.model.moe_run import MoERun
from trainplan.model.xp import exact, floor, is_array, minimum

__all__ = ["rank_rows", "mean_rows_sent", "deepspeed_slots", "row_factors", "routed_rows"]


def rank_rows(run: MoERun, tokens: int, experts: int, top_k: int) -> Fraction:
    """Routed token-rows the busiest expert-parallel rank receives per micro-batch, per token
    of its own ``tokens`` (the copies every rank sends, ``T·k`` on average, equal what it
    receives on average): dropless ``imbalance·T·k``; a capacity factor caps each expert's
    rows from each source rank at ``C = ceil(T·k/E·cf)`` (:func:`model.moe.expert_capacity`),
    so a rank's local experts receive at most ``E·C`` (``E/ep`` experts × ``ep`` sources × C);
    padded, exactly ``E·C`` (Megatron-Core ``token_dispatcher.py``: ``num_out_tokens =
    capacity × num_experts``). Whole rows: ``imbalance·T·k`` is rounded up, as the all-to-all's
    output is a tensor of whole rows (Megatron-LM d98e8a64dd ``token_dispatcher.py``
    ``MoEAlltoAllTokenDispatcher.token_dispatch``: ``all_to_all(..., self.output_splits, ...)``,
    integer row counts), so the bytes of every buffer sized by it are whole.

    Examples
    --------
    >>> rank_rows(MoERun(imbalance=Fraction(3, 2)), 4096, 256, 8)  # 1.5 × 32,768
    Fraction(49152, 1)
    >>> rank_rows(MoERun(Fraction(1), imbalance=Fraction(3, 2)), 4096, 256, 8)  # capped at E·C
    Fraction(32768, 1)
    >>> rank_rows(MoERun(Fraction(2), pad_to_capacity=True), 4096, 256, 8)  # E·C, C = 256
    Fraction(65536, 1)
    >>> rank_rows(MoERun(imbalance=Fraction(13, 10)), 4096, 256, 8)  # ceil(42,598.4)
    Fraction(42599, 1)
    """
    busiest = Fraction(math.ceil(run.imbalance * tokens * top_k))
    if run.capacity_factor is None:
        return busiest
    cap = experts * expert_capacity(tokens, experts, top_k, run.capacity_factor)
    return Fraction(cap) if run.pad_to_capacity else min(busiest, Fraction(cap))


def mean_rows_sent(run: MoERun, tokens: Any, experts: int, top_k: int, padded: bool = False) -> Any:
    """Routed token-rows one rank puts into a dispatch on average: ``T·k`` dropless, ``E·C`` padded
    (``C = ceil(T·k·cf/E)``), ``min(T·k, E·C)`` dropping (at most what the capacities take;
    imbalance's drops beyond that are not counted); ``padded`` (DeepSpeed's native MoE,
    :func:`deepspeed_slots`): ``E·C`` always, dropless ``C = ceil(imbalance·T·k/E)``. Exact for
    ints and Fractions, element-wise for arrays of ``tokens``.

    Examples
    --------
    >>> mean_rows_sent(MoERun(Fraction(1, 2)), 4096, 256, 8)  # E·C = 256·64, dropping half
    16384
    >>> mean_rows_sent(MoERun(Fraction(1, 2)), 4096, 256, 8, padded=True)  # DeepSpeed pads
    16384
    >>> mean_rows_sent(MoERun(imbalance=Fraction(13, 10)), 4096, 32, 4, padded=True)  # 32 × 666
    21312
    """
    rows = exact(tokens) * top_k
    if run.capacity_factor is None and not (padded and run.imbalance != 1):
        return rows
    factor = run.imbalance if run.capacity_factor is None else run.capacity_factor
    cf = float(factor) if is_array(tokens) else factor
    filled = experts * -floor(-rows * cf / experts)
    return filled if run.pad_to_capacity or padded else minimum(rows, filled)


def deepspeed_slots(run: MoERun, tokens: Fraction, experts: int, top_k: int) -> int:
    """Rows ``E·C`` of DeepSpeed's native MoE's dispatch buffers, ``[E, C, h]`` on every rank,
    both sides of the all-to-all, at any ep (DeepSpeed edaa72212 ``deepspeed/moe/sharded_moe.py``
    ``MOELayer.forward``: ``_sparse_encode`` fills ``E·C`` slots, ``_AllToAll`` exchanges equal
    chunks of them, the experts run ``[ep, E/ep, C, h]``), for ``tokens`` = T (rounded up):

    * a capacity factor: ``C = ceil(T·k/E·cf)`` (``_capacity`` of ``capacity_factor × k``,
      ``drop_tokens=True``), padded whether or not ``pad_to_capacity`` is set;
    * dropless (``drop_tokens=False``): ``C`` is the busiest expert's count, all-reduced to the
      group's maximum (``topkgating``: ``new_capacity = torch.max(exp_counts)``,
      ``dist.all_reduce(..., op=ReduceOp.MAX)``): ``C = ceil(imbalance·T·k/E)`` — the busiest
      rank's share, the busiest expert's being no smaller — at ep = 1 too.

    DeepSpeed's ``min_capacity`` (8 rows an expert by default) is not counted.

    Examples
    --------
    >>> deepspeed_slots(MoERun(imbalance=Fraction(3, 2)), Fraction(4096), 256, 8)  # 256 × 192
    49152
    >>> deepspeed_slots(MoERun(imbalance=Fraction(13, 10)), Fraction(4096), 32, 4)  # 32 × 666
    21312
    """
    return int(mean_rows_sent(run, max(1, math.ceil(tokens)), experts, top_k, padded=True))


def row_factors(
    run: MoERun, tokens: Fraction, experts: int, top_k: int, ep: int, padded: bool = False
) -> tuple[Fraction, Fraction]:
    """(sent, received): the routed token-rows a rank's tensors hold per MoE layer and
    micro-batch, each ÷ the balanced dropless ``k·T`` the memory rows are written at, for a
    rank of ``tokens`` = T tokens (``(s/cp)·b``, ÷ tp with sequence parallelism):

    * *sent* — the source side (the permuted tokens before the dispatch, the combine's
      all-to-all output and what un-permutes it): :func:`mean_rows_sent`, ``E·C`` padded to
      capacity (Megatron-LM d98e8a64dd ``megatron/core/transformer/moe/token_dispatcher.py``
      ``MoEAlltoAllTokenDispatcher.preprocess``: ``num_out_tokens = capacity * num_experts``
      under ``moe_pad_expert_input_to_capacity``, the rows ``dispatch_preprocess``' ``permute``
      makes); every rank sends its own tokens' copies, so imbalance leaves it;
    * *received* — the experts' side of the busiest expert-parallel rank (the dispatch's
      all-to-all output, the experts' input, FC1's output, the activation's input and output,
      the experts' output before the combine): :func:`rank_rows`, the rows the clock's expert
      GEMMs run (``preprocess``: ``output_splits``, "the number of tokens received by the
      current rank", and padded ``num_global_tokens_per_local_expert = capacity`` for each
      source and local expert; ``token_dispatch``' ``all_to_all`` returns that many rows, which
      ``experts.py`` ``TEGroupedMLP.forward`` runs by ``tokens_per_expert``). At ep = 1 one rank
      holds every expert and receives what it sent (no imbalance between ranks).

    The memory verdict is the busiest rank's: a rank whose experts take ``imbalance`` times the
    mean holds that many routed rows. (1, 1) dropless and balanced, the defaults.

    ``padded``: DeepSpeed's native MoE, ``E·C`` rows on both sides at any ep
    (:func:`deepspeed_slots`).

    Examples
    --------
    >>> # ceil(1.3 × 32,768) = 42,599 whole rows of 32,768 (:func:`rank_rows`)
    >>> row_factors(MoERun(imbalance=Fraction(13, 10)), Fraction(4096), 256, 8, 8)
    (Fraction(1, 1), Fraction(42599, 32768))
    >>> row_factors(MoERun(imbalance=Fraction(13, 10)), Fraction(4096), 256, 8, 1)
    (Fraction(1, 1), Fraction(1, 1))
    >>> # C = ceil(4096·8/256·1.5) = 192, E·C = 49,152 rows of 32,768: both sides padded
    >>> row_factors(MoERun(Fraction(3, 2), pad_to_capacity=True), Fraction(4096), 256, 8, 8)
    (Fraction(3, 2), Fraction(3, 2))
    >>> # DeepSpeed pads whether asked or not (:func:`deepspeed_slots`)
    >>> row_factors(MoERun(Fraction(3, 2)), Fraction(4096), 256, 8, 8, padded=True)
    (Fraction(3, 2), Fraction(3, 2))
    """
    mean = Fraction(tokens) * top_k
    if mean <= 0 or (run.capacity_factor is None and run.imbalance == 1):
        return Fraction(1), Fraction(1)
    if padded:
        both = Fraction(deepspeed_slots(run, tokens, experts, top_k)) / mean
        return both, both
    sent = Fraction(mean_rows_sent(run, Fraction(tokens), experts, top_k)) / mean
    if ep <= 1:
        return sent, sent
    received = Fraction(rank_rows(run, max(1, math.ceil(tokens)), experts, top_k)) / mean
    return sent, received


def routed_rows(
    run: MoERun, tokens: float, experts: int, top_k: int, ep: int, padded: bool = False
) -> tuple[float, float]:
    """(sent, received) routed token-rows of one MoE layer and micro-batch on the busiest
    expert-parallel rank, for the clock: :func:`row_factors` × ``k·T`` for a token count that
    may be a float (the layer shapes' ``T``), as floats — the one rule memory sizes its routed
    tensors by, so time and memory agree. *Received* is what the rank's local experts compute:
    the expert GEMMs run the rows the all-to-all returned (Megatron-LM d98e8a64dd
    ``megatron/core/transformer/moe/experts.py`` ``TEGroupedMLP.forward`` runs
    ``permuted_local_hidden_states`` split by ``tokens_per_expert``, whose sum is
    ``token_dispatcher.py`` ``MoEAlltoAllTokenDispatcher.preprocess``' ``output_splits``, "the
    number of tokens received by the current rank"). At ep = 1 the rank holds every expert and
    computes all its ``T·k`` copies whatever the routing: imbalance changes the per-expert
    shapes, not the rank's work. *Sent* is the source side (the permutation before the
    dispatch and the un-permutation after the combine, ``dispatch_preprocess``' ``permute`` of
    ``num_out_tokens`` rows, ``combine_postprocess``' ``unpermute``). ``padded``: DeepSpeed's
    ``E·C`` buffers (:func:`row_factors`).

    Examples
    --------
    >>> routed_rows(MoERun(imbalance=Fraction(13, 10)), 4096.0, 256, 8, 8)  # ceil(1.3·32,768)
    (32768.0, 42599.0)
    >>> routed_rows(MoERun(imbalance=Fraction(13, 10)), 4096.0, 256, 8, 1)  # one rank: all of it
    (32768.0, 32768.0)
    """
    sent, received = row_factors(run, Fraction(tokens), experts, top_k, ep, padded)
    rows = tokens * top_k
    return float(sent) * rows, float(received) * rows
