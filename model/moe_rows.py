"""The routed token-rows of a MoE layer, per micro-batch, on the busiest expert-parallel rank: the
one rule the clock's expert GEMMs, permutation and all-to-all (:mod:`model.ops`,
:mod:`model.moe_dispatch`) and the memory of the routed tensors
(:meth:`model.activations.ActivationContext.routed_row_factors`, :mod:`model.moe_working_set`)
read, for the routing of a :class:`model.moe_run.MoERun` (capacity factor, padding, imbalance):

* :func:`rank_rows` — rows the busiest rank's local experts receive, whole rows;
* :func:`mean_rows_sent` — rows one rank puts into a dispatch on average;
* :func:`deepspeed_capacity` — DeepSpeed's ``C`` (``min_capacity``; dropless, the group's
  busiest expert count);
* :func:`deepspeed_slots` — DeepSpeed's ``E·C`` buffer rows, padded on both sides;
* :func:`row_factors` — (sent, received) ÷ the balanced dropless ``k·T``, ep = 1 and
  DeepSpeed's buffers in;
* :func:`routed_rows` — the same as rows for the clock.

Sources are cited per function.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction
from typing import Any

from trainplan.model.errors import InputError
from trainplan.model.moe import capacity_rows
from trainplan.model.moe_run import MoERun
from trainplan.model.xp import elementwise, exact, floor, is_array, minimum

__all__ = [
    "rank_rows",
    "mean_rows_sent",
    "DEEPSPEED_MIN_CAPACITY",
    "deepspeed_capacity",
    "deepspeed_slots",
    "row_factors",
    "routed_rows",
]


def rank_rows(
    run: MoERun, tokens: Any, experts: int, top_k: int, padded: bool = False, ep: Any = None
) -> Any:
    """Routed token-rows the busiest expert-parallel rank receives per micro-batch, per token
    of its own ``tokens`` (the copies every rank sends, ``T·k`` on average, equal what it
    receives on average): dropless ``imbalance·T·k``; a capacity factor caps each expert's
    rows from each source rank at ``C`` (:func:`model.moe.capacity_rows`, Megatron-Core's
    ``get_capacity``), so a rank's local experts receive at most ``E·C`` (``E/ep`` experts ×
    ``ep`` sources × C); padded, exactly ``E·C`` (Megatron-Core ``token_dispatcher.py``:
    ``num_out_tokens = capacity × num_experts``); ``padded`` (DeepSpeed's native MoE): its
    ``E·C`` (:func:`mean_rows_sent`). Whole rows: ``imbalance·T·k`` is rounded up, as the
    all-to-all's output is a tensor of whole rows (Megatron-LM d98e8a64dd
    ``token_dispatcher.py`` ``MoEAlltoAllTokenDispatcher.token_dispatch``: ``all_to_all(...,
    self.output_splits, ...)``, integer row counts), so the bytes of every buffer sized by it
    are whole. A Fraction for scalars, element-wise for arrays of ``tokens``: the one rule the
    clock's expert GEMMs and all-to-all (:func:`routed_rows`) and the traffic table's expert
    row (:func:`model.comm_layers.ep_bytes`) read.

    No rank receives more than every source's tokens on each of its experts: each of ``ep``
    source ranks sends a token at most once to each of the rank's ``E/ep`` experts and at most
    ``k`` times in all, so the busiest rank's rows are at most ``ep·T·min(k, E/ep)`` (``E·T``
    when ``ep`` is not given): an imbalance above ``min(ep, E/k)`` is clipped there, as a
    capacity above T drops nothing (a token's k experts are distinct: Megatron-LM d98e8a64dd
    ``moe_utils.py`` ``topk_routing_with_score_function``, ``torch.topk(scores, k=topk,
    dim=1)``; DeepSpeed edaa72212 ``sharded_moe.py`` ``top1gating`` clips its dropless
    capacity at the tokens, ``mask1.size(0)``).

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
    >>> rank_rows(MoERun(imbalance=Fraction(5)), 4096, 8, 2, ep=8)  # 8 × 4,096 × min(2, 1)
    Fraction(32768, 1)
    """
    if padded:
        rows = mean_rows_sent(run, tokens, experts, top_k, padded=True)
        return rows if is_array(rows) else Fraction(rows)
    sent = exact(tokens) * top_k
    busiest = _ceil_scaled(sent, run.imbalance)
    if run.imbalance > 1:  # at most every source's tokens on each local expert
        busiest = minimum(busiest, exact(tokens) * _rows_per_token_bound(experts, top_k, ep))
    if run.capacity_factor is not None:
        filled = experts * capacity_rows(sent, experts, run.capacity_factor)
        busiest = filled if run.pad_to_capacity else minimum(busiest, filled)
    return busiest if is_array(busiest) else Fraction(busiest)


def imbalance_bound(experts: int, top_k: int, ep: int | None = None) -> Fraction:
    """The largest ``moe_imbalance`` a rank can receive (busiest rank's rows over the mean
    ``T·k``): ``ep·min(k, E/ep)/k``, i.e. ``min(ep, E/k)`` (``E/k`` when ``ep`` is not given),
    dimensionless. Each of ``ep`` source ranks sends a token at most once to each of a rank's
    ``E/ep`` experts and at most ``k`` times in all (a token's k experts are distinct:
    Megatron-LM d98e8a64dd ``moe_utils.py`` ``topk_routing_with_score_function``,
    ``torch.topk``). :func:`rank_rows` counts an imbalance above it at the bound, and the report
    says so (:func:`interface.render.moe_text.routing_words`).

    >>> imbalance_bound(8, 2, 8), imbalance_bound(8, 2, 2), imbalance_bound(256, 8)
    (Fraction(4, 1), Fraction(2, 1), Fraction(32, 1))
    """
    return Fraction(_rows_per_token_bound(experts, top_k, ep), top_k)


def _rows_per_token_bound(experts: int, top_k: int, ep: Any) -> Any:
    """``ep·min(k, E/ep)`` rows per source token at most on one rank (``E`` without ``ep``);
    element-wise for an array of ``ep`` (:func:`imbalance_bound`)."""
    return experts if ep is None else ep * minimum(top_k, experts // ep)


def _ceil_scaled(rows: Any, factor: Fraction) -> Any:
    """``ceil(rows × factor)`` in exact arithmetic, for scalars (an int) and element-wise for
    arrays (each float element taken as the exact value it holds), so the search's tables and
    the evaluator round alike: in float64 ``6,000 × 1.1`` is 6,600.000000000001, whose ceiling
    would be one row more than the exact 6,600.

    >>> 6000 * 1.1, _ceil_scaled(6000, Fraction(11, 10))
    (6600.000000000001, 6600)
    """
    if not is_array(rows):
        return math.ceil(Fraction(rows) * factor)
    if factor.denominator == 1:  # balanced routing: whole multiples, array arithmetic is exact
        return -floor(-(rows * factor.numerator))
    return elementwise(lambda r: float(math.ceil(Fraction(r) * factor)), rows)


def mean_rows_sent(run: MoERun, tokens: Any, experts: int, top_k: int, padded: bool = False) -> Any:
    """Routed token-rows one rank puts into a dispatch on average: ``T·k`` dropless, ``E·C`` padded
    (``C`` = :func:`model.moe.capacity_rows`, Megatron-Core's ``get_capacity``), ``min(T·k, E·C)``
    dropping (at most what the capacities take; imbalance's drops beyond that are not counted);
    ``padded`` (DeepSpeed's native MoE): ``E·C`` always, ``C`` = :func:`deepspeed_capacity`.
    Exact for ints and Fractions, element-wise for arrays of ``tokens``.

    Examples
    --------
    >>> mean_rows_sent(MoERun(Fraction(1, 2)), 4096, 256, 8)  # E·C = 256·64, dropping half
    16384
    >>> mean_rows_sent(MoERun(Fraction(1, 2)), 4096, 256, 8, padded=True)  # DeepSpeed pads
    16384
    >>> mean_rows_sent(MoERun(imbalance=Fraction(13, 10)), 4096, 32, 4, padded=True)  # 32 × 666
    21312
    """
    if padded:
        return experts * deepspeed_capacity(run, tokens, experts, top_k)
    rows = exact(tokens) * top_k
    if run.capacity_factor is None:
        return rows
    filled = experts * capacity_rows(rows, experts, run.capacity_factor)
    return filled if run.pad_to_capacity else minimum(rows, filled)


DEEPSPEED_MIN_CAPACITY = 4
"""DeepSpeed's ``min_capacity``, the fewest rows an expert's buffer holds under a capacity
factor: ``deepspeed.moe.layer.MoE(min_capacity=4)`` (DeepSpeed edaa72212
``deepspeed/moe/layer.py`` ``MoE.__init__``, passed to ``TopKGate``, whose own default of 8 a
``MoE`` layer overrides) and Megatron-DeepSpeed's ``--moe-min-capacity`` default 4
(deepspeedai/Megatron-DeepSpeed 4efb479d ``megatron/arguments.py``). Not read when dropless:
``topkgating`` and ``top2gating`` set ``capacity = new_capacity`` there, no minimum."""


def _float32(value: float) -> float:
    """``value`` rounded to the nearest float32 (round half to even, as CUDA and the CPU's
    float32 arithmetic do; IEEE 754 binary32)."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _deepspeed_factor_capacity(tokens: float, experts: int, factor: float) -> float:
    """``_capacity`` of DeepSpeed's gate in its own arithmetic: ``(num_tokens / num_experts)``, a
    Python float, times ``torch.tensor(capacity_factor × k)``, a float32 tensor, so the product
    is float32; ``torch.ceil`` of it, raised to :data:`DEEPSPEED_MIN_CAPACITY`.

    Raises
    ------
    InputError
        A capacity factor whose float32 product overflows (above about 3.4e38 rows), where
        DeepSpeed's ``torch.ceil`` would give inf.
    """
    try:
        product = _float32(_float32(tokens / experts) * _float32(factor))
    except OverflowError:
        product = math.inf
    if not math.isfinite(product):
        raise InputError(
            f"moe_capacity_factor: × top-k = {factor:.3g} overflows the float32 "
            "capacity DeepSpeed's gate computes (at most about 3.4e38 rows an expert)"
        )
    return float(max(DEEPSPEED_MIN_CAPACITY, math.ceil(product)))


def deepspeed_capacity(run: MoERun, tokens: Any, experts: int, top_k: int) -> Any:
    """``C`` of DeepSpeed's native MoE's ``[E, C, h]`` dispatch buffers for a rank routing
    ``tokens`` = T tokens (DeepSpeed edaa72212 ``deepspeed/moe/sharded_moe.py``):

    * a capacity factor (``drop_tokens=True``): ``_capacity(gates, capacity_factor × k,
      min_capacity)`` = ``max(min_capacity, ceil(T/E · cf·k))`` (``topkgating``; ``top1gating``
      and ``top2gating`` are its k = 1 and 2), in float32 as DeepSpeed computes it,
      ``min_capacity`` = :data:`DEEPSPEED_MIN_CAPACITY`;
    * dropless (``drop_tokens=False``): the largest count any expert takes from any rank of the
      group — ``new_capacity = torch.max(exp_counts)`` over this rank's own tokens, then
      ``dist.all_reduce(new_capacity, op=ReduceOp.MAX, group=ep_group)`` — with no
      ``min_capacity``, and at most T (an expert takes a token once; ``top1gating`` caps it at
      ``mask1.size(0)`` explicitly). :attr:`model.moe_run.MoERun.imbalance` is the busiest rank's
      received rows ÷ the mean ``T·k``: that rank's ``E`` (source rank, local expert) pairs —
      ``ep`` sources × ``E/ep`` experts — share ``imbalance·T·k`` rows, so one of them holds at
      least ``imbalance·T·k/E``, and the maximum over every pair is no smaller:
      ``C = min(T, ceil(imbalance·T·k/E))`` is a lower bound, exact when that rank's pairs are
      equally loaded (a router's spread between the experts of one rank and between source
      ranks is not an input). At ep = 1 the one rank's pairs are its ``E`` experts and the
      figure given is applied the same way, so there it stands for the busiest expert's rows ÷
      the mean.

    The dropless ``C`` is rounded up to a multiple of the dense tp when the expert
    tensor-parallel size is 1 (``top1gating``, ``top2gating`` and ``topkgating``:
    ``groups._get_expert_model_parallel_world_size() == 1``, which returns
    ``expert_tensor_parallel_world_size``; then ``ceil(new_capacity / tp) · tp``, ``tp`` =
    ``bwc_tensor_model_parallel_world_size``): the planner refuses DeepSpeed's MoE at tp > 1
    (:func:`model.expert_groups.check_expert_groups`), so tp = 1 and the rounding leaves ``C`` as it
    is. ``top2gating`` and ``topkgating`` do not clip the dropless ``C`` at T as ``top1gating``
    does; the busiest count is at most T whatever clips it. An int for scalars (T rounded up to
    whole tokens by the caller), element-wise for arrays.

    Examples
    --------
    >>> deepspeed_capacity(MoERun(imbalance=Fraction(3, 2)), 4096, 256, 8)  # 1.5 × 128
    192
    >>> deepspeed_capacity(MoERun(Fraction(1)), 64, 64, 2)  # ceil(1 × 2) = 2, raised to 4
    4
    >>> deepspeed_capacity(MoERun(imbalance=Fraction(5)), 100, 8, 2)  # ceil(125), at most 100
    100
    """
    if run.capacity_factor is None:
        return minimum(tokens, _ceil_scaled(exact(tokens) * top_k, run.imbalance / experts))
    factor = float(run.capacity_factor) * top_k
    if not is_array(tokens):
        return int(_deepspeed_factor_capacity(float(tokens), experts, factor))
    return elementwise(lambda t: _deepspeed_factor_capacity(t, experts, factor), tokens)


def deepspeed_slots(run: MoERun, tokens: Fraction, experts: int, top_k: int) -> int:
    """Rows ``E·C`` of DeepSpeed's native MoE's dispatch buffers, ``[E, C, h]`` on every rank,
    both sides of the all-to-all, at any ep (DeepSpeed edaa72212 ``deepspeed/moe/sharded_moe.py``
    ``MOELayer.forward``: ``_sparse_encode`` fills ``E·C`` slots, ``_AllToAll`` exchanges equal
    chunks of them, the experts run ``[ep, E/ep, C, h]``), for ``tokens`` = T rounded up to whole
    tokens; ``C`` = :func:`deepspeed_capacity` (a capacity factor, padded whether or not
    ``pad_to_capacity`` is set, at least ``min_capacity``; dropless, the busiest (source,
    expert) count's lower bound from the imbalance).

    Examples
    --------
    >>> deepspeed_slots(MoERun(imbalance=Fraction(3, 2)), Fraction(4096), 256, 8)  # 256 × 192
    49152
    >>> deepspeed_slots(MoERun(imbalance=Fraction(13, 10)), Fraction(4096), 32, 4)  # 32 × 666
    21312
    >>> deepspeed_slots(MoERun(Fraction(1)), Fraction(64), 64, 2)  # 64 × min_capacity 4
    256
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
    if mean <= 0 or (run.capacity_factor is None and run.imbalance == 1 and not padded):
        return Fraction(1), Fraction(1)
    if padded:
        both = Fraction(deepspeed_slots(run, tokens, experts, top_k)) / mean
        return both, both
    sent = Fraction(mean_rows_sent(run, Fraction(tokens), experts, top_k)) / mean
    if ep <= 1:
        return sent, sent
    received = Fraction(rank_rows(run, max(1, math.ceil(tokens)), experts, top_k, ep=ep)) / mean
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
