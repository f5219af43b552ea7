"""Why a search's space is empty, or why a value the user asked for is used by no layout: the
rule itself, as :func:`model.legality.refusal` words it for ``trainplan evaluate`` — the
search never re-types a rule, it asks the one the evaluator asks.

* :func:`recipe_refusal` — no framework of the space runs the recipe (offload, loss, optimizer);
* :func:`axis_refusal` — every given value of an axis breaks a rule (tp against the heads, cp's
  flavours, pp against the layers and against the framework's ZeRO stages);
* :func:`unused_values` — the given values no legal shape uses while others are, with why (the
  search output's notes, :func:`interface.search_notes.unused_note`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from trainplan.model.context_parallel import CpKind
from trainplan.model.frameworks import ZERO_STAGES, Framework
from trainplan.model.layout import Recompute
from trainplan.model.legality import Setting, refusal
from trainplan.model.model_spec import ModelSpec
from trainplan.model.offload import NO_OFFLOAD
from trainplan.model.specs import TrainingSpec

if TYPE_CHECKING:
    from trainplan.optimizer.problem import Problem
    from trainplan.optimizer.space import SearchSpace
    from trainplan.optimizer.tables import CostTables

__all__ = ["recipe_refusal", "axis_refusal", "value_refusal", "unused_values", "AXES"]

AXES = ("tp", "pp", "cp", "ep")
"""The degrees a user can restrict (``--tp``, ``--pp``, ``--cp``, ``--ep``), in the order the
notes name them."""


def recipe_refusal(space: SearchSpace, training: TrainingSpec, model: ModelSpec) -> str | None:
    """Why no framework of ``space`` can run the recipe (its offload, its loss, its optimizers)
    at any allowed ZeRO stage (the first framework's rule, :func:`model.legality.refusal` of the
    framework, offload and optimizer rules at pp 1 with no recomputation), or None when one
    can: a search that finds no shape says this instead of a generic "no legal combination"."""
    setting = Setting(model, training, space.num_gpus)
    first = None
    for fw in space.frameworks:
        for z in _stages(space, fw):
            for o in space.optimizers:
                why = refusal(
                    setting, framework=fw, zero_stage=z, pp=1, recompute=Recompute.NONE,
                    recompute_layers=None, optimizer=o,
                )  # fmt: skip
                if not why:
                    return None
                first = first or why
    return first


def _stages(space: SearchSpace, framework: Framework) -> list[int]:
    """The space's ZeRO stages that ``framework`` has (:data:`model.frameworks.ZERO_STAGES`), or
    all of them when it has none: a stage it has not would hide the rule sought."""
    return [z for z in space.zero_stages if z in ZERO_STAGES[Framework(framework)]] or list(
        space.zero_stages
    )


def value_refusal(
    space: SearchSpace, training: TrainingSpec, model: ModelSpec, axis: str, value: int
) -> str:
    """The rule that refuses ``axis`` (tp, cp or pp) at ``value`` under every framework of
    ``space`` whatever the other degrees are — the first framework's (and first CP flavour's)
    line, :func:`model.legality.refusal` over that axis alone (the other degrees 1, no stage
    layout): tp dividing the heads and the FFN, cp's flavours, pp against the layers and, for
    pp, the framework's ZeRO stages of the space (DeepSpeed's pipeline engine runs ZeRO-0/1
    only, :func:`model.frameworks.check_framework`) — or "" when some framework accepts
    it (and for ep, whose rules need the other degrees)."""
    if axis not in ("tp", "cp", "pp"):
        return ""
    setting = Setting(model, replace(training, offload=NO_OFFLOAD), None)
    kinds = space.cp_kinds if axis == "cp" and value > 1 else (CpKind.RING,)
    whys = [
        refusal(setting, **_alone(axis, value, fw, kind), **stage)
        for fw in space.frameworks
        for kind in kinds
        for stage in ([{"zero_stage": z} for z in _stages(space, fw)] if axis == "pp" else [{}])
    ]
    return "" if not all(whys) else whys[0]


def axis_refusal(space: SearchSpace, training: TrainingSpec, model: ModelSpec) -> str | None:
    """The rule that refuses every allowed value of a given axis (tp, cp or pp), whatever the
    other axes are — the first value's (:func:`value_refusal`) — or None when each given axis
    keeps a value some framework accepts. A search that finds no shape says this instead of a
    generic "no legal combination"."""
    for axis in ("tp", "cp", "pp"):
        given = getattr(space, axis)
        if not given or (axis == "cp" and tuple(given) == (1,)):
            continue
        whys = [value_refusal(space, training, model, axis, v) for v in given]
        if all(whys):
            return whys[0]
    return None


def _alone(axis: str, value: int, framework: Framework, cp_kind: CpKind) -> dict[str, object]:
    """The fields of a layout with ``axis`` at ``value`` and every other degree 1: the scope
    of the rules :func:`value_refusal` reads."""
    out: dict[str, object] = {
        "tp": 1, "cp": 1, "pp": 1, "ep": 1, "etp": None, "framework": framework,
        "cp_kind": cp_kind, "cp_a2a": None, "virtual_stages": 1, "uneven_stages": True,
        "stage_layers": None, "sequence_parallel": None,
    }  # fmt: skip
    out[axis] = value
    out["sp"] = out["tp"] > 1  # type: ignore[operator]
    return out


def unused_values(problem: Problem, tables: CostTables) -> tuple[tuple[str, int | str, str], ...]:
    """The values of tp, pp, cp and ep the user asked for (two or more of an axis) that no legal
    shape of the tables uses, and the frameworks (two or more asked) none runs
    (:func:`_unused_frameworks`), each as ``(axis, value, why)``: the rule that refuses it
    (:func:`value_refusal`, the first job's, in :func:`model.legality.refusal`'s words), that it
    divides no GPU count searched, or that no combination with the other degrees, the batch and
    the GPU count is legal. Empty when every asked value is used, or when a time limit stopped
    the tables before every job (a value may then be missing for want of time).

    Example: ``("tp", 3, "tp: 3 does not divide num_attention_heads = 64")`` for Llama 3 70B
    with ``--tp 3 --tp 8`` on 96 GPUs."""
    if not tables.complete or not tables.shapes:
        return ()
    space = problem.space
    rows = np.asarray(tables.legal).reshape(len(tables.shapes), -1)  # [S, Z·R] legal
    job = problem.jobs[0]
    gpus = sorted({j.num_gpus for j in problem.jobs})
    counts = ", ".join(f"{g:,}" for g in gpus[:4]) + (", …" if len(gpus) > 4 else "")
    out: list[tuple[str, int | str, str]] = []
    for axis in AXES:
        given = getattr(space, axis)
        if not given or len(given) < 2:  # one value unused empties the space: a refusal says why
            continue
        used = {getattr(s, axis) for i, s in enumerate(tables.shapes) if rows[i].any()}
        for v in given:
            if v in used:
                continue
            why = value_refusal(space, job.case.training, job.case.model, axis, v)
            if not why and not any(g % v == 0 for g in gpus):
                why = f"{axis}: {v} divides no GPU count searched ({counts})"
            why = why or (
                f"{axis}: {v} has no legal combination with the other degrees, the global batch "
                "and the GPU count"
            )
            out.append((axis, v, why))
    return tuple(out) + _unused_frameworks(space, job.case.training, job.case.model, tables, rows)


def _unused_frameworks(
    space: SearchSpace, training: TrainingSpec, model: ModelSpec, tables: CostTables, rows: Any
) -> tuple[tuple[str, str, str], ...]:
    """The frameworks asked for (two or more) that no legal shape of the tables runs, each as
    ``("framework", name, why)``: the framework's own rule against the recipe
    (:func:`recipe_refusal` of the space with that framework alone: a Megatron-only setting
    such as ``muon_tp_mode``, an optimizer or offload it does not run), or that no layout of
    the other degrees is legal under it."""
    if len(space.frameworks) < 2:
        return ()
    used = {s.framework for i, s in enumerate(tables.shapes) if rows[i].any()}
    out = []
    for fw in space.frameworks:
        if fw in used:
            continue
        why = recipe_refusal(replace(space, frameworks=(fw,)), training, model) or (
            f"framework: {fw} has no legal combination with the degrees, the global batch and "
            "the GPU count"
        )
        out.append(("framework", str(Framework(fw).value), why))
    return tuple(out)
