"""Which framework runs per-stage recomputation counts with which recompute mode.

A layout's per-stage counts (``Layout.recompute_layers``: the first k layers of each stage, or
of each model chunk, fully recomputed) are Megatron-LM's block method: ``--recompute-granularity
full --recompute-method block --recompute-num-layers k``. Megatron-Core (the ``megatron``
profile, Megatron-FSDP included: both build one ``TransformerConfig``) runs one
``recompute_granularity`` per run, so the layers past the count keep every activation; it runs
none of the mixes below (NVIDIA/Megatron-LM d98e8a64dd,
``megatron/core/transformer/transformer_config.py`` ``TransformerConfig.__post_init__``):

* counts with ``recompute`` selective on the other layers: granularity ``selective`` with
  ``recompute_num_layers`` set raises ``ValueError`` ("recompute_num_layers must be None",
  l. 1927–1932), and granularity ``full`` takes no ``recompute_modules``
  (``transformer_block.py`` checkpoints layers only under ``full``; ``transformer_layer.py``
  reads the modules only under ``selective``);
* counts under ``overlap_moe_expert_parallel_comm``: asserted against
  (``recompute_granularity != 'full'``, ``recompute_method is None``, ``recompute_num_layers
  is None``, l. 3020–3029).

torchtitan (the ``fsdp2`` profile) runs no count of a stage's layers with any recompute mode:
at b5bcd76c6 ``torchtitan/distributed/activation_checkpoint.py``
``ActivationCheckpointing.apply`` wraps every transformer block with one policy (full, per-op
selective or the compiler's memory budget; no layer-level option since 114151ad4), and before
it the one layer-level option, ``selective_ac_option = "N"``, wrapped every N-th block of the
model part (``_apply_ac_to_transformer_block``, 6b11290c1): one N for every stage, never the
first k of each.

The legality rule ``recompute_counts`` (:func:`check_recompute_counts`, which ``evaluate``
runs) refuses them, and the per-stage search reads the same :func:`recompute_counts_refusal`
to keep every count at 0 on such a base (:func:`optimizer.stage_rules.takes_counts`).
"""

from __future__ import annotations

import math
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.moe_run import EpOverlap
from trainplan.model.split import stage_chunks

__all__ = [
    "recompute_counts_refusal",
    "check_recompute_counts",
    "check_count_sizes",
    "block_counts",
    "decoder_segment",
    "recomputed_in_chunks",
    "sqrt_segment",
]


def recompute_counts_refusal(framework: Any, recompute: Any, training: Any) -> str:
    """Why per-stage counts above 0 do not run under ``framework`` with ``recompute`` on the
    other layers and ``training``'s choices (its MoE all-to-all overlap), or "" (the module
    docstring).

    >>> from trainplan.model.specs import TrainingSpec
    >>> t = TrainingSpec(seq_len=8, global_batch_size=8)
    >>> recompute_counts_refusal("megatron", "none", t), recompute_counts_refusal("deepspeed", "none", t)
    ('', '')
    >>> recompute_counts_refusal("fsdp2", "none", t).split(":")[0]
    'under fsdp2'
    >>> recompute_counts_refusal("megatron", "selective", t).split(":")[0]
    'with recompute selective on the other layers'
    >>> from dataclasses import replace
    >>> from trainplan.model.moe_run import MoERun
    >>> o = replace(t, moe_run=MoERun(ep_overlap="overlap_moe_expert_parallel_comm"))
    >>> recompute_counts_refusal("megatron", "none", o).split(":")[0]
    "under moe_ep_overlap 'overlap_moe_expert_parallel_comm'"
    """
    if Framework(str(framework)) is Framework.FSDP2:
        return (
            "under fsdp2: torchtitan wraps every transformer block with one checkpointing policy "
            "(ActivationCheckpointing.apply; before 114151ad4 every N-th block of the model), "
            "never the first k layers of each stage; use recompute full, selective or none on "
            "every layer"
        )
    if Framework(str(framework)) is not Framework.MEGATRON:
        return ""
    if str(recompute) == "selective":
        return (
            "with recompute selective on the other layers: Megatron-Core runs one "
            "recompute_granularity and refuses recompute_num_layers with selective "
            "(TransformerConfig.__post_init__); use recompute none with the counts, or "
            "selective on every layer"
        )
    if training.moe_run.ep_overlap is EpOverlap.COMBINED_1F1B:
        return (
            "under moe_ep_overlap 'overlap_moe_expert_parallel_comm': Megatron-Core asserts "
            "recompute_num_layers is None and no full recomputation with it "
            "(TransformerConfig.__post_init__); use recompute none or selective on every layer"
        )
    return ""


