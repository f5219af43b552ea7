"""The roles of one RLHF step, the phases each works in, and the model FLOPs of each phase: one
rule that the textbook accounting (:mod:`model.rlhf.shares`: its networks and FLOP shares) and the
faithful one (:mod:`model.rlhf.spec`: its roles, which the placement search in
:mod:`optimizer.rlhf` prices phase by phase) both read.

Roles (OpenRLHF's and verl's, Hu et al. 2024 arXiv 2405.11143; Sheng et al. 2025, HybridFlow,
arXiv 2409.19256): the rollout engine generates with the policy's weights; the actor (trained)
recomputes the rollouts' log-probs in the scoring phase — the PPO ratio's denominator, the
"old log-probs" — unless the engine's are used (``old_log_prob=False``); the critic (PPO,
Schulman et al. 2017; trained) scores values; the reference (frozen) scores log-probs for the KL
term; the reward model (frozen; none with a rule-based reward, as DeepSeek-R1) scores the
rollouts. GRPO (Shao et al. 2024, DeepSeekMath arXiv 2402.03300 §4.1) has no critic. DPO
(Rafailov et al. 2023) has no rollout: its policy's forward over the chosen and rejected
sequences is part of its training, and the reference scores them.

The old log-probs: verl's ``RayPPOTrainer.fit`` (``verl/trainer/ppo/ray_trainer.py``, b178a3cd5)
recomputes them with ``_compute_old_log_prob`` → ``actor_rollout_wg.compute_log_prob`` (a
no-grad forward, ``dp_actor.compute_log_prob``) unless ``algorithm.rollout_correction.bypass_mode`` sets
them to the engine's ``rollout_log_probs``; OpenRLHF's ``RemoteExperienceMaker.make_experience``
(``openrlhf/trainer/ppo_utils/experience_maker.py``, 3c3be6234) always runs the actor's forward.

FLOPs (Kaplan et al. 2020 §2.1: ``2·N`` per token forward, ``6·N`` forward and backward, ``N``
the parameters a token passes through — a mixture of experts' active ones): rollout ``2·N`` per
token of prompt and completion (prefill and decode), scoring ``2·N`` per token by each role that
scores, training ``6·N`` per token per epoch by each trainable role. Recomputation of
activations is hardware, not model, FLOPs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TypeVar

from trainplan.model.errors import InputError
from trainplan.model.frameworks import Framework
from trainplan.model.model_spec import ModelSpec
from trainplan.model.value_head import value_head_arch

__all__ = ["PHASES", "FLOPS_PER_TOKEN", "StepRole", "step_roles", "phase_flops", "value_head_model"]

PHASES = ("rollout", "scoring", "training")
"""The phases of a step, in order."""

FLOPS_PER_TOKEN = {"rollout": 2, "scoring": 2, "training": 6}
"""Model FLOPs per token per parameter a token passes through, by phase (Kaplan et al. 2020
§2.1: a forward ``2·N``, a forward and backward ``6·N``); training's once per epoch."""

N = TypeVar("N", int, Fraction)


@dataclass(frozen=True, slots=True)
class StepRole:
    """One role of a step: its name, whose weights it runs, whether it trains, whether its
    forward ends in the vocabulary's logits, and the phases it works in."""

    role: str
    """``rollout``, ``actor``, ``critic``, ``reference``, ``reward`` (PPO, GRPO); ``policy``,
    ``reference`` (DPO)."""
    weights: str
    """``policy``: the policy's network (rollout, actor, reference, DPO's policy); ``reward``:
    the reward model's, which the critic starts from."""
    trainable: bool
    """Trained (an optimizer update each step) or frozen."""
    log_probs: bool
    """Its forward ends in the vocabulary's logits (the policy's network); False for a value
    head (critic, reward)."""
    phases: tuple[str, ...]
    """The phases it works in (:data:`PHASES`)."""


