"""The RLHF tab's faithful accounting and the placement search, as report dictionaries.

``trainplan rlhf --model NAME …`` evaluates one placement (colocated on ``--gpus``, or the engine
on ``--rollout-gpus`` of its own) term by term with its sources; ``trainplan rlhf-plan`` searches
the placement and parallelism of every role (:mod:`optimizer.rlhf_search`). Both read their
workload with :func:`rlhf_inputs` and print the same role and pool records. The cost model is in
:mod:`model.rlhf_spec`, :mod:`model.rollout`, :mod:`model.rlhf_roles` and :mod:`model.rlhf_step`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction
from typing import Any, TypeVar

from trainplan.interface.inputs import parse_framework
from trainplan.model.errors import InputError, check_applicable
from trainplan.model.frameworks import Framework
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.layout import Recompute
from trainplan.model.rlhf import ROLLOUT_BATCH
from trainplan.model.rlhf_roles import RoleOption
from trainplan.model.rlhf_spec import (
    HOST_BYTES_PER_NODE,
    MICRO_BATCH_TOKENS,
    PHASES,
    LogitsMode,
    RLHFSpec,
    Role,
    phase_flops,
)
from trainplan.model.rlhf_step import StepPlan
from trainplan.model.rollout import check_fraction, kv_bytes_per_token
from trainplan.model.units import parse_count, parse_number, parse_positive
from trainplan.optimizer.rlhf_tables import RLHFProblem, cost_of, default_fraction
from trainplan.optimizer.rlhf_tables import sync_bandwidth as _sync

E = TypeVar("E", bound=Enum)

__all__ = [
    "FAITHFUL_DEFAULTS",
    "RLHFInputs",
    "rlhf_inputs",
    "evaluate_placement",
    "plan_dict",
    "result_dict",
    "ASSUMPTIONS",
]

FAITHFUL_DEFAULTS: dict[str, Any] = {
    "framework": "megatron",
    "gpus": 8,
    "gpu": "H100-SXM",
    "train_tp": 1,
    "train_pp": 1,
    "rollout_tp": 2,
    "logits": "full",
    "micro_batch_tokens": MICRO_BATCH_TOKENS,
    "recompute": "full",
    "old_log_prob": True,
    "off_policy": 0,
    "host_memory_gb": HOST_BYTES_PER_NODE // 10**9,
    "rollout_batch": ROLLOUT_BATCH,
}
"""Defaults of the faithful accounting: Megatron-Core (the planner's default profile), one
8-GPU node of H100s, verl's rollout tp 2 (``tensor_model_parallel_size: 2``), training dp only,
full logits, verl's 16,384-token micro-batches, full recomputation, the actor's old-log-prob
pass, a synchronous step, 2 TB of host memory per node (DGX H100), vLLM's 256 sequences at once;
the engine's fraction is verl's 0.5 colocated and vLLM's 0.9 on GPUs of its own."""

ASSUMPTIONS = (
    "every rollout reaches its full length (no early stop, no long tail); the engine's "
    "activation and CUDA-graph workspace inside its budget is not counted",
    "decode at the HBM bandwidth × bandwidth_efficiency (the roofline); prefill and the forwards "
    "at the calibrated kernel efficiency; tp collectives of decode not counted",
    "the engine frees its memory outside the rollout (vLLM sleep mode, verl free_cache_engine); "
    "training roles keep their model state on their GPUs through every phase unless offloaded",
    "the critic and the reward model are counted with their base model's output layer (a value "
    "head is one column; its V·h weights are not subtracted) but without vocabulary logits",
    "a scoring forward frees each layer's activations as it goes (not counted); CPU Adam's own "
    "time under offload is not counted",
)


@dataclass(frozen=True, slots=True)
class RLHFInputs:
    """A parsed faithful RLHF workload and cluster, and the placement flags of the tab."""

    spec: RLHFSpec
    device: DeviceSpec
    gpus: int
    links: ClusterLinks
    rollout_gpus: int | None = None
    train_tp: int = 1
    train_pp: int = 1
    rollout_tp: int = 2
    offload: tuple[tuple[str, str], ...] = ()
    """(role, mode) for the roles given an offload mode (:data:`model.rlhf_roles.OFFLOAD_MODES`)."""
    shared_engine_weights: bool = False
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


def _opt(params: dict[str, Any], key: str, used: dict[str, Any]) -> Any:
    value = params.get(key)
    if value is None and key in FAITHFUL_DEFAULTS:
        used[key] = FAITHFUL_DEFAULTS[key]
        return FAITHFUL_DEFAULTS[key]
    return value


def rlhf_inputs(params: dict[str, Any], placement: bool = True) -> RLHFInputs:
    """Read the faithful options (names as the CLI's, underscores): ``algorithm model
    critic_model reward prompts samples_per_prompt prompt_tokens completion_tokens epochs
    train_batch micro_batch_tokens logits old_log_prob engine_memory_fraction rollout_batch
    off_policy framework zero recompute host_memory_gb bandwidth_efficiency gpu gpus`` and, with
    ``placement``, ``rollout_gpus train_tp train_pp rollout_tp offload shared_engine_weights``.

    Raises
    ------
    InputError
        A bad value, naming the parameter, the value and the rule (a length below 1, a group size
        that does not divide the train batch, a fraction outside (0, 1) …).
    ScenarioError
        An unknown model or accelerator.
    """
    from trainplan.scenarios.catalogue import get_model
    from trainplan.topology.accelerators import get_accelerator

    used: dict[str, Any] = {}
    spec_given = params.get("model_spec")  # a ModelSpec built in code (the measured runs)
    policy = spec_given if spec_given is not None else get_model(str(params["model"])).model
    critic = (
        None if params.get("critic_model") is None else get_model(str(params["critic_model"])).model
    )
    framework = parse_framework(_opt(params, "framework", used))
    if framework is Framework.TEXTBOOK:
        raise InputError(
            "framework: 'textbook' is the seed's accounting; the faithful one runs a framework's "
            "mechanism (megatron, deepspeed, fsdp2) — leave out --model for the seed's figures"
        )

    def count(key: str) -> int | None:
        value = _opt(params, key, used)
        return None if value is None else parse_count(value, key)

    fraction = params.get("engine_memory_fraction")
    frac = (
        None
        if fraction is None
        else check_fraction(parse_number(fraction, "engine_memory_fraction"))
    )
    zero = params.get("zero")
    spec = RLHFSpec(
        algorithm=str(params["algorithm"]),
        policy=policy,
        critic=critic,
        reward=str(params.get("reward") or "model").lower(),
        prompts=parse_count(params.get("prompts", 1024), "prompts"),
        samples_per_prompt=parse_count(params.get("samples_per_prompt") or 16, "samples_per_prompt"),
        prompt_tokens=parse_count(params.get("prompt_tokens", 1024), "prompt_tokens"),
        completion_tokens=parse_count(params.get("completion_tokens", 4096), "completion_tokens"),
        max_completion_tokens=count("max_completion_tokens"),
        epochs=parse_count(params.get("epochs", 1), "epochs"),
        train_batch=count("train_batch"),
        micro_batch_tokens=count("micro_batch_tokens") or MICRO_BATCH_TOKENS,
        logits=_choice(_opt(params, "logits", used), LogitsMode, "logits"),
        old_log_prob=bool(_opt(params, "old_log_prob", used)),
        engine_memory_fraction=frac,
        max_num_seqs=count("rollout_batch") or ROLLOUT_BATCH,
        off_policy=int(parse_count(_opt(params, "off_policy", used), "off_policy", 0)),
        framework=framework,
        zero_stage=None if zero is None else parse_count(zero, "zero", 0),
        recompute=_choice(_opt(params, "recompute", used), Recompute, "recompute"),
        host_memory_bytes=int(parse_positive(_opt(params, "host_memory_gb", used), "host_memory_gb") * 10**9),
        bandwidth_efficiency=float(parse_number(params.get("bandwidth_efficiency") or 1, "bandwidth_efficiency")),
    )  # fmt: skip
    device = get_accelerator(str(_opt(params, "gpu", used)))
    gpus = count("gpus") or 1
    links = ClusterLinks.from_device(device)
    if not placement:
        return RLHFInputs(spec, device, gpus, links, defaults_used=used)
    rollout_gpus = count("rollout_gpus")
    if rollout_gpus is not None and rollout_gpus >= gpus:
        raise InputError(
            f"rollout_gpus: {rollout_gpus} must leave GPUs for training: fewer than --gpus {gpus}"
        )
    if spec.off_policy and rollout_gpus is None:
        raise InputError(
            "off_policy: 1 needs the engine on GPUs of its own (--rollout-gpus): colocated, the "
            "next rollout cannot run beside training"
        )
    shared = bool(params.get("shared_engine_weights"))
    check_applicable(
        {"shared_engine_weights": shared},
        {"shared_engine_weights": "the engine shares the actor's weights only on the same GPUs"}
        if rollout_gpus is not None
        else {},
    )
    return RLHFInputs(
        spec,
        device,
        gpus,
        links,
        rollout_gpus,
        count("train_tp") or 1,
        count("train_pp") or 1,
        count("rollout_tp") or 2,
        _offload(params.get("offload"), spec),
        shared,
        used,
    )


def _offload(value: Any, spec: RLHFSpec) -> tuple[tuple[str, str], ...]:
    """``--offload``: one mode for every role it applies to (``optimizer``: the trainable roles;
    ``idle``: every role but the engine), or ``role=mode,…``.

    Raises
    ------
    InputError
        An unknown role or mode, ``optimizer`` for a frozen role, anything for the engine.
    """
    from trainplan.model.rlhf_roles import OFFLOAD_MODES

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


def evaluate_placement(inp: RLHFInputs) -> StepPlan:
    """The tab's placement: every role on all ``gpus`` (colocated), or the engine on
    ``rollout_gpus`` and the other roles together on the rest; the training and scoring roles at
    ``train_tp`` × ``train_pp`` (dp the rest of their pool), the engine at ``rollout_tp``.

    Raises
    ------
    LayoutError
        Degrees that do not divide a pool, or that the model or the KV heads do not allow.
    """
    from trainplan.model.errors import LayoutError
    from trainplan.model.rlhf_step import compose

    split = inp.rollout_gpus is not None
    train_pool = inp.gpus - (inp.rollout_gpus or 0)
    fraction = inp.spec.engine_memory_fraction or default_fraction(not split)
    options, pools = [], []
    for rs in inp.spec.roles:
        if rs.role is Role.ROLLOUT:
            n = inp.rollout_gpus or inp.gpus
            if n % inp.rollout_tp:
                raise LayoutError(
                    f"rollout_tp: {inp.rollout_tp} does not divide the engine's {n} GPUs"
                )
            options.append(
                RoleOption(rs.role, n, n // inp.rollout_tp, inp.rollout_tp, 1, "none", fraction)
            )
            pools.append(0)
            continue
        mp = inp.train_tp * inp.train_pp
        if train_pool % mp:
            raise LayoutError(
                f"train_tp × train_pp: {mp} does not divide the training roles' {train_pool} GPUs"
            )
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
    costs = tuple(cost_of(problem, o) for o in options)
    return compose(
        costs,
        pools,
        inp.device.usable_bytes(True),
        inp.spec.host_memory_bytes,
        problem.node,
        inp.spec.off_policy,
        inp.shared_engine_weights,
    )


def _role_record(cost: Any, pool: int, spec: RLHFSpec) -> dict[str, Any]:
    opt, rs = cost.option, spec.role(cost.option.role)
    rec: dict[str, Any] = {
        "role": str(opt.role),
        "model": rs.model.name,
        "params": rs.params,
        "trainable": rs.trainable,
        "pool": pool,
        "gpus": opt.gpus,
        "layout": {"dp": opt.dp, "tp": opt.tp, "pp": opt.pp},
        "offload": opt.offload,
        "held_bytes": cost.held_bytes,
        "swap_bytes": cost.swap_bytes,
        "phase_bytes": {p: cost.phase_bytes(p) for p in PHASES},
        "host_bytes_per_gpu": cost.host_bytes,
        "seconds": {p: cost.seconds(p) for p in PHASES},
    }
    if opt.role is Role.ROLLOUT:
        rec["engine_memory_fraction"] = opt.fraction
        rec["concurrent_sequences"] = cost.concurrent
    return rec


def plan_dict(
    spec: RLHFSpec, plan: StepPlan, pool_of: tuple[int, ...] | None = None
) -> dict[str, Any]:
    """A step plan as plain data: ``roles``, ``terms`` (each with its source), ``pools``,
    ``step_phase_seconds``, ``step_seconds``, ``tokens_per_second``, ``fits``."""
    pools = pool_of or tuple(
        next(p.index for p in plan.pools if str(c.option.role) in p.roles) for c in plan.costs
    )
    roles = [_role_record(c, q, spec) for c, q in zip(plan.costs, pools, strict=True)]
    terms = [
        {"role": str(c.option.role), "term": t.name, "phase": t.phase, "value": t.value, "unit": t.unit, "source": t.source}
        for c in plan.costs
        for t in c.terms
    ]  # fmt: skip
    pool_recs = [
        {
            "pool": p.index,
            "gpus": p.gpus,
            "first_gpu": p.first_gpu,
            "roles": list(p.roles),
            "held_bytes": p.held_bytes,
            "peak_bytes": dict(zip(PHASES, p.peak_bytes, strict=True)),
            "busy_seconds": dict(zip(PHASES, p.busy_s, strict=True)),
            "host_bytes_per_gpu": p.host_bytes,
            "fits": p.peak <= plan.capacity_bytes and p.host_bytes <= plan.host_capacity_bytes,
        }
        for p in plan.pools
    ]
    tokens = spec.sequences * spec.seq_len
    return {
        "placement": "colocated" if plan.colocated else "split",
        "off_policy": plan.off_policy,
        "roles": roles,
        "terms": terms,
        "pools": pool_recs,
        "step_phase_seconds": dict(zip(PHASES, plan.phase_s, strict=True)),
        "step_seconds": plan.step_s,
        "tokens_per_second": tokens / plan.step_s if plan.step_s else None,
        "capacity_bytes": plan.capacity_bytes,
        "host_capacity_bytes_per_gpu": plan.host_capacity_bytes,
        "fits": plan.fits,
    }


def workload_dict(inp: RLHFInputs) -> dict[str, Any]:
    """The workload and cluster as read (keys of the ``faithful`` object besides the plan)."""
    spec = inp.spec
    arch = spec.policy.arch
    assert arch is not None
    flops = phase_flops(spec)
    return {
        "accounting": "faithful",
        "framework": str(spec.framework),
        "zero_stage": spec.zero_stage,
        "recompute": str(spec.recompute),
        "logits": str(spec.logits),
        "gpu": inp.device.name,
        "gpus": inp.gpus,
        "policy": spec.policy.name,
        "sequences": spec.sequences,
        "group_size": spec.samples_per_prompt,
        "tokens_per_sequence": spec.seq_len,
        "micro_batch_sequences": spec.micro_batch_sequences,
        "train_batch": spec.train_batch or spec.sequences,
        "updates_per_epoch": spec.updates_per_epoch,
        "epochs": spec.epochs,
        "old_log_prob": spec.old_log_prob,
        "kv_bytes_per_token": kv_bytes_per_token(arch, 1),
        "flops_by_role": {p: {str(r): f for r, f in v.items()} for p, v in flops.items()},
        "phase_flops_total": {p: sum(v.values()) for p, v in flops.items()},
        "assumptions": list(ASSUMPTIONS),
        "defaults_used": dict(inp.defaults_used),
    }


def result_dict(inp: RLHFInputs, result: Any) -> dict[str, Any]:
    """``rlhf-plan``'s JSON: the workload, ``status``, ``reason``, ``best``, ``colocated``,
    ``split`` (each a :func:`plan_dict` with its ``options``), ``tables_seconds``,
    ``solve_seconds``, ``options``, ``tried``."""

    def one(p: Any) -> dict[str, Any] | None:
        if p is None:
            return None
        d = plan_dict(inp.spec, p.plan, p.pool_of)
        d["objective_ns"] = p.objective_ns
        return d

    return {
        "tab": "rlhf-plan",
        "algorithm": inp.spec.algorithm,
        **workload_dict(inp),
        "status": result.status,
        "reason": result.reason,
        "best": one(result.best),
        "colocated": one(result.colocated),
        "split": one(result.split),
        "tables_seconds": result.tables_seconds,
        "solve_seconds": result.solve_seconds,
        "options": result.options,
        "tried": result.tried,
    }


def sync_bandwidth(inp: RLHFInputs) -> float:
    """The weight-sync bandwidth of the tab's cluster (:func:`optimizer.rlhf_tables.sync_bandwidth`)."""
    return _sync(inp.links, inp.gpus)


def as_fraction(value: Any) -> Fraction:
    """A number as an exact Fraction (for JSON-ready records)."""
    return Fraction(value)


FAITHFUL_ONLY = (
    "critic_model", "framework", "zero", "gpus", "rollout_gpus", "train_tp", "train_pp",
    "rollout_tp", "offload", "engine_memory_fraction", "logits", "micro_batch_tokens",
    "train_batch", "old_log_prob", "off_policy", "recompute", "host_memory_gb",
    "bandwidth_efficiency", "shared_engine_weights", "max_completion_tokens",
)  # fmt: skip
"""Options of the faithful accounting only (they need ``--model``)."""

SEED_ONLY = (
    "policy_params", "reward_params", "chips", "peak_tflops", "rollout_engine", "layers",
    "kv_heads", "head_dim", "logits_buffer", "vocab_size", "logits_tokens",
)  # fmt: skip
"""Options of the seed's accounting only: with ``--model`` the sizes, dimensions and the
engine come from the model and the placement."""


def faithful_report(seed_report: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The RLHF tab with ``model``: the seed's figures for the same workload (its keys, with
    ``chips`` = ``gpus``) and the ``faithful`` object — :func:`workload_dict` and
    :func:`plan_dict` of the tab's placement. ``seed_report`` is :func:`interface.tabs.
    rlhf_report` (passed in: it imports this module).

    Raises
    ------
    InputError
        A seed-only option given with ``model`` (:data:`SEED_ONLY`), or any bad value.
    """
    why = "with --model the sizes, dimensions, GPUs and engine come from the model and placement"
    check_applicable({k: params.get(k) for k in SEED_ONLY}, {k: why for k in SEED_ONLY})
    inp = rlhf_inputs(params)
    plan = evaluate_placement(inp)
    spec = inp.spec
    reward_net = {"ppo": "critic", "grpo": "reward"}[spec.algorithm]
    has_net = spec.algorithm == "ppo" or spec.reward == "model"
    seed = seed_report(
        algorithm=spec.algorithm,
        policy_params=spec.role("actor").params,
        reward_params=spec.role(reward_net).params if has_net else None,
        reward=spec.reward,
        prompts=spec.prompts,
        samples_per_prompt=spec.samples_per_prompt,
        prompt_tokens=spec.prompt_tokens,
        completion_tokens=spec.completion_tokens,
        epochs=spec.epochs,
        decode_mfu=params.get("decode_mfu"),
        train_mfu=params.get("train_mfu", 0.4),
        gpu=inp.device.name,
        chips=inp.gpus,
    )
    from trainplan.interface.tabs import jsonable

    seed["accounting"] = "faithful"
    seed["faithful"] = jsonable({**workload_dict(inp), **plan_dict(spec, plan)})
    return seed
