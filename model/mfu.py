"""Model and hardware FLOPs utilisation from a measurement
(docs/concepts/conventions.md "MFU from a measurement").

MFU = model FLOPs per second ÷ (peak × chips) (Chowdhery et al. 2022, PaLM, arXiv 2204.02311,
Appendix B). Model FLOPs per token = ``6·N`` (forward 2N + backward 4N) plus, when asked, PaLM's
attention FLOPs ``12·L·H·Q·T`` per token (``H`` heads of dimension ``Q``, sequence ``T``; computed
as if non-causal, as PaLM does; causal masking halves them). HFU also counts FLOPs the hardware
spent recomputing activations: a given percentage of model FLOPs, or derived from the mode, under
the rule of the MFU it stands beside (PaLM Appendix B: hardware FLOPs = the model FLOPs of the
same count plus the rematerialised ones; :func:`model.flops.hardware_counts_attention_core`, the
rule of ``trainplan evaluate``'s HFU, :func:`model.flops.step_flops`):

* with attention FLOPs counted (``6·N`` + attention):

  * ``full`` — one extra forward of every layer: ``2·N`` plus the forward attention
    ``4·L·H·Q·T`` (Megatron-LM's Eq. 3 counts exactly this: 96 vs 72 ``B·s·L·h²`` terms);
  * ``selective`` — recompute of the attention scores and attention over values only:
    ``4·L·H·Q·T`` (their forward). Korthikanti et al. 2022 (arXiv 2205.05198, Appendix A)
    count ``s/(3h)`` instead of ``s/(6h)`` in their hardware formula, i.e. three times this;
    that convention is :func:`korthikanti_flops`;

* with ``6·N`` alone, which counts no attention-core FLOPs, the recomputed matmuls alone:
  ``full`` ``2·N`` (a model's layers' matmul weights where the model is known,
  :func:`interface.mfu_model.model_recomputed`; from a bare parameter count the tool cannot tell
  the layers from the embedding and output layer, and counts all N), ``selective`` 0 (HFU = MFU:
  it re-runs only attention cores).

All FLOP counts are exact :class:`~fractions.Fraction` (1 multiply-add = 2 FLOPs).
"""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.errors import InputError
from trainplan.model.flops import (
    MfuConvention,
    hardware_counts_attention_core,
    korthikanti_model_flops,
    korthikanti_selective_hardware_flops,
    megatron_eq3_flops,
)
from trainplan.model.units import parse_number, shown_number

__all__ = [
    "attention_flops_per_token",
    "model_flops_per_token",
    "recompute_flops_per_token",
    "utilisation",
    "korthikanti_flops",
    "RECOMPUTE_MODES",
    "attention_term",
    "recompute_share",
]

RECOMPUTE_MODES = ("none", "selective", "full")

Num = Fraction | int


def _positive(name: str, value: Num | None) -> Fraction:
    if value is None:
        raise InputError(f"{name}: missing; it is needed here")
    if value <= 0:
        raise InputError(f"{name}: {value} must be positive")
    return Fraction(value)


def attention_flops_per_token(
    layers: int, heads: int, head_dim: int, seq_len: int, causal: bool = False
) -> Fraction:
    """Attention-score FLOPs per token, forward + backward: ``12·L·H·Q·T`` (PaLM, Appendix B).

    ``QKᵀ`` and attention-over-``V`` are ``2·2·H·Q·T`` FLOPs per token per layer forward, three
    times that with the backward. ``causal=True`` halves it (only the lower triangle).

    Raises
    ------
    InputError
        When a dimension is missing or not positive.

    Examples
    --------
    >>> attention_flops_per_token(118, 48, 256, 2048)
    Fraction(35634806784, 1)
    """
    f = 12 * _positive("layers", layers) * _positive("heads", heads)
    f *= _positive("head_dim", head_dim) * _positive("seq_len", seq_len)
    return f / 2 if causal else f


def model_flops_per_token(params: Num, attention_flops: Num = 0) -> Fraction:
    """Model FLOPs per trained token: ``6·N`` plus attention FLOPs (if counted).

    Examples
    --------
    >>> model_flops_per_token(70 * 10**9)
    Fraction(420000000000, 1)
    """
    return 6 * _positive("params", params) + Fraction(attention_flops)


