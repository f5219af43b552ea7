"""The MoE forward working set as the activation term reads it: one MoE layer's routed-token
copies (:func:`model.moe_working_set.moe_forward_working_set`) for a layout's activation
context (:func:`moe_forward_figure`), and when it meets the recompute transient
(:func:`moe_forward_peak`).

At the stage's peak the micro-batch whose forward completes the in-flight set reaches its last
layer with every other micro-batch held; a MoE layer's routed copies are at their most at the
combine, after the layer's own saved tensors are written, so the working set adds to the held
layers whole (exact where the stage ends with a MoE layer; an upper bound by the saved tensors
of the layers after the stage's last MoE layer otherwise). Where backward replays the layer's
forward (full or √n recomputation, or Megatron-Core's ``moe`` recompute module) the working set
sits on top of what the replay has rebuilt: the recompute transient.

Under Megatron-Core's combined 1F1B (``overlap_moe_expert_parallel_comm``) a paired step runs one
micro-batch's layer forward beside another's layer backward (NVIDIA/Megatron-LM d98e8a6
``megatron/core/models/common/model_chunk_schedule_plan.py``
``TransformerModelChunkSchedulePlan.run`` pairs forward layer ``i`` with backward layer
``n − 1 − i`` of the chunk; ``TransformerLayerSchedulePlan.run`` issues the backward's combine,
experts (``mlp.backward``) and dispatch backward between the forward's attention and its
dispatch, and the backward's attention (``pre_dispatch_computation.backward``) after the
forward's experts and combine, the all-to-alls on a communication stream beside the other's
computation): the forward's routed copies and the backward's working set are alive together,
and the phase is their sum. The in-flight count is the plain schedule's (Megatron-Core's one extra
warm-up forward under the overlap, ``schedules.py`` ``get_pp_rank_microbatches``, makes the held
micro-batches before a paired step the plain peak's); on top of them the paired step holds the
forward layer's own saved tensors from before the dispatch (:func:`paired_forward_figure`), whose
backward partner frees its experts' first and its attention's last. Where the paired chunks
differ in length the forward chunk's layers beyond the backward chunk's run alone after the pairs
(``TransformerModelChunkSchedulePlan.run``'s ``range(overlapped_layers, f_num_layers)`` loop),
after the backward chunk has freed its micro-batch's layers: those layers' saved tensors are
held beside the working set (:func:`unpaired_forward_bytes`).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.activation_offload import layer_modules, offloaded_bytes
from trainplan.model.activations import kind_activations
from trainplan.model.layout import Recompute
from trainplan.model.moe_run import Dispatcher, EpOverlap, steady_chunk_pairs
from trainplan.model.moe_working_set import ExpertMlp, moe_forward_working_set
from trainplan.model.pipeline import Schedule
from trainplan.model.precision import (
    Fp8Recipe,
    fp8_activation_bytes,
    fp8_recipe_of,
    keeps_fp8_transpose,
)
from trainplan.model.recompute_modules import recomputed_rows
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.split import stage_chunks
from trainplan.model.stage_bytes import apply_form, chunk_form
from trainplan.model.terms.activation_fields import (
    CACHE,
    CONTEXT_FIELDS,
    FORM_FIELDS,
    activation_context,
    layer_figures,
    split_forms,
)
from trainplan.model.terms.fields import Fields
from trainplan.model.xp import maximum, where

__all__ = [
    "EXPERT_SIDE_ROWS",
    "expert_mlp",
    "moe_forward_figure",
    "moe_forward_peak",
    "moe_over",
    "paired_forward_figure",
    "unpaired_forward_bytes",
    "unpaired_tail_forms",
]

EXPERT_SIDE_ROWS = ("routed expert", "routing weights")
"""Name prefixes of a MoE layer's saved rows (:attr:`model.activations.LayerActivations.terms`)
that the backward of a combined-1F1B pair frees before the paired forward's experts run
(``moe_combine.backward``, ``mlp.backward``, ``moe_dispatch.backward``: the routed experts'
inputs, their activation's and down projection's inputs, the routing weights); every other row
(the attention, the MLP norm, the router, the permutation map, the shared experts) is saved by
``pre_dispatch_computation``, whose backward runs last (:func:`paired_forward_figure`)."""


def expert_mlp(
    arch: Architecture, training: TrainingSpec, ctx: Any, expert_tp: int, keeps_transpose: bool,
    act_recompute: bool,
) -> ExpertMlp:  # fmt: skip
    """Megatron-Core's expert MLP (:class:`model.moe_working_set.ExpertMlp`) of ``arch`` under
    ``training``'s recipe and dispatcher: the activation output ``f_e / expert_tp`` wide; under
    FP8 FC2's row-wise copy (:func:`model.precision.fp8_activation_bytes`: 1 B and the recipe's
    scales) where Transformer Engine makes one beside the saved copy (``keeps_transpose``,
    :func:`model.precision.keeps_fp8_transpose`) or quantises row-wise only (``moe_act``, whose
    ``set_save_original_input(self.linear_fc2)`` saves the BF16 input instead); the padding
    copies unless the dispatcher pads itself (Megatron-LM d98e8a64dd ``moe/moe_utils.py``
    ``skip_routed_expert_padding``: HybridEP; DeepEP only with ``moe_use_grouped_tensor``,
    which the profile does not set); expert biases where the model's linear layers have them."""
    moe = arch.moe
    assert moe is not None
    fp8 = bool(ctx.fp8_linear_inputs)
    recipe = fp8_recipe_of("megatron", training.fp8_recipe)
    rowwise = act_recompute or keeps_transpose
    pads = fp8 and training.moe_run.dispatcher is not Dispatcher.HYBRIDEP
    return ExpertMlp(
        ffn=moe.expert_ffn_hidden_size // expert_tp,
        fp8_rowwise_bytes=fp8_activation_bytes(recipe) if fp8 and rowwise else Fraction(0),
        pad_align=(32 if recipe is Fp8Recipe.MXFP8 else 16) if pads else 0,
        act_recompute=act_recompute,
        bias=arch.linear_bias,
    )


