"""The rollout engine's tensor-parallel collectives: the seconds a ``tp``-way vLLM engine spends
summing its row-parallel outputs and its embedding and gathering its logits, in every prefill
chunk and every decode step.

Sources:

* **Two all-reduces per layer per forward.** vLLM's ``RowParallelLinear.forward`` calls
  ``tensor_model_parallel_all_reduce(output_parallel)`` whenever ``reduce_results and tp_size >
  1`` (``vllm/model_executor/layers/linear.py``, vllm-project/vllm 9e109c98); the attention's
  ``o_proj`` and the MLP's ``down_proj`` are row-parallel, so each layer of each forward sums
  ``[tokens, h]`` BF16 (2 B) twice over the tp group.
* **One more all-reduce per forward: the embedding.** ``VocabParallelEmbedding.forward`` looks
  the tokens up in its vocabulary shard, zeroes the rows of tokens other ranks hold and calls
  ``tensor_model_parallel_all_reduce(output_parallel)`` on the ``[tokens, h]`` output
  (``vllm/model_executor/layers/vocab_parallel_embedding.py``, 7f5d141a).
* **One logits all-gather per forward.** ``LogitsProcessor._get_logits`` multiplies the sampled
  rows by the vocabulary-parallel ``lm_head`` shard and ``_gather_logits`` calls
  ``tensor_model_parallel_all_gather(logits)`` when ``current_platform.use_all_gather()``
  (``vllm/model_executor/layers/logits_processor.py``, 00db1f12); ``Platform.use_all_gather``
  returns True and the CUDA platform does not override it (``vllm/platforms/interface.py``
  c7761993, ``cuda.py`` 002db495). The gathered tensor is ``[sampled, V']`` in the model's dtype
  (BF16), ``V'`` the vocabulary padded to a multiple of 64 (``DEFAULT_VOCAB_PADDING_SIZE``,
  ``pad_vocab_size``, vocab_parallel_embedding.py). The rows are the forward's sampled positions:
  the engine computes logits only at ``hidden_states[logits_indices]``, the last scheduled token
  of each request in the batch (``vllm/v1/worker/gpu_model_runner.py``): one per live sequence in
  a decode step; in a prefill chunk one per prompt the chunk holds (a chunk of ``K`` tokens
  holds ``⌈K / Tp⌉`` prompts of ``Tp`` tokens laid end to end, at most the wave's ``c``).
* **Not overlapped.** The collectives run on the compute stream between the kernels, so a
  decode step's seconds are its roofline's plus these (:func:`model.rollout.wave_seconds`).
* **Tokens per forward.** A decode step runs one token of every live sequence; prefill runs the
  prompts in chunks of ``max_num_batched_tokens`` (verl's rollout default 8,192,
  ``verl/trainer/config/rollout/rollout.yaml``, volcengine/verl 035682ed).
* **Time of one collective.** The project's collective clock,
  :func:`model.roofline.collective_time` on the part's published NCCL bus-bandwidth curve inside
  the NVLink domain (:func:`model.op_rates.deployed_params`), the one the training side's tp
  collectives read (:mod:`model.layer_time`). vLLM tries its custom all-reduce first (one- or
  two-shot over CUDA IPC, below 8 MiB on 2, 4, 6 or 8 fully NVLinked GPUs:
  ``CudaCommunicator.all_reduce``, ``vllm/distributed/device_communicators/
  cuda_communicator.py``, 089eca13). vLLM PR #2192, which added it, published end-to-end latency
  and throughput tables, not a per-operation table, so the NCCL curve stands for it here. One
  per-operation table exists elsewhere, SGLang PR #2904's of vLLM's kernel on H100 without CUDA
  graphs (512 B to 1 MiB): 1 MiB over tp 4 in 40.2 µs, the curve's 36.0; 32 KiB in 9.2 µs, the
  curve's 28.7. So the curve is close at a full batch's megabytes and about 3× high for small
  batches, where this term is an upper figure. The logits all-gather has no custom kernel: NCCL.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from trainplan.model.errors import InputError
from trainplan.model.hardware import DeviceSpec
from trainplan.model.nvlink_bound import ring_caps
from trainplan.model.op_rates import deployed_params
from trainplan.model.rank_groups import (
    fewest_in_domain,
    nccl_node_size,
    nccl_nodes,
    other_placement,
)
from trainplan.model.roofline import Collective, collective_time, ring_share
from trainplan.model.step_time import rings_bandwidth
from trainplan.model.vocab import padded_vocab

__all__ = [
    "ACTIVATION_BYTES",
    "PREFILL_CHUNK_TOKENS",
    "REDUCES_PER_LAYER",
    "VOCAB_PADDING",
    "engine_all_gather",
    "engine_all_reduce",
    "engine_placement",
    "forward_collectives",
    "wave_reduce_seconds",
]

ACTIVATION_BYTES = 2
"""Bytes per element of the summed ``[tokens, h]`` output and of the gathered logits: BF16, the
engine's dtype."""
REDUCES_PER_LAYER = 2
"""``o_proj`` and ``down_proj``: vLLM's row-parallel layers of one transformer layer."""
PREFILL_CHUNK_TOKENS = 8192
"""Tokens per prefill forward: verl's ``max_num_batched_tokens`` default (module docstring)."""
VOCAB_PADDING = 64
"""vLLM's ``DEFAULT_VOCAB_PADDING_SIZE``: the logits' columns are V rounded up to it."""

