"""Bytes the layers' own collectives send per GPU per step: tensor parallelism (all-reduces, or
sequence parallelism's all-gathers and reduce-scatters), context parallelism (the K/V exchange
and the head all-to-alls of :mod:`model.context_parallel`) and expert parallelism (the dispatch
and combine all-to-alls). The conventions (ring shares, ``S_tok``, β, m, passes) are
:mod:`model.comm`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.comm import AxisTraffic, ring_share
from trainplan.model.context_parallel import (
    cp_collective,
    cp_degrees,
    cp_layer_bytes,
    kv_repeat,
    torch_rotate_method,
)
from trainplan.model.fp8_gathers import tp_gather_bytes
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Layout, Recompute
from trainplan.model.moe import all_to_all_bytes
from trainplan.model.moe_dispatch import dispatch_traffic_share, transfer_side_bytes
from trainplan.model.moe_rows import rank_rows
from trainplan.model.moe_run import DROPLESS, MoERun
from trainplan.model.ops import LayerShape
from trainplan.model.recompute_ops import (
    RepeatedTp,
    layout_plan,
    recomputes_core,
    repeated_tp,
    repeats_all_to_all,
)
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.xp import exact, where

__all__ = [
    "Recomputed",
    "NOTHING_AGAIN",
    "recomputed_sends",
    "tp_traffic",
    "tp_collective_name",
    "tp_bytes",
    "cp_traffic",
    "cp_bytes",
    "ep_traffic",
    "ep_bytes",
    "ep_collective",
]


@dataclass(frozen=True, slots=True)
class Recomputed:
    """What a recomputed forward sends once more, per layer and micro-batch, by layer kind
    (dense, MoE): the traffic table's reading of the rule the step time runs
    (:mod:`model.recompute_ops`; :func:`model.layer_time.layer_time`)."""

    tp: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))
    """Tensor-parallel bytes again in units of ``one = (t−1)/t·β·S_tok·h`` for a dense and a MoE
    layer, each (with sequence parallelism: one unit per all-gather and per reduce-scatter,
    without: two per all-reduce)."""
    etp: bool = False
    """A MoE layer's expert-TP token gather and scatter again."""
    core: tuple[bool, bool] = (False, False)
    """The attention core re-runs in a dense, a MoE layer: its cp exchange again."""
    all_to_all: bool = False
    """A MoE layer's dispatch and combine again."""
    tp_gathers: tuple[int, int] = (0, 0)
    """Of the units with sequence parallelism, the all-gathers', for a dense and a MoE layer
    (their bytes per element can differ: :func:`model.fp8_gathers.tp_gather_bytes`)."""


NOTHING_AGAIN = Recomputed()
"""Without recomputation."""


def _tp_units(again: RepeatedTp, halves: int) -> tuple[int, int, int]:
    """(with SP, without, of the first the all-gathers') units of ``one`` the first ``halves``
    halves of ``again`` send again: each all-gather and reduce-scatter one, each half's
    all-reduce two (the time's ``_tp_collectives`` waits for the same collectives)."""
    used = again.halves[:halves]
    sp, ar = sum(ag + rs for ag, rs in used), sum(2 for h in used if any(h))
    return sp, ar, sum(ag for ag, _ in used)


