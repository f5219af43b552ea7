"""The rollout engine of an RLHF step: its weights, its KV cache, its memory budget, and the
seconds it takes to generate a step's rollouts (prefill and decode) on a pool of GPUs.

Sources, term by term:

* **Weights**: BF16, the policy's parameters split over the engine's tp (vLLM's
  ``tensor_parallel_size``; norms and routers whole on every rank, as the training profiles
  count them: :func:`model.estimate.stage_params_per_gpu`).
* **KV cache**: per layer, K and V of ``[tokens, g, d]`` in the cache dtype (BF16, vLLM's
  ``kv_cache_dtype="auto"`` = the model dtype; Kwon et al. 2023, PagedAttention). GQA keeps g
  KV heads (Ainslie et al. 2023); vLLM splits them over tp when tp ≤ g and keeps one head on
  each rank when tp > g (``num_kv_heads = max(1, total_num_kv_heads // tp_size)`` in its Llama
  and Qwen2 attention). MLA (DeepSeek-V2/V3) caches the compressed latent ``c_KV``
  (``kv_lora_rank``) and the shared RoPE key (``qk_rope_head_dim``) per token, whole on every tp
  rank (vLLM's MLA backend).
* **Memory budget**: vLLM's ``gpu_memory_utilization`` — "the fraction of GPU memory" the engine
  may use for weights, activations and KV cache (vLLM engine arguments; default 0.9; verl's
  rollout default 0.5 when colocated with training) — and SGLang's ``mem_fraction_static``
  (weights and KV pool) are one number here: ``fraction × the device's bytes`` as CUDA reports
  them (:attr:`model.hardware.DeviceSpec.cuda_total_bytes`, what vLLM multiplies). The KV space is
  what the weights leave of it; the engine runs at most ``max_num_seqs`` sequences at once
  (:data:`model.rlhf.shares.ROLLOUT_BATCH`, vLLM's 256), fewer when the KV space holds fewer of them at
  full length. vLLM's activation workspace inside the budget is not counted. Its CUDA graphs lie
  beyond the budget: vLLM 35d5cda (``vllm/v1/worker/gpu_worker.py``) sizes and allocates the KV
  cache before ``capture_model()`` ("``memory_profiling`` does not consider CUDAGraph memory
  size"), so a generating engine holds ``fraction × total`` and its graph pool (below).
  The engine's worker process's CUDA context is outside the budget (vLLM's ``Worker.init_device``
  takes the memory snapshot it measures its budget from after the context and its communicators
  exist, vllm-project/vllm 35d5cda ``vllm/v1/worker/gpu_worker.py``): a pool counts it as one of
  its processes (:func:`model.rlhf.step.process_bytes`; alone on its pool, the engine's is the
  one the runtime reserve holds).
* **What a sleeping engine keeps.** Between rollouts verl puts the engine to sleep
  (``free_cache_engine`` true and ``enforce_eager`` false by default,
  ``verl/trainer/config/rollout/rollout.yaml``). verl's hybrid engine (``RolloutMode.HYBRID``,
  the engine on the actor's GPUs, new weights each step) sleeps at level 2
  (``vllm_async_server.py`` ``vLLMHttpServer.sleep``: ``collective_rpc("sleep", kwargs={"level":
  2})``; ``vllm_rollout.py`` ``ServerAdapter.release`` at ``VLLM_SLEEP_LEVEL``, 2 from vLLM
  0.8.5, ``verl/third_party/vllm/__init__.py``; verl b178a3cd5), which keeps no copy of the
  weights. Level 1 (``RolloutMode.COLOCATED``, a generative judge's engine, which this plan has
  no role for; ``layered_summon``; an expert-parallel engine below vLLM 0.11, which this plan
  does not run) would keep a pinned host copy of the weights, not counted here. OpenRLHF
  (``deepspeed``) sleeps at level 1 (``LLMRayActor.sleep(level=1)``, ``vllm_engine.py``,
  3c3be6234; ``--vllm.enable_sleep``, colocated only): its pinned host copy, the engine's BF16
  weights ÷ tp per GPU, is in the host bytes of the pool holding the engine and the actor
  (:func:`model.rlhf.openrlhf.sleep_host`). Either level frees the
  weights and the KV cache only: vLLM's ``CuMemAllocator``
  (``vllm/device_allocator/cumem.py``) releases the allocations it tagged ``weights`` and
  ``kv_cache``. Its tp group's NCCL communicators and custom all-reduce buffers stay, and a
  pool counts them in every phase (:func:`model.rlhf.engine.engine_communicator_bytes`;
  vLLM PR #51485 releases communicators only behind the opt-in ``--enable-nccl-comm-suspend``).
* **The engine's CUDA graphs: an assumed allowance.** Without ``enforce_eager`` vLLM captures
  CUDA graphs into one shared pool, largest batch first (``GPUModelRunner.capture_model``);
  generating, they lie beyond the budget (above: verl b178a3cd5 allows vLLM 0.8.5 to 0.12.0,
  ``setup.py`` ``VLLM_REQUIRES``; OpenRLHF 3c3be6234 pins 0.27.1, whose default graph estimate,
  vLLM PR #30515, may hold them inside it: not read, counted beyond, the larger); sleeping,
  their pool and executables are not among the tagged allocations and stay through scoring and
  training (vLLM PR #56373: "Level-1 cuMem sleep releases weights and KV cache, but leaves graph
  executables and native CUDA graph pools resident"). No per-graph figure could be tied to a
  graph count (vLLM itself measures the pool), so a pool holds
  :data:`model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES`, an ASSUMED 0.36 GiB per GPU (the largest
  published small-model pool), in every phase beside the engine's communicators — a floor: vLLM
  issue #47654 measured 1,503,657,984 B per GPU for a large MoE at TP8. The decode time is a
  roofline with no launch cost (graph-speed), so no plan runs ``enforce_eager`` here.
  docs/memory-mechanisms.md, "A rollout engine's CUDA graphs", gives the figures.
* **Time** (a roofline, Williams et al. 2009): prefill is compute-bound at ``2·N`` FLOPs per
  prompt token (Kaplan et al. 2020's forward count; attention FLOPs left out) at the calibrated
  kernel efficiency; each decode step of ``c`` sequences takes the longer of its compute
  (``2·N_active·c``) and of reading the weights and every sequence's KV cache so far from HBM at
  the accelerator's bandwidth (``hbm_tbps``, vendor datasheets). Sequences the engine cannot
  hold at once run in further waves. With every rollout at the mean length a wave decodes that
  many steps; when the longest rollout is longer (``max_completion_tokens``: a synchronous
  engine waits for it), a wave decodes as many steps as the longest, reading the weights every
  step, while the tokens it generates stay those of mean-length rollouts — on average
  ``c·mean/max`` sequences live at each step (a uniform thinning of the batch; the lengths'
  distribution is not modelled). A tp > 1 engine adds its collectives (the layers' and the
  embedding's all-reduces, the logits all-gather) to every prefill chunk and decode step, not
  overlapped (:mod:`model.rollout_reduce`).
* **Weight sync**: timed by placement, not here (the RLHF step passes no ``sync_bytes``):
  on a pool of its own the engine receives the updated policy's BF16 weights whole (``2·N``
  bytes, not ``2·N/tp``: every parameter is sent whole and each engine rank keeps its shard in
  ``load_weights``, :func:`model.rlhf.engine.sync_weights_bytes`); on the actor's pool each GPU
  receives what the actor's gather brings (:mod:`model.rlhf.sync_time`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import partial

from trainplan.model.errors import LayoutError
from trainplan.model.rollout_checks import check_fraction, check_rollout
from trainplan.model.rollout_reduce import wave_reduce_seconds
from trainplan.model.specs import Architecture

__all__ = [
    "KV_CACHE_BYTES",
    "kv_heads_per_gpu",
    "kv_bytes_per_token",
    "EngineMemory",
    "engine_memory",
    "RolloutTime",
    "decode_seconds",
    "wave_seconds",
    "check_rollout",
    "all_waves",
    "rollout_time",
    "check_fraction",
]

KV_CACHE_BYTES = 2
"""Bytes per cached K or V element: BF16 (vLLM ``kv_cache_dtype="auto"``: the model dtype)."""


def kv_heads_per_gpu(arch: Architecture, tp: int) -> int:
    """KV heads one GPU of a ``tp``-way engine caches: g/tp when tp ≤ g, else 1 (each head kept
    whole on tp/g ranks, as vLLM does).

    Raises
    ------
    LayoutError
        When neither of tp and g divides the other (vLLM refuses such a tp).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> qwen = Architecture(num_layers=28, hidden_size=3584, num_attention_heads=28,
    ...                     num_kv_heads=4, ffn_hidden_size=18944, vocab_size=152064)
    >>> [kv_heads_per_gpu(qwen, tp) for tp in (1, 2, 4, 8)]
    [4, 2, 1, 1]
    """
    g = arch.kv_heads
    if tp <= g:
        if g % tp:
            raise LayoutError(f"rollout tp: {tp} does not divide the {g} KV heads")
        return g // tp
    if tp % g:
        raise LayoutError(f"rollout tp: {tp} is not a multiple of the {g} KV heads")
    return 1


def kv_bytes_per_token(arch: Architecture, tp: int = 1, cache_bytes: int = KV_CACHE_BYTES) -> int:
    """KV-cache bytes per token on one GPU of a ``tp``-way engine.

    GQA/MHA: ``2 (K, V) · L · g_gpu · d · bytes`` (:func:`kv_heads_per_gpu`); MLA:
    ``L · (kv_lora_rank + qk_rope_head_dim) · bytes`` on every rank.

    Examples
    --------
    Llama 3 70B (L 80, g 8, d 128): 2·80·8·128·2 = 327,680 B per token, 40,960 at tp 8;
    Qwen2.5 7B (L 28, g 4, d 128): 57,344 at tp 1, 14,336 at tp 4 and at tp 8 (one head each).

    >>> from trainplan.model.specs import Architecture
    >>> llama70 = Architecture(num_layers=80, hidden_size=8192, num_attention_heads=64,
    ...                        num_kv_heads=8, ffn_hidden_size=28672, vocab_size=128256)
    >>> kv_bytes_per_token(llama70), kv_bytes_per_token(llama70, 8)
    (327680, 40960)
    """
    if arch.mla is not None:
        return arch.num_layers * (arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim) * cache_bytes
    return 2 * arch.num_layers * kv_heads_per_gpu(arch, tp) * arch.dim_per_head * cache_bytes


@dataclass(frozen=True, slots=True)
class EngineMemory:
    """The rollout engine's bytes on one of its GPUs (all exact)."""

    budget_bytes: Fraction
    """What the engine takes: fraction × the device's bytes as CUDA reports them (vLLM
    ``gpu_memory_utilization``)."""
    weights_bytes: Fraction
    """Its BF16 weight copy on this GPU."""
    kv_space_bytes: Fraction
    """Budget less weights: what the KV cache may fill."""
    kv_per_sequence_bytes: int
    """One sequence's KV cache at full length (prompt + completion tokens) on this GPU."""
    concurrent: int
    """Sequences one engine replica decodes at once (0: the KV space holds none)."""
    limited_by: str
    """What sets ``concurrent``: ``max_num_seqs``, ``sequences`` (the replica has no more) or
    ``kv_space``."""
    kv_shared_bytes: Fraction = Fraction(0)
    """Of ``kv_per_sequence_bytes``, what a sequence does not hold itself on average: prompt
    blocks an earlier sample of its prompt holds (:mod:`model.rollout_prefix`; 0 without)."""

    @property
    def kv_cache_bytes(self) -> Fraction:
        """KV cache of the ``concurrent`` sequences at full length, shared prompt blocks once."""
        return self.concurrent * (self.kv_per_sequence_bytes - self.kv_shared_bytes)

    @property
    def fits(self) -> bool:
        """True when the engine holds at least one sequence at full length."""
        return self.concurrent >= 1


