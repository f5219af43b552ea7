"""Each RLHF role's bytes and seconds for one choice of GPUs and parallelism (issue 12).

A :class:`RoleOption` places a role on a pool of ``gpus`` GPUs with its degrees (training and
scoring roles dp·tp·pp = gpus; the rollout engine tp, and dp = gpus/tp replicas) and, for a
trainable role, optimizer offload. :func:`role_cost` returns what it keeps on each GPU of its
pool through the whole step (``held_bytes``), what it adds while it works in each phase, its
seconds per phase and its host bytes — from the cost model itself:

* trainable roles (actor, critic): ``evaluate()`` of the update's layout under the spec's
  framework profile (model state at the framework's mechanism, activations with the spec's
  recomputation, step time) plus the RLHF logits terms (:func:`model.rlhf_spec.logits_bytes`)
  on the last pipeline stage; their scoring forward is ``evaluate()`` of the same degrees
  without recomputation, a third of a micro-batch's three passes (backward = 2 × forward);
* frozen roles (reference, reward): BF16 weights held as the framework shards them (whole
  without ZeRO-3; ÷ dp with ZeRO-3 / FSDP full sharding, plus its two gathered layers while
  working), the scoring forward as above;
* the rollout engine: :mod:`model.rollout` (its memory fraction of every GPU of its pool while
  it generates, nothing outside the rollout phase — vLLM's sleep mode / verl's
  ``free_cache_engine`` release it; the weights are re-sent by the actor each step).

Offload (``RoleOption.offload``), two mechanisms people use:

* ``optimizer`` — CPU Adam (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840; DeepSpeed
  ``offload_optimizer``, Megatron-Core ``--optimizer-cpu-offload``): the FP32 master weights and
  Adam moments — 12 B per parameter of the GPU's shard — live in host memory; each update moves
  the FP32 gradient shard down and the BF16 weights back up over the host link
  (``host_link_gbps``; CPU Adam's own time is not counted). Trainable roles only.
* ``idle`` — the role's whole state goes to host memory while it does not work and comes back
  for its phases: NeMo-RL's Megatron policy moves "as much as possible" (parameters, gradient
  buffers, optimizer) to the CPU before generation (``offload_after_refit``) and keeps the
  reference's weights on the CPU, swapped in for its log-probs (``use_reference_model``); verl's
  ``param_offload`` / ``optimizer_offload``. It holds nothing on the GPU outside its phases
  (``swap_bytes`` instead of ``held_bytes``), and each step moves its state out and back in.

The per-role figures are those of the role's busiest pipeline stage in each phase; ``held`` is
the largest stage's state, so ``held + phase bytes`` is the role's true peak.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from trainplan.model.errors import InputError, LayoutError
from trainplan.model.estimate import Estimate, StageMemory, stage_params_per_gpu
from trainplan.model.frameworks import Framework, mechanism
from trainplan.model.hardware import DeviceSpec
from trainplan.model.layout import Layout, Recompute
from trainplan.model.rlhf_spec import LogitsMode, RLHFSpec, Role, RoleSpec, logits_bytes
from trainplan.model.rollout import engine_memory, kv_bytes_per_token, rollout_time
from trainplan.model.specs import ModelSpec, TrainingSpec
from trainplan.model.timing import kernel_efficiency_for

__all__ = [
    "RoleOption",
    "Term",
    "RoleCost",
    "Evaluator",
    "role_cost",
    "offload_host_bytes",
    "OFFLOAD_SOURCE",
    "IDLE_SOURCE",
    "OFFLOAD_MODES",
]

OFFLOAD_MODES = ("none", "optimizer", "idle")
"""``RoleOption.offload`` values (module docstring)."""

Evaluator = Callable[[ModelSpec, TrainingSpec, Layout], Estimate]
"""``evaluate()`` of one layout with the cluster's links (the caller places the axes on the
cluster: :func:`optimizer.case.links_for`)."""

OFFLOAD_SOURCE = (
    "ZeRO-Offload (Ren et al. 2021, arXiv 2101.06840): FP32 master + Adam moments, 12 B per "
    "parameter of the shard, in host memory; FP32 gradients down and BF16 weights up over the "
    "host link each update"
)
IDLE_SOURCE = (
    "NeMo-RL MegatronPolicyWorker.offload_after_refit (parameters, gradient buffers and optimizer "
    "to the CPU before generation) and use_reference_model (reference weights kept on the CPU); "
    "verl param_offload / optimizer_offload: out and back over the host link each step"
)
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


@dataclass(frozen=True, slots=True)
class RoleOption:
    """Where a role runs and how: a pool of ``gpus`` GPUs and its degrees there."""

    role: Role
    gpus: int
    """GPUs of the role's pool (it uses all of them)."""
    dp: int = 1
    tp: int = 1
    pp: int = 1
    """Training and scoring roles: dp·tp·pp = gpus. The rollout engine: tp per replica, dp
    replicas (dp·tp = gpus), pp 1."""
    offload: str = "none"
    """``none``, ``optimizer`` (trainable roles: CPU Adam) or ``idle`` (the role's state in host
    memory outside its phases); module docstring."""
    fraction: Fraction | None = None
    """The rollout engine's memory fraction (vLLM ``gpu_memory_utilization``)."""

    def __post_init__(self) -> None:
        if self.offload not in OFFLOAD_MODES:
            raise InputError(f"offload: {self.offload!r} is not one of {', '.join(OFFLOAD_MODES)}")
        if self.dp * self.tp * self.pp != self.gpus:
            raise LayoutError(
                f"{self.role}: dp {self.dp} × tp {self.tp} × pp {self.pp} ≠ its pool's "
                f"{self.gpus} GPUs"
            )

    @property
    def label(self) -> str:
        """``dp 8 × tp 2 × pp 1`` (``tp 2 × dp 32, fraction 0.5`` for the engine; ``, offload``)."""
        if self.role is Role.ROLLOUT:
            frac = f", fraction {float(self.fraction):g}" if self.fraction is not None else ""
            return f"tp {self.tp} × dp {self.dp}{frac}"
        off = {"none": "", "optimizer": ", optimizer offload", "idle": ", offloaded when idle"}
        return f"dp {self.dp} × tp {self.tp} × pp {self.pp}{off[self.offload]}"


