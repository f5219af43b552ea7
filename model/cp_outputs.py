"""The partial attention outputs Transformer Engine's context-parallel forwards hold until they
are merged, and the ring backward's buffers
(``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`` at
d0067d0da), on one GPU, for :func:`model.context_parallel.cp_transient_bytes`. ``o`` is this
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
from trainplan.model.xp import exact, maximum

__all__ = [
    "lse_bytes",
    "ring_forward_outputs",
    "ring_backward_buffers",
    "ring_buffers",
    "gather_forward_outputs",
]


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


def ring_backward_buffers(q: Any, kv: Any) -> Any:
    """Bytes the ring's backward (``AttnFuncWithCPAndKVP2P.backward``, BF16 attention) holds
    beside the layer's saved tensors and one attention call's dQ, dK, dV while its r steps run,
    for this rank's ``q`` (Q) and ``kv`` (K + V) bytes: ``p2p_comm_buffers``, two
    ``torch.empty((2, *kv.shape))`` each holding a K/V chunk and its dK/dV (the one sent, the
    one received: ``4·KV``; the last step's dK/dV are returned from it), and ``dq_buffer =
    torch.empty_like(q)``, into which every step's ``dq_`` is copied or added (``Q``; returned
    as dQ). Each step's ``dq_``, ``dk_``, ``dv_`` (at most Q + KV, the diagonal step's, while
    ``dq_buffer`` and the ring buffers are live) are the attention core's gradients that
    :func:`model.backward_working.backward_working_bytes` counts for one call. Not modelled:
    the FP8 path (``ctx.fp8``, FP8 attention: ``dq_buffer`` of ``cp`` FP8 copies or FP32, the
    FP32 ``dkv_buffer``), which Megatron-Core's default recipe leaves off. ``4·KV + Q``;
    element-wise for arrays.

    >>> ring_backward_buffers(64, 128)  # 4·128 + 64
    576
    """
    return 4 * kv + q


def ring_buffers(arch: Architecture, r: Any, tp: Any, tokens: Any, q: Any, kv: Any, o: Any) -> Any:
    """Bytes the ring holds while one layer's attention runs, the larger of its forward's (every
    K/V chunk held, ``r·KV``, beside :func:`ring_forward_outputs`) and its backward's
    (:func:`ring_backward_buffers`), for this rank's ``q``, ``kv``, ``o`` bytes of ``tokens``
    queries over r ranks. Element-wise for arrays.

    Examples
    --------
    MHA, 2 heads of 4, 4 tokens, β 2: Q = O = 64 B, K + V = 128 B, the log-sum-exp rows 32 B. Over
    8 ranks the forward, ``8·128 + 9·(64 + 32) = 1,888``; over 2 the backward, ``4·128 + 64 =
    576`` above the forward's ``2·128 + 3·96 = 544``.

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> [int(ring_buffers(arch, r, 1, 4, 64, 128, 64)) for r in (8, 2)]
    [1888, 576]
    """
    forward = r * kv + ring_forward_outputs(arch, r, tp, tokens, o)
    return maximum(forward, ring_backward_buffers(q, kv))


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
