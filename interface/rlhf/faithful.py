"""The RLHF tab's faithful accounting and the placement search, as report dictionaries.

``trainplan rlhf --model NAME …`` evaluates one placement (colocated on ``--gpus``, or the engine
on ``--rollout-gpus`` of its own) term by term with its sources; ``trainplan rlhf-plan`` searches
the placement and parallelism of every role (:mod:`optimizer.rlhf.search`). Both read their
workload with :func:`rlhf_inputs` and print the same role and pool records
(:mod:`interface.rlhf.report`). The cost model is in
:mod:`model.rlhf.spec`, :mod:`model.rollout`, :mod:`model.rlhf.roles` and :mod:`model.rlhf.step`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, TypeVar

from trainplan.interface.inputs import parse_framework
from trainplan.interface.tab_requests import RLHFRequest, tab_request
from trainplan.interface.tab_values import old_log_prob_flag
from trainplan.model.errors import InputError, LayoutError, check_applicable, named_lookup
from trainplan.model.frameworks import Framework
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.layout import Recompute
from trainplan.model.rlhf.dp_batch import dp_refusal
from trainplan.model.rlhf.openrlhf import check_split_count
from trainplan.model.rlhf.packing import Packing
from trainplan.model.rlhf.roles import OFFLOAD_MODES, RoleOption, check_training_tp
from trainplan.model.rlhf.shares import DEFAULTS, ROLLOUT_BATCH, not_applicable
from trainplan.model.rlhf.spec import (
    HOST_BYTES_PER_NODE,
    MICRO_BATCH_TOKENS,
    LogitsMode,
    RLHFSpec,
    Role,
    default_fraction,
    placed_algorithm,
)
from trainplan.model.rlhf.step import StepPlan, compose
from trainplan.model.rollout import check_fraction
from trainplan.model.segments import placed_for
from trainplan.model.units import parse_count, parse_number, parse_positive
from trainplan.optimizer.rlhf.tables import RLHFProblem, cost_of
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerator_file import get_part

E = TypeVar("E", bound=Enum)

__all__ = [
    "FAITHFUL_DEFAULTS",
    "RLHFInputs",
    "rlhf_inputs",
    "evaluate_placement",
    "ASSUMPTIONS",
]

_TAB: dict[str, Any] = DEFAULTS
"""The RLHF tab's defaults both accountings share (:data:`model.rlhf.shares.DEFAULTS`)."""

FAITHFUL_DEFAULTS: dict[str, Any] = {
    "framework": "megatron",
    "gpus": 8,
    "gpu": "H100-SXM",
    "train_tp": 1,
    "train_pp": 1,
    "logits": "full",
    "micro_batch_tokens": MICRO_BATCH_TOKENS,
    "recompute": "full",
    "old_log_prob": _TAB["old_log_prob"],
    "off_policy": 0,
    "host_memory_gb": HOST_BYTES_PER_NODE // 10**9,
    "rollout_batch": ROLLOUT_BATCH,
}
"""Defaults of the faithful accounting: Megatron-Core (the planner's default profile), one
8-GPU node of H100s, training dp only,
full logits, verl's 16,384-token micro-batches, full recomputation, the actor's old-log-prob
pass, a synchronous step, 2 TB of host memory per node (DGX H100), vLLM's 256 sequences at once;
the engine's fraction is verl's 0.5 colocated and vLLM's 0.9 on GPUs of its own. The engine's tp
is verl's 2 (``tensor_model_parallel_size: 2``) where it divides the engine's GPUs, else 1
(:func:`rlhf_inputs`)."""

ASSUMPTIONS = (
    "every rollout reaches `completion_tokens` (no early stop); a wave decodes until its "
    "longest rollout ends, `max_completion_tokens` where given (the lengths' spread between "
    "is a uniform thinning, not their distribution); the engine's activation and CUDA-graph "
    "workspace inside its budget is not counted",
    "decode at the HBM bandwidth × bandwidth_efficiency (default: the part's STREAM triad "
    "fraction, the optimizer step's); prefill and the forwards "
    "at the calibrated kernel efficiency; a tp > 1 engine's all-reduces and logits gather "
    "added to every prefill chunk and decode step, not overlapped",
    "verl: a prompt's samples on one engine replica (round robin over the replicas) share its "
    "prompt's full KV blocks, prefilled and held once (vLLM prefix caching); OpenRLHF: none",
    "the engine frees its memory outside the rollout (vLLM sleep mode, verl free_cache_engine); "
    "training roles keep their model state on their GPUs through every phase unless offloaded",
    "the critic and the reward model are the policy's network (or --critic-model's) with a "
    "value head [h → 1] in place of the LM head (verl's with a bias, OpenRLHF's without): no "
    "V·h output weights, no vocabulary logits",
    "a scoring forward frees each layer's activations as it goes (not counted); optimizer "
    "offload as model.offload counts it: host-link transfers and the CPU Adam step in every "
    "update, all exposed (an upper bound)",
)


