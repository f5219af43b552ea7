"""The expert tensor-parallel degree and the expert data-parallel group of a MoE layout, per
framework: written once here for :class:`model.layout.Layout`, the legality rules
(:mod:`model.legality`) and the search's columns (:mod:`optimizer.columns`).

Megatron-Core splits the routed experts over ``--expert-tensor-parallel-size`` (etp; the tp
group when not given) and shards their gradients and optimizer state over the expert
data-parallel group of tp·dp·cp/(etp·ep) ranks. Megatron-DeepSpeed keeps every routed expert
whole on each tp rank unless ``--enable-expert-tensor-parallelism`` is given, and DeepSpeed
forms the expert data-parallel group inside each tp rank's data-parallel group, dp·cp/ep
ranks, whatever etp is. torchtitan (``fsdp2``) has no expert tensor-parallel degree: at ep = 1
its experts split over the tp group, at ep > 1 they are whole and FSDP-sharded over its
"efsdp" dimension, dp·cp·tp/ep ranks (Megatron-Core's groups at etp = 1).
"""

from __future__ import annotations

from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import DEFAULT_FRAMEWORK, Framework
from trainplan.model.xp import where

__all__ = [
    "expert_tp_of",
    "expert_shard_degree_of",
    "expert_placement_tp_of",
    "check_expert_groups",
]


def expert_tp_of(tp: Any, etp: Any, framework: Any = DEFAULT_FRAMEWORK, ep: Any = 1) -> Any:
    """The expert tensor-parallel degree: ``etp``; when it is None, tp, except under
    ``deepspeed``: 1, and under ``fsdp2`` at ep > 1: 1. Megatron-DeepSpeed builds a MoE layer's
    expert MLPs with ``moe=True`` and slices them over tp only under
    ``--enable-expert-tensor-parallelism`` (``megatron/core/tensor_parallel/layers.py``,
    ``ColumnParallelLinear`` / ``RowParallelLinear.__init__``: ``is_expert_without_slicing``;
    ``megatron/model/transformer.py`` ``ParallelTransformerLayer.__init__``), so by default every
    tp rank holds whole experts. torchtitan (b5bcd76c6) places the routed experts'
    weights ``Shard(0)`` on "ep" and replicated on "efsdp" at ep > 1
    (``models/common/moe_sharding.py`` ``expert_param_placement_sparse``; the sparse mesh
    ``("pp", "dp_replicate", "efsdp", "ep")`` of ``distributed/parallel_dims.py`` ``build_mesh``
    has no tp dimension, and its config has only ``expert_parallel_degree``) and TP-sharded only
    at ep = 1 (``expert_param_placement_dense``; ``MOE_SHARDING.md``: "EP off … TP-sharded").
    Element-wise for arrays (``framework`` a scalar or an object column).

    Examples
    --------
    >>> expert_tp_of(8, None, Framework.MEGATRON), expert_tp_of(8, None, Framework.DEEPSPEED)
    (8, 1)
    >>> expert_tp_of(8, None, Framework.FSDP2, 1), expert_tp_of(8, None, Framework.FSDP2, 4)
    (8, 1)
    """
    if etp is not None:
        return etp
    whole = (framework == Framework.DEEPSPEED) | ((framework == Framework.FSDP2) & (ep > 1))
    return where(whole, 1, tp)