@lru_cache(maxsize=CACHE)
def moe_forward_figure(
    arch: Architecture, training: TrainingSpec, keeps_transpose: bool, act_recompute: bool,
    *fields: Any,
) -> Fraction:  # fmt: skip
    """Bytes of one MoE layer's forward working set, per GPU per micro-batch, for the
    :data:`model.terms.activation_fields.CONTEXT_FIELDS` values ``fields``: the routed rows'
    tokens ``(s/cp)·b`` (÷ tp with sequence parallelism, whole where torchtitan routes the
    gathered tokens, :data:`model.activation_rows.MOE_ROUTING_ROWS`), the expert-TP group's gathered tokens
    where the profile gathers them, FP8 where the linear layers save FP8 inputs, the flex
    dispatcher for ``deepep`` and ``hybridep``, Megatron-Core's expert MLP (:func:`expert_mlp`;
    ``act_recompute``: the ``moe_act`` recompute module in force) (:func:`model.moe_working_set.
    moe_forward_working_set`); 0 for a model without MoE layers."""
    ctx = activation_context(training, *fields)
    framework = str(fields[CONTEXT_FIELDS.index("framework")])
    sp = ctx.tp if ctx.sequence_parallel else 1
    if ctx.gathered_block_inputs and ctx.ep == 1:
        sp = 1  # torchtitan routes the tp-gathered tokens at ep = 1 (MOE_ROUTING_ROWS)
    etp = ctx.expert_tp if ctx.sequence_parallel else 1
    flex = training.moe_run.dispatcher is not Dispatcher.ALLTOALL
    mlp = ExpertMlp()
    if framework == "megatron" and arch.moe is not None:
        expert_tp = int(fields[CONTEXT_FIELDS.index("expert_tp")])
        mlp = expert_mlp(arch, training, ctx, expert_tp, keeps_transpose, act_recompute)
    return moe_forward_working_set(
        arch,
        framework,
        ctx.tokens / sp,
        ctx.activation_bytes,
        ctx.ep,
        etp,
        ctx.fp8_linear_inputs,
        flex,
        mlp,
        ctx.routed_row_factors(arch.moe.num_experts, arch.moe.experts_per_token)
        if arch.moe is not None
        else (Fraction(1), Fraction(1)),
    )