def engine_memory(
    arch: Architecture,
    weights_bytes: Fraction,
    device_bytes: int,
    fraction: Fraction,
    max_num_seqs: int,
    sequences_per_replica: int,
    seq_tokens: int,
    tp: int,
    saved_tokens: Fraction = Fraction(0),
) -> EngineMemory:
    """The engine's memory on one GPU and how many sequences it decodes at once.

    ``device_bytes``: the GPU's bytes (its HBM); ``fraction``: vLLM's ``gpu_memory_utilization``;
    ``weights_bytes``: the engine's weights on one GPU; ``sequences_per_replica``: rollouts this
    engine replica (tp GPUs) generates in the step; ``seq_tokens``: prompt + completion tokens;
    ``saved_tokens``: prompt tokens a sequence shares on average (:mod:`model.rollout_prefix`).

    Raises
    ------
    InputError
        A fraction outside (0, 1) (:func:`check_fraction`).
    LayoutError
        A tp the KV heads do not allow (:func:`kv_heads_per_gpu`).

    Examples
    --------
    Qwen2.5 7B at tp 1 on an 80 GiB H100 with fraction 1/2: budget 42,949,672,960 B; weights
    2·7,615,616,512 = 15,231,233,024 B; KV space 27,718,439,936 B; a 5,120-token sequence holds
    57,344·5,120 = 293,601,280 B, so 94 fit at once (fewer than max_num_seqs 256).

    >>> from trainplan.model.specs import Architecture
    >>> qwen = Architecture(num_layers=28, hidden_size=3584, num_attention_heads=28,
    ...                     num_kv_heads=4, ffn_hidden_size=18944, vocab_size=152064)
    >>> m = engine_memory(qwen, Fraction(15_231_233_024), 80 * 2**30, Fraction(1, 2), 256,
    ...                   2048, 5120, 1)
    >>> m.concurrent, m.limited_by, int(m.kv_space_bytes)
    (94, 'kv_space', 27718439936)
    """
    check_fraction(fraction)
    budget = fraction * device_bytes
    kv_space = budget - weights_bytes
    per_seq = kv_bytes_per_token(arch, tp) * seq_tokens
    shared = kv_bytes_per_token(arch, tp) * saved_tokens
    room = max(0, math.floor(kv_space / (per_seq - shared)))
    concurrent = min(max_num_seqs, sequences_per_replica, room)
    if concurrent == room and room < min(max_num_seqs, sequences_per_replica):
        limited = "kv_space"
    elif concurrent == sequences_per_replica and sequences_per_replica < max_num_seqs:
        limited = "sequences"
    else:
        limited = "max_num_seqs"
    return EngineMemory(budget, weights_bytes, kv_space, per_seq, concurrent, limited, shared)


