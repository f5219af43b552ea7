"""The prompt KV that a GRPO group's samples share on a verl rollout engine (vLLM automatic
prefix caching), and what it saves: the prefill of, and the KV held for, a sample's prompt blocks
that an earlier sample of the same prompt on the same engine replica already holds.

Sources, read at volcengine/verl b178a3cd5 and vllm-project/vllm 003df2961:

* **verl sends every sample as its own request.** ``RayPPOTrainer.fit`` repeats each prompt
  ``rollout.n`` times, interleaved (``gen_batch.repeat(repeat_times=rollout.n,
  interleave=True)``, ``verl/trainer/ppo/ray_trainer.py``), so a group's n samples are adjacent;
  the agent loop (``AgentLoopWorker.generate_sequences``, one task per sample,
  ``verl/experimental/agent_loop/agent_loop.py``) sends each to a vLLM server with n = 1
  (``vLLMHttpServer.generate`` builds ``SamplingParams(max_tokens=…, **sampling_params)`` and
  reads ``outputs[0]``, ``verl/workers/rollout/vllm_rollout/vllm_async_server.py``). vLLM's
  parallel sampling (``ParentRequest``, ``vllm/v1/engine/parallel_sampling.py``) is not used.
* **Which replica a sample reaches.** ``AgentLoopManager.generate_sequences`` splits the
  repeated batch into one contiguous chunk per agent-loop worker (``prompts.chunk(len(self.
  agent_loop_workers))``, ``DataProto.chunk``: equal chunks of ``S / W`` rows, the count
  asserted to divide, :func:`check_agent_loop_chunks`), ``actor_rollout_ref.rollout.agent.
  num_workers`` workers (the spec's ``agent_workers``, :func:`agent_workers_of`; verl's default
  :data:`VERL_AGENT_LOOP_WORKERS`, 8, ``verl/trainer/config/rollout/rollout.yaml``). Each
  worker holds its own ``AsyncLLMServerManager`` over every server, its list shuffled
  (``random.shuffle(self.server_handles)``), whose ``_choose_server`` picks the server with the
  fewest requests that worker sent so far (its counts only grow: round robin over the replicas in
  the worker's shuffled order), a new choice per sample (a fresh ``uuid4`` request id each). A
  group's run of ``a`` adjacent samples inside one worker's chunk so lands on ``min(a, R)`` of the
  R replicas, a uniformly random set (a window of a random order); a group that a chunk boundary
  splits reaches each part's set independently, so it touches ``R·(1 − Π (1 − min(a_i, R)/R))``
  replicas on average (:func:`saved_prompt_tokens`). verl's async-task scheduling may reorder
  requests; the round robin is the plan's.
* **Prefix caching is on.** ``enable_prefix_caching: True`` (``verl/trainer/config/rollout/
  rollout.yaml``), passed to the engine (``vllm_async_server.py``). vLLM's
  ``KVCacheManager.allocate_slots`` registers (hashes) a request's full blocks when it allocates
  them, before they are computed, so a later sample of the same prompt — in the same scheduler
  step or after — finds them (``get_computed_blocks`` → ``find_longest_cache_hit``) and shares
  them by reference count. A hit is capped at ``num_tokens - 1`` tokens in full blocks (the last
  prompt token is recomputed for its logits): a sharing sample reuses ``⌊(Tp − 1)/B⌋·B`` prompt
  tokens and prefills and holds the rest of its prompt itself, its own partial last block
  included (:func:`shared_prompt_tokens`).
* **Block size** ``B`` = 16 tokens: vLLM's platform default when none is given
  (``check_and_update_config``: ``cache_config.block_size = 16``, read in
  ``vllm/platforms/rocm.py``; the CUDA platform's same default is not read here; Kwon et al.
  2023, PagedAttention, 16-token blocks). verl does not set it.
* **Decode reads are not shared.** Each sample's attention reads its whole block table, shared
  blocks included (vLLM's paged attention, one sequence per query row): the decode roofline of
  :func:`model.rollout.wave_seconds` is unchanged. vLLM's cascade attention applies only to a
  prefix common to every running request and is not counted.
* **OpenRLHF** (the ``deepspeed`` profile) sends each sample alone with prefix caching off by
  default (``--vllm.enable_prefix_caching`` ``store_true``, ``default=False``,
  ``openrlhf/cli/train_ppo_ray.py``, OpenRLHF 3c3be6234): it shares nothing.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

from trainplan.model.errors import InputError

__all__ = [
    "VERL_AGENT_LOOP_WORKERS",
    "agent_workers_of",
    "check_agent_loop_chunks",
    "nearest_divisors",
    "VLLM_BLOCK_TOKENS",
    "group_replicas",
    "shared_prompt_tokens",
    "saved_prompt_tokens",
]

VERL_AGENT_LOOP_WORKERS = 8
"""verl's agent-loop workers, each a contiguous chunk of the step's samples with its own round
robin over the engine replicas: ``actor_rollout_ref.rollout.agent.num_workers`` default 8
(``verl/trainer/config/rollout/rollout.yaml``, volcengine/verl b178a3cd5)."""


_NUM_WORKERS = "verl's actor_rollout_ref.rollout.agent.num_workers"


def agent_workers_of(verl: bool, given: int | None) -> int | None:
    """The agent-loop workers of a step (the spec's ``agent_workers``): under verl's profiles
    (``verl``) ``given``, or verl's default :data:`VERL_AGENT_LOOP_WORKERS` where None; elsewhere
    None — OpenRLHF (``deepspeed``) has no agent loop (``SamplesGenerator._generate_vllm`` sends
    the prompts to the engines itself, ``openrlhf/trainer/ppo_utils/samples_generator.py``,
    3c3be6234). verl starts that many ``AgentLoopWorker`` actors
    (``AgentLoopManager._init_agent_loop_workers``, ``verl/experimental/agent_loop/
    agent_loop.py``, b178a3cd5).

    Raises
    ------
    InputError
        ``given`` below 1, or given (not None) without verl, where the setting would change
        nothing.

    >>> agent_workers_of(True, None), agent_workers_of(True, 16), agent_workers_of(False, None)
    (8, 16, None)
    >>> agent_workers_of(False, 4)
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: agent_workers: 4 is verl's \
actor_rollout_ref.rollout.agent.num_workers; OpenRLHF (`framework` deepspeed) has no agent-loop \
workers: leave it out, or use `framework` megatron or fsdp2
    """
    if given is not None and (isinstance(given, bool) or not isinstance(given, int) or given < 1):
        raise InputError(
            f"agent_workers: {given!r} must be a whole number of at least 1 ({_NUM_WORKERS})"
        )
    if not verl and given is not None:
        raise InputError(
            f"agent_workers: {given:,} is {_NUM_WORKERS}; OpenRLHF (`framework` deepspeed) has no "
            "agent-loop workers: leave it out, or use `framework` megatron or fsdp2"
        )
    return (VERL_AGENT_LOOP_WORKERS if given is None else given) if verl else None


def check_agent_loop_chunks(
    prompts: int, samples_per_prompt: int, workers: int = VERL_AGENT_LOOP_WORKERS
) -> None:
    """Refuse a step verl refuses: its ``S = prompts · samples_per_prompt`` samples must split
    into ``workers`` equal chunks, one per agent-loop worker.

    Source (volcengine/verl b178a3cd5): ``RayPPOTrainer.fit`` (``verl/trainer/ppo/
    ray_trainer.py``) draws ``data.train_batch_size`` prompts a step (the dataloader's
    ``batch_size``, ``drop_last=True``), repeats them ``rollout.n`` times
    (``gen_batch.repeat(repeat_times=rollout.n, interleave=True)``) and hands the whole repeated
    batch to ``AgentLoopManager.generate_sequences`` (``verl/experimental/agent_loop/
    agent_loop.py``; the only rollout mode: "sync mode is deprecated", ``async_rollout_mode =
    True``), which calls ``prompts.chunk(len(self.agent_loop_workers))``. ``DataProto.chunk``
    (``verl/protocol.py``) asserts ``len(self) % chunks == 0`` ("only support equal chunk")
    unless padding is enabled, and the training path enables none (``VERL_AUTO_PADDING`` unset,
    ``DataProtoConfig.auto_padding`` False; only the validation batch is padded,
    ``pad_dataproto_to_divisor`` in ``_validate``). The condition is on the step's whole sample
    count, whatever the engine's replicas or the training layout: the placement search never
    sees a step verl refuses, since the spec carrying it is refused first.

    Raises
    ------
    InputError
        ``prompts · samples_per_prompt`` not a multiple of ``workers``, naming the workers (the
        ``agent_workers`` value, and whether it is verl's default) and the nearest prompt counts,
        samples per prompt and worker counts that make it one.

    Examples
    --------
    64 prompts × 8 samples = 512 samples: 64 a worker. 5 prompts × 4 = 20 is refused; 4 and 6
    prompts give 16 and 24, 8 samples a prompt 40, and 5 or 10 workers divide 20.

    >>> check_agent_loop_chunks(64, 8)
    >>> check_agent_loop_chunks(5, 4)
    Traceback (most recent call last):
    ...
    trainplan.model.errors.InputError: prompts: 5 × `samples_per_prompt` 4 = 20 samples a step; \
verl splits them into its 8 agent-loop workers' equal chunks (DataProto.chunk asserts the count \
divides; `agent_workers` 8, verl's default actor_rollout_ref.rollout.agent.num_workers): the \
nearest that divide: 4 or 6 prompts, `samples_per_prompt` 8, or `agent_workers` 5 or 10
    """
    samples = prompts * samples_per_prompt
    if samples % workers == 0:
        return
    default = "default " if workers == VERL_AGENT_LOOP_WORKERS else ""
    raise InputError(
        f"prompts: {prompts:,} × `samples_per_prompt` {samples_per_prompt:,} = {samples:,} "
        f"sample{'' if samples == 1 else 's'} a step; verl splits them into its {workers:,} "
        "agent-loop workers' equal chunks (DataProto.chunk asserts the count divides; "
        f"`agent_workers` {workers:,}, verl's {default}actor_rollout_ref.rollout.agent.num_workers): "
        f"the nearest that divide: {_nearest(prompts, samples_per_prompt, workers)} prompts, "
        f"`samples_per_prompt` {_nearest(samples_per_prompt, prompts, workers)}, or "
        f"`agent_workers` {nearest_divisors(workers, samples)}"
    )


def _nearest(count: int, other: int, workers: int) -> str:
    """The multiples of ``workers / gcd(workers, other)`` nearest ``count`` on either side (at
    least 1), as words: the values of ``count`` whose product with ``other`` ``workers``
    divides."""
    step = workers // math.gcd(workers, other)
    lower, upper = count // step * step, (count // step + 1) * step
    return " or ".join(f"{n:,}" for n in (lower, upper) if n >= 1)


def nearest_divisors(value: int, total: int, multiple: int = 1) -> str:
    """The divisors of ``total`` nearest ``value`` (below and above) that are multiples of
    ``multiple`` (1: any divisor), as a refusal names them: ``'4,096 or 8,192'``, one where only
    one side has any. ``multiple`` divides ``total``, so ``total`` itself always qualifies.

    >>> nearest_divisors(7, 16384), nearest_divisors(7, 16384, 16), nearest_divisors(3000, 4096, 16)
    ('4 or 8', '16', '2,048 or 4,096')
    >>> nearest_divisors(8, 20)
    '5 or 10'
    """
    root = int(total**0.5)
    pairs = [(d, total // d) for d in range(1, root + 1) if total % d == 0]
    valid = sorted({d for pair in pairs for d in pair if d % multiple == 0})
    below = [d for d in valid if d < value][-1:]
    above = [d for d in valid if d > value][:1]
    return " or ".join(f"{d:,}" for d in below + above)


VLLM_BLOCK_TOKENS = 16
"""Tokens per vLLM KV-cache block: the platform default (module docstring)."""


def shared_prompt_tokens(prompt_tokens: int, block_tokens: int = VLLM_BLOCK_TOKENS) -> int:
    """Prompt tokens a later sample of the same prompt reuses from vLLM's prefix cache:
    ``⌊(Tp − 1)/B⌋·B`` (full blocks only, the last prompt token always recomputed:
    ``KVCacheManager.get_computed_blocks``'s ``max_cache_hit_length = num_tokens - 1``).

    Raises
    ------
    InputError
        A prompt or block of fewer than one token.

    >>> shared_prompt_tokens(1024), shared_prompt_tokens(1025), shared_prompt_tokens(10)
    (1008, 1024, 0)
    """
    if prompt_tokens < 1 or block_tokens < 1:
        raise InputError(
            f"prompt_tokens: {prompt_tokens} with a {block_tokens}-token block; both must be at "
            "least 1"
        )
    return (prompt_tokens - 1) // block_tokens * block_tokens


@lru_cache(maxsize=1024)
def group_replicas(prompts: int, samples_per_prompt: int, replicas: int, workers: int) -> Fraction:
    """The engine replicas a group's samples reach, summed over the step's ``prompts`` groups
    (expected values), when verl repeats each prompt ``samples_per_prompt`` (n) times
    interleaved, splits the ``S = prompts·n`` samples into ``workers`` contiguous chunks of
    ``⌈S / W⌉`` and each worker round-robins its samples over the ``replicas`` (R) in an order of
    its own (module docstring): a group whose samples fall in runs of ``a_i`` in distinct chunks
    reaches ``R·(1 − Π (1 − min(a_i, R)/R))`` replicas — ``min(n, R)`` when one chunk holds it.

    Examples
    --------
    4 prompts × 16 samples over 8 workers: chunks of 8, each group in two halves; 16 replicas:
    each half reaches 8 of them, 16·(1 − ½·½) = 12 per group, 48 in all (not 4 × 16 = 64); 8
    replicas: each half reaches all 8, 32 in all.

    >>> group_replicas(4, 16, 16, 8), group_replicas(4, 16, 8, 8)
    (Fraction(48, 1), Fraction(32, 1))
    >>> group_replicas(64, 16, 16, 8)  # chunks of 128: no group split, min(16, 16) each
    Fraction(1024, 1)
    """
    n, r = samples_per_prompt, replicas
    total = prompts * n
    chunk = -(-total // workers)
    reached = Fraction(0)
    for g in range(prompts):
        start, end, missed = g * n, (g + 1) * n, Fraction(1)
        while start < end:
            stop = min(end, (start // chunk + 1) * chunk)
            missed *= 1 - Fraction(min(stop - start, r), r)
            start = stop
        reached += r * (1 - missed)
    return reached


def saved_prompt_tokens(
    samples_per_prompt: int,
    replicas: int,
    prompt_tokens: int,
    prompts: int = 1,
    workers: int = 1,
) -> Fraction:
    """Prompt tokens a sample neither prefills nor holds in KV, on average over a step's samples,
    when verl spreads ``prompts`` groups of ``samples_per_prompt`` (n) samples over ``replicas``
    (R) engine replicas through ``workers`` agent-loop workers with prefix caching on (module
    docstring): each replica's first sample of a prompt prefills and holds it whole, each later
    one reuses :func:`shared_prompt_tokens` (H): ``H · (S − Σ reached) / S`` over the ``S``
    samples, ``reached`` each group's replicas (:func:`group_replicas`); with one worker (or no
    group split across chunks) ``H · (n − min(n, R)) / n``.

    Raises
    ------
    InputError
        n or R below 1.

    Examples
    --------
    GRPO n = 16, 1,024-token prompts: one replica, 15 of 16 samples reuse 1,008 tokens, 945 on
    average; 8 replicas, 2 samples each, 504; 16 or more replicas, none.

    >>> [saved_prompt_tokens(16, r, 1024) for r in (1, 8, 16, 32)]
    [Fraction(945, 1), Fraction(504, 1), Fraction(0, 1), Fraction(0, 1)]

    4 such prompts over verl's 8 workers and 16 replicas: each group split in two chunks reaches
    12 replicas on average (:func:`group_replicas`), so 4 of 16 samples reuse 1,008 tokens, 252.

    >>> saved_prompt_tokens(16, 16, 1024, prompts=4, workers=8)
    Fraction(252, 1)
    """
    if samples_per_prompt < 1 or replicas < 1 or prompts < 1 or workers < 1:
        raise InputError(
            f"samples_per_prompt: {samples_per_prompt} over {replicas} engine replicas, "
            f"{prompts} prompts, {workers} workers; each must be at least 1"
        )
    shared = shared_prompt_tokens(prompt_tokens)
    total = prompts * samples_per_prompt
    reached = group_replicas(prompts, samples_per_prompt, replicas, workers)
    return shared * (total - reached) / total
