"""``trainplan mfu --model``: the MFU tab's N and dimensions read from a model, a catalogue name or
a Hugging Face ``config.json`` (the one grammar of evaluate's ``--model``,
:func:`scenarios.catalogue.get_model`), instead of typed as ``--params``, ``--layers``,
``--heads``, ``--head-dim``."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from fractions import Fraction
from typing import Any

from trainplan.interface.tab_requests import MfuRequest
from trainplan.interface.tab_values import fmt_number
from trainplan.model.errors import check_applicable, named_lookup
from trainplan.model.flops import MfuConvention, attention_model_flops, step_flops
from trainplan.model.layout import Recompute
from trainplan.model.specs import Architecture
from trainplan.scenarios.catalogue import get_model

__all__ = ["mfu_model", "model_attention", "MODEL_CAUSAL"]

MODEL_CAUSAL = True
"""How ``mfu --model`` counts a model's attention unless told (``causal`` None): over the pairs
the causal mask keeps, each layer's window its own — the count of ``trainplan evaluate``'s MFU,
which counts causal pairs whenever FlashAttention is on, its default
(``optimizer/case.py`` ``Case.of``: ``causal_attention_flops`` defaults to the recipe's
``flash_attention``; :mod:`model.attention`). Every catalogue model and every
``*ForCausalLM`` config is a causal language model. ``--non-causal`` asks for PaLM's s² a layer
(Chowdhery et al. 2022, appendix B), what an unfused kernel computes."""

_DIMENSIONS = ("layers", "heads", "head_dim", "hidden")
"""The MFU tab's dimensions a model has of its own."""


def _check_beside(r: MfuRequest, name: str) -> None:
    """Refuse what ``model`` ``name`` gives too (``params``, a dimension), as evaluate's
    ``--model`` does, and ``model`` beside a reported FLOP rate (N is not read).

    Raises
    ------
    InputError
        The first such input given."""
    given = {"params": r.params, **{k: getattr(r, k) for k in _DIMENSIONS}}
    own_dims = f"model {name} has its own dimensions; give them with --params instead of --model"
    check_applicable(
        given,
        {
            "params": f"model {name} has its own size; give either --model or --params, not both",
            **dict.fromkeys(_DIMENSIONS, own_dims),
        },
    )
    if r.achieved_pflops is not None or r.achieved_tflops_per_gpu is not None:
        why = "a reported FLOP rate already counts what it counts; N is not read"
        check_applicable({"model": name}, {"model": why})


def model_attention(arch: Architecture, seq_len: int, causal: bool) -> tuple[Fraction, str]:
    """The model's own attention FLOPs per token, forward + backward, and their formula: the
    count of ``trainplan evaluate``'s ``6n+attention`` MFU
    (:func:`model.flops.attention_model_flops` of one sequence ÷ ``seq_len``), each layer at
    its own span — a sliding-window or chunked layer counts the pairs it attends with
    ``causal`` (:func:`model.attention.attended_pairs`), the MTP blocks counted too. Without
    ``causal`` every layer computes s² pairs (PaLM's ``12·L·H·Q·T``, asked for with
    ``--non-causal``; ``mfu --model``'s default is causal, :data:`MODEL_CAUSAL`).

    Examples
    --------
    >>> arch = Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> model_attention(arch, 4, causal=False)[0] == 12 * 2 * 8 * 4
    True
    """
    flops = Fraction(attention_model_flops(arch, seq_len, 1, causal), seq_len)
    spans = Counter(arch.layer_span(i) for i in range(arch.num_layers + arch.mtp_layers))
    parts = []
    for span, n in spans.items():
        width = arch.span_width(span)
        parts.append(f"{n} {span.value}" + (f" {width}" if width is not None else ""))
    text = f"{fmt_number(flops)} attention of the {' + '.join(parts)} layers"
    return flops, text


