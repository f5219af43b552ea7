"""Two rules for the rollout engine on a pool without the actor (a *split* placement), read by
:func:`model.rlhf.step.compose`, the placement search's CP-SAT model (:mod:`optimizer.rlhf.cpsat`)
and its exhaustive oracle (:func:`optimizer.rlhf.search.objective_ns`):

* **One-step off-policy: the engine is alone on its pool** (:func:`engine_pool_refused`); under
  ``deepspeed`` in a synchronous step too, where OpenRLHF keeps it awake (:func:`awake_apart`). The
  stacks behind the profiles never place another role beside an off-policy engine, and its
  engine never sleeps: OpenRLHF (OpenRLHF/OpenRLHF 3c3be6234, ``openrlhf/cli/train_ppo_ray.py``)
  asserts ``not args.vllm.enable_sleep`` under ``--train.async_enable`` and turns sleep off
  without ``--train.colocate_all``; its reference and reward models go on the actor's placement
  group or GPUs of their own, never the engine's. verl's one-step off-policy recipe
  (``recipe/one_step_off_policy``, and the fully-async recipe's main built on its workers) maps
  ``Role.RefPolicy`` and ``Role.RewardModel`` to the actor's resource pool and only
  ``Role.Rollout`` to the rollout pool. A frozen or trainable role there would work beside the
  awake engine's whole budget, which the step's rules (the engine's bytes in the rollout phase
  only) do not count, so such a placement is refused; the engine's pool holds its bytes in
  the scoring and training phases too (:func:`awake_floor`).
* **The NCCL weight receive** (``deepspeed``, :func:`model.rlhf.openrlhf.engine_receive_bytes`):
  on a pool holding the engine but not the actor, every phase holds the model-update
  communicator (:func:`receive_resident`), and the rollout phase's peak is at least the pool's
  held bytes, the awake engine's and the largest parameter's receive buffer
  (:func:`receive_peak`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from fractions import Fraction

from trainplan.model.rlhf.roles import RoleCost
from trainplan.model.rlhf.spec import Role

__all__ = [
    "awake_apart",
    "awake_floor",
    "engine_pool_refused",
    "receive_peak",
    "receive_resident",
    "receiving_engine",
    "split_peaks",
]


def engine_pool_refused(roles: Collection[Role], off_policy: int, awake: bool = False) -> bool:
    """Whether a pool holding ``roles`` breaks the rule of the module docstring: the engine
    without the actor and any other role, in one-step off-policy or where the engine never
    sleeps apart from the actor (``awake``: :func:`awake_apart`).

    Examples
    --------
    >>> R = Role
    >>> engine_pool_refused({R.ROLLOUT, R.REFERENCE}, 1), engine_pool_refused({R.ROLLOUT}, 1)
    (True, False)
    >>> engine_pool_refused({R.ROLLOUT, R.ACTOR, R.REFERENCE}, 1)
    False
    >>> engine_pool_refused({R.ROLLOUT, R.REFERENCE}, 0)
    False
    >>> engine_pool_refused({R.ROLLOUT, R.REFERENCE}, 0, awake=True)
    True
    """
    return (
        (off_policy == 1 or awake)
        and Role.ROLLOUT in roles
        and Role.ACTOR not in roles
        and len(set(roles) - {Role.ROLLOUT}) > 0
    )


def awake_apart(members: Sequence[RoleCost]) -> bool:
    """Whether the pool's engine never sleeps when the actor is elsewhere, even in a synchronous
    step: OpenRLHF's (``deepspeed``), which turns vLLM's sleep off without
    ``--train.colocate_all`` — the engines that receive over NCCL there (``receive_bytes``)."""
    return any(c.option.role is Role.ROLLOUT and c.receive_bytes for c in members)


def receiving_engine(members: Sequence[RoleCost]) -> RoleCost | None:
    """The engine of a pool whose roles are ``members`` when it receives the weights over NCCL
    (the pool lacks the actor, and the engine has a receive buffer); None otherwise."""
    roles = {c.option.role: c for c in members}
    engine = roles.get(Role.ROLLOUT)
    if engine is None or Role.ACTOR in roles or not engine.receive_bytes:
        return None
    return engine


def receive_resident(members: Sequence[RoleCost]) -> Fraction:
    """The model-update communicator such an engine holds in every phase (0: none receives)."""
    engine = receiving_engine(members)
    return Fraction(0) if engine is None else engine.receive_resident_bytes


def receive_peak(members: Sequence[RoleCost], held: Fraction) -> Fraction:
    """The pool's bytes while its engine receives a parameter: ``held`` (with
    :func:`receive_resident`), the awake engine's rollout bytes and the receive buffer; 0 where no
    engine receives.

    Examples
    --------
    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> z = Fraction(0)
    >>> engine = RoleCost(RoleOption(Role.ROLLOUT, 8, 8), z, Fraction(60), z, z, 0.0, 0.0, 0.0,
    ...                   z, (), receive_bytes=Fraction(3), receive_resident_bytes=Fraction(1))
    >>> actor = RoleCost(RoleOption(Role.ACTOR, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, ())
    >>> receive_peak([engine], Fraction(11)), receive_peak([engine, actor], Fraction(11))
    (Fraction(74, 1), Fraction(0, 1))
    """
    engine = receiving_engine(members)
    if engine is None:
        return Fraction(0)
    return held + engine.rollout_bytes + engine.receive_bytes


def awake_floor(members: Sequence[RoleCost], held: Fraction, off_policy: int) -> Fraction:
    """Every phase's least bytes on a pool whose engine never sleeps (one-step off-policy, the
    engine without the actor, module docstring): ``held`` and the engine's rollout bytes; 0
    otherwise (the engine sleeps outside the rollout).

    Examples
    --------
    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> z = Fraction(0)
    >>> engine = RoleCost(RoleOption(Role.ROLLOUT, 8, 8), z, Fraction(60), z, z, 0.0, 0.0, 0.0,
    ...                   z, ())
    >>> awake_floor([engine], Fraction(1), 1), awake_floor([engine], Fraction(1), 0)
    (Fraction(61, 1), Fraction(0, 1))
    """
    roles = {c.option.role: c for c in members}
    engine = roles.get(Role.ROLLOUT)
    if engine is None or Role.ACTOR in roles or not (off_policy == 1 or awake_apart(members)):
        return Fraction(0)
    return held + engine.rollout_bytes


def split_peaks(
    members: Sequence[RoleCost], held: Fraction, peaks: Sequence[Fraction], off_policy: int
) -> tuple[Fraction, Fraction, Fraction]:
    """A pool's three phase peaks ``peaks`` with this module's rules: the rollout's at least
    :func:`receive_peak`, every phase's at least :func:`awake_floor`."""
    awake = awake_floor(members, held, off_policy)
    rollout, scoring, training = peaks
    return (
        max(rollout, receive_peak(members, held), awake),
        max(scoring, awake),
        max(training, awake),
    )