@dataclass(frozen=True, slots=True)
class Term:
    """One named figure of a role, with its unit and its source (what the report prints)."""

    name: str
    phase: str
    """``held`` (every phase), ``rollout``, ``scoring``, ``training``, ``host``."""
    value: Fraction | float | int
    unit: str
    """``bytes``, ``s`` or ``sequences``."""
    source: str


@dataclass(frozen=True, slots=True)
class RoleCost:
    """What one role costs on each GPU of its pool; bytes exact, seconds float."""

    option: RoleOption
    held_bytes: Fraction
    """Kept on the GPU through the whole step (model state, frozen weights)."""
    rollout_bytes: Fraction
    scoring_bytes: Fraction
    training_bytes: Fraction
    """Added while it works in each phase (the engine's budget; activations, logits, gathered
    layers, the optimizer step's buffers) — at most one role's at a time on a pool."""
    rollout_s: float
    scoring_s: float
    training_s: float
    host_bytes: Fraction
    """Host memory per GPU of the pool (offloaded optimizer state)."""
    terms: tuple[Term, ...]
    concurrent: int = 0
    """The engine: sequences a replica decodes at once."""
    bf16_weight_bytes: Fraction = Fraction(0)
    """Its BF16 weights held whole on the GPU (the engine's copy; a trainable role's working
    weights when its framework keeps them whole): what a shared engine copy can reuse."""
    swap_bytes: Fraction = Fraction(0)
    """Offloaded when idle: its state, on the GPU only in the phases it works in (then
    ``held_bytes`` is 0)."""
    phases: tuple[str, ...] = ()
    """The phases it works in."""

    def phase_bytes(self, phase: str) -> Fraction:
        """Bytes it adds in ``phase`` (0 where it does not work)."""
        return {
            "rollout": self.rollout_bytes,
            "scoring": self.scoring_bytes,
            "training": self.training_bytes,
        }[phase]

    def seconds(self, phase: str) -> float:
        """Its seconds of work in ``phase`` (0 where it does not work)."""
        return {"rollout": self.rollout_s, "scoring": self.scoring_s, "training": self.training_s}[
            phase
        ]


def offload_host_bytes(params: Fraction | int, replicas: int) -> Fraction:
    """Host bytes per GPU of offloaded optimizer state: 12 B (FP32 master + two Adam moments)
    per parameter of the GPU's shard (``params`` on the GPU, sharded over ``replicas``).

    Examples
    --------
    A 70B trainable role with CPU Adam needs 12 × 70·10⁹ = 0.84·10¹² B of host memory in all,
    wherever its shards sit; on 8 GPUs of one node, 105 GB per GPU.

    >>> offload_host_bytes(70 * 10**9, 1) == Fraction(84 * 10**10)
    True
    >>> offload_host_bytes(Fraction(70 * 10**9, 8), 1) * 8 == 84 * 10**10
    True
    """
    return Fraction(12) * Fraction(params) / replicas


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


def _forward_s(est: Estimate) -> float:
    """A forward over the batch: a third of the three passes' compute, bubble and tp/pp/cp/ep
    traffic (no recomputation, no DP exchange)."""
    if est.time_terms is None:
        raise InputError("rlhf: step time needs every axis's link bandwidth")
    return est.time_terms.compute_and_pipeline_s / 3


