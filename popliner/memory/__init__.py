"""The per-tile memory model of a set of operations."""
