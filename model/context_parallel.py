"""Context-parallel flavours: how the cp ranks that share one sequence exchange attention's inputs.

Every flavour splits the sequence of s tokens into 2·cp chunks and gives rank i chunks i and
2·cp − 1 − i (the causal load balance of Megatron-Core / Transformer Engine; Llama 3 §3.3.2), so a
rank holds ``S = (s/cp)·b`` tokens of every tensor outside attention, and computes the same
attention FLOPs whatever the flavour. What differs is what crosses the cp group, and which
buffers the exchange holds while one layer's attention runs:

* ``ring`` — Ring Attention (Liu et al. 2023, arXiv 2310.01889); Megatron-Core
  ``--cp-comm-type p2p``, Transformer Engine ``AttnFuncWithCPAndKVP2P``. Each rank's K/V chunk
  passes around the ring: cp − 1 point-to-point hops per layer forward; backward sends K/V
  again and their gradients dK/dV (2×); a recomputed attention core sends it once more.
* ``all-gather`` — Llama 3's CP (Dubey et al. 2024, arXiv 2407.21783, §3.3.2); Megatron-Core
  ``all_gather``, TE ``AttnFuncWithCPAndKVAllGather``: K and V are all-gathered before
  attention, each rank computing its local query chunks against them. TE keeps only the local
  K/V for backward and *re-gathers* them there, then reduce-scatters dK/dV: the same bytes as
  the ring, ``(cp − 1)/cp`` of the full-sequence K/V per collective.
* ``ulysses`` — DeepSpeed-Ulysses (Jacobs et al. 2023, arXiv 2309.14509, §3); Megatron-Core
  ``a2a``, TE ``AttnFuncWithCPAndQKVOA2A``: an all-to-all turns Q, K, V from a sequence shard
  into the full sequence of a/cp heads, attention runs locally, and an all-to-all turns the
  output back (the paper's ``4·N·h/P`` per layer forward); TE's backward all-to-alls O and dO
  in, dQ, dK, dV out. TE asserts that cp divides the query and K/V heads on a tensor-parallel
  rank; under ``deepspeed`` K and V are repeated to every query head first (:func:`kv_repeat`).
* ``ulysses-kv-repeat`` — verl's Ulysses (``verl/models/transformers/monkey_patch.py``,
  ``_ulysses_flash_attention_forward``, ``apply_monkey_patch``): the same all-to-alls, each K/V
  head first repeated ``max(u // g, 1)`` times (``repeat_kv``), so u need only divide the query
  heads and be a multiple or a divisor of g. The repeated K/V cross the all-to-all and are what
  the attention core keeps (:func:`kv_repeat`). Under FSDP only (``fsdp2``, ``textbook``);
  Megatron-Core and DeepSpeed refuse it by name (:func:`model.cp_rules.check_cp_framework`).
* ``pytorch-allgather``, ``pytorch-alltoall`` — PyTorch's ``context_parallel``
  (``torch/distributed/tensor/experimental/_attention.py``), torchtitan's CP
  (``context_parallel_rotate_method`` ``allgather``, its default, or ``alltoall``): a ring
  attention of cp SDPA calls per pass whose K/V arrive by one all-gather or cp − 1 sends, with
  dK/dV passed on in FP32 in backward (:func:`torch_rotate_method`, :func:`templated_merge_bytes`,
  :func:`templated_dkv_sends`). The traffic table counts those sends too (:func:`cp_layer_bytes`);
  the buffers count them as the ring's.
* ``a2a+p2p`` — the hybrid (TE ``cp_comm_type = "a2a+p2p"``, Megatron-Core
  ``--hierarchical-context-parallel-sizes u r``): Ulysses over an inner group of u = ``cp_a2a``
  consecutive cp ranks, then a ring over the r = cp/u groups. After the inner all-to-all a
  rank holds (s/r)·b tokens of a/(tp·u) heads, so the ring's K/V chunk has the same bytes as
  the local one.

A flavour is reduced to two degrees (:func:`cp_degrees`): r, the ranks of the K/V exchange (ring
or all-gather), and u, the ranks of the head all-to-all — ring and all-gather (cp, 1), Ulysses
(1, cp), the hybrid (cp/u, u) — so one formula, element-wise over arrays, serves every flavour.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from trainplan.model.cp_outputs import exchange_phases
from trainplan.model.specs import Architecture, AttentionKind
from trainplan.model.xp import exact, maximum, where

__all__ = [
    "CpKind",
    "DEFAULT_SEARCHED_CP_KINDS",
    "cp_degrees",
    "cp_tensor_bytes",
    "attention_dims",
    "kv_repeat",
    "cp_layer_bytes",
    "cp_phase_bytes",
    "cp_transient_bytes",
    "cp_collective",
    "torch_rotate_method",
    "templated_merge_bytes",
    "templated_dkv_sends",
    "templated_kv_repeat",
    "templated_method_code",
    "templated_transient_bytes",
]


class CpKind(StrEnum):
    """How context parallelism exchanges attention's inputs: ``ring`` (point-to-point K/V,
    Megatron-Core ``p2p``), ``all-gather`` (``all_gather``, Llama 3), ``ulysses`` (all-to-all
    over heads, ``a2a``), ``ulysses-kv-repeat`` (verl's Ulysses, K/V heads repeated up to the
    sequence-parallel size), ``a2a+p2p`` (Ulysses inside, ring across), or PyTorch's
    ``context_parallel`` as torchtitan runs it with its ``allgather`` or ``alltoall`` rotate
    method (``pytorch-allgather``, ``pytorch-alltoall``: :func:`torch_rotate_method`). Megatron-Core's
    ``--cp-comm-type`` spellings (``p2p``, ``all_gather``, ``a2a``) and ``hybrid`` are read as
    aliases.

    Examples
    --------
    >>> CpKind("p2p"), CpKind("a2a"), CpKind("hybrid")
    (<CpKind.RING: 'ring'>, <CpKind.ULYSSES: 'ulysses'>, <CpKind.HYBRID: 'a2a+p2p'>)
    """

    RING = "ring"
    ALL_GATHER = "all-gather"
    ULYSSES = "ulysses"
    ULYSSES_KV_REPEAT = "ulysses-kv-repeat"
    HYBRID = "a2a+p2p"
    PYTORCH_ALLGATHER = "pytorch-allgather"
    PYTORCH_ALLTOALL = "pytorch-alltoall"

    @classmethod
    def _missing_(cls, value: object) -> CpKind | None:
        return _ALIASES.get(str(value).lower())


_ALIASES = {
    "p2p": CpKind.RING,
    "all_gather": CpKind.ALL_GATHER,
    "allgather": CpKind.ALL_GATHER,
    "a2a": CpKind.ULYSSES,
    "hybrid": CpKind.HYBRID,
}

DEFAULT_SEARCHED_CP_KINDS: tuple[CpKind, ...] = (CpKind.RING, CpKind.ALL_GATHER, CpKind.ULYSSES,
                                                 CpKind.PYTORCH_ALLGATHER, CpKind.PYTORCH_ALLTOALL)  # fmt: skip
"""The flavours the search tries at cp > 1 unless told otherwise (first preferred on ties), each
under the frameworks that run it (:func:`model.cp_rules.check_cp_framework`); the hybrid (an
inner degree per cp) and verl's ``ulysses-kv-repeat`` only when asked for."""


