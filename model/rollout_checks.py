"""The checks of a rollout engine's inputs (:mod:`model.rollout`): its memory fraction and the
decode steps of a wave. Re-exported by :mod:`model.rollout`."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.errors import InputError
from trainplan.model.units import shown_number

__all__ = ["check_fraction", "check_rollout"]


def check_fraction(value: Fraction, name: str = "engine_memory_fraction") -> Fraction:
    """An engine memory fraction in (0, 1) (vLLM ``gpu_memory_utilization``, SGLang
    ``mem_fraction_static``).

    Raises
    ------
    InputError
        ``engine_memory_fraction: 1.2 must be above 0 and below 1 …`` for 0, 1 or anything
        outside.

    Examples
    --------
    >>> check_fraction(Fraction(1, 2))
    Fraction(1, 2)
    """
    if not 0 < value < 1:
        raise InputError(
            f"{name}: {shown_number(value)} must be above 0 and below 1 (a fraction, or a percent "
            "such as 40%): the share of each GPU's memory the rollout engine takes (vLLM "
            "gpu_memory_utilization, SGLang mem_fraction_static)"
        )
    return value


def check_rollout(
    concurrent: int,
    hbm_bytes_per_s: float,
    bandwidth_efficiency: float,
    completion_tokens: int,
    max_completion_tokens: int | None,
) -> int:
    """The decode steps of a wave (``max_completion_tokens``, else the mean completion) once the
    rollout's inputs are checked.

    Raises
    ------
    InputError
        ``concurrent`` below 1 (the engine holds no sequence), a bandwidth that is not positive,
        or ``max_completion_tokens`` below the mean completion.

    >>> check_rollout(64, 3.35e12, 1.0, 4096, None), check_rollout(64, 3.35e12, 1.0, 4096, 8192)
    (4096, 8192)
    """
    if concurrent < 1:
        raise InputError("rollout: the engine's KV space holds no sequence at full length")
    if hbm_bytes_per_s <= 0 or bandwidth_efficiency <= 0:
        raise InputError("rollout: HBM bandwidth and its efficiency must be positive")
    longest = max_completion_tokens or completion_tokens
    if longest < completion_tokens:
        raise InputError(
            f"max_completion_tokens: {longest} is below the mean completion of {completion_tokens}"
        )
    return longest
