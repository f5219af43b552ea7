"""Megatron-FSDP's gradient buckets at the size it allocates them: a unit's parameters grouped
by dtype, each group laid out in a buffer padded to a multiple of the shard degree × the
group's chunk size (Megatron-LM ``megatron/core/distributed/fsdp/src/megatron_fsdp/
param_and_grad_buffer.py``: ``_get_parameter_groups`` steps 1 and 3, ``build_data_parallel_
buffer_index``; at 92c8482e6d, NeMo 25.11, and d98e8a64dd).

* :func:`bucket_elements` — one bucket's elements, padded, for its parameters' local shapes;
* :func:`dense_layer_shapes` — a dense transformer layer's parameters as Megatron-Core's
  Transformer Engine layer holds them on one GPU (after tp), each marked linear or not;
* :func:`padded_layer_unit` — a dense layer's buckets, summed: what the reduce-scatter queue
  counts a unit at (:meth:`model.mechanism_record.Mechanism.reduce_queue_elements`).

Units: parameter elements on one GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from trainplan.model.specs import Architecture, AttentionKind, Norm

__all__ = ["bucket_elements", "dense_layer_shapes", "padded_layer_unit"]

Shape = tuple[int, ...]


def _row(shape: Shape) -> int:
    return math.prod(shape[1:])


def chunk_size(shapes: Sequence[Shape]) -> int:
    """The chunk size of a bucket of parameters of these shapes (``_get_parameter_groups``
    step 3): the parameters taken widest row first (a row = every dimension but the first),
    the first one's row; a later parameter whose row neither equals it nor divides it with
    the parameter a whole number of chunks, and that is not smaller than a chunk, widens it
    to the least common multiple of the two.

    >>> chunk_size([(57_344, 8_192), (8_192, 28_672), (8_192,)])  # lcm(28,672, 8,192)
    57344
    """
    ordered = sorted(shapes, key=_row, reverse=True)
    chunk = _row(ordered[0])
    for shape in ordered:
        row, n = _row(shape), math.prod(shape)
        if row == chunk or (chunk % row == 0 and n % chunk == 0) or n < chunk:
            continue
        chunk = math.lcm(chunk, row)
    return chunk


def bucket_elements(shapes: Sequence[Shape], shard: int) -> int:
    """Elements Megatron-FSDP allocates for one bucket of parameters of these local
    ``shapes``, sharded over ``shard`` ranks (``build_data_parallel_buffer_index`` under a
    sharding strategy other than ``no_shard``): in the widest-row-first order, each parameter
    starts on a chunk boundary (:func:`chunk_size`); one whose size is not whole chunks leaves
    the rest of its last chunk to the first later parameter whose remainder fits beside it and
    to parameters smaller than a chunk, which otherwise follow at the end; the total is
    padded to a multiple of ``shard`` × the chunk.

    Examples
    --------
    A Llama 3 70B layer in BF16 at tp 1 over 64 ranks: 855,654,400 parameters, chunk 57,344
    (fc2's row 28,672 and QKV's 8,192), padded to 234 × 64 × 57,344 = 858,783,744.

    >>> shapes = [(8192,), (10240, 8192), (8192, 8192), (8192,), (57344, 8192), (8192, 28672)]
    >>> sum(math.prod(s) for s in shapes), bucket_elements(shapes, 64)
    (855654400, 858783744)
    """
    ordered = sorted(shapes, key=_row, reverse=True)
    chunk = chunk_size(ordered)
    sizes = [math.prod(s) for s in ordered]
    small = [n for n in sizes if n < chunk]
    regular = [n for n in sizes if n >= chunk]
    end = 0
    while regular:
        n = regular.pop(0)
        if n % chunk == 0:
            end += n
            continue
        end += (n // chunk + 1) * chunk
        space = chunk - n % chunk
        partner = next((m for m in regular if m % chunk and n % chunk + m % chunk <= chunk), None)
        if partner is not None:  # its remainder shares the grid cell
            regular.remove(partner)
            space -= partner % chunk
            end += partner // chunk * chunk
        for m in list(small):
            if m <= space:
                small.remove(m)
                space -= m
    end += sum(small)
    unit = shard * chunk
    return -(-end // unit) * unit


def dense_layer_shapes(arch: Architecture, tp: int) -> tuple[tuple[Shape, bool], ...]:
    """A dense transformer layer's parameters on one GPU as Megatron-Core's Transformer Engine
    layer holds them, each with whether it is a linear layer's weight (an FP8 primary weight
    under ``fp8_param_gather``): ``linear_qkv`` (the input norm's weight, and its bias under
    LayerNorm, fused in; Q, K and V in one column-parallel weight, ``(a + 2g)·d ÷ tp × h``),
    ``q_layernorm``/``k_layernorm`` (``d`` each, with ``qk_norm``), ``linear_proj``
    (``h × a·d ÷ tp``), ``linear_fc1`` (the pre-MLP norm fused in; ``2f`` rows when gated, ÷ tp)
    and ``linear_fc2`` (``h × f ÷ tp``); biases where the architecture has them. Empty where
    the layer is not of that kind (MoE, MLA, Gemma's post-norms) or tp does not divide it.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> [s for s, _ in dense_layer_shapes(get_model("llama3-70b").model.arch, 2)]
    [(8192,), (5120, 8192), (8192, 4096), (8192,), (28672, 8192), (8192, 14336)]
    """
    h, a, d, g = arch.hidden_size, arch.num_attention_heads, arch.dim_per_head, arch.kv_heads
    f = arch.ffn_hidden_size
    fc1 = (2 if arch.mlp.gated else 1) * f
    if (
        arch.moe is not None
        or arch.attention is AttentionKind.MLA
        or arch.post_norms
        or any(x % tp for x in ((a + 2 * g) * d, a * d, fc1, f))
    ):
        return ()
    qkv, proj, up, down = (a + 2 * g) * d // tp, a * d // tp, fc1 // tp, f // tp
    norm: tuple[tuple[Shape, bool], ...] = (((h,), False),) * (
        1 if arch.norm is Norm.RMSNORM else 2
    )
    bias = arch.linear_bias
    out: list[tuple[Shape, bool]] = [*norm, ((qkv, h), True)]
    if bias or arch.qkv_bias:
        out.append(((qkv,), False))
    if arch.qk_norm:
        out += [((d,), False), ((d,), False)]
    out.append(((h, proj), True))
    if bias:
        out.append(((h,), False))
    out += [*norm, ((up, h), True)]
    if bias:
        out.append(((up,), False))
    out.append(((h, down), True))
    if bias:
        out.append(((h,), False))
    return tuple(out)


@lru_cache(maxsize=4096)
def padded_layer_unit(arch: Architecture, fp8_params: bool, tp: int, shard: int) -> int:
    """Elements Megatron-FSDP allocates for one dense layer's gradient buckets on one GPU: its
    parameters grouped by dtype (``_get_parameter_groups`` step 1: under ``fp8_param_gather``
    the linear weights are FP8 and apart from the norms and biases; else one group), each
    group one bucket of :func:`bucket_elements` over ``shard`` ranks. 0 where the layer's
    shapes are not known (:func:`dense_layer_shapes`): the caller counts its parameters.

    Examples
    --------
    Llama 3 70B over 64 ranks in FP8 primary weights: the four weights, 855,638,016 elements
    at chunk 57,344, pad to 234 × 3,670,016 = 858,783,744; the two norms, 16,384 at chunk 1,
    are a multiple of 64 already: 858,800,128.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("llama3-70b").model.arch
    >>> padded_layer_unit(arch, True, 1, 64), padded_layer_unit(arch, False, 1, 64)
    (858800128, 858783744)
    """
    shapes = dense_layer_shapes(arch, int(tp))
    if not shapes:
        return 0
    groups = [[s for s, linear in shapes if linear], [s for s, linear in shapes if not linear]]
    if not fp8_params:
        groups = [[s for s, _ in shapes]]
    return sum(bucket_elements(group, int(shard)) for group in groups if group)