def moe_forward_peak(
    c: Any, f: Fields, n_moe: Any, recompute_transient: Any, layer_backward: Any = 0
) -> Any:
    """What a stage holds beside its kept layers while a MoE layer's forward is at its working
    set's peak (:func:`moe_forward_figure`, 0 on a stage without MoE layers), plus the recompute
    transient where backward replays that forward: full or √n recomputation (and a layer block
    recomputed whole, ``recompute_layers``), or selective recomputation whose
    ``recompute_modules`` hold ``moe`` (Megatron-Core's ``MoELayer.forward`` checkpoints its
    ``custom_forward``). Under selective recomputation of the attention core alone the transient
    is the scores', held while the attention runs backward, not beside the MoE forward.

    Under ``overlap_moe_expert_parallel_comm`` (module docstring) a paired step holds the
    forward's working set beside the paired micro-batch's layers' backward phase
    (``layer_backward``: :attr:`model.terms.activations.StageActivations.layer_backward_bytes`,
    the recompute transient, the context-parallel buffers and the backward working set of the
    stage's largest layer kind, an upper bound where the paired layer is a dense one; less the
    output layer's bytes on the loss's stage, whose backward, ``post_process.backward``, runs
    before the paired layers, while the forward's output layer runs after them); the forwards
    with no partner (warm-up) hold the working set alone. Where an interleaved stage's paired
    chunks differ in length, the forward chunk's unpaired layers run after the backward chunk
    is done and hold their saved tensors beside the working set
    (:func:`unpaired_forward_bytes`): the largest of the three."""
    arch, t = c.arch, c.training
    keeps = keeps_fp8_transpose(fp8_recipe_of("megatron", t.fp8_recipe), c.device)
    figure = f.lookup(moe_forward_figure, (arch, t, keeps, False), *CONTEXT_FIELDS)
    if "moe_act" in t.recompute_modules:  # Megatron-Core's moe_act, under selective only
        act = f.lookup(moe_forward_figure, (arch, t, keeps, True), *CONTEXT_FIELDS)
        figure = where(f.recompute == Recompute.SELECTIVE, act, figure)
    moe_module = "moe" in t.recompute_modules
    replay = where(f.recompute == Recompute.SELECTIVE, moe_module, True)
    # 0 on a stage without MoE layers: no MoE forward phase there (the recompute transient is
    # the layers' backward phase's, :attr:`model.terms.activations.StageActivations.
    # layer_backward_bytes`); the output layer's bytes released before backward are not
    # subtracted here (conservative by at most them on the loss's stage)
    alone = figure + where(replay, recompute_transient, 0 * recompute_transient)
    if t.moe_run.ep_overlap is EpOverlap.COMBINED_1F1B:
        none, selective = f.lookup(paired_forward_figure, (arch, t), *CONTEXT_FIELDS)
        paired = where(f.recompute == Recompute.SELECTIVE, selective, none)
        alone = maximum(alone, figure + layer_backward + paired)
        alone = maximum(alone, figure + unpaired_forward_bytes(c, f))
    return alone * (n_moe > 0)


@lru_cache(maxsize=CACHE)
def paired_forward_figure(
    arch: Architecture, training: TrainingSpec, *fields: Any
) -> tuple[Fraction, Fraction]:
    """(no recomputation, selective recomputation) bytes per GPU per micro-batch that the
    forward layer of a combined-1F1B pair (``overlap_moe_expert_parallel_comm``) has saved and
    the stage's held micro-batches do not yet count, at the pair's MoE forward peak: the MoE
    layer's saved rows less :data:`EXPERT_SIDE_ROWS` (what the activation offload moves to the
    host, and under selective recomputation what the recompute modules drop, left out as
    :func:`model.stage_bytes.layer_quantities` leaves them out); (0, 0) without MoE layers.

    Megatron-Core (NVIDIA/Megatron-LM d98e8a64dd) ``megatron/core/models/common/
    model_chunk_schedule_plan.py`` ``TransformerLayerSchedulePlan.run`` issues, for forward layer
    ``i`` of one micro-batch and backward layer ``n − 1 − i`` of another: the backward's
    ``moe_combine.backward``; the forward's ``pre_dispatch_computation`` (``megatron/core/models/
    gpt/fine_grained_callables.py`` ``submodule_pre_dispatch_forward``: the attention, the
    pre-MLP norm, the shared experts, the router and the dispatch preprocess, which save their
    tensors here); the backward's ``mlp.backward`` and ``moe_dispatch.backward`` (its routed
    experts' tensors freed); the forward's ``moe_dispatch``, ``mlp`` and ``moe_combine`` (its own
    experts' tensors and the routed copies, :func:`moe_forward_figure`); and only then, with
    ``ep_overlap_early_attn_memory_release`` False (its default, ``model_parallel_config.py``),
    the backward's ``pre_dispatch_computation.backward``, which frees its attention's tensors.
    At the forward's combine the stage therefore holds its held micro-batches (the backward
    layer whole among them) less the backward layer's expert rows plus the forward layer's
    whole rows: one pre-dispatch share more than the plain schedule's peak. Exact for two MoE
    layers of one kind; where the backward partner is a dense layer more is freed and this is
    an upper bound by its MLP's rows.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, MoESpec, TrainingSpec
    >>> moe = MoESpec(num_experts=4, experts_per_token=1, expert_ffn_hidden_size=8)
    >>> arch = Architecture(num_layers=1, hidden_size=4, num_attention_heads=2,
    ...     ffn_hidden_size=8, vocab_size=16, moe=moe)
    >>> none, sel = paired_forward_figure(arch, TrainingSpec(seq_len=2, global_batch_size=1),
    ...     1, 1, 1, False, "ring", 1, 1, "megatron")
    >>> none > 0 and none >= sel
    True
    """
    if arch.moe is None or arch.kind_index(True) is None:
        return Fraction(0), Fraction(0)
    ctx = activation_context(training, *fields)
    a = kind_activations(arch, True, ctx)
    mla = arch.mla is not None
    pre = tuple(
        (name, value)
        for name, value in a.terms
        if not name.split(" (FP8")[0].startswith(EXPERT_SIDE_ROWS)
    )
    dropped = recomputed_rows(
        dict(a.terms), a.score_names, ctx.recompute_modules, mla, True, ctx.every_norm
    )
    off_full, off_sel = offloaded_bytes(
        pre, a.score_names, layer_modules(ctx.offload_modules, mla, True)
    )
    none = sum((value for _, value in pre), Fraction(0)) - off_full
    selective = sum((v for n, v in pre if n not in dropped), Fraction(0)) - off_sel
    return none, selective