@dataclass(frozen=True, slots=True)
class RLHFInputs:
    """A parsed faithful RLHF workload and cluster, and the placement flags of the tab."""

    spec: RLHFSpec
    """The workload."""
    device: DeviceSpec
    """The accelerator (``gpu``)."""
    gpus: int
    """GPUs of the cluster."""
    links: ClusterLinks
    """Its links, from the accelerator table."""
    rollout_gpus: int | None = None
    """The engine's own GPUs (split); None: colocated on all."""
    train_tp: int = 1
    train_pp: int = 1
    """tp and pp of the training and scoring roles (dp: the rest of their pool)."""
    rollout_tp: int = 2
    """The engine's tp (default: verl's 2 where it divides the engine's GPUs, else 1)."""
    offload: tuple[tuple[str, str], ...] = ()
    """(role, mode) for the roles given an offload mode (:data:`model.rlhf.roles.OFFLOAD_MODES`)."""
    shared_engine_weights: bool = False
    """The colocated engine reuses the actor's whole BF16 weights (HybridFlow)."""
    defaults_used: dict[str, Any] = field(default_factory=dict)

    @property
    def problem(self) -> RLHFProblem:
        return RLHFProblem(self.spec, self.device, self.gpus, self.links)


def _choice(value: Any, kind: type[E], name: str) -> E:
    """``value`` as a member of the enum ``kind``, or an InputError listing its values."""
    try:
        return kind(str(value).lower())
    except ValueError:
        names = ", ".join(str(k.value) for k in kind)
        raise InputError(f"{name}: {value!r} is not one of {names}") from None


def _opt(r: RLHFRequest, key: str, used: dict[str, Any]) -> Any:
    """``r``'s ``key``, or its :data:`FAITHFUL_DEFAULTS` value (listed in ``used``) when unset."""
    value = getattr(r, key)
    if value is None and key in FAITHFUL_DEFAULTS:
        used[key] = FAITHFUL_DEFAULTS[key]
        return FAITHFUL_DEFAULTS[key]
    return value


def _count(r: RLHFRequest, key: str, used: dict[str, Any]) -> int | None:
    """``r``'s count ``key`` (its default when unset, :func:`_opt`), None when it has none."""
    value = _opt(r, key, used)
    return None if value is None else parse_count(value, key)


def rlhf_inputs(request: RLHFRequest | Mapping[str, Any], placement: bool = True) -> RLHFInputs:
    """Read the faithful options of ``request`` (an :class:`~interface.tab_requests.RLHFRequest`,
    or its fields by name, a caller's dict: made one here): ``algorithm model critic_model reward
    prompts samples_per_prompt prompt_tokens completion_tokens epochs train_batch
    micro_batch_tokens packing logits old_log_prob engine_memory_fraction rollout_batch off_policy
    framework zero recompute host_memory_gb bandwidth_efficiency agent_workers gpu gpus`` and, with
    ``placement``, ``rollout_gpus train_tp train_pp rollout_tp offload shared_engine_weights``.

    Raises
    ------
    InputError
        A bad value, naming the parameter, the value and the rule (a length below 1, a group size
        that does not divide the train batch, a fraction outside (0, 1) …); a name that is not a
        parameter of the tab.
    ScenarioError
        An unknown model or accelerator.
    """
    r = request if isinstance(request, RLHFRequest) else tab_request(RLHFRequest, request)
    used: dict[str, Any] = {}
    spec = _spec(r, used)
    if r.agent_workers is None and spec.agent_workers is not None:  # verl's default
        used["agent_workers"] = spec.agent_workers
    check_cap_holds_a_sequence(spec, "micro_batch_tokens" in used)
    device = named_lookup("gpu", get_part, str(_opt(r, "gpu", used)))
    gpus = _count(r, "gpus", used) or 1
    device = placed_for(device, gpus)  # the job's Slurm segment on NVL72 (model.segments)
    links = ClusterLinks.from_device(device, gpus)
    if not placement:
        return RLHFInputs(spec, device, gpus, links, defaults_used=used)
    return _placed(r, RLHFInputs(spec, device, gpus, links, defaults_used=used))


