"""The compiler's own memory categories (``tileMemory.categories``) that the five components leave out.

Every such category is the *other* component, with a rule saying how much of
the one-IPU figure a stage carries: ``fixed`` on every tile of every IPU, or
shared out over the operations by a driver (the units of the programs it
follows). docs/profile-format.md ('Other categories') gives the rules, each
category's and why; :data:`RULES` and :data:`DRIVERS` hold them here. With
every operation in the set, each category gives back the compiler's bytes on
every tile exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from popliner.profile.model import TYPE_CODE, Profile

__all__ = ["DRIVERS", "MODELLED", "RULES", "CategorySplit", "category_rule", "other_categories", "split_categories"]

#: Categories the five components model, and the component each one is.
MODELLED: Mapping[str, str] = {
    "vertexCode": "vertex_code",
    "vertexInstanceState": "vertex_state",
    "internalExchangeCode": "exchange_code",
    "controlCode": "control_code",
}
#: Drivers, in the order of :attr:`CategorySplit.amount` rows.
DRIVERS: tuple[str, ...] = ("vertices", "copies", "streams", "control")
#: The rule of each category popliner knows; any other category is ``fixed``.
RULES: Mapping[str, str] = {
    "stack": "fixed",
    "instrumentationResults": "fixed",
    "constant": "fixed",
    "globalExchangeCode": "fixed",
    "globalExchangePacketHeader": "fixed",
    "vertexFieldData": "vertices",
    "vectorListDescriptor": "vertices",
    "copyDescriptor": "copies",
    "hostExchangeCode": "streams",
    "hostExchangePacketHeader": "streams",
    "controlId": "control",
    "controlTable": "control",
}
_COPY_TYPES = (TYPE_CODE["Copy"], TYPE_CODE["DoExchange"])
_STREAM_TYPES = (TYPE_CODE["StreamCopyBegin"], TYPE_CODE["StreamCopyMid"], TYPE_CODE["StreamCopyEnd"])
_PREFIX = "category."


def category_rule(name: str) -> str:
    """``fixed`` or the driver a category follows (unknown categories are fixed)."""
    return RULES.get(name, "fixed")


@dataclass(frozen=True, eq=False)
class CategorySplit:
    """The other categories of one profile, ready to give any set of programs its share per tile.

    ``fixed`` (int64 [tiles]) goes to every stage; ``amount`` (int64
    [drivers, tiles]) is shared out by the driver units in ``whole`` (int64
    [drivers, tiles], every operation's programs).
    """

    names: tuple[str, ...]
    fixed: np.ndarray
    amount: np.ndarray
    whole: np.ndarray
    leaf: np.ndarray  # per program: a leaf
    copies: np.ndarray  # per program: a leaf Copy or DoExchange
    streams: np.ndarray  # per program: a leaf StreamCopy*

    def units(self, profile: Profile, progs: np.ndarray) -> np.ndarray:
        """Int64 [drivers, tiles]: the driver units of a set of distinct programs."""
        programs = profile.programs
        tiles = profile.tiles
        return np.stack((
            programs.vertices.sum_rows(progs, tiles),
            programs.control.sum_rows(progs[self.copies[progs]], tiles),
            programs.control.sum_rows(progs[self.streams[progs]], tiles),
            programs.control.sum_rows(progs[self.leaf[progs]], tiles),
        ))

    def per_tile(self, units: np.ndarray) -> np.ndarray:
        """The other component per tile of a set whose driver units are ``units``."""
        share = np.zeros_like(self.amount)
        np.floor_divide(self.amount * units + self.whole - 1, self.whole, out=share, where=self.whole > 0)
        return np.asarray(self.fixed + share.sum(axis=0))

    def per_program_rate(self) -> np.ndarray:
        """Float [drivers, tiles]: bytes per driver unit (0 where no operation has units)."""
        rate = np.zeros(self.amount.shape, np.float64)
        np.divide(self.amount, self.whole, out=rate, where=self.whole > 0)
        return rate


def split_categories(profile: Profile, attributed: np.ndarray) -> CategorySplit | None:
    """The other categories of a profile (None when its ``tileMemory`` has none).

    ``attributed``: the distinct programs that belong to some operation (the
    units the categories are shared out over).
    """
    names = other_categories(profile.tile_memory)
    if not names:
        return None
    truth = profile.tile_memory or {}
    programs = profile.programs
    leaf = programs.is_leaf()
    kinds = np.asarray(programs.type)
    split = CategorySplit(
        names=names,
        fixed=np.zeros(profile.tiles, np.int64),
        amount=np.zeros((len(DRIVERS), profile.tiles), np.int64),
        whole=np.zeros((len(DRIVERS), profile.tiles), np.int64),
        leaf=leaf,
        copies=leaf & np.isin(kinds, _COPY_TYPES),
        streams=leaf & np.isin(kinds, _STREAM_TYPES),
    )
    whole = split.units(profile, attributed)
    fixed = np.zeros(profile.tiles, np.int64)
    amount = np.zeros_like(whole)
    for name in names:
        bytes_ = np.asarray(truth[_PREFIX + name], np.int64)
        rule = category_rule(name)
        if rule == "fixed":
            fixed += bytes_
            continue
        d = DRIVERS.index(rule)
        # Bytes on a tile where no operation has the driver's units cannot follow them: fixed there.
        follows = whole[d] > 0
        amount[d] += np.where(follows, bytes_, 0)
        fixed += np.where(follows, 0, bytes_)
    return CategorySplit(names, fixed, amount, whole, split.leaf, split.copies, split.streams)


def other_categories(tile_memory: Mapping[str, np.ndarray] | None) -> tuple[str, ...]:
    """Names of the categories in ``tileMemory`` that the five components do not model, sorted.

    A category whose name says it holds variables (any case of "variable" in it, as older summaries have
    "Variables") is what the variables component already counts, so it is not an other category.
    """
    if not tile_memory:
        return ()
    names = (k[len(_PREFIX):] for k in tile_memory if k.startswith(_PREFIX))
    return tuple(sorted(n for n in names if n not in MODELLED and "variable" not in n.lower()))
