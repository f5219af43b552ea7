"""A pipeline stage's activation bytes as terms written once for one layout or many.

:func:`model.memory.stage_activations` (the evaluator, exact) and :mod:`optimizer.tables` (numpy
arrays of thousands of layouts) both assemble a stage's bytes from these pieces (issue 10):

* :func:`layer_quantities` — the four per-layer figures a stage's bytes are built from, for a
  dense and for a MoE layer: everything kept with no recomputation (``full``), with selective
  recomputation (``selective``), the checkpoint full/√n recomputation keeps (``checkpoint``),
  and the layer input among the kept tensors (``input``); exact, per activation context.
* :func:`stage_forms` — what a stage of given layer kinds keeps per micro-batch and the
  candidates for its recompute transient, as integer linear forms over those eight figures
  (Chen et al. 2016 §4 for √n; Korthikanti et al. 2022 §5 for selective and full).
* :func:`apply_form`, :func:`peak_transient` — the forms evaluated on exact figures or arrays.
* the embedding's and the output layer's activations on the end stages: :mod:`model.end_stage_bytes`.
* :func:`chunk_peak` — an interleaved stage's peak chunk by chunk
  (:func:`model.pipeline.interleaved_peak`); GPipe and 1F1B stages hold
  :func:`model.pipeline.flat_in_flight` micro-batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.activation_offload import layer_modules, offloaded_bytes
from trainplan.model.activations import ActivationContext, kind_activations
from trainplan.model.layout import Recompute
from trainplan.model.pipeline import interleaved_peak
from trainplan.model.recompute_counts import sqrt_segment
from trainplan.model.specs import Architecture
from trainplan.model.xp import is_array, maximum, where

__all__ = [
    "QUANTITIES",
    "Form",
    "layer_quantities",
    "offload_quantities",
    "stage_forms",
    "stage_chunk_forms",
    "block_forms",
    "chunk_block_forms",
    "chunk_form",
    "apply_form",
    "peak_transient",
    "chunk_peak",
    "sqrt_segment",
    "chunk_segment_forms",
]

QUANTITIES = ("full", "selective", "checkpoint", "input")
"""Per-layer figures, for a dense layer then a MoE layer (8 in all; :func:`layer_quantities`)."""

Form = tuple[int, ...]
"""Integer coefficients of the eight per-layer figures (dense full, selective, checkpoint,
input; MoE full, selective, checkpoint, input)."""


def layer_quantities(arch: Architecture, ctx: ActivationContext) -> tuple[Fraction, ...]:
    """The eight per-layer figures (:data:`QUANTITIES` for a dense layer, then for a MoE layer;
    a kind no layer has gets 0s), bytes per GPU per micro-batch, exact
    (:func:`model.activations.layer_activations`). With activation offload
    (``ctx.offload_modules``) ``full`` and ``selective`` are what stays on the GPU: less
    :func:`offload_quantities`' figures.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16, dropout=True)
    >>> ctx = ActivationContext(seq_len=4, cp=1, micro_batch_size=1, tp=1,
    ...                         sequence_parallel=False, flash_attention=False)
    >>> layer_quantities(gpt, ctx)[:3] == (34 * 4 * 8 + 5 * 2 * 4 * 4, 34 * 4 * 8, 2 * 4 * 8)
    True
    """
    out: list[Fraction] = []
    for moe in (False, True):
        if arch.kind_index(moe) is None:  # no layer of this kind (a MoE model with no dense one)
            out += [Fraction(0)] * 4
            continue
        a = kind_activations(arch, moe, ctx)
        modules = layer_modules(ctx.offload_modules, arch.mla is not None, moe)
        off_full, off_sel = offloaded_bytes(a.terms, a.score_names, modules)
        out += [a.full_bytes - off_full, a.selective_bytes - off_sel]
        out += [a.checkpoint_bytes, a.input_bytes]
    return tuple(out)


def offload_quantities(arch: Architecture, ctx: ActivationContext) -> tuple[Fraction, ...]:
    """The eight per-layer figures of what ``ctx.offload_modules`` moves to the host, bytes per
    GPU per micro-batch (``full`` and ``selective``; no checkpoint or input figure: full and √n
    recomputation offload nothing, :func:`model.activation_offload.check_activation_offload`).
    All 0 without activation offload. Exact.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16, dropout=True)
    >>> ctx = ActivationContext(seq_len=4, cp=1, micro_batch_size=1, tp=1,
    ...     sequence_parallel=False, flash_attention=True, offload_modules=("core_attn",))
    >>> offload_quantities(gpt, ctx)[:2]  # Q, K and V, 3 × 2·S·h = 3 × 2·4·8
    (Fraction(192, 1), Fraction(192, 1))
    """
    out: list[Fraction] = []
    for moe in (False, True):
        if not ctx.offload_modules or arch.kind_index(moe) is None:
            out += [Fraction(0)] * 4
            continue
        a = kind_activations(arch, moe, ctx)
        modules = layer_modules(ctx.offload_modules, arch.mla is not None, moe)
        full, sel = offloaded_bytes(a.terms, a.score_names, modules)
        out += [full, sel, Fraction(0), Fraction(0)]
    return tuple(out)


def _unit(kind: bool, quantity: str) -> list[int]:
    form = [0] * 8
    form[4 * kind + QUANTITIES.index(quantity)] = 1
    return form


def _add(*forms: Sequence[int]) -> list[int]:
    return [sum(c) for c in zip(*forms, strict=True)]


def _scale(form: Sequence[int], k: int) -> list[int]:
    return [k * c for c in form]


@lru_cache(maxsize=4096)
def stage_forms(
    kinds: tuple[bool, ...], mode: Recompute, segment: int | None = None
) -> tuple[Form, tuple[Form, ...]]:
    """(bytes kept per micro-batch, candidate recompute transients) of a stage whose layers are
    MoE or not as ``kinds`` says, as linear forms over :func:`layer_quantities`.

    * none: every layer's ``full`` bytes; no transient.
    * selective: every layer's ``selective`` bytes; while one layer's backward runs, what it
      recomputed is back: the transient is that layer's ``full − selective``.
    * full (k = 1) and √n (k = round(√n), or ``segment`` where given: the one
      ``--recompute-num-layers`` Megatron-LM applies on every stage): one ``checkpoint`` per
      segment of k layers kept per micro-batch (:func:`chunk_segment_forms` of one chunk);
      while segment j is recomputed it holds its layers' ``full`` bytes less the input its
      first layer keeps (the checkpoint it starts from) — and backward, which runs the
      segments last to first, has already freed the checkpoints after it. The transient is the
      largest of these (when k divides n the last segment: k·full − checkpoint, Chen et al.
      2016; a shorter last segment makes the one before it the peak, measured in
      ``tests/fidelity``).

    Examples
    --------
    >>> per_mb, transients = stage_forms((False, False, False), Recompute.FULL)
    >>> per_mb[:4], [t[:4] for t in transients][-1]
    ((0, 0, 3, 0), (1, 0, 0, -1))
    >>> stage_forms((False, True), Recompute.SELECTIVE)
    ((0, 1, 0, 0, 0, 1, 0, 0), ((1, -1, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 1, -1, 0, 0)))
    """
    if mode == Recompute.NONE:
        return tuple(_add([0] * 8, *(_unit(k, "full") for k in kinds))), ()
    if mode == Recompute.SELECTIVE:
        # while a layer's backward runs, what it recomputed is back: full − selective of one
        # layer (the attention core's scores; under torchtitan's op policy every tensor it
        # did not save)
        transients = tuple(
            tuple(_add(_unit(k, "full"), _scale(_unit(k, "selective"), -1)))
            for k in sorted(set(kinds))
        )
        return tuple(_add([0] * 8, *(_unit(k, "selective") for k in kinds))), transients
    k = 1 if mode == Recompute.FULL else (segment or sqrt_segment(len(kinds)))
    per_chunk, transients = chunk_segment_forms((kinds,), k)
    return per_chunk[0], transients


@lru_cache(maxsize=4096)
def stage_chunk_forms(
    local: tuple[tuple[bool, ...], ...],
    mode: Recompute,
    recomputed: tuple[int, ...] | None,
    v: int,
    segment: int,
) -> tuple[Form, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(kept per micro-batch, candidate transients flat, per-chunk kept forms flat, per-chunk
    layer counts) of a stage whose model chunks' layers are MoE or not as ``local`` says, under
    ``mode`` with the first ``recomputed[c]`` layers of chunk c fully recomputed (one count per
    chunk, :func:`model.recompute_counts.block_counts`: an MTP block is never among them; None:
    no per-stage count) over ``v`` chunks a stage: :func:`block_forms` of its kinds (per model
    chunk, :func:`chunk_block_forms`, when there are per-stage counts and chunks), the chunks'
    own forms for the interleaved peak (:func:`chunk_form`); under √n without counts every
    chunk cut into segments of ``segment`` layers (:func:`chunk_segment_forms`). Cached on the
    kinds: stages of one kind pattern share it.

    >>> stage_chunk_forms(((False, True),), Recompute.SELECTIVE, None, 1, 0)[::2]
    ((0, 1, 0, 0, 0, 1, 0, 0), (0, 1, 0, 0, 0, 1, 0, 0))
    """
    chunks: tuple[Form, ...]
    if mode is Recompute.SQRT and recomputed is None:
        chunks, transients = chunk_segment_forms(local, segment)
        kept = tuple(sum(c) for c in zip(*chunks, strict=True)) if chunks else (0,) * 8
    elif recomputed is not None and v > 1:
        chunks, transients = chunk_block_forms(local, mode, recomputed)
        kept = tuple(sum(c) for c in zip(*chunks, strict=True))
    else:
        kinds = tuple(k for chunk in local for k in chunk)  # the stage's layers in its order
        count = None if recomputed is None else sum(recomputed)  # v = 1: one chunk
        kept, transients = block_forms(kinds, mode, count)
        chunks = tuple(chunk_form(c, mode) for c in local)
    flat = tuple(x for form in transients for x in form)
    return kept, flat, tuple(x for c in chunks for x in c), tuple(map(len, local))


