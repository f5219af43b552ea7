"""The other tabs' inputs (``pipeline``, ``mfu``, ``ckpt``, ``rlhf``, ``rlhf-plan``) as frozen
requests, built once where they enter.

Three boundaries give a tab its inputs: click's options (the command line, and the web API, whose
query :mod:`interface.cli.query` parses as the command's own options), an example's table of
``scenarios/examples.toml`` (:mod:`interface.examples`), and a Python caller's keyword arguments
(the report functions of :mod:`interface.tabs`). Each is made the tab's request here
(:func:`tab_request`, :func:`as_request`), and the report reads the request, never a dict. A field
is a parameter by its name (docs/concepts/conventions.md), its value as the boundary read it (text
or a number), parsed and checked against its rule once, by the tab's report. Options that shape
the terminal's output (``--width``, ``--png``, ``--play``…) are not inputs and have no field.
The tabs take no scenario file and no ``--set``: a request has one source at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from trainplan.model.errors import InputError
from trainplan.model.rlhf.shares import DEFAULTS as RLHF

__all__ = [
    "PipelineRequest",
    "MfuRequest",
    "CkptRequest",
    "RLHFRequest",
    "RLHFPlanRequest",
    "TAB_REQUESTS",
    "tab_request",
    "as_request",
    "parameters",
]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class PipelineRequest:
    """``trainplan pipeline``'s inputs (``/api/pipeline``; the ``pipeline`` examples)."""

    stages: Any
    """Pipeline stages (ranks) p, a count of at most 256 (:data:`model.units.LIMITS`: the
    timeline draws one row per stage)."""
    microbatches: Any
    """Micro-batches per step m (DualPipe: both ends), a count."""
    schedule: str = "1f1b"
    """One of :data:`model.schedule.TIMELINE_SCHEDULES`."""
    virtual_stages: Any = None
    """Model chunks per rank v (None: 1; 2 under zb-v, dualpipe, dualpipev)."""
    backward_ratio: Any = None
    """Classic schedules: backward / forward time (None: 2)."""
    t_f: Any = None
    """Split schedules: one chunk's forward time T_F (None: 1)."""
    t_b: Any = None
    """Split schedules: the input-gradient backward time T_B (None: 1)."""
    t_w: Any = None
    """Split schedules: the weight-gradient backward time T_W (None: 1)."""
    t_fb: Any = None
    """DualPipe: the overlapped forward + backward block time (None: T_F + T_B + T_W)."""
    framework: str | None = None
    """Refuse a schedule this framework cannot run (None: no check)."""


@dataclass(frozen=True, slots=True)
class MfuRequest:
    """``trainplan mfu``'s inputs: one measurement (a step, a throughput or a reported FLOP rate),
    the peak, and what enters attention and recomputed FLOPs."""

    params: Any = None
    """Model parameters N."""
    model: str | None = None
    """A catalogue model or a ``config.json`` (as evaluate's ``--model``), instead of ``params``
    and the dimensions: N its active parameters, the dimensions its own."""
    tokens: Any = None
    """Tokens in one step, all chips."""
    step_seconds: Any = None
    """Seconds per step."""
    tokens_per_second: Any = None
    """Training throughput, tokens/s, all chips."""
    achieved_pflops: Any = None
    """The job's reported model FLOP rate, PFLOP/s (aggregate)."""
    achieved_tflops_per_gpu: Any = None
    """One chip's reported model FLOP rate, TFLOP/s."""
    gpu: str | None = None
    """Accelerator name, or a ``PATH.toml`` describing one (its dense BF16 peak from there)."""
    peak_tflops: Any = None
    """Dense peak per chip, TFLOP/s (instead of ``gpu``)."""
    chips: Any = 1
    """Chips in the job."""
    attention: bool = False
    """Count attention FLOPs: PaLM's 12·L·H·Q·T per token from the dimensions (Chowdhery et al.
    2022, appendix B), or with ``model`` the model's own per-layer count
    (:func:`interface.mfu_model.model_attention`)."""
    causal: bool | None = None
    """Count attention over the causal mask's pairs (True) or PaLM's full s² (False). None: the
    model's own with ``model`` (causal, as evaluate counts with FlashAttention on:
    :func:`interface.mfu_model.mfu_model`), else PaLM's non-causal count."""
    layers: Any = None
    """Layers L (attention and recomputed FLOPs)."""
    heads: Any = None
    """Attention heads H."""
    head_dim: Any = None
    """Head dimension Q."""
    hidden: Any = None
    """Hidden size (= H·Q), instead of ``heads`` and ``head_dim``."""
    seq_len: Any = None
    """Sequence length T, tokens."""
    recomputed_flops_pct: Any = None
    """Recomputed FLOPs as a percentage of model FLOPs (HFU)."""
    recompute: str | None = None
    """none, selective or full: the recomputed FLOPs derived (HFU)."""


