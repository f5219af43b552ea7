"""What the per-stage search takes and where it puts layers (issue 13): the models, schedules and
recipes it models (:func:`check_per_stage`), the leading block of layers unlike the rest
(:func:`leading_layers`), the layer counts a stage may hold (:func:`layer_counts`,
:func:`most_recomputed`), and the layout one stage's option is evaluated on
(:func:`realization`). The tables over them are :mod:`optimizer.stage_tables`."""

from __future__ import annotations

from trainplan.model.deepspeed_layers import deepspeed_pipe_refusal
from trainplan.model.errors import InputError
from trainplan.model.layout import Layout, Recompute
from trainplan.model.params import layer_params
from trainplan.model.pipeline import Schedule
from trainplan.model.recompute_counts import recompute_counts_refusal
from trainplan.model.specs import Architecture
from trainplan.model.split import balanced_chunk_sizes
from trainplan.model.terms.step import uses_roofline
from trainplan.optimizer.case import Case

__all__ = [
    "check_per_stage",
    "leading_layers",
    "layer_counts",
    "realization",
    "most_recomputed",
    "takes_counts",
]


def check_per_stage(case: Case, layout: Layout) -> None:
    """Refuse what the per-stage search does not model, in one line naming the rule.

    Rules: a model with dimensions whose layers are alike after a leading block
    (:func:`leading_layers`: DeepSeek-V3's three dense layers before its MoE ones; MTP blocks
    sit on the last stage, outside the count), so a stage's cost reads only its own layer count
    and whether it is the first or the last (the leading block on the first stage, at v = 1);
    the roofline time model;
    1F1B or interleaved 1F1B (the closed form ``m·t_max·(1 + (p − 1)/(v·m))`` is the evaluator's
    pipeline term: under 1F1B it bounds the simulated step of unequal stages; interleaved it is
    exact for equal stages and an estimate for unequal ones, whose simulated step stays under
    1F1B's ``(m + p − 1)·t_max``, tests/model/test_recompute_layers.py; GPipe's simulated step
    can exceed it); base recompute none or selective; not ``deepspeed`` with pp > 1, whose
    pipeline recomputes every layer or none and places the layers itself
    (:func:`model.deepspeed_layers.deepspeed_pipe_refusal`).

    Raises
    ------
    InputError
        The first rule broken.
    """
    arch = case.model.arch
    if arch is None:
        raise InputError("per_stage: needs the model's dimensions (a catalogue model or --layers)")
    prefix = leading_layers(arch)
    if prefix is None:
        raise InputError(
            f"per_stage: {case.model.name}'s layers differ beyond a leading block (MoE and dense "
            "layers, or attention spans, interleaved); the per-stage search needs the layers "
            "after the first stage's leading ones to be all alike"
        )
    if prefix and layout.virtual_stages > 1:
        raise InputError(
            f"per_stage: {case.model.name}'s first {prefix} layers differ from the rest; with "
            f"virtual_stages {layout.virtual_stages} they would spread over model chunks: search "
            "it without interleaving"
        )
    if case.training.offload.activations:
        raise InputError(
            "per_stage: activation offload (--offload-activations) is not in the per-stage "
            "tables; search without --per-stage, or without the offload"
        )
    if not uses_roofline(case.options, layout.framework, case.device):
        raise InputError(
            "per_stage: needs the roofline time model (a physical framework profile and an "
            "accelerator with its HBM bandwidth)"
        )
    if layout.schedule is Schedule.GPIPE:
        raise InputError(
            f"per_stage: schedule {layout.schedule}: the per-stage search takes 1F1B or "
            "interleaved (GPipe's step with unequal stages can exceed the closed form)"
        )
    if refused := deepspeed_pipe_refusal(layout.framework, layout.pp):
        raise InputError(f"per_stage: {refused}: search it without --per-stage")
    if layout.recompute not in (Recompute.NONE, Recompute.SELECTIVE):
        raise InputError(
            f"per_stage: base recompute {layout.recompute} must be none or selective (the "
            "layers not recomputed keep it)"
        )


