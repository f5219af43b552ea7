"""``trainplan search``: the best layout of a model on N GPUs (CP-SAT)."""
