"""Legality rules on a model's shape against the layout's degrees: tp against the heads and
widths, ep and etp against the experts, a size-only model's limits, and MoE layers' need for
sequence parallelism under Megatron-Core (:data:`model.legality.RULES` lists them)."""

from __future__ import annotations

from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.expert_groups import expert_tp_of
from trainplan.model.moe_rules import check_expert_parallel
from trainplan.model.specs import AttentionKind

__all__ = ["heads_rule", "moe_sequence_parallel_rule", "size_only_rule"]


def size_only_rule(s: Any, stage_layers: tuple[int, ...] | None, ep: int) -> None:
    """The rule ``size_only`` (``s``: :class:`model.legality.Setting`): a model given by its
    size alone has no layers to place per stage and no experts.

    Raises
    ------
    LayoutError
        ``stage_layers`` or ``ep`` > 1 without the model's dimensions, one line.
    """
    if s.model.arch is not None:
        return
    if stage_layers is not None:
        raise LayoutError(
            "stage_layers: a stage layout needs the model's layers (a catalogue model, a "
            "config.json or `num_layers`), not a size only"
        )
    if ep > 1:
        raise LayoutError(f"ep: {ep} needs a MoE model with dimensions, not a size only")


def _divides(axis: str, degree: int, what: str, value: int) -> None:
    if value % degree:
        raise LayoutError(f"{axis}: {degree:,} does not divide {what} = {value:,}")


def heads_rule(s: Any, tp: int, ep: int, etp: int | None, framework: Any) -> None:
    """The rule ``heads``: tp divides the attention heads, the KV heads (MHA) and the FFN; the
    expert rules (:func:`model.moe_rules.check_expert_parallel`; etp, or tp where etp is not
    given, divides the expert FFN, :func:`model.expert_groups.expert_tp_of`).

    Raises
    ------
    LayoutError
        The first width a degree does not divide, or ``etp`` on a dense model, one line.
    """
    arch = s.model.arch
    if arch is None:
        return
    _divides("tp", tp, "num_attention_heads", arch.num_attention_heads)
    if arch.attention is AttentionKind.MHA:
        _divides("tp", tp, "num_kv_heads", arch.kv_heads)
    _divides("tp", tp, "ffn_hidden_size", arch.ffn_hidden_size)
    check_expert_parallel(ep, s.model)
    if arch.moe is None:
        if etp is not None:
            raise LayoutError(
                f"etp: {etp} needs a MoE model; {s.model.name} is dense (etp = tp, {tp})"
            )
        return
    degree = expert_tp_of(tp, etp, framework, ep)
    axis = "tp" if etp is None else "etp"
    _divides(axis, degree, "expert_ffn_hidden_size", arch.moe.expert_ffn_hidden_size)


def moe_sequence_parallel_rule(s: Any, framework: Any, tp: int, sp: bool) -> None:
    """The rule ``moe_sequence_parallel``: under ``megatron`` a model with MoE layers at tp > 1
    needs sequence parallelism. Megatron-Core's ``MoELayer.forward`` raises ``ValueError``
    ("performance may degrade if MoE and tensor parallelism are enabled without also enabling
    sequence parallelism") in training when the attention tp group is larger than one and
    ``sequence_parallel`` is off (Megatron-LM d98e8a64dd
    ``megatron/core/transformer/moe/moe_layer.py``; since 28c8dd71f0).

    Raises
    ------
    LayoutError
        Naming ``sequence_parallel``, tp and the rule, one line.

    Examples
    --------
    >>> from types import SimpleNamespace as N
    >>> moe = N(model=N(arch=N(moe=object())))
    >>> try:
    ...     moe_sequence_parallel_rule(moe, "megatron", 2, False)
    ... except LayoutError as err:
    ...     print(str(err)[:62])
    sequence_parallel: off with tp 2 on a MoE model under `framewo
    >>> moe_sequence_parallel_rule(moe, "megatron", 2, True)  # legal
    """
    arch = s.model.arch
    if str(framework) != "megatron" or tp == 1 or sp or arch is None or arch.moe is None:
        return
    raise LayoutError(
        f"sequence_parallel: off with tp {tp} on a MoE model under `framework` megatron, which "
        "refuses it in training (Megatron-Core MoELayer.forward needs sequence parallelism "
        "when tp > 1); turn sequence parallelism on or use tp 1"
    )