def step_roles(
    algorithm: str, reward: str = "model", old_log_prob: bool = True
) -> tuple[StepRole, ...]:
    """The roles of one ``algorithm`` step (module docstring), in order: rollout, actor,
    [critic], reference, [reward]; DPO's policy and reference.

    Parameters
    ----------
    algorithm : {"ppo", "grpo", "dpo"}
    reward : {"model", "rule"}
        A reward model, or a rule (no network); ignored by DPO.
    old_log_prob : bool
        The actor recomputes the old log-probs in the scoring phase (verl's and OpenRLHF's
        default); False: the engine's are used (verl's ``bypass_mode``). Ignored by DPO.

    Raises
    ------
    InputError
        An algorithm or reward not listed.

    Examples
    --------
    >>> [(r.role, r.phases) for r in step_roles("grpo", "rule", old_log_prob=False)]
    [('rollout', ('rollout',)), ('actor', ('training',)), ('reference', ('scoring',))]
    """
    algo, kind = str(algorithm).lower(), str(reward).lower()
    if algo not in ("ppo", "grpo", "dpo"):
        raise InputError(f"algorithm: {algorithm!r} is not one of ppo, grpo, dpo")
    if kind not in ("model", "rule"):
        raise InputError(f"reward: {reward!r} is not one of model, rule")
    reference = StepRole("reference", "policy", False, True, ("scoring",))
    if algo == "dpo":
        return (StepRole("policy", "policy", True, True, ("training",)), reference)
    actor = ("scoring", "training") if old_log_prob else ("training",)
    roles = [
        StepRole("rollout", "policy", False, True, ("rollout",)),
        StepRole("actor", "policy", True, True, actor),
    ]
    if algo == "ppo":
        roles.append(StepRole("critic", "reward", True, False, ("scoring", "training")))
    roles.append(reference)
    if kind == "model":
        roles.append(StepRole("reward", "reward", False, False, ("scoring",)))
    return tuple(roles)


def phase_flops(
    roles: Iterable[StepRole],
    active: Mapping[str, N],
    sequences: int,
    tokens_per_sequence: int,
    epochs: int = 1,
) -> dict[str, dict[str, N]]:
    """Model FLOPs of one step by phase and role: :data:`FLOPS_PER_TOKEN` × the role's
    parameters × the step's tokens (× ``epochs`` in training), for each phase the role works in.

    Parameters
    ----------
    roles : StepRole
        The step's roles (:func:`step_roles`).
    active : mapping of ``weights`` to a count
        Parameters a token passes through, by :attr:`StepRole.weights` (``policy``, ``reward``):
        a mixture of experts' active parameters, all of a dense network.
    sequences : int
        Sequences of the step: prompts × samples per prompt (DPO: prompts × 2, chosen and
        rejected).
    tokens_per_sequence : int
        Prompt + completion tokens.
    epochs : int
        Passes of the update over the step's sequences.

    Raises
    ------
    InputError
        ``epochs`` below 1.

    Examples
    --------
    GRPO with a rule reward, ``N = 1``, one 1-token sequence: rollout 2, scoring 2 (reference) +
    2 (the actor's old log-probs), training 6; with the engine's log-probs the actor does not
    score. DPO: the reference scores, the policy trains.

    >>> phase_flops(step_roles("grpo", "rule"), {"policy": 1}, 1, 1)
    {'rollout': {'rollout': 2}, 'scoring': {'actor': 2, 'reference': 2}, 'training': {'actor': 6}}
    >>> phase_flops(step_roles("grpo", "rule", False), {"policy": 1}, 1, 1)["scoring"]
    {'reference': 2}
    >>> phase_flops(step_roles("dpo"), {"policy": 1}, 1, 1)
    {'rollout': {}, 'scoring': {'reference': 2}, 'training': {'policy': 6}}
    """
    if epochs < 1:
        raise InputError(f"epochs: {epochs} must be at least 1")
    tokens = sequences * tokens_per_sequence
    out: dict[str, dict[str, N]] = {phase: {} for phase in PHASES}
    for r in roles:
        for phase in r.phases:
            times = epochs if phase == "training" else 1
            out[phase][r.role] = FLOPS_PER_TOKEN[phase] * active[r.weights] * tokens * times
    return out


def value_head_model(model: ModelSpec, framework: Framework | str) -> ModelSpec:
    """``model`` as ``framework``'s RLHF stack builds a critic or reward model (the roles of
    :func:`step_roles` whose weights are ``reward``): a value head in place of the LM head
    (:func:`model.value_head.value_head_arch`), its parameters counted from the dimensions (a
    declared size is the LM's). Raises ValueError for an unknown framework.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> policy = get_model("qwen2.5-7b").model
    >>> from trainplan.model.params import count_params
    >>> count_params(policy.arch).total - count_params(value_head_model(policy, "megatron").arch).total
    544993791
    """
    assert model.arch is not None
    return replace(model, arch=value_head_arch(model.arch, framework), num_params_declared=None)
