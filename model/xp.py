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

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction
from typing import Any

__all__ = [
    "namespace",
    "exact",
    "maximum",
    "minimum",
    "where",
    "floor",
    "log2",
    "is_array",
    "as_float",
    "times",
    "logical_not",
    "over_arrays",
    "all_equal",
    "as_float_array",
    "elementwise",
]

_EXACT: ContextVar[bool] = ContextVar("exact", default=True)
"""False while terms run over arrays (:func:`over_arrays`): :func:`exact` then gives floats."""


@contextmanager
def over_arrays() -> Iterator[None]:
    """Evaluate terms over arrays of layouts: inside, :func:`exact` turns ints into floats
    rather than Fractions (a Fraction meeting a numpy array makes an array of Python objects).

    Examples
    --------
    >>> with over_arrays():
    ...     exact(3) / 2
    1.5
    """
    token = _EXACT.set(False)
    try:
        yield
    finally:
        _EXACT.reset(token)


def namespace(*values: Any) -> Any:
    """The array namespace of the first array among ``values``; None when all are scalars.

    Examples
    --------
    >>> namespace(1, Fraction(1, 2)) is None
    True
    """
    for v in values:
        kind = type(v)
        ns = _NAMESPACES.get(kind, _UNKNOWN)
        if ns is _UNKNOWN:
            found = getattr(v, "__array_namespace__", None)
            ns = _NAMESPACES[kind] = None if found is None else found()
        if ns is not None:
            return ns
    return None


_UNKNOWN = object()
_NAMESPACES: dict[type, Any] = {int: None, float: None, bool: None, Fraction: None}
"""Each type's array namespace (None for scalars), looked up once per type: the search's tables
call these helpers tens of thousands of times."""

_SCALAR = _NAMESPACES.get
"""``_SCALAR(type(v), _UNKNOWN) is None``: ``v``'s type is known and not an array (ints,
Fractions and every type :func:`namespace` has seen without one), so :func:`maximum`,
:func:`minimum` and :func:`where` answer it without calling :func:`namespace`: the per-stage
search calls them millions of times."""


def is_array(value: Any) -> bool:
    """Whether ``value`` is an array (has ``__array_namespace__``)."""
    return namespace(value) is not None


def exact(value: Any) -> Any:
    """An int as a Fraction (so that ``/`` stays exact), or a float inside :func:`over_arrays`;
    arrays and Fractions unchanged.

    Examples
    --------
    >>> exact(3) / 2
    Fraction(3, 2)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value) if _EXACT.get() else float(value)
    return value


def maximum(a: Any, b: Any) -> Any:
    """Element-wise max (``max`` for scalars).

    Examples
    --------
    >>> maximum(Fraction(1, 3), 0)
    Fraction(1, 3)
    """
    if _SCALAR(a.__class__, _UNKNOWN) is None and _SCALAR(b.__class__, _UNKNOWN) is None:
        return max(a, b)  # the exact callers' common case
    ns = namespace(a, b)
    return max(a, b) if ns is None else ns.maximum(a, b)


def minimum(a: Any, b: Any) -> Any:
    """Element-wise min (``min`` for scalars).

    Examples
    --------
    >>> minimum(4, 7)
    4
    """
    if _SCALAR(a.__class__, _UNKNOWN) is None and _SCALAR(b.__class__, _UNKNOWN) is None:
        return min(a, b)
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
    if (
        _SCALAR(condition.__class__, _UNKNOWN) is None
        and _SCALAR(a.__class__, _UNKNOWN) is None
        and _SCALAR(b.__class__, _UNKNOWN) is None
    ):
        return a if condition else b
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


def as_float(value: Any) -> Any:
    """A float for a scalar (an exact int or Fraction rounded once, where a time model leaves
    exact arithmetic); arrays unchanged.

    Examples
    --------
    >>> as_float(Fraction(1, 4))
    0.25
    """
    return value if is_array(value) else float(value)


def times(value: Any, constant: Any) -> Any:
    """``value × constant`` for an exact ``constant`` (an int or Fraction): exact for scalars,
    the constant as a float for arrays (numpy does not multiply by a Fraction).

    Examples
    --------
    >>> times(Fraction(3), Fraction(1, 2))
    Fraction(3, 2)
    """
    return value * (float(constant) if is_array(value) else constant)


def logical_not(value: Any) -> Any:
    """Element-wise not (``not`` for a scalar).

    Examples
    --------
    >>> logical_not(False)
    True
    """
    ns = namespace(value)
    return (not value) if ns is None else ns.logical_not(value)


def all_equal(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are equal everywhere (``==`` for scalars; every element for
    arrays, broadcast).

    Examples
    --------
    >>> all_equal(Fraction(1, 2), 0.5)
    True
    """
    ns = namespace(a, b)
    if ns is None:
        return bool(a == b)
    return bool(ns.all(ns.asarray(a) == ns.asarray(b)))


def as_float_array(value: Any) -> Any:
    """A float for a scalar, a float64 array for an array (an int array too).

    Examples
    --------
    >>> as_float_array(3)
    3.0
    """
    ns = namespace(value)
    return float(value) if ns is None else ns.astype(ns.asarray(value), ns.float64)


def elementwise(function: Any, *values: Any) -> Any:
    """``function`` of Python floats applied to each element of ``values`` broadcast together
    (None passed through as None), as a float64 array of the broadcast shape; ``function``
    of the values themselves when none is an array. For a rule no array operation expresses
    (a cached timeline per element).

    Examples
    --------
    >>> elementwise(lambda a, b: a + (b or 0), 1, None)
    1
    """
    ns = namespace(*values)
    if ns is None:
        return function(*values)
    present = [i for i, v in enumerate(values) if v is not None]
    arrays = ns.broadcast_arrays(*(ns.asarray(values[i], dtype=ns.float64) for i in present))
    shape = arrays[0].shape
    # each column as Python floats at once (numpy's ``tolist`` of float64: ``float(a[k])`` of
    # each element, without indexing element by element)
    flat = [_floats(ns.reshape(a, (-1,))) for a in arrays]
    out = []
    row: list[Any] = [None] * len(values)
    for elements in zip(*flat, strict=True):
        for i, x in zip(present, elements, strict=True):
            row[i] = x
        out.append(function(*row))
    return ns.reshape(ns.asarray(out, dtype=ns.float64), shape)


def _floats(array: Any) -> list[float]:
    """A 1-D float64 array's elements as Python floats (``tolist`` where the library has it)."""
    to_list = getattr(array, "tolist", None)
    return to_list() if to_list is not None else [float(x) for x in array]
