"""What Transformer Engine's context-parallel flavours hold beside a layer's saved tensors while
its attention runs, forward and backward apart (``transformer_engine/pytorch/attention/
dot_product_attention/context_parallel.py`` at d0067d0da), on one GPU, for
:func:`model.context_parallel.cp_phase_bytes`: the forward's buffers are live at the forward's
attention core, the backward's at the backward's attention-core step, beside the dQ, dK, dV and
dO that step counts (:func:`model.attention_core.attention_core_step`). ``o`` is this rank's
bytes of the attention output ``[b, s/cp, heads, d]`` (after the hybrid's all-to-all the same
bytes), ``tokens`` = S = b·s/cp; each attention pass also returns its FP32 log-sum-exp rows,
``4·S·a/tp`` bytes (:func:`lse_bytes`).

The head all-to-all (``AttnFuncWithCPAndQKVOA2A``) at its two largest moments: ``backward`` at
its all-to-all of dQ, dK, dV back holds dO as received and after its own all-to-all, dQ, dK,
dV, their send copies and receive buffers and one reordered copy, ``2·O + 3·(Q + KV) + Q``
beside the layer's output gradient; ``forward`` at O's all-to-all back the caller's Q, K, V
before the all-to-all, the send copy and the receive buffer, ``Q + KV + 2·O`` (Llama 3 8B,
s 81,920, cp 4, tp 2: 713 and 294 MB; :func:`a2a_phase_buffers`). The output kept twice is a
row, :data:`model.activation_rows.PRE_A2A_OUTPUT`."""

from __future__ import annotations

from typing import Any

from trainplan.model.specs import Architecture
from trainplan.model.xp import exact, maximum, where

__all__ = [
    "lse_bytes",
    "ring_forward_outputs",
    "ring_backward_buffers",
    "gather_forward_outputs",
    "gather_backward_buffers",
    "a2a_phase_buffers",
    "exchange_phases",
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


def gather_backward_buffers(r: Any, q: Any, kv: Any) -> Any:
    """Bytes the all-gather backward (``AttnFuncWithCPAndKVAllGather.backward``, BF16 attention,
    ``sbhd`` as Megatron-Core passes it) holds beyond the layer's saved tensors and one attention
    call's dQ, dK, dV (``Q + KV``, :func:`model.backward_working.backward_working_bytes`' core
    step), over r ranks, at its largest moment, the ``index_select`` that reorders dK after the
    loop. Live then: ``dq = torch.empty(ctx.q_shape)`` (Q, the core step's dQ); ``dk``, ``dv =
    torch.zeros`` of the whole gathered length (``r·KV``); ``k_ag``, ``v_ag``, the gathered K/V
    reordered by ``torch.index_select`` (``r·KV``; the gathered tensor each replaces is freed
    once the copy exists, and the two stay referenced until ``backward`` returns); the two
    steps' ``dq_per_step`` (Q) and ``dk_per_step``, ``dv_per_step``, kept in their lists until
    return, over K/V ranges of ``rank + 1`` and ``2·cp − rank`` half-chunks
    (``kv_seq_range_per_step``, causal): ``2·cp + 1`` halves on every rank, ``(r + ½)·KV``;
    and the reordered dK, ``r·KV/2``. In all ``2·Q + (3.5·r + ½)·KV``, of which the core step
    counts ``Q + KV``: ``Q + (3.5·r − ½)·KV``. (The reduce-scatter that follows holds
    ``2·Q + (3·r + 1)·KV``, no more; the ``q_part``, ``k_part``, ``out_part``, ``dout_part``
    slices are views in ``sbhd``.) Element-wise for arrays.

    >>> gather_backward_buffers(8, 64, 128)  # 64 + 27.5·128
    Fraction(3584, 1)
    """
    return q + (7 * exact(r) - 1) / 2 * kv


def a2a_phase_buffers(q: Any, kv: Any, o: Any) -> tuple[Any, Any]:
    """(forward, backward) bytes the head all-to-all (``AttnFuncWithCPAndQKVOA2A``) holds beside
    the layer's saved tensors (``kv``: the K + V that cross it, repeated where they are): the
    forward at the all-to-all of Q, K, V the send copy and the received tensor, ``2·(Q + KV)``,
    or at O's all-to-all back the caller's Q, K, V before the all-to-all, the send copy and the
    receive buffer, ``Q + KV + 2·O``, the larger; the backward at its all-to-all of dQ, dK, dV
    back (module docstring) ``2·O + 3·(Q + KV) + Q`` of which the core step counts dO, dQ, dK,
    dV (``O + Q + KV``): ``O + Q + 2·(Q + KV)``. Element-wise for arrays.

    >>> a2a_phase_buffers(32, 16, 32)
    (112, 160)
    """
    return maximum(2 * (q + kv), q + kv + 2 * o), o + q + 2 * (q + kv)


def exchange_phases(
    arch: Architecture, r: Any, u: Any, gather: Any, tp: Any, tokens: Any, qkvo: tuple[Any, ...],
    kv_rep: Any = 1, te_a2a: Any = 1,
) -> tuple[Any, Any]:  # fmt: skip
    """(forward, backward) bytes Transformer Engine's context-parallel flavour holds beside the
    layer's saved tensors while one layer's attention runs, for this rank's ``qkvo`` = (Q, K + V,
    O) bytes: the backward's beyond one attention call's dQ, dK, dV and dO (the working set's
    attention-core step). The K/V exchange over r > 1 ranks, ring (``gather`` false):
    forward ``r·KV`` (every chunk kept in ``p2p_comm_buffers``) + :func:`ring_forward_outputs`,
    backward :func:`ring_backward_buffers`; all-gather: forward the gathered K/V and its
    reordered copy, ``2·r·KV``, then the reordered one beside the outputs
    (:func:`gather_forward_outputs`), the larger; backward :func:`gather_backward_buffers`. The
    head all-to-all over u > 1 ranks: Transformer Engine's (``te_a2a`` 1) :func:`a2a_phase_buffers`
    (K/V × ``kv_rep``); DeepSpeed's ``DistributedAttention`` and verl's Ulysses (``te_a2a`` 0, their
    own all-to-alls, not audited here) the send copy and the received Q, K, V, ``2·(Q + KV)``, in
    each phase. The hybrid runs one after the other: the larger of the two in each phase.
    Element-wise for arrays.

    Examples
    --------
    MHA, 2 heads of 4, 4 tokens, β 2: Q = O = 64 B, K + V = 128 B, the log-sum-exp rows 32 B. A
    ring over 8 ranks: forward ``8·128 + 9·(64 + 32) = 1,888``, backward ``4·128 + 64 = 576``.

    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> [int(x) for x in exchange_phases(arch, 8, 1, False, 1, 4, (64, 128, 64))]
    [1888, 576]
    """
    q, kv, o = qkvo
    ring_fwd = r * kv + ring_forward_outputs(arch, r, tp, tokens, o)
    gather_fwd = maximum(2 * r * kv, r * kv + gather_forward_outputs(arch, tp, tokens, o))
    forward = where(gather, gather_fwd, ring_fwd)
    backward = where(gather, gather_backward_buffers(r, q, kv), ring_backward_buffers(q, kv))
    forward, backward = (where(r > 1, x, 0 * kv) for x in (forward, backward))
    staging = 2 * (q + kv * kv_rep)
    a2a = tuple(where(te_a2a, x, staging) for x in a2a_phase_buffers(q, kv * kv_rep, o))
    a2a = tuple(where(u > 1, x, 0 * kv) for x in a2a)
    return maximum(forward, a2a[0]), maximum(backward, a2a[1])
