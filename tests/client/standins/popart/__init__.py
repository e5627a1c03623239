"""Stand-in for PopART: the two enums optimum-graphcore's IPUConfig reads."""

import enum


class AccumulateOuterFragmentSchedule(enum.IntEnum):
    Scheduler = 0
    Serial = 1
    OverlapCycleOptimized = 2
    OverlapMemoryOptimized = 3


class SubgraphCopyingStrategy(enum.IntEnum):
    OnEnterAndExit = 0
    JustInTime = 1