def check_cap_holds_a_sequence(spec: RLHFSpec, default: bool = False) -> None:
    """Refuse a token cap (``micro_batch_tokens``) below one sequence — the prompt plus the
    longest completion — under verl's balanced packing: ``rearrange_micro_batches``
    (``verl/utils/seqlen_balancing.py``, verl b178a3cd5 and 0d04d640) asserts ``max_token_len >=
    max_seq_len`` before it packs, so such a run stops at its first update, where the cost model
    would count one rollout a micro-batch (:func:`model.rlhf.packing.peak_tokens`: ⌈cap / L⌉ is
    1). Under first-fit (OpenRLHF) such a cap is what the run does:
    ``get_minimum_num_micro_batch_size`` (``openrlhf/utils/seqlen_balancing.py``, OpenRLHF
    3c3be6234) gives a sequence longer than the cap a micro-batch of its own, as the model counts.
    ``default``: the cap is :data:`model.rlhf.spec.MICRO_BATCH_TOKENS`, which the user did not
    give (verl's own default, so verl would stop too): the refusal says so and names the
    smallest cap to give.

    Raises
    ------
    InputError
        ``micro_batch_tokens: 4,096 must hold one sequence …``, naming the cap (as the default
        where ``default``), the sequence's tokens and the rule.
    """
    completion = spec.max_completion_tokens or spec.completion_tokens
    sequence = spec.prompt_tokens + completion
    cap = spec.micro_batch_tokens
    if spec.packing is not Packing.BALANCED or cap >= sequence:
        return
    name = "max_completion_tokens" if spec.max_completion_tokens else "completion_tokens"
    holds = (
        f"must hold at least one sequence, `prompt_tokens` + `{name}` = {spec.prompt_tokens:,} + "
        f"{completion:,} = {sequence:,} tokens"
    )
    rule = "verl's balanced packing asserts its token cap holds the longest sequence"
    if default:
        raise InputError(
            f"micro_batch_tokens: the default {cap:,} (verl's ppo_max_token_len_per_gpu) {holds}: "
            f"give `micro_batch_tokens` {sequence:,} or more ({rule}, rearrange_micro_batches), "
            "or `packing` first-fit (OpenRLHF), which gives such a sequence a micro-batch of its "
            "own"
        )
    raise InputError(
        f"micro_batch_tokens: {cap:,} {holds}: {rule} (rearrange_micro_batches); `packing` "
        "first-fit (OpenRLHF) gives such a sequence a micro-batch of its own"
    )


def _spec(r: RLHFRequest, used: dict[str, Any]) -> RLHFSpec:
    """The workload of ``r`` (:class:`model.rlhf.spec.RLHFSpec`), defaults listed in ``used``.

    Raises
    ------
    InputError
        A bad value; ``framework`` textbook (the accounting without a model).
    """
    policy = (
        r.model_spec
        if r.model_spec is not None
        else named_lookup("model", get_model, str(r.model)).model
    )
    critic = _critic(r)
    framework = parse_framework(_opt(r, "framework", used))
    if framework is Framework.TEXTBOOK:
        raise InputError(
            "framework: 'textbook' is the accounting without --model (16 / 2 B per parameter); the "
            "faithful one runs a framework's mechanism (megatron, deepspeed, fsdp2) — leave out "
            "--model for the textbook figures"
        )
    fraction = r.engine_memory_fraction
    frac = (
        None
        if fraction is None
        else check_fraction(parse_number(fraction, "engine_memory_fraction"))
    )
    return RLHFSpec(
        algorithm=str(r.algorithm),
        policy=policy,
        critic=critic,
        reward=str(r.reward or "model").lower(),
        prompts=parse_count(r.prompts, "prompts"),
        samples_per_prompt=parse_count(
            r.samples_per_prompt or _TAB["samples_per_prompt"], "samples_per_prompt"),
        prompt_tokens=parse_count(r.prompt_tokens, "prompt_tokens"),
        completion_tokens=parse_count(r.completion_tokens, "completion_tokens"),
        max_completion_tokens=_count(r, "max_completion_tokens", used),
        epochs=parse_count(r.epochs, "epochs"),
        train_batch=_count(r, "train_batch", used),
        micro_batch_tokens=_count(r, "micro_batch_tokens", used) or MICRO_BATCH_TOKENS,
        logits=_choice(_opt(r, "logits", used), LogitsMode, "logits"),
        packing=None if r.packing is None else _choice(r.packing, Packing, "packing"),
        old_log_prob=old_log_prob_flag(_opt(r, "old_log_prob", used)),
        engine_memory_fraction=frac,
        max_num_seqs=_count(r, "rollout_batch", used) or ROLLOUT_BATCH,
        off_policy=int(parse_count(_opt(r, "off_policy", used), "off_policy", 0)),
        framework=framework,
        zero_stage=None if r.zero is None else parse_count(r.zero, "zero", 0),
        recompute=_choice(_opt(r, "recompute", used), Recompute, "recompute"),
        host_memory_bytes=int(parse_positive(_opt(r, "host_memory_gb", used), "host_memory_gb") * 10**9),
        bandwidth_efficiency=None if r.bandwidth_efficiency is None else float(
            parse_number(r.bandwidth_efficiency, "bandwidth_efficiency")),
        agent_workers=_count(r, "agent_workers", used),
    )  # fmt: skip