@lru_cache(maxsize=1024)
def recomputed_sends(
    arch: Architecture, framework: Framework, recompute: Recompute, training: TrainingSpec
) -> Recomputed:
    """What a layout's recomputed forward sends again (:class:`Recomputed`), from the plan of
    its framework and mode (:func:`model.recompute_ops.layout_plan`): under full or √n every
    forward collective; under selective the tp collectives of
    :func:`model.recompute_ops.repeated_tp` (Megatron-Core's ``mlp``, ``moe`` and
    ``shared_experts`` modules; torchtitan's op-level policy re-gathers, since
    ``_get_default_save_ops`` saves ``reduce_scatter_tensor`` outputs but not
    ``all_gather_into_tensor``'s), the cp exchange where the plan re-runs the attention core
    (:func:`model.recompute_ops.recomputes_core`; not under torchtitan's policy, which saves the
    SDPA output) and the expert all-to-alls under the ``moe`` module
    (:func:`model.recompute_ops.repeats_all_to_all`). A MoE layer without shared experts has one
    tp half under a physical profile (:func:`tp_bytes`).

    >>> from trainplan.model.specs import Architecture, TrainingSpec
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1)
    >>> recomputed_sends(gpt, Framework.FSDP2, Recompute.SELECTIVE, t).tp[0]
    (2, 4)
    >>> recomputed_sends(gpt, Framework.MEGATRON, Recompute.SELECTIVE, t).core
    (True, True)
    """
    if recompute is Recompute.NONE:
        return NOTHING_AGAIN
    full = recompute in (Recompute.FULL, Recompute.SQRT)
    plan, _ = layout_plan(framework, recompute, training)
    kinds = []
    for moe in (False, True) if arch.moe is not None else (False,):
        x = LayerShape(arch, moe, 1, 1, 1, flash_attention=training.flash_attention)
        halves = 1 if moe and framework.physical and not _shared_experts(arch) else 2
        again = repeated_tp(x, plan, full)
        core = full or recomputes_core(x, plan)
        kinds.append((_tp_units(again, halves), again.etp, core, repeats_all_to_all(x, plan)))
    (dense_tp, _, dense_core, _), (moe_tp, etp, moe_core, a2a) = kinds[0], kinds[-1]
    gathers = (dense_tp[2], moe_tp[2])
    return Recomputed((dense_tp[:2], moe_tp[:2]), etp, (dense_core, moe_core), full or a2a, gathers)


def tp_traffic(
    arch: Architecture,
    num_layers: int,
    layout: Layout,
    training: TrainingSpec,
    first: bool = False,
    last: bool = False,
    num_moe_layers: int = 0,
) -> AxisTraffic:
    """Tensor-parallel traffic of one pipeline stage holding ``num_layers`` layers
    (``num_moe_layers`` of them MoE; ``first`` / ``last``: it holds the embedding / the output
    layer). ``one`` = ``(t−1)/t·β·S_tok·h``, one all-gather or reduce-scatter of a layer's input.

    ``textbook`` (conventions "Communication"; Korthikanti et al. 2022 §4.2.2): per layer, per micro-batch, per pass
    (forward, backward, recomputed forward: :func:`recomputed_sends`) 2 all-gathers + 2 reduce-scatters with sequence
    parallelism, or 2 all-reduces without — ``4·one`` either way.

    Physical profiles (Megatron-Core's mechanism): with sequence parallelism the backward all-
    gathers each column-parallel layer's input again for its weight gradient (the forward kept
    only the local shard: ``LinearWithGradAccumulationAndAsyncCommunication``), so backward
    sends ``6·one`` — the re-gather launched asynchronously under the input-gradient GEMM, so it
    is counted as traffic but never exposed (:attr:`AxisTraffic.hidden_bytes`); the first stage
    reduce-scatters (SP) or all-reduces the vocab-parallel embedding's output (``2·one`` over
    forward and backward); the last stage gathers the final norm's output for the vocab-parallel
    output layer and again in backward, and reduce-scatters its gradient (``3·one``; without SP
    an all-reduce of the input gradient, ``2·one``), and the vocab-parallel cross-entropy all-
    reduces three fp32 values per token (max logit, Σ exp, target logit;
    ``vocab_parallel_cross_entropy``); a MoE layer runs the attention half's collectives and
    the MLP half's only for its shared experts (``SharedExpertMLP`` over the tp group): the
    routed experts' dispatcher uses the expert-TP group alone — with expert tensor parallelism
    (etp > 1) it all-gathers the routed tokens over etp before the experts and reduce-scatters
    after (Megatron-Core ``MoEAlltoAllTokenDispatcher``), forward, backward and recomputed
    forward; with etp 1 a MoE layer without shared experts sends nothing over tp in its MLP.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, TrainingSpec
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1)
    >>> tb = Layout(tp=2, framework="textbook")
    >>> tp_traffic(arch, 1, tb, t).bytes_per_step == 2 * 4 * Fraction(1, 2) * 2 * 4 * 8
    True
    >>> tp_traffic(arch, 1, tb.with_(framework="megatron"), t).bytes_per_step == 10 * 32
    True
    """
    expert_tp = layout.expert_tp if num_moe_layers and arch.moe is not None else 1
    if layout.tp == 1 and expert_tp == 1:
        return AxisTraffic("tp", "none", 1, Fraction(0))
    m = layout.num_microbatches(training.global_batch_size)
    again = recomputed_sends(arch, Framework(layout.framework), layout.recompute, training)
    beta, physical = training.activation_bytes, layout.framework.physical
    gathered = tp_gather_bytes(layout.framework, training.precision, training.fp8_recipe, beta)
    total, hidden = tp_bytes(
        arch, num_layers, num_moe_layers, first, last, layout.tp, expert_tp, layout.cp,
        layout.micro_batch_size, m, training.seq_len, beta, layout.sp, physical, again, False, gathered
    )  # fmt: skip
    name = tp_collective_name(layout.sp, gathered < beta, physical and expert_tp > 1)
    return AxisTraffic("tp", name, layout.tp, total, Fraction(0), hidden)


