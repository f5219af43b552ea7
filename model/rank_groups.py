"""Where each parallel axis's rank groups lie in the rank order: (stride, size) of an axis's
groups and their span, written once for the topology's placement (:mod:`topology.placement`,
which gives each span its link) and the legality rules that depend on it (:mod:`model.legality`:
HybridEP's token limit across NVLink domains). The convention is docs/concepts/conventions.md
"Layout": rank order inner to outer, ep carved out of the cp·dp block, Megatron-Core's expert
rank order etp-ep-edp-pp over the tp·cp·dp block where etp ≠ tp. Ints, or arrays of layouts
that share one rank order (the search's tables). Units: ranks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.xp import is_array, minimum, where

__all__ = ["AXES", "stride_size", "axis_spans"]

AXES: tuple[str, ...] = ("tp", "cp", "ep", "dp", "dp_cp", "edp", "pp")
"""Axes :func:`stride_size` knows: the five degrees, ``dp_cp`` (the dp·cp gradient group) and
``edp`` (the expert data-parallel group, :func:`_expert_dp`)."""


def stride_size(d: Mapping[str, Any], axis: str, order: tuple[str, ...]) -> tuple[Any, Any]:
    """(stride, size) of ``axis``'s groups: rank offsets between members, and member count.
    The degrees may be ints or arrays of layouts (the search's tables: one rank order at a
    time).

    Raises
    ------
    LayoutError
        An unknown axis; etp ≠ tp with tp not innermost or pp not outermost.

    >>> stride_size({"tp": 8, "cp": 1, "ep": 8, "dp": 16, "pp": 2}, "ep", ("tp", "cp", "ep", "dp", "pp"))
    (8, 8)
    """
    dense = _dense(order)

    def stride(a: str) -> Any:
        return math.prod(d[x] for x in dense[: dense.index(a)])

    if axis in ("tp", "cp", "dp", "pp"):
        return stride(axis), d[axis]
    block = minimum(stride("cp"), stride("dp"))  # the cp·dp block starts at the inner of the two
    if axis == "dp_cp":
        return block, d["cp"] * d["dp"]
    if axis == "edp":
        return _expert_dp(d, order, block)
    if axis == "ep":
        own = _own_expert_tp(d, order)
        inner = order.index("ep") < order.index("dp")
        stride = block if inner else block * d["cp"] * d["dp"] // d["ep"]
        return where(own, d.get("etp", d["tp"]), stride), d["ep"]
    raise LayoutError(f"unknown axis '{axis}' (known: {', '.join(AXES)})")


def _own_expert_tp(d: Mapping[str, Any], order: tuple[str, ...]) -> Any:
    """Where etp ≠ tp (element-wise for the search's arrays): Megatron-Core's expert rank order
    etp-ep-edp-pp over the tp·cp·dp block, ep groups of consecutive etp-strided ranks, which
    needs tp innermost and pp outermost (torchtitan's sparse mesh at ep > 1, etp 1, is the
    same: ``("pp", "dp_replicate", "efsdp", "ep")`` over its world order ending in tp)."""
    own = d.get("etp", d["tp"]) != d["tp"]
    dense = _dense(order)
    if (own.any() if is_array(own) else own) and (dense[0] != "tp" or dense[-1] != "pp"):
        raise LayoutError(
            f"rank_order: {'-'.join(order)} with etp ≠ tp needs tp innermost and pp "
            "outermost (Megatron-Core's expert groups are carved out of the tp·cp·dp block)"
        )
    return own


def _dense(order: Sequence[str]) -> list[str]:
    """The rank order's axes less ep (ep is carved out of cp·dp)."""
    return [a for a in order if a != "ep"]


def _expert_dp(d: Mapping[str, Any], order: tuple[str, ...], block: Any) -> tuple[Any, Any]:
    """(stride, size) of the expert data-parallel groups: the ranks that share an expert tp rank
    and an ep rank, ``D_e`` of them. Megatron-Core's expert rank generator orders the tp·cp·dp
    block etp-ep-edp (Megatron-LM d98e8a64dd ``parallel_state.py`` ``initialize_model_parallel``:
    ``expert_decoder_rank_generator``, ``get_ranks("dp")`` → ``_EXPERT_DATA_PARALLEL_GROUP``, the
    group ``DistributedDataParallel.__init__`` reduces expert buffers on): stride etp·ep where
    etp ≠ tp. With etp = tp the ep groups are carved out of the cp·dp block at stride ``block``
    (:func:`stride_size`): ep before dp in the order (the default), an ep group is ep
    consecutive block positions, so the edp group strides ep of them (stride block·ep, as
    DeepSpeed edaa72212 ``utils/groups.py`` ``_create_expert_and_data_parallel`` strides a dp
    group by ep, ``range(i, pp_stride, ep)``, and torchtitan b5bcd76c6 ``parallel_dims.py`` nests ``efsdp`` outside ``ep`` in its
    sparse mesh ``("pp", "dp_replicate", "efsdp", "ep")``); ep after dp, the ep groups stride
    cp·dp/ep positions, so the edp group is that many consecutive ones (stride block)."""
    etp = d.get("etp", d["tp"])
    own = _own_expert_tp(d, order)
    size = d["cp"] * d["dp"] // d["ep"]
    inner = order.index("ep") < order.index("dp")
    stride = block * d["ep"] if inner else block
    own_size = d["tp"] * d["cp"] * d["dp"] // (etp * d["ep"])
    return where(own, etp * d["ep"], stride), where(own, own_size, size)


def axis_spans(
    degrees: Mapping[str, Any], rank_order: Sequence[str], axes: Sequence[str] = AXES
) -> dict[str, Any]:
    """The span (stride × group size) of each axis: ints, or arrays of layouts that share one
    rank order (the search's tables; the degrees are not re-checked here)."""
    order = tuple(rank_order)
    out = {}
    for axis in axes:
        stride, size = stride_size(degrees, axis, order)
        out[axis] = stride * size
    return out