def _critic(r: RLHFRequest) -> Any:
    """``r``'s critic and reward model network (``critic_model``'s model), or None: the policy's.

    Raises
    ------
    InputError
        An unknown model; one given where the step has neither a critic nor a reward model (GRPO
        with a rule-based reward: :func:`model.rlhf.shares.not_applicable`), never dropped.
    """
    unused = not_applicable(placed_algorithm(r.algorithm), r.reward, rollout_engine=True)
    check_applicable({"critic_model": r.critic_model}, unused)
    if r.critic_model is None:
        return None
    return named_lookup("critic_model", get_model, str(r.critic_model)).model


def _placed(r: RLHFRequest, inp: RLHFInputs) -> RLHFInputs:
    """``inp`` with the tab's placement of ``r``: the engine's own GPUs, the training roles' tp
    and pp, the engine's tp (verl's 2 where it divides the engine's GPUs, else 1), offload and
    shared weights; defaults listed in ``inp.defaults_used``.

    Raises
    ------
    InputError
        An engine pool that leaves no GPU to training; off-policy colocated; shared weights on
        GPUs of the engine's own; a bad value.
    """
    used, gpus = inp.defaults_used, inp.gpus
    rollout_gpus = _count(r, "rollout_gpus", used)
    if rollout_gpus is not None and rollout_gpus >= gpus:
        raise InputError(
            f"rollout_gpus: {rollout_gpus} must leave GPUs for training: fewer than --gpus {gpus}"
        )
    if inp.spec.off_policy and rollout_gpus is None:
        raise InputError(
            "off_policy: 1 needs the engine on GPUs of its own (--rollout-gpus): colocated, the "
            "next rollout cannot run beside training"
        )
    shared = bool(r.shared_engine_weights)
    check_applicable(
        {"shared_engine_weights": shared},
        {"shared_engine_weights": "the engine shares the actor's weights only on the same GPUs"}
        if rollout_gpus is not None
        else {},
    )
    rollout_tp = r.rollout_tp
    if rollout_tp is None:
        # verl's tp 2 where it divides the engine's GPUs; tp 1 on an odd count (the default must
        # not be what makes a placement illegal)
        rollout_tp = 2 if (rollout_gpus or gpus) % 2 == 0 else 1
        used["rollout_tp"] = rollout_tp
    return replace(
        inp,
        rollout_gpus=rollout_gpus,
        train_tp=_count(r, "train_tp", used) or 1,
        train_pp=_count(r, "train_pp", used) or 1,
        rollout_tp=parse_count(rollout_tp, "rollout_tp"),
        offload=_offload(r.offload, inp.spec),
        shared_engine_weights=shared,
    )


