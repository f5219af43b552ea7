"""The largest parameter tensor a GPU of each pipeline stage holds: what a buffer sized by the
largest parameter holds (DeepSpeed ZeRO-1/2's gradient staging buffer under optimizer offload,
:attr:`model.mechanisms.Mechanism.offload_staging_bytes`).

* :func:`layer_largest_tensor` — a layer's, as Megatron's layers hold their weights;
* :func:`stage_largest_tensors` — per stage, with the embedding and the output layer (exact,
  cached on the split structure, :class:`model.terms.split_key.SplitKey`);
* :func:`largest_tensor_per_gpu` — what the terms read at the rank ``f.stage``.

Units: parameter elements on one GPU (after tp; a routed expert's after etp).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.optimizers import layer_matrices
from trainplan.model.params import shares_embedding_with_last_stage
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.split_key import CACHE, SplitKey, read_split

__all__ = ["layer_largest_tensor", "stage_largest_tensors", "largest_tensor_per_gpu"]


def layer_largest_tensor(arch: Any, index: int, tp: int, etp: int) -> Fraction:
    """Elements on one GPU of layer ``index``'s largest parameter tensor, as Megatron's layers
    hold them (Megatron-Core, and Megatron-DeepSpeed's ``ParallelAttention`` /
    ``ParallelMLP``): Q, K and V fused in one column-parallel weight (``linear_qkv``,
    ``(a + 2g)·d × h``; MLA's projections apart), SwiGLU's gate and up fused (fc1, ``2f × h``),
    each routed expert's weights a tensor of their own (``TEGroupedMLP``'s ``weight{i}``);
    column- and row-parallel weights ÷ tp (a routed expert's ÷ etp), the router and MLA's
    down-projections whole (:func:`model.optimizers.layer_matrices`). Biases and norms are
    smaller than the weight they belong to.

    Examples
    --------
    Llama 3 70B (h 8,192, 64 heads of 128, 8 KV heads, f 28,672) at tp 4: fc1,
    2·28,672·8,192 ÷ 4 = 117,440,512 elements (QKV is (64 + 16)·128·8,192 ÷ 4 = 20,971,520).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> layer_largest_tensor(get_model("llama3-70b").model.arch, 0, 4, 1)
    Fraction(117440512, 1)
    """
    best = Fraction(0)
    for mat in layer_matrices(arch, index):
        rows, cols = mat.local(etp if mat.expert else tp)
        best = max(best, Fraction(rows * cols))
    if arch.mla is None:  # Megatron fuses Q, K and V into one weight
        qkv = (arch.num_attention_heads + 2 * arch.kv_heads) * arch.dim_per_head
        best = max(best, Fraction(qkv * arch.hidden_size, tp))
    return best


@lru_cache(maxsize=CACHE)
def stage_largest_tensors(key: SplitKey) -> tuple[Fraction, ...]:
    """Per stage, the elements on one GPU of the largest parameter tensor it holds: the largest
    of its layers' (:func:`layer_largest_tensor`), the input embedding's ``V·h ÷ tp`` (first
    stage, vocabulary-parallel, ``V`` padded) and the output layer's (or the tied embedding's
    copy) on :func:`model.split.output_rank`. What a buffer sized by the largest parameter holds
    (:attr:`model.mechanisms.Mechanism.offload_staging_bytes`). 0 for a size-only model (its
    tensors are unknown).

    Examples
    --------
    >>> from trainplan.scenarios.catalogue import get_model
    >>> m = get_model("llama3-8b").model
    >>> stage_largest_tensors(SplitKey(m, 1, 1, 1, 1, False, 1, True, None, 1))  # 128,256 × 4,096
    (Fraction(525336576, 1),)
    """
    arch, tp = key.model.arch, key.tp
    if arch is None:
        return (Fraction(0),) * key.pp
    table = Fraction(key.vocab() * arch.hidden_size, tp)
    last = key.output_rank()
    tied_copy = key.pp > 1 and shares_embedding_with_last_stage(arch)
    out = []
    for i, layers in enumerate(key.layers()):
        kinds = {arch.is_moe_layer(j): j for j in layers}  # one layer of each kind is enough
        best = max((layer_largest_tensor(arch, j, tp, key.etp) for j in kinds.values()), default=0)
        head = not arch.tie_embeddings and not arch.value_head  # a value head is [h → 1]
        if i == 0 or (i == last and (head or tied_copy)):
            best = max(best, table)
        out.append(Fraction(best))
    return tuple(out)


def largest_tensor_per_gpu(c: Context, f: Fields) -> Any:
    """:func:`stage_largest_tensors` of stage ``f.stage``: elements on one GPU of its largest
    parameter tensor."""
    return read_split(c, f, stage_largest_tensors)
