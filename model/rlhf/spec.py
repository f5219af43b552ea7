"""An RLHF step as people run it (issue 12): the workload, the roles, the logits buffers and
the FLOPs of each phase — the inputs of :mod:`model.rlhf.roles` (each role's bytes and seconds)
and :mod:`model.rlhf.step` (a placement's step). The textbook accounting (16 / 2 B per parameter,
FLOP shares at two MFUs) stays in :mod:`model.rlhf.shares`.

Roles (OpenRLHF's and verl's, Hu et al. 2024 arXiv 2405.11143; Sheng et al. 2025, HybridFlow,
EuroSys, arXiv 2409.19256), their phases and each phase's FLOPs are one rule with the textbook
accounting's networks (:mod:`model.rlhf.phases`):

* ``rollout`` — the inference engine (vLLM / SGLang) generating the step's rollouts with the
  policy's weights (:mod:`model.rollout`).
* ``actor`` — the policy, trained; in the scoring phase it recomputes the rollouts' log-probs
  with its training weights ("old log-probs": verl's ``compute_log_prob``, OpenRLHF's actor
  forward), which the PPO ratio needs; ``old_log_prob=False`` takes them from the engine.
* ``critic`` (PPO) — the value model, trained; it scores values in the scoring phase.
* ``reference`` — the frozen initial policy: log-probs for the KL term.
* ``reward`` — a frozen reward model (none with a rule-based reward, as DeepSeek-R1).

Phases: ``rollout`` (generate), ``scoring`` (every forward over the step's sequences), ``training``
(``epochs`` passes of the trainable roles over them, one optimizer update per ``train_batch``).

The actor's and the reference's forwards end in logits ``[tokens × V]`` (÷ tp, vocab-parallel)
for their log-probs; what a pass holds over them depends on the framework's path and the pass
(:mod:`model.rlhf.logits`). ``logits="full"`` is each framework's own path; ``chunked`` keeps FP32
logits and makes the entropy's temporary over 2,048 tokens at a time (verl
``entropy_from_logits_with_chunking``, chunk 2048); ``fused`` never materialises either beyond
one chunk (fused linear cross-entropy: Liger Kernel's, verl ``use_fused_kernels``). Value heads
(critic, reward) output one number per token: no logits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction

from trainplan.model.errors import InputError
from trainplan.model.frameworks import DEFAULT_ZERO_STAGE, Framework, check_framework
from trainplan.model.layout import Recompute
from trainplan.model.model_spec import ModelSpec
from trainplan.model.params import count_params
from trainplan.model.quantities import FRACTION_RULE
from trainplan.model.rlhf.packing import Packing, packing_of, peak_tokens, split_peak_tokens
from trainplan.model.rlhf.phases import PHASES, StepRole, phase_flops, step_roles, value_head_model
from trainplan.model.rlhf.shares import ROLLOUT_BATCH
from trainplan.model.rollout import check_fraction
from trainplan.model.rollout_prefix import (
    agent_workers_of,
    check_agent_loop_chunks,
    nearest_divisors,
)
from trainplan.model.units import LIMITS, shown_number

__all__ = [
    "Role",
    "PHASES",
    "LogitsMode",
    "RoleSpec",
    "RLHFSpec",
    "MICRO_BATCH_TOKENS",
    "LOGITS_CHUNK_TOKENS",
    "HOST_BYTES_PER_NODE",
    "DEFAULT_FRACTION_COLOCATED",
    "DEFAULT_FRACTION_SPLIT",
    "DEFAULT_FRACTION_OPENRLHF",
    "default_fraction",
    "placed_algorithm",
    "DPO_ACCOUNTING",
]


DPO_ACCOUNTING = "its textbook accounting takes `policy_params`, without `model`"
"""Where DPO's accounting is, in parameter names (:func:`placed_algorithm`'s default): what a
reader of the RLHF step's own parameters runs instead."""


