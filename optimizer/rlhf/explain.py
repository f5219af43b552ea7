"""Why a placement search found nothing that fits (:func:`explain`): the lines
``trainplan rlhf-plan`` prints under "No placement fits", each naming the role and the bound that
leaves it out."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.rlhf.engine import engine_weights_bytes
from trainplan.model.rlhf.spec import Role
from trainplan.optimizer.rlhf.tables import RLHFProblem, RLHFTables, rollout_options

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
                    f" (an engine replica is searched at tp up to {tp}, the NVLink domain, pp 1 "
                    f"and no expert parallelism; at tp {tp} the policy's BF16 weights alone are "
                    f"{float(weights) / 1e9:,.2f} GB a GPU)"
                )
            elif role != Role.ROLLOUT and zero is not None and zero < 3:  # --zero fixes it
                why += (
                    f" at ZeRO-{zero}, where each GPU holds its tp·pp share of the role's "
                    "weights whole (--zero 3 shards them over dp too)"
                )
            out.append(why)
    if not out:
        out.append(
            "memory: every role fits on its own, but no sharing of the "
            f"{tables.problem.gpus} GPUs fits them together"
        )
    return out
