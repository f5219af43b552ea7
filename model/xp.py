"""Arithmetic written once for two callers: exact Python numbers and arrays of layouts.

The evaluator calls the cost model's terms with Python ints and :class:`fractions.Fraction`
values and gets exact results; the search's tables (:mod:`optimizer.tables`) call the *same*
functions with numpy arrays holding thousands of layouts at once (issue 10). ``+ − × ÷ //`` and
comparisons already work on both; the few operations that do not (``max``, ``min``, a choice
between two values, rounding down) are here. An array is anything with the Python array API's
``__array_namespace__`` (numpy ≥ 2), so this module imports no array library: ``model/`` stays
standard-library only.

Exactness: a scalar caller passes ints or Fractions and every division stays a Fraction (use
:func:`exact` on an int that will be divided); an array caller gets float64 (or int64 where only
integers meet), and the tables state their tolerance (bytes to one byte, time to a nanosecond).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

__all__ = ["namespace", "exact", "maximum", "minimum", "where", "floor", "log2", "is_array"]


def namespace(*values: Any) -> Any:
    """The array namespace of the first array among ``values``; None when all are scalars.

    Examples
    --------
    >>> namespace(1, Fraction(1, 2)) is None
    True
    """
    for v in values:
        ns = getattr(v, "__array_namespace__", None)
        if ns is not None:
            return ns()
    return None


def is_array(value: Any) -> bool:
    """Whether ``value`` is an array (has ``__array_namespace__``)."""
    return getattr(value, "__array_namespace__", None) is not None


def exact(value: Any) -> Any:
    """An int as a Fraction (so that ``/`` stays exact); arrays and Fractions unchanged.

    Examples
    --------
    >>> exact(3) / 2
    Fraction(3, 2)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    return value


def maximum(a: Any, b: Any) -> Any:
    """Element-wise max (``max`` for scalars).

    Examples
    --------
    >>> maximum(Fraction(1, 3), 0)
    Fraction(1, 3)
    """
    ns = namespace(a, b)
    return max(a, b) if ns is None else ns.maximum(a, b)


def minimum(a: Any, b: Any) -> Any:
    """Element-wise min (``min`` for scalars).

    Examples
    --------
    >>> minimum(4, 7)
    4
    """
    ns = namespace(a, b)
    return min(a, b) if ns is None else ns.minimum(a, b)


def where(condition: Any, a: Any, b: Any) -> Any:
    """``a`` where ``condition`` holds, else ``b`` (a conditional expression for scalars; both
    sides are evaluated either way, so each must be defined for every element).

    Examples
    --------
    >>> where(2 > 1, "yes", "no")
    'yes'
    """
    ns = namespace(condition, a, b)
    if ns is None:
        return a if condition else b
    return ns.where(condition, a, b)


def floor(value: Any) -> Any:
    """Round down to a whole number (an int for scalars).

    Examples
    --------
    >>> floor(Fraction(7, 2))
    3
    """
    ns = namespace(value)
    if ns is None:
        return value // 1 if not isinstance(value, Fraction) else value.__floor__()
    return ns.floor(value)


def log2(value: Any) -> Any:
    """Base-2 logarithm (a float for scalars).

    Examples
    --------
    >>> log2(8)
    3.0
    """
    ns = namespace(value)
    if ns is None:
        import math

        return math.log2(value)
    return ns.log2(value)