def tp_collective_name(sp: bool, fp8_gathers: bool, etp: bool = False) -> str:
    """The traffic table's name of the layers' tp collectives: sequence parallelism's
    all-gathers (``fp8_gathers``: in FP8, :func:`model.fp8_gathers.tp_gather_bytes`) and
    reduce-scatters, else all-reduces; ``etp``: with expert tensor parallelism's token gathers.

    >>> tp_collective_name(True, True), tp_collective_name(False, False)
    ('all-gather (fp8) + reduce-scatter', 'all-reduce')
    """
    name = f"all-gather{' (fp8)' if fp8_gathers else ''} + reduce-scatter" if sp else "all-reduce"
    return name + (" (+ etp token all-gather/reduce-scatter)" if etp else "")


def _shared_experts(arch: Architecture) -> bool:
    """Whether the model's MoE layers have shared experts, a dense MLP over the tp group
    (Megatron-Core ``moe/shared_experts.py`` ``SharedExpertMLP``: ``tp_group=pg_collection.tp``,
    sequence-parallel all-gather before ``linear_fc1`` and reduce-scatter after ``linear_fc2``)."""
    return arch.moe is not None and arch.moe.num_shared_experts > 0


def tp_bytes(
    arch: Architecture,
    num_layers: Any,
    num_moe_layers: Any,
    first: Any,
    last: Any,
    tp: Any,
    expert_tp: Any,
    cp: Any,
    b: Any,
    m: Any,
    seq_len: Any,
    beta: int,
    sp: Any,
    physical: Any,
    again: Recomputed,
    keeps_gathered: bool = False,
    gather_bytes: int | None = None,
) -> tuple[Any, Any]:
    """(bytes per step, of them hidden under a GEMM) of :func:`tp_traffic`, from plain numbers:
    exact for ints, element-wise for arrays of layouts. ``again``: what a recomputed forward
    sends once more (:func:`recomputed_sends`). ``keeps_gathered``: the blocks' all-gathered inputs
    are kept for backward (:func:`model.memory.keeps_gathered_inputs`: torchtitan's plan, whose
    ``PrepareModuleInput`` redistributes the input to ``Replicate`` as an autograd op the
    column-parallel linears save), so sequence parallelism sends no second all-gather in backward
    (Megatron-Core gathers the input again for the weight gradient). ``gather_bytes``: bytes per
    element of the layers' sequence-parallel all-gathers (:func:`model.tp_overlap.
    tp_gather_bytes`: 1 under Transformer Engine's per-tensor FP8; None: ``beta``), each gather
    a ``gather_bytes/beta`` share of ``one``; the embedding's and output layer's stay at ``beta``."""
    tokens = exact(seq_len) / cp * b
    one = ring_share(tp) * beta * tokens * arch.hidden_size
    # g is the int 1 where the gathers run at beta (exact either way; a Fraction meeting the
    # search's arrays would make arrays of Python objects, 30× slower)
    g = 1 if gather_bytes is None or gather_bytes == beta else Fraction(gather_bytes, beta)
    regather = where(physical & sp, 0 if keeps_gathered else 2, 0)
    # attention and MLP halves; a MoE layer's MLP half runs tp collectives only for its shared
    # experts (physical profiles: the dispatcher uses the expert-TP group, counted below)
    moe_mlp = 0 if _shared_experts(arch) else num_moe_layers
    halves = 2 * num_layers - where(physical, moe_mlp, 0)
    (dense_sp, dense_ar), (moe_sp, moe_ar) = again.tp
    (dense_ag, moe_ag), narrowed = again.tp_gathers, 1 - g  # what each FP8 gather saves of one
    dense_units, moe_units = dense_sp - narrowed * dense_ag, moe_sp - narrowed * moe_ag
    repeated = (num_layers - num_moe_layers) * where(sp, dense_units, dense_ar)
    repeated = repeated + num_moe_layers * where(sp, moe_units, moe_ar)
    # per half: all-gather and reduce-scatter forward and backward, the re-gather (regather/2)
    per_mb = ((4 + regather) * g + 4) * one * halves / 2 + repeated * one
    hidden = regather * g * one * halves / 2 * m
    boundary = where(first, 2 * one, 0) + where(
        last, where(sp, 3, 2) * one + 3 * 2 * ring_share(tp) * 4 * tokens, 0
    )  # the embedding's and the output layer's collectives; cross-entropy's fp32 all-reduces
    per_mb = per_mb + where(physical, boundary, 0)
    if arch.moe is not None:
        local = tokens / where(sp, tp, 1)
        routed = arch.moe.experts_per_token * local * arch.hidden_size * beta
        etp = 2 * (expert_tp - 1) * routed * (2 + int(again.etp)) * num_moe_layers
        per_mb = per_mb + where(physical, etp, 0)
    return per_mb * m, hidden


