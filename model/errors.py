"""Errors a user can cause. Every message names the parameter, the value and the rule.

The CLI turns any :class:`PlannerError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

__all__ = ["PlannerError", "LayoutError", "ScenarioError", "InfeasibleError", "InputError"]


class PlannerError(ValueError):
    """Base class of every error caused by the user's input."""


class InputError(PlannerError):
    """A value that cannot be read or is out of range (e.g. ``--seq-len -1``, ``--every 0``)."""


class LayoutError(PlannerError):
    """An impossible parallel layout (degrees, divisibility, schedule rules)."""


class ScenarioError(PlannerError):
    """An unknown or malformed model, accelerator, example or scenario file."""


class InfeasibleError(PlannerError):
    """A search with no layout that satisfies every constraint; ``explanation`` says which."""

    def __init__(self, message: str, explanation: list[str] | None = None) -> None:
        super().__init__(message)
        self.explanation = explanation or []
