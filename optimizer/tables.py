"""Cost tables: the cost model's own functions evaluated over each term's scope.

For every legal shape s (optimizer.space), every ZeRO stage z and every recompute mode r:

* ``state[s][z][i]``  — model-state bytes of pipeline stage i (:func:`model.estimate.stage_states`)
* ``act[s][r][i]``    — activation bytes of stage i (:func:`model.estimate.stage_activation_list`)
* ``t1_ns[s][r]``     — compute × (1 + bubble) + exposed tp/cp/ep/pp traffic
* ``t2_ns[s][z]``     — exposed dp traffic (both from :func:`model.estimate.time_terms`, rounded
  to whole nanoseconds by :func:`model.estimate.objective_ns`)

so that memory of stage i = state + act and step time = t1 + t2 exactly as ``evaluate()`` adds
them. Nothing here computes a cost itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from model.errors import InputError
from model.estimate import (
    objective_ns,
    stage_activation_list,
    stage_states,
    time_terms,
    traffic_rows,
)
from model.layout import Recompute
from optimizer.inputs import Case, links_for
from optimizer.space import Shape

__all__ = ["CostTables", "build_tables", "MAX_ROWS"]

MAX_ROWS = 200_000
"""Refuse tables larger than this many (shape × modifier) rows; narrow the space instead."""


@dataclass(frozen=True, slots=True)
class CostTables:
    """Every term of every candidate, exact (bytes) or in whole nanoseconds (time)."""

    shapes: tuple[Shape, ...]
    zero_stages: tuple[int, ...]
    recomputes: tuple[Recompute, ...]
    state: tuple[tuple[tuple[Fraction, ...], ...], ...]
    """[shape][zero index][stage] model-state bytes."""
    act: tuple[tuple[tuple[Fraction, ...], ...], ...]
    """[shape][recompute index][stage] activation bytes (layers + embedding + transient)."""
    t1_ns: tuple[tuple[int, ...], ...]
    """[shape][recompute index] compute, bubble and exposed tp/cp/ep/pp time, ns."""
    t2_ns: tuple[tuple[int, ...], ...]
    """[shape][zero index] exposed dp time, ns."""
    capacity_bytes: int

    def fits(self, s: int, z: int, r: int) -> bool:
        """Whether every stage's state + activations fit (exact)."""
        return all(
            a + b <= self.capacity_bytes
            for a, b in zip(self.state[s][z], self.act[s][r], strict=True)
        )

    def objective(self, s: int, z: int, r: int) -> int:
        """Step time in ns as the solver sees it."""
        return self.t1_ns[s][r] + self.t2_ns[s][z]


def build_tables(
    case: Case,
    shapes: list[Shape],
    zero_stages: tuple[int, ...],
    recomputes: tuple[Recompute, ...],
    headroom: float = 0.0,
) -> CostTables:
    """Evaluate the cost model's terms for every shape × modifier.

    ``headroom`` keeps that fraction of the GPU's memory free (capacity × (1 − headroom)).

    Raises
    ------
    InputError
        When the space is larger than :data:`MAX_ROWS` rows, naming what to narrow.
    """
    rows = len(shapes) * (len(zero_stages) + len(recomputes))
    if rows > MAX_ROWS:
        raise InputError(
            f"search: {len(shapes)} shapes × modifiers = {rows} table rows is over {MAX_ROWS}; "
            "narrow the space (--tp, --pp, --max-micro-batch)"
        )
    if case.model.arch is None:
        raise InputError(
            "search: needs a model with dimensions (a catalogue model, a config.json, or --layers …)"
        )
    m, t, o, vm = case.model, case.training, case.options, case.vocab_multiple
    state, act, t1, t2 = [], [], [], []
    for shape in shapes:
        base = shape.layout(zero_stages[0], recomputes[0])
        links = links_for(base, case.links)
        state.append(
            tuple(
                tuple(
                    st.total_bytes for st in stage_states(m, t, shape.layout(z, recomputes[0]), vm)
                )
                for z in zero_stages
            )
        )
        acts, times = [], []
        for r in recomputes:
            lay = shape.layout(zero_stages[0], r)
            acts.append(tuple(a.total_bytes for a in stage_activation_list(m, t, lay, vm) or ()))
            terms = time_terms(m, t, lay, case.device, traffic_rows(m, t, lay, links, o, vm), o)
            if terms is None:
                raise InputError(
                    "search: step time needs every axis's link bandwidth (give --nvlink-gbps, --scaleout-gbps)"
                )
            times.append(objective_ns(terms)[0])
        act.append(tuple(acts))
        t1.append(tuple(times))
        dp_times = []
        for z in zero_stages:
            lay = shape.layout(z, recomputes[0])
            terms = time_terms(m, t, lay, case.device, traffic_rows(m, t, lay, links, o, vm), o)
            assert terms is not None
            dp_times.append(objective_ns(terms)[1])
        t2.append(tuple(dp_times))
    capacity = (
        int(case.device.memory_bytes * (1 - headroom)) if headroom else case.device.memory_bytes
    )
    return CostTables(
        tuple(shapes),
        tuple(zero_stages),
        tuple(recomputes),
        tuple(state),
        tuple(act),
        tuple(t1),
        tuple(t2),
        capacity,
    )
