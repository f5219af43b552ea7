"""What the per-stage search takes and where it puts layers (issue 13): the models, schedules and
recipes it models (:func:`check_per_stage`), the leading block of layers unlike the rest
(:func:`leading_layers`), the layer counts a stage may hold (:func:`layer_counts`,
:func:`most_recomputed`), and the layout one stage's option is evaluated on
(:func:`realization`). The tables over them are :mod:`optimizer.stage_tables`."""

from __future__ import annotations

from functools import lru_cache

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
    "check_pattern",
    "leading_layers",
    "layer_pattern",
    "start_residue",
    "layer_counts",
    "equal_chunks_note",
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
    or whose layers after the block repeat a period of attention spans and FFN kinds
    (:func:`layer_pattern`: gpt-oss's band and global layers, Gemma 3's five local to one
    global, Llama 4 Maverick's dense and MoE layers in turn under three chunked to one
    global), so a stage's cost reads its count and where it starts within the period
    (:func:`start_residue`; interleaved only without a leading block and with L/v a whole
    number of periods, :func:`check_pattern`);
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
    check_pattern(case.model.name, arch, layout.virtual_stages)
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


def check_pattern(name: str, arch: Architecture, v: int) -> None:
    """Refuse a model ``name`` whose layers the per-stage tables do not place at ``v`` model
    chunks a stage: layers that differ beyond a leading block and repeat no period
    (:func:`layer_pattern`), a leading block under interleaving (v > 1), and a period P of
    layers under interleaving unless L/v is a multiple of P: then every model chunk of a stage
    starts at the same place in the period (chunk c at c·L/v + start/v, :func:`start_residue`)
    and holds the same spans and kinds, so its chunks take equal times and the pipeline term is
    the closed form of the stage's row (a rank whose chunks hold unequal mixes is timed by
    the whole schedule, :mod:`model.pipeline_uneven`, which no stage's row gives). MoE and
    dense layers in turn (Llama 4 Maverick) are placed: a stage's rows per start residue hold
    its own kinds, and the solver's key counts the busiest stage's dense and expert
    parameters apart (:mod:`optimizer.stage_cpsat`).

    Raises
    ------
    InputError
        The first rule broken, in one line.
    """
    pattern = layer_pattern(arch)
    if pattern is None:
        raise InputError(
            f"per_stage: {name}'s layers differ beyond a leading block and do not "
            "repeat a period of attention spans and FFN kinds; the per-stage search needs the "
            "layers after the first stage's leading ones to be alike or to repeat one period"
        )
    prefix, period = pattern
    if prefix and v > 1:
        raise InputError(
            f"per_stage: {name}'s first {prefix} layers differ from the rest; with "
            f"virtual_stages {v} they would spread over model chunks: search it without "
            "interleaving"
        )
    L = arch.num_layers
    if period > 1 and v > 1 and (L % v or L // v % period):
        raise InputError(
            f"per_stage: {name}'s layers repeat a period of {period} attention spans; with "
            f"virtual_stages {v} a stage's model chunks start L/v = {L / v:g} layers apart, not "
            "a whole number of periods, so they would hold unequal spans (the pipeline term is "
            "then the whole schedule's, not a stage's): search it without interleaving, or at "
            f"a v that makes L/v a multiple of {period}"
        )


def leading_layers(arch: Architecture) -> int | None:
    """The least d such that transformer layers d … L − 1 are alike (the same parameters,
    kind — MoE or dense — and attention span): 0 for a model of alike layers, 3 for DeepSeek-V3
    (``first_k_dense_replace = 3``); None when the rest are alike only from past half the
    model (interleaved kinds or spans: Llama 4's alternating MoE, Gemma's local and global
    layers: :func:`layer_pattern` gives their period).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> leading_layers(Architecture(num_layers=4, hidden_size=8, num_attention_heads=2,
    ...                              ffn_hidden_size=32, vocab_size=16))
    0
    """
    pattern = layer_pattern(arch)
    return pattern[0] if pattern is not None and pattern[1] == 1 else None


def _layer_key(arch: Architecture, i: int) -> tuple[object, ...]:
    """What makes layer ``i`` cost what it does: its parameters, FFN kind and attention span."""
    return (layer_params(arch, i), arch.is_moe_layer(i), arch.layer_span(i))


@lru_cache(maxsize=256)
def layer_pattern(arch: Architecture) -> tuple[int, int] | None:
    """(d, P): the least period P, then the least d, such that transformer layer i ≥ d is alike
    layer i + P (:func:`_layer_key`: parameters, FFN kind, attention span), with d ≤ L // 2 and
    the period repeating at least twice after d (P ≤ (L − d) // 2, or P = 1); None when no such
    pair exists. (d, 1) is :func:`leading_layers`; gpt-oss (``layer_types`` sliding and full in
    turn) is (0, 2), Gemma 3 (five local to one global) (0, 6), Llama 4 Scout (three chunked to
    one global) (0, 4), Llama 4 Maverick (the same spans, dense and MoE in turn) (0, 4). A
    stage after the first that starts at layer S holds the layers of the one that starts at
    d + (S − d) mod P, shifted by whole periods: the same parameters, kinds and spans
    (:func:`start_residue`).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> layer_pattern(Architecture(num_layers=62, hidden_size=8, num_attention_heads=2,
    ...                            ffn_hidden_size=32, vocab_size=16, sliding_window=1024,
    ...                            attention_pattern=("local",) * 5 + ("global",)))
    (0, 6)
    """
    L = arch.num_layers
    keys = [_layer_key(arch, i) for i in range(L)]
    for period in range(1, L + 1):
        d = L - period
        while d > 0 and keys[d - 1] == keys[d - 1 + period]:
            d -= 1
        d = max(d, 0)
        if d <= L // 2 and (period == 1 or period <= (L - d) // 2):
            return d, period
    return None


def start_residue(
    stage: int,
    pp: int,
    start: int,
    layers: int,
    num_layers: int,
    prefix: int,
    period: int,
    v: int = 1,
) -> int:
    """Where a stage holding ``layers`` layers after ``start`` layers on the stages before it
    starts within the period of :func:`layer_pattern`: 0 for the first stage (it starts at 0
    and holds the leading ``prefix``) and at P = 1; else ``((start − prefix) / v) mod period``,
    the last stage's start being L − ``layers``. Under interleaving (v model chunks a stage,
    every stage's count a multiple of v, spread evenly: :func:`layer_counts`; no leading block)
    chunk c of the stage, model chunk c·pp + s, starts at c·L/v + start/v, so its chunks' spans
    all read start/v mod P.

    >>> start_residue(2, 4, 19, 9, 36, 0, 2), start_residue(3, 4, 0, 9, 36, 0, 2)
    (1, 1)
    >>> start_residue(1, 4, 6, 4, 36, 0, 2, v=2)  # chunks start at layers 3 and 18 + 3
    1
    """
    if stage == 0 or period == 1:
        return 0
    if stage == pp - 1:
        start = num_layers - layers
    return (start - prefix) // v % period


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


def equal_chunks_note(num_layers: int, pp: int, v: int) -> str | None:
    """Why a shape of ``pp`` stages and ``v`` model chunks a stage is not searched per stage, or
    None when it is: interleaved (pp > 1, v > 1), the tables give every stage a multiple of v
    layers (:func:`layer_counts`, every chunk of a stage equal), so L layers not a multiple of v
    have no such split — though Megatron-Core builds unequal chunks
    (``--pipeline-model-parallel-layout``, megatron/core/transformer/pipeline_parallel_layer_layout.py
    ``PipelineParallelLayerLayout``) and ``evaluate`` prices them (``--stage-layers`` one count
    per chunk).

    >>> equal_chunks_note(7, 2, 2)
    'not searched (the search gives each stage 2 equal chunks, so a multiple of 2 layers each: 7 layers cannot split so)'
    >>> equal_chunks_note(8, 2, 2) is None, equal_chunks_note(7, 1, 2) is None
    (True, True)
    """
    if pp > 1 and v > 1 and num_layers % v:
        return (
            f"not searched (the search gives each stage {v} equal chunks, so a multiple of {v} "
            f"layers each: {num_layers} layers cannot split so)"
        )
    return None


def realization(
    layout: Layout, num_layers: int, stage: int, layers: int, recomputed: int, prefix: int = 0
) -> Layout:
    """A layout with ``layers`` layers on ``stage``, ``recomputed`` of them recomputed (per model
    chunk), the other L − n layers on the next stage and none recomputed elsewhere: what the
    tables evaluate one stage's option on (the stage's figures do not read the others'). Each
    stage's layers spread over its chunks by :func:`model.split.balanced_chunk_sizes`. With
    ``prefix`` layers before it (a leading block, :func:`leading_layers`, or the start of a
    stage within a period of spans, :func:`layer_pattern`) another stage than the first holds
    layers after them: the first stage keeps them (the last stage starts at L − ``layers``
    whatever ``prefix``)."""
    pp = layout.pp
    sizes = [0] * pp
    sizes[stage] = layers
    if pp > 1:
        lead = prefix if stage else 0
        sizes[0] += lead
        sizes[(stage + 1) % pp] += num_layers - layers - lead
    counts = [0] * pp
    counts[stage] = recomputed
    return layout.with_splits(
        balanced_chunk_sizes(tuple(sizes), layout.virtual_stages), tuple(counts)
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
