"""One-step off-policy's step time, with the weight sync on both sides.

Under one-step off-policy the engine generates step k+1's rollouts while the other pool scores
and trains on step k's; between the two, the trainer sends the engine its updated weights, and
both sides wait for it:

* verl (volcengine/verl b178a3cd5, ``verl/experimental/one_step_off_policy/ray_trainer.py``
  ``OneStepOffRayTrainer.fit``): each step waits for the previous generation, then under the
  ``sync_rollout_weights`` timer calls ``sync_rollout_weights`` — ``self.actor_wg.
  sync_rollout_weights()`` and ``ray.get(self.rollout_wg.sync_rollout_weights())`` — and only
  then launches the next generation (``_async_gen_next_batch``) and scores and trains. The
  workers' ``sync_rollout_weights`` (``fsdp_workers.py`` ``DetachSync``,
  ``megatron_workers.py``) make each tensor whole (``full_tensor()``) and broadcast it from
  global rank 0 over the ``actor_rollout`` group of every actor and rollout rank, one tensor
  at a time.
* OpenRLHF (OpenRLHF/OpenRLHF 3c3be6234, ``openrlhf/trainer/ppo_trainer.py``
  ``BasePPOTrainer.train_step``, which ``--async_train``'s ``PPOTrainerAsync`` runs): after
  ``ppo_train`` the trainer calls ``broadcast_to_vllm`` and waits for it (``ray.get`` on the
  actor group) before it takes the next batch.

So a step is ``sync + max(R, S + T)``: R the generation, S and T the scoring and training
phases. The engine's pool already counts the placement's sync in its rollout phase
(:func:`model.rlhf.sync_time.placement_sync_seconds`, added by :func:`model.rlhf.step.compose`),
so the step is
``max(max_pool Σ_phase W, W(scoring) + W(training) + sync)``: the trainer's chain carries the
sync too. On one shared pool (colocated) the pool's own sum already holds it, and the step is
the synchronous one.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["off_policy_seconds"]


def off_policy_seconds(busy: Sequence[Sequence[float]], sync_s: float) -> float:
    """One-step off-policy's step from each pool's busy seconds per phase (rows: pools; columns:
    rollout, scoring, training) and the engine's weight sync ``sync_s`` (the module docstring):
    ``max(max_pool Σ_phase W, max_pool W(scoring) + max_pool W(training) + sync_s)``.

    Examples
    --------
    Rollout 70 s on its own pool (its 0.5 s sync inside), scoring 10 and training 40 on the
    other: ``0.5 + max(69.5, 50) = 70``. With training 69.5 s the trainer's chain sets the step:
    ``0.5 + max(69.5, 79.5) = 80``, not 79.5.

    >>> off_policy_seconds([[70, 0, 0], [0, 10, 40]], 0.5)
    70
    >>> off_policy_seconds([[70, 0, 0], [0, 10, 69.5]], 0.5)
    80.0
    """
    phase = [max(row[k] for row in busy) for k in range(3)]
    return max(max(sum(row) for row in busy), phase[1] + phase[2] + sync_s)
