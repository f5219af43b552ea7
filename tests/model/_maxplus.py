"""Max-plus values for running a fixed pipeline order on symbolic durations: a time is the maximum
of linear forms in the pass durations (t_f, t_b, t_w, t_fb), kept as the set of coefficient
vectors no other vector dominates. The step time of an order is then exact for every choice of
durations at once (the test oracle of the closed forms in model.pipeline_zb)."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.pipeline_sim import run

KINDS = {"F": (1, 0, 0, 0), "B": (0, 1, 1, 0), "I": (0, 1, 0, 0), "W": (0, 0, 1, 0)}
OVERLAP = (0, 0, 0, 1)


class Forms(frozenset):
    """A maximum of linear forms; ``+`` adds a duration, :func:`join` takes the maximum."""

    def __add__(self, other):
        return Forms(tuple(a + b for a, b in zip(f, g, strict=True)) for f in self for g in other)

    def __radd__(self, other):  # time 0 (a rank's start) plus a duration
        assert other == 0
        return self


def prune(forms):
    """Drop every form another one dominates (durations are positive)."""
    forms = set(forms)
    return Forms(
        f
        for f in forms
        if not any(g != f and all(a >= b for a, b in zip(g, f, strict=True)) for g in forms)
    )


ZERO = Forms({(0, 0, 0, 0)})


def join(*values):
    out = set()
    for v in values:
        out |= ZERO if isinstance(v, Fraction | int) else v
    return prune(out)


def step_forms(pp, stages, stage_of, orders):
    """The step time of ``orders`` as a set of coefficient vectors (t_f, t_b, t_w, t_fb)."""

    def duration(rank, entry):
        return Forms({OVERLAP if len(entry) > 1 else KINDS[entry[0].kind]})

    slots = run(pp, stages, stage_of, duration, orders=orders, join=join)
    return join(*(s.end for rank in slots for s in rank))


def evaluate(forms, t_f, t_b, t_w, t_fb=0):
    """The step time the forms give for these durations."""
    return max(a * t_f + b * t_b + c * t_w + d * t_fb for a, b, c, d in forms)
