"""The faithful RLHF accounting and the placement search as plain data: the ``faithful`` object
of ``trainplan rlhf --model …`` (:func:`faithful_report`) and ``trainplan rlhf-plan --json``
(:func:`result_dict`); docs/reference/json.md lists every key. Built from the cost model's records
(:mod:`model.rlhf.step`, :mod:`model.rlhf.roles`) and the parsed inputs
(:mod:`interface.rlhf.faithful`)."""

from __future__ import annotations

import math
from typing import Any

from trainplan.interface.rlhf.faithful import (
    ASSUMPTIONS,
    RLHFInputs,
    evaluate_placement,
    rlhf_inputs,
)
from trainplan.interface.tab_requests import RLHFRequest
from trainplan.interface.tab_values import jsonable
from trainplan.model.errors import check_applicable
from trainplan.model.rlhf.engine import least_engine_tp
from trainplan.model.rlhf.spec import PHASES, RLHFSpec, Role, default_fraction
from trainplan.model.rlhf.split import counted_terms
from trainplan.model.rlhf.step import StepPlan
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
        "resident_bytes": cost.resident_bytes,
        "process_groups": cost.groups or None,
        "process": cost.process or None,
        "phase_bytes": {p: cost.phase_bytes(p) for p in PHASES},
        "host_bytes_per_gpu": cost.host_bytes,
        "seconds": {p: cost.seconds(p) for p in PHASES},
    }
    if opt.role is Role.ROLLOUT:
        rec["engine_memory_fraction"] = opt.fraction
        rec["concurrent_sequences"] = cost.concurrent
    return rec


def _add_sync_seconds(roles: list[dict[str, Any]], listed: list[tuple[Any, ...]]) -> None:
    """Add to each role record's ``seconds`` the weight-sync seconds listed under it (its terms
    with a ``sync_path`` in seconds, as its pool counts them: :func:`model.rlhf.split.
    counted_terms`), so the role table, its terms and the pools agree."""
    for rec, terms in zip(roles, listed, strict=True):
        for t in terms:
            if t.unit == "s" and t.sync_path and t.phase in rec["seconds"]:
                rec["seconds"][t.phase] += float(t.value)