Clock = Callable[[float], float]
"""Seconds of one collective of an ``S``-byte buffer over the engine's tp group."""
ForwardClock = Callable[[Fraction, Fraction], float]
"""Seconds of one forward's tp collectives over ``tokens`` tokens with ``sampled`` logits rows."""


def _engine_clock(device: DeviceSpec, tp: int, kind: Collective) -> Clock:
    """Seconds of one ``kind`` collective of an ``S``-byte buffer over ``tp`` ranks of
    ``device``: :func:`model.roofline.collective_time` with each rank sending ``ring_share ·
    S`` (nccl-tests' bus factor), the group placed as the training side's axes are
    (:func:`engine_placement`): over NVLink when every engine lies in one NVLink domain, else
    over the scale-out NICs, ``g`` of them in parallel for ``g`` ranks of the slowest engine in
    a domain (:func:`model.step_time.rings_bandwidth`), its ring crossing the network once a
    round per further domain NCCL counts (:func:`model.nccl_latency.steps_latency`), and each
    collective the slower of it and the engines on another number of domains, each at its own
    latency and NICs (:func:`model.rank_groups.other_placement`, ``collective_time``'s
    ``other``), NCCL's ring graph across domains bound by the NICs and NVLink
    (:attr:`model.roofline.LinkTime.nic_bytes_per_s`); an InputError when the part's table has no bandwidth for that link."""
    domain = device.placement_domain or device.gpus_per_node
    node = nccl_node_size(device.gpus_per_node, device.placement_domain)
    per_domain, nodes = engine_placement(tp, domain, node)
    inside = engine_placement(tp, domain)[1] == 1
    nvlink, nic = device.nvlink_bytes_per_s, device.scaleout_bytes_per_s
    if tp > 1 and not (nvlink if inside else nic):
        link = "NVLink" if inside else "scale-out"
        raise InputError(
            f"rollout tp: {tp} needs the {link} bandwidth of {device.name}, which "
            f"{device.figures_from} does not have"
        )
    bandwidth = nvlink if inside else rings_bandwidth(nic, tp, tp, domain, nvlink, per_domain)
    members, others = other_placement(1, tp, math.lcm(tp, domain, node), domain, node)
    other = None
    if members == tp:  # an engine inside one domain beside engines across two
        other = (nvlink, True, tp, 1)
    elif others:
        other = (rings_bandwidth(nic, tp, tp, domain, nvlink, members), False, members, others)
    params = deployed_params(device.part)
    share = ring_share(kind, tp)
    caps = ring_caps(inside, bandwidth, float(nic or 0.0), float(nvlink or 0.0))

    def seconds(buffer_bytes: float) -> float:
        sent = share * buffer_bytes
        time = collective_time(kind, tp, sent, bandwidth, inside, params, per_domain, nodes, other,
                               nic=caps[0], nvlink=caps[1])  # fmt: skip
        return float(time)

    return seconds


def engine_placement(tp: int, domain: int, node: int = 0) -> tuple[int, int]:
    """(the fewest ranks the slowest engine has in one NVLink domain, the domains NCCL counts for
    it) for rollout engines of ``tp`` ranks on domains of ``domain`` GPUs: vLLM makes each tp
    group ``tp`` consecutive ranks (vllm-project/vllm 0c175ae9 ``vllm/distributed/
    parallel_state.py`` ``initialize_model_parallel``: ``all_ranks.view(-1,
    tensor_model_parallel_size)``, the engine's world ``ExternalDP × DP × PP × TP`` with tp
    innermost) and the engines tile the rollout GPUs in order, so their placement repeats every
    ``lcm(tp, domain, node)`` ranks: :func:`model.rank_groups.fewest_in_domain` and
    :func:`model.rank_groups.nccl_nodes` (NCCL's node of ``node`` ranks, 0: the domain) of
    groups of ``tp`` at stride 1 over that many. Units: ranks, nodes.

    >>> engine_placement(8, 8), engine_placement(16, 8), engine_placement(3, 8)
    ((8, 1), (8, 2), (1, 2))
    """
    total = math.lcm(tp, domain, node or domain)
    return fewest_in_domain(1, tp, total, domain), nccl_nodes(1, tp, total, domain, node)


