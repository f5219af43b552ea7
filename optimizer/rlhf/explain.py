"""Why a placement search found nothing that fits (:func:`explain`): the lines
``trainplan rlhf-plan`` prints under "No placement fits", each naming the role and the bound that
leaves it out."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from trainplan.model.errors import PlannerError
from trainplan.model.rlhf.engine import engine_weights_bytes
from trainplan.model.rlhf.spec import Role
from trainplan.model.rollout import kv_heads_per_gpu
from trainplan.optimizer.rlhf.tables import RLHFProblem, RLHFTables, TableBuild, rollout_options

__all__ = ["explain", "widest_engine"]


def widest_engine(problem: RLHFProblem) -> tuple[int, Fraction] | None:
    """The largest engine tp :func:`optimizer.rlhf.tables.rollout_options` offers on the whole
    cluster and the policy's BF16 weights per GPU at it, in bytes
    (:func:`model.rlhf.engine.engine_weights_bytes`); None when no tp is offered: what an answer
    that no rollout fits says the engine needs at least."""
    tps = [o.tp for o in rollout_options(problem, problem.gpus)]
    if not tps:
        return None
    tp = max(tps)
    return tp, engine_weights_bytes(problem.spec.role(Role.ROLLOUT), tp)


def explain(tables: RLHFTables) -> list[str]:
    """Why no placement fits, one line a cause: each role with no option that fits a GPU on its
    own — for the rollout engine the widest replica searched and its weights per GPU
    (:func:`widest_engine`), for a training role below ZeRO-3 that its weights are whole on each
    GPU — or, when every role fits alone, that no sharing of the GPUs fits them together."""
    cap = tables.problem.device.usable_bytes(True)
    out = []
    for role in tables.roles:
        if not any(tables.options[role].values()):
            why = (
                f"{role}: no pool size and parallelism fits a GPU's {cap / 1e9:,.2f} GB on its own"
            )
            widest = widest_engine(tables.problem) if role == Role.ROLLOUT else None
            zero = tables.problem.spec.zero_stage
            if widest is not None:  # the engine's bound: its widest replica's weights
                tp, weights = widest
                why += (
                    f" (an engine replica is searched at tp up to {tp}, {tp_cap(tables.problem, tp)}, pp 1 "
                    f"and no expert parallelism; at tp {tp} the policy's BF16 weights alone are "
                    f"{float(weights) / 1e9:,.2f} GB a GPU)"
                )
            elif role != Role.ROLLOUT and zero is not None and zero < 3:
                why += (
                    f" at ZeRO-{zero}, where each GPU holds its tp·pp share of the role's "
                    "weights whole"
                )
                why += zero3_hint(tables.problem, role, tables.sizes)

            out.append(why)
    if not out:
        out.append(
            "memory: every role fits on its own, but no sharing of the "
            f"{tables.problem.gpus} GPUs fits them together"
        )
    return out


def tp_cap(problem: RLHFProblem, tp: int) -> str:
    """What stopped the engine's tp at ``tp`` (:func:`optimizer.rlhf.tables.rollout_options`
    tries the powers of two dividing the pool, up to ``max_tp`` or the NVLink domain, that the
    model's KV heads allow): the cluster's GPU count, ``max_tp``, the NVLink domain or the KV
    heads, as words for :func:`explain`."""
    nxt = 2 * tp
    if nxt > problem.gpus or problem.gpus % nxt:
        return f"the cluster's {problem.gpus:,} GPUs"
    if problem.max_tp is not None and nxt > problem.max_tp:
        return f"the tp cap of {problem.max_tp}"
    if nxt > problem.links.nvlink_domain:
        return f"the NVLink domain of {problem.links.nvlink_domain} GPUs"
    arch = problem.spec.policy.arch
    try:
        kv_heads_per_gpu(arch, nxt)  # type: ignore[arg-type]
    except PlannerError as err:
        return f"the model's KV heads ({err})"
    return "the largest the search offers"


def fits_at_zero3(problem: RLHFProblem, role: Role, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """The pool sizes among ``sizes`` (the tables', :func:`optimizer.rlhf.tables.pool_sizes`:
    the pools a placement splits the cluster into) on which ``role`` has an option that fits a
    GPU on its own at ZeRO-3 (the tables' own rule, :class:`optimizer.rlhf.tables.TableBuild`),
    ascending; empty when the framework takes no ZeRO-3 or no pool fits, so that
    :func:`explain` suggests ZeRO-3 only where it helps and names the pools it helps on."""
    try:
        at3 = replace(problem, spec=replace(problem.spec, zero_stage=3))
    except PlannerError:
        return ()
    trainable = next(rs.trainable for rs in at3.spec.roles if rs.role == role)
    build = TableBuild(at3, {role: {n: [] for n in sizes}})
    for n in sizes:
        build.cost_pool(role, trainable, n, None, lambda: 0.0)
    return tuple(n for n in sizes if build.out[role][n])


def zero3_hint(problem: RLHFProblem, role: Role, sizes: tuple[int, ...]) -> str:
    """What :func:`explain` adds for a training role below ZeRO-3 that fits nowhere: the pools
    on which ZeRO-3 makes it fit (:func:`fits_at_zero3`) — from the smallest up when every larger
    pool fits too, the cluster alone when only it does (the role then shares every GPU with
    the others) — or nothing when no pool does.

    >>> from unittest.mock import patch
    >>> with patch(f"{__name__}.fits_at_zero3", lambda p, r, s: (64, 128, 256)):
    ...     zero3_hint(None, None, (8, 16, 64, 128, 256))  # type: ignore[arg-type]
    ' (`zero_stage` 3 shards them over dp too, and then it fits on a pool of 64 GPUs or more)'
    """
    fits = fits_at_zero3(problem, role, sizes)
    if not fits:
        return ""
    head = " (`zero_stage` 3 shards them over dp too, and then it fits"
    if fits == (sizes[-1],):
        return f"{head} on the whole cluster's {sizes[-1]:,} GPUs only)"
    if fits == sizes[sizes.index(fits[0]) :]:
        return f"{head} on a pool of {fits[0]:,} GPUs or more)"
    return f"{head} on pools of {', '.join(f'{n:,}' for n in fits)} GPUs)"