def expert_shard_degree_of(
    tp: Any, dp: Any, cp: Any, etp: Any, ep: Any, framework: Any = DEFAULT_FRAMEWORK
) -> Any:
    """D_e, the ranks that hold replicas of an expert parameter (the expert data-parallel group
    ZeRO shards an expert's gradients and optimizer state over): tp · dp · cp / (etp · ep)
    (Megatron-Core's expert data-parallel group, dp·cp/ep when etp = tp; torchtitan's "efsdp",
    dp_shard·cp·tp/ep at ep > 1, ``parallel_dims.py`` ``build_mesh``); under ``deepspeed``
    dp · cp / ep whatever etp is, since DeepSpeed carves the expert-parallel and expert
    data-parallel groups out of each tp rank's data-parallel group
    (``deepspeed/utils/groups.py`` ``_get_expert_parallel_ranks``, called from
    ``_create_expert_data_and_model_parallel``): experts replicated over tp (etp 1) are not
    sharded over it. Element-wise for arrays.

    Examples
    --------
    >>> expert_shard_degree_of(8, 2, 1, None, 1, Framework.MEGATRON)
    2
    >>> expert_shard_degree_of(8, 2, 1, None, 1, Framework.DEEPSPEED)
    2
    >>> expert_shard_degree_of(8, 2, 1, 1, 1, Framework.MEGATRON)
    16
    >>> expert_shard_degree_of(2, 8, 1, None, 4, Framework.FSDP2)
    4
    """
    deepspeed = framework == Framework.DEEPSPEED
    own = tp * dp * cp // (expert_tp_of(tp, etp, framework, ep) * ep)
    return where(deepspeed, dp * cp // ep, own)


def expert_placement_tp_of(
    tp: Any, etp: Any, framework: Any = DEFAULT_FRAMEWORK, ep: Any = 1
) -> Any:
    """The expert tensor-parallel degree the expert-parallel groups are placed by
    (:func:`topology.placement.axis_spans`' ``etp``): :func:`expert_tp_of`, except under
    ``deepspeed``: tp, since DeepSpeed forms each expert-parallel group out of one tp rank's
    data-parallel group whether or not the experts are split over tp
    (``deepspeed/utils/groups.py`` ``_get_expert_parallel_ranks``: ep groups of consecutive
    members of a data-parallel group, strided by tp), Megatron-Core's placement with etp = tp.

    Examples
    --------
    >>> expert_placement_tp_of(8, None, Framework.DEEPSPEED), expert_placement_tp_of(8, 1)
    (8, 1)
    """
    return where(framework == Framework.DEEPSPEED, tp, expert_tp_of(tp, etp, framework, ep))


def check_expert_groups(
    etp: Any, tp: int, dp: int, cp: int, ep: int, framework: Any, moe: bool = False
) -> None:
    """The expert groups fit the layout: ep divides dp·cp (etp = tp, or any etp under
    ``deepspeed``, whose expert-parallel groups are carved out of each tp rank's data-parallel
    group, ``deepspeed/utils/groups.py`` ``_get_expert_parallel_ranks``), or etp·ep divides
    tp·dp·cp with etp ≤ tp (Megatron-Core's expert groups over the tp·cp·dp block); under
    ``deepspeed`` etp is 1 or tp: the routed experts are either whole on every tp rank (the
    default, Megatron-DeepSpeed's ``is_expert_without_slicing``,
    ``megatron/core/tensor_parallel/layers.py``) or split over the whole tp group
    (``--enable-expert-tensor-parallelism``, ``megatron/arguments.py``).

    Under ``fsdp2`` an etp other than torchtitan's own (:func:`expert_tp_of`) is refused.

    A model with routed experts (``moe``) under ``deepspeed`` at tp > 1 is refused: DeepSpeed's
    ``MOELayer.forward`` (``deepspeed/moe/sharded_moe.py``) drops the tokens it takes to be
    duplicated over tp before the dispatch all-to-all (``drop_tokens``) and gathers them over
    tp after the combine (``gather_tokens``), which holds only where every tp rank has the same
    tokens (no sequence parallelism, which Megatron-DeepSpeed would feed it split); neither
    the drop nor the gather is counted here.

    Raises
    ------
    LayoutError
        The first of these that fails, naming tp, etp or ep.
    """
    shard = dp * cp
    deepspeed = framework == Framework.DEEPSPEED
    _check_fsdp2_etp(etp, tp, ep, framework)
    if deepspeed and etp is not None and etp not in (1, tp):
        raise LayoutError(
            f"etp: {etp} under framework deepspeed must be 1 (experts whole on every tp rank, "
            f"the default) or tp = {tp} (--enable-expert-tensor-parallelism)"
        )
    if deepspeed and moe and tp > 1:
        raise LayoutError(
            f"tp: {tp} under framework deepspeed with routed experts is not modelled: DeepSpeed's "
            "MOELayer drops the tokens duplicated over tp before its all-to-all and gathers them "
            "after (deepspeed/moe/sharded_moe.py), which needs the same tokens on every tp rank "
            "and is not counted; use tp 1 (ep and dp for the experts)"
        )
    if (etp is None or deepspeed) and shard % ep:
        raise LayoutError(f"ep: {ep} must divide dp × cp = {shard}")
    if deepspeed or etp is None:
        return
    if etp > tp:
        raise LayoutError(
            f"etp: {etp} above tp = {tp} is not modelled (etp's token collectives ride the tp "
            "group's link)"
        )
    if (tp * shard) % (ep * etp):
        raise LayoutError(
            f"ep: etp {etp} × ep {ep} = {ep * etp} must divide tp × dp × cp = {tp * shard} (the "
            "expert groups are carved out of those ranks)"
        )


def _check_fsdp2_etp(etp: Any, tp: int, ep: int, framework: Any) -> None:
    """Under ``fsdp2`` an etp other than torchtitan's own (:func:`expert_tp_of`) is refused."""
    torchtitan = expert_tp_of(tp, None, framework, ep)
    if framework == Framework.FSDP2 and etp is not None and etp != torchtitan:
        raise LayoutError(
            f"etp: {etp} under framework fsdp2 is not modelled: torchtitan has no expert "
            f"tensor-parallel degree (its experts split over tp at ep 1, whole at ep > 1): "
            f"give none (here {torchtitan})"
        )