def engine_all_reduce(device: DeviceSpec, tp: int) -> Clock:
    """Seconds of one all-reduce of an ``S``-byte buffer over ``tp`` ranks of ``device``, each
    rank sending ``2(tp − 1)/tp · S``.

    Raises
    ------
    InputError
        A tp > 1 on a part whose accelerator table has no bandwidth for that link.

    Examples
    --------
    1,835,008 B (256 tokens × 3,584 × 2 B) over 4 H100s reads the curve's 1.835 MB point as a
    ring's (NCCL runs a 4-GPU all-reduce of an H100 node as a ring, :func:`model.nvls.nvls_ring`:
    the NVLS curve ÷ 480/370): 47.9 µs.

    >>> from trainplan.topology.accelerators import get_accelerator
    >>> round(engine_all_reduce(get_accelerator("H100-SXM"), 4)(256 * 3584 * 2) * 1e6, 1)
    47.9
    """
    return _engine_clock(device, tp, Collective.ALL_REDUCE)


def engine_all_gather(device: DeviceSpec, tp: int) -> Clock:
    """Seconds of one all-gather into an ``S``-byte output over ``tp`` ranks of ``device``, each
    rank receiving ``(tp − 1)/tp · S`` (the curve read at ``S``, divided by the part's NVLS
    all-reduce speed-up: :func:`model.roofline.published_busbw`).

    Raises
    ------
    InputError
        As :func:`engine_all_reduce`.

    Examples
    --------
    256 rows of Qwen2.5's 152,064 logits in BF16, 77,856,768 B, over 4 H100s:

    >>> from trainplan.topology.accelerators import get_accelerator
    >>> round(engine_all_gather(get_accelerator("H100-SXM"), 4)(256 * 152064 * 2) * 1e6, 1)
    204.7
    """
    return _engine_clock(device, tp, Collective.ALL_GATHER)


def forward_collectives(
    layers: int, hidden: int, vocab: int, all_reduce: Clock, all_gather: Clock
) -> ForwardClock:
    """Seconds of one forward's tp collectives over ``tokens`` tokens with ``sampled`` logits
    rows: ``2·L + 1`` all-reduces of ``tokens · h · 2`` B (o_proj and down_proj in every layer,
    the embedding once) and one all-gather of ``sampled · V' · 2`` B, ``V'`` the vocabulary
    padded to a multiple of 64 (module docstring).

    >>> f = forward_collectives(28, 3584, 152064, lambda s: s / 1e12, lambda s: s / 1e12)
    >>> round(f(Fraction(256), Fraction(256)) * 1e6, 2)  # 57 × 1,835,008 + 77,856,768 B at 1 B/ps
    182.45
    """
    logits_columns = padded_vocab(vocab, VOCAB_PADDING)

    def seconds(tokens: Fraction, sampled: Fraction) -> float:
        if tokens <= 0:
            return 0.0
        summed = float(tokens * hidden * ACTIVATION_BYTES)
        gathered = float(sampled * logits_columns * ACTIVATION_BYTES)
        return (REDUCES_PER_LAYER * layers + 1) * all_reduce(summed) + all_gather(gathered)

    return seconds


def wave_reduce_seconds(
    c: int,
    *,
    forward: ForwardClock,
    prompt_tokens: int,
    completion_tokens: int,
    steps: int,
    chunk_tokens: int = PREFILL_CHUNK_TOKENS,
    saved_prompt_tokens: Fraction = Fraction(0),
) -> tuple[Fraction, Fraction]:
    """(prefill, decode) seconds of the tp collectives of one wave of ``c`` sequences:
    ``forward`` (:func:`forward_collectives`) once per prefill chunk — the wave's ``c · Tp``
    prompt tokens in full chunks of ``chunk_tokens`` and one of the rest, each sampling one row
    per prompt it holds, ``min(c, ⌈tokens / Tp⌉)`` — and once per decode step over the
    ``c · Tc / T_max`` sequences live on average, each sampling its row
    (:func:`model.rollout.wave_seconds`). With ``saved_prompt_tokens`` s reused from the prefix
    cache (:mod:`model.rollout_prefix`) a sequence prefills ``Tp − s`` tokens: the wave's
    ``⌈c · (Tp − s)⌉`` are chunked so.

    Examples
    --------
    4 prompts of 5,000 tokens: chunks of 8,192, 8,192 and 3,616 tokens holding 2, 2 and 1
    prompts; 10 decode steps of 4 · 5/10 = 2 live sequences each; a clock of 1 s per token and
    1,000 s per sampled row:

    >>> clock = lambda tokens, rows: float(tokens + 1000 * rows)
    >>> wave_reduce_seconds(4, forward=clock, prompt_tokens=5000, completion_tokens=5, steps=10)
    (Fraction(25000, 1), Fraction(20020, 1))
    """
    own = prompt_tokens - saved_prompt_tokens
    full, rest = divmod(math.ceil(c * own), chunk_tokens)

    def chunk(tokens: int) -> Fraction:
        rows = min(c, math.ceil(tokens / own))
        return Fraction(forward(Fraction(tokens), Fraction(rows))) if tokens else Fraction(0)

    prefill = full * chunk(chunk_tokens) + chunk(rest)
    live = Fraction(c * completion_tokens, steps)
    decode = steps * Fraction(forward(live, live))
    return prefill, decode