def _offload(value: Any, spec: RLHFSpec) -> tuple[tuple[str, str], ...]:
    """``--offload``: one mode for every role it applies to (``optimizer``: the trainable roles;
    ``idle``: every role but the engine), or ``role=mode,…``.

    Raises
    ------
    InputError
        An unknown role or mode, ``optimizer`` for a frozen role, anything for the engine.
    """
    if value is None or value is False:
        return ()
    text = "idle" if value is True else str(value).strip().lower()
    names = [str(r.role) for r in spec.roles if r.role is not Role.ROLLOUT]
    if "=" not in text:
        if text not in OFFLOAD_MODES:
            raise InputError(
                f"offload: {value!r} is not one of {', '.join(OFFLOAD_MODES)} or role=mode,…"
            )
        return tuple((r, text) for r in names if text != "optimizer" or spec.role(r).trainable)
    out = []
    for part in text.split(","):
        role, _, mode = (x.strip() for x in part.partition("="))
        if role not in names:
            raise InputError(
                f"offload: {role!r} is not a role that can offload here ({', '.join(names)})"
            )
        if mode not in OFFLOAD_MODES:
            raise InputError(
                f"offload: {mode!r} for {role} is not one of {', '.join(OFFLOAD_MODES)}"
            )
        if mode == "optimizer" and not spec.role(role).trainable:
            raise InputError(
                f"offload: {role} is frozen; only trainable roles have optimizer state"
            )
        out.append((role, mode))
    return tuple(out)


def _check_train_dp(inp: RLHFInputs, train_pool: int, mp: int) -> None:
    """Refuse a training pool whose dp leaves a role a rank with no sequence: the rule of
    :func:`model.rlhf.dp_batch.dp_refusal` for each role on the pool (the search's tables
    leave out the same options). OpenRLHF's rule first where it applies
    (:func:`model.rlhf.openrlhf.check_split_count`): it names why."""
    dp = train_pool // mp
    check_split_count(inp.spec, Role.ACTOR, dp)
    for rs in inp.spec.roles:
        why = None if rs.role is Role.ROLLOUT else dp_refusal(inp.spec, rs.trainable, dp)
        if why:
            raise LayoutError(
                f"gpus: the training roles' {train_pool:,} GPUs at `train_tp` × `train_pp` = "
                f"{mp} are {why} (fewer --gpus, more --rollout-gpus, a larger --train-tp or "
                "--train-pp, or more --prompts)"
            )


def evaluate_placement(inp: RLHFInputs) -> StepPlan:
    """The tab's placement: every role on all ``gpus`` (colocated), or the engine on
    ``rollout_gpus`` and the other roles together on the rest; the training and scoring roles at
    ``train_tp`` × ``train_pp`` (dp the rest of their pool), the engine at ``rollout_tp``. A
    placement that does not fit in memory (the engine's budget included) is a plan whose
    ``fits`` is False, not an error (:meth:`model.rlhf.step.StepPlan.overflows`).

    Raises
    ------
    LayoutError
        Degrees that do not divide a pool, or that the model or the KV heads do not allow; a
        training dp above the sequences of an update (a rank with no rollout to train on).
    """
    split = inp.rollout_gpus is not None
    train_pool = inp.gpus - (inp.rollout_gpus or 0)
    fraction = inp.spec.engine_memory_fraction or default_fraction(not split, inp.spec.framework)
    options, pools = [], []
    for rs in inp.spec.roles:
        if rs.role is Role.ROLLOUT:
            n = inp.rollout_gpus or inp.gpus
            if n % inp.rollout_tp:
                raise LayoutError(
                    f"rollout_tp: {inp.rollout_tp} does not divide the engine's {n:,} "
                    f"GPU{'s' * (n != 1)} (--{'rollout-' if split else ''}gpus {n:,})"
                )
            options.append(
                RoleOption(rs.role, n, n // inp.rollout_tp, inp.rollout_tp, 1, "none", fraction)
            )
            pools.append(0)
            continue
        check_training_tp(inp.spec.framework, inp.train_tp, "train_tp", inp.train_pp)
        mp = inp.train_tp * inp.train_pp
        if train_pool % mp:
            raise LayoutError(
                f"`train_tp` × `train_pp`: {mp} does not divide the training roles' {train_pool:,} GPUs"
            )
        _check_train_dp(inp, train_pool, mp)
        options.append(
            RoleOption(
                rs.role,
                train_pool,
                train_pool // mp,
                inp.train_tp,
                inp.train_pp,
                dict(inp.offload).get(str(rs.role), "none"),
            )
        )
        pools.append(1 if split else 0)
    problem = inp.problem
    costs = tuple(cost_of(problem, o, over_budget=True) for o in options)
    return compose(
        costs,
        pools,
        inp.device.usable_bytes(True),
        inp.spec.host_memory_bytes,
        problem.node,
        inp.spec.off_policy,
        inp.shared_engine_weights,
    )
