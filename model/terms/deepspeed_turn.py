"""DeepSpeed ZeRO-3's gathered parameters at the turn from forward to backward, per pipeline
stage: :func:`stage_zero3_turn` feeds :func:`model.deepspeed_gathered.zero3_turn_elements` the
stage's split (exact, cached on :class:`model.terms.split_key.SplitKey`), and
:func:`zero3_turn_per_gpu` is what :func:`model.terms.state.model_state_term` reads at the rank
``f.stage``. Units: parameter elements on one GPU, whole (after tp).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.deepspeed_gathered import zero3_turn_elements
from trainplan.model.frameworks import Framework
from trainplan.model.params import count_params
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.split_key import CACHE, SplitKey, read_split
from trainplan.model.terms.stage_params import layer_units, output_params, stage_params_per_gpu
from trainplan.model.terms.tensors import layer_largest_tensor
from trainplan.model.xp import maximum

__all__ = ["stage_zero3_turn", "zero3_turn_per_gpu", "zero3_turn_gathered"]


@lru_cache(maxsize=CACHE)
def stage_zero3_turn(key: SplitKey) -> tuple[Fraction, ...]:
    """Per stage, :func:`model.deepspeed_gathered.zero3_turn_elements` of its largest layer, its
    layer count, the output weight (or the tied embedding) on :func:`model.split.output_rank`,
    the untied input embedding on the first stage, its layers' largest tensor
    (:func:`model.terms.tensors.layer_largest_tensor`) and its parameters. 0 for a size-only
    model (its layers are unknown; the mechanism's two units stay).

    Llama 3 70B at tp 4 (untied; a layer 855,638,016 ÷ 4 + its two norms whole, 16,384, =
    213,925,888; the output 128,256·8,192 ÷ 4 = 262,668,288; fc1 117,440,512): ``k`` =
    ⌈737,331,712 ÷ 427,851,776⌉ = 2, so 427,851,776 + 262,668,288 + 50,000,000 + 117,440,512
    = 857,960,576 elements, below what the prefetch reaches under the live cap, 1e9 +
    117,440,512 = 1,117,440,512.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> m = get_model("llama3-70b").model
    >>> stage_zero3_turn(SplitKey(m, 4, 1, 1, 1, False, 1, True, None, 1))
    (Fraction(1117440512, 1),)
    """
    arch = key.model.arch
    if arch is None or key.model.num_params_declared is not None:
        return (Fraction(0),) * key.pp
    counts = count_params(arch, key.vocab())
    last = key.output_rank()
    units = layer_units(key)
    params = stage_params_per_gpu(key)
    out = []
    for i, layers in enumerate(key.layers()):
        kinds = {arch.is_moe_layer(j): j for j in layers}
        tensor = max(
            (layer_largest_tensor(arch, j, key.tp, key.etp) for j in kinds.values()),
            default=Fraction(0),
        )
        head = output_params(key, counts, key.vocab()) if i == last else Fraction(0)
        untied = Fraction(counts.embedding, key.tp) if i == 0 and counts.output else Fraction(0)
        total = params[i][2] + params[i][3]
        layer = units[i][0] + units[i][1]
        out.append(Fraction(zero3_turn_elements(layer, len(layers), head, untied, tensor, total)))
    return tuple(out)


def zero3_turn_per_gpu(c: Context, f: Fields) -> Any:
    """:func:`stage_zero3_turn` of stage ``f.stage``."""
    return read_split(c, f, stage_zero3_turn)


def zero3_turn_gathered(c: Context, f: Fields, mech: Any, gathered: Any) -> Any:
    """The gathered bytes of :func:`model.terms.state.model_state_term`: under DeepSpeed ZeRO-3
    (``mech``, a :class:`model.mechanism_record.Mechanism`) the larger of ``gathered`` (the
    mechanism's two units) and :func:`zero3_turn_per_gpu` whole in the working dtype; else
    ``gathered`` unchanged. Element-wise for arrays."""
    if mech.framework is not Framework.DEEPSPEED or mech.zero_stage != 3:
        return gathered
    return maximum(gathered, mech.weight_bytes * zero3_turn_per_gpu(c, f))