@dataclass(frozen=True, slots=True)
class RolloutTime:
    """Seconds of one step's rollout on one engine replica (all replicas run in parallel)."""

    prefill_s: float
    """Prompt processing, every wave: compute-bound."""
    decode_s: float
    """Token-by-token generation, every wave: each step the longer of compute and HBM reads."""
    sync_s: float
    """The updated weights reaching the engine before it starts."""
    waves: int
    """Rounds of ``concurrent`` sequences the replica runs (the last may be smaller)."""
    memory_bound_steps: int
    """Decode steps bound by HBM reads (of ``waves × completion tokens``)."""
    total_steps: int
    all_reduce_s: float = 0.0
    """The engine's tp collectives (all-reduces and the logits all-gather), inside ``prefill_s``
    and ``decode_s`` (:mod:`model.rollout_reduce`)."""

    @property
    def total_s(self) -> float:
        """prefill + decode + weight sync."""
        return self.prefill_s + self.decode_s + self.sync_s


def decode_seconds(
    compute_s: Fraction, read0_s: Fraction, read_per_step_s: Fraction, steps: int
) -> tuple[Fraction, int]:
    """``Σ_{t=1..steps} max(compute_s, read0_s + read_per_step_s · t)`` and how many of the
    steps are memory-bound: each decode step computes for ``compute_s`` and reads the weights
    and the KV cache so far (``read0_s`` at the prompt, ``read_per_step_s`` more per generated
    token); the crossover is found in closed form.

    Examples
    --------
    Steps 1–4 read 1.5, 2, 2.5, 3 s against 2 s of compute: 2 + 2 + 2.5 + 3 = 9.5 s, two
    memory-bound steps (the second reads exactly its compute time: not counted as bound).

    >>> decode_seconds(Fraction(2), Fraction(1), Fraction(1, 2), 4)
    (Fraction(19, 2), 2)
    """
    if steps <= 0:
        return Fraction(0), 0
    if read_per_step_s > 0:
        first = max(1, math.floor((compute_s - read0_s) / read_per_step_s) + 1)
    else:
        first = 1 if read0_s > compute_s else steps + 1
    first = min(first, steps + 1)
    n = steps - first + 1
    compute_part = (first - 1) * compute_s
    memory_part = n * read0_s + read_per_step_s * Fraction((first + steps) * n, 2)
    return compute_part + memory_part, n


