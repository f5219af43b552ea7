"""The faithful RLHF accounting and the placement search as plain data: the ``faithful`` object
of ``trainplan rlhf --model …`` (:func:`faithful_report`) and ``trainplan rlhf-plan --json``
(:func:`result_dict`); docs/reference/json.md lists every key. Built from the cost model's records
(:mod:`model.rlhf_step`, :mod:`model.rlhf_roles`) and the parsed inputs
(:mod:`interface.rlhf_faithful`)."""

from __future__ import annotations

from typing import Any

from trainplan.interface.rlhf_faithful import (
    ASSUMPTIONS,
    RLHFInputs,
    evaluate_placement,
    rlhf_inputs,
)
from trainplan.model.errors import check_applicable
from trainplan.model.rlhf_spec import PHASES, RLHFSpec, Role, phase_flops
from trainplan.model.rlhf_step import StepPlan
from trainplan.model.rollout import kv_bytes_per_token

__all__ = [
    "plan_dict",
    "workload_dict",
    "result_dict",
    "faithful_report",
    "FAITHFUL_ONLY",
    "SEED_ONLY",
]


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
"""Options of the original planner's accounting only: with ``--model`` the sizes, dimensions and the
engine come from the model and the placement."""


def faithful_report(seed_report: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The RLHF tab with ``model``: the original planner's figures for the same workload (its keys, with
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
