"""Text: the report of a simulation and the per-IPU table of a check for people; review tables as CSV."""

from __future__ import annotations

from popliner.writers.check_report import write_check_report_text
from popliner.writers.simulation import write_text
from popliner.writers.tables import CSV
from popliner.writers.writer import Functions

__all__ = ["TEXT"]

#: The tables' plain text is their CSV (``-o layers.txt``), written with the csv module's line ends.
TEXT: Functions = {"Simulation": write_text, "CheckReport": write_check_report_text, "Tables": CSV["Tables"]}