def placed_algorithm(algorithm: str, instead: str = DPO_ACCOUNTING) -> str:
    """``algorithm`` in lower case, one whose step has roles to place: PPO (Schulman et al. 2017)
    or GRPO (Shao et al. 2024) — each generates rollouts; DPO (Rafailov et al. 2023) trains on
    fixed preference pairs, with no rollout and no engine, so only the textbook accounting
    (:mod:`model.rlhf.shares`) takes it. ``instead``: where DPO's accounting is, in the caller's
    words (a command that has no ``policy_params`` names the command that has).

    Raises
    ------
    InputError
        Any other algorithm (DPO with ``instead``).

    >>> placed_algorithm("GRPO")
    'grpo'
    >>> placed_algorithm("dpo", "run the RLHF tab")
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: algorithm: 'dpo' is not one of ppo, grpo (DPO has no rollout to place: run the RLHF tab)
    """
    algo = str(algorithm).lower()
    if algo not in ("ppo", "grpo"):
        raise InputError(
            f"algorithm: {algorithm!r} is not one of ppo, grpo"
            + (f" (DPO has no rollout to place: {instead})" if algo == "dpo" else "")
        )
    return algo


class Role(StrEnum):
    ROLLOUT = "rollout"
    ACTOR = "actor"
    CRITIC = "critic"
    REFERENCE = "reference"
    REWARD = "reward"


class LogitsMode(StrEnum):
    """How log-probs and entropy are computed from the output layer (module docstring)."""

    FULL = "full"
    CHUNKED = "chunked"
    FUSED = "fused"


MICRO_BATCH_TOKENS = 16_384
"""Tokens per micro-batch of the actor's update and of every log-prob forward: verl's
``ppo_max_token_len_per_gpu`` and ``log_prob_max_token_len_per_gpu`` default (16384,
``verl/trainer/config/actor/actor.yaml``, ``rollout/rollout.yaml``): the cap the rollouts are
packed at (:mod:`model.rlhf.packing`); a micro-batch's time is counted at ⌊tokens / (prompt +
completion)⌋ whole sequences, at least one (:attr:`RLHFSpec.micro_batch_sequences`)."""

LOGITS_CHUNK_TOKENS = 2048
"""Tokens per chunk of chunked or fused log-prob / entropy: verl's
``entropy_from_logits_with_chunking(chunk_size=2048)`` (``verl/utils/torch_functional.py``)."""

HOST_BYTES_PER_NODE = 2 * 10**12
"""Host memory of one 8-GPU node: 2 TB (NVIDIA DGX H100 datasheet, "System memory 2TB"); what
offloaded optimizer state must fit in (``host_memory``)."""

DEFAULT_FRACTION_COLOCATED = Fraction(1, 2)
"""The engine's memory fraction when it shares its GPUs with training roles: verl's rollout
default ``gpu_memory_utilization: 0.5`` (``verl/trainer/config/rollout/rollout.yaml``)."""

DEFAULT_FRACTION_SPLIT = Fraction(9, 10)
"""… and on GPUs of its own: vLLM's default ``gpu_memory_utilization`` 0.9 (engine arguments)."""

DEFAULT_FRACTION_OPENRLHF = Fraction(19, 20)
"""The engine's memory fraction under the ``deepspeed`` profile, colocated or not: OpenRLHF's
``--vllm.gpu_memory_utilization`` default 0.95 (``openrlhf/cli/train_ppo_ray.py``, 3c3be6234),
which it passes to every vLLM engine it creates (``create_vllm_engines``)."""


def default_fraction(colocated: bool, framework: Framework | None = None) -> Fraction:
    """The engine's memory fraction when none is given: verl's 0.5 when it shares GPUs with
    training roles, vLLM's 0.9 alone; OpenRLHF's 0.95 either way under ``deepspeed``.

    >>> default_fraction(True), default_fraction(False), default_fraction(True, Framework.DEEPSPEED)
    (Fraction(1, 2), Fraction(9, 10), Fraction(19, 20))
    """
    if framework is Framework.DEEPSPEED:
        return DEFAULT_FRACTION_OPENRLHF
    return DEFAULT_FRACTION_COLOCATED if colocated else DEFAULT_FRACTION_SPLIT


