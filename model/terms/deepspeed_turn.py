"""DeepSpeed ZeRO-3's gathered parameters at the memory peak, the term
:func:`model.terms.state.model_state_term` reads (:func:`zero3_turn_gathered`): the walk of its
fetch coordinator over the stage's modules (:func:`model.deepspeed_fetches.gathered_envelope`,
cached per architecture, tp, etp, ep, layer counts and recomputation) taken against the
activations freed by each moment (:func:`model.deepspeed_gathered.zero3_peak_gathered_bytes`).
Units: bytes on one GPU. DeepSpeed runs ZeRO-3 only at pp 1 (:func:`model.legality.refusal`), so
the stage is the model.

Each layout reads the walk of its own recompute mode (:func:`model.deepspeed_fetches.
recompute_walk` of :func:`model.terms.traffic.deepspeed_walk`: none, the core attention under
``selective``, every layer under ``full``, Chen's √n chunks under ``sqrt``), with one layer's
input taken off for each layer — or checkpointed chunk — whose activations are not live: what
full recomputation frees exactly, what no recomputation frees at least (a layer frees its input
and more), and what a chunk frees at least under √n. The search tabulates the term per ZeRO
stage and recompute mode (:func:`optimizer.job_rows._memory`). Llama 3 8B tp 1 at s 2,048, b 1:
no recomputation's walk gives 2·1,512,046,592 − 29·16,777,216 = 2,537,553,920 bytes (layer 2's
backward), the √n walk 2·1,512,046,592 − 5·16,777,216 = 2,940,207,104 (5 chunks freed there):
402,653,184 bytes the term took over for the layouts without recomputation when it took the
most of the walks.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trainplan.model.deepspeed_fetches import gathered_envelope, recompute_walk
from trainplan.model.deepspeed_gathered import zero3_peak_gathered_bytes
from trainplan.model.frameworks import Framework
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.traffic import deepspeed_walk, most_layers

__all__ = ["zero3_gathered_bytes", "zero3_turn_gathered", "walks_recompute"]


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
    recompute: str = "none",
    core: bool = False,
    first: int | None = None,
) -> Fraction:
    """:func:`model.deepspeed_gathered.zero3_peak_gathered_bytes` of
    :func:`model.deepspeed_fetches.gathered_envelope` (``arch`` at ``tp``, ``etp``, ``ep`` over
    ``layers`` layers, the last ``moe_layers`` MoE) with a layer's least saved activations
    ``token_bytes · b · seq ÷ (cp · tp)`` (``b`` sequences of ``seq`` tokens a micro-batch, over
    cp; ``token_bytes``: bytes a token of one layer's input, ``h`` × the activation dtype, 0
    where activations are offloaded), the walk of the recompute mode (``recompute``, ``core``,
    ``first``: :func:`model.deepspeed_fetches.recompute_walk`; the module docstring). Bytes on one
    GPU.

    Llama 3 70B at tp 8, b 1, s 8,192 (a layer's input 8,192 · 8,192 · 2 ÷ 8 = 16,777,216
    bytes): without recomputation the turn's 1,045,692,416 elements, 2,091,384,832 bytes (layer
    72's backward, 1,128,792,064 with 71 layers freed, is 2 · 83,099,648 = 166,199,296 bytes more
    gathered but 71 · 16,777,216 less saved); under √n recomputation (9 layers a chunk) the same
    1,128,792,064 with only 8 chunks' inputs freed, 2 · 1,128,792,064 − 8 · 16,777,216 =
    2,123,366,400 bytes.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("llama3-70b").model.arch
    >>> zero3_gathered_bytes(arch, 2, 2 * 8192, 8192, 8, 1, 1, 80, 0, 1, 1)
    Fraction(2091384832, 1)
    >>> zero3_gathered_bytes(arch, 2, 2 * 8192, 8192, 8, 1, 1, 80, 0, 1, 1, "sqrt")
    Fraction(2123366400, 1)
    """
    key = tuple(int(x) for x in (tp, etp, ep, layers, moe_layers))
    layer = Fraction(token_bytes * seq * int(b), int(cp) * int(tp))
    walk = recompute_walk(recompute, key[3], core, first)
    return zero3_peak_gathered_bytes(gathered_envelope(arch, *key, *walk), weight_bytes, layer)


def walks_recompute(framework: Any, zero_stage: Any) -> bool:
    """Whether a layout under ``framework`` (a :class:`model.frameworks.Framework` or its value)
    at ZeRO stage ``zero_stage`` reads its recompute mode and per-stage counts beyond its
    activations and time: DeepSpeed ZeRO-3, whose coordinator walks the recomputed forward in
    the backward (:func:`model.terms.traffic.deepspeed_walk`: its gathered weights,
    :func:`zero3_turn_gathered`, and gather launches, :mod:`model.terms.dp_time`). The other
    mechanisms' state and data-parallel time do not read them (:data:`model.terms.TERMS`).

    >>> walks_recompute("deepspeed", 3), walks_recompute(Framework.DEEPSPEED, 2), walks_recompute("megatron", 3)
    (True, False, False)
    """
    return str(framework) == "deepspeed" and int(zero_stage) == 3


def zero3_turn_gathered(c: Context, f: Fields, mech: Any, gathered: Any) -> Any:
    """The gathered bytes of :func:`model.terms.state.model_state_term`: under DeepSpeed ZeRO-3
    (``mech``, a :class:`model.mechanism_record.Mechanism`) of a model with dimensions,
    :func:`zero3_gathered_bytes` of the stage's layers (:func:`model.terms.stage_params.
    most_layers`) in the working dtype under the walk of the layout's recompute mode
    (:func:`model.terms.traffic.deepspeed_walk`); else ``gathered`` (the mechanism's units) unchanged.
    Element-wise for arrays."""
    if mech.framework is not Framework.DEEPSPEED or mech.zero_stage != 3 or c.model.arch is None:
        return gathered
    t = c.training
    token = 0 if t.offload.activations else t.activation_bytes * c.arch.hidden_size
    layers, moe_layers = most_layers(c, f)
    args = (c.arch, mech.weight_bytes, token, t.seq_len)
    values = (f.tp, f.expert_tp, f.ep, layers, moe_layers, f.micro_batch_size, f.cp)
    return f.lookup_values(zero3_gathered_bytes, args, *values, *deepspeed_walk(c, f))