@lru_cache(maxsize=4096)
def chunk_segment_forms(
    chunks: tuple[tuple[bool, ...], ...], k: int
) -> tuple[tuple[Form, ...], tuple[Form, ...]]:
    """(what each model chunk keeps per micro-batch, candidate recompute transients) of a stage
    whose chunks hold layers of ``chunks``' kinds and are each cut into segments of ``k``
    layers, the last one shorter — Megatron-LM's uniform method (``--recompute-granularity
    full --recompute-method uniform --recompute-num-layers k``): ``checkpointed_forward``
    (``megatron/core/recompute.py``, Megatron-LM d98e8a64dd) walks ``num_layers_per_pipeline_
    rank``, which ``TransformerBlock.__init__`` sets to ``len(self.layers)`` — the layers of the
    model chunk the block builds (one block per chunk when interleaved) — and checkpoints the
    input of each run ``[i, min(i + k, n))``.

    * kept by a chunk per micro-batch: the ``checkpoint`` of each segment's first layer,
      ``⌈n_c / k⌉`` of them;
    * transient, while segment j of chunk c is recomputed: its layers' ``full`` bytes less the
      input its first layer keeps, less the checkpoints after it in c (backward has freed them);
      the chunks after c are not taken off (:func:`chunk_block_forms`' rule).

    With one chunk it is :func:`stage_forms` ``sqrt`` for k = round(√n); with k = 1, ``full``.

    Examples
    --------
    A stage of 12 dense layers in 3 chunks of 4, k = round(√12) = 3: segments [3, 1] per chunk,
    2 checkpoints each (6 in all, where one segment pass over 12 layers keeps 4).

    >>> kept, transients = chunk_segment_forms(((False,) * 4,) * 3, 3)
    >>> [form[:4] for form in kept]
    [(0, 0, 2, 0), (0, 0, 2, 0), (0, 0, 2, 0)]
    >>> sorted({t[:4] for t in transients})
    [(1, 0, 0, -1), (3, 0, -1, -1)]
    >>> stage_forms((False,) * 9, Recompute.SQRT)[0][:4]  # k = 3: three segments
    (0, 0, 3, 0)
    """
    per_chunk: list[Form] = []
    transients: list[Form] = []
    for kinds in chunks:
        segments = [kinds[i : i + k] for i in range(0, len(kinds), k)]
        ckpts = [_unit(seg[0], "checkpoint") for seg in segments]
        per_chunk.append(tuple(_add([0] * 8, *ckpts)))
        for j, seg in enumerate(segments):
            transients.append(
                tuple(
                    _add(
                        *(_unit(kind, "full") for kind in seg),
                        _scale(_unit(seg[0], "input"), -1),
                        *(_scale(c, -1) for c in ckpts[j + 1 :]),
                    )
                )
            )
    return tuple(per_chunk), tuple(transients)