def wave_seconds(
    c: int,
    *,
    active_params: int,
    weights_bytes: Fraction,
    kv_per_token_bytes: int,
    prompt_tokens: int,
    completion_tokens: int,
    steps: int,
    tp: int,
    flops_per_s: Fraction,
    bytes_per_s: Fraction,
    saved_prompt_tokens: Fraction = Fraction(0),
) -> tuple[Fraction, Fraction, int]:
    """(prefill seconds, decode seconds, memory-bound decode steps) of one wave of ``c``
    sequences on one engine replica of ``tp`` GPUs.

    Prefill: ``2·N_active·c·(Tp − s) / tp`` FLOPs per GPU at ``flops_per_s`` (peak × kernel
    efficiency; ``s``: ``saved_prompt_tokens``, reused from the prefix cache,
    :mod:`model.rollout_prefix`; decode still reads every sequence's whole prompt). Then
    ``steps`` (T_max) decode steps with ``l = c·Tc/T_max`` sequences live on average (``c`` when
    the longest rollout is the mean, Tc = ``completion_tokens``; the module docstring), step t
    computing ``2·N_active·l / tp`` FLOPs and reading ``weights + l·kv·(Tp + t)`` bytes per GPU
    at ``bytes_per_s`` (HBM × bandwidth efficiency): :func:`decode_seconds`.

    Examples
    --------
    One wave of 64 sequences of Qwen2.5 7B (N 7,615,616,512, weights 15.23 GB) at tp 1 on an
    H100 (3.35 TB/s, 989.4 TFLOP/s at 0.5), 1,024 prompt + 4,096 completion tokens, reading
    57,344 B per token per sequence. Decode compute per step 2·N·64/(989.4e12·0.5) = 1.97 ms;
    reading the weights alone takes 15.23e9/3.35e12 = 4.55 ms, so every step is memory-bound:
    4,096 × 4.55 ms = 18.62 s of weights plus the KV cache, 64·57,344·(4,096·1,024 +
    4,096·4,097/2) = 4.619e13 B = 13.79 s; prefill 2·N·64·1,024/494.7e12 = 2.018 s.

    >>> prefill, decode, bound = wave_seconds(64, active_params=7_615_616_512,
    ...     weights_bytes=Fraction(15_231_233_024), kv_per_token_bytes=57_344,
    ...     prompt_tokens=1024, completion_tokens=4096, steps=4096, tp=1,
    ...     flops_per_s=Fraction(989.4e12) / 2,
    ...     bytes_per_s=Fraction(3.35e12))
    >>> bound, round(float(decode), 2), round(float(prefill), 3)
    (4096, 32.41, 2.018)
    """
    prefill = 2 * active_params * c * (prompt_tokens - saved_prompt_tokens) / tp / flops_per_s
    live = Fraction(c * completion_tokens, steps)
    compute = 2 * active_params * live / tp / flops_per_s
    read0 = (weights_bytes + live * kv_per_token_bytes * prompt_tokens) / bytes_per_s
    per_step = live * kv_per_token_bytes / bytes_per_s
    decode, bound = decode_seconds(compute, read0, per_step, steps)
    return prefill, decode, bound


