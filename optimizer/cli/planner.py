"""Planner commands: evaluate, search, example, gpus (filled in by the cost-model work)."""