def leading_layers(arch: Architecture) -> int | None:
    """The least d such that transformer layers d … L − 1 are alike (the same parameters,
    kind — MoE or dense — and attention span): 0 for a model of alike layers, 3 for DeepSeek-V3
    (``first_k_dense_replace = 3``); None when the rest are alike only from past half the
    model (interleaved kinds or spans: Llama 4's alternating MoE, Gemma's local and global
    layers), which the per-stage search does not place.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> leading_layers(Architecture(num_layers=4, hidden_size=8, num_attention_heads=2,
    ...                              ffn_hidden_size=32, vocab_size=16))
    0
    """
    L = arch.num_layers

    def key(i: int) -> tuple[object, ...]:
        return (layer_params(arch, i), arch.is_moe_layer(i), arch.layer_span(i))

    last = key(L - 1)
    d = L - 1
    while d > 0 and key(d - 1) == last:
        d -= 1
    return d if d <= L // 2 else None


def layer_counts(num_layers: int, pp: int, stage: int, prefix: int, v: int = 1) -> range:
    """The layer counts a stage may hold in the per-stage tables: 0 … L (only L at pp = 1); the
    first stage at least the ``prefix`` leading layers, the others at most L − prefix (the
    leading block is the first stage's, :func:`leading_layers`); multiples of ``v`` under
    interleaving, every chunk of a stage equal as Megatron-Core builds them without a layout
    (unequal chunks' bubble is the whole pipeline's, :mod:`model.pipeline_uneven`, no stage's
    own row).

    >>> list(layer_counts(8, 2, 1, 0, 3))
    [0, 3, 6]
    """
    if pp == 1:
        return range(num_layers, num_layers + 1)
    low, high = (prefix, num_layers) if stage == 0 else (0, num_layers - prefix)
    return range(low + (-low) % v, high + 1, v)


def realization(
    layout: Layout, num_layers: int, stage: int, layers: int, recomputed: int, prefix: int = 0
) -> Layout:
    """A layout with ``layers`` layers on ``stage``, ``recomputed`` of them recomputed (per model
    chunk), the other L − n layers on the next stage and none recomputed elsewhere: what the
    tables evaluate one stage's option on (the stage's figures do not read the others'). Each
    stage's layers spread over its chunks by :func:`model.split.balanced_chunk_sizes`. With a
    leading block of ``prefix`` layers (:func:`leading_layers`) another stage than the first
    holds layers after it: the first stage keeps the block."""
    pp = layout.pp
    sizes = [0] * pp
    sizes[stage] = layers
    if pp > 1:
        lead = prefix if stage else 0
        sizes[0] += lead
        sizes[(stage + 1) % pp] += num_layers - layers - lead
    counts = [0] * pp
    counts[stage] = recomputed
    return layout.with_(
        stage_layers=balanced_chunk_sizes(tuple(sizes), layout.virtual_stages),
        recompute_layers=tuple(counts),
    )


def most_recomputed(layers: int, v: int, counts: bool = True) -> int:
    """The largest count a stage of ``layers`` layers over v chunks takes: its largest chunk's
    layers, ⌈n/v⌉ (:func:`model.split.balanced_chunk_sizes`); a count there recomputes every
    layer. 0 without ``counts`` (a base that takes none, :func:`takes_counts`)."""
    return -(-layers // v) if counts else 0


def takes_counts(case: Case, layout: Layout) -> bool:
    """Whether the base ``layout`` takes per-stage counts above 0: not where its framework runs
    none with its recompute mode and the recipe's choices
    (:func:`model.recompute_counts.recompute_counts_refusal`, the rule ``evaluate`` refuses
    such counts by: Megatron-Core with selective recomputation on the other layers, or under
    ``overlap_moe_expert_parallel_comm``; torchtitan, ``fsdp2``, with any mode, since it
    wraps every block alike). There a plan keeps the base's mode on every layer and chooses
    the split alone."""
    return not recompute_counts_refusal(layout.framework, layout.recompute, case.training)
