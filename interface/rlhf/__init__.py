"""The RLHF tab's faithful accounting and the placement search for people: inputs parsed into a
problem (:mod:`.faithful`), report dictionaries (:mod:`.report`), terminal text (:mod:`.text`),
and published steps beside the planner's figures (:mod:`.measured`)."""
