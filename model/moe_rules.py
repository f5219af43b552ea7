"""The rules a MoE run's choices follow (:class:`model.moe_run.MoERun`): which framework
profile runs which dispatcher and overlap, what a layout needs for them (DeepEP's EP sizes, the
combined 1F1B's interleaving, HybridEP's tokens a rank across NVLink domains) and what they
refuse under full recomputation. Each ``*_violation`` returns the first rule broken as one line
(``parameter: value …: rule``) or None, which :mod:`model.legality` and the interface raise;
each ``*_rule`` is one of :data:`model.legality.RULES`' checks, raising it."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from trainplan.model.dispatch_buffers import deepep_group_ranks, hybridep_token_refusal
from trainplan.model.errors import LayoutError
from trainplan.model.expert_groups import expert_placement_tp_of, expert_tp_of
from trainplan.model.model_spec import ModelSpec
from trainplan.model.moe import DEEPEP_DISPATCH_CONFIGS, capacity_rows
from trainplan.model.moe_rows import deepspeed_capacity
from trainplan.model.moe_run import DROPLESS, Dispatcher, EpOverlap, MoERun
from trainplan.model.rank_groups import axis_spans
from trainplan.model.units import shown_number

__all__ = [
    "HYBRIDEP_TOKENS_SCOPE",
    "MOE_CAPACITY_SCOPE",
    "TORCH_MAX_NUMEL",
    "capacity_violation",
    "moe_capacity_rule",
    "check_expert_parallel",
    "hybridep_tokens_rule",
    "moe_layout_rule",
    "moe_layout_violation",
    "moe_recompute_violation",
    "moe_run_violation",
]


def moe_run_violation(
    run: MoERun, framework: str, has_moe: bool, shared_experts: bool, schedule: str | None = None
) -> str | None:
    """The first rule ``run`` breaks under a framework profile on a model
    (``parameter: value …: rule``), or None; what a layout adds is :func:`moe_layout_violation`.
    A choice that does not apply is refused, never ignored:

    * any MoE choice on a model without MoE layers;
    * the ``deepep`` dispatcher under a profile whose framework has none (DeepSpeed's
      ``_AllToAll``) — Megatron-Core (``flex``) and torchtitan (``DeepEPTokenDispatcher``) run
      it, and the ``textbook`` profile under the ``dualpipe`` schedule, which stands for
      DeepSeek's HAI-LLM: DualPipe's overlapped chunks with the node-limited dispatch DeepEP
      publishes (DeepSeek-V3 report §3.2.1–3.2.2; deepseek-ai/DeepEP's README, "the
      group-limited gating algorithm proposed in the DeepSeek-V3 paper"); under other
      schedules the textbook has no dispatcher. ``schedule`` None (not known yet) leaves that
      part to the layout's check;
    * the ``hybridep`` dispatcher outside Megatron-Core (its flex dispatcher's backend);
    * an all-to-all overlap outside Megatron-Core (torchtitan's and DeepSpeed's dispatchers wait
      on their all-to-alls), and ``moe_shared_expert_overlap`` on a model without shared experts.

    Examples
    --------
    >>> moe_run_violation(MoERun(ep_overlap="moe_shared_expert_overlap"), "fsdp2", True, True)
    "moe_ep_overlap: 'moe_shared_expert_overlap' is Megatron-Core's; fsdp2 (torchtitan) waits on its all-to-alls"
    """
    if run == DROPLESS:
        return None
    if not has_moe:
        return "moe: routing and dispatch options apply to a model with MoE layers; this has none"
    if run.dispatcher is Dispatcher.DEEPEP and framework not in ("megatron", "fsdp2"):
        if framework == "textbook" and schedule in (None, "dualpipe"):
            pass
        elif framework == "textbook":
            return (
                f"moe_dispatcher: 'deepep' runs under textbook only with schedule dualpipe "
                f"(DeepSeek's HAI-LLM, DeepSeek-V3 §3.2), not {schedule}; Megatron-Core's flex "
                "dispatcher and torchtitan's DeepEPTokenDispatcher run it with their schedules"
            )
        else:
            return (
                f"moe_dispatcher: 'deepep' does not run under {framework} (Megatron-Core's flex "
                "dispatcher, torchtitan's DeepEPTokenDispatcher and DeepSeek's DualPipe under "
                "textbook do)"
            )
    if run.dispatcher is Dispatcher.HYBRIDEP and framework != "megatron":
        return (
            f"moe_dispatcher: 'hybridep' is Megatron-Core's flex dispatcher backend; "
            f"{framework} does not run it"
        )
    overlap = run.ep_overlap
    if overlap is not EpOverlap.NONE and framework != "megatron":
        runs = {"fsdp2": "fsdp2 (torchtitan)"}.get(framework, framework)
        return f"moe_ep_overlap: '{overlap}' is Megatron-Core's; {runs} waits on its all-to-alls"
    if overlap is EpOverlap.SHARED_EXPERT and not shared_experts:
        return (
            "moe_ep_overlap: 'moe_shared_expert_overlap' needs shared experts; the model has none"
        )
    return None


def moe_layout_violation(
    run: MoERun, ep: int, pp: int, virtual_stages: int, deepep_ranks: int | None = None
) -> str | None:
    """The first rule of the run's MoE choices a layout's degrees break, or None: a DeepEP group
    (``deepep_ranks``, None = ``ep``; :func:`model.dispatch_buffers.deepep_group_ranks`) DeepEP has no
    config for (``Buffer.get_dispatch_config``), and ``overlap_moe_expert_parallel_comm``
    as Megatron-Core asserts it (``transformer_config.py`` ``__post_init__``): ep > 1,
    interleaving when pp > 1 (its rule on recomputation is :func:`moe_recompute_violation`).

    Examples
    --------
    >>> run = MoERun(ep_overlap="overlap_moe_expert_parallel_comm")
    >>> moe_layout_violation(run, 8, 4, 2) is None
    True
    >>> moe_layout_violation(run, 8, 4, 1).endswith("(virtual_stages > 1; Megatron-Core asserts it)")
    True
    """
    ranks = ep if deepep_ranks is None else deepep_ranks
    if run.dispatcher is Dispatcher.DEEPEP and ranks > 1 and ranks not in DEEPEP_DISPATCH_CONFIGS:
        group = f"ep: {ep}" if ranks == ep else f"ep: {ep} × etp {ranks // ep} = {ranks} ranks"
        return (
            f"{group} has no DeepEP config for moe_dispatcher 'deepep' "
            f"(Buffer.get_dispatch_config supports {', '.join(map(str, DEEPEP_DISPATCH_CONFIGS))})"
        )
    if run.ep_overlap is not EpOverlap.COMBINED_1F1B:
        return None
    name = "moe_ep_overlap: 'overlap_moe_expert_parallel_comm'"
    if ep == 1:
        return f"{name} overlaps the expert all-to-all; ep 1 has none"
    if pp > 1 and virtual_stages < 2:
        return (
            f"{name} with pp > 1 needs an interleaved schedule (virtual_stages > 1; "
            "Megatron-Core asserts it)"
        )
    return None


def moe_layout_rule(
    s: Any, ep: int, pp: int, v: int, tp: int, etp: int | None, framework: Any
) -> None:
    """The legality rule ``moe_layout`` (``s``: :class:`model.legality.Setting`): the run's MoE
    choices on the layout's degrees (:func:`moe_layout_violation`: DeepEP's group sizes,
    :func:`model.dispatch_buffers.deepep_group_ranks`; the combined-1F1B overlap's ep and
    schedule).

    Raises
    ------
    LayoutError
        The first rule broken, one line.
    """
    ranks = deepep_group_ranks(str(framework), ep, expert_tp_of(tp, etp, framework, ep))
    problem = moe_layout_violation(s.training.moe_run, ep, pp, v, ranks)
    if problem:
        raise LayoutError(problem)


HYBRIDEP_TOKENS_SCOPE = (
    "ep", "tp", "etp", "cp", "dp", "pp", "framework", "rank_order", "micro_batch_size", "sp",
)  # fmt: skip
"""The fields :func:`hybridep_tokens_rule` reads."""


def hybridep_tokens_rule(
    s: Any, ep: int, tp: int, etp: int | None, cp: int, dp: int, pp: int, framework: Any,
    rank_order: tuple[str, ...], b: int, sp: bool,
) -> None:  # fmt: skip
    """The legality rule ``hybridep_tokens`` (``s``: :class:`model.legality.Setting`, whose
    ``nvlink_domain`` says where groups lie; not checked without it): under ``hybridep`` a group
    that leaves one NVLink domain takes at most :data:`model.dispatch_buffers.
    HYBRIDEP_ACROSS_DOMAINS_MAX_TOKENS` tokens a rank a micro-batch
    (:func:`model.dispatch_buffers.hybridep_token_refusal`). The group is Megatron-Core's etp·ep
    ``tp_ep_group``, laid out as the expert-parallel groups are
    (:func:`model.rank_groups.axis_spans`, the placement the links read), so it leaves the
    domain where an ep group does (:func:`model.rank_groups.in_one_domain`: a span over the
    domain, or blocks that straddle a domain's edge).

    Raises
    ------
    LayoutError
        The limit broken, one line naming ``micro_batch_size``, the tokens and the rule.
    """
    if s.training.moe_run.dispatcher is not Dispatcher.HYBRIDEP or ep == 1 or not s.nvlink_domain:
        return
    etp_ = expert_placement_tp_of(tp, etp, framework, ep)
    degrees = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp, "etp": etp_}
    span = axis_spans(degrees, rank_order, ("ep",))["ep"]
    ranks = deepep_group_ranks(str(framework), ep, expert_tp_of(tp, etp, framework, ep))
    sp_tp = tp if sp else 1
    problem = hybridep_token_refusal(
        b, s.training.seq_len, cp, sp_tp, ranks, int(span), s.nvlink_domain, tp * cp * dp * pp
    )
    if problem:
        raise LayoutError(problem)


def moe_recompute_violation(
    run: MoERun, full_recompute: bool, modules: tuple[str, ...] = ()
) -> str | None:
    """``overlap_moe_expert_parallel_comm`` with full recomputation (or √n, which recomputes
    whole layers), or with the ``moe`` module among the selective ``modules`` recomputed:
    Megatron-Core asserts ``recompute_granularity != 'full'`` and ``"moe" not in
    recompute_modules`` (NVIDIA/Megatron-LM d98e8a64dd ``transformer_config.py``
    ``TransformerConfig.__post_init__``, l. 3020–3032); None otherwise. Per-stage counts under
    the overlap (``recompute_num_layers``, asserted None there too) are
    :func:`model.recompute_counts.recompute_counts_refusal`'s.

    Examples
    --------
    >>> run = MoERun(ep_overlap="overlap_moe_expert_parallel_comm")
    >>> moe_recompute_violation(run, True)[:30]
    "moe_ep_overlap: 'overlap_moe_e"
    >>> moe_recompute_violation(run, False, ("moe",)).split(" (")[0]
    "moe_ep_overlap: 'overlap_moe_expert_parallel_comm' does not run with the moe recompute module"
    >>> moe_recompute_violation(run, False, ("moe_act",)) is None
    True
    """
    if run.ep_overlap is not EpOverlap.COMBINED_1F1B:
        return None
    if full_recompute:
        return (
            "moe_ep_overlap: 'overlap_moe_expert_parallel_comm' does not run with full "
            "recomputation (Megatron-Core asserts it)"
        )
    if "moe" in modules:
        return (
            "moe_ep_overlap: 'overlap_moe_expert_parallel_comm' does not run with the moe "
            'recompute module (Megatron-Core asserts "moe" not in recompute_modules); '
            "use moe_act or other modules"
        )
    return None


FULL_RECOMPUTES = ("full", "sqrt")
"""The recompute modes that run the whole forward again (``model.layout.Recompute``'s values;
read as text: the layout imports the legality rules)."""


def moe_framework_rule(s: Any, framework: Any, recompute: Any) -> None:
    """The legality rule ``moe_framework`` (``s``: :class:`model.legality.Setting`): the run's MoE
    dispatcher and all-to-all overlap under this framework and recompute mode
    (:func:`moe_run_violation`, :func:`moe_recompute_violation`)."""
    run = s.training.moe_run
    if run == DROPLESS:
        return
    moe = None if s.model.arch is None else s.model.arch.moe
    shared = moe is not None and moe.num_shared_experts > 0
    problem = moe_run_violation(run, str(framework), moe is not None, shared)
    modules = s.training.recompute_modules if str(recompute) == "selective" else ()
    problem = problem or moe_recompute_violation(run, str(recompute) in FULL_RECOMPUTES, modules)
    if problem:
        raise LayoutError(problem)


def moe_schedule_rule(s: Any, framework: Any, schedule: Any) -> None:
    """The legality rule ``moe_schedule`` (``s``: :class:`model.legality.Setting`): the run's
    dispatcher under the framework and the schedule: DeepEP under ``textbook`` only with
    DualPipe (:func:`moe_run_violation` given the schedule)."""
    run = s.training.moe_run
    moe = None if s.model.arch is None else s.model.arch.moe
    if run == DROPLESS or moe is None:
        return
    problem = moe_run_violation(
        run, str(framework), True, moe.num_shared_experts > 0, str(schedule)
    )
    if problem:
        raise LayoutError(problem)


def check_expert_parallel(ep: int, model: ModelSpec) -> None:
    """The rule of an expert-parallel degree against the model's experts: ep > 1 needs a MoE
    model, and ep divides the routed experts (each ep rank holds num_experts / ep of them:
    Megatron-Core ``transformer/moe/moe_layer.py`` ``BaseMoELayer.__init__`` asserts
    ``num_moe_experts % ep_size == 0``). One of :func:`model.legality`'s rules (``heads``), and asked by the search
    for each degree the user allows.

    Raises
    ------
    LayoutError
        ``ep: 16 does not divide num_experts = 8``.
    """
    arch = model.arch
    if arch is None or ep == 1:
        return
    if arch.moe is None:
        raise LayoutError(f"ep: {ep} > 1 needs a MoE model; {model.name} is dense")
    if arch.moe.num_experts % ep:
        raise LayoutError(f"ep: {ep} does not divide num_experts = {arch.moe.num_experts}")


def check_deepspeed_moe(framework: str, zero_stage: int, has_moe: bool) -> None:
    """Refuse a MoE model under ``deepspeed`` ZeRO-3: the MoE the profile counts is DeepSpeed's
    native one (``deepspeed/moe/sharded_moe.py``, :mod:`model.moe_run`), which the engine refuses
    at stage 3 (DeepSpeed edaa72212 ``deepspeed/runtime/engine.py``
    ``_validate_zero3_moe_compatibility``: "Native DeepSpeed MoE is not supported with ZeRO
    Stage 3"; its AutoEP layer, another mechanism, is not modelled).

    Raises
    ------
    LayoutError
        ``zero_stage`` 3 with ``framework`` deepspeed and MoE layers.

    >>> check_deepspeed_moe("deepspeed", 2, True)
    >>> check_deepspeed_moe("fsdp2", 3, True)
    """
    if str(framework) == "deepspeed" and zero_stage == 3 and has_moe:
        raise LayoutError(
            "zero_stage: 3 with `framework` deepspeed and a MoE model: DeepSpeed's native MoE "
            "refuses ZeRO stage 3 (engine.py _validate_zero3_moe_compatibility); use ZeRO-1 or 2"
        )


TORCH_MAX_NUMEL = 2**63 - 1
"""The most elements one PyTorch tensor holds: its sizes and ``numel`` are ``int64_t``
(pytorch/pytorch ``c10/core/TensorImpl.h`` ``TensorImpl::numel``; ``torch.full`` of a larger
size raises)."""

MOE_CAPACITY_SCOPE = ("framework", "micro_batch_size", "cp", "tp", "sp")
"""The fields :func:`moe_capacity_rule` reads (the tokens a rank routes, ``T = s·b/cp``, ÷ tp
with sequence parallelism, as :meth:`model.activations.ActivationContext.routed_row_factors`
takes them)."""


def _factor_words(cf: Fraction) -> str:
    """A capacity factor as a refusal echoes it: as typed up to a million, else 3 figures."""
    return shown_number(cf) if cf < 10**6 else f"{float(cf):.3g}"


def _rows_words(rows: int) -> str:
    """A row count as a refusal writes it: whole and grouped up to 10^15, else 3 figures."""
    return f"{rows:,}" if rows < 10**15 else f"{float(rows):.3g}"


def capacity_violation(
    run: MoERun, framework: str, tokens: int, experts: int, top_k: int, hidden: int
) -> str | None:
    """The first rule a capacity factor breaks for a rank routing ``tokens`` = T tokens a
    micro-batch through ``experts`` = E routed experts of width ``hidden`` = h, top-``top_k``,
    or None (dropless, or a capacity the framework runs): DeepSpeed's unclipped buffer
    (:func:`_deepspeed_violation`) under ``deepspeed``, else Megatron-Core's padded capacity
    above T (:func:`_padded_violation`). Without padding a capacity above T drops nothing
    (``apply_router_token_dropping``: ``logical_and(routing_map, capacity_mask)`` with an
    all-ones mask), which :func:`model.moe_rows.mean_rows_sent` counts as dropless.

    Raises
    ------
    InputError
        DeepSpeed's float32 capacity overflowing (:func:`model.moe_rows.deepspeed_capacity`).

    Examples
    --------
    >>> padded = MoERun(Fraction(9), pad_to_capacity=True)  # gpt-oss: E/k = 32/4 = 8
    >>> capacity_violation(padded, "megatron", 4096, 32, 4, 2880)[:87]  # C = 4,096·4/32·9
    'moe_capacity_factor: 9 with moe_pad_to_capacity pads each expert to C = 4,608 rows from'
    >>> capacity_violation(MoERun(Fraction(8), pad_to_capacity=True), "megatron", 4096, 32, 4, 2880)
    >>> capacity_violation(MoERun(Fraction(9)), "megatron", 4096, 32, 4, 2880)  # drops none
    >>> capacity_violation(MoERun(Fraction(10**6)), "deepspeed", 4096, 8, 2, 4096)  # 67 TB: counted
    >>> capacity_violation(MoERun(Fraction(10**15)), "deepspeed", 4096, 8, 2, 4096)[:44]
    'moe_capacity_factor: 1e+15 gives DeepSpeed a'
    """
    if run.capacity_factor is None:
        return None
    if framework == "deepspeed":
        return _deepspeed_violation(run, tokens, experts, top_k, hidden)
    return _padded_violation(run, tokens, experts, top_k) if run.pad_to_capacity else None


def _deepspeed_violation(
    run: MoERun, tokens: int, experts: int, top_k: int, hidden: int
) -> str | None:
    """DeepSpeed (``drop_tokens=True``, padded unasked): its ``[E, C, h]`` dispatch buffer has
    ``C`` = :func:`model.moe_rows.deepspeed_capacity`, not clipped to T (DeepSpeed edaa72212
    ``deepspeed/moe/sharded_moe.py`` ``topkgating`` clips only the top-k selection,
    ``selection_capacity = min(capacity, gates.size(0))``, "without shrinking the dispatch
    capacity the buffers are sized from"; ``_sparse_encode`` allocates ``E·C + 1`` slots and
    views ``[E, C, d_model]``), so the model counts those rows (8·1.024e9·4,096 BF16 at
    ``cf = 1e6``: 67 TB); refused where ``E·C·h`` exceeds :data:`TORCH_MAX_NUMEL`, a tensor
    PyTorch cannot size (the float32 overflow above about 3.4e38 rows is
    :func:`model.moe_rows.deepspeed_capacity`'s)."""
    assert run.capacity_factor is not None
    capacity = int(deepspeed_capacity(run, tokens, experts, top_k))
    elements = experts * capacity * hidden
    if elements <= TORCH_MAX_NUMEL:
        return None
    return (
        f"moe_capacity_factor: {_factor_words(run.capacity_factor)} gives DeepSpeed a [E, C, h] = "
        f"[{experts:,}, {_rows_words(capacity)}, {hidden:,}] dispatch buffer of {elements:.3g} "
        f"elements, more than a PyTorch tensor holds (2^63 − 1); DeepSpeed pads to C "
        f"unclipped (sharded_moe.py topkgating): use a factor near 1"
    )


def _padded_violation(run: MoERun, tokens: int, experts: int, top_k: int) -> str | None:
    """Padded to capacity (``moe_pad_to_capacity``, Megatron-Core's rule, every profile but
    ``deepspeed``): ``C`` = :func:`model.moe.capacity_rows` above T. Megatron-LM d98e8a64dd
    ``moe_utils.py`` ``apply_router_token_dropping`` then keeps every (token, expert) pair
    (``expert_capacity > num_tokens``: an all-ones ``capacity_mask``, which ``pad_to_capacity``
    makes the routing map), so each expert's column holds T < C tokens, where the padded
    dispatch takes exactly C of them: ``permute`` under ``drop_and_pad`` slices the sorted
    indices to ``[:, :capacity]`` (T columns) and views them as ``[num_experts, capacity]``,
    which E·T indices cannot fill, while ``token_dispatcher.py``
    ``MoEAlltoAllTokenDispatcher.preprocess`` sizes the all-to-all at ``num_out_tokens =
    capacity × num_experts``. C > T is ``cf·k > E`` up to the float rounding of
    ``get_capacity``; at most ``cf = E/k`` pads every expert to all T tokens.

    Unfused, the run stops: ``permute`` views the E·T sorted indices as ``[num_experts,
    capacity]`` to gather the probabilities (``indices_dim1 = sorted_indices.view(num_experts,
    capacity)``), which raises. Fused (``moe_permute_fusion``, which Megatron Bridge's MoE
    recipes set and the planner's permutation memory assumes) it does not stop, and is no
    better: ``permute(fused=True)`` calls Transformer Engine's ``moe_permute_with_probs``
    (NVIDIA/TransformerEngine d0067d0da ``transformer_engine/pytorch/permutation.py``
    ``moe_permute_mask_map_forward``; ``triton/permutation.py`` ``permute_with_mask_map``),
    which allocates ``num_out_tokens`` = C·E rows with ``torch.empty`` and writes each routed
    (token, expert) pair to its rank among the map's non-zeros in expert order
    (``common/triton/permutation.py`` ``_row_id_map_pass_1_kernel`` / ``_pass_2_kernel``:
    a cumulative sum over the map's columns), so expert e's T rows land at ``e·T``, not at the
    ``e·C`` the dispatcher reads as its block (``token_dispatch`` splits and ``view(…, capacity,
    …)`` by C), and the last ``(C − T)·E`` rows are never written: the experts compute
    shifted and uninitialised rows, which the unpermute reads back as their outputs, silently. The only guard TE has on
    ``num_out_tokens`` is ``> 0`` (92b03707a). So the rule holds under either path, and a run
    with C ≤ T (each column then holds exactly C non-zeros) fills the buffer exactly under
    both."""
    assert run.capacity_factor is not None
    capacity = int(capacity_rows(tokens * top_k, experts, run.capacity_factor))
    if capacity <= tokens:
        return None
    return (
        f"moe_capacity_factor: {_factor_words(run.capacity_factor)} with moe_pad_to_capacity "
        f"pads each expert to C = {_rows_words(capacity)} rows from a rank routing T = "
        f"{tokens:,} tokens, above T: Megatron-Core's router then keeps every token for every "
        f"expert and its padded permute cannot take C of T "
        f"(moe_utils.apply_router_token_dropping, permute: unfused it raises, fused "
        f"(moe_permute_fusion) Transformer Engine's moe_permute_with_probs writes T rows an "
        f"expert into C-row blocks, misplacing them); padded, the factor is at most "
        f"E/k = {experts}/{top_k} = {shown_number(Fraction(experts, top_k))}"
    )


def moe_capacity_rule(s: Any, framework: Any, b: int, cp: int, tp: int, sp: bool) -> None:
    """The legality rule ``moe_capacity`` (``s``: :class:`model.legality.Setting`): the run's
    capacity factor on the tokens a rank routes, ``T = s·b/cp`` (÷ tp with sequence
    parallelism; :func:`capacity_violation`).

    Raises
    ------
    LayoutError
        The rule broken, one line naming ``moe_capacity_factor``, its value and the rule.
    """
    run = s.training.moe_run
    arch = s.model.arch
    if run.capacity_factor is None or arch is None or arch.moe is None:
        return
    tokens = max(1, math.ceil(Fraction(s.training.seq_len * b, cp * (tp if sp else 1))))
    moe = arch.moe
    problem = capacity_violation(
        run, str(framework), tokens, moe.num_experts, moe.experts_per_token, arch.hidden_size
    )
    if problem:
        raise LayoutError(problem)
