"""How many layers of each span group a pipeline stage holds (:func:`model.core_spans.group_counts`
of its layers, :func:`model.split.stage_layers`), and of them how many it recomputes whole: what
the roofline term of a stage (:func:`model.terms.roofline.stage_parts_term`) multiplies one
layer of each group by, so each stage's attention core is the sum over its own layers of each
one's span time. Which layers a stage holds is the split's: Megatron-Core
(``megatron/core/transformer/transformer_layer.py`` ``get_transformer_layer_offset``, and the
explicit ``--pipeline-model-parallel-layout``), torchtitan
(``torchtitan/distributed/pipeline_parallel.py`` ``generate_llm_fqn_per_model_part``), DeepSpeed
(``PipelineModule._partition_layers``), each modelled in :mod:`model.split`.

Cached pure functions of the architecture and the layout's :data:`model.terms.activation_fields.
LAYER_FIELDS`; per stage a tuple in :func:`model.core_spans.span_groups`' order.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainplan.model.core_spans import group_counts
from trainplan.model.recompute_counts import recomputed_in_chunks
from trainplan.model.specs import Architecture
from trainplan.model.split import stage_chunks, stage_layers

__all__ = ["stage_group_counts", "recomputed_group_counts"]

CACHE = 4096


@lru_cache(maxsize=CACHE)
def stage_group_counts(
    arch: Architecture,
    pp: int,
    v: int,
    uneven: Any,
    sizes: tuple[int, ...] | None,
    schedule: Any = None,
) -> tuple[tuple[int, ...], ...]:
    """Per stage, its layers in each span group (:func:`model.core_spans.group_counts` of
    :func:`model.split.stage_layers`; MTP blocks on the stage of the last chunk).

    Examples
    --------
    Gemma 3 27B (62 layers, globals 5, 11, …, 59) at pp 4 under Megatron's split (15, 16, 16,
    15 layers): 2, 3, 2 and 3 global layers.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> stage_group_counts(get_model("gemma3-27b").model.arch, 4, 1, True, None)
    ((13, 2), (13, 3), (14, 2), (12, 3))
    """
    return tuple(
        group_counts(arch, layers) for layers in stage_layers(arch, pp, v, uneven, sizes, schedule)
    )


@lru_cache(maxsize=CACHE)
def recomputed_group_counts(
    arch: Architecture,
    pp: int,
    v: int,
    uneven: Any,
    sizes: tuple[int, ...] | None,
    schedule: Any,
    counts: tuple[int, ...] | None,
) -> tuple[tuple[int, ...], ...]:
    """Per stage, its fully recomputed layers in each span group: by ``Layout.recompute_layers``
    (``counts``) the first k of each of its model chunks (:func:`model.recompute_counts.recomputed_in_chunks`);
    zeros without counts."""
    out = []
    for stage in range(pp):
        k = 0 if counts is None else counts[stage]
        chunks = stage_chunks(arch, pp, v, uneven, stage, sizes, schedule)
        out.append(group_counts(arch, recomputed_in_chunks(chunks, k, arch.num_layers)))
    return tuple(out)