def check_recompute_counts(
    setting: Any, framework: Any, recompute: Any, counts: tuple[int, ...] | None
) -> None:
    """Refuse per-stage counts (some above 0) that :func:`recompute_counts_refusal` says do not
    run; ``setting`` is the legality rule's (:class:`model.legality.Setting`), read for its
    training choices.

    Raises
    ------
    LayoutError
        ``recompute_layers: 2,1 with recompute selective on the other layers: …``.
    """
    if counts is None or not any(counts):
        return
    why = recompute_counts_refusal(framework, recompute, setting.training)
    if why:
        raise LayoutError(f"recompute_layers: {','.join(map(str, counts))} {why}")


def check_count_sizes(
    arch: Any,
    counts: tuple[int, ...] | None,
    recompute: Any,
    pp: int,
    v: int,
    uneven: bool | str,
    sizes: tuple[int, ...] | None,
    schedule: Any = None,
) -> None:
    """Per-stage counts (``Layout.recompute_layers``) need recompute none or selective on the
    other layers, and each count is at most its stage's decoder layers (with ``virtual_stages``
    > 1 its largest model chunk's, as Megatron-LM's ``--recompute-num-layers`` counts per chunk;
    the schedule places the chunks, :func:`model.split.chunk_ranks`); an MTP block is not
    counted, as no count recomputes it (:func:`block_counts`).

    Raises
    ------
    LayoutError
        naming ``recompute_layers``, the count and the rule.
    """
    if counts is None or arch is None:
        return
    shown = ",".join(map(str, counts))
    if str(recompute) not in ("none", "selective"):
        raise LayoutError(
            f"recompute_layers: {shown} needs recompute none or selective for the other "
            f"layers, not {recompute}"
        )
    for i, k in enumerate(counts):
        chunks = stage_chunks(arch, pp, v, uneven, i, sizes, schedule)
        largest = max(block_counts(chunks, max(map(len, chunks)), arch.num_layers))
        if k <= largest:
            continue
        mtp = any(j >= arch.num_layers for c in chunks for j in c)
        if v == 1:
            raise LayoutError(
                f"recompute_layers: {k} on stage {i} is more than its {largest} "
                f"{'decoder ' if mtp else ''}layers (each count must be at most its stage's "
                "layers"
                + (
                    "; the MTP block is never recomputed by a count: Megatron-Core's block "
                    "method skips it, MultiTokenPredictionLayer._checkpointed_forward)"
                    if mtp
                    else ")"
                )
            )
        raise LayoutError(
            f"recompute_layers: {k} on stage {i} is more than its largest model chunk's "
            f"{largest} layers (with virtual_stages {v} the count is per model chunk, as "
            "Megatron-LM's --recompute-num-layers; each must be at most its stage's largest chunk)"
        )