@lru_cache(maxsize=4096)
def block_forms(
    kinds: tuple[bool, ...], base: Recompute, recomputed: int | None
) -> tuple[Form, tuple[Form, ...]]:
    """:func:`stage_forms` of a stage whose first ``recomputed`` layers are fully recomputed
    (Megatron-LM's ``--recompute-method block --recompute-num-layers``, per stage:
    :attr:`model.layout.Layout.recompute_layers`) and whose other layers keep ``base``
    (``none`` or ``selective``). None is ``base`` everywhere.

    * kept per micro-batch: the recomputed layers' ``checkpoint`` (their input) plus the other
      layers' ``full`` / ``selective`` bytes;
    * transient, while recomputed layer j runs in backward: its ``full`` bytes less its input
      (the checkpoint it starts from), less what backward has already freed of the micro-batch —
      the checkpoints of the recomputed layers after it and the kept bytes of every layer not
      recomputed (they come after it in the stage); with some layers not recomputed also 0 (a
      transient never lowers the peak).

    With every layer recomputed the forms are :func:`stage_forms` ``full`` exactly; with none,
    ``base``'s.

    Examples
    --------
    >>> per_mb, transients = block_forms((False, False, False), Recompute.NONE, 1)
    >>> per_mb[:4], transients[0][:4]
    ((2, 0, 1, 0), (-1, 0, 0, -1))
    >>> block_forms((False,) * 3, Recompute.NONE, 3) == stage_forms((False,) * 3, Recompute.FULL)
    True
    """
    if recomputed is None or recomputed == 0:
        return stage_forms(kinds, base)
    if recomputed == len(kinds):
        return stage_forms(kinds, Recompute.FULL)
    per_chunk, transients = chunk_block_forms((kinds,), base, (min(recomputed, len(kinds)),))
    return per_chunk[0], transients


