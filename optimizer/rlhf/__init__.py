"""The RLHF placement and parallelism search: every role's cost on every pool size and option
(:mod:`.tables`), the CP-SAT model over them (:mod:`.cpsat`), and the search with its exhaustive
oracle (:mod:`.search`)."""
