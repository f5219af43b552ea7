"""A frozen dataclass whose hash is computed once.

The cost model caches its terms (``functools.lru_cache``), which hashes every argument at every
call; a :class:`model.legality.Setting` holds the model, its architecture and the recipe, so a
search hashed the same few objects hundreds of thousands of times, field by field. A class built
on :class:`HashOnce` keeps its hash after the first call. The value is the dataclass's own (the
hash of the tuple of its hashed fields, in order: Python's ``dataclasses`` ``_hash_fn``), so
every dict and set keeps its order and every figure is unchanged.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from trainplan.model.xp import is_array

__all__ = ["HashOnce", "hashable"]


class HashOnce:
    """Base of a frozen dataclass with ``slots=True`` whose hash is kept after its first call, in
    a slot that is no field: ``dataclasses.fields``, ``replace``, ``asdict``, equality and the
    repr ignore it, and pickling leaves it out (a frozen slotted dataclass pickles its fields
    only; another process hashes strings with another seed). A subclass gets this ``__hash__`` in
    its own body (``__init_subclass__``), which ``dataclass`` keeps rather than writing its own.

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True, slots=True)
    ... class Point(HashOnce):
    ...     x: int
    ...     y: int
    >>> hash(Point(1, 2)) == hash((1, 2)), Point(1, 2) == Point(1, 2)
    (True, True)
    """

    __slots__ = ("_hash",)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.__hash__ = HashOnce.__hash__  # type: ignore[method-assign]

    def __hash__(self) -> int:
        try:
            return self._hash  # type: ignore[attr-defined,no-any-return]
        except AttributeError:
            value = hash(
                tuple(
                    getattr(self, f.name)
                    for f in fields(self)  # type: ignore[arg-type]
                    if (f.compare if f.hash is None else f.hash)
                )
            )
            object.__setattr__(self, "_hash", value)
            return value


def hashable(value: Any) -> Any:
    """``value`` as a cache key (``functools.lru_cache``) can hold it, equal in every rule's
    eyes, for a value a caller may pass as a list or an array: a list or tuple as a tuple of its
    items (each made hashable), a set as a frozenset, a numpy array as its scalar (0-d) or the
    tuple of its items (:func:`model.xp.is_array`); anything else as it is.

    >>> import numpy as np
    >>> hashable([7, 8]), hashable(np.array([[1, 2]])), hashable(np.array(3)), hashable("x")
    ((7, 8), ((1, 2),), 3, 'x')
    """
    if is_array(value):
        return value.item() if value.ndim == 0 else hashable(value.tolist())
    if isinstance(value, (list, tuple)):
        return tuple(hashable(item) for item in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(hashable(item) for item in value)
    return value
