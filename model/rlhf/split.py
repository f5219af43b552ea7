"""Which roles may share a pool (:func:`pool_refusal`), and two rules for the rollout engine on a
pool without the actor (a *split* placement), read by :func:`model.rlhf.step.compose`, the
placement search's CP-SAT model (:mod:`optimizer.rlhf.cpsat`) and its exhaustive oracle
(:func:`optimizer.rlhf.search.objective_ns`):

* **OpenRLHF's pools** (``deepspeed``, :func:`openrlhf_refused`): OpenRLHF (OpenRLHF/OpenRLHF
  3c3be6234, ``openrlhf/cli/train_ppo_ray.py`` ``train``) puts two roles on the same GPUs only
  through a shared placement group, whose roles take ``num_gpus_per_actor=0.2`` of each bundle;
  without one every role's Ray actors take ``num_gpus_per_actor=1``, whole GPUs of their own.
  It makes such a group for the actor and the reference (``--train.colocate_actor_ref``), for
  the critic and the reward model (``--train.colocate_critic_reward``), or for every model
  (``--train.colocate_all``), and hands it to the vLLM engines only under ``colocate_all`` and
  not ``--train.async_enable`` (``pg if args.train.colocate_all and not
  args.train.async_enable else None``); otherwise ``create_vllm_engines``
  (``openrlhf/trainer/ray/vllm_engine.py``) packs the engines on a placement group of whole-GPU
  bundles of their own. So a pool of two or more roles is {actor, reference}, {critic, reward},
  or every role of the step — every role but the engine under one-step off-policy
  (``async_enable``). vLLM's sleep is forced off without ``colocate_all`` (``train_ppo_ray.py``
  ``if args.vllm.enable_sleep and not args.train.colocate_all``), so the engine sleeps between
  rollouts only where it shares its pool with every role.
* **One-step off-policy: the engine is alone on its pool** (:func:`engine_pool_refused`). The
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
  the scoring and training phases too (:func:`awake_floor`); so does an engine of OpenRLHF's
  apart from the actor in a synchronous step (:func:`awake_apart`), alone there by the first
  rule.
* **The NCCL weight receive** (every profile, :func:`model.rlhf.openrlhf.engine_receive_bytes`:
  OpenRLHF's model-update group, verl's one-step off-policy ``actor_rollout`` group): on a pool
  holding the engine but not the actor, every phase holds the model-update communicator, and
  the rollout phase's peak is at least the pool's held bytes, the awake engine's and the largest
  parameter's receive buffer (:func:`receive_peak`); on a pool holding the actor but not the
  engine, every phase holds the group's sending side (:func:`update_group`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from fractions import Fraction

from trainplan.model.rlhf.roles import RoleCost, Term
from trainplan.model.rlhf.spec import Role

__all__ = [
    "OPENRLHF_SHARED",
    "awake_apart",
    "awake_floor",
    "counted_terms",
    "ipc_sync",
    "engine_pool_refused",
    "openrlhf_refused",
    "pool_refusal",
    "receive_peak",
    "update_group",
    "receiving_engine",
    "split_peaks",
]


OPENRLHF_SHARED = (
    frozenset({Role.ACTOR, Role.REFERENCE}),
    frozenset({Role.CRITIC, Role.REWARD}),
)
"""The pools of two roles OpenRLHF makes a placement group for without ``--train.colocate_all``:
``--train.colocate_actor_ref`` and ``--train.colocate_critic_reward`` (module docstring)."""


def engine_pool_refused(roles: Collection[Role], off_policy: int) -> bool:
    """Whether a pool holding ``roles`` puts another role beside a one-step off-policy engine
    without the actor (module docstring).

    Examples
    --------
    >>> R = Role
    >>> engine_pool_refused({R.ROLLOUT, R.REFERENCE}, 1), engine_pool_refused({R.ROLLOUT}, 1)
    (True, False)
    >>> engine_pool_refused({R.ROLLOUT, R.ACTOR, R.REFERENCE}, 1)
    False
    >>> engine_pool_refused({R.ROLLOUT, R.REFERENCE}, 0)
    False
    """
    return (
        off_policy == 1
        and Role.ROLLOUT in roles
        and Role.ACTOR not in roles
        and len(set(roles) - {Role.ROLLOUT}) > 0
    )


def openrlhf_refused(pool: Collection[Role], step: Collection[Role], off_policy: int) -> bool:
    """Whether OpenRLHF cannot run the roles ``pool`` on one set of GPUs in a step of the roles
    ``step`` (module docstring): two or more roles that are neither a pair of
    :data:`OPENRLHF_SHARED` nor every role of the step (less the engine off-policy).

    Examples
    --------
    GRPO with a reward model: the engine beside the actor alone, or the reference beside the
    reward model, is refused; every role together, or the actor with the reference, is not.
    Off-policy the engine takes GPUs of its own, and the other roles may share one pool.

    >>> R = Role
    >>> step = (R.ROLLOUT, R.ACTOR, R.REFERENCE, R.REWARD)
    >>> openrlhf_refused({R.ROLLOUT, R.ACTOR}, step, 0), openrlhf_refused(step, step, 0)
    (True, False)
    >>> openrlhf_refused({R.REFERENCE, R.REWARD}, step, 0)
    True
    >>> openrlhf_refused({R.ACTOR, R.REFERENCE}, step, 0), openrlhf_refused({R.ROLLOUT}, step, 0)
    (False, False)
    >>> openrlhf_refused(step, step, 1), openrlhf_refused(step[1:], step, 1)
    (True, False)
    """
    roles = frozenset(pool)
    if len(roles) < 2 or roles in OPENRLHF_SHARED:
        return False
    return roles != frozenset(step) - ({Role.ROLLOUT} if off_policy else set())


def pool_refusal(
    pool: Collection[Role], step: Collection[Role], off_policy: int, openrlhf: bool
) -> str | None:
    """Why the roles ``pool`` cannot share one pool in a step of the roles ``step``, as the
    rest of a line that begins ``placement: pool N``; None where they can. The off-policy
    engine's rule (:func:`engine_pool_refused`), then, with ``openrlhf`` (the ``deepspeed``
    profile: :func:`awake_apart` of the step's roles), OpenRLHF's (:func:`openrlhf_refused`).

    >>> R = Role
    >>> step = (R.ROLLOUT, R.ACTOR, R.REFERENCE)
    >>> pool_refusal({R.ROLLOUT, R.ACTOR}, step, 0, False) is None
    True
    >>> print(pool_refusal({R.ROLLOUT, R.ACTOR}, step, 0, True))  # doctest: +ELLIPSIS
    puts rollout, actor on one set of GPUs, which OpenRLHF (deepspeed) does not: ...
    """
    names = ", ".join(str(r) for r in sorted(pool, key=list(Role).index))
    if engine_pool_refused(pool, off_policy):
        return (
            f"puts {names} beside a rollout engine without the actor, which stays awake and "
            "alone on its GPUs in one-step off-policy (OpenRLHF --train.async_enable, verl's "
            "off-policy recipes): use the actor's pool"
        )
    if not openrlhf or not openrlhf_refused(pool, step, off_policy):
        return None
    every = "every role but the engine" if off_policy else "every role, the engine asleep"
    return (
        f"puts {names} on one set of GPUs, which OpenRLHF (deepspeed) does not: it shares GPUs "
        "only as actor + reference (--train.colocate_actor_ref), critic + reward "
        f"(--train.colocate_critic_reward) or {every} (--train.colocate_all), and gives every "
        "other role and the rollout engine GPUs of their own, the engine awake "
        "(train_ppo_ray.py train, vllm_engine.py create_vllm_engines, 3c3be6234): place the "
        "roles in those sets (rlhf-plan searches only them)"
    )


def awake_apart(members: Sequence[RoleCost]) -> bool:
    """Whether the engine among ``members`` is OpenRLHF's (``deepspeed``), which never sleeps
    apart from the actor even in a synchronous step (vLLM's sleep is off without
    ``--train.colocate_all``): its :attr:`~model.rlhf.roles.RoleCost.awake_apart`.
    Of a step's roles, whether OpenRLHF's placement rule applies (:func:`pool_refusal`)."""
    return any(c.option.role is Role.ROLLOUT and c.awake_apart for c in members)


def receiving_engine(members: Sequence[RoleCost]) -> RoleCost | None:
    """The engine of a pool whose roles are ``members`` when it receives the weights over NCCL
    (the pool lacks the actor, and the engine has a receive buffer); None otherwise."""
    roles = {c.option.role: c for c in members}
    engine = roles.get(Role.ROLLOUT)
    if engine is None or Role.ACTOR in roles or not engine.receive_bytes:
        return None
    return engine


def ipc_sync(members: Sequence[RoleCost]) -> bool:
    """Whether a pool whose roles are ``members`` holds the engine and an actor with a sync
    transient (its ``sync_bytes``), so that the actor sends the engine its weights on the
    pool's GPUs: the condition of :func:`model.rlhf.step.sync_peak`."""
    roles = {c.option.role: c for c in members}
    actor = roles.get(Role.ACTOR)
    return Role.ROLLOUT in roles and actor is not None and bool(actor.sync_bytes)


