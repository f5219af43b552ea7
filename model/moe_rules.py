"""The rules a MoE run's choices follow (:class:`model.moe_run.MoERun`): which framework
profile runs which dispatcher and overlap, what a layout needs for them (DeepEP's EP sizes, the
combined 1F1B's interleaving, HybridEP's tokens a rank across NVLink domains) and what they
refuse under full recomputation. Each ``*_violation`` returns the first rule broken as one line
(``parameter: value …: rule``) or None, which :mod:`model.legality` and the interface raise;
each ``*_rule`` is one of :data:`model.legality.RULES`' checks, raising it."""

from __future__ import annotations

from typing import Any

from trainplan.model.dispatch_buffers import deepep_group_ranks, hybridep_token_refusal
from trainplan.model.errors import LayoutError
from trainplan.model.expert_groups import expert_placement_tp_of, expert_tp_of
from trainplan.model.model_spec import ModelSpec
from trainplan.model.moe import DEEPEP_DISPATCH_CONFIGS
from trainplan.model.moe_run import DROPLESS, Dispatcher, EpOverlap, MoERun
from trainplan.model.rank_groups import axis_spans

__all__ = [
    "HYBRIDEP_TOKENS_SCOPE",
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