def model_recomputed(
    arch: Architecture,
    seq_len: int | None,
    causal: bool,
    recompute: str | None,
    with_attention: bool = True,
) -> Fraction | None:
    """The model's own forward FLOPs recomputed per token under ``recompute`` (``full`` or
    ``selective``; None otherwise) that the HFU adds beside an MFU with attention FLOPs
    (``with_attention``, ``6n+attention``) or without (``6n``): what ``trainplan evaluate``'s HFU
    of that convention adds (:func:`model.flops.step_flops`'s hardware less model FLOPs of one
    sequence ÷ ``seq_len``, the rule :func:`model.flops.hardware_counts_attention_core`). Under
    full recomputation each layer's forward (the MTP blocks too), not the embedding nor the
    output layer, which Megatron-LM's and PyTorch's checkpointing leave out of the recomputed
    blocks; under selective each layer's attention core (Korthikanti et al. 2022 §4.2). Without
    ``with_attention`` the attention cores are left out: full adds ``2·W`` a token (W the
    layers' matmul weights, :func:`model.flops.layer_matmul_weights`), selective 0; ``seq_len``
    is then not read (None allowed: ``2·W`` a token is the same at any length). None also with
    ``with_attention`` and no ``seq_len``.

    Examples
    --------
    >>> arch = Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> model_recomputed(arch, 4, False, "full") == 2 * (24 * 64 + 4 * 4 * 8)
    True
    >>> model_recomputed(arch, None, False, "full", with_attention=False) == 2 * (24 * 64)
    True
    >>> model_recomputed(arch, 4, False, "selective", with_attention=False)
    Fraction(0, 1)
    """
    if recompute not in ("full", "selective"):
        return None
    if seq_len is None:
        if with_attention:
            return None
        seq_len = 1  # 2·W a token, whatever the length
    convention = MfuConvention.SIX_N_ATTENTION if with_attention else MfuConvention.SIX_N
    flops = step_flops(arch, 0, seq_len, 1, Recompute(recompute), convention, causal=causal)
    return Fraction(flops.hardware_flops - flops.model_flops, seq_len)


def mfu_model(
    r: MfuRequest,
) -> tuple[MfuRequest, dict[str, Any] | None, Architecture | None]:
    """``r`` with the figures of its ``model`` filled in, the report's ``model`` object
    (None without a model: ``r`` as given) and the model's architecture where a term reads its
    attention (:func:`model_attention`) or its recomputed FLOPs (:func:`model_recomputed`; None
    otherwise).

    N is the model's active parameters, the N of ``trainplan evaluate``'s MFU
    (:attr:`model.model_spec.ModelSpec.total_and_active_params`, which evaluate reads too: a
    MoE model's routed experts counted ``top_k`` of ``num_experts``; a size-only model's
    declared count). The dimensions — layers L, attention heads H, head dimension Q
    (:attr:`model.specs.Architecture.dim_per_head`) — are filled only where a term reads them
    (``attention``; the attention FLOPs are the model's own per-layer count,
    :func:`model_attention`, causal unless ``causal`` is False: :data:`MODEL_CAUSAL`), and so is
    the sequence length T when not given: the catalogue entry's ``seq_len`` (a ``config.json``
    has none: ``--seq-len``). ``recompute`` alone reads no dimension (the HFU beside a ``6·N``
    MFU adds the layers' recomputed matmuls, :func:`model_recomputed`), only the architecture.

    The report's object: ``name``, ``source``, ``params_total`` and ``params_active``
    (parameters), ``seq_len`` (tokens; null where no term reads it) and ``seq_len_from``
    (``given``, ``catalogue`` or null).

    Raises
    ------
    InputError
        ``params`` or a dimension given beside ``model`` (the model has its own), ``model``
        beside a reported FLOP rate (which counts what it counts), an unknown model name or an
        unreadable file (one line naming ``model``).
    """
    if r.model is None:
        return r, None, None
    name = str(r.model)
    _check_beside(r, name)
    entry = named_lookup("model", get_model, name)
    spec, arch = entry.model, entry.model.arch
    total, active = spec.total_and_active_params
    needs_dims = arch is not None and bool(r.attention)
    recomputes = arch is not None and r.recompute not in (None, "none")
    seq_len, seq_from = r.seq_len, "given" if r.seq_len is not None else None
    if needs_dims and seq_len is None and entry.training.get("seq_len") is not None:
        seq_len, seq_from = entry.training["seq_len"], "catalogue"
    fields: dict[str, Any] = {"params": active, "seq_len": seq_len}
    if needs_dims:
        assert arch is not None
        fields.update(
            layers=arch.num_layers,
            heads=arch.num_attention_heads,
            head_dim=arch.dim_per_head,
            causal=MODEL_CAUSAL if r.causal is None else r.causal,
        )
    record = {
        "name": spec.name,
        "source": spec.source,
        "params_total": total,
        "params_active": active,
        "seq_len": seq_len,
        "seq_len_from": seq_from,
    }
    return replace(r, **fields), record, arch if needs_dims or recomputes else None