def cp_traffic(
    arch: Architecture, num_layers: int, layout: Layout, training: TrainingSpec
) -> AxisTraffic:
    """Context-parallel traffic of a stage holding ``num_layers`` layers, as the layout's CP
    flavour (:attr:`Layout.cp_kind`) exchanges attention's inputs, per layer and micro-batch
    (:func:`model.context_parallel.cp_layer_bytes`): the ring passes each rank's K/V chunk
    ``β·S_tok·(K + V dims)/tp`` cp − 1 hops forward, twice that backward (K, V and their
    gradients) and once more when the attention core is recomputed (full, √n, and selective
    where the plan re-runs the core: :func:`recomputed_sends`; ``num_layers`` taken as dense
    layers here); the all-gather sends the same bytes (all-gather of K/V forward, re-gather
    and reduce-scatter of dK/dV backward: Llama 3 §3.3.2, Transformer Engine); Ulysses
    all-to-alls Q, K, V and O over heads ((cp−1)/cp of each, forward and backward: Jacobs et al.
    2023); the hybrid does Ulysses inside groups of ``cp_a2a`` and the ring across; PyTorch's
    ``context_parallel`` (``pytorch-allgather``, ``pytorch-alltoall``) sends K/V as the ring does
    and its dK/dV in FP32 after every SDPA call
    (:func:`model.context_parallel.templated_dkv_sends`). MLA exchanges the expanded a·(d_qk) keys
    and a·d_v values. Liu et al. 2023 (Ring Attention).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, TrainingSpec
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> t = TrainingSpec(seq_len=8, global_batch_size=1)
    >>> cp_traffic(arch, 1, Layout(cp=2), t).bytes_per_step
    Fraction(384, 1)
    >>> cp_traffic(arch, 1, Layout(cp=2, cp_kind="ulysses"), t).bytes_per_step
    Fraction(288, 1)
    """
    if layout.cp == 1:
        return AxisTraffic("cp", "none", 1, Fraction(0))
    m = layout.num_microbatches(training.global_batch_size)
    ring, a2a = cp_degrees(layout.cp_kind, layout.cp, layout.cp_a2a)
    again = recomputed_sends(arch, Framework(layout.framework), layout.recompute, training)
    total = cp_bytes(
        arch, num_layers, layout.cp, ring, a2a, layout.tp, layout.micro_batch_size, m,
        training.seq_len, training.activation_bytes, again.core[0],
        kv_repeat(layout.cp_kind, a2a, layout.tp, arch, str(layout.framework)),
        bool(torch_rotate_method(layout.cp_kind)),
    )  # fmt: skip
    name = cp_collective(layout.cp_kind, layout.cp, layout.cp_a2a)
    return AxisTraffic("cp", name, layout.cp, total)