def role_cost(
    spec: RLHFSpec,
    option: RoleOption,
    device: DeviceSpec,
    evaluate: Evaluator,
    sync_bytes_per_s: float | None = None,
) -> RoleCost:
    """The role's bytes per GPU, seconds per phase and host bytes under ``option``.

    ``sync_bytes_per_s``: the bandwidth the updated weights reach the rollout engine at.

    Raises
    ------
    LayoutError
        Degrees the model does not allow (``evaluate()``'s rules; a rollout tp the KV heads do not
        allow), or an engine whose KV space holds no sequence at full length.
    InputError
        Offload on a frozen role or without a host-link figure; a rollout without HBM bandwidth.
    """
    rs = spec.role(option.role)
    if option.offload == "optimizer" and not rs.trainable:
        raise InputError(f"offload: {rs.role} is frozen; only trainable roles have optimizer state")
    if option.offload == "idle" and rs.role is Role.ROLLOUT:
        raise InputError("offload: the engine already frees its memory after the rollout")
    if option.offload != "none" and not device.host_link_bytes_per_s:
        raise InputError(
            f"offload: the accelerator table has no host link figure for {device.name}"
        )
    if rs.role is Role.ROLLOUT:
        return _rollout_cost(spec, rs, option, device, sync_bytes_per_s)
    return _network_cost(spec, rs, option, device, evaluate)


def _network_cost(
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
        train_est = evaluate(
            rs.model,
            TrainingSpec(
                seq_len=s, global_batch_size=_batch(spec.train_batch or spec.sequences, b, opt.dp)
            ),
            _layout(spec, opt, spec.recompute),
        )
        extra = (logit + temp - counted) if rs.log_probs else -counted
        offloaded, held, train_peak, host = [], [], [], Fraction(0)
        for i, st in enumerate(train_est.stages):
            off = Fraction(0)
            if opt.offload == "optimizer":
                master = 4 * _stage_params(st) / opt.dp if spec.framework is Framework.FSDP2 else 0
                off = st.state.optimizer_bytes + master
                host = max(host, off)
            offloaded.append(off)
            held.append(st.state.total_bytes - off)
            step = st.state.total_bytes - off + (0 if off else st.state.step_bytes)
            train_peak.append(max(st.backward_bytes + (extra if i == last else 0) - off, step))
        held_b = max(held)
        state = train_est.peak.state
        terms += [
            Term("weights", "held", state.weights_bytes, "bytes", mech.source),
            Term("gradients", "held", state.gradients_bytes, "bytes", mech.source),
            Term(
                "optimizer state" + (" (offloaded)" if opt.offload == "optimizer" else ""),
                "host" if opt.offload == "optimizer" else "held",
                state.optimizer_bytes,
                "bytes",
                OFFLOAD_SOURCE if opt.offload == "optimizer" else mech.source,
            ),
        ]
        acts = train_est.peak.activations
        if acts is not None:
            terms.append(
                Term(
                    f"activations ({spec.recompute} recompute, b {b} × s {s})",
                    "training",
                    acts.total_bytes,
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
        if train_est.step_s is None:
            raise InputError("rlhf: step time needs every axis's link bandwidth")
        updates = spec.epochs * spec.updates_per_epoch
        offload_s = 0.0
        if opt.offload == "optimizer":
            assert device.host_link_bytes_per_s
            shard = max(_stage_params(st) for st in train_est.stages) / opt.dp
            offload_s = float(6 * shard / Fraction(device.host_link_bytes_per_s)) * updates
            terms.append(Term("host offload per GPU", "host", host, "bytes", OFFLOAD_SOURCE))
        training_s = updates * train_est.step_s + offload_s
        terms.append(
            Term(
                f"training ({spec.epochs} epoch(s) × {spec.updates_per_epoch} update(s))",
                "training",
                training_s,
                "s",
                "evaluate() step time of the layout (model.timing), 6N per token per epoch",
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
        terms.append(Term("state out and back in", rs.phases[0], moves, "s", IDLE_SOURCE))
        if rs.phases[0] == "scoring":
            scoring_s += moves
        else:
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
    )


def _rollout_cost(
    spec: RLHFSpec,
    rs: RoleSpec,
    opt: RoleOption,
    device: DeviceSpec,
    sync_bytes_per_s: float | None,
) -> RoleCost:
    arch = rs.model.arch
    assert arch is not None
    if opt.pp != 1:
        raise LayoutError("rollout: the engine runs tp × dp replicas (pp 1)")
    if opt.fraction is None:
        raise InputError("rollout: the engine needs its memory fraction")
    if device.hbm_bytes_per_s is None:
        raise InputError(f"rollout: the accelerator table has no HBM bandwidth for {device.name}")
    ((_, _, dense, experts),) = stage_params_per_gpu(
        rs.model, opt.tp, 1, 1, 1, True, opt.tp, True, 0
    )
    weights = 2 * (dense + experts)
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
    if not mem.fits:
        raise LayoutError(
            f"rollout: tp {opt.tp} with fraction {float(opt.fraction):g} leaves "
            f"{float(mem.kv_space_bytes) / 1e9:.2f} GB of KV space per GPU, less than one "
            f"{spec.seq_len:,}-token sequence's {mem.kv_per_sequence_bytes / 1e9:.2f} GB"
        )
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
        mem.budget_bytes,
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
    )
