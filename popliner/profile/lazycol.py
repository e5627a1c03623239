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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

__all__ = ["Deferred", "LazyColumn", "deferred", "make_lazy", "replace_lazy"]


class Deferred:
    """A column to unpack when first read, and what a streaming pass over it found (for the checks)."""

    __slots__ = ("_load", "length", "lo", "hi", "dtype")

    def __init__(self, load: Callable[[], np.ndarray], length: int, lo: int, hi: int, dtype: np.dtype[Any]) -> None:
        self._load = load
        self.length, self.lo, self.hi, self.dtype = length, lo, hi, dtype

    def load(self) -> np.ndarray:
        return self._load()


class LazyColumn:
    """A frozen dataclass field whose value is an array, or a :class:`Deferred` turned into one when read.

    Installed on the class after the dataclass is made (:func:`make_lazy`),
    so the generated ``__init__`` sets it through :meth:`__set__` and type
    checkers see a plain array field.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.slot = f"_lazy_{name}"

    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        if obj is None:
            raise AttributeError(self.name)  # no class-level value: the field keeps no default
        value = obj.__dict__[self.slot]
        if isinstance(value, Deferred):
            value = value.load()
            obj.__dict__[self.slot] = value  # once: later reads get the array
        return value

    def __set__(self, obj: object, value: Any) -> None:
        obj.__dict__[self.slot] = value


def make_lazy(cls: type, name: str) -> None:
    """Let field ``name`` of dataclass ``cls`` hold a :class:`Deferred`."""
    setattr(cls, name, LazyColumn(name))


def deferred(obj: object, name: str) -> Deferred | None:
    """The field's :class:`Deferred` while it is still packed, else None (reading it would unpack it)."""
    value = obj.__dict__.get(f"_lazy_{name}")
    return value if isinstance(value, Deferred) else None


def replace_lazy(obj: T, **changes: Any) -> T:
    """``dataclasses.replace`` that hands a field still packed to the copy packed, instead of unpacking it."""
    fields = {}
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        if not f.init:
            continue
        if f.name in changes:
            fields[f.name] = changes[f.name]
        else:
            raw = obj.__dict__.get(f"_lazy_{f.name}", dataclasses.MISSING)
            fields[f.name] = getattr(obj, f.name) if raw is dataclasses.MISSING else raw
    return type(obj)(**fields)
