"""Split solvers: greedy (PopLiner's algorithm) and exact (dynamic programming)."""
