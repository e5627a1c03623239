"""Split solvers: greedy (PopLiner's algorithm) and exact (CP-SAT)."""
