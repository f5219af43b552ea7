"""Resident memory, FLOPs and time shares of one RLHF step
(docs/concepts/conventions.md "RLHF accounting").

Networks (OpenRLHF's layout, Hu et al. 2024, arXiv 2405.11143): PPO (Schulman et al. 2017) keeps an
actor and a critic (trainable) and a reward model and a reference (frozen); GRPO (Shao et al. 2024,
DeepSeekMath, arXiv 2402.03300) drops the critic, and with a rule-based reward (DeepSeek-R1) the
reward model too; DPO (Rafailov et al. 2023) keeps a policy and a reference and has no rollout.
Trainable networks hold 16 B/param (mixed-precision Adam, ZeRO paper), frozen ones 2 B/param (BF16).
The critic and the reward model have ``reward_params`` parameters (the critic starts from the reward
model), the actor and the reference ``policy_params``.

FLOPs of one step with ``P`` prompts × ``G`` samples of ``Tp + Tc`` tokens, ``E`` epochs: the
rule the faithful accounting reads too (:func:`model.rlhf.phases.phase_flops` over
:func:`model.rlhf.phases.step_roles`, which also lists the networks here) — rollout ``2·N_p`` per
token (prefill and decode), scoring ``2·N`` per token by every scoring network (reference, reward
model, critic, and the actor's old log-probs: the PPO ratio's denominator, recomputed with the
training weights unless the engine's are used, ``old_log_prob``), training ``6·N`` per token per
epoch by every trainable network. ``N`` in the FLOPs is the parameters a token passes through
(:attr:`Network.flop_params`: a mixture of experts' active parameters, its routed experts' share
only; all of them for a dense network, Kaplan et al. 2020's ``C = 6N`` with ``N`` the parameters
used per token), while the resident bytes count every parameter. DPO trains on chosen and
rejected sequences (2 per prompt) and scores them with the reference. Time of a phase = its
FLOPs ÷ (its MFU × peak × chips): decode MFU for the rollout, training MFU for scoring and
training.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from trainplan.model.errors import InputError, check_applicable
from trainplan.model.quantities import FRACTION_RULE
from trainplan.model.rlhf.phases import step_roles
from trainplan.model.units import shown_number

__all__ = [
    "Network",
    "ALGORITHMS",
    "networks",
    "network_bytes",
    "active_params",
    "phase_times",
    "kv_cache_bytes",
    "logits_buffer_bytes",
    "TRAINABLE_BYTES_PER_PARAM",
    "FROZEN_BYTES_PER_PARAM",
    "DEFAULTS",
    "ROLLOUT_BATCH",
    "rollout_batch_size",
    "ASSUMPTIONS",
    "extra_bytes",
    "not_applicable",
]

ALGORITHMS = ("ppo", "grpo", "dpo")
REWARDS = ("model", "rule")
TRAINABLE_BYTES_PER_PARAM = 16
FROZEN_BYTES_PER_PARAM = 2


@dataclass(frozen=True, slots=True)
class Network:
    """One resident network: ``role`` (actor, critic, reward, reference, policy), size, trained?

    ``params`` (count) sizes its resident bytes; ``active_params`` (count, None: ``params``, a
    dense network) is what one token passes through — a mixture of experts' active parameters
    (:func:`model.params.count_params` ``.active``), which its FLOPs count; ``weights``: whose
    network it is, ``policy`` or ``reward`` (:attr:`model.rlhf.phases.StepRole.weights`)."""

    role: str
    params: Fraction
    trainable: bool
    active_params: Fraction | None = None
    weights: str = "policy"

    @property
    def flop_params(self) -> Fraction:
        """Parameters one token's FLOPs count (``2·N`` to infer, ``6·N`` to train): the active
        ones of a mixture of experts, all of a dense network."""
        return self.params if self.active_params is None else self.active_params

    @property
    def bytes_per_param(self) -> int:
        """16 when trained (weights, grads, Adam states), 2 when frozen (BF16 weights)."""
        return TRAINABLE_BYTES_PER_PARAM if self.trainable else FROZEN_BYTES_PER_PARAM

    @property
    def bytes(self) -> Fraction:
        """Resident bytes of this network."""
        return self.params * self.bytes_per_param


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    low = str(value).lower()
    if low not in allowed:
        raise InputError(f"{name}: {value!r} is not one of {', '.join(allowed)}")
    return low


def not_applicable(
    algorithm: str,
    reward: str | None = None,
    *,
    rollout_engine: bool = False,
    logits_buffer: bool = False,
    placed: Iterable[str] = (),
) -> dict[str, str]:
    """The RLHF tab's options that do not apply to ``algorithm`` with ``reward`` (and without the
    rollout engine or the logits buffer), each with the reason — given, they would be ignored, so
    :func:`model.errors.check_applicable` refuses them. ``placed``: the options of the accounting
    that places the step's roles (the faithful one, ``interface.rlhf.report.FAITHFUL_ONLY``),
    which DPO has not (no rollout to place, :func:`model.rlhf.spec.placed_algorithm`): each
    refused under DPO, with DPO's own reason where it has one (``critic_model``). The one place
    that says which option applies to which algorithm.

    Examples
    --------
    >>> sorted(not_applicable("grpo", "rule", rollout_engine=True, logits_buffer=True))
    ['critic_model', 'reward_params']
    >>> why = not_applicable("dpo", placed=("critic_model", "gpus"))
    >>> why["gpus"]
    'DPO (Rafailov et al. 2023) learns from preference pairs: it has no rollout to place, so only \
the textbook accounting, by its sizes'
    >>> why["critic_model"]
    'DPO (Rafailov et al. 2023) learns from preference pairs: it has no reward model or critic'
    """
    algo = _check_choice("algorithm", algorithm, ALGORITHMS)
    out: dict[str, str] = {}
    if algo == "dpo":
        pairs = "DPO (Rafailov et al. 2023) learns from preference pairs"
        out["reward"] = f"{pairs}: it has no reward model or rule"
        out["reward_params"] = out["critic_model"] = f"{pairs}: it has no reward model or critic"
        out["samples_per_prompt"] = f"{pairs}: 2 sequences per prompt, chosen and rejected"
        out["old_log_prob"] = f"{pairs}: it has no PPO ratio, so no old log-probs"
        for name in ("decode_mfu", "rollout_engine", "rollout_batch"):
            out[name] = f"{pairs}: it generates no rollouts"
        for name in placed:
            out.setdefault(
                name,
                f"{pairs}: it has no rollout to place, so only the textbook accounting, "
                "by its sizes",
            )
    elif algo == "grpo" and reward is not None and str(reward).lower() == "rule":
        no_network = "GRPO with a rule-based reward has no reward model and no critic"
        out["reward_params"] = out["critic_model"] = no_network
    if not rollout_engine:
        for name in ("layers", "kv_heads", "head_dim", "rollout_batch"):
            out.setdefault(name, "it sizes the rollout engine's KV cache; add `rollout_engine`")
    if not logits_buffer:
        for name in ("vocab_size", "logits_tokens"):
            out[name] = "it sizes the FP32 logits buffer; add `logits_buffer`"
    return out


def networks(
    algorithm: str,
    policy_params: Fraction | int,
    reward_params: Fraction | int | None = None,
    reward: str | None = None,
    *,
    policy_active: Fraction | int | None = None,
    reward_active: Fraction | int | None = None,
) -> list[Network]:
    """The networks ``algorithm`` keeps resident: the roles of :func:`model.rlhf.phases.
    step_roles` but the rollout engine, in their order.

    Parameters
    ----------
    algorithm : {"ppo", "grpo", "dpo"}
    policy_params, reward_params : number
        Parameters of the policy and of the reward model / critic (default: the policy's).
    policy_active, reward_active : number or None
        Parameters one token passes through (a mixture of experts' active parameters; None: all,
        a dense network; ``reward_active`` defaults to the policy's when ``reward_params`` does):
        the FLOPs count them (:attr:`Network.flop_params`), the resident bytes do not.
    reward : {"model", "rule"} or None
        A learned reward model (the default for PPO and GRPO) or a rule-based reward (no network);
        DPO has neither, so it takes none.

    Raises
    ------
    InputError
        Unknown algorithm or reward, non-positive sizes, or a reward or reward size that does not
        apply (:func:`not_applicable`: DPO; ``reward_params`` with GRPO and a rule reward).

    Examples
    --------
    >>> [n.role for n in networks("grpo", 70 * 10**9, reward="rule")]
    ['actor', 'reference']
    >>> [n.role for n in networks("ppo", 70 * 10**9)]
    ['actor', 'critic', 'reference', 'reward']
    """
    algo = _check_choice("algorithm", algorithm, ALGORITHMS)
    check_applicable(
        {"reward": reward, "reward_params": reward_params},
        not_applicable(algo, reward, rollout_engine=True, logits_buffer=True),
    )
    kind = _check_choice("reward", reward or "model", REWARDS)
    n_p, n_r, a_p, a_r = _sizes(policy_params, reward_params, policy_active, reward_active)
    size = {"policy": (n_p, a_p), "reward": (n_r, a_r)}
    nets = []
    for s in step_roles(algo, kind):
        if s.role != "rollout":  # the engine's weight copy is an extra (:func:`extra_bytes`)
            params, active = size[s.weights]
            nets.append(Network(s.role, params, s.trainable, active, s.weights))
    return nets


def _sizes(
    policy: Fraction | int,
    reward: Fraction | int | None,
    policy_active: Fraction | int | None,
    reward_active: Fraction | int | None,
) -> tuple[Fraction, Fraction, Fraction | None, Fraction | None]:
    """(policy, reward, policy active, reward active) parameters of :func:`networks`: the reward
    network the policy's size (and active count) when not given; each positive, an active count
    at most its network's.

    Raises
    ------
    InputError
        A size not positive, or an active count above its network's parameters.
    """
    n_p = Fraction(policy)
    n_r = n_p if reward is None else Fraction(reward)
    a_p = None if policy_active is None else Fraction(policy_active)
    a_r = Fraction(reward_active) if reward_active is not None else None
    a_r = a_p if a_r is None and reward is None else a_r
    for name, value, whole in (
        ("policy_params", n_p, None),
        ("reward_params", n_r, None),
        ("policy_active", a_p, n_p),
        ("reward_active", a_r, n_r),
    ):
        if value is not None and value <= 0:
            raise InputError(f"{name}: {value} must be positive")
        if value is not None and whole is not None and value > whole:
            raise InputError(f"{name}: {value} is more than the network's {whole} parameters")
    return n_p, n_r, a_p, a_r


def network_bytes(nets: list[Network]) -> Fraction:
    """Resident bytes of all networks (trainable 16 B/param, frozen 2 B/param).

    Examples
    --------
    >>> network_bytes(networks("ppo", 70 * 10**9)) == 36 * 70 * 10**9
    True
    """
    return sum((n.bytes for n in nets), Fraction(0))


def active_params(nets: list[Network]) -> dict[str, Fraction]:
    """Parameters a token passes through (:attr:`Network.flop_params`) by whose network it is
    (``policy``, ``reward``): what :func:`model.rlhf.phases.phase_flops` multiplies.

    Examples
    --------
    >>> active_params(networks("ppo", 70, 7, policy_active=10))
    {'policy': Fraction(10, 1), 'reward': Fraction(7, 1)}
    """
    return {n.weights: n.flop_params for n in nets}


def phase_times(
    flops: dict[str, Fraction],
    decode_mfu: Fraction,
    train_mfu: Fraction,
    peak_flops_per_s: Fraction | int,
    chips: int = 1,
) -> dict[str, Fraction]:
    """Seconds per phase: FLOPs ÷ (MFU × peak × chips); decode MFU for the rollout.

    Raises
    ------
    InputError
        An MFU outside (0, 1], or a non-positive peak or chip count.

    Examples
    --------
    >>> t = phase_times({"rollout": 2, "scoring": 2, "training": 6}, Fraction(1, 25),
    ...                 Fraction(2, 5), 1)
    >>> float(t["rollout"] / sum(t.values()))
    0.7142857142857143
    """
    for name, value in (("decode_mfu", decode_mfu), ("train_mfu", train_mfu)):
        if not 0 < value <= 1:
            raise InputError(f"{name}: {shown_number(value)} must be in (0, 1]: {FRACTION_RULE}")
    if peak_flops_per_s <= 0 or chips < 1:
        raise InputError(
            f"peak and chips: {shown_number(peak_flops_per_s)}, {shown_number(chips)} must be positive"
        )
    rate = Fraction(peak_flops_per_s) * chips
    return {
        phase: Fraction(f) / ((decode_mfu if phase == "rollout" else train_mfu) * rate)
        for phase, f in flops.items()
    }


def kv_cache_bytes(
    layers: int, kv_heads: int, head_dim: int, sequences: int, tokens: int, bytes_per_value: int = 2
) -> int:
    """KV cache of the rollout engine: ``2 (K, V) · L · g · head_dim · bytes · sequences · tokens``.

    Shape per layer: two tensors ``[sequences, tokens, g, head_dim]`` in BF16.

    Examples
    --------
    >>> kv_cache_bytes(80, 8, 128, 1, 1)  # Llama-2/3 70B: 320 KiB per token
    327680
    """
    named = {
        "layers": layers,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "rollout_batch": sequences,
        "tokens": tokens,
    }
    for name, value in named.items():
        if value < 1:
            raise InputError(f"{name}: {value} must be at least 1 for the KV cache")
    return 2 * layers * kv_heads * head_dim * bytes_per_value * sequences * tokens


def logits_buffer_bytes(tokens: int, vocab_size: int) -> int:
    """FP32 logits of one training micro-batch: ``tokens × V × 4`` bytes (shape ``[tokens, V]``).

    Examples
    --------
    >>> logits_buffer_bytes(8192, 128256)  # 4.2 GB for one 8K-token sequence of Llama 3
    4202692608
    """
    if tokens < 1 or vocab_size < 1:
        raise InputError(f"logits buffer: tokens {tokens} and vocab_size {vocab_size} must be ≥ 1")
    return 4 * tokens * vocab_size


ROLLOUT_BATCH = 256
"""Sequences the rollout engine decodes at once, by default: vLLM's ``max_num_seqs`` default of
256 per engine (``EngineArgs.max_num_seqs = 256``, vllm/engine/arg_utils.py; the scheduler's cap on
concurrent sequences), which OpenRLHF and verl use for their rollouts unless set. The KV cache is
held for these sequences, not for every sequence of the step; ``rollout_batch`` overrides it."""

DEFAULTS: dict[str, object] = {
    "prompts": 1024,
    "samples_per_prompt": 16,
    "prompt_tokens": 1024,
    "completion_tokens": 4096,
    "epochs": 1,
    "decode_mfu": 0.04,
    "train_mfu": 0.40,
    "gpu": "H100-SXM",
    "rollout_batch": ROLLOUT_BATCH,
    "old_log_prob": True,
}
"""Documented defaults of the RLHF tab: a GRPO step as in DeepSeekMath (1,024 prompts × 16 samples,
long completions); decode MFU 4% (memory-bound token-by-token generation) and training MFU 40%
(decode MFU one tenth of training MFU); the rollout engine decodes
:data:`ROLLOUT_BATCH` sequences at once (vLLM's default); the actor recomputes the old log-probs
(``old_log_prob`` True: verl's ``RayPPOTrainer.fit`` unless ``bypass_mode``, OpenRLHF's
``make_experience`` always; :mod:`model.rlhf.phases`). The FLOP and time *shares* depend only on
the algorithm, the networks, the epochs and the two MFUs, not on the token counts or the GPU."""

ASSUMPTIONS = (
    "rollout 2·N_p per token (prefill + decode); scoring 2·N per token per scoring network "
    "(the actor's old log-probs unless the engine's are used, reference, reward, critic); "
    "training 6·N per token per epoch per trainable network (N: the parameters a token passes "
    "through, a mixture of experts' active ones; memory counts all); decode MFU for the rollout, "
    "training MFU for scoring and training"
)


def rollout_batch_size(rollout_batch: int | None, sequences: int) -> int:
    """Sequences the rollout engine decodes at once: ``rollout_batch`` as given, else
    :data:`ROLLOUT_BATCH` (vLLM's default ``max_num_seqs``) or the step's ``sequences`` when fewer.

    Raises
    ------
    InputError
        A rollout batch larger than the step's sequences.

    Examples
    --------
    >>> rollout_batch_size(None, 16384), rollout_batch_size(None, 100), rollout_batch_size(64, 100)
    (256, 100, 64)
    """
    if rollout_batch is None:
        return min(ROLLOUT_BATCH, sequences)
    if rollout_batch > sequences:
        raise InputError(
            f"rollout_batch: {rollout_batch} is more than the {sequences:,} sequences of the step"
        )
    return rollout_batch


def extra_bytes(
    policy_params: Fraction | int,
    sequences: int,
    tokens_per_sequence: int,
    *,
    rollout_engine: bool = False,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    rollout_batch: int | None = None,
    logits_buffer: bool = False,
    vocab_size: int | None = None,
    logits_tokens: int | None = None,
) -> dict[str, Fraction]:
    """Optional memory beyond the networks (off by default, as in the textbook accounting), in bytes.

    ``rollout_engine``: the inference engine's own BF16 weight copy (2·N_p) and its KV cache for
    the ``rollout_batch`` sequences it decodes at once (default :data:`ROLLOUT_BATCH`, vLLM's 256,
    or all of the step's ``sequences`` when fewer) of ``tokens_per_sequence`` tokens.
    ``logits_buffer``: FP32 logits of ``logits_tokens`` tokens (default: one sequence).

    Raises
    ------
    InputError
        An option on without the dimensions it needs, or a rollout batch larger than the step.

    Examples
    --------
    >>> extra_bytes(Fraction(10), 1, 1, logits_buffer=True, vocab_size=100)
    {'logits_buffer_bytes': Fraction(400, 1)}
    """
    extras: dict[str, Fraction] = {}
    if rollout_engine:
        dims = {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim}
        need = [k for k, v in dims.items() if v is None]
        if need:
            named = ", ".join(f"`{k}`" for k in need)
            raise InputError(f"rollout_engine: the KV cache needs {named}")
        batch = rollout_batch_size(rollout_batch, sequences)
        extras["rollout_weights_bytes"] = 2 * Fraction(policy_params)
        kv = kv_cache_bytes(layers, kv_heads, head_dim, batch, tokens_per_sequence)  # type: ignore[arg-type]
        extras["kv_cache_bytes"] = Fraction(kv)
    if logits_buffer:
        if vocab_size is None:
            raise InputError("logits_buffer: needs `vocab_size`")
        tokens = logits_tokens or tokens_per_sequence
        extras["logits_buffer_bytes"] = Fraction(logits_buffer_bytes(tokens, vocab_size))
    return extras