def cp_degrees(kind: CpKind, cp: int, cp_a2a: int | None = None) -> tuple[int, int]:
    """(r, u): the ranks of the K/V exchange (ring or all-gather) and of the head all-to-all.
    ``r · u = cp``; a degree of 1 means that part is off.

    Examples
    --------
    >>> cp_degrees(CpKind.RING, 8), cp_degrees(CpKind.ULYSSES, 8), cp_degrees(CpKind.HYBRID, 8, 2)
    ((8, 1), (1, 8), (4, 2))
    """
    if kind in (CpKind.ULYSSES, CpKind.ULYSSES_KV_REPEAT):
        return 1, cp
    if kind is CpKind.HYBRID:
        u = cp_a2a or 1
        return cp // u, u
    return cp, 1


def attention_dims(arch: Architecture) -> tuple[int, int, int]:
    """(Q, K + V, O) elements per token over all heads, before the tensor-parallel split:
    MHA/GQA ``(a·d, 2·g·d, a·d)``; MLA the expanded per-head keys and values
    ``(a·(nope + rope), a·(nope + rope) + a·v_head, a·v_head)`` (DeepSeek-V3 §2.1.1: the RoPE key
    is broadcast to every head before attention).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> gqa = Architecture(num_layers=1, hidden_size=64, num_attention_heads=8, num_kv_heads=2,
    ...                    ffn_hidden_size=128, vocab_size=16)
    >>> attention_dims(gqa)
    (64, 32, 64)
    """
    a = arch.num_attention_heads
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        qk = a * (arch.mla.qk_nope_head_dim + arch.mla.qk_rope_head_dim)
        v = a * arch.mla.v_head_dim
        return qk, qk + v, v
    d = arch.dim_per_head
    return a * d, 2 * arch.kv_heads * d, a * d


