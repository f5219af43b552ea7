"""The original planner's RLHF tab as a report dictionary (``trainplan rlhf``): resident memory,
FLOPs and time shares of one step (:mod:`model.rlhf.shares`), and with a model name the faithful
accounting of :mod:`interface.rlhf.report`."""

from __future__ import annotations

from typing import Any

from trainplan.interface.rlhf import report as rf
from trainplan.interface.tab_values import jsonable, optional_count, resolve_peak
from trainplan.model.errors import InputError, check_applicable
from trainplan.model.rlhf import shares as rl
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


def rlhf_report(
    algorithm: str,
    policy_params: Any = None,
    reward_params: Any = None,
    reward: str | None = None,
    prompts: Any = RLHF_DEFAULTS["prompts"],
    samples_per_prompt: Any = None,
    prompt_tokens: Any = RLHF_DEFAULTS["prompt_tokens"],
    completion_tokens: Any = RLHF_DEFAULTS["completion_tokens"],
    epochs: Any = RLHF_DEFAULTS["epochs"],
    decode_mfu: Any = None,
    train_mfu: Any = RLHF_DEFAULTS["train_mfu"],
    gpu: str | None = None,
    peak_tflops: Any = None,
    chips: Any = None,
    rollout_engine: bool = False,
    layers: Any = None,
    kv_heads: Any = None,
    head_dim: Any = None,
    rollout_batch: Any = None,
    logits_buffer: bool = False,
    vocab_size: Any = None,
    logits_tokens: Any = None,
    model: str | None = None,
    **faithful: Any,
) -> dict[str, Any]:
    """The RLHF tab: resident memory by network, FLOPs and time of one step by phase.

    With ``model`` (a catalogue name or a config.json path) it also gives the faithful accounting
    of issue 12 under ``faithful`` (:func:`interface.rlhf.report.faithful_report`; its options,
    :data:`interface.rlhf.report.FAITHFUL_ONLY`, come as further keywords), and ``accounting``
    says which; without it the figures are the original planner's (``accounting: "original"``).

    The rollout engine's weight copy and KV cache (``rollout_engine``) and the FP32 logits buffer
    (``logits_buffer``) are off by default (the original planner leaves them out) and add to
    ``resident_bytes`` when on; ``bytes_per_policy_param`` counts the networks only. Options left
    None take :data:`RLHF_DEFAULTS` (``reward`` model for PPO and GRPO; ``gpu`` H100-SXM unless
    ``peak_tflops`` is given).

    Raises
    ------
    InputError
        A bad value, or an option that does not apply (:func:`model.rlhf.shares.not_applicable`:
        ``reward`` with DPO, the KV-cache dimensions without ``rollout_engine``…; ``gpu`` with
        ``peak_tflops``).

    Examples
    --------
    >>> r = rlhf_report("ppo", 70e9, 70e9)
    >>> r["networks"], r["bytes_per_policy_param"], r["resident_bytes"]
    (4, 36, 2520000000000)
    """

    unknown = sorted(set(faithful) - set(rf.FAITHFUL_ONLY) - {"rollout_batch"})
    if unknown:
        raise TypeError(f"rlhf_report() got an unexpected keyword argument {unknown[0]!r}")
    if model is not None:
        seed_params = {
            "policy_params": policy_params, "reward_params": reward_params, "chips": chips,
            "peak_tflops": peak_tflops, "rollout_engine": rollout_engine, "layers": layers,
            "kv_heads": kv_heads, "head_dim": head_dim, "logits_buffer": logits_buffer,
            "vocab_size": vocab_size, "logits_tokens": logits_tokens,
        }  # fmt: skip
        params = {
            "algorithm": algorithm, "model": model, "reward": reward, "prompts": prompts,
            "samples_per_prompt": samples_per_prompt, "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens, "epochs": epochs, "decode_mfu": decode_mfu,
            "train_mfu": train_mfu, "gpu": gpu, "rollout_batch": rollout_batch,
            **seed_params, **faithful,
        }  # fmt: skip
        return rf.faithful_report(rlhf_report, params)
    check_applicable(
        {k: v for k, v in faithful.items() if k in rf.FAITHFUL_ONLY},
        dict.fromkeys(rf.FAITHFUL_ONLY, "it belongs to the faithful accounting; add --model NAME"),
    )
    algo = str(algorithm).lower()
    given = {
        "reward": reward,
        "reward_params": reward_params,
        "samples_per_prompt": samples_per_prompt,
        "decode_mfu": decode_mfu,
        "rollout_engine": rollout_engine,
        "layers": layers,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "rollout_batch": rollout_batch,
        "vocab_size": vocab_size,
        "logits_tokens": logits_tokens,
    }
    check_applicable(
        given,
        rl.not_applicable(algo, reward, rollout_engine=rollout_engine, logits_buffer=logits_buffer),
    )
    if policy_params is None:
        raise InputError(
            "policy_params: missing; give --policy-params SIZE (the original planner's accounting) or --model "
            "NAME (the faithful one)"
        )
    n_p = parse_count(policy_params, "policy_params")
    n_r = None if reward_params is None else parse_count(reward_params, "reward_params")
    nets = rl.networks(algo, n_p, n_r, reward)
    if algo != "dpo":
        reward = reward or "model"
    samples = (
        RLHF_DEFAULTS["samples_per_prompt"] if samples_per_prompt is None else samples_per_prompt
    )
    seqs, seq_tokens = _rlhf_counts(algo, prompts, samples, prompt_tokens, completion_tokens)
    flops = rl.phase_flops(algo, nets, seqs, seq_tokens, parse_count(epochs, "epochs"))
    peak, peak_source = resolve_peak(gpu, peak_tflops, RLHF_DEFAULTS["gpu"])
    decode = RLHF_DEFAULTS["decode_mfu"] if decode_mfu is None else decode_mfu
    mfus = (parse_number(decode, "decode_mfu"), parse_number(train_mfu, "train_mfu"))
    times = rl.phase_times(flops, *mfus, peak, parse_count(1 if chips is None else chips, "chips"))
    dims = {
        "layers": layers,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "rollout_batch": rollout_batch,
        "vocab_size": vocab_size,
        "logits_tokens": logits_tokens,
    }
    extras = rl.extra_bytes(
        n_p,
        seqs,
        seq_tokens,
        rollout_engine=rollout_engine,
        logits_buffer=logits_buffer,
        **{k: optional_count(k, v) for k, v in dims.items()},
    )
    net_bytes = rl.network_bytes(nets)
    ppo_bytes = rl.network_bytes(rl.networks("ppo", n_p, n_r))
    total_flops, total_time = sum(flops.values()), sum(times.values())
    table = [
        {
            "role": x.role,
            "params": x.params,
            "trainable": x.trainable,
            "bytes_per_param": x.bytes_per_param,
            "bytes": x.bytes,
        }
        for x in nets
    ]
    return jsonable({
        "tab": "rlhf", "accounting": "original", "algorithm": algo, "reward": reward,
        "networks": len(nets), "network_table": table,
        "bytes_per_policy_param": net_bytes / n_p, "network_bytes": net_bytes,
        "extra_bytes": extras, "resident_bytes": net_bytes + sum(extras.values()),
        "fewer_than_ppo": 1 - net_bytes / ppo_bytes,
        "sequences_per_step": seqs, "tokens_per_sequence": seq_tokens,
        "rollout_batch": rl.rollout_batch_size(optional_count("rollout_batch", rollout_batch), seqs)
        if rollout_engine else None,
        "phase_flops": flops, "rollout_flops": flops["rollout"],
        "rollout_flops_share": flops["rollout"] / total_flops,
        "phase_flops_share": {k: f / total_flops for k, f in flops.items()},
        "phase_seconds": times, "rollout_time_share": times["rollout"] / total_time,
        "phase_time_share": {k: t / total_time for k, t in times.items()},
        "peak_flops_per_s": peak, "peak_source": peak_source, "assumptions": rl.ASSUMPTIONS,
    })  # fmt: skip