def counted_terms(cost: RoleCost, members: Sequence[RoleCost]) -> tuple[Term, ...]:
    """``cost``'s terms less the weight-sync path its pool (roles ``members``) does not count
    (:attr:`model.rlhf.roles.Term.sync_path`): the actor's ``ipc`` terms where the pool holds
    no engine (:func:`ipc_sync`), and the engine's ``nccl`` receive terms where it is not the
    pool's receiving engine (:func:`receiving_engine`: the actor is beside it), and the actor's
    ``send`` terms where the pool holds the engine (:func:`update_group`), so what the
    report lists is what the pool's peaks add.

    Examples
    --------
    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> z, one = Fraction(0), Fraction(1)
    >>> nccl = (Term("receive", "rollout", one, "bytes", "", "nccl"),)
    >>> ipc = (Term("send", "rollout", one, "bytes", "", "ipc"),)
    >>> engine = RoleCost(RoleOption(Role.ROLLOUT, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, nccl,
    ...                   receive_bytes=one)
    >>> actor = RoleCost(RoleOption(Role.ACTOR, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, ipc,
    ...                  sync_bytes=one)
    >>> [len(counted_terms(c, [engine, actor])) for c in (engine, actor)]
    [0, 1]
    >>> len(counted_terms(engine, [engine])), len(counted_terms(actor, [actor]))
    (1, 0)
    """
    roles = {c.option.role for c in members}
    keep = {"": True, "ipc": ipc_sync(members), "nccl": receiving_engine(members) is cost,
            "send": Role.ROLLOUT not in roles}  # fmt: skip
    return tuple(t for t in cost.terms if keep[t.sync_path])