def block_counts(
    chunks: tuple[tuple[int, ...], ...], count: int, num_layers: int
) -> tuple[int, ...]:
    """Per model chunk of ``chunks`` (layer indices), how many of its layers a stage's count
    ``count`` fully recomputes: ``min(count, its decoder layers)``, the decoder layers being
    the indices below ``num_layers`` (L); the MTP blocks (indices L, L + 1, …, at the end of
    the last chunk, :func:`model.split.model_chunks`) never.

    Megatron-LM's ``--recompute-method block --recompute-num-layers N`` counts the decoder
    block's layers only: ``checkpointed_forward`` (``megatron/core/recompute.py``, NVIDIA/
    Megatron-LM d98e8a64dd) checkpoints layer ``i`` of ``TransformerBlock.layers`` where
    ``i < recompute_num_layers``, and the MTP block is no layer of it; the MTP layer's own
    ``MultiTokenPredictionLayer._checkpointed_forward`` (``megatron/core/transformer/
    multi_token_prediction.py``, same commit, and so since the method came in 08abeedbfe)
    takes ``recompute_method == 'block'`` as "not supported for MTP yet. Skipping recompute."
    and runs ``_proj_and_transformer_layer`` plainly: the MTP block keeps every activation
    whatever N is (the same at 92c8482e6d, the Megatron-LM the Megatron Bridge 25.11 validation
    rows cite). (Under ``uniform`` it is checkpointed whole, ``recompute`` ``full``;
    under ``selective`` its transformer layer runs the modules as every layer does.)

    Raises nothing; ``count`` ≥ 0.

    Examples
    --------
    DeepSeek-V3's last stage at pp 16 (layers 57–60 and the MTP block, index 61): a count of
    5 recomputes the 4 decoder layers, not the MTP block.

    >>> block_counts(((57, 58, 59, 60, 61),), 5, 61)
    (4,)
    >>> block_counts(((0, 1, 2), (6, 7)), 2, 8)
    (2, 2)
    """
    return tuple(min(count, sum(1 for j in chunk if j < num_layers)) for chunk in chunks)


def recomputed_in_chunks(
    chunks: tuple[tuple[int, ...], ...], count: int, num_layers: int
) -> tuple[int, ...]:
    """The layers a stage fully recomputes when its count is ``count``: the first
    :func:`block_counts` layers of each of its model chunks, in the stage's order — the first
    ``min(count, len(chunk))`` decoder layers, never an MTP block (indices ≥ ``num_layers``).
    The count is per model chunk, as Megatron-LM's ``--recompute-method block
    --recompute-num-layers N`` (``megatron/core/recompute.py`` ``checkpointed_forward``: the
    block is one chunk's layers; NeMo's "Activation Recomputation" page: "when using virtual
    pipelining, recompute_num_layers specifies the number of layers per virtual pipeline
    stage"); with one chunk per stage it is the stage's first ``count`` layers
    (:attr:`model.layout.Layout.recompute_layers`).

    Examples
    --------
    >>> recomputed_in_chunks(((0, 1, 2), (6, 7)), 2, 8)
    (0, 1, 6, 7)
    >>> recomputed_in_chunks(((0, 1, 2),), 2, 3)
    (0, 1)
    >>> recomputed_in_chunks(((2, 3, 4),), 3, 4)  # layer 4 is an MTP block
    (2, 3)
    """
    ks = block_counts(chunks, count, num_layers)
    return tuple(j for chunk, k in zip(chunks, ks, strict=True) for j in chunk[:k])


def decoder_segment(split: tuple[tuple[int, ...], ...], num_layers: int) -> int:
    """k of ``recompute`` ``sqrt``: :func:`sqrt_segment` of the most decoder layers (indices
    below ``num_layers``) any rank of ``split`` (:func:`model.split.stage_layers`) holds — the
    ``--recompute-num-layers`` Megatron-LM's uniform method applies to every model chunk's
    ``TransformerBlock`` (``megatron/core/recompute.py`` ``checkpointed_forward``, Megatron-LM
    d98e8a64dd). An MTP block is no layer of that block: ``MultiTokenPredictionLayer.
    _checkpointed_forward`` checkpoints it alone, and only with ``recompute_num_layers == 1``
    (:mod:`model.mtp_rules`), so it does not enter the count.

    Examples
    --------
    Four decoder layers on two ranks and an MTP block (index 4) on the last: k = round(√2) = 1,
    not round(√3) = 2.

    >>> decoder_segment(((0, 1), (2, 3, 4)), 4)
    1
    """
    return sqrt_segment(max((sum(1 for j in r if j < num_layers) for r in split), default=0))


def sqrt_segment(num_layers: int) -> int:
    """k = round(√n) layers per checkpointed segment (≥ 1; halves round up). Chen et al. 2016 §4.

    Examples
    --------
    >>> sqrt_segment(100), sqrt_segment(8), sqrt_segment(1)
    (10, 3, 1)
    """
    return max(1, math.floor(math.sqrt(num_layers) + 0.5))