def cp_bytes(
    arch: Architecture,
    num_layers: Any,
    cp: Any,
    ring: Any,
    a2a: Any,
    tp: Any,
    b: Any,
    m: Any,
    seq_len: Any,
    beta: int,
    recomputed: Any,
    kv_rep: Any = 1,
    templated: Any = False,
) -> Any:
    """Bytes per step of :func:`cp_traffic`, from plain numbers (exact for ints, element-wise
    for arrays): :func:`model.context_parallel.cp_layer_bytes` of the ``S_tok = (s/cp)·b``
    tokens on a rank, times layers and micro-batches. ``ring`` and ``a2a``: the degrees of the
    K/V exchange and of the head all-to-all (:func:`model.context_parallel.cp_degrees`: the ring
    and the all-gather (cp, 1), Ulysses (1, cp)); ``recomputed``: the attention core runs again
    in backward; ``kv_rep``: verl's repeated K/V heads (:func:`model.context_parallel.kv_repeat`);
    ``templated``: PyTorch's ``context_parallel`` (:func:`model.context_parallel.
    torch_rotate_method`), whose backward sends FP32 dK/dV."""
    tokens = exact(seq_len) / cp * b
    per_layer = cp_layer_bytes(arch, ring, a2a, tp, tokens, beta, recomputed, kv_rep, templated)
    return per_layer * num_layers * m


def ep_traffic(
    arch: Architecture,
    num_moe_layers: int,
    layout: Layout,
    training: TrainingSpec,
    per_domain: int = 0,
) -> AxisTraffic:
    """Expert-parallel all-to-all: per MoE layer, per micro-batch, dispatch and combine in
    forward and again in backward (and in a recomputed forward), each sending the (ep−1)/ep of
    the ``k·T·h`` routed token copies that go to other ranks (uniform routing), ``T`` = tokens on
    this GPU (``S_tok/tp`` with sequence parallelism), at the busiest rank's rows under
    imbalance or capacity (:func:`ep_bytes`); under DeepEP or HybridEP what they send
    instead (:func:`model.moe_dispatch.dispatch_traffic_share`, ``per_domain`` of the group's
    ranks in each NVLink domain, 0 = one domain). Lepikhin et al. 2020 (GShard) §2;
    DeepSeek-V3 §3.2.2.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, MoESpec, TrainingSpec
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32,
    ...     vocab_size=16, moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=16))
    >>> t = TrainingSpec(seq_len=4, global_batch_size=2)
    >>> ep_traffic(arch, 1, Layout(dp=2, ep=2), t).bytes_per_step
    Fraction(256, 1)
    """
    if layout.ep == 1 or arch.moe is None:
        return AxisTraffic("ep", "none", 1, Fraction(0))
    m = layout.num_microbatches(training.global_batch_size)
    run, moe = training.moe_run, arch.moe
    share = dispatch_traffic_share(
        run, moe.num_experts, moe.experts_per_token, layout.ep, per_domain
    )
    side = transfer_side_bytes(
        run, arch.hidden_size * training.activation_bytes, moe.num_experts,
        moe.experts_per_token, layout.ep, layout.expert_tp, per_domain,
    )  # fmt: skip
    total = ep_bytes(
        arch, num_moe_layers, layout.ep, layout.tp, layout.cp, layout.micro_batch_size, m,
        training.seq_len, training.activation_bytes, layout.sp,
        recomputed_sends(arch, Framework(layout.framework), layout.recompute, training).all_to_all,
        run, share, side, Framework(layout.framework) is Framework.DEEPSPEED,
    )  # fmt: skip
    padded = Framework(layout.framework) is Framework.DEEPSPEED
    return AxisTraffic("ep", ep_collective(run, padded), layout.ep, total)


