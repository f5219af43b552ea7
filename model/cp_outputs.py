"""The partial attention outputs Transformer Engine's context-parallel forwards hold until they
are merged (``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``
at d0067d0da), on one GPU, for :func:`model.context_parallel.cp_transient_bytes`. ``o`` is this
rank's bytes of the attention output ``[b, s/cp, heads, d]`` (after the hybrid's all-to-all the
same bytes), ``tokens`` = S = b·s/cp; each attention pass also returns its FP32 log-sum-exp rows,
``4·S·a/tp`` bytes (:func:`lse_bytes`).

The head all-to-all (``AttnFuncWithCPAndQKVOA2A``) holds more than the ``2·(Q + KV)`` of
:func:`model.context_parallel.cp_transient_bytes` at two moments, both covered by those buffers
plus the layer's backward working set (:func:`model.backward_working.backward_working_bytes`),
which the peak counts beside them, before the rows released by then are credited: ``backward``
at its all-to-all of dQ, dK, dV back holds dO as received and after its own all-to-all, dQ, dK,
dV, their send copies and receive buffers and one reordered copy, ``2·O + 3·(Q + KV) + Q``
beside the layer's output gradient; ``forward`` at O's all-to-all back the caller's Q, K, V
before the all-to-all, the send copy and the receive buffer, ``Q + KV + 2·O`` (Llama 3 8B,
s 81,920, cp 4, tp 2: 713 and 294 MB against 252 + 671 MB). The output kept twice is a row,
:data:`model.activation_rows.PRE_A2A_OUTPUT`."""

from __future__ import annotations

from typing import Any

from trainplan.model.specs import Architecture
from trainplan.model.xp import exact

__all__ = ["lse_bytes", "ring_forward_outputs", "gather_forward_outputs"]


def lse_bytes(arch: Architecture, tp: Any, tokens: Any) -> Any:
    """FP32 log-sum-exp rows of one attention pass over ``tokens`` queries: ``4·S·a/tp``.

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> lse_bytes(arch, 1, 4)
    Fraction(32, 1)
    """
    return 4 * exact(tokens) * arch.num_attention_heads / tp


def ring_forward_outputs(arch: Architecture, r: Any, tp: Any, tokens: Any, o: Any) -> Any:
    """Bytes the ring forward (``AttnFuncWithCPAndKVP2P.forward``) holds in partial results
    when it merges them, on the last rank of the ring (the busiest): its ``r`` steps' outputs
    ``out_per_step`` (``o`` bytes each: on rank ``cp − 1`` of a causal ring every step sees the
    whole local query; other ranks' later steps half of it), kept in the list until ``forward``
    returns, the merged ``out`` the first correction allocates
    (``flash_attn_fwd_out_correction_init``, BF16; the later corrections add into it, fused),
    and the log-sum-exp rows of each step and their merged clone (``softmax_lse``):
    ``(r + 1)·(O + 4·S·a/tp)``. Element-wise for arrays.

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> ring_forward_outputs(arch, 8, 1, 4, 64)  # 9·(64 + 4·4·2)
    Fraction(864, 1)
    """
    return (r + 1) * (o + lse_bytes(arch, tp, tokens))


def gather_forward_outputs(arch: Architecture, tp: Any, tokens: Any, o: Any) -> Any:
    """Bytes the all-gather forward (``AttnFuncWithCPAndKVAllGather.forward``) holds in outputs
    beside its reordered K/V: ``out_f16`` and ``out`` (``torch.empty``, ``torch.zeros``: ``O``
    each), the two half-length ``out_per_step`` (``O``) and their log-sum-exp rows:
    ``3·O + 4·S·a/tp``. Element-wise for arrays.

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> gather_forward_outputs(arch, 1, 4, 64)  # 3·64 + 32
    Fraction(224, 1)
    """
    return 3 * o + lse_bytes(arch, tp, tokens)
