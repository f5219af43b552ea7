"""RLHF in the cost model: the roles of a step, their phases and each phase's FLOPs, one rule
both accountings read (:mod:`.phases`); the textbook accounting of a step (:mod:`.shares`: 16 / 2 B
per parameter, FLOP shares at two MFUs) and the faithful one — the workload and its roles
(:mod:`.spec`), each role's placement and cost records (:mod:`.roles`), the cost of a training or
scoring role (:mod:`.network`) and of the rollout engine (:mod:`.engine`), one role's cost under
one option (:mod:`.costs`), and a placement's step (:mod:`.step`)."""
