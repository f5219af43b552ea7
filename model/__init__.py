"""trainplan's cost model: pure functions over frozen dataclasses; standard library only."""