@lru_cache(maxsize=4096)
def chunk_block_forms(
    chunks: tuple[tuple[bool, ...], ...], base: Recompute, recomputed: tuple[int, ...]
) -> tuple[tuple[Form, ...], tuple[Form, ...]]:
    """(what each model chunk keeps per micro-batch, candidate recompute transients) of a stage
    whose chunks hold layers of ``chunks``' kinds (in the stage's order) and recompute the first
    ``recomputed[c]`` layers of chunk c (one count per chunk, each at most its layers:
    Megatron-LM's block method per model chunk, :func:`model.recompute_counts.block_counts`,
    which leaves an MTP block out; :attr:`model.layout.Layout.recompute_layers`); the other
    layers keep ``base`` (``none`` or ``selective``).

    * kept by a chunk per micro-batch: its recomputed layers' ``checkpoint`` plus its other
      layers' ``full`` / ``selective`` bytes;
    * transient, while recomputed layer j of chunk c runs in backward: its ``full`` bytes less
      its input, less what backward has already freed of that micro-batch in c — the
      checkpoints of the recomputed layers after it in c and the kept bytes of c's layers not
      recomputed; with some layer not recomputed also 0 (a transient never lowers the peak).
      The chunks after c are not taken off, though their backward ran first (backward runs the
      chunks last to first): the interleaved peak they would come off is not always one that
      holds them. Stage 0 of Llama 3 70B, tp 8, pp 4, v 2, B 8, chunks of 2 and 18 layers, 2
      recomputed per chunk: the schedule's held peak, 18,354,274,304 B, is held while chunk
      0's backward recomputes its last layer, after chunk 1's backward freed its share; the
      peak is that plus one layer's full less its input. So the figure is an upper bound (the
      largest held plus the largest transient), exact there; with every layer recomputed the
      largest transient is still the last layer's full less its input, as
      :func:`stage_forms` ``full``'s (layers alike).

    With one chunk it is :func:`block_forms`.

    Examples
    --------
    >>> kept, transients = chunk_block_forms(((False, False), (False, False)), Recompute.NONE, (1, 1))
    >>> [k[:4] for k in kept]
    [(1, 0, 1, 0), (1, 0, 1, 0)]
    >>> [t[:4] for t in transients]
    [(0, 0, 0, -1), (0, 0, 0, -1), (0, 0, 0, 0)]
    """
    quantity = "full" if base == Recompute.NONE else "selective"
    kept_units: list[list[list[int]]] = []
    per_chunk: list[Form] = []
    for kinds, k in zip(chunks, recomputed, strict=True):
        units = [_unit(kind, "checkpoint") for kind in kinds[:k]]
        units += [_unit(kind, quantity) for kind in kinds[k:]]
        kept_units.append(units)
        per_chunk.append(tuple(_add([0] * 8, *units)))
    transients: list[Form] = []
    for c, kinds in enumerate(chunks):
        for j in range(recomputed[c]):
            freed = [_scale(u, -1) for u in kept_units[c][j + 1 :]]
            transients.append(
                tuple(
                    _add(
                        _unit(kinds[j], "full"),
                        _scale(_unit(kinds[j], "input"), -1),
                        *freed,
                    )
                )
            )
    if any(k < len(kinds) for kinds, k in zip(chunks, recomputed, strict=True)):
        transients.append((0,) * 8)
    return tuple(per_chunk), tuple(transients)


