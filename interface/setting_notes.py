"""The lines that say what a user's choice settings cost (:mod:`interface.setting_cost`): the
note under a search's headline, the explanation's line when no layout meets the constraints with
them, and the tail naming what keeping each choice costs. Names in backticks, which
:func:`interface.flags.with_flags` writes as the command line's flags or the web's parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainplan.interface.render.report import layout_line, objective_text

if TYPE_CHECKING:
    from trainplan.interface.setting_cost import SettingCost

__all__ = ["note_of", "without_line", "each_text"]


def note_of(cost: SettingCost, tokens: int | None, jobs: bool) -> str | None:
    """The line saying what the settings cost (None when they cost at most the threshold)."""
    assert cost.without_settings is not None and cost.layout is not None
    if cost.with_settings is None:
        return without_line(cost, tokens, jobs)
    if cost.cost is None or cost.cost <= cost.threshold:
        return None
    said = _said(cost.settings)
    it = "it" if len(cost.settings) == 1 else "them"
    proof = "" if cost.status == "optimal" else "; not proven, time limit"
    where = f"{cost.job}: " if jobs else ""

    def text(value: float) -> str:
        return objective_text(cost.objective_kind, cost.unit, value, tokens)

    return (
        f"{said} {'costs' if it == 'it' else 'cost'} {cost.cost:.1%}: without {it} (the "
        f"frameworks' defaults) the best layout is {where}{layout_line(dict(cost.layout))} "
        f"({text(cost.without_settings)} against {text(cost.with_settings)} with {it}{proof})"
    )


def _said(settings: Mapping[str, str]) -> str:
    """``your setting `k`=v`` or ``your settings `k`=v, `k2`=v2`` (names in backticks)."""
    plural = "s" if len(settings) > 1 else ""
    return f"your setting{plural} " + ", ".join(f"`{k}`={v}" for k, v in settings.items())


def without_line(cost: SettingCost, tokens: int | None, jobs: bool) -> str:
    """The explanation's line when no layout meets the constraints with the settings but one
    does without them."""
    assert cost.without_settings is not None and cost.layout is not None
    it = "it" if len(cost.settings) == 1 else "them"
    where = f"{cost.job}: " if jobs else ""
    value = objective_text(cost.objective_kind, cost.unit, cost.without_settings, tokens)
    return (
        f"settings: {_said(cost.settings)} {'leaves' if it == 'it' else 'leave'} no layout; "
        f"without {it} (the frameworks' defaults) the best layout is {where}"
        f"{layout_line(dict(cost.layout))} ({value})"
    )


def each_text(each: tuple[Mapping[str, Any], ...], cost: SettingCost, tokens: int | None) -> str:
    """The note's tail naming what keeping each choice costs, from the search without it alone
    (:attr:`interface.setting_cost.SettingCost.each`): ``costs 2.1%`` or ``gains 1.3%`` (with
    ÷ without it alone − 1), the best without it alone when no layout met the constraints with
    them all, or why there is no figure."""

    def said(e: Mapping[str, Any]) -> str:
        name = f"`{e['setting']}`={e['value']}"
        if e["status"] == "refused":
            return f"{name} cannot be dropped alone ({e['reason']})"
        if e["status"] == "infeasible":
            return f"{name}: no layout without it alone either"
        if e["without_setting"] is None:
            return f"{name}: {e['status']} ({e['reason']})"
        if cost.with_settings is None:
            text = objective_text(cost.objective_kind, cost.unit, e["without_setting"], tokens)
            return f"{name}: without it alone {text}"
        share = e["cost"]
        return f"{name} {'gains' if share < 0 else 'costs'} {abs(share):.1%}"

    return "; each alone (dropped, the others kept): " + ", ".join(map(said, each))
