"""What DeepSpeed ZeRO-3's gathered parameters add to a GPU's memory peak
(:func:`zero3_peak_gathered_bytes`), from the walk of its fetch coordinator.

The gathered parameters at each moment of a micro-batch are
:func:`model.deepspeed_coordinator.walk_held`'s (DeepSpeed 38327e07
``partitioned_param_coordinator.py``: ``n_available`` rises when an all-gather is launched,
prefetches in flight included, and falls at ``__release_param``; ``partition_parameters.py``
``all_gather_coalesced`` allocates the whole buffer at launch). They peak at different moments
than the activations: Llama 3 8B at tp 1 holds the most (1,512,046,592 elements) in layer 2's
backward, where the prefetch has gathered the input embedding beside the output weight that
stays gathered all step, and 29 layers' saved activations are already freed. The memory model
adds the gathered bytes to the activations at their peak (the turn from forward to backward,
:func:`model.terms.peak.peak_over_phases`), so the gathered term is the most the gathered
parameters exceed the turn's by, less the activations freed by then
(:func:`model.deepspeed_fetches.gathered_envelope` gives the moments,
:func:`zero3_peak_gathered_bytes` takes them).

The activations freed are counted at their least: one layer's saved input a layer
(``b·s·h`` ÷ tp·cp in the activation dtype), what a layer checkpointed alone keeps for backward
(sequence parallelism's ÷ tp taken whatever it is set), and none where activations are
offloaded. The walk puts the recomputed forward in the backward
(:func:`model.deepspeed_trace.module_trace`), and the term
(:func:`model.terms.deepspeed_turn.zero3_gathered_bytes`) reads the walk of the layout's own
recompute mode (the state is tabulated per ZeRO stage and recompute mode): exact under full
recomputation, an upper bound without recomputation (a layer frees its input and more) and
under Chen's √n chunks (a chunk of layers frees its input and more).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

__all__ = ["DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS", "zero3_peak_gathered_bytes"]

DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS = 1_000_000_000
"""DeepSpeed ``stage3_max_reuse_distance`` default, elements (``zero/config.py``,
``DeepSpeedZeroConfig.max_reuse_distance``): a released parameter that recurs within this many
elements of the trace stays gathered."""


def zero3_peak_gathered_bytes(
    envelope: tuple[tuple[int, int], ...], weight_bytes: Any, layer_bytes: Any
) -> Fraction:
    """Bytes on one GPU the gathered parameters add at the step's memory peak, counted beside the
    activations at their peak: ``max over (k, n) of envelope`` of ``weight_bytes·n −
    k·layer_bytes`` (0 for an empty envelope). ``envelope``:
    :func:`model.deepspeed_fetches.gathered_envelope` (``k`` layers' saved activations not live,
    ``n`` elements gathered, whole); ``weight_bytes``: bytes a gathered element (the working
    dtype); ``layer_bytes``: the least one layer's saved activations free (bytes, ≥ 0).

    Llama 3 8B at tp 1 in BF16, b 1, s 2,048 under full recomputation (a checkpoint 2,048 ·
    4,096 · 2 = 16,777,216 bytes a layer): the turn 2 · 1,078,984,704 = 2,157,969,408; layer 29's
    forward 2 · 1,095,761,920 − 2 · 16,777,216 = 2,157,969,408; layer 2's backward
    2 · 1,512,046,592 − 29 · 16,777,216 = 2,537,553,920, the most.

    >>> env = ((0, 1078984704), (2, 1095761920), (29, 1512046592))
    >>> zero3_peak_gathered_bytes(env, 2, 16777216)
    Fraction(2537553920, 1)
    >>> zero3_peak_gathered_bytes(env, 2, 2 * 8192 * 4096)  # s 8,192: the turn's
    Fraction(2157969408, 1)
    """
    return max(
        (Fraction(weight_bytes * n - k * layer_bytes) for k, n in envelope), default=Fraction(0)
    )