def all_waves(
    sequences: int, concurrent: int, wave: Callable[[int], tuple[Fraction, Fraction, int]]
) -> tuple[Fraction, Fraction, int, int]:
    """(prefill seconds, decode seconds, memory-bound steps, waves) of ``sequences`` run
    ``concurrent`` at a time: equal waves of ``concurrent``, then one of the rest, each
    ``wave(c)`` (:func:`wave_seconds` of ``c`` sequences).

    >>> all_waves(100, 64, lambda c: (Fraction(c), Fraction(2 * c), 1))
    (Fraction(100, 1), Fraction(200, 1), 2, 2)
    """
    full, rest = divmod(sequences, concurrent)
    sizes = [(concurrent, full), (rest, 1 if rest else 0)]
    seconds = [(count, wave(c)) for c, count in sizes if count]
    prefill = sum((count * p for count, (p, _, _) in seconds), Fraction(0))
    decode = sum((count * d for count, (_, d, _) in seconds), Fraction(0))
    bound = sum(count * n for count, (_, _, n) in seconds)
    return prefill, decode, bound, full + (1 if rest else 0)


def _all_reduces(
    tp_reduce: Callable[[Fraction, Fraction], float] | None,
    sequences: int,
    concurrent: int,
    prompt_tokens: int,
    completion_tokens: int,
    steps: int,
    saved: Fraction = Fraction(0),
) -> tuple[Fraction, Fraction]:
    """(prefill, decode) seconds of the tp collectives of every wave
    (:func:`model.rollout_reduce.wave_reduce_seconds`); none without ``tp_reduce``."""
    if tp_reduce is None:
        return Fraction(0), Fraction(0)
    reduce = partial(wave_reduce_seconds, forward=tp_reduce, prompt_tokens=prompt_tokens,
                     completion_tokens=completion_tokens, steps=steps,
                     saved_prompt_tokens=saved)  # fmt: skip
    prefill, decode, _, _ = all_waves(sequences, concurrent, lambda c: (*reduce(c), 0))
    return prefill, decode