@lru_cache(maxsize=CACHE)
def unpaired_tail_forms(arch: Architecture, *key: Any) -> tuple[tuple[int, ...], ...]:
    """Per pipeline stage, for :data:`model.terms.activation_fields.FORM_FIELDS` values ``key``
    (pp, virtual_stages, split_rule, stage_layers, schedule, recompute, recompute_layers): the
    kept forms (:func:`model.stage_bytes.chunk_form`, eight coefficients each) of forward chunk
    ``cf``'s layers past the first ``n_cb`` when it is paired with backward chunk ``cb``, flat in
    the order ``cf·v + cb`` (all 0 where ``n_cf ≤ n_cb``). The layer counts are Megatron-Core's
    schedule plan's (``TransformerModelChunkSchedulePlan.num_layers``, which counts the MTP
    layers after the last chunk's decoder layers, as :func:`model.split.stage_chunks` places
    them: indices L, L + 1, …). Combined 1F1B refuses full recomputation and
    ``recompute_num_layers`` (Megatron-LM d98e8a64dd ``transformer_config.py``
    ``__post_init__``), so the chunk's base form is each layer's own.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, MoESpec
    >>> moe = MoESpec(num_experts=4, experts_per_token=1, expert_ffn_hidden_size=8)
    >>> arch = Architecture(num_layers=6, hidden_size=4, num_attention_heads=2,
    ...     ffn_hidden_size=8, vocab_size=16, moe=moe)
    >>> forms = unpaired_tail_forms(arch, 2, 2, True, (1, 1, 2, 2), "interleaved", "none", None)
    >>> forms[0][16:24]  # stage 0: chunks of 1 and 2 layers; forward chunk 1, backward chunk 0
    (0, 0, 0, 0, 1, 0, 0, 0)
    >>> sum(forms[0][:16] + forms[0][24:]), forms[1][16:24]  # the rest; stage 1 (1 and 2 too)
    (0, (0, 0, 0, 0, 1, 0, 0, 0))
    """
    pp, v, uneven, sizes, schedule, mode = key[:6]
    mode = Recompute(mode)
    out = []
    for stage in range(pp):
        chunks = [
            tuple(arch.is_moe_layer(j) for j in chunk)
            for chunk in stage_chunks(arch, pp, v, uneven, stage, sizes, schedule)
        ]
        flat: list[int] = []
        for forward in chunks:
            for backward in chunks:
                flat += chunk_form(forward[len(backward) :], mode)
        out.append(tuple(flat))
    return tuple(out)


