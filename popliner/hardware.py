"""Figures of the hardware between IPUs that the simulator and the solvers assume unless told otherwise.

A module of its own, importing nothing: the command line names them as option
defaults without importing the simulator.
"""

from __future__ import annotations

__all__ = ["BANDWIDTH_RANGE", "CLOCK_HZ_RANGE", "DEFAULT_LINK_BANDWIDTH", "DEFAULT_SYNC_CYCLES", "MAX_CYCLES"]

#: Clocks (Hz) and bandwidths (bytes/s) popliner accepts, from a profile, a config or an option: far beyond any
#: real IPU either way (1.33-1.85 GHz; links and streaming memory of tens of GB/s). Bounded below so that
#: what is derived from them (seconds = cycles / clock, copy cycles = bytes x clock / bandwidth) stays finite:
#: a clock of 1e-300 Hz made a step last "inf" seconds, written as Infinity into JSON.
CLOCK_HZ_RANGE = (1e3, 1e12)
BANDWIDTH_RANGE = (1e3, 1e15)
#: The most cycles one figure may count: integer cycles are summed and handed to the solvers as 64-bit integers.
MAX_CYCLES = 1 << 62

#: Bytes/s between neighbouring IPUs: one IPU-Link, 512 Gbit/s as Graphcore
#: quotes it for Bow-2000/IPU-M2000 systems. A GC200 has several links; this
#: is the conservative figure for a copy that uses one.
DEFAULT_LINK_BANDWIDTH = 64e9
#: Clock cycles of the inter-IPU sync before each copy phase; a rough
#: estimate of a hardware sync plus exchange set-up; calibrate it against a
#: real profile of the pipelined model when you have one.
DEFAULT_SYNC_CYCLES = 1000

