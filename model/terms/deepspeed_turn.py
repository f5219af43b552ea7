"""DeepSpeed ZeRO-3's gathered parameters at the memory peak, the term
:func:`model.terms.state.model_state_term` reads (:func:`zero3_turn_gathered`): the walk of its
fetch coordinator over the stage's modules (:func:`model.deepspeed_fetches.gathered_envelope`,
cached per architecture, tp, etp, ep and layer counts) taken against the activations freed by
each moment (:func:`model.deepspeed_gathered.zero3_peak_gathered_bytes`). Units: bytes on one GPU.
DeepSpeed runs ZeRO-3 only at pp 1 (:func:`model.legality.refusal`), so the stage is the model.

The term does not read the recompute mode (the search tabulates the model state per ZeRO stage,
:func:`optimizer.tables._memory`), so it takes the most of the walk without recomputation and
the walk under full recomputation (:func:`model.deepspeed_trace.module_trace`'s recomputed
forward), with one layer's input taken off for each layer whose activations are not live: what
full recomputation frees exactly and what no recomputation frees at least. Chen's √n chunks
(:func:`model.stage_bytes.sqrt_segment` layers a chunk) free only a chunk's input per chunk, so
their walk is in the most too (Llama 3 8B tp 1 at s 2,048: its walk's most, layer 2's backward
with 5 chunks freed, 2·1,512,046,592 − 5·16,777,216 = 2,940,207,104 bytes, where the two other
walks give 2,537,553,920): the term is never under the peak of the layout's own mode, and over
it by up to that difference for the other modes, until the state is tabulated per recompute mode.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trainplan.model.deepspeed_fetches import gathered_envelope
from trainplan.model.deepspeed_gathered import zero3_peak_gathered_bytes
from trainplan.model.frameworks import Framework
from trainplan.model.stage_bytes import sqrt_segment
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.traffic import most_layers

__all__ = ["zero3_gathered_bytes", "zero3_turn_gathered"]


def zero3_gathered_bytes(
    arch: Any,
    weight_bytes: int,
    token_bytes: int,
    seq: int,
    tp: Any,
    etp: Any,
    ep: Any,
    layers: Any,
    moe_layers: Any,
    b: Any,
    cp: Any,
) -> Fraction:
    """:func:`model.deepspeed_gathered.zero3_peak_gathered_bytes` of
    :func:`model.deepspeed_fetches.gathered_envelope` (``arch`` at ``tp``, ``etp``, ``ep`` over
    ``layers`` layers, the last ``moe_layers`` MoE) with a layer's least saved activations
    ``token_bytes · b · seq ÷ (cp · tp)`` (``b`` sequences of ``seq`` tokens a micro-batch, over
    cp; ``token_bytes``: bytes a token of one layer's input, ``h`` × the activation dtype, 0
    where activations are offloaded), the most of the walks without and under full
    recomputation and under √n recomputation (the module docstring). Bytes on one GPU.

    Llama 3 70B at tp 8, b 1, s 8,192 (a layer's input 8,192 · 8,192 · 2 ÷ 8 = 16,777,216
    bytes): without recomputation the turn's 1,045,692,416 elements, 2,091,384,832 bytes (layer
    72's backward, 1,128,792,064 with 71 layers freed, is 2 · 83,099,648 = 166,199,296 bytes more
    gathered but 71 · 16,777,216 less saved); under √n recomputation (9 layers a chunk) the same
    1,128,792,064 with only 8 chunks' inputs freed, 2 · 1,128,792,064 − 8 · 16,777,216 =
    2,123,366,400 bytes, the most.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("llama3-70b").model.arch
    >>> zero3_gathered_bytes(arch, 2, 2 * 8192, 8192, 8, 1, 1, 80, 0, 1, 1)
    Fraction(2123366400, 1)
    """
    key = tuple(int(x) for x in (tp, etp, ep, layers, moe_layers))
    layer = Fraction(token_bytes * seq * int(b), int(cp) * int(tp))
    return max(
        zero3_peak_gathered_bytes(gathered_envelope(arch, *key, segment), weight_bytes, layer)
        for segment in sorted({0, 1, sqrt_segment(int(layers))})
    )


def zero3_turn_gathered(c: Context, f: Fields, mech: Any, gathered: Any) -> Any:
    """The gathered bytes of :func:`model.terms.state.model_state_term`: under DeepSpeed ZeRO-3
    (``mech``, a :class:`model.mechanism_record.Mechanism`) of a model with dimensions,
    :func:`zero3_gathered_bytes` of the stage's layers (:func:`model.terms.stage_params.
    most_layers`) in the working dtype; else ``gathered`` (the mechanism's units) unchanged.
    Element-wise for arrays."""
    if mech.framework is not Framework.DEEPSPEED or mech.zero_stage != 3 or c.model.arch is None:
        return gathered
    t = c.training
    token = 0 if t.offload.activations else t.activation_bytes * c.arch.hidden_size
    layers, moe_layers = most_layers(c, f)
    args = (c.arch, mech.weight_bytes, token, t.seq_len)
    values = (f.tp, f.expert_tp, f.ep, layers, moe_layers, f.micro_batch_size, f.cp)
    return f.lookup_values(zero3_gathered_bytes, args, *values)
