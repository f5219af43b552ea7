"""The rollout engine's tensor-parallel all-reduces: the seconds a ``tp``-way vLLM engine spends
summing its row-parallel outputs, in every prefill chunk and every decode step.

Sources:

* **Two all-reduces per layer per forward.** vLLM's ``RowParallelLinear.forward`` calls
  ``tensor_model_parallel_all_reduce(output_parallel)`` whenever ``reduce_results and tp_size >
  1`` (``vllm/model_executor/layers/linear.py``, vllm-project/vllm 9e109c98); the attention's
  ``o_proj`` and the MLP's ``down_proj`` are row-parallel, so each layer of each forward sums
  ``[tokens, h]`` BF16 (2 B) twice over the tp group. The embedding's all-reduce
  (``VocabParallelEmbedding``) and the logits' gather are one each per forward, not per layer:
  not counted here.
* **Not overlapped.** The all-reduce runs on the compute stream between the GEMMs, so a decode
  step's seconds are its roofline's plus these (:func:`model.rollout.wave_seconds`).
* **Tokens per forward.** A decode step runs one token of every live sequence; prefill runs the
  prompts in chunks of ``max_num_batched_tokens`` (verl's rollout default 8,192,
  ``verl/trainer/config/rollout/rollout.yaml``, volcengine/verl 035682ed).
* **Time of one all-reduce.** The project's collective clock,
  :func:`model.roofline.collective_time` on the part's published NCCL bus-bandwidth curve inside
  the NVLink domain (:func:`model.op_rates.deployed_params`), the one the training side's tp
  all-reduces read (:mod:`model.layer_time`). vLLM tries its custom all-reduce first (one- or
  two-shot over CUDA IPC, below 8 MiB on 2, 4, 6 or 8 fully NVLinked GPUs:
  ``CudaCommunicator.all_reduce``, ``vllm/distributed/device_communicators/
  cuda_communicator.py``, 089eca13). vLLM PR #2192, which added it, published end-to-end latency
  and throughput tables, not a per-operation table, so the NCCL curve stands for it here. One
  per-operation table exists elsewhere, SGLang PR #2904's of vLLM's kernel on H100 without CUDA
  graphs (512 B to 1 MiB): 1 MiB over tp 4 in 40.2 µs, the curve's 36.0; 32 KiB in 9.2 µs, the
  curve's 28.7. So the curve is close at a full batch's megabytes and about 3× high for small
  batches, where this term is an upper figure.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from trainplan.model.errors import InputError
from trainplan.model.hardware import DeviceSpec
from trainplan.model.op_rates import deployed_params
from trainplan.model.roofline import Collective, collective_time, ring_share

__all__ = [
    "ACTIVATION_BYTES",
    "PREFILL_CHUNK_TOKENS",
    "REDUCES_PER_LAYER",
    "engine_all_reduce",
    "forward_reduce",
    "wave_reduce_seconds",
]

ACTIVATION_BYTES = 2
"""Bytes per element of the summed ``[tokens, h]`` output: BF16, the engine's dtype."""
REDUCES_PER_LAYER = 2
"""``o_proj`` and ``down_proj``: vLLM's row-parallel layers of one transformer layer."""
PREFILL_CHUNK_TOKENS = 8192
"""Tokens per prefill forward: verl's ``max_num_batched_tokens`` default (module docstring)."""

AllReduce = Callable[[float], float]
"""Seconds of one all-reduce of an ``S``-byte buffer over the engine's tp group."""


def engine_all_reduce(device: DeviceSpec, tp: int) -> AllReduce:
    """Seconds of one all-reduce of an ``S``-byte buffer over ``tp`` ranks of ``device``:
    :func:`model.roofline.collective_time` with each rank sending ``2(tp − 1)/tp · S`` (nccl-tests'
    bus factor) over NVLink when the group fits one NVLink domain, else over the scale-out NIC.

    Raises
    ------
    InputError
        A tp > 1 on a part whose accelerator table has no bandwidth for that link.

    Examples
    --------
    1,835,008 B (256 tokens × 3,584 × 2 B) over 4 H100s reads the curve's 1.835 MB point:
    36.9 µs.

    >>> from trainplan.topology.accelerators import get_accelerator
    >>> round(engine_all_reduce(get_accelerator("H100-SXM"), 4)(256 * 3584 * 2) * 1e6, 1)
    36.9
    """
    inside = tp <= (device.nvlink_domain or device.gpus_per_node)
    bandwidth = device.nvlink_bytes_per_s if inside else device.scaleout_bytes_per_s
    if tp > 1 and not bandwidth:
        link = "NVLink" if inside else "scale-out"
        raise InputError(
            f"rollout tp: {tp} needs the {link} bandwidth of {device.name}, which the "
            "accelerator table does not have"
        )
    params = deployed_params(device.name)
    share = ring_share(Collective.ALL_REDUCE, tp)

    def seconds(buffer_bytes: float) -> float:
        sent = share * buffer_bytes
        return float(collective_time(Collective.ALL_REDUCE, tp, sent, bandwidth, inside, params))

    return seconds


def forward_reduce(layers: int, hidden: int, all_reduce: AllReduce) -> Callable[[Fraction], float]:
    """Seconds of one forward's tp all-reduces over ``tokens`` tokens: ``2·L`` all-reduces of
    ``tokens · h · 2`` B.

    >>> f = forward_reduce(28, 3584, lambda s: s / 1e12)  # 1 B/ps, for the arithmetic
    >>> round(f(Fraction(256)) * 1e6, 2)  # 56 × 1,835,008 B
    102.76
    """

    def seconds(tokens: Fraction) -> float:
        if tokens <= 0:
            return 0.0
        return REDUCES_PER_LAYER * layers * all_reduce(float(tokens * hidden * ACTIVATION_BYTES))

    return seconds


def wave_reduce_seconds(
    c: int,
    *,
    forward: Callable[[Fraction], float],
    prompt_tokens: int,
    completion_tokens: int,
    steps: int,
    chunk_tokens: int = PREFILL_CHUNK_TOKENS,
) -> tuple[Fraction, Fraction]:
    """(prefill, decode) seconds of the tp all-reduces of one wave of ``c`` sequences:
    ``forward`` (:func:`forward_reduce`) once per prefill chunk — the wave's ``c · Tp`` prompt
    tokens in full chunks of ``chunk_tokens`` and one of the rest — and once per decode step
    over the ``c · Tc / T_max`` sequences live on average (:func:`model.rollout.wave_seconds`).

    Examples
    --------
    4 prompts of 5,000 tokens: chunks of 8,192, 8,192 and 3,616; 10 decode steps of 4 · 5/10
    = 2 live sequences each, with a clock of 1 s per token:

    >>> wave_reduce_seconds(4, forward=float, prompt_tokens=5000, completion_tokens=5, steps=10)
    (Fraction(20000, 1), Fraction(20, 1))
    """
    full, rest = divmod(c * prompt_tokens, chunk_tokens)
    prefill = full * Fraction(forward(Fraction(chunk_tokens))) + Fraction(forward(Fraction(rest)))
    decode = steps * Fraction(forward(Fraction(c * completion_tokens, steps)))
    return prefill, decode
