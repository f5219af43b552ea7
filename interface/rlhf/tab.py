"""The RLHF tab as a report dictionary (``trainplan rlhf``): the textbook accounting's resident memory,
FLOPs and time shares of one step (:mod:`model.rlhf.shares`), and with a model name the faithful
accounting of :mod:`interface.rlhf.report`."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trainplan.interface.rlhf import report as rf
from trainplan.interface.tab_requests import RLHFRequest, as_request
from trainplan.interface.tab_values import jsonable, old_log_prob_flag, optional_count, resolve_peak
from trainplan.model.errors import InputError, check_applicable
from trainplan.model.rlhf import shares as rl
from trainplan.model.rlhf.phases import phase_flops, step_roles
from trainplan.model.units import parse_count, parse_number

__all__ = ["rlhf_report", "RLHF_DEFAULTS"]


RLHF_DEFAULTS: dict[str, Any] = rl.DEFAULTS
"""The RLHF tab's documented defaults (see :data:`model.rlhf.shares.DEFAULTS`)."""


def _rlhf_counts(algo: str, prompts: Any, samples: Any, prompt_t: Any, completion_t: Any):
    """(sequences per step, tokens per sequence); DPO has 2 sequences per prompt."""
    per_prompt = 2 if algo == "dpo" else parse_count(samples, "samples_per_prompt")
    seqs = parse_count(prompts, "prompts") * per_prompt
    return seqs, parse_count(prompt_t, "prompt_tokens") + parse_count(
        completion_t, "completion_tokens"
    )


def rlhf_report(*args: Any, **kw: Any) -> dict[str, Any]:
    """The RLHF tab of an :class:`~interface.tab_requests.RLHFRequest` (or its fields, by position
    and name): resident memory by network, FLOPs and time of one step by phase.

    With ``model`` (a catalogue name or a config.json path) it also gives the faithful accounting
    of issue 12 under ``faithful`` (:func:`interface.rlhf.report.faithful_report`; its options,
    :data:`interface.rlhf.report.FAITHFUL_ONLY`), and ``accounting`` says which; without it the
    figures are the textbook accounting's (``accounting: "textbook"``: 16 B per trainable
    parameter, 2 B per frozen one; 2·N FLOPs per token to infer, 6·N to train).

    The rollout engine's weight copy and KV cache (``rollout_engine``) and the FP32 logits buffer
    (``logits_buffer``) are off by default (the textbook accounting leaves them out) and add to
    ``resident_bytes`` when on; ``bytes_per_policy_param`` counts the networks only. Options left
    None take :data:`RLHF_DEFAULTS` (``reward`` model for PPO and GRPO; ``gpu`` H100-SXM unless
    ``peak_tflops`` is given).

    Raises
    ------
    InputError
        A bad value, or an option that does not apply (:func:`model.rlhf.shares.not_applicable`:
        ``reward`` with DPO, the KV-cache dimensions without ``rollout_engine``…; ``gpu`` with
        ``peak_tflops``; a faithful option without ``model``).

    Examples
    --------
    >>> r = rlhf_report("ppo", 70e9, 70e9)
    >>> r["networks"], r["bytes_per_policy_param"], r["resident_bytes"]
    (4, 36, 2520000000000)
    """
    r = as_request(RLHFRequest, args, kw)
    if r.faithful:
        return rf.faithful_report(_textbook, r)
    return _textbook(r)


def _faithful_only(algorithm: str) -> dict[str, str]:
    """Why each option of the faithful accounting (:data:`interface.rlhf.report.FAITHFUL_ONLY`)
    does not apply to the textbook one: add a model — unless ``algorithm`` has no faithful
    accounting, where :func:`model.rlhf.shares.not_applicable` (``placed``) says why (DPO's).

    Raises
    ------
    InputError
        An algorithm not offered (:func:`model.rlhf.shares.not_applicable`)."""
    why = dict.fromkeys(rf.FAITHFUL_ONLY, "it belongs to the faithful accounting; add --model NAME")
    unused = rl.not_applicable(algorithm, placed=rf.FAITHFUL_ONLY)
    why.update({k: v for k, v in unused.items() if k in why})
    why["gpus"] += " (this accounting's GPU count is `chips`)"
    return why


