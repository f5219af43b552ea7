"""The padding of Megatron-Core's layer-wise distributed optimizer's parameter and gradient
buffers: its shard-aligned buckets (:func:`model.layer_wise.layer_wise_padding`) hold more
elements than the parameters on every data-parallel rank; :func:`model.terms.state.model_state_term`
counts them at the weight and gradient bytes per element.

Units: elements on one GPU. Exact for one layout; element-wise over the search's columns.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainplan.model.layer_wise import layer_wise_bucket_size, layer_wise_padding, runs_layer_wise
from trainplan.model.model_spec import ModelSpec
from trainplan.model.optimizers import OptimizerKind, layer_matrices
from trainplan.model.split import stage_chunks
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.split_key import CACHE, SPLIT_FIELDS, SplitKey

__all__ = ["stage_layer_wise_padding", "layer_wise_padding_term"]

_FRAMEWORK = SPLIT_FIELDS.index("framework")


@lru_cache(maxsize=CACHE)
def stage_layer_wise_padding(
    key: SplitKey, shard: int, expert_shard: int
) -> tuple[tuple[int, int], ...]:
    """Per stage, the (dense, expert) elements by which Megatron-Core's layer-wise optimizer's
    shard-aligned buckets pad one GPU's parameter and gradient buffers beyond its matrices
    (:func:`model.layer_wise.layer_wise_padding` of each model chunk; the dense buffer, the
    chunk's layers' matrices, packed over the ``shard`` data-parallel ranks; the expert buffer,
    the chunk's local experts, over the ``expert_shard`` ranks; each model chunk its own
    buffers, ``dist_utils.py`` ``wrap_model_chunks_with_ddp``). The first chunk of the first
    stage is bucketed. The embedding, output layer (and a tied embedding's copy), norms and
    biases are in the distributed optimizer's byte-level buffer instead
    (``layer_wise_optimizer.py`` ``tag_params_for_buffer_routing``), whose padding, each
    bucket's end to a multiple of ``lcm(dp, 128)`` and each parameter's start to 64 elements
    (``distrib_optimizer.py`` ``_compute_per_buffer_param_layout``), is left out. Zeros for a
    size-only model."""
    arch = key.model.arch
    if arch is None:
        return ((0, 0),) * key.pp
    bucket = layer_wise_bucket_size(shard)
    out = []
    for i in range(key.pp):
        chunks = stage_chunks(arch, key.pp, key.v, key.uneven, i, key.sizes, key.schedule)
        dense = expert = 0
        for k, layers in enumerate(chunks):
            mats = [mat for j in layers for mat in layer_matrices(arch, j, fused_qkv=True)]
            d = [mat.local(key.tp) for mat in mats if not mat.expert for _ in range(mat.count)]
            e = [
                mat.local(key.etp) for mat in mats if mat.expert for _ in range(mat.count // key.ep)
            ]
            first = bucket if i == 0 and k == 0 else None
            dense += layer_wise_padding(d, shard, first)
            if expert_shard > 1:
                expert += layer_wise_padding(e, expert_shard, first)
        out.append((dense, expert))
    return tuple(out)


def _stage_padding(
    model: ModelSpec, given: int | None, adam_bytes: int, optimizer: Any, *fields: Any
) -> tuple[tuple[int, int], ...]:
    *split, shard, expert_shard, zero = fields
    key = SplitKey.of(model, given, *split)
    kind, framework = OptimizerKind(optimizer), str(split[_FRAMEWORK])
    if not runs_layer_wise(kind, adam_bytes, framework, int(shard), int(zero)):
        return ((0, 0),) * key.pp
    return stage_layer_wise_padding(key, int(shard), int(expert_shard))


def layer_wise_padding_term(c: Context, f: Fields) -> Any:
    """Elements of padding in one GPU's parameter and gradient buffers of stage ``f.stage``
    (:func:`stage_layer_wise_padding`, dense plus expert) where the layout runs the layer-wise
    distributed optimizer (:func:`model.layer_wise.runs_layer_wise`); 0 otherwise."""
    args = (c.model, c.vocab_multiple, c.training.optimizer_bytes)
    names = ("optimizer", *SPLIT_FIELDS, "shard_degree", "expert_shard_degree", "zero_stage")
    dense, expert = f.per_stage(_stage_padding, args, *names)
    return dense + expert