@dataclass(frozen=True, slots=True)
class CkptRequest:
    """``trainplan ckpt``'s inputs: the chain walked through."""

    layers: Any
    """Layers n of the chain, a count."""
    every: Any = None
    """Checkpoint every k layers (None: round(√n), Chen et al. 2016)."""
    labels: str = "outputs"
    """Name tensors by layer ``outputs`` or ``inputs``."""
    step: Any = None
    """Show only step S, 1 … 3n (None: every step)."""
    backward_ratio: Any = 2
    """Backward / forward time of a layer (the overhead's unit)."""


@dataclass(frozen=True, slots=True)
class RLHFRequest:
    """``trainplan rlhf``'s inputs (``/api/rlhf``; the ``rlhf`` examples; the workload of
    ``rlhf-plan``): the step's workload, the textbook accounting's own options, and
    with ``model`` the faithful accounting's placement. Defaults: :data:`model.rlhf.shares.
    DEFAULTS` (textbook) and :data:`interface.rlhf.faithful.FAITHFUL_DEFAULTS` (faithful); which
    option belongs to which: :data:`interface.rlhf.report.SEED_ONLY`, ``FAITHFUL_ONLY``."""

    algorithm: str
    """ppo, grpo or dpo (dpo: the textbook accounting only)."""
    policy_params: Any = None
    """Textbook: policy parameters N_p."""
    reward_params: Any = None
    """Textbook: reward model / critic parameters N_r (None: N_p)."""
    reward: str | None = None
    """model or rule (PPO and GRPO; None: model)."""
    prompts: Any = RLHF["prompts"]
    """Prompts per step (:data:`model.rlhf.shares.DEFAULTS`)."""
    samples_per_prompt: Any = None
    """Rollouts per prompt, GRPO's group size (None: 16; DPO has 2)."""
    prompt_tokens: Any = RLHF["prompt_tokens"]
    """Tokens per prompt."""
    completion_tokens: Any = RLHF["completion_tokens"]
    """Tokens per completion (the mean)."""
    epochs: Any = RLHF["epochs"]
    """PPO epochs per step."""
    max_completion_tokens: Any = None
    """The longest rollout's completion, tokens (None: the mean)."""
    gpu: str | None = None
    """Accelerator (None: H100-SXM)."""
    rollout_batch: Any = None
    """Sequences an engine decodes at once at most (vLLM ``max_num_seqs``; None: 256)."""
    critic_model: str | None = None
    """Faithful: the critic's and reward model's network (None: the policy's)."""
    framework: str | None = None
    """Faithful: megatron, deepspeed or fsdp2 (None: megatron)."""
    zero: Any = None
    """Faithful: the framework's ZeRO stage (None: the framework's)."""
    train_batch: Any = None
    """Faithful: sequences per optimizer update (None: all of the step's)."""
    micro_batch_tokens: Any = None
    """Faithful: tokens per micro-batch (verl ``ppo_max_token_len_per_gpu``; None: 16,384)."""
    packing: str | None = None
    """Faithful: balanced (verl) or first-fit (OpenRLHF, NeMo-RL): how rollouts fill the
    micro-batches (None: the framework's)."""
    logits: str | None = None
    """Faithful: full, chunked or fused log-softmax over the logits (None: full)."""
    old_log_prob: bool | str | None = None
    """PPO and GRPO, both accountings: recompute (True: the actor's forward scores the old
    log-probs, verl and OpenRLHF) or engine (False: the engine's); the text or the flag (None:
    recompute)."""
    engine_memory_fraction: Any = None
    """Faithful: vLLM ``gpu_memory_utilization`` / SGLang ``mem_fraction_static``, in (0, 1)."""
    off_policy: Any = None
    """Faithful: 0 synchronous, 1 one-step off-policy (None: 0)."""
    recompute: str | None = None
    """Faithful: activation recomputation of the update (None: full)."""
    host_memory_gb: Any = None
    """Faithful: host memory per node, GB (None: 2,000, DGX H100)."""
    bandwidth_efficiency: Any = None
    """Faithful: fraction of HBM bandwidth decode reaches (None: 1)."""
    agent_workers: Any = None
    """Faithful: verl's agent-loop workers (``actor_rollout_ref.rollout.agent.num_workers``;
    None: verl's 8 under megatron and fsdp2, none under deepspeed, where giving one is refused)."""
    decode_mfu: Any = None
    """Textbook: MFU of rollout generation, 0–1 (None: 0.04)."""
    train_mfu: Any = RLHF["train_mfu"]
    """Textbook: MFU of scoring and training, 0–1."""
    peak_tflops: Any = None
    """Textbook: dense peak per chip, TFLOP/s, instead of ``gpu``."""
    chips: Any = None
    """Textbook: chips (None: 1)."""
    rollout_engine: bool = False
    """Textbook: add the engine's weight copy and KV cache."""
    layers: Any = None
    """Textbook: the policy's layers (KV cache)."""
    kv_heads: Any = None
    """Textbook: the policy's K/V heads (KV cache)."""
    head_dim: Any = None
    """Textbook: the policy's head dimension (KV cache)."""
    logits_buffer: bool = False
    """Textbook: add the FP32 logits buffer."""
    vocab_size: Any = None
    """Textbook: the vocabulary of the logits buffer."""
    logits_tokens: Any = None
    """Textbook: tokens per logits buffer (None: one sequence)."""
    model: str | None = None
    """Faithful: the policy, a catalogue name or a config.json path (None: the textbook
    accounting)."""
    model_spec: Any = None
    """Faithful: the policy as a :class:`~model.model_spec.ModelSpec` built in code (the
    measured runs), instead of ``model``."""
    gpus: Any = None
    """Faithful: GPUs of the cluster (None: 8)."""
    rollout_gpus: Any = None
    """Faithful: the engine on this many GPUs of its own (None: colocated)."""
    train_tp: Any = None
    """Faithful: tp of the training and scoring roles (None: 1)."""
    train_pp: Any = None
    """Faithful: pp of the training and scoring roles (None: 1)."""
    rollout_tp: Any = None
    """Faithful: the engine's tp (None: verl's 2; 1 on an odd GPU count)."""
    offload: Any = None
    """Faithful: none, optimizer, idle, or role=mode,… (None: none)."""
    shared_engine_weights: bool = False
    """Faithful, colocated: the engine reuses the actor's BF16 weights (HybridFlow)."""

    @property
    def faithful(self) -> bool:
        """Whether the faithful accounting runs (a model is given)."""
        return self.model is not None or self.model_spec is not None