def update_group(members: Sequence[RoleCost], step: Collection[Role]) -> Fraction:
    """The model-update communicator a pool whose roles are ``members`` holds in every phase, of a
    step of the roles ``step``: the receiving engine's (:func:`receiving_engine`) or, on a pool
    with the actor but not the step's engine, the actor's sending side
    (:attr:`~model.rlhf.roles.RoleCost.send_resident_bytes`); 0 otherwise.

    Examples
    --------
    >>> from trainplan.model.rlhf.roles import RoleOption
    >>> z, one = Fraction(0), Fraction(1)
    >>> engine = RoleCost(RoleOption(Role.ROLLOUT, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, (),
    ...                   receive_bytes=one, receive_resident_bytes=Fraction(3))
    >>> actor = RoleCost(RoleOption(Role.ACTOR, 8, 8), z, z, z, z, 0.0, 0.0, 0.0, z, (),
    ...                  send_resident_bytes=Fraction(3))
    >>> step = (Role.ROLLOUT, Role.ACTOR)
    >>> [update_group(m, step) for m in ([engine], [actor], [engine, actor])]
    [Fraction(3, 1), Fraction(3, 1), Fraction(0, 1)]
    """
    engine = receiving_engine(members)
    if engine is not None:
        return engine.receive_resident_bytes
    roles = {c.option.role: c for c in members}
    actor = roles.get(Role.ACTOR)
    if actor is None or Role.ROLLOUT in roles or Role.ROLLOUT not in step:
        return Fraction(0)
    return actor.send_resident_bytes


def receive_peak(members: Sequence[RoleCost], held: Fraction) -> Fraction:
    """The pool's bytes while its engine receives a parameter: ``held`` (with
    :func:`update_group`), the awake engine's rollout bytes and the receive buffer; 0 where no
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