def plan_dict(
    spec: RLHFSpec, plan: StepPlan, pool_of: tuple[int, ...] | None = None
) -> dict[str, Any]:
    """A step plan as plain data: ``roles`` (seconds with their sync, :func:`_add_sync_seconds`),
    ``terms`` (keyed to ``sources``, each source once, ``"1"``, ``"2"``, … in order of first
    citation), ``pools``, ``step_phase_seconds``, ``step_seconds``, ``tokens_per_second``, ``fits``."""
    rows = plan.pools
    pools = pool_of or tuple(
        next(p.index for p in rows if str(c.option.role) in p.roles) for c in plan.costs
    )
    roles = [_role_record(c, q, spec) for c, q in zip(plan.costs, pools, strict=True)]
    listed = [  # each role's terms its pool counts: one weight-sync path (model.rlhf.split)
        (c, counted_terms(c, [d for d, p in zip(plan.costs, pools, strict=True) if p == q]))
        for c, q in zip(plan.costs, pools, strict=True)
    ]
    _add_sync_seconds(roles, [ts for _, ts in listed])
    sources: dict[str, str] = {}
    keys: dict[str, str] = {}  # source text → its key, numbered in order of first citation
    for _, ts in listed:
        for t in ts:
            if t.source not in keys:
                keys[t.source] = str(len(keys) + 1)
                sources[keys[t.source]] = t.source
    terms = [
        {"role": str(c.option.role), "term": t.name, "phase": t.phase, "value": t.value, "unit": t.unit, "source": keys[t.source]}
        for c, ts in listed
        for t in ts
    ]  # fmt: skip
    pool_recs = [
        {
            "pool": p.index,
            "gpus": p.gpus,
            "first_gpu": p.first_gpu,
            "roles": list(p.roles),
            "held_bytes": p.held_bytes,
            "resident_bytes": p.resident_bytes,
            "processes": p.processes,
            "process_bytes": p.process_bytes,
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
        "sources": sources,
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
    flops = spec.phase_flops()
    return {
        "accounting": "faithful",
        "framework": str(spec.framework),
        "zero_stage": spec.zero_stage,
        "recompute": str(spec.recompute),
        "logits": str(spec.logits),
        "packing": str(spec.packing),
        "agent_workers": spec.agent_workers,
        "gpu": inp.device.name,
        "gpus": inp.gpus,
        "peak_flops_per_s": inp.device.peak_flops_per_s,
        "hbm_bytes_per_s": inp.device.hbm_bytes_per_s,
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
    """``rlhf-plan``'s JSON: the workload, ``status`` (``optimal``, ``feasible``: a time limit
    stopped the search, or ``unproven`` says why not, ``unknown``: it stopped before any
    placement was found), ``reason``,
    ``best`` (None when unknown), ``colocated``, ``split`` (each a :func:`plan_dict` with its
    ``objective_ns``), ``alternatives`` (the colocated and split solves' statuses),
    ``tables_seconds``, ``solve_seconds``, ``time_limit_seconds``, ``tables_complete``,
    ``options``, ``tried``, ``skipped``, ``unproven`` (empty, or why the status is ``feasible``
    though no time limit stopped the search: :attr:`optimizer.rlhf.search.PlacementResult.unproven`)."""

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
        "alternatives": dict(result.variant_status),
        "tables_seconds": result.tables_seconds,
        "solve_seconds": result.solve_seconds,
        "time_limit_seconds": result.time_limit_s,
        "tables_complete": result.complete,
        "options": result.options,
        "tried": result.tried,
        "skipped": result.skipped,
        "unproven": result.unproven,
    }


FAITHFUL_ONLY = (
    "critic_model", "framework", "zero", "gpus", "rollout_gpus", "train_tp", "train_pp",
    "rollout_tp", "offload", "engine_memory_fraction", "logits", "micro_batch_tokens",
    "packing",
    "train_batch", "off_policy", "recompute", "host_memory_gb",
    "bandwidth_efficiency", "shared_engine_weights", "max_completion_tokens", "agent_workers",
)  # fmt: skip
"""Options of the faithful accounting only (they need ``--model``)."""

SEED_ONLY = (
    "policy_params", "reward_params", "chips", "peak_tflops", "rollout_engine", "layers",
    "kv_heads", "head_dim", "logits_buffer", "vocab_size", "logits_tokens",
)  # fmt: skip
"""Options of the textbook accounting only: with ``--model`` the sizes, dimensions and the
engine come from the model and the placement."""


def faithful_report(seed_report: Any, request: RLHFRequest) -> dict[str, Any]:
    """The RLHF tab with ``model``: the textbook accounting's figures for the same workload (its keys,
    with ``chips`` = ``gpus``) and the ``faithful`` object — :func:`workload_dict` and
    :func:`plan_dict` of the tab's placement. ``seed_report`` is the textbook accounting of a
    request (:func:`interface.rlhf.tab.rlhf_report`'s; passed in: that module imports this one),
    called with the request and the actor's and reward network's active parameters (a mixture of
    experts' FLOPs count those; its bytes all parameters).

    Raises
    ------
    InputError
        A seed-only option given with ``model`` (:data:`SEED_ONLY`), or any bad value.
    """
    why = "with --model the sizes, dimensions, GPUs and engine come from the model and placement"
    check_applicable({k: getattr(request, k) for k in SEED_ONLY}, dict.fromkeys(SEED_ONLY, why))
    inp = rlhf_inputs(request)
    plan = evaluate_placement(inp)
    spec = inp.spec
    actor = spec.role("actor")  # the reward network's role, if any: the critic or reward model
    reward = next((r for r in spec.roles if r.step.weights == "reward"), None)
    seed = seed_report(
        RLHFRequest(
            algorithm=spec.algorithm,
            policy_params=actor.params,
            reward_params=reward.params if reward else None,
            reward=spec.reward,
            prompts=spec.prompts,
            samples_per_prompt=spec.samples_per_prompt,
            prompt_tokens=spec.prompt_tokens,
            completion_tokens=spec.completion_tokens,
            epochs=spec.epochs,
            old_log_prob=spec.old_log_prob,
            decode_mfu=request.decode_mfu,
            train_mfu=request.train_mfu,
            gpu=inp.device.origin or inp.device.name,
            chips=inp.gpus,
        ),
        (actor.active_params, reward.active_params if reward else None),
    )
    seed["accounting"] = "faithful"
    verdict = fit_verdict(inp, plan, seed["resident_bytes"])
    seed["faithful"] = jsonable({**workload_dict(inp), **plan_dict(spec, plan), **verdict})
    return seed


def _gb(x: Any) -> str:
    return f"{float(x) / 1e9:,.2f} GB"


def _gpus(n: int) -> str:
    return f"{n:,} GPU" + ("s" if n != 1 else "")


def fit_verdict(inp: RLHFInputs, plan: StepPlan, resident_bytes: float) -> dict[str, list[str]]:
    """Why the tab's placement does not fit (``does_not_fit``: the engine above its budget, each
    pool's worst phase above the usable bytes, host memory) and what would make it fit
    (``to_fit``: the least engine tp or fraction that holds it, the least GPUs that hold the
    roles' model state at all, the placement search) — both empty when it fits. A setting is
    named as the user's option where the user gave it, and as a default where not."""
    out: dict[str, list[str]] = {"does_not_fit": [], "to_fit": []}
    if plan.fits:
        return out
    default = inp.defaults_used
    cap = plan.capacity_bytes
    worst: dict[int, tuple[Any, str]] = {}
    for what, pool, phase, need, have in plan.overflows():
        if what == "engine":
            out["does_not_fit"].append(_engine_line(inp, plan, need, have))
            out["to_fit"] += _engine_hints(inp, need, least_engine_tp)
        elif what == "host":
            out["does_not_fit"].append(
                f"pool {pool}: {_gb(need)} per GPU of offloaded state, above the host's "
                f"{_gb(have)} share per GPU (--host-memory-gb ÷ GPUs per node)"
            )
        elif pool is not None and (pool not in worst or need > worst[pool][0]):
            worst[pool] = (need, phase)
    for pool, (need, phase) in sorted(worst.items()):
        p = plan.pools[pool]
        out["does_not_fit"].append(
            f"pool {pool} ({', '.join(p.roles)} on {_gpus(p.gpus)}) needs "
            f"{_gb(need)} per GPU in the {phase} phase, {_gb(need - cap)} above the "
            f"{_gb(cap)} usable"
        )
    least = math.ceil(resident_bytes / cap)
    if least > inp.gpus:
        out["to_fit"].append(
            f"at least {least:,} GPUs: the roles' model state alone is {resident_bytes / 1e12:,.2f}"
            f" TB (16 B per trained and 2 B per frozen parameter, fully sharded) against "
            f"{_gb(cap)} usable per GPU, before activations, logits and the engine, without "
            f"offload (--gpus {inp.gpus:,}{' is the default' if 'gpus' in default else ''})"
        )
    layout = " and ".join(
        f"--{k.replace('_', '-')} {getattr(inp, k)}{' (default)' if k in default else ''}"
        for k in ("train_tp", "train_pp")
    )
    if worst:
        out["to_fit"].append(
            f"the training and scoring roles at {layout} on {_gpus(plan.pools[-1].gpus)}: a "
            "larger tp or pp, --offload, or more GPUs shrink their share"
        )
    out["to_fit"].append(
        "trainplan rlhf-plan with the same workload searches every role's pool, parallelism, "
        "offload and the engine's fraction for the fastest placement that fits"
    )
    return out


def _engine_line(inp: RLHFInputs, plan: StepPlan, need: Any, budget: Any) -> str:
    engine = next(c for c in plan.costs if c.option.role is Role.ROLLOUT)
    frac = engine.option.fraction
    tp = inp.rollout_tp
    given = ""
    if "rollout_tp" in inp.defaults_used:
        given = (
            " (the default: verl's)" if tp == 2 else " (the default: verl's 2 divides no odd count)"
        )
    f_given = "" if inp.spec.engine_memory_fraction is not None else " (the default)"
    return (
        f"the rollout engine at tp {tp}{given} needs {_gb(need)} per GPU — its weights "
        f"{_gb(engine.bf16_weight_bytes)} and one {inp.spec.seq_len:,}-token sequence's KV cache "
        f"{_gb(need - engine.bf16_weight_bytes)} — above its budget, fraction "
        f"{float(frac or 0):g}{f_given} × {_gb(inp.device.cuda_total_bytes)} = {_gb(budget)}"
    )


def _engine_hints(inp: RLHFInputs, need: Any, least_engine_tp: Any) -> list[str]:
    out = []
    fraction = inp.spec.engine_memory_fraction or default_fraction(
        inp.rollout_gpus is None, inp.spec.framework
    )
    engine_gpus = inp.rollout_gpus or inp.gpus
    tp = least_engine_tp(inp.spec, fraction, inp.device)
    if tp is None:
        out.append(f"the engine: no tp holds its weights and a sequence at fraction {fraction}")
    elif tp <= engine_gpus:
        out.append(
            f"the engine: --rollout-tp {tp} or more holds it at fraction {float(fraction):g}"
        )
    else:
        out.append(
            f"the engine: tp {tp} or more holds it at fraction {float(fraction):g}, more than "
            f"{engine_gpus:,} GPU{'s' * (engine_gpus > 1)}"
        )
    least = need / inp.device.cuda_total_bytes
    if least < 1:
        out.append(
            f"or --engine-memory-fraction {math.ceil(least * 100) / 100:g} or more at tp "
            f"{inp.rollout_tp} (colocated, it takes that share from the training roles)"
        )
    return out
