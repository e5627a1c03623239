"""Columns of a cached profile left packed until something reads them.

A cached run reads the profile's columns from the cache file, where the
large integer ones are deflated (:mod:`popliner.profile.cache.archive`). Some are
only read to derive what the cache already holds: ``programs.var_idx``
(every variable of every program, 64 MB at 1x and 1.2 GB at 10x as int64)
is only read to derive the operations; ``variables.ids`` and the name
offsets only to name a variable in a report. Unpacking a column costs its
pages as much as its inflating, so a cached load keeps these packed: the field holds a
:class:`Deferred`, unpacked the first time the field is read and then
kept. Its checks (:mod:`popliner.profile.cache.trust`) run at load all the
same, on the figures one streaming pass took (length, smallest and
largest value), so a bad entry is still rebuilt before anything uses it.

A field's value as stored, packed or not, is ``vars(obj)[name]`` (the
instance's ``__dict__``, which the dataclass's ``__init__`` fills through
:class:`LazyColumn`); reading ``obj.name`` unpacks it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Deferred", "make_lazy"]


class Deferred:
    """A column to unpack when first read, and what a streaming pass over it found.

    The trust checks read it as they read an array (``len``, ``size``,
    ``dtype``, ``min()``, ``max()``), so a column left packed is checked by
    the same code as one unpacked.
    """

    __slots__ = ("load", "size", "lo", "hi", "dtype")

    def __init__(self, load: Callable[[], np.ndarray], size: int, lo: int, hi: int, dtype: np.dtype[Any]) -> None:
        self.load = load
        self.size, self.lo, self.hi, self.dtype = size, lo, hi, dtype

    def __len__(self) -> int:
        return self.size

    def min(self) -> int:
        return self.lo

    def max(self) -> int:
        return self.hi


class LazyColumn:
    """A frozen dataclass field whose value is an array, or a :class:`Deferred` turned into one when read."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        if obj is None:
            raise AttributeError(self.name)  # no class-level value: the field keeps no default
        value = obj.__dict__[self.name]
        if isinstance(value, Deferred):
            value = obj.__dict__[self.name] = value.load()  # once: later reads get the array
        return value

    def __set__(self, obj: object, value: Any) -> None:
        obj.__dict__[self.name] = value


def make_lazy(cls: type, name: str) -> None:
    """Let field ``name`` of dataclass ``cls`` hold a :class:`Deferred`.

    Installed on the class after the dataclass is made, so that the
    generated ``__init__`` sets it through :meth:`LazyColumn.__set__` and
    type checkers see a plain array field.
    """
    setattr(cls, name, LazyColumn(name))