def recompute_flops_per_token(
    mode: str,
    params: Num,
    layers: int | None = None,
    heads: int | None = None,
    head_dim: int | None = None,
    seq_len: int | None = None,
    causal: bool = False,
    attention: Fraction | None = None,
    attention_core: bool = True,
) -> Fraction:
    """FLOPs per token spent recomputing activations under ``mode`` (``none|selective|full``).

    ``full`` = ``2·N`` (+ ``4·L·H·Q·T`` attention forward when the dimensions are given);
    ``selective`` = ``4·L·H·Q·T`` (needs the dimensions). Halved attention when ``causal``.
    ``attention``: a model's own attention FLOPs per token, forward + backward
    (:func:`interface.mfu_model.model_attention`, each layer at its span), whose forward third
    replaces ``4·L·H·Q·T``. ``attention_core`` False: without the recomputed attention cores
    (the HFU beside a ``6·N`` MFU, :func:`model.flops.hardware_counts_attention_core`):
    ``full`` = ``2·N``, ``selective`` = 0, no dimension read — as
    :func:`model.flops.recompute_forward_flops` with ``attention_core=False``, but with all N
    for the layers' matmul weights (a bare parameter count does not tell the layers from the
    embedding and output layer).

    Raises
    ------
    InputError
        Unknown mode, or ``selective`` with ``attention_core`` without layers, heads, head_dim
        and seq_len.

    Examples
    --------
    >>> recompute_flops_per_token("full", 3) == 6
    True
    >>> recompute_flops_per_token("selective", 1, 1, 1, 1, 1) == 4
    True
    >>> recompute_flops_per_token("selective", 1, attention_core=False)
    Fraction(0, 1)
    """
    if mode not in RECOMPUTE_MODES:
        raise InputError(f"recompute: {mode!r} must be one of {', '.join(RECOMPUTE_MODES)}")
    if mode == "none" or (mode == "selective" and not attention_core):
        return Fraction(0)
    if not attention_core:
        return 2 * _positive("params", params)
    if attention is not None:
        forward = Fraction(attention) / 3
        return forward if mode == "selective" else 2 * _positive("params", params) + forward
    names = ("layers", "heads", "head_dim", "seq_len")
    dims = (layers, heads, head_dim, seq_len)
    missing = [n for n, d in zip(names, dims, strict=True) if d is None]
    if mode == "selective" and missing:
        raise InputError(
            f"recompute: 'selective' needs the model's {', '.join(f'`{n}`' for n in missing)} "
            "(or give `recomputed_flops_pct`)"
        )
    attn = Fraction(0)
    if not missing:
        attn = attention_flops_per_token(*dims, causal=causal) / 3  # type: ignore[misc,arg-type]
    return attn if mode == "selective" else 2 * _positive("params", params) + attn


def utilisation(flops_per_s: Num, peak_flops_per_s: Num, chips: int = 1) -> Fraction:
    """``flops_per_s ÷ (peak × chips)``: MFU from model FLOP/s, HFU from hardware FLOP/s.

    Raises
    ------
    InputError
        When the peak or the chips are not positive, or the rate is negative.

    Examples
    --------
    >>> round(float(utilisation(502 * 10**15, 312 * 10**12, 3072)), 6)
    0.523755
    """
    if flops_per_s < 0:
        raise InputError(f"achieved FLOP/s: {flops_per_s} must not be negative")
    return Fraction(flops_per_s) / (_positive("peak", peak_flops_per_s) * _positive("chips", chips))


def korthikanti_flops(
    batch: int, seq_len: int, layers: int, hidden: int, vocab: int, recompute: str = "none"
) -> Fraction:
    """FLOPs of one iteration of a GPT model, Korthikanti et al. 2022, Appendix A, with the
    inputs checked: model FLOPs (``recompute="none"``,
    :func:`model.flops.korthikanti_model_flops`), hardware FLOPs with selective recomputation as
    the paper prints them (:func:`model.flops.korthikanti_selective_hardware_flops`), or with full
    recomputation Megatron-LM's Eq. 3 (:func:`model.flops.megatron_eq3_flops`).

    Examples
    --------
    >>> f = korthikanti_flops(4, 2048, 48, 6144, 51200)
    >>> round(float(f / (1.10 * 8 * 312e12)), 4)
    0.4165
    """

    named = {"batch": batch, "seq_len": seq_len, "layers": layers, "hidden": hidden, "vocab": vocab}
    for k, x in named.items():
        value = _positive(k, x)
        if value.denominator != 1:
            raise InputError(f"{k}: {x} must be a whole number")
    if recompute not in RECOMPUTE_MODES:
        raise InputError(f"recompute: {recompute!r} must be one of {', '.join(RECOMPUTE_MODES)}")
    formula = {
        "none": korthikanti_model_flops,
        "selective": korthikanti_selective_hardware_flops,
        "full": megatron_eq3_flops,
    }[recompute]
    return Fraction(formula(*(int(x) for x in named.values())))