@lru_cache(maxsize=CACHE)
def occurring_pairs(pp: int, v: int, m: int) -> tuple[tuple[int, ...], ...]:
    """Per pipeline stage, how many steady combined-1F1B steps pair forward chunk ``cf`` with
    backward chunk ``cb`` (:func:`model.moe_run.steady_chunk_pairs`), flat in the order
    ``cf·v + cb`` as :func:`unpaired_tail_forms`' forms.

    >>> occurring_pairs(2, 2, 4)[0]  # stage 0: (0, 1), (1, 0), (1, 1) once each
    (0, 1, 1, 1)
    """
    pp, v, m = int(pp), int(v), int(m)
    out = []
    for stage in range(pp):
        pairs = steady_chunk_pairs(pp, v, m, stage)
        out.append(tuple(pairs.get((cf, cb), 0) for cf in range(v) for cb in range(v)))
    return tuple(out)


def unpaired_forward_bytes(c: Any, f: Fields) -> Any:
    """Bytes per GPU that the forward chunk's unpaired layers of a combined-1F1B step hold at
    the last one's MoE forward peak beyond the stage's held micro-batches (0 off the interleaved
    schedule, or where no paired step runs a longer forward chunk than its backward chunk).

    Megatron-Core (NVIDIA/Megatron-LM d98e8a64dd) ``megatron/core/pipeline_parallel/
    schedules.py`` ``get_pp_rank_microbatches`` runs ``W + 1`` warm-up forwards under
    ``overlap_moe_expert_parallel_comm`` (``W = 2·(pp − i − 1) + (v − 1)·pp``, at most ``m·v``),
    and each steady step pairs forward ``k + W + 1`` (chunk ``⌊(k + W + 1)/pp⌋ mod v``) with
    backward ``k`` (chunk ``v − 1 − ⌊k/pp⌋ mod v``), ``k < m·v − W − 1``. ``megatron/core/
    models/common/model_chunk_schedule_plan.py`` ``TransformerModelChunkSchedulePlan.run`` pairs
    ``min(n_f, n_b)`` layers, then runs the backward chunk's rest, then the forward chunk's
    layers ``n_b … n_f − 1`` alone (``range(overlapped_layers, f_num_layers)``). Before the
    step the stage holds the plain schedule's peak state (module docstring); after the pairs
    the backward chunk has freed its ``n_b`` layers and the forward chunk has saved ``n_b``;
    at the last unpaired layer's combine the forward chunk holds ``n_f − n_b`` layers more
    (its own rows among them): the kept form of those layers (:func:`unpaired_tail_forms`)
    beside the working set. The held state is the plain schedule's largest (an upper bound for
    the step's own); the largest such tail over the chunk pairs that occur (:func:`occurring_pairs`) is taken.

    Example: stage 0 of pp 4, v 2, m 8 with one layer in chunk 0 and two in chunk 1 runs
    W + 1 = 2·3 + 4 + 1 = 11 warm-up forwards and 16 − 11 = 5 steps: step 0 pairs forward 11
    (chunk ⌊11/4⌋ mod 2 = 0) with backward 0 (chunk 1), steps 1–3 forwards of chunk 1 with
    backwards of chunk 1, step 4 forward 15 (chunk 1) with backward 4 (chunk 0): chunk 1's
    second layer runs alone and holds one layer's bytes more."""
    v = int(f.virtual_stages)
    if v == 1:
        return 0 * f.pp
    arch, t = c.arch, c.training
    q = f.lookup(layer_figures, (arch, t), *CONTEXT_FIELDS)
    forms = split_forms(f.per_stage(unpaired_tail_forms, (arch,), *FORM_FIELDS))
    pp = f.pp
    counts = f.per_stage(occurring_pairs, (), "pp", "virtual_stages", "m")
    tail: Any = 0 * f.pp
    for i in range(v * v):  # forward chunk i // v beside backward chunk i % v
        size = apply_form(forms[i], q)
        tail = maximum(tail, where(counts[i] > 0, size, 0 * size))
    on = (f.schedule == Schedule.INTERLEAVED) & (pp > 1)
    return where(on, tail, 0 * tail)


def moe_over(moe_forward: Any, layer_transient: Any, loss_transient: Any) -> Any:
    """What the MoE forward working set (:func:`moe_forward_peak`) adds to a stage's peak
    beyond the transients it does not coincide with, the recompute transient with the
    context-parallel buffers (``layer_transient``: a layer's attention or backward) and the
    loss's working set: ``max(moe − max(layer, loss), 0)``, so that the memory lines sum to
    the total (:attr:`model.terms.activations.StageActivations.total_bytes`).

    >>> moe_over(5, 3, 4), moe_over(2, 3, 1)
    (1, 0)
    """
    over = moe_forward - maximum(layer_transient, loss_transient)
    return maximum(over, 0 * over)