def ep_collective(run: MoERun, padded: bool = False) -> str:
    """The traffic table's name of the expert all-to-all: with ``imbalance`` above 1 its bytes
    are the busiest rank's (:func:`ep_bytes`), which the name says — unless every rank sends
    the same padded ``E·C`` rows (``padded``: DeepSpeed's buffers, or Megatron-Core's
    ``moe_pad_expert_input_to_capacity``), where there is no busiest rank to name.

    >>> ep_collective(MoERun(imbalance=Fraction(13, 10)))
    "all-to-all (dispatch + combine), the busiest rank's rows"
    >>> ep_collective(MoERun(imbalance=Fraction(13, 10)), padded=True)
    'all-to-all (dispatch + combine)'
    """
    name = "all-to-all (dispatch + combine)"
    same = run.imbalance == 1 or padded or run.pad_to_capacity
    return name if same else name + ", the busiest rank's rows"


def ep_bytes(
    arch: Architecture,
    num_moe_layers: Any,
    ep: Any,
    tp: Any,
    cp: Any,
    b: Any,
    m: Any,
    seq_len: Any,
    beta: int,
    sp: Any,
    recompute: bool,
    run: MoERun = DROPLESS,
    share: Any = 1,
    side: tuple[int, int, int, int] = (0, 0, 0, 0),
    padded: bool = False,
) -> Any:
    """Bytes per step of :func:`ep_traffic`, from plain numbers (exact for ints, element-wise
    for arrays); ``recompute``: a recomputed forward dispatches again (full or √n, or the
    ``moe`` module: :attr:`Recomputed.all_to_all`). Each
    dispatch and combine moves :func:`model.moe.all_to_all_bytes` of the busiest
    expert-parallel rank's routed rows (:func:`model.moe_rows.rank_rows`: ``k·T`` dropless and
    balanced, ``imbalance·k·T`` rounded up under imbalance, capped at ``E·C`` by a capacity
    factor, ``E·C`` padded to capacity, and always under ``padded``, DeepSpeed's native MoE) —
    the rows that rank receives in the dispatch and sends back in the combine, which the
    all-to-all's time waits on (the same rows as the layer clock's
    :func:`model.moe_dispatch.all_to_all_sent`); balanced, every rank's mean, what it sends.
    Times ``share``, the dispatcher's bytes per routed copy's
    (:func:`model.moe_dispatch.dispatch_traffic_share`: 1 for the NCCL all-to-all; DeepEP and
    HybridEP send a token once per destination rank, across NVLink domains once per remote
    domain and then once per rank over NVLink) — every byte a GPU sends, whichever link it rides
    (the link rule times the scale-out share of it across domains,
    :func:`model.moe_dispatch.dispatch_time_share`). A row is ``h·beta`` bytes plus, in each
    of :data:`model.moe_dispatch.TRANSFERS`, its ``side`` bytes
    (:func:`model.moe_dispatch.transfer_side_bytes`: the flex dispatchers' probabilities)."""
    if arch.moe is None:
        return 0 * ep
    tokens = exact(seq_len) / cp * b / where(sp, tp, 1)
    rows = rank_rows(run, tokens, arch.moe.num_experts, arch.moe.experts_per_token, padded, ep)
    row = arch.hidden_size * beta
    forward, backward = 2 * row + side[0] + side[1], 2 * row + side[2] + side[3]
    per_layer = forward * (2 if recompute else 1) + backward
    return all_to_all_bytes(rows, 1, 1, ep) * per_layer * share * num_moe_layers * m
