"""The formulas of each RLHF role's cost (:func:`model.rlhf_roles.role_cost` calls them): a
training or scoring role from ``evaluate()`` of its layout and the RLHF logits terms, the rollout
engine from :mod:`model.rollout`. The rules and their sources are in :mod:`model.rlhf_roles`."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from typing import Any

from trainplan.model.errors import InputError, LayoutError
from trainplan.model.estimate import Estimate, StageMemory, stage_params_per_gpu
from trainplan.model.frameworks import mechanism
from trainplan.model.hardware import DeviceSpec
from trainplan.model.layout import Layout, Recompute
from trainplan.model.offload import NO_OFFLOAD, Offload, check_offload
from trainplan.model.rlhf_roles import (
    IDLE_SOURCE,
    OFFLOAD_SOURCE,
    Evaluator,
    RoleCost,
    RoleOption,
    Term,
)
from trainplan.model.rlhf_spec import LogitsMode, RLHFSpec, Role, RoleSpec, logits_bytes
from trainplan.model.rollout import engine_memory, kv_bytes_per_token, rollout_time
from trainplan.model.specs import TrainingSpec
from trainplan.model.timing import kernel_efficiency_for

__all__ = [
    "network_cost",
    "rollout_cost",
    "engine_weights_bytes",
    "least_engine_tp",
    "seconds_floor",
]

_ENGINE_SOURCE = (
    "vLLM gpu_memory_utilization / SGLang mem_fraction_static: the fraction of each GPU's memory "
    "the engine takes (weights + KV cache); model.rollout"
)
_KV_SOURCE = (
    "KV cache 2·L·g·d·2 B per token, g/tp KV heads per GPU (one when tp > g; MLA: the latent, "
    "whole), for the sequences decoded at once (vLLM PagedAttention, max_num_seqs)"
)
_LOGITS_SOURCE = {
    LogitsMode.FULL: "FP32 logits [tokens × V]/tp, and log-softmax/entropy over them as large "
    "(verl entropy_from_logits, logprobs_from_logits)",
    LogitsMode.CHUNKED: "FP32 logits [tokens × V]/tp; log-softmax/entropy 2,048 tokens at a time "
    "(verl entropy_from_logits_with_chunking)",
    LogitsMode.FUSED: "fused linear cross-entropy: logits and log-softmax one 2,048-token chunk at "
    "a time (Liger Kernel; verl use_fused_kernels)",
}


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


def _stage_params(stage: StageMemory) -> Fraction:
    return stage.dense_params + stage.expert_params


def _microbatch_s(est: Estimate) -> float:
    """One micro-batch's compute on the slowest stage: ``TimeTerms.compute_s`` ÷ m (0 without
    a step time: still a floor)."""
    if est.time_terms is None:
        return 0.0
    return est.time_terms.compute_s / est.num_microbatches


def seconds_floor(spec: RLHFSpec, cost: RoleCost, dp: int) -> float:
    """A lower bound on the seconds, over all its phases, of ``cost``'s role at the same tp, pp
    and offload on ``dp`` ranks: its micro-batches per rank there (:func:`_batch`) × the
    per-micro-batch compute (``cost.microbatch_s``, which dp does not change) — a scoring
    forward a third of the three passes, each update's step at least its compute
    (``compute_and_pipeline_s ≥ compute_s``). Bubbles, traffic, the optimizer and offload only
    add. 0 for the engine.

    Examples
    --------
    The scoring forward at 1.5 s per micro-batch of 3 sequences, 16,384 sequences on 512 ranks:
    ⌈16,384 / 1,536⌉ = 11 micro-batches, 11 × 1.5 / 3 = 5.5 s (a frozen role: no update).
    """
    scoring_mb, training_mb = cost.microbatch_s
    b = spec.micro_batch_sequences
    floor = 0.0
    if "scoring" in cost.phases:
        floor += _batch(spec.sequences, b, dp) // (b * dp) * scoring_mb / 3
    if "training" in cost.phases:
        updates = spec.epochs * spec.updates_per_epoch
        floor += (
            updates * (_batch(spec.train_batch or spec.sequences, b, dp) // (b * dp)) * training_mb
        )
    return floor


def _forward_s(est: Estimate) -> float:
    """A forward over the batch: a third of the three passes' compute, bubble and tp/pp/cp/ep
    traffic (no recomputation, no DP exchange)."""
    if est.time_terms is None:
        raise InputError("rlhf: step time needs every axis's link bandwidth")
    return est.time_terms.compute_and_pipeline_s / 3


def network_cost(
    spec: RLHFSpec, rs: RoleSpec, opt: RoleOption, device: DeviceSpec, evaluate: Evaluator
) -> RoleCost:
    arch = rs.model.arch
    assert arch is not None
    # sequence parallelism splits every sequence over tp: padded to a multiple of it (NeMo-RL's
    # make_sequence_length_divisible_by; Megatron-LM requires it)
    b, s = spec.micro_batch_sequences, math.ceil(spec.seq_len / opt.tp) * opt.tp
    score_est = evaluate(
        rs.model,
        TrainingSpec(seq_len=s, global_batch_size=_batch(spec.sequences, b, opt.dp)),
        _layout(spec, opt, Recompute.NONE),
    )
    logit, temp = logits_bytes(
        b * s, arch.vocab_size, opt.tp, spec.logits, spec.logits_chunk_tokens
    )
    counted = Fraction(4 * b * s * arch.vocab_size, opt.tp)  # evaluate()'s FP32 logits
    mech = mechanism(spec.framework, spec.zero_stage or 1)
    last = len(score_est.stages) - 1
    terms: list[Term] = []
    if rs.trainable:
        # CPU Adam is model.offload's mechanism, applied by evaluate(): the optimizer state and
        # its step leave the GPU, the host holds them with an FP32 gradient buffer, and the step
        # time gains the host-link transfers and the CPU Adam step (TimeTerms.offload_s).
        # A framework that cannot offload the optimizer alone is refused (check_offload's rule,
        # which evaluate() applies too): a LayoutError, as any illegal layout.
        offload = Offload(optimizer=Fraction(1)) if opt.offload == "optimizer" else NO_OFFLOAD
        try:
            check_offload(spec.framework, spec.zero_stage or 1, offload)
        except LayoutError:  # the rule is model.offload's; the advice is this tab's
            raise LayoutError(
                f"offload: {rs.role}=optimizer — {spec.framework} ZeRO-{spec.zero_stage} has no "
                "optimizer-only offload (model.offload.check_offload: FSDP2's CPUOffloadPolicy "
                "moves the parameters too); use idle, or --framework megatron or deepspeed"
            ) from None
        train_est = evaluate(
            rs.model,
            TrainingSpec(
                seq_len=s,
                global_batch_size=_batch(spec.train_batch or spec.sequences, b, opt.dp),
                offload=offload,
            ),
            _layout(spec, opt, spec.recompute),
        )
        # the RLHF loss replaces evaluate()'s: its FP32 logits and its working set beyond the
        # recompute transient (StageActivations.loss_transient_bytes) leave the last stage
        loss_over = _loss_over(train_est.stages[last].activations)
        extra = ((logit + temp) if rs.log_probs else 0) - counted - loss_over
        held = [st.state.total_bytes for st in train_est.stages]
        train_peak = [
            max(st.backward_bytes + (extra if i == last else 0), st.state.optimizer_step_bytes)
            for i, st in enumerate(train_est.stages)
        ]
        held_b = max(held)
        host = train_est.host_bytes
        state = train_est.peak.state
        terms += [
            Term("weights", "held", state.weights_bytes, "bytes", mech.source),
            Term("gradients", "held", state.gradients_bytes, "bytes", mech.source),
        ]
        if offload.active:
            terms.append(
                Term(
                    "optimizer state + FP32 gradient buffer (offloaded)",
                    "host",
                    host,
                    "bytes",
                    OFFLOAD_SOURCE,
                )
            )
        else:
            terms.append(
                Term("optimizer state", "held", state.optimizer_bytes, "bytes", mech.source)
            )
        acts = train_est.peak.activations
        if acts is not None:
            terms.append(
                Term(
                    f"activations ({spec.recompute} recompute, b {b} × s {s})",
                    "training",
                    acts.total_bytes - (_loss_over(acts) if train_est.peak.stage == last else 0),
                    "bytes",
                    "Korthikanti et al. 2022 term by term (model.activations); evaluate()",
                )
            )
        if rs.log_probs:
            terms += [
                Term("FP32 logits", "training", logit, "bytes", _LOGITS_SOURCE[spec.logits]),
                Term(
                    "log-softmax/entropy temporary",
                    "training",
                    temp,
                    "bytes",
                    _LOGITS_SOURCE[spec.logits],
                ),
            ]
        if train_est.step_s is None or train_est.time_terms is None:
            raise InputError("rlhf: step time needs every axis's link bandwidth")
        updates = spec.epochs * spec.updates_per_epoch
        training_s = updates * train_est.step_s
        terms.append(
            Term(
                f"training ({spec.epochs} epoch(s) × {spec.updates_per_epoch} update(s))",
                "training",
                training_s,
                "s",
                "evaluate() step time of the layout (model.timing), 6N per token per epoch",
            )
        )
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
        training_b = max(train_peak) - held_b
    else:
        held = []
        for st in score_est.stages:
            p_dense, p_exp = st.dense_params, st.expert_params
            if mech.weights_full:
                held.append(2 * (p_dense + p_exp))
            else:
                held.append(2 * p_dense / opt.dp + 2 * p_exp / score_est.layout.expert_shard_degree)
        held_b = max(held)
        host, training_s, training_b = Fraction(0), 0.0, Fraction(0)
        how = "whole" if mech.weights_full else "÷ dp (ZeRO-3 / full sharding)"
        terms.append(Term(f"BF16 weights ({how})", "held", held_b, "bytes", mech.source))
    scoring_s, scoring_b = 0.0, Fraction(0)
    if "scoring" in rs.phases:
        out = (logit + temp) if rs.log_probs else Fraction(0)
        peaks = [
            held[i] + st.state.gathered_bytes + (out if i == last else 0)
            for i, st in enumerate(score_est.stages)
        ]
        scoring_b = max(peaks) - held_b
        scoring_s = _forward_s(score_est)
        what = "old log-probs" if rs.role is Role.ACTOR else "forward"
        terms.append(
            Term(
                f"scoring {what} (2N per token)",
                "scoring",
                scoring_s,
                "s",
                "evaluate() without recomputation: one of a micro-batch's three passes",
            )
        )
        if rs.log_probs and not rs.trainable:
            terms.append(
                Term(
                    "FP32 logits + log-softmax",
                    "scoring",
                    out,
                    "bytes",
                    _LOGITS_SOURCE[spec.logits],
                )
            )
    whole = 2 * max(_stage_params(st) for st in score_est.stages) if mech.weights_full else 0
    swap = Fraction(0)
    if opt.offload == "idle":
        assert device.host_link_bytes_per_s
        swap, held_b, host = held_b, Fraction(0), host + held_b
        moves = float(2 * swap / Fraction(device.host_link_bytes_per_s))
        terms.append(Term("state to host when idle", "host", swap, "bytes", IDLE_SOURCE))
        for phase in rs.phases:  # in for its turn in each phase it works in, then out
            terms.append(Term("state in and back out", phase, moves, "s", IDLE_SOURCE))
        if "scoring" in rs.phases:
            scoring_s += moves
        if "training" in rs.phases:
            training_s += moves
    return RoleCost(
        opt,
        held_b,
        Fraction(0),
        scoring_b,
        training_b,
        0.0,
        scoring_s,
        training_s,
        host,
        tuple(terms),
        bf16_weight_bytes=Fraction(whole) if rs.trainable and not swap else Fraction(0),
        swap_bytes=swap,
        phases=rs.phases,
        microbatch_s=(_microbatch_s(score_est), _microbatch_s(train_est) if rs.trainable else 0.0),
    )


def engine_weights_bytes(rs: RoleSpec, tp: int) -> Fraction:
    """The engine's BF16 weights on one GPU at ``tp`` (norms and routers whole on every rank:
    :func:`model.estimate.stage_params_per_gpu`)."""
    ((_, _, dense, experts),) = stage_params_per_gpu(rs.model, tp, 1, 1, 1, True, tp, True, None, 0)
    return 2 * (dense + experts)


def least_engine_tp(spec: RLHFSpec, fraction: Fraction, device: DeviceSpec) -> int | None:
    """The least power-of-two tp (up to the attention heads) at which the engine's weights and
    one full-length sequence's KV cache fit ``fraction`` of the device's bytes (None: none
    does) — what a tab's engine that does not fit its budget would need."""
    rs = spec.role(Role.ROLLOUT)
    arch = rs.model.arch
    assert arch is not None
    budget = fraction * device.physical_bytes
    tp = 1
    while tp <= arch.num_attention_heads:
        try:
            need = engine_weights_bytes(rs, tp) + kv_bytes_per_token(arch, tp) * spec.seq_len
        except LayoutError:
            need = None
        if need is not None and need <= budget:
            return tp
        tp *= 2
    return None


