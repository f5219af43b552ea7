"""What a search minimises (or maximises): :class:`Objective`, apart from
:mod:`optimizer.problem` so that a scenario file's keys (:mod:`interface.scenario_file`) name the
objectives without loading the search's shapes and numpy (``trainplan evaluate`` reads no
objective)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Objective"]


class Objective(StrEnum):
    """What the search minimises (or maximises)."""

    STEP_TIME = "step-time"
    """Seconds per optimizer step (= highest MFU when G and B are fixed)."""
    TOKENS_PER_GPU = "tokens-per-gpu"
    """Maximise training tokens per second per GPU (minimises step·G / (B·s))."""
    TIME_TO_TRAIN = "time-to-train"
    """Wall time to train ``tokens`` tokens: step × tokens / (B·s)."""
    COST = "cost"
    """Dollars to train ``tokens`` tokens: time-to-train × G × price per GPU-hour."""
    PARAMS = "params"
    """Maximise the parameter count of a model family that fits (then the least step time)."""