def kv_repeat(
    kind: CpKind, u: int, tp: int, arch: Architecture | None, framework: str | None = None
) -> int:
    """Times each K/V head is repeated before the head all-to-all: verl's ``max(u // g, 1)``,
    g the K/V heads on a tensor-parallel rank, under ``ulysses-kv-repeat``
    (``verl/models/transformers/monkey_patch.py``, ``_ulysses_flash_attention_forward``); a/g
    under ``framework`` deepspeed's Ulysses (u > 1) on a grouped-query model (Megatron-DeepSpeed
    6acc370a ``megatron/model/transformer.py`` ``ParallelAttention.forward``: ``repeat_kv``, then
    ``dist_attn``; its memory rows are :data:`model.activation_rows.REPEATED_KV`); 1 otherwise,
    for MLA (a heads already) and for a model without dimensions.

    Examples
    --------
    Llama 3 8B's 8 K/V heads over 16 Ulysses ranks, tp 1: each head twice; over 8: once.

    >>> from trainplan.model.specs import Architecture
    >>> llama = Architecture(num_layers=1, hidden_size=4096, num_attention_heads=32,
    ...                      num_kv_heads=8, ffn_hidden_size=128, vocab_size=16)
    >>> kv_repeat(CpKind.ULYSSES_KV_REPEAT, 16, 1, llama), kv_repeat(CpKind.ULYSSES, 8, 1, llama)
    (2, 1)
    >>> kv_repeat(CpKind.ULYSSES, 8, 1, llama, "deepspeed")  # 32 query heads ÷ 8 K/V heads
    4
    """
    if arch is None or arch.attention is AttentionKind.MLA:
        return 1
    if kind == CpKind.ULYSSES and framework == "deepspeed" and u > 1:
        return arch.num_attention_heads // arch.kv_heads
    if kind is not CpKind.ULYSSES_KV_REPEAT:
        return 1
    return max(u // max(arch.kv_heads // tp, 1), 1)


def templated_kv_repeat(arch: Architecture | None) -> int:
    """Times each K/V head is repeated in the tensors PyTorch's ring attention exchanges
    (``pytorch-allgather``, ``pytorch-alltoall``): a/g for grouped-query attention, 1 for MHA,
    MLA (its keys and values already have a heads) and a model without dimensions. torchtitan
    repeats the K/V heads before it calls SDPA (``torchtitan/models/llama/model.py``
    ``Attention.forward`` at 9dec370: ``keys = repeat_kv(xk, self.n_rep)``, then
    ``F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)``), and ``context_parallel``
    intercepts that SDPA call (``torch/distributed/tensor/experimental/_attention.py``
    ``_sdpa_handler``), so ``_templated_ring_attention`` all-gathers (or sends)
    ``torch.cat([key.flatten(), value.flatten()])`` of the repeated heads and its backward
    accumulates and sends dK/dV of the repeated heads: every K/V byte of the flavour is a/g
    times the grouped one. Unitless.

    Examples
    --------
    Llama 3 8B (32 query heads, 8 K/V heads): 4; on a tensor-parallel rank the ratio is the same.

    >>> llama = Architecture(num_layers=1, hidden_size=4096, num_attention_heads=32,
    ...                      num_kv_heads=8, ffn_hidden_size=128, vocab_size=16)
    >>> templated_kv_repeat(llama), templated_kv_repeat(None)
    (4, 1)
    """
    if arch is None or arch.attention is AttentionKind.MLA:
        return 1
    return max(arch.num_attention_heads // arch.kv_heads, 1)


def cp_tensor_bytes(arch: Architecture, tp: Any, tokens: Any, beta: int) -> tuple[Any, Any, Any]:
    """(Q, K + V, O) bytes of this rank's S tokens on one tensor-parallel rank: what the CP
    flavours exchange (:func:`cp_layer_bytes`; the roofline clock times the same tensors,
    :mod:`model.layer_time`)."""
    q, kv, o = attention_dims(arch)
    one = beta * exact(tokens) / tp
    return one * q, one * kv, one * o


def cp_layer_bytes(
    arch: Architecture,
    r: Any,
    u: Any,
    tp: Any,
    tokens: Any,
    beta: int,
    recomputed: Any,
    kv_rep: Any = 1,
    templated: Any = False,
) -> Any:
    """Bytes one GPU sends for one layer's attention, one micro-batch, forward and backward
    (and the recomputed forward when ``recomputed``), exact for ints and Fractions, element-wise
    for arrays. ``tokens`` = S = (s/cp)·b on this rank; Q, KV, O are this rank's bytes of those
    tensors (:func:`attention_dims` × β·S/tp).

    * K/V exchange over r ranks (ring or all-gather; hybrid: across the groups): ``(r − 1)·KV``
      forward (ring: r − 1 hops; all-gather: (r−1)/r of the r·KV gathered), twice in backward
      (K/V again and dK/dV: ring hops, or TE's re-gather and reduce-scatter), once more recomputed.
      ``templated`` (PyTorch's ``context_parallel``): K/V as the ring, dK/dV as
      :func:`templated_dkv_sends` (cp 8: 30·KV, not 21·KV), KV × :func:`templated_kv_repeat`.
    * Head all-to-all over u ranks (Ulysses; hybrid: inside the group), each moving (u−1)/u of
      its tensor: ``Q + KV + O`` forward (Q, K, V in, O out), ``2·O + Q + KV`` backward (TE
      re-distributes the saved O and dO, then dQ, dK, dV), the forward again when recomputed.
      ``kv_rep`` (:func:`kv_repeat`): verl's repeated K/V heads cross the all-to-all, KV × kv_rep.

    Examples
    --------
    Ring, cp 2, MHA with a·d = 8 (K + V: 16 elements per token), S = 4 tokens, tp 1, β 2:
    KV = 2·4·16 = 128 B; (2 − 1)·128 × 3 = 384. PyTorch's flavours: (2 − 1)·128 × 2 K/V and
    2 sends of 2·128 B FP32 dK/dV: 256 + 512 = 768.

    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> cp_layer_bytes(arch, 2, 1, 1, 4, 2, False)
    Fraction(384, 1)
    >>> cp_layer_bytes(arch, 2, 1, 1, 4, 2, False, templated=True)
    Fraction(768, 1)

    Ulysses, cp 2: Q = O = 64 B, KV = 128 B; ½·(256 + 320) = 288.

    >>> cp_layer_bytes(arch, 1, 2, 1, 4, 2, False)
    Fraction(288, 1)

    The same with each K/V head repeated twice: ½·(2·64 + 2·256 + 3·64) = 416.

    >>> cp_layer_bytes(arch, 1, 2, 1, 4, 2, False, 2)
    Fraction(416, 1)
    """
    q, kv, o = cp_tensor_bytes(arch, tp, tokens, beta)
    extra = where(recomputed, 1, 0)
    kv_sdpa = kv * templated_kv_repeat(arch)
    sends, dkv = templated_dkv_sends(kv_sdpa, r)
    ring = (r - 1) * kv * (3 + extra)
    exchange = where(templated, (r - 1) * kv_sdpa * (2 + extra) + sends * dkv, ring)
    kv_a2a = kv * kv_rep
    a2a = exact(u - 1) / u * ((q + kv_a2a + o) * (1 + extra) + q + kv_a2a + 2 * o)
    return exchange + a2a


def cp_phase_bytes(
    arch: Architecture, r: Any, u: Any, gather: Any, tp: Any, tokens: Any, beta: int,
    kv_rep: Any = 1, templated: Any = 0, te_a2a: Any = 1,
) -> tuple[Any, Any]:  # fmt: skip
    """(forward, backward) bytes the exchange holds beside the layer's saved tensors while one
    layer's attention runs, on one GPU: the forward's at the forward's attention core, the
    backward's at the backward's attention-core step beyond the dQ, dK, dV and dO that step
    counts (:func:`model.attention_core.attention_core_step`). Exact, element-wise for
    arrays (``gather``: an all-gather K/V exchange; ``templated``: :func:`templated_method_code`).
    As Transformer Engine allocates them (:func:`model.cp_outputs.exchange_phases`):

    * ring (r > 1): forward every K/V chunk held in ``p2p_comm_buffers`` (``r·KV``) beside the
      partial outputs until merged; backward the [K/V, dK/dV] double buffer and dQ, ``4·KV + Q``.
    * all-gather (r > 1): forward the gathered K/V and its reordered copy, ``2·r·KV``, or the
      reordered ``r·KV`` beside the outputs; backward the whole-length dK, dV, the reordered
      K/V, both steps' gradients and the reordered dK, ``Q + (3.5·r − ½)·KV``
      (:func:`model.cp_outputs.gather_backward_buffers`).
    * head all-to-all (u > 1): :func:`model.cp_outputs.a2a_phase_buffers` (KV × ``kv_rep``,
      :func:`kv_repeat`; ``te_a2a`` 0: DeepSpeed's, verl's); the hybrid: the larger, per phase.
    * PyTorch's ``context_parallel``: :func:`templated_transient_bytes` in both (an upper bound
      on its forward).

    Examples
    --------
    Ring, cp 8, KV = 128 B (O = 64 B, 2 heads, 4 tokens): forward ``8·128 + 9·(64 + 32)``,
    backward ``4·128 + 64``; all-gather: forward ``2·8·128``, backward ``64 + 27.5·128``.

    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> [int(x) for g in (False, True) for x in cp_phase_bytes(arch, 8, 1, g, 1, 4, 2)]
    [1888, 576, 2048, 3584]
    """
    qkvo = cp_tensor_bytes(arch, tp, tokens, beta)
    forward, backward = exchange_phases(arch, r, u, gather, tp, tokens, qkvo, kv_rep, te_a2a)
    torch_cp = templated_transient_bytes(arch, r, templated, tp, tokens, beta)
    return where(templated > 0, torch_cp, forward), where(templated > 0, torch_cp, backward)


def cp_transient_bytes(
    arch: Architecture, r: Any, u: Any, gather: Any, tp: Any, tokens: Any, beta: int,
    kv_rep: Any = 1, templated: Any = 0, te_a2a: Any = 1,
) -> Any:  # fmt: skip
    """The most the exchange holds at once while one layer's attention runs: the larger of
    :func:`cp_phase_bytes`' forward and backward buffers (the peak places each in its own
    phase, :mod:`model.terms.cp_phases`). Element-wise for arrays.

    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> cp_transient_bytes(arch, 8, 1, False, 1, 4, 2), cp_transient_bytes(arch, 8, 1, True, 1, 4, 2)
    (Fraction(1888, 1), Fraction(3584, 1))
    """
    return maximum(*cp_phase_bytes(arch, r, u, gather, tp, tokens, beta, kv_rep, templated, te_a2a))


def templated_method_code(kind: CpKind) -> int:
    """:func:`torch_rotate_method` as a number the element-wise formulas read: 1 ``allgather``,
    2 ``alltoall``, 0 a flavour that is not PyTorch's ``context_parallel``.

    >>> templated_method_code(CpKind.PYTORCH_ALLGATHER), templated_method_code(CpKind.RING)
    (1, 0)
    """
    return {"allgather": 1, "alltoall": 2}.get(torch_rotate_method(kind), 0)


def templated_transient_bytes(
    arch: Architecture, r: Any, method: Any, tp: Any, tokens: Any, beta: int
) -> Any:
    """Bytes PyTorch's ring attention holds beside the layer's activations while one layer's
    attention runs backward, on one GPU, one micro-batch (``S = tokens``), over r cp ranks;
    ``method`` as :func:`templated_method_code` (0 or r = 1: nothing). Exact for ints and
    Fractions, element-wise for arrays.

    Read from ``torch/distributed/tensor/experimental/_attention.py``
    ``_templated_ring_attention_backward`` (the loop over the r SDPA backward calls), at a step
    ``0 < i < r − 1`` when ``dkv_rotater.exchange_buffers`` has allocated its receive buffer.
    ``KV`` is this rank's BF16 K + V of the heads SDPA sees (:func:`templated_kv_repeat`: the
    grouped bytes times a/g, torchtitan repeats them before SDPA), ``Q`` its BF16 query:

    * the K/V exchange: ``_AllGatherRotater`` keeps the all-gathered K/V of all r ranks for the
      whole loop (``_aggregated_buffer``, ``r·KV``) and the loop still concatenates the current
      K and V every step (``next_kv = torch.cat``, ``KV``): ``(r + 1)·KV``;
      ``_AllToAllRotater`` holds the received chunk, the concatenated one and the
      ``permute_tensor`` output of the next: ``3·KV``;
    * the FP32 accumulators (``accum_dtype = torch.float32`` under ``convert_to_f32``, the
      default): dQ ``2·Q`` (``grad_query``), dK and dV after ``_partial_update`` (``2·KV``),
      their ``torch.cat`` for the next rank (``2·KV``) and the ``dkv_rotater`` (an
      ``_AllToAllRotater``) receive buffer for the previous rank's (``2·KV``): ``2·Q + 6·KV``.

    The BF16 gradients each SDPA backward call returns are the working set's attention-core step
    (:func:`model.attention_core.attention_core_step`); the log-sum-exp rows are not counted.
    The forward (``_templated_ring_attention``: the gathered K/V, the concatenated copy and
    ``_SDPAMerger``'s FP32 output and its temporaries, about ``(r + 1)·KV + 6·O``) holds less.

    Examples
    --------
    Llama 3.1 405B on a tensor-parallel rank of 8, S = 32,768 tokens, BF16: Q = 2·32,768·128·16
    = 134,217,728 B, K + V repeated to the 16 query heads = 268,435,456 B. All-gather over cp 8:
    (8 + 1 + 6)·KV + 2·Q = 15·268,435,456 + 268,435,456 = 4,294,967,296 B (4 GiB); cp 2: 10·KV
    = 2,684,354,560 B.

    >>> llama = Architecture(num_layers=126, hidden_size=16384, num_attention_heads=128,
    ...                      num_kv_heads=8, ffn_hidden_size=53248, vocab_size=128256)
    >>> templated_transient_bytes(llama, 8, 1, 8, 32768, 2)
    Fraction(4294967296, 1)
    >>> templated_transient_bytes(llama, 2, 1, 8, 32768, 2), templated_transient_bytes(llama, 8, 2, 8, 32768, 2)
    (Fraction(2684354560, 1), Fraction(2684354560, 1))
    >>> templated_transient_bytes(llama, 8, 0, 8, 32768, 2)
    Fraction(0, 1)
    """
    q, kv, _ = cp_tensor_bytes(arch, tp, tokens, beta)
    kv_sdpa = kv * templated_kv_repeat(arch)
    exchange = where(method == 1, (r + 1) * kv_sdpa, 3 * kv_sdpa)
    total = exchange + 6 * kv_sdpa + 2 * q
    return where((method > 0) & (r > 1), total, 0 * kv_sdpa)


def cp_collective(kind: CpKind, cp: int, cp_a2a: int | None = None) -> str:
    """The collectives of a flavour, named for the traffic table.

    Examples
    --------
    >>> cp_collective(CpKind.HYBRID, 8, 2)
    'all-to-all of Q, K, V, O over 2 ranks + ring send/recv of K, V over 4 (a2a+p2p)'
    """
    r, u = cp_degrees(kind, cp, cp_a2a)
    if kind is CpKind.ALL_GATHER:
        return "all-gather of K, V + reduce-scatter of dK, dV (Llama 3 all-gather CP)"
    if kind is CpKind.ULYSSES:
        return "all-to-all of Q, K, V, O over heads (DeepSpeed-Ulysses)"
    if kind is CpKind.ULYSSES_KV_REPEAT:
        return "all-to-all of Q, K, V, O over heads, K/V heads repeated (verl's Ulysses)"
    if kind is CpKind.HYBRID:
        return (
            f"all-to-all of Q, K, V, O over {u} ranks + ring send/recv of K, V over {r} (a2a+p2p)"
        )
    if kind is CpKind.PYTORCH_ALLGATHER:
        return "all-gather of K, V + send/recv of FP32 dK, dV (PyTorch context_parallel)"
    if kind is CpKind.PYTORCH_ALLTOALL:
        return "send/recv of K, V + send/recv of FP32 dK, dV (PyTorch context_parallel)"
    return "ring send/recv of K, V (ring attention)"


def torch_rotate_method(kind: CpKind) -> str:
    """PyTorch's ``context_parallel`` rotate method a flavour runs (``allgather`` or
    ``alltoall``), "" for every other flavour: torchtitan's CP
    (``torch/distributed/tensor/experimental/_attention.py``, ``_templated_ring_attention`` and
    ``_templated_ring_attention_backward``; ``_AllGatherRotater``, ``_AllToAllRotater``). The
    core runs as cp SDPA calls per pass merged in FP32 (:func:`templated_merge_bytes`), the K/V
    exchange overlaps the calls, and the backward passes dK, dV on in FP32
    (:func:`model.layer_time.layer_time`).

    Examples
    --------
    >>> torch_rotate_method(CpKind.PYTORCH_ALLGATHER), torch_rotate_method(CpKind.ALL_GATHER)
    ('allgather', '')
    """
    return {CpKind.PYTORCH_ALLGATHER: "allgather", CpKind.PYTORCH_ALLTOALL: "alltoall"}.get(
        CpKind(kind), ""
    )


def templated_merge_bytes(q: float, kv: float, o: float, r: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes of one pass of PyTorch's ring attention outside the SDPA
    kernels, on the busiest cp rank (the last, whose every step after the first uses the whole
    local query), for this rank's BF16 bytes ``q`` (Q), ``kv`` (K + V) and ``o`` (O) over
    r > 1 ranks (``torch/distributed/tensor/experimental/_attention.py``; one elementwise
    kernel per line, FP32 = twice the BF16 bytes):

    * forward (``_templated_ring_attention``, ``_SDPAMerger`` with ``convert_to_f32``): the
      first output cast to FP32 (reads o, writes 2·o: 3·o); each of the r − 1 further steps
      casts its block output (3·o), ``out − block_out`` (6·o), the product with
      ``sigmoid(block_lse − lse)`` (4·o) and the subtraction (6·o): 19·o; the merged output
      cast back (3·o); ``torch.cat`` of K and V before each of the r − 1 exchanges (2·kv):
      ``(19·r − 13)·o + 2·(r − 1)·kv``.
    * backward (``_templated_ring_attention_backward``): FP32 zeros for dQ, dK, dV
      (2·q + 2·kv); per step dQ accumulated in FP32 (5·q: reads 2·q + q, writes 2·q), dK/dV
      accumulated (5·kv at the first step, ``_partial_update``'s add and ``torch.cat`` at the
      others, 6.5·kv) and concatenated in FP32 for the next rank (4·kv), K/V concatenated for
      the exchange (2·kv, r − 1 times); the final casts to BF16 (3·q + 3·kv):
      ``(5·r + 5)·q + (12.5·r + 1.5)·kv``.

    The log-sum-exp rows (one float per query and head) are not counted.

    Examples
    --------
    r = 2, q = o = 4, kv = 2: forward 25·4 + 2·2 = 104; backward 15·4 + 26.5·2 = 113.

    >>> templated_merge_bytes(4, 2, 4, 2)
    (104, 113.0)
    """
    forward = (19 * r - 13) * o + 2 * (r - 1) * kv
    backward = (5 * r + 5) * q + (12.5 * r + 1.5) * kv
    return forward, backward


def templated_dkv_sends(kv: Any, r: Any) -> tuple[Any, Any]:
    """(sends, bytes of each) of the dK/dV that PyTorch's ring-attention backward passes to the
    next rank per layer and micro-batch, for this rank's BF16 K + V bytes ``kv`` over r ranks
    (``torch/distributed/tensor/experimental/_attention.py``,
    ``_templated_ring_attention_backward``): the gradients accumulate in FP32
    (``accum_dtype = torch.float32`` under ``_cp_options.convert_to_f32``, the default) and
    ``dkv_rotater.exchange_buffers`` sends ``torch.cat`` of dK and dV after every one of the r
    SDPA calls, the last received after the loop: r sends of 2·KV. The step time waits for
    them (:func:`model.layer_time.layer_time`) and the traffic table counts them
    (:func:`cp_layer_bytes`). Exact for ints and Fractions, element-wise for arrays.

    >>> templated_dkv_sends(128, 4)
    (4, 256)
    """
    return r, 2 * kv