@dataclass(frozen=True, slots=True)
class RLHFPlanRequest:
    """``trainplan rlhf-plan``'s inputs: the workload (its model and GPUs among them) and the
    search's own options."""

    workload: RLHFRequest
    """The step searched (``model`` and ``gpus`` given)."""
    offload: bool = True
    """Let trainable roles offload."""
    time_limit: float | None = None
    """Seconds for the whole search, table building included (None: no limit), counted from
    :attr:`started`."""
    workers: int = 2
    """CP-SAT workers."""
    started: float | None = None
    """The :func:`time.perf_counter` reading from which :attr:`time_limit` counts (the command's
    start on the command line, :attr:`interface.requests.SearchRequest.started`; None: when the
    search begins)."""


TAB_REQUESTS: dict[str, type] = {
    "pipeline": PipelineRequest,
    "mfu": MfuRequest,
    "ckpt": CkptRequest,
    "rlhf": RLHFRequest,
}
"""Each tab's request type, by the tab's name."""


def parameters(kind: type) -> tuple[str, ...]:
    """The parameter names of request type ``kind`` (a dataclass of this module), in order."""
    return tuple(f.name for f in fields(kind))  # type: ignore[arg-type]


def tab_request(kind: type[R], options: Mapping[str, Any], where: str = "") -> R:
    """The request of type ``kind`` of ``options`` by name (click's parameters, the web's query
    parsed as them, an example's table, a caller's dict); an unset option (None, or ``()`` for a
    repeatable one) takes the field's default.

    Raises
    ------
    InputError
        A name that is not a parameter of the tab (``where`` heads the line: ``example NAME: ``),
        or a parameter without a default left unset.
    """
    names = parameters(kind)
    given = {k: v for k, v in options.items() if v is not None and v != ()}
    unknown = sorted(set(given) - set(names))
    tab = next((t for t, k in TAB_REQUESTS.items() if k is kind), kind.__name__)
    if unknown:
        raise InputError(
            f"{where}{unknown[0]!r} is not a parameter of the {tab} tab (it takes "
            f"{', '.join(sorted(names))})"
        )
    try:
        return kind(**given)
    except TypeError:
        missing = [name for name in names if name not in given]
        raise InputError(f"{where}{missing[0]}: missing; the {tab} tab needs it") from None


def as_request(kind: type[R], args: tuple[Any, ...], kw: Mapping[str, Any]) -> R:
    """A report function's arguments as its request: the request itself, or the parameters
    positionally and by name as :class:`kind`'s fields (a Python caller's keyword arguments).

    Raises
    ------
    TypeError
        Arguments that are not ``kind``'s fields (as any Python call with a wrong keyword).
    """
    if len(args) == 1 and not kw and isinstance(args[0], kind):
        return args[0]
    return kind(*args, **kw)
