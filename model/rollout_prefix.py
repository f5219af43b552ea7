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
* **Which replica a sample reaches.** ``AsyncLLMServerManager._choose_server`` picks the server
  with the fewest requests sent so far (its count only grows: round robin over the replicas), a
  new choice per sample (a fresh ``uuid4`` request id each). A group's n adjacent samples so land
  on ``min(n, R)`` of the R replicas, ``n / min(n, R)`` on each on average — none shared when
  R ≥ n. verl's async-task scheduling may reorder requests; the round robin is the plan's.
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

from fractions import Fraction

from trainplan.model.errors import InputError

__all__ = ["VLLM_BLOCK_TOKENS", "shared_prompt_tokens", "saved_prompt_tokens"]

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


def saved_prompt_tokens(samples_per_prompt: int, replicas: int, prompt_tokens: int) -> Fraction:
    """Prompt tokens a sample neither prefills nor holds in KV, on average over a step's samples,
    when verl round-robins a group's ``samples_per_prompt`` (n) samples over ``replicas`` (R)
    engine replicas with prefix caching on (module docstring): each replica's first sample of a
    prompt prefills and holds it whole, each later one reuses :func:`shared_prompt_tokens` (H):
    ``H · (n − min(n, R)) / n``.

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
    """
    if samples_per_prompt < 1 or replicas < 1:
        raise InputError(
            f"samples_per_prompt: {samples_per_prompt} over {replicas} engine replicas; both must "
            "be at least 1"
        )
    first = min(samples_per_prompt, replicas)
    shared = shared_prompt_tokens(prompt_tokens)
    return Fraction(shared * (samples_per_prompt - first), samples_per_prompt)