@dataclass(frozen=True, slots=True)
class RoleSpec:
    """One role of the step: its network and its place in the step (whether it trains, what its
    forward outputs, the phases it works in: :func:`model.rlhf.phases.step_roles`)."""

    role: Role
    model: ModelSpec
    step: StepRole
    """The role's rule (:class:`model.rlhf.phases.StepRole`)."""

    @property
    def trainable(self) -> bool:
        """Trained (an optimizer update each step) or frozen."""
        return self.step.trainable

    @property
    def log_probs(self) -> bool:
        """Its forward ends in the vocabulary's logits (actor, reference, rollout); False for a
        value head (critic, reward)."""
        return self.step.log_probs

    @property
    def phases(self) -> tuple[str, ...]:
        """The phases it works in."""
        return self.step.phases

    @property
    def params(self) -> int:
        """Its parameters (the catalogue's exact count)."""
        return _params(self.model)

    @property
    def active_params(self) -> int:
        """Parameters a token passes through (MoE: the routed experts it uses)."""
        arch = self.model.arch
        return count_params(arch).active if arch is not None else self.params


def _params(model: ModelSpec) -> int:
    if model.num_params_declared is not None:
        return model.num_params_declared
    assert model.arch is not None
    return count_params(model.arch).total


@dataclass(frozen=True, slots=True, kw_only=True)
class RLHFSpec:
    """One PPO or GRPO step's workload and the mechanisms it runs with.

    Sizes are counts (sequences, tokens); ``engine_memory_fraction`` is vLLM's
    ``gpu_memory_utilization`` (None: :data:`DEFAULT_FRACTION_COLOCATED` when the engine shares
    GPUs with training roles, :data:`DEFAULT_FRACTION_SPLIT` on GPUs of its own,
    :data:`DEFAULT_FRACTION_OPENRLHF` under ``deepspeed``; the placement search chooses it when
    None).

    Raises
    ------
    InputError
        An algorithm other than ppo/grpo, a model without dimensions, lengths or counts below 1,
        a train batch that does not divide the step's sequences or that a GRPO group does not
        divide, under verl's profiles (``megatron``, ``fsdp2``) a step's samples that verl's
        agent-loop workers cannot split equally
        (:func:`model.rollout_prefix.check_agent_loop_chunks`), ``agent_workers`` below 1 or
        given under ``deepspeed`` (:func:`model.rollout_prefix.agent_workers_of`), a fraction
        outside (0, 1),
        ``off_policy`` other than 0 or 1.
    """

    algorithm: str
    """``ppo`` or ``grpo``."""
    policy: ModelSpec
    """The actor's (and the reference's and the engine's) network, with its dimensions."""
    critic: ModelSpec | None = None
    """The critic's and the reward model's network (default: the policy's), built with a value
    head in place of its LM head (:func:`model.rlhf.phases.value_head_model`)."""
    reward: str = "model"
    """``model`` (a frozen reward network) or ``rule`` (a verifier: no network)."""
    prompts: int
    """Prompts per step."""
    samples_per_prompt: int
    """Rollouts per prompt: GRPO's group size."""
    prompt_tokens: int
    """Tokens per prompt."""
    completion_tokens: int
    """The rollouts' mean completion length (tokens); every rollout has it unless
    ``max_completion_tokens`` says the longest is longer."""
    max_completion_tokens: int | None = None
    """The longest rollout's completion (a synchronous engine decodes until it ends); None: the
    mean (:mod:`model.rollout`)."""
    epochs: int = 1
    """PPO epochs: passes of the update over the step's rollouts."""
    train_batch: int | None = None
    """Sequences per optimizer update (OpenRLHF ``train_batch_size``; verl ``ppo_mini_batch_size``
    × n); None = all of the step's, one update per epoch."""
    micro_batch_tokens: int = MICRO_BATCH_TOKENS
    """Tokens per micro-batch of the update and the log-prob forwards (:data:`MICRO_BATCH_TOKENS`)."""
    logits: LogitsMode = LogitsMode.FULL
    """How log-probs and entropy are computed over the logits (the module docstring)."""
    logits_chunk_tokens: int = LOGITS_CHUNK_TOKENS
    """Tokens per chunk with ``chunked`` or ``fused`` logits (:data:`LOGITS_CHUNK_TOKENS`)."""
    old_log_prob: bool = True
    """The actor recomputes the rollouts' log-probs in the scoring phase (verl's default); False:
    the engine's are used."""
    engine_memory_fraction: Fraction | None = None
    """vLLM ``gpu_memory_utilization`` in (0, 1); None: the class docstring's defaults."""
    max_num_seqs: int = ROLLOUT_BATCH
    """Sequences one engine replica decodes at once at most (vLLM ``max_num_seqs``; default
    :data:`model.rlhf.shares.ROLLOUT_BATCH`, vLLM's 256)."""
    off_policy: int = 0
    """0: synchronous (each rollout uses the weights just trained); 1: one-step off-policy (the
    rollout of step k+1 runs while step k trains, on GPUs of its own)."""
    framework: Framework = Framework.MEGATRON
    """The training roles' framework profile (:mod:`model.frameworks`; not ``textbook``)."""
    zero_stage: int | None = None
    """Its ZeRO stage; None: the framework's default."""
    packing: Packing | None = None
    """How rollouts are packed into micro-batches at ``micro_batch_tokens``
    (:mod:`model.rlhf.packing`); None: the framework's (verl's balanced for megatron and fsdp2,
    OpenRLHF's first-fit for deepspeed)."""
    recompute: Recompute = Recompute.FULL
    """Activation recomputation of the update: full, as verl's default
    ``enable_gradient_checkpointing: True`` and NeMo-RL's performance recipes."""
    host_memory_bytes: int = HOST_BYTES_PER_NODE
    """Host memory per node, bytes (what offloaded optimizer state shares)."""
    bandwidth_efficiency: float | None = None
    """Fraction of the HBM bandwidth decode reaches; None: the part's streaming fraction, the
    optimizer step's (:func:`model.rlhf.engine.decode_efficiency`)."""
    agent_workers: int | None = None
    """verl's agent-loop workers (``actor_rollout_ref.rollout.agent.num_workers``) under verl's
    profiles (``megatron``, ``fsdp2``), None there for verl's default 8; None under ``deepspeed``
    (OpenRLHF has no agent loop): :func:`model.rollout_prefix.agent_workers_of`."""
    roles_: tuple[RoleSpec, ...] = field(init=False, repr=False, compare=False)
    """The step's roles (:attr:`roles`), set from the algorithm and the reward."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "algorithm", placed_algorithm(self.algorithm))
        if str(self.reward) not in ("model", "rule"):
            raise InputError(f"reward: {self.reward!r} is not one of model, rule")
        object.__setattr__(self, "framework", Framework(self.framework))
        object.__setattr__(self, "logits", LogitsMode(self.logits))
        object.__setattr__(self, "packing", packing_of(self.packing, self.framework))
        object.__setattr__(self, "recompute", Recompute(self.recompute))
        if self.zero_stage is None:
            object.__setattr__(self, "zero_stage", DEFAULT_ZERO_STAGE[self.framework])
        check_framework(self.framework, self.zero_stage, 1)  # type: ignore[arg-type]
        for name in ("prompts", "samples_per_prompt", "prompt_tokens", "completion_tokens"):
            if getattr(self, name) < 1:
                raise InputError(f"{name}: {getattr(self, name)} must be at least 1")
        for name in ("epochs", "micro_batch_tokens", "logits_chunk_tokens", "max_num_seqs"):
            if getattr(self, name) < 1:
                raise InputError(f"{name}: {getattr(self, name)} must be at least 1")
        for model in (self.policy, self.critic):
            if model is not None and model.arch is None:
                raise InputError(
                    f"model {model.name}: the RLHF roles need its dimensions (a catalogue name or "
                    "a config.json), not only a size"
                )
        longest = self.max_completion_tokens
        if longest is not None and longest < self.completion_tokens:
            raise InputError(
                f"max_completion_tokens: {longest:,} is below the mean `completion_tokens` "
                f"{self.completion_tokens:,}"
            )
        self._check_batch()
        workers = agent_workers_of(self.framework is not Framework.DEEPSPEED, self.agent_workers)
        object.__setattr__(self, "agent_workers", workers)
        if workers is not None:  # verl's profiles: equal agent-loop chunks
            check_agent_loop_chunks(self.prompts, self.samples_per_prompt, workers)
        if self.engine_memory_fraction is not None:
            check_fraction(self.engine_memory_fraction)
        if self.off_policy not in (0, 1):
            raise InputError(
                f"off_policy: {self.off_policy} must be 0 (synchronous) or 1 (one-step off-policy)"
            )
        if self.bandwidth_efficiency is not None and not 0 < self.bandwidth_efficiency <= 1:
            raise InputError(
                f"bandwidth_efficiency: {shown_number(self.bandwidth_efficiency)} must be in "
                f"(0, 1]: {FRACTION_RULE}"
            )
        object.__setattr__(self, "roles_", self._roles())

    def _check_batch(self) -> None:
        seqs, batch = self.sequences, self.train_batch
        most = LIMITS["sequences"]
        if seqs > most.maximum:  # checked here, where the product is formed, not as the
            # training layout's global_batch_size (rounded up to whole micro-batches per rank)
            raise InputError(
                f"prompts: {self.prompts:,} × {self.samples_per_prompt:,} rollouts per prompt "
                f"(`samples_per_prompt`) = {seqs:,} sequences per step, above the limit of "
                f"{most.maximum:,} sequences a step trains on ({most.why})"
            )
        if batch is None:
            return
        group = self.samples_per_prompt
        grpo = self.algorithm == "grpo"
        if batch < 1 or seqs % batch:
            raise InputError(
                f"train_batch: {batch:,} must divide the step's {seqs:,} sequences (`prompts` "
                f"{self.prompts:,} × `samples_per_prompt` {group:,}): every update takes the same "
                f"number of rollouts; the nearest that "
                + (f"do and are multiples of the group size {group:,} (GRPO)" if grpo else "do")
                + f": {nearest_divisors(batch, seqs, group if grpo else 1)}"
            )
        if grpo and batch % group:
            raise InputError(
                f"train_batch: {batch:,} is not a multiple of the group size {group:,} "
                "(`samples_per_prompt`): GRPO normalises each group's rewards together, so a group "
                "cannot straddle two updates (verl counts mini-batches in whole prompts); the "
                f"nearest that are and divide the step's {seqs:,} sequences: "
                f"{nearest_divisors(batch, seqs, group)}"
            )

    def _roles(self) -> tuple[RoleSpec, ...]:
        critic = value_head_model(self.critic or self.policy, self.framework)
        return tuple(
            RoleSpec(Role(s.role), self.policy if s.weights == "policy" else critic, s)
            for s in step_roles(self.algorithm, self.reward, self.old_log_prob)
        )

    @property
    def roles(self) -> tuple[RoleSpec, ...]:
        """The step's roles, in order: rollout, actor, [critic], reference, [reward]."""
        return self.roles_

    def role(self, name: Role | str) -> RoleSpec:
        """The role called ``name``."""
        for r in self.roles_:
            if r.role == name:
                return r
        raise InputError(f"role: {name!r} is not a role of this {self.algorithm} step")

    @property
    def sequences(self) -> int:
        """Rollouts per step: prompts × samples per prompt."""
        return self.prompts * self.samples_per_prompt

    @property
    def seq_len(self) -> int:
        """Tokens per rollout: prompt + completion."""
        return self.prompt_tokens + self.completion_tokens

    def phase_flops(self) -> dict[str, dict[str, int]]:
        """Model FLOPs of the step by phase and role (:func:`model.rlhf.phases.phase_flops`, the
        rule the textbook accounting reads too) on each role's active parameters (a mixture of
        experts' routed share; all of a dense network): the actor scores the old log-probs only
        when it recomputes them (:attr:`old_log_prob`).

        >>> from trainplan.scenarios.catalogue import get_model
        >>> spec = RLHFSpec(algorithm="grpo", policy=get_model("qwen2.5-7b").model,
        ...                 reward="rule", prompts=1, samples_per_prompt=1, prompt_tokens=1,
        ...                 completion_tokens=1, old_log_prob=False, framework="deepspeed")
        >>> n = spec.role("actor").active_params
        >>> {ph: sum(v.values()) // (n * 2) for ph, v in spec.phase_flops().items()}
        {'rollout': 2, 'scoring': 2, 'training': 6}
        """
        active = {r.step.weights: r.active_params for r in self.roles}
        steps = [r.step for r in self.roles]
        return phase_flops(steps, active, self.sequences, self.seq_len, self.epochs)

    @property
    def updates_per_epoch(self) -> int:
        """Optimizer updates per epoch: sequences ÷ train batch (1 without a train batch)."""
        return 1 if self.train_batch is None else self.sequences // self.train_batch

    @property
    def micro_batch_sequences(self) -> int:
        """b: whole sequences per micro-batch, ⌊micro_batch_tokens / seq_len⌋ and at least 1."""
        return max(1, self.micro_batch_tokens // self.seq_len)

    def micro_batch_peak_tokens(self, tp: int = 1) -> int:
        """Tokens of the fullest micro-batch of the update and the log-prob forwards, padded to a
        multiple of ``tp`` (sequence parallelism): what their memory that grows with a
        micro-batch's tokens (logits, the forward working set, activations) is sized at — the
        :attr:`packing` rule at the cap ``micro_batch_tokens`` (:func:`model.rlhf.packing.peak_tokens`).
        verl's balanced packing (megatron, fsdp2) makes ⌈tokens / cap⌉ micro-batches without
        holding one to the cap: at equal lengths ⌈cap / seq_len⌉ whole rollouts, with lengths that
        vary up to the cap plus the longest rollout; first-fit (deepspeed: OpenRLHF; NeMo-RL) at
        most ⌊cap / seq_len⌋ rollouts, or the cap (the longest rollout where longer).

        >>> from trainplan.scenarios.catalogue import get_model
        >>> base = dict(algorithm="grpo", policy=get_model("qwen2.5-7b").model, reward="rule",
        ...             prompts=4, samples_per_prompt=16, prompt_tokens=1024,
        ...             completion_tokens=4096)
        >>> RLHFSpec(**base).micro_batch_peak_tokens(), RLHFSpec(**base).micro_batch_peak_tokens(3)
        (20480, 20484)
        >>> RLHFSpec(**base, packing="first-fit").micro_batch_peak_tokens()
        15360
        >>> RLHFSpec(**base, max_completion_tokens=8192).micro_batch_peak_tokens()
        25600
        """
        assert self.packing is not None
        return peak_tokens(self.packing, self.micro_batch_tokens, self.seq_len, self._longest, tp)

    @property
    def _longest(self) -> int | None:
        """The longest rollout's tokens, prompt and completion (None: every rollout the mean)."""
        longest = self.max_completion_tokens
        return None if longest is None else self.prompt_tokens + longest

    def split_tokens(self, dp: int, tp: int = 1) -> int:
        """Under ``deepspeed`` with its first-fit packing (OpenRLHF), the fullest micro-batch of
        the scoring forwards at the actor's data-parallel size ``dp``, padded to a multiple of
        ``tp`` — ``split_rollout_samples`` over the step's rollouts
        (:func:`model.rlhf.packing.split_peak_tokens`); 0 elsewhere: verl and NeMo-RL pack their
        log-prob forwards like the update, on each rank (:meth:`micro_batch_peak_tokens`).

        >>> from trainplan.scenarios.catalogue import get_model
        >>> base = dict(algorithm="grpo", policy=get_model("qwen2.5-7b").model, reward="rule",
        ...             prompts=1024, samples_per_prompt=16, prompt_tokens=1024,
        ...             completion_tokens=4096)
        >>> RLHFSpec(**base, framework="deepspeed").split_tokens(64)
        20480
        >>> RLHFSpec(**base, framework="deepspeed", packing="balanced").split_tokens(64)
        0
        """
        if self.framework is not Framework.DEEPSPEED or self.packing is not Packing.FIRST_FIT:
            return 0
        cap, longest = self.micro_batch_tokens, self._longest
        return split_peak_tokens(self.sequences, cap, self.seq_len, longest, dp, tp)

    def scoring_peak_tokens(self, dp: int, tp: int = 1) -> int:
        """Tokens of the fullest micro-batch of the scoring forwards (old log-probs, reference,
        critic values, reward) at the actor's data-parallel size ``dp``: :meth:`split_tokens`
        under OpenRLHF, else :meth:`micro_batch_peak_tokens` (the update's packing).

        >>> from trainplan.scenarios.catalogue import get_model
        >>> base = dict(algorithm="grpo", policy=get_model("qwen2.5-7b").model, reward="rule",
        ...             prompts=1024, samples_per_prompt=16, prompt_tokens=1024,
        ...             completion_tokens=4096, framework="deepspeed")
        >>> spec = RLHFSpec(**base)
        >>> spec.micro_batch_peak_tokens(), spec.scoring_peak_tokens(64), spec.scoring_peak_tokens(1)
        (15360, 20480, 15360)
        """
        return self.split_tokens(dp, tp) or self.micro_batch_peak_tokens(tp)
