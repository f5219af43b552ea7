"""The names a sweep grid gives (models, parts), checked before any point runs: a misspelled
one is refused once, in one line naming its key, not at each of its points."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from trainplan.model.errors import PlannerError, ScenarioError
from trainplan.topology.accelerators import get_accelerator

__all__ = ["check_grid_objective", "check_models", "check_objective_inputs", "named", "price_notes"]

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


def price_notes(price: Any, parts: set[str], where: str = "") -> tuple[str, ...]:
    """The notes of a grid's ``gpu_hour_price`` table (``price``; a number or None has none) for
    the catalogue ``parts`` its points run on: one line naming the priced parts no point runs on
    (a grid trimmed from the documented one keeps their prices; they are unused, not wrong).

    Raises
    ------
    ScenarioError
        A priced name that is no catalogue part (a misspelling, or a name that is ambiguous):
        ``gpu_hour_price: 'H100' is not a part of this grid (H100-SXM; write the catalogue
        names): gpu: 'H100' is ambiguous …``.

    Examples
    --------
    >>> price_notes({"H100-SXM": 2.5, "H200": 3.2}, {"H100-SXM"})
    ('gpu_hour_price: H200 is priced and no point runs on it (this grid: H100-SXM); its price is unused',)
    """
    if not isinstance(price, dict):
        return ()
    unused = []
    for name in price:
        if name in parts:
            continue
        try:
            get_accelerator(name)
        except PlannerError as err:
            raise ScenarioError(
                f"{where}gpu_hour_price: {name!r} is not a part of this grid "
                f"({', '.join(sorted(parts))}; write the catalogue names): {err}"
            ) from None
        unused.append(name)
    if not unused:
        return ()
    s = "s" if len(unused) > 1 else ""
    return (
        f"gpu_hour_price: {', '.join(unused)} {'are' if s else 'is'} priced and no point runs on "
        f"{'them' if s else 'it'} (this grid: {', '.join(sorted(parts))}); {'their' if s else 'its'} "
        f"price{s} {'are' if s else 'is'} unused",
    )


def check_objective_inputs(
    objective: str, tokens: Any, prices: dict[str, Any], where: str = ""
) -> None:
    """What a search grid's ``objective`` needs, before any point runs (each point would
    otherwise be refused alone, in the CLI's words, and the sweep end with every point an
    error): a token budget (``tokens``) for ``time-to-train`` and ``cost``, and for ``cost`` a
    ``gpu_hour_price`` for every catalogue part the points run on (``prices``: the part's price,
    None where the grid gives none).

    Raises
    ------
    ScenarioError
        ``objective: 'cost' needs gpu_hour_price for every part; none for H100-SXM
        (gpu_hour_price = 2.5, or { H100-SXM = 2.5 })``.

    Examples
    --------
    >>> check_objective_inputs("cost", 1e11, {"H100-SXM": 2.5, "H200": None})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.ScenarioError: objective: 'cost' needs ...; none for H200 (... { H200 = 2.5 })
    >>> check_objective_inputs("time-to-train", None, {})
    Traceback (most recent call last):
    ...
    trainplan.model.errors.ScenarioError: objective: 'time-to-train' needs tokens, the token budget (tokens = 15e12)
    >>> check_objective_inputs("step-time", None, {"H100-SXM": None})
    """
    if objective in ("time-to-train", "cost") and tokens is None:
        raise ScenarioError(
            f"{where}objective: {objective!r} needs tokens, the token budget (tokens = 15e12)"
        )
    unpriced = sorted(part for part, price in prices.items() if price is None)
    if objective == "cost" and unpriced:
        table = ", ".join(f"{part} = 2.5" for part in unpriced)
        raise ScenarioError(
            f"{where}objective: 'cost' needs gpu_hour_price for every part; none for "
            f"{', '.join(unpriced)} (gpu_hour_price = 2.5, or {{ {table} }})"
        )


def check_grid_objective(grid: Any, where: str = "") -> None:
    """:func:`check_objective_inputs` of a search grid (:class:`interface.sweep.grid.Grid`): its
    objective, its tokens and the price of each catalogue part its points run on."""
    if grid.command == "search":
        prices = {grid.gpu(p): grid.price(p) for p in grid.points}
        objective = str(grid.base.get("objective") or "")
        check_objective_inputs(objective, grid.base.get("tokens"), prices, where)