def rollout_cost(
    spec: RLHFSpec,
    rs: RoleSpec,
    opt: RoleOption,
    device: DeviceSpec,
    sync_bytes_per_s: float | None,
    over_budget: bool = False,
) -> RoleCost:
    """The engine's cost (:func:`model.rlhf_roles.role_cost`). An engine whose budget cannot
    hold its weights and one full-length sequence is a LayoutError, or with ``over_budget`` a
    cost whose rollout bytes are that need (above ``budget_bytes``: the plan does not fit),
    timed one sequence at a time."""
    arch = rs.model.arch
    assert arch is not None
    if opt.pp != 1:
        raise LayoutError("rollout: the engine runs tp × dp replicas (pp 1)")
    if opt.fraction is None:
        raise InputError("rollout: the engine needs its memory fraction")
    if device.hbm_bytes_per_s is None:
        raise InputError(f"rollout: the accelerator table has no HBM bandwidth for {device.name}")
    weights = engine_weights_bytes(rs, opt.tp)
    per_replica = math.ceil(spec.sequences / opt.dp)
    mem = engine_memory(
        arch,
        weights,
        device.physical_bytes,
        opt.fraction,
        spec.max_num_seqs,
        per_replica,
        spec.seq_len,
        opt.tp,
    )
    need = mem.budget_bytes
    if not mem.fits:
        if not over_budget:
            raise LayoutError(
                f"rollout: tp {opt.tp} with fraction {float(opt.fraction):g} leaves "
                f"{float(mem.kv_space_bytes) / 1e9:.2f} GB of KV space per GPU, less than one "
                f"{spec.seq_len:,}-token sequence's {mem.kv_per_sequence_bytes / 1e9:.2f} GB"
            )
        need = weights + mem.kv_per_sequence_bytes
        mem = replace(mem, concurrent=1, limited_by="kv_space")
    time = rollout_time(
        active_params=rs.active_params,
        weights_bytes=weights,
        kv_per_token_bytes=kv_bytes_per_token(arch, opt.tp),
        sequences_per_replica=per_replica,
        concurrent=mem.concurrent,
        prompt_tokens=spec.prompt_tokens,
        completion_tokens=spec.completion_tokens,
        tp=opt.tp,
        peak_flops_per_s=device.peak_flops_per_s,
        kernel_efficiency=kernel_efficiency_for(device.name, arch.hidden_size),
        hbm_bytes_per_s=device.hbm_bytes_per_s,
        bandwidth_efficiency=spec.bandwidth_efficiency,
        sync_bytes=weights,
        sync_bytes_per_s=sync_bytes_per_s,
        max_completion_tokens=spec.max_completion_tokens,
    )
    bw = f"{device.name} HBM {device.hbm_bytes_per_s / 1e12:g} TB/s ({device.bandwidth_source})"
    kv = f"KV cache ({mem.concurrent} sequences at once, by {mem.limited_by})"
    if need > mem.budget_bytes:
        kv = "KV cache of one sequence (the least the engine runs with; its budget holds none)"
    steps = f"decode ({time.memory_bound_steps:,} of {time.total_steps:,} steps HBM-bound)"
    roof = f"roofline: max(2N·c, weights + KV read); {bw}"
    sync = "BF16 weights over the link between training and rollout ranks"
    prefill_src = "model.rollout; kernel efficiency model.timing"
    terms = (
        Term("engine budget (fraction × HBM)", "rollout", mem.budget_bytes, "bytes", _ENGINE_SOURCE),
        Term("engine weights (BF16, ÷ tp)", "rollout", weights, "bytes", _ENGINE_SOURCE),
        Term(kv, "rollout", mem.kv_cache_bytes, "bytes", _KV_SOURCE),
        Term("sequences decoded at once", "rollout", mem.concurrent, "sequences", _KV_SOURCE),
        Term("prefill (2N per prompt token)", "rollout", time.prefill_s, "s", prefill_src),
        Term(steps, "rollout", time.decode_s, "s", roof),
        Term("weight sync (2N/tp to each engine GPU)", "rollout", time.sync_s, "s", sync),
    )  # fmt: skip
    return RoleCost(
        opt,
        Fraction(0),
        need,
        Fraction(0),
        Fraction(0),
        time.total_s,
        0.0,
        0.0,
        Fraction(0),
        terms,
        mem.concurrent,
        weights,
        phases=rs.phases,
        budget_bytes=mem.budget_bytes,
    )


def _loss_over(acts: Any) -> Fraction:
    """What evaluate()'s loss working set adds to a last stage's peak beyond its recompute
    transient (:attr:`model.terms.activations.StageActivations.loss_transient_bytes`); 0 for a
    size-only model."""
    if acts is None:
        return Fraction(0)
    return max(acts.loss_transient_bytes - acts.recompute_transient_bytes, Fraction(0))