@lru_cache(maxsize=4096)
def chunk_form(kinds: tuple[bool, ...], mode: Recompute) -> Form:
    """What a model chunk of layers ``kinds`` keeps per micro-batch under an interleaved
    schedule: each layer's ``full``, ``selective`` or (full and √n recomputation)
    ``checkpoint`` bytes.

    Examples
    --------
    >>> chunk_form((False, True), Recompute.SELECTIVE)
    (0, 1, 0, 0, 0, 1, 0, 0)
    """
    quantity = {Recompute.NONE: "full", Recompute.SELECTIVE: "selective"}.get(mode, "checkpoint")
    return tuple(_add([0] * 8, *(_unit(k, quantity) for k in kinds)))


def apply_form(form: Sequence[Any], quantities: Sequence[Any]) -> Any:
    """Σ coefficient × figure: exact for Fractions, element-wise for arrays of layouts (the
    coefficients may themselves be arrays: one form per layout and stage).

    Examples
    --------
    >>> apply_form((1, 0, 2, 0, 0, 0, 0, 0), [5, 0, 3, 0, 0, 0, 0, 0])
    11
    """
    total: Any = 0
    for c, q in zip(form, quantities, strict=True):
        if is_array(c) or c:
            total = total + c * q
    return total


def peak_transient(forms: Sequence[Sequence[Any]], quantities: Sequence[Any]) -> Any:
    """The largest of the candidate transients (0 for none: a stage without recomputation, or
    one of no layers).

    Examples
    --------
    >>> peak_transient(((1, 0, 0, 0, 0, 0, 0, 0), (2, 0, 0, 0, 0, 0, 0, 0)), [3] * 8)
    6
    """
    best: Any = 0
    for i, form in enumerate(forms):
        value = apply_form(form, quantities)
        best = value if i == 0 else maximum(best, value)
    return best


def chunk_peak(
    pp: Any, m: Any, v: int, stage: Any, chunk_weights: Sequence[Any], end_weight: Any
) -> tuple[list[Any], Any]:
    """(micro-batches held per local chunk, and by the chunk with the embedding or the output
    layer) at an interleaved stage's peak, the chunks weighing ``chunk_weights`` per micro-batch
    and the end stages' end chunk ``end_weight`` more (the embedding lives in stage 0's first
    chunk, the output layer in the last stage's last chunk: an empty last chunk still weighs its
    logits). :func:`model.pipeline.interleaved_peak` finds the peak.

    Examples
    --------
    >>> chunk_peak(4, 8, 2, 3, [1, 1], 5)  # the last stage's last chunk: one micro-batch
    ([4, 1], 1)
    """
    first = stage == 0
    last = (stage == pp - 1) & (stage != 0)
    weights = [
        w + where((first & (j == 0)) | (last & (j == v - 1)), end_weight, 0)
        for j, w in enumerate(chunk_weights)
    ]
    _, held = interleaved_peak(pp, m, v, stage, weights)
    return held, where(first, held[0], held[v - 1])