def rollout_time(
    *,
    active_params: int,
    weights_bytes: Fraction,
    kv_per_token_bytes: int,
    sequences_per_replica: int,
    concurrent: int,
    prompt_tokens: int,
    completion_tokens: int,
    tp: int,
    peak_flops_per_s: float,
    kernel_efficiency: float,
    hbm_bytes_per_s: float,
    bandwidth_efficiency: float,
    sync_bytes: Fraction = Fraction(0),
    sync_bytes_per_s: float | None = None,
    max_completion_tokens: int | None = None,
    tp_reduce: Callable[[Fraction, Fraction], float] | None = None,
    saved_prompt_tokens: Fraction = Fraction(0),
) -> RolloutTime:
    """Seconds for one engine replica (``tp`` GPUs) to generate ``sequences_per_replica``
    rollouts, ``concurrent`` at a time: equal waves of ``concurrent`` sequences and one of the
    rest, each :func:`wave_seconds` at ``peak × kernel_efficiency`` and ``hbm ×
    bandwidth_efficiency``, decoding ``max_completion_tokens`` steps when given (T_max > Tc: a
    wave holds ``c·Tc/T_max`` sequences live on average, the module docstring). Weight sync:
    ``sync_bytes`` at ``sync_bytes_per_s`` (0 without a bandwidth). ``tp_reduce``: one forward's
    tp collectives (:func:`model.rollout_reduce.forward_collectives`), added to every prefill
    chunk and decode step; ``saved_prompt_tokens``: :mod:`model.rollout_prefix`.

    Raises
    ------
    InputError
        As :func:`check_rollout`.

    Examples
    --------
    :func:`wave_seconds`' Qwen2.5 7B, 100 rollouts 64 at a time: a wave of 64 and one of 36.

    >>> t = rollout_time(active_params=7_615_616_512, weights_bytes=Fraction(15_231_233_024),
    ...     kv_per_token_bytes=57_344, sequences_per_replica=100, concurrent=64,
    ...     prompt_tokens=1024, completion_tokens=4096, tp=1, peak_flops_per_s=989.4e12,
    ...     kernel_efficiency=0.5, hbm_bytes_per_s=3.35e12, bandwidth_efficiency=1.0)
    >>> t.waves, t.memory_bound_steps, t.total_steps
    (2, 8192, 8192)
    """
    longest = check_rollout(concurrent, hbm_bytes_per_s, bandwidth_efficiency, completion_tokens,
                            max_completion_tokens)  # fmt: skip
    wave = partial(wave_seconds, active_params=active_params, weights_bytes=weights_bytes,
                   kv_per_token_bytes=kv_per_token_bytes, prompt_tokens=prompt_tokens,
                   completion_tokens=completion_tokens, steps=longest, tp=tp,
                   flops_per_s=Fraction(peak_flops_per_s) * Fraction(kernel_efficiency),
                   bytes_per_s=Fraction(hbm_bytes_per_s) * Fraction(bandwidth_efficiency),
                   saved_prompt_tokens=saved_prompt_tokens)  # fmt: skip
    prefill, decode, bound, waves = all_waves(sequences_per_replica, concurrent, wave)
    per_wave = (sequences_per_replica, concurrent, prompt_tokens, completion_tokens, longest)
    ar_prefill, ar_decode = _all_reduces(tp_reduce if tp > 1 else None, *per_wave, saved_prompt_tokens)  # fmt: skip
    sync = sync_bytes / Fraction(sync_bytes_per_s) if sync_bytes and sync_bytes_per_s else 0
    seconds = (prefill + ar_prefill, decode + ar_decode, sync, ar_prefill + ar_decode)
    prefill_s, decode_s, sync_s, reduce_s = map(float, seconds)
    return RolloutTime(prefill_s, decode_s, sync_s, waves, bound, waves * longest, reduce_s)
