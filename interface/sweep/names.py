"""The names a sweep grid gives (models, parts), checked before any point runs: a misspelled
one is refused once, in one line naming its key, not at each of its points."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from trainplan.model.errors import PlannerError, ScenarioError

__all__ = ["check_models", "named"]

T = TypeVar("T")


def named(get: Callable[[str], T], value: str, name: str) -> T:
    """``get(value)`` (an accelerator; a model name's check); its refusal as ``name``'s:
    ``sweep.model: unknown model 'llama3-8bb'; did you mean llama3-8b, …``.

    Raises :class:`~model.errors.ScenarioError` with ``get``'s message after ``name``."""
    try:
        return get(value)
    except PlannerError as err:
        raise ScenarioError(f"{name}: {err}") from None


def check_models(
    check_model: Callable[[str], None],
    base: dict[str, Any],
    sweep: dict[str, Any],
    points: list[dict[str, Any]],
    where: str,
) -> None:
    """Every model the grid names — the top level's ``model``, ``[sweep] model``'s list, each
    ``[[point]]``'s — through ``check_model`` (:func:`scenarios.catalogue.check_model_name` by
    default). Raises :class:`~model.errors.ScenarioError` naming the key."""
    models = [("model", base.get("model")), *(("sweep.model", m) for m in sweep.get("model", []))]
    models += [(f"point {i}: model", e.get("model")) for i, e in enumerate(points, 1)]
    for name, model in models:
        if model is not None:
            named(check_model, model, f"{where}{name}")
