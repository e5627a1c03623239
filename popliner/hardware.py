"""Figures of the hardware between IPUs that the simulator and the solvers assume unless told otherwise.

A module of its own, importing nothing: the command line names them as option
defaults without importing the simulator.
"""

from __future__ import annotations

__all__ = ["DEFAULT_LINK_BANDWIDTH", "DEFAULT_SYNC_CYCLES"]

#: Bytes/s between neighbouring IPUs: one IPU-Link, 512 Gbit/s as Graphcore
#: quotes it for Bow-2000/IPU-M2000 systems. A GC200 has several links; this
#: is the conservative figure for a copy that uses one.
DEFAULT_LINK_BANDWIDTH = 64e9
#: Clock cycles of the inter-IPU sync before each copy phase; a rough
#: estimate of a hardware sync plus exchange set-up; calibrate it against a
#: real profile of the pipelined model when you have one.
DEFAULT_SYNC_CYCLES = 1000