def _textbook(r: RLHFRequest, active: tuple[int, int | None] | None = None) -> dict[str, Any]:
    """The textbook accounting of ``r`` (:func:`rlhf_report` without a model). ``active``: the
    policy's and the reward network's active parameters (counts; None: dense, all of them) — a
    model's, which :func:`interface.rlhf.report.faithful_report` passes so the FLOPs of a mixture
    of experts count its active parameters (:attr:`model.rlhf.shares.Network.flop_params`)."""
    check_applicable({k: getattr(r, k) for k in rf.FAITHFUL_ONLY}, _faithful_only(r.algorithm))
    algo = str(r.algorithm).lower()
    check_applicable(
        {k: getattr(r, k) for k in _TEXTBOOK_CHECKED},
        rl.not_applicable(
            algo, r.reward, rollout_engine=r.rollout_engine, logits_buffer=r.logits_buffer
        ),
    )
    n_p, n_r, nets = _networks(algo, r, active)
    reward = r.reward if algo == "dpo" else str(r.reward or "model").lower()
    samples = r.samples_per_prompt
    samples = RLHF_DEFAULTS["samples_per_prompt"] if samples is None else samples
    seqs, seq_tokens = _rlhf_counts(algo, r.prompts, samples, r.prompt_tokens, r.completion_tokens)
    old, flops = _flops(algo, reward, r, nets, seqs, seq_tokens)
    peak, peak_source = resolve_peak(r.gpu, r.peak_tflops, RLHF_DEFAULTS["gpu"])
    decode = RLHF_DEFAULTS["decode_mfu"] if r.decode_mfu is None else r.decode_mfu
    mfus = (parse_number(decode, "decode_mfu"), parse_number(r.train_mfu, "train_mfu"))
    chips = parse_count(1 if r.chips is None else r.chips, "chips")
    times = rl.phase_times(flops, *mfus, peak, chips)
    dims = {k: optional_count(k, getattr(r, k)) for k in _ENGINE_DIMS}
    extras = rl.extra_bytes(
        n_p,
        seqs,
        seq_tokens,
        rollout_engine=r.rollout_engine,
        logits_buffer=r.logits_buffer,
        **dims,
    )
    net_bytes = rl.network_bytes(nets)
    ppo_bytes = rl.network_bytes(rl.networks("ppo", n_p, n_r))
    total_flops, total_time = sum(flops.values()), sum(times.values())
    batch = rl.rollout_batch_size(dims["rollout_batch"], seqs) if r.rollout_engine else None
    return jsonable({
        "tab": "rlhf", "accounting": "textbook", "algorithm": algo, "reward": reward,
        "networks": len(nets), "network_table": [_network_row(x) for x in nets],
        "bytes_per_policy_param": net_bytes / n_p, "network_bytes": net_bytes,
        "extra_bytes": extras, "resident_bytes": net_bytes + sum(extras.values()),
        "fewer_than_ppo": 1 - net_bytes / ppo_bytes,
        "sequences_per_step": seqs, "tokens_per_sequence": seq_tokens, "rollout_batch": batch,
        "old_log_prob": None if algo == "dpo" else old,
        "phase_flops": flops, "rollout_flops": flops["rollout"],
        "rollout_flops_share": flops["rollout"] / total_flops,
        "phase_flops_share": {k: f / total_flops for k, f in flops.items()},
        "phase_seconds": times, "rollout_time_share": times["rollout"] / total_time,
        "phase_time_share": {k: t / total_time for k, t in times.items()},
        "peak_flops_per_s": peak, "peak_source": peak_source, "chips": chips,
        "decode_mfu": mfus[0], "train_mfu": mfus[1], "assumptions": rl.ASSUMPTIONS,
    })  # fmt: skip


def _flops(
    algo: str, reward: str | None, r: RLHFRequest, nets: list[rl.Network], seqs: int, tokens: int
) -> tuple[bool, dict[str, Fraction]]:
    """(whether the actor recomputes the old log-probs, the step's FLOPs by phase) of the textbook
    accounting: the rule the faithful one reads (:func:`model.rlhf.phases.phase_flops` over
    :func:`model.rlhf.phases.step_roles`), summed over the roles of each phase.

    Raises
    ------
    InputError
        A bad ``old_log_prob`` or ``epochs``.
    """
    old = old_log_prob_flag(
        RLHF_DEFAULTS["old_log_prob"] if r.old_log_prob is None else r.old_log_prob
    )
    roles = step_roles(algo, reward or "model", old)
    epochs = parse_count(r.epochs, "epochs")
    by_role = phase_flops(roles, rl.active_params(nets), seqs, tokens, epochs)
    return old, {p: sum(v.values(), Fraction(0)) for p, v in by_role.items()}


def _networks(
    algo: str, r: RLHFRequest, active: tuple[int, int | None] | None
) -> tuple[int, int | None, list[rl.Network]]:
    """(policy parameters, reward parameters or None, the networks) of the request, the FLOPs of
    a mixture of experts on ``active`` (:func:`model.rlhf.shares.networks`).

    Raises
    ------
    InputError
        No ``policy_params``, or a bad size.
    """
    if r.policy_params is None:
        raise InputError(
            "policy_params: missing; give --policy-params SIZE (the textbook accounting) or --model NAME "
            "(the faithful one)"
        )
    n_p = parse_count(r.policy_params, "policy_params")
    n_r = None if r.reward_params is None else parse_count(r.reward_params, "reward_params")
    a_p, a_r = active or (None, None)
    return n_p, n_r, rl.networks(algo, n_p, n_r, r.reward, policy_active=a_p, reward_active=a_r)


_ENGINE_DIMS = ("layers", "kv_heads", "head_dim", "rollout_batch", "vocab_size", "logits_tokens")
"""The textbook accounting's engine and logits-buffer dimensions (:func:`model.rlhf.shares.
extra_bytes`)."""
_TEXTBOOK_CHECKED = ("reward", "reward_params", "samples_per_prompt", "decode_mfu",
                     "rollout_engine", "old_log_prob", *_ENGINE_DIMS)  # fmt: skip
"""The textbook accounting's options that apply only to some algorithms or with the engine
(:func:`model.rlhf.shares.not_applicable`)."""


def _network_row(x: Any) -> dict[str, Any]:
    """One network of the textbook accounting as its ``network_table`` row."""
    return {
        "role": x.role,
        "params": x.params,
        "active_params": x.flop_params,
        "trainable": x.trainable,
        "bytes_per_param": x.bytes_per_param,
        "bytes": x.bytes,
    }
