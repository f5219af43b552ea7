"""The largest count a monotone test accepts (:func:`most_that_fits`): the per-stage tables'
most layers a stage holds within its memory (:mod:`optimizer.stage_tables`)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["most_that_fits"]


def most_that_fits(fits: Callable[[int], bool], top: int, guess: int) -> int:
    """The largest n in 0 … ``top`` with ``fits(n)`` (monotone: true up to some n, then false),
    or −1 when not even 0 fits: galloping from ``guess`` (the neighbouring stage's answer, which
    is usually within a layer or two), then bisection.

    >>> most_that_fits(lambda n: n * n <= 50, 20, 3), most_that_fits(lambda n: False, 5, 2)
    (7, -1)
    """
    guess = min(max(guess, 0), top)
    if fits(guess):
        lo, step = guess, 1  # lo fits; find a hi that does not
        while lo + step <= top and fits(lo + step):
            lo, step = lo + step, step * 2
        hi = min(lo + step, top + 1)  # does not fit (or past the top)
    else:
        hi, step = guess, 1  # hi does not fit; find a lo that does
        while hi - step >= 0 and not fits(hi - step):
            hi, step = hi - step, step * 2
        if hi - step < 0:
            if not fits(0):
                return -1
            lo = 0
        else:
            lo = hi - step
    while hi - lo > 1:  # lo fits, hi does not
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
