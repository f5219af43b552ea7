"""The integers the RLHF placement search reads off each role's cost (:func:`int_costs`,
:func:`sync_ns`, :func:`resident_int`, :func:`receive_int`: bytes rounded up, seconds in whole
ns), and the dominance filter over them (:func:`dominant`): an option another of the same role
and pool size beats or ties in every such integer is dropped, which leaves the optimum of the
CP-SAT placement model (:mod:`optimizer.rlhf.cpsat`) unchanged (the reasoning is in
:func:`dominant`; the exhaustive-oracle tests compare the pruned search with enumeration of the
full tables). Split from :mod:`optimizer.rlhf.tables`, which re-exports these names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from trainplan.model.rlhf.roles import RoleCost, RoleOption
from trainplan.model.rlhf.spec import PHASES, Role

if TYPE_CHECKING:
    from trainplan.optimizer.rlhf.tables import RLHFTables

__all__ = [
    "NS",
    "int_costs",
    "sync_ns",
    "placement_sync_ns",
    "resident_int",
    "receive_int",
    "dominant",
]

NS = 10**9
"""Nanoseconds per second: the CP-SAT placement model's time unit."""


def int_costs(
    cost: RoleCost,
) -> tuple[int, tuple[int, int, int], int, tuple[int, int, int], tuple[int, int, int], int, int]:
    """(held bytes, phase bytes, host bytes — each rounded up; seconds per phase in whole ns;
    swapped-in bytes per phase; bytes held in every phase,
    :attr:`~model.rlhf.roles.RoleCost.resident_bytes`, rounded up; bytes at the weight sync,
    :attr:`~model.rlhf.roles.RoleCost.sync_bytes`, rounded up): the integers the CP-SAT
    placement model (:mod:`optimizer.rlhf.cpsat`) and the dominance filter (:func:`dominant`)
    read."""
    up = math.ceil
    return (
        up(cost.held_bytes),
        tuple(up(cost.phase_bytes(p)) for p in PHASES),  # type: ignore[return-value]
        up(cost.host_bytes),
        tuple(round(cost.seconds(p) * NS) for p in PHASES),  # type: ignore[misc]
        tuple(up(cost.swap_in(p)) for p in PHASES),  # type: ignore[misc]
        resident_int(cost),
        up(cost.sync_bytes),
    )


def sync_ns(cost: RoleCost) -> tuple[int, int, int]:
    """A role's weight-sync seconds in whole ns: the engine's broadcast on a pool without the
    actor (:attr:`~model.rlhf.roles.RoleCost.sync_s`), the actor's gather
    (:attr:`~model.rlhf.roles.RoleCost.sync_gather_s`) and its whole sync to an engine on its
    pool (:attr:`~model.rlhf.roles.RoleCost.sync_shared_s`); 0 where the role has none."""
    return round(cost.sync_s * NS), round(cost.sync_gather_s * NS), round(cost.sync_shared_s * NS)


def placement_sync_ns(members: Sequence[RoleCost], costs: Sequence[RoleCost]) -> int:
    """:func:`model.rlhf.sync_time.placement_sync_seconds` of a pool of ``members`` in a step
    of ``costs``, from :func:`sync_ns`'s integers (what the CP-SAT model sums): the actor's
    shared sync beside the engine, else the engine's broadcast and the actor's gather."""
    roles = {c.option.role: c for c in members}
    if Role.ROLLOUT not in roles:
        return 0
    if Role.ACTOR in roles:
        return sync_ns(roles[Role.ACTOR])[2]
    actor = next((c for c in costs if c.option.role is Role.ACTOR), None)
    return sync_ns(roles[Role.ROLLOUT])[0] + (sync_ns(actor)[1] if actor is not None else 0)


def resident_int(cost: RoleCost) -> int:
    """A role's bytes held in every phase, rounded up (:func:`int_costs`'s sixth)."""
    return math.ceil(cost.resident_bytes)


def receive_int(cost: RoleCost) -> int:
    """An engine's bytes over its pool's held ones while it receives a parameter over NCCL
    (:func:`model.rlhf.split.receive_peak`), rounded up: its rollout bytes and the buffer."""
    return math.ceil(cost.rollout_bytes) + math.ceil(cost.receive_bytes)


def dominant(tables: RLHFTables) -> RLHFTables:
    """The tables less every option that another option of the same role and pool size beats or
    ties in each integer the CP-SAT model reads (:func:`int_costs`: held,
    phase, host, swapped, resident and sync bytes, seconds per phase, and the sync seconds,
    :func:`sync_ns`); of equal ones the first is kept.
    Every constraint and the step time grow with each of them, so a placement with the dropped
    option stays feasible and no slower with the one that dominates it: the optimum is
    unchanged. Roles that share process groups (:attr:`~model.rlhf.roles.RoleCost.groups`) are
    compared within one tp × pp only: a pool's roles must then agree on it
    (:func:`model.rlhf.step.pool_resident`), so an option of another layout is no substitute;
    and within one OpenRLHF scoring micro-batch (``split_tokens``), which the actor's must match."""

    def flat(cost: RoleCost) -> list[int]:
        held, phase, host, secs, swap, resident, sync = int_costs(cost)
        rest = [resident, sync, math.ceil(cost.sleep_host_bytes), *sync_ns(cost)]
        return [held, *phase, host, *secs, *swap, *rest]

    def layout(cost: RoleCost) -> tuple[tuple[int, int] | None, int]:
        return ((cost.option.tp, cost.option.pp) if cost.groups else None), cost.split_tokens

    out: dict[Role, dict[int, list[tuple[RoleOption, RoleCost]]]] = {}
    for role, by_size in tables.options.items():
        out[role] = {}
        for n, all_opts in by_size.items():
            kept: set[int] = set()
            for key in dict.fromkeys(layout(c) for _, c in all_opts):
                idx = [i for i, (_, c) in enumerate(all_opts) if layout(c) == key]
                kept.update(idx[i] for i in _undominated([flat(all_opts[i][1]) for i in idx]))
            out[role][n] = [oc for i, oc in enumerate(all_opts) if i in kept]
    return replace(tables, options=out)


def _undominated(rows: list[list[int]]) -> list[int]:
    """Indices of the rows no other row beats or ties everywhere (of equal rows the first)."""
    if not rows:
        return []
    big = any(x >= 2**62 for row in rows for x in row)  # exact either way
    v = np.array(rows, dtype=object if big else np.int64).reshape(len(rows), -1)
    le = (v[:, None, :] <= v[None, :, :]).all(axis=2)  # le[j, i]: j ≤ i everywhere
    lt = (v[:, None, :] < v[None, :, :]).any(axis=2)
    earlier = np.tri(len(rows), k=-1, dtype=bool).T  # earlier[j, i]: j < i
    beaten = np.asarray((le & (lt | earlier)).any(axis=0)).tolist()
    return [i for i, b in enumerate(beaten) if not b]
