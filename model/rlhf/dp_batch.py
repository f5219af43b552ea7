"""The largest data-parallel size a training-side role can run at: one rule, read by the
placement search's tables (:func:`optimizer.rlhf.tables._training_options` leaves such options
out) and by the evaluator's placement (:func:`interface.rlhf.faithful.evaluate_placement`
refuses them).

**A trainable role** (actor, critic) splits each optimizer update's ``train_batch`` sequences
(all of the step's without one) across its dp ranks: verl ``ActorRolloutRefWorker.__init__``
(``verl/workers/fsdp_workers.py``, b178a3cd5) divides ``ppo_mini_batch_size × rollout.n`` by
the dp size and asserts the result is above 0; OpenRLHF ``DeepspeedStrategy.__init__``
(``openrlhf/utils/deepspeed/deepspeed.py``, 3c3be6234) sets ``accumulated_gradient`` to
``train_batch_size × ring × tp // micro_train_batch_size // world_size``, 0 above that dp.
A rank past the update's sequences has no rollout to train on.

**A frozen role** (reference, reward) scores every sequence of the step once: verl dispatches
``compute_ref_log_prob`` with ``dispatch_dp_compute_data_proto``
(``verl/single_controller/base/decorator.py``), one chunk of the step's batch per dp rank
(``DataProto.chunk``, ``verl/protocol.py``); OpenRLHF's experience maker hands each role's
group the step's samples through ``RayActorGroup.async_run_method_batch``
(``openrlhf/trainer/ray/launcher.py``, 3c3be6234), which raises "Insufficient batch size" with
fewer samples than the group's dp. Its bound is the step's sequences, not the
update's: a train batch below the step's sequences does not narrow it.
"""

from __future__ import annotations

from trainplan.model.rlhf.spec import RLHFSpec

__all__ = ["DP_BATCH_SOURCE", "pass_sequences", "dp_refusal"]

DP_BATCH_SOURCE = (
    "verl ActorRolloutRefWorker.__init__ (fsdp_workers.py, b178a3cd5: ppo_mini_batch_size "
    "× n // dp > 0) and dispatch_dp_compute_data_proto; OpenRLHF DeepspeedStrategy "
    "accumulated_gradient (deepspeed.py) and RayActorGroup.async_run_method_batch (launcher.py, "
    "3c3be6234)"
)


def pass_sequences(spec: RLHFSpec, trainable: bool) -> int:
    """The sequences one pass of a role splits across its dp ranks (a count): an update's
    (``train_batch``, else all of the step's) for a trainable role, the step's for a frozen one
    (module docstring).

    Examples
    --------
    >>> from trainplan.scenarios.catalogue import get_model
    >>> spec = RLHFSpec(algorithm="grpo", policy=get_model("qwen2.5-7b").model, reward="rule",
    ...                 prompts=8, samples_per_prompt=4, prompt_tokens=1024,
    ...                 completion_tokens=1024, train_batch=8)
    >>> pass_sequences(spec, True), pass_sequences(spec, False)
    (8, 32)
    """
    return (spec.train_batch or spec.sequences) if trainable else spec.sequences


def dp_refusal(spec: RLHFSpec, trainable: bool, dp: int) -> str | None:
    """Why a role (trainable or not) cannot run at data-parallel size ``dp`` (a count), as
    the middle of a one-line refusal ("dp D, above the B sequences …: …"), or None where it
    can: ``dp`` above :func:`pass_sequences` leaves a rank with nothing to train on or score.

    Examples
    --------
    >>> from trainplan.scenarios.catalogue import get_model
    >>> spec = RLHFSpec(algorithm="grpo", policy=get_model("qwen2.5-7b").model, reward="rule",
    ...                 prompts=8, samples_per_prompt=4, prompt_tokens=1024,
    ...                 completion_tokens=1024, train_batch=8)
    >>> dp_refusal(spec, True, 8), dp_refusal(spec, False, 32)
    (None, None)
    >>> dp_refusal(spec, True, 16)
    'dp 16, above the 8 sequences an update trains on: a data-parallel rank would have no rollout'
    >>> dp_refusal(spec, False, 64)
    'dp 64, above the 32 sequences a step scores: a data-parallel rank would have none to score'
    """
    batch = pass_sequences(spec, trainable)
    if dp <= batch:
        return None
    if trainable:
        return (
            f"dp {dp:,}, above the {batch:,} sequences an update trains on: a data-parallel "
            "rank would have no rollout"
        )
    return (
        f"dp {dp:,}, above the {batch:,} sequences a step scores: a data-parallel rank would "
        "have none to score"
    )
