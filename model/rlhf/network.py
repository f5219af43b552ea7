"""The cost of a training or scoring RLHF role (actor, critic, reference, reward): ``evaluate()``
of its layout and the RLHF logits terms — the rules and their sources are in
:mod:`model.rlhf.roles`; :func:`model.rlhf.costs.role_cost` calls :func:`network_cost`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from trainplan.model.errors import InputError, LayoutError
from trainplan.model.estimate import Estimate, StageMemory
from trainplan.model.frameworks import Framework
from trainplan.model.hardware import DeviceSpec
from trainplan.model.layout import Layout, Recompute
from trainplan.model.mechanisms import Mechanism
from trainplan.model.offload import NO_OFFLOAD, Offload, check_offload
from trainplan.model.rlhf.forward_set import scoring_forward_bytes
from trainplan.model.rlhf.logits import LogitsPass, PassLogits, old_log_prob_pass, pass_logits
from trainplan.model.rlhf.openrlhf import actor_update_group, check_split_count, idle_swap
from trainplan.model.rlhf.packing import SPLIT_SOURCE
from trainplan.model.rlhf.role_time import (
    SCORING_TIME_SOURCE,
    forward_microbatch_s,
    forward_s,
    microbatch_s,
)
from trainplan.model.rlhf.roles import (
    OFFLOAD_SOURCE,
    Evaluator,
    RoleCost,
    RoleOption,
    Term,
    check_training_tp,
    resident_of,
    resident_terms,
    rlhf_mechanism,
)
from trainplan.model.rlhf.spec import RLHFSpec, Role, RoleSpec
from trainplan.model.rlhf.step import role_process
from trainplan.model.rlhf.verl_fsdp1 import grads_term, held_state, root_unit_extra, root_unit_terms
from trainplan.model.rlhf.verl_sync import role_sync
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.peak import fit_total, peak_over_phases

__all__ = ["network_cost", "seconds_floor"]

_FORWARD_SOURCE = (
    "one layer's live tensors under torch.no_grad (model.rlhf.forward_set: HF modeling_llama "
    "LlamaDecoderLayer/LlamaMLP.forward; Megatron-Core TransformerLayer/MLP.forward); the "
    "larger of it and the logits on the last stage"
)

SHARED_GROUPS = "megatron-core"
""":attr:`RoleCost.groups` of every role under the ``megatron`` profile. verl runs the roles
of a resource pool in one process per GPU (``RayPPOTrainer.init_workers`` fuses each pool's
workers with ``create_colocated_worker_cls``, ``verl/trainer/ppo/ray_trainer.py``;
``WorkerDict``, ``verl/single_controller/ray/base.py``), and its Megatron workers
(``ActorRolloutRefWorker``, ``CriticWorker``, ``RewardModelWorker`` in
``verl/workers/megatron_workers.py``) call ``mpu.initialize_model_parallel`` only when
``torch.distributed`` is not yet initialised: the first role's tp and pp make the groups every
role of the pool then uses (the code's comment: different parallel strategies need separate
resource pools)."""


def _on_stack(framework: Framework, cost: RoleCost) -> RoleCost:
    """``cost`` with the process groups and the process its role has under ``framework``'s stack
    (:data:`SHARED_GROUPS`, :func:`model.rlhf.step.role_process`)."""
    groups = SHARED_GROUPS if framework is Framework.MEGATRON else ""
    return replace(cost, groups=groups, process=role_process(framework))


def _batch(sequences: int, b: int, dp: int) -> int:
    """Sequences rounded up to whole micro-batches on every dp rank (the busiest rank's share)."""
    return math.ceil(sequences / (b * dp)) * b * dp


def _layout(spec: RLHFSpec, opt: RoleOption, recompute: Recompute) -> Layout:
    return Layout(
        dp=opt.dp,
        tp=opt.tp,
        pp=opt.pp,
        framework=spec.framework,
        zero_stage=spec.zero_stage or 1,
        recompute=recompute,
        micro_batch_size=spec.micro_batch_sequences,
    )


def seconds_floor(spec: RLHFSpec, cost: RoleCost, dp: int) -> float:
    """A lower bound on the seconds, over all its phases, of ``cost``'s role at the same tp, pp
    and offload on ``dp`` ranks: its micro-batches per rank there (:func:`_batch`) × the
    per-micro-batch seconds (``cost.microbatch_s``, which dp does not change) — a scoring
    forward's (:func:`model.rlhf.role_time.forward_microbatch_s`), each update's step at least
    its compute (``compute_and_pipeline_s ≥ compute_s``). Bubbles, traffic, the optimizer and
    offload only add. 0 for the engine.

    Examples
    --------
    The scoring forward at 0.5 s per micro-batch of 3 sequences, 16,384 sequences on 512 ranks:
    ⌈16,384 / 1,536⌉ = 11 micro-batches, 11 × 0.5 = 5.5 s (a frozen role: no update).
    """
    scoring_mb, training_mb = cost.microbatch_s
    b = spec.micro_batch_sequences
    floor = 0.0
    if "scoring" in cost.phases:
        floor += _batch(spec.sequences, b, dp) // (b * dp) * scoring_mb
    if "training" in cost.phases:
        updates = spec.epochs * spec.updates_per_epoch
        floor += (
            updates * (_batch(spec.train_batch or spec.sequences, b, dp) // (b * dp)) * training_mb
        )
    return floor


def _loss_over(acts: Any) -> Fraction:
    """What evaluate()'s loss adds to a last stage's peak: its working set beyond the layers'
    backward phase (:attr:`model.terms.activations.StageActivations.loss_over_bytes`), less
    the output layer's bytes the layers' backward phase does not hold
    (``output_layer_freed_bytes``; the FP32 logits among them are taken off with the rest of
    evaluate()'s loss); 0 for a size-only model."""
    if acts is None:
        return Fraction(0)
    return Fraction(acts.loss_over_bytes - acts.output_layer_freed_bytes)


@dataclass(frozen=True)
class _Held:
    """What a role keeps through the step and what its update adds: each stage's state bytes
    (``per_stage``), the busiest's (``held_bytes``), host bytes, the update's seconds and bytes
    above ``held_bytes`` and ``resident_bytes`` (0 for a frozen role), terms, per-micro-batch
    compute (:func:`model.rlhf.role_time.microbatch_s`), bytes held in every phase
    (:func:`model.rlhf.roles.resident_of`), what idle offload leaves on the GPU (``kept_bytes``: the BF16 weights under
    ``deepspeed``) and the busiest stage's weights and gradients (:mod:`model.rlhf.openrlhf`)."""

    per_stage: list[Fraction]
    held_bytes: Fraction
    host_bytes: Fraction
    training_s: float
    training_bytes: Fraction
    terms: list[Term]
    microbatch_s: float
    resident_bytes: Fraction = Fraction(0)
    kept_bytes: Fraction = Fraction(0)
    weights_bytes: Fraction = Fraction(0)
    gradients_bytes: Fraction = Fraction(0)


def _verl_fsdp1(spec: RLHFSpec) -> bool:
    """Whether the update runs FSDP1 (:attr:`model.specs.TrainingSpec.flat_parameters`, its
    copies around the collectives): under ``fsdp2``, verl's workers, whose default ``strategy:
    fsdp`` is ``FullyShardedDataParallel`` (:data:`model.rlhf.roles.VERL_FSDP_SOURCE`)."""
    return spec.framework is Framework.FSDP2


def _training_estimate(
    spec: RLHFSpec, rs: RoleSpec, opt: RoleOption, evaluate: Evaluator, s: int
) -> tuple[Estimate, Offload]:
    """``evaluate()`` of the update's layout at sequence length ``s``, with CPU Adam when the
    option offloads the optimizer; under ``deepspeed`` without Megatron-DeepSpeed's TorchScript
    residual masks (``bias_dropout_fusion`` false: OpenRLHF's Hugging Face models drop eagerly).

    CPU Adam is model.offload's mechanism, applied by evaluate(): the optimizer state and its
    step leave the GPU, the host holds them with an FP32 gradient buffer, and the step time gains
    the host-link transfers and the CPU Adam step (TimeTerms.offload_s). A framework that cannot
    offload the optimizer alone is refused (check_offload's rule, which evaluate() applies too):
    a LayoutError, as any illegal layout. Under ``fsdp2`` the run is verl's default FSDP1
    (:func:`_verl_fsdp1`)."""
    b = spec.micro_batch_sequences
    offload = Offload(optimizer=Fraction(1)) if opt.offload == "optimizer" else NO_OFFLOAD
    try:
        check_offload(spec.framework, spec.zero_stage or 1, offload)
    except LayoutError:  # the rule is model.offload's; the advice is this tab's
        raise LayoutError(
            f"offload: {rs.role}=optimizer — {spec.framework} ZeRO-{spec.zero_stage} has no "
            "optimizer-only offload (model.offload.check_offload: FSDP2's CPUOffloadPolicy "
            "moves the parameters too); use idle, or `framework` megatron or deepspeed"
        ) from None
    train_est = evaluate(
        rs.model,
        TrainingSpec(
            seq_len=s, global_batch_size=_batch(spec.train_batch or spec.sequences, b, opt.dp),
            offload=offload, bias_dropout_fusion=spec.framework is not Framework.DEEPSPEED,
            flat_parameters=_verl_fsdp1(spec),
        ),
        _layout(spec, opt, spec.recompute),
    )  # fmt: skip
    return train_est, offload


def _state_terms(
    spec: RLHFSpec,
    est: Estimate,
    offload: Offload,
    mech: Mechanism,
    tokens: int,
    factor: Fraction,
    removed: Fraction,
) -> list[Term]:
    """A trainable role's bytes term by term: weights, gradients, the optimizer state (or what
    the host holds for it), the activations at the fullest micro-batch's ``tokens`` (evaluate()'s
    × ``factor``, :func:`_extras`; on the last stage less ``removed``, evaluate()'s FP32 logits
    and loss working set, which the RLHF loss replaces: the figure the fit counts)."""
    state = est.peak.state
    last = len(est.stages) - 1
    terms = [
        Term("weights", "held", state.weights_bytes, "bytes", mech.source),
        grads_term(spec.framework, state.gradients_bytes, mech.source),
    ]
    if offload.active:
        name = "optimizer state + FP32 gradient buffer (offloaded)"
        terms.append(Term(name, "host", est.host_bytes, "bytes", OFFLOAD_SOURCE))
    else:
        terms.append(Term("optimizer state", "held", state.optimizer_bytes, "bytes", mech.source))
    acts = est.peak.activations
    if acts is not None:
        terms.append(
            Term(
                f"activations ({spec.recompute} recompute, {tokens:,}-token micro-batch)",
                "training",
                factor * (acts.total_bytes - (removed if est.peak.stage == last else 0)),
                "bytes",
                "Korthikanti et al. 2022 term by term (model.activations); evaluate()",
            )
        )
    return terms + root_unit_terms(est, True)  # verl's FSDP1 root unit


def _logits_terms(lg: PassLogits) -> list[Term]:
    """The update's logits and the transient beside them (:mod:`model.rlhf.logits`)."""
    return [
        Term("logits (update)", "training", lg.logit, "bytes", lg.source),
        Term("log-prob transient beside them (update)", "training", lg.temp, "bytes", lg.source),
    ]


def _fit(st: StageMemory, extra: Fraction) -> Fraction:
    """Bytes an update's stage ``st`` must find in the GPU: the search's fit figure
    (:func:`model.terms.peak.fit_total` — the allocated peak over both phases, the side
    streams' pools, the communicators) with ``extra`` activation bytes (the RLHF loss's logits
    in place of evaluate()'s, on the last stage)."""
    acts = (st.activations.total_bytes if st.activations else 0) + extra
    allocated = peak_over_phases(
        st.state.backward_bytes, acts, st.state.optimizer_step_bytes, st.persistent_buffers_bytes
    )
    return Fraction(fit_total(allocated, st.stream_pool_bytes, st.communicator_bytes))


def _update_time(spec: RLHFSpec, train_est: Estimate, offload: Offload) -> tuple[float, list[Term]]:
    """The updates' seconds (``epochs × updates_per_epoch`` step times of ``train_est``) and
    their terms (with optimizer offload's share)."""
    if train_est.step_s is None or train_est.time_terms is None:
        raise InputError("rlhf: step time needs every axis's link bandwidth")
    updates = spec.epochs * spec.updates_per_epoch
    training_s = updates * train_est.step_s
    terms = [
        Term(
            f"training ({spec.epochs} epoch(s) × {spec.updates_per_epoch} update(s))",
            "training",
            training_s,
            "s",
            "evaluate() step time of the layout (model.timing), 6N per token per epoch",
        )
    ]
    if offload.active:
        terms.append(
            Term(
                "of which optimizer offload (host link + CPU Adam)",
                "training",
                updates * train_est.time_terms.offload_s,
                "s",
                OFFLOAD_SOURCE,
            )
        )
    return training_s, terms


def _extras(est: Estimate, factor: Fraction, removed: Fraction, out: Fraction) -> list[Fraction]:
    """Each stage's bytes beyond evaluate()'s activations for its fit (:func:`_fit`): its
    layers' activations × ``factor`` (the fullest micro-batch's tokens ÷ evaluate()'s b × s,
    :meth:`model.rlhf.spec.RLHFSpec.micro_batch_peak_tokens`; rows per token, Korthikanti et al.
    2022), verl's FSDP1 root unit (:func:`model.rlhf.verl_fsdp1.root_unit_extra`) and, on the
    last stage, evaluate()'s loss (``removed``) replaced by the RLHF loss's ``out``."""
    last, extras, root = len(est.stages) - 1, [], root_unit_extra(est, True)
    for i, st in enumerate(est.stages):
        gone = removed if i == last else Fraction(0)
        acts = Fraction(st.activations.total_bytes if st.activations else 0) - gone
        extras.append((factor - 1) * acts + (out - gone if i == last else 0) + root)
    return extras


def _trainable(
    spec: RLHFSpec,
    rs: RoleSpec,
    opt: RoleOption,
    evaluate: Evaluator,
    s: int,
    mech: Mechanism,
) -> _Held:
    """An actor's or critic's state and update: ``evaluate()`` of the update's layout, each
    stage's fit figure (:func:`_fit`) with its activations at the fullest micro-batch's tokens
    and the last one's with the update's logits (:mod:`model.rlhf.logits`, the update pass, at
    the same tokens) instead of evaluate()'s loss, verl's FSDP1 root too (:func:`_extras`), and
    ``epochs × updates_per_epoch`` step times (at evaluate()'s b × s: the same tokens)."""
    arch = rs.model.arch
    assert arch is not None
    b = spec.micro_batch_sequences
    logits = pass_logits(
        spec, spec.micro_batch_peak_tokens(opt.tp), arch.vocab_size, opt.tp, LogitsPass.UPDATE
    )
    counted = Fraction(4 * b * s * arch.vocab_size, opt.tp)  # evaluate()'s FP32 logits
    train_est, offload = _training_estimate(spec, rs, opt, evaluate, s)
    last = len(train_est.stages) - 1
    # the RLHF loss replaces evaluate()'s: its FP32 logits and its working set beyond the recompute
    # transient (StageActivations.loss_transient_bytes); a value head's is evaluate()'s own
    loss_over = _loss_over(train_est.stages[last].activations)
    removed = counted + loss_over if rs.log_probs else Fraction(0)
    tokens = spec.micro_batch_peak_tokens(opt.tp)
    factor = Fraction(tokens, b * s)
    out = (logits.logit + logits.temp) if rs.log_probs else Fraction(0)
    extras = _extras(train_est, factor, removed, out)
    held = [held_state(spec.framework, st.state) for st in train_est.stages]
    train_peak = [_fit(st, extras[i]) for i, st in enumerate(train_est.stages)]
    held_b = max(held)
    terms = _state_terms(spec, train_est, offload, mech, tokens, factor, removed)
    if rs.log_probs:
        terms += _logits_terms(logits)
    training_s, time_terms = _update_time(spec, train_est, offload)
    terms += time_terms
    resident = resident_of(train_est)
    training_b = max(train_peak) - held_b - resident
    busiest = train_est.stages[held.index(held_b)].state
    return _Held(
        held,
        held_b,
        train_est.host_bytes,
        training_s,
        training_b,
        terms,
        microbatch_s(train_est),
        resident,
        busiest.weights_bytes if spec.framework is Framework.DEEPSPEED else Fraction(0),
        busiest.weights_bytes,
        busiest.gradients_bytes,
    )


def _frozen(opt: RoleOption, score_est: Estimate, mech: Mechanism) -> _Held:
    """A reference's or reward model's BF16 weights: whole on every rank, or ÷ dp (experts ÷
    their shard degree) under ZeRO-3 / full sharding; no update."""
    held = []
    for st in score_est.stages:
        p_dense, p_exp = st.dense_params, st.expert_params
        if mech.weights_full:
            held.append(2 * (p_dense + p_exp))
        else:
            held.append(2 * p_dense / opt.dp + 2 * p_exp / score_est.layout.expert_shard_degree)
    held_b = max(held)
    how = "whole" if mech.weights_full else "÷ dp (ZeRO-3 / full sharding)"
    terms = [Term(f"BF16 weights ({how})", "held", held_b, "bytes", mech.source)]
    resident = resident_of(score_est)
    return _Held(
        held, held_b, Fraction(0), 0.0, Fraction(0), terms, 0.0, resident, weights_bytes=held_b
    )


def _scoring(
    spec: RLHFSpec,
    rs: RoleSpec,
    score_est: Estimate,
    held: _Held,
) -> tuple[Fraction, float, list[Term]]:
    """The scoring forward's bytes above ``held``'s state and resident bytes (gathered layers;
    one layer's no-grad working set, :func:`model.rlhf.forward_set.scoring_forward_bytes`, or on
    the last stage the logits and their transient (:mod:`model.rlhf.logits`: the reference's
    pass, or the actor's old-log-prob pass) when the role returns log-probs, the larger;
    each stage with its own bytes held in both phases, :func:`model.rlhf.roles.resident_of`, as
    the update's fit has them), all at the fullest scoring micro-batch
    (:meth:`model.rlhf.spec.RLHFSpec.scoring_peak_tokens` at the role's dp, which a placement
    keeps the actor's where it matters, :func:`model.rlhf.openrlhf.split_refusal`), its seconds and
    terms; 0 and none for a role that does not score."""
    if "scoring" not in rs.phases:
        return Fraction(0), 0.0, []
    last = len(score_est.stages) - 1
    lay = score_est.layout
    arch = rs.model.arch
    assert arch is not None
    tokens = spec.scoring_peak_tokens(lay.dp, lay.tp)
    pass_ = old_log_prob_pass(spec.framework) if rs.trainable else LogitsPass.REFERENCE
    logits = pass_logits(spec, tokens, arch.vocab_size, lay.tp, pass_)
    out = (logits.logit + logits.temp) if rs.log_probs else Fraction(0)
    beta = score_est.training.activation_bytes
    layer = scoring_forward_bytes(arch, spec.framework, tokens, lay.tp, lay.sp, beta)
    peaks = [
        held.per_stage[i]
        + st.state.gathered_bytes
        + root_unit_extra(score_est, False)  # verl's FSDP1 root
        + max(out if i == last else Fraction(0), layer)
        + st.both_phases_bytes
        for i, st in enumerate(score_est.stages)
    ]
    scoring_b = max(peaks) - held.held_bytes - held.resident_bytes
    scoring_s = forward_s(score_est)
    what = "old log-probs" if rs.role is Role.ACTOR else "forward"
    terms = [
        Term(f"scoring {what} (2N per token)", "scoring", scoring_s, "s", SCORING_TIME_SOURCE),
        Term(
            "forward working set (one layer, no grad)", "scoring", layer, "bytes", _FORWARD_SOURCE
        ),
    ]
    if rs.log_probs:
        terms.append(
            Term("logits + log-prob transient (scoring)", "scoring", out, "bytes", logits.source)
        )
    if spec.split_tokens(lay.dp, lay.tp):
        name = f"scoring micro-batch tokens (rollouts split at the actor's dp {lay.dp})"
        terms.append(Term(name, "scoring", tokens, "tokens", SPLIT_SOURCE))
    return scoring_b, scoring_s, terms + root_unit_terms(score_est, False)


def _scoring_estimate(
    spec: RLHFSpec, rs: RoleSpec, opt: RoleOption, evaluate: Evaluator, s: int
) -> Estimate:
    """``evaluate()`` of the scoring forward's layout: the step's sequences at length ``s``, b a
    micro-batch, no recomputation; a frozen role runs no backward (``runs_backward``)."""
    batch = _batch(spec.sequences, spec.micro_batch_sequences, opt.dp)
    return evaluate(
        rs.model,
        TrainingSpec(seq_len=s, global_batch_size=batch, runs_backward=rs.trainable),
        _layout(spec, opt, Recompute.NONE),
    )


def _idle(
    spec: RLHFSpec, rs: RoleSpec, opt: RoleOption, device: DeviceSpec, held: _Held
) -> tuple[Fraction, Fraction | None, tuple[float, float], list[Term]]:
    """Idle offload's figures (:func:`model.rlhf.openrlhf.idle_swap`); none without it."""
    if opt.offload != "idle":
        return Fraction(0), None, (0.0, 0.0), []
    state = (held.held_bytes, held.kept_bytes, held.weights_bytes, held.gradients_bytes)
    return idle_swap(spec, rs, device, state)


def network_cost(
    spec: RLHFSpec, rs: RoleSpec, opt: RoleOption, device: DeviceSpec, evaluate: Evaluator
) -> RoleCost:
    """A training or scoring role's cost under ``opt``: held state and update (:func:`_trainable`,
    :func:`_frozen`), scoring forward (:func:`_scoring`), idle offload and the weight sync
    (:mod:`model.rlhf.openrlhf`); the rules and their sources are in :mod:`model.rlhf.roles`.

    Raises
    ------
    LayoutError
        Degrees ``evaluate()`` refuses or OpenRLHF cannot split at (:func:`model.rlhf.
        openrlhf.check_split_count`); an offload the framework's stack cannot run.
    InputError
        A step time without every axis's link bandwidth.
    """
    assert rs.model.arch is not None
    check_training_tp(spec.framework, opt.tp, f"{rs.role} tp", opt.pp)
    check_split_count(spec, rs.role, opt.dp)
    # sequences padded to a multiple of tp (NeMo-RL make_sequence_length_divisible_by; Megatron)
    s = math.ceil(spec.seq_len / opt.tp) * opt.tp
    score_est = _scoring_estimate(spec, rs, opt, evaluate, s)
    mech = rlhf_mechanism(spec.framework, spec.zero_stage or 1)
    if rs.trainable:
        held = _trainable(spec, rs, opt, evaluate, s, mech)
    else:
        held = _frozen(opt, score_est, mech)
    scoring_b, scoring_s, scoring_terms = _scoring(spec, rs, score_est, held)
    terms = held.terms + scoring_terms + resident_terms(held.resident_bytes, spec.framework)
    whole = 2 * max(st.params for st in score_est.stages) if mech.weights_full else 0
    sync, sync_terms = role_sync(spec, rs, opt, score_est.stages)
    swap, scoring_swap, moves, idle_terms = _idle(spec, rs, opt, device, held)
    held_b = held.kept_bytes if opt.offload == "idle" else held.held_bytes
    host, terms = held.host_bytes + swap, terms + idle_terms + sync_terms
    scoring_s += moves[0] if "scoring" in rs.phases else 0.0
    training_s = held.training_s + (moves[1] if "training" in rs.phases else 0.0)
    cost = RoleCost(
        opt,
        held_b,
        Fraction(0),
        scoring_b,
        held.training_bytes,
        0.0,
        scoring_s,
        training_s,
        host,
        tuple(terms),
        bf16_weight_bytes=Fraction(whole) if rs.trainable and not swap else Fraction(0),
        swap_bytes=swap,
        phases=rs.phases,
        microbatch_s=(forward_microbatch_s(score_est), held.microbatch_s),
        resident_bytes=held.resident_bytes,
        sync_bytes=sync,
        split_tokens=spec.split_tokens(opt.dp, opt.tp),
        scoring_swap_bytes=scoring_swap,
    )
    return actor_update_group(spec, rs, _on_stack(spec.framework, cost))