def attention_term(
    layers: int | None,
    heads: int | None,
    head_dim: int | None,
    hidden: int | None,
    seq_len: int | None,
    causal: bool = False,
) -> tuple[Fraction, str]:
    """PaLM's attention FLOPs per token and the formula with its numbers, from heads × head_dim
    or from ``hidden`` (= H·Q).

    Raises
    ------
    InputError
        Missing dimensions, or ``hidden`` ≠ heads × head_dim.

    Examples
    --------
    >>> attention_term(2, None, None, 64, 128)
    (Fraction(196608, 1), '12 · 2 · 64 · 128')
    """
    if heads is not None and head_dim is not None:
        hq, hq_text = heads * head_dim, f"{heads} · {head_dim}"
        if hidden is not None and hidden != hq:
            raise InputError(f"hidden: {hidden} ≠ heads × head_dim = {heads} × {head_dim}")
    elif hidden is not None:
        hq, hq_text = hidden, str(hidden)
    else:
        raise InputError(
            "attention: needs `heads` and `head_dim`, or `hidden` (= heads × head_dim)"
        )
    missing = [f"`{n}`" for n, v in (("layers", layers), ("seq_len", seq_len)) if v is None]
    if missing or layers is None or seq_len is None:  # each written as its flag by the interface
        raise InputError(f"attention: needs {' and '.join(missing)}")
    flops = attention_flops_per_token(layers, hq, 1, seq_len, causal)
    return flops, f"12 · {layers} · {hq_text} · {seq_len}" + (" / 2" if causal else "")


def recompute_share(
    recompute: str | None,
    pct: Fraction | str | None,
    params: Fraction | None,
    per_token: Fraction | None,
    layers: int | None = None,
    hidden: int | None = None,
    seq_len: int | None = None,
    causal: bool = False,
    attention: Fraction | None = None,
    recomputed: Fraction | None = None,
    with_attention: bool = True,
) -> tuple[Fraction, str]:
    """Recomputed FLOPs as a share of model FLOPs (HFU = MFU × (1 + share)) and how it was found.

    From ``pct`` (percent of model FLOPs, as typed, which a refusal echoes) or from the
    ``recompute`` mode with the dimensions (``hidden`` = heads × head_dim); full recompute of a
    FLOP rate with no parameter count is 1/3 (2N of 6N). ``with_attention``: the model FLOPs
    count attention (else ``6·N``, whose HFU adds no recomputed attention core,
    :func:`model.flops.hardware_counts_attention_core`: full ``2·N``, selective 0).
    ``attention``, ``recomputed``: a model's own attention and recomputed forward FLOPs per token
    (:func:`interface.mfu_model.model_recomputed`, evaluate's count), for ``2·N`` (+ attention).

    Raises
    ------
    InputError
        Both given; a percentage not a number or negative; selective without the dimensions.

    Examples
    --------
    >>> recompute_share(None, Fraction(25), None, None)
    (Fraction(1, 4), '25% recomputed')
    """
    if pct is not None and recompute not in (None, "none"):
        raise InputError("recompute: give `recomputed_flops_pct` or `recompute`, not both")
    if pct is not None:
        share = parse_number(pct, "recomputed_flops_pct")
        if share < 0:
            typed = pct if isinstance(pct, str) else shown_number(pct)
            raise InputError(f"recomputed_flops_pct: {typed} must be ≥ 0")
        return share / 100, f"{shown_number(share)}% recomputed"
    if recompute in (None, "none"):
        return Fraction(0), ""
    if params is None or per_token is None:
        if recompute == "full":
            return Fraction(1, 3), "1/3: full recompute = one more forward, 2N of 6N"
        raise InputError("recompute: 'selective' needs params and the model's dimensions")
    core = hardware_counts_attention_core(
        MfuConvention.SIX_N_ATTENTION if with_attention else MfuConvention.SIX_N
    )
    extra = recomputed
    if extra is None:
        extra = recompute_flops_per_token(
            recompute, params, layers, hidden, 1 if hidden else None, seq_len, causal, attention,
            core,
        )  # fmt: skip
    how = f"{float(extra):.4g}/{float(per_token):.4g} ({recompute})"
    if not extra:
        how = f"0 ({recompute} re-runs attention cores, which 6·N does not count)"
    return extra / per_token, how
