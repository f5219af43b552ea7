"""FLOPs of a training step: model FLOPs (for MFU) and hardware FLOPs (with recomputation, for HFU
and for compute time). One multiply-add = 2 FLOPs.

Per layer, per micro-batch of b sequences of s tokens (forward pass):

* matmuls: ``2·s·b·W`` where W is the layer's matmul weights a token uses (attention
  projections; dense FFN, or router + shared experts + top-k routed experts). Biases and norms
  are not counted (Narayanan et al. 2021, Appendix / Eq. 3 counts matmuls only).
* attention: ``2·b·P·a·d_qk`` for QKᵀ plus ``2·b·P·a·d_v`` for scores·V, P the (query, key)
  pairs the layer computes per sequence (:func:`model.attention.attended_pairs`): s² without
  causal masking (Megatron-LM's and PaLM's convention, the full score matrix an unfused kernel
  computes: windows and chunks save nothing there), the pairs attended with ``causal=True`` —
  s(s+1)/2 for a global layer, fewer for a sliding window or chunks. For MHA with P = s²:
  ``4·b·s²·h``.
* output layer (last stage, once per micro-batch): ``2·s·b·h·V``; with D multi-token-prediction
  modules the shared head runs D more times and each module's projection adds ``2·s·b·2h·h``
  (:func:`output_forward_flops`); their transformer blocks are layers L, L + 1, ….

Backward = 2 × forward. Recomputation adds one forward of the layers (full, √n) or of the
attention core (selective; its QKᵀ and scores·V). The hardware FLOPs (HFU) add it under the
convention of the MFU they stand beside (:func:`step_flops`): under ``6n``, which counts no
attention-core FLOPs, the recomputed matmuls alone.

For the GPT layer with full recomputation the hardware FLOPs per step are exactly Megatron-LM's
Eq. 3, ``96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))``, and the model FLOPs (no recomputation)
Korthikanti's ``72·B·L·s·h²·(1 + s/(6h) + V/(12·h·L))`` (Korthikanti et al. 2022 Appendix A).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from trainplan.model.attention import attended_pairs
from trainplan.model.layout import Recompute
from trainplan.model.packing import Documents, packed_pairs
from trainplan.model.params import attention_params
from trainplan.model.specs import Architecture, AttentionKind
from trainplan.model.value_head import output_columns

__all__ = [
    "MfuConvention",
    "hardware_counts_attention_core",
    "layer_matmul_weights",
    "layer_forward_flops",
    "attention_core_forward_flops",
    "attention_model_flops",
    "output_forward_flops",
    "StepFlops",
    "step_flops",
    "megatron_eq3_flops",
    "korthikanti_model_flops",
    "korthikanti_selective_hardware_flops",
    "recompute_forward_flops",
    "utilisation",
]


class MfuConvention(StrEnum):
    """What counts as model FLOPs.

    * ``6n``: ``6·N_active`` per token (Kaplan et al. 2020; PaLM Appendix B without attention),
      N_active counting every parameter a token uses, embeddings included.
    * ``6n+attention``: plus PaLM's ``12·L·a·d·s`` per token (non-causal; Chowdhery et al. 2022,
      Appendix B).
    * ``megatron``: matmul and attention FLOPs term by term, 3 passes (Korthikanti et al. 2022,
      Appendix A; equals their 72·B·L·s·h²·(…) for the GPT layer).
    """

    SIX_N = "6n"
    SIX_N_ATTENTION = "6n+attention"
    MEGATRON = "megatron"


def hardware_counts_attention_core(convention: MfuConvention) -> bool:
    """Whether the hardware FLOPs (HFU numerator) beside an MFU of ``convention`` add the
    recomputed attention cores (QKᵀ and scores·V): not under ``6n``, whose model FLOPs count no
    attention-core FLOPs, under ``6n+attention`` and ``megatron``, which count them. PaLM
    (Chowdhery et al. 2022, Appendix B): hardware FLOPs = the model FLOPs of the same count plus
    the rematerialised ones; the one rule of :func:`step_flops` and of ``trainplan mfu``
    (:func:`model.mfu.recompute_share`).

    >>> hardware_counts_attention_core(MfuConvention.SIX_N)
    False
    >>> hardware_counts_attention_core(MfuConvention.SIX_N_ATTENTION)
    True
    """
    return convention is not MfuConvention.SIX_N


def _bias_and_norm_free(arch: Architecture, ffn: int) -> int:
    h = arch.hidden_size
    return (3 if arch.mlp.gated else 2) * h * ffn


def layer_matmul_weights(arch: Architecture, index: int) -> int:
    """Matmul weights one token passes through in layer ``index`` (no biases, no norms).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16, linear_bias=True)
    >>> layer_matmul_weights(gpt, 0) == 12 * 8 * 8
    True
    """
    return _layer_matmul_weights(arch, arch.is_moe_layer(index))


@lru_cache(maxsize=4096)
def _layer_matmul_weights(arch: Architecture, moe: bool) -> int:
    h, a = arch.hidden_size, arch.num_attention_heads
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        m = arch.mla
        attn = attention_params(arch) - m.kv_lora_rank - (m.q_lora_rank or 0)  # less the norms
    else:
        d, g = arch.dim_per_head, arch.kv_heads
        attn = 2 * h * a * d + 2 * h * g * d
    if not moe:
        return attn + _bias_and_norm_free(arch, arch.ffn_hidden_size)
    spec = arch.moe
    assert spec is not None
    ffn = spec.experts_per_token * _bias_and_norm_free(arch, spec.expert_ffn_hidden_size)
    ffn += spec.num_shared_experts * _bias_and_norm_free(arch, spec.shared_ffn)
    return attn + h * spec.num_experts + ffn


def attention_core_forward_flops(
    arch: Architecture,
    index: int,
    seq_len: int,
    batch: int,
    causal: bool = False,
    docs: Documents | None = None,
) -> int:
    """Forward FLOPs of layer ``index``'s QKᵀ and scores·V for ``batch`` sequences:
    ``2·b·P·a·(d_qk + d_v)``, P the pairs of :func:`model.attention.attended_pairs` for the
    layer's span (s² without ``causal``; the attended pairs with it). Attention sinks add a
    logit, not a key: no matmul FLOPs. ``docs``: each sequence is a pack of documents under
    document masking, P the expected pairs of :func:`model.packing.packed_pairs` (Σ lᵢ², as
    Megatron-LM's counter takes ``seqlen_squared_sum``), rounded down to whole FLOPs.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> attention_core_forward_flops(gpt, 0, 4, 1) == 4 * 1 * 4**2 * 8
    True
    >>> attention_core_forward_flops(gpt, 0, 4, 1, causal=True) == 2 * (4 * 5 // 2) * 2 * 8
    True
    """
    a = arch.num_attention_heads
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        dims = arch.mla.qk_nope_head_dim + arch.mla.qk_rope_head_dim + arch.mla.v_head_dim
    else:
        dims = 2 * arch.dim_per_head
    span = arch.layer_span(index)
    width = arch.span_width(span)
    if docs is not None:
        return int(2 * batch * packed_pairs(span, seq_len, width, causal, docs) * a * dims)
    pairs = attended_pairs(span, seq_len, width, causal)
    return 2 * batch * pairs * a * dims


def attention_model_flops(
    arch: Architecture, seq_len: int, batch: int, causal: bool, docs: Documents | None = None
) -> int:
    """Attention FLOPs of ``batch`` sequences, forward + backward, that ``6n+attention`` adds to
    ``6·N`` (PaLM Appendix B): 3 × Σ over the layers (the MTP blocks' too) of each layer's own
    :func:`attention_core_forward_flops` — at its span (a sliding-window or chunked layer counts
    the pairs it attends with ``causal``) — in FLOPs. The one count both ``trainplan evaluate``'s
    MFU (:func:`step_flops`) and ``trainplan mfu --model`` (:mod:`interface.mfu_model`, per
    token: this at ``batch`` 1 divided by ``seq_len``) read.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> attention_model_flops(gpt, 4, 1, causal=False) == 3 * 2 * (4 * 4**2 * 8)  # 12·L·h·s²
    True
    """
    layers = range(arch.num_layers + arch.mtp_layers)
    return 3 * sum(
        attention_core_forward_flops(arch, i, seq_len, batch, causal, docs) for i in layers
    )


def output_forward_flops(arch: Architecture, seq_len: int, batch: int) -> int:
    """Forward FLOPs of the output layer for ``batch`` sequences, ``2·s·b·h·V`` (a value head's
    ``2·s·b·h``, :func:`model.value_head.output_columns`), run once more by
    each of the D MTP modules, which also project 2h → h: ``2·s·b·(h·V·(1 + D) + D·2h·h)``
    (DeepSeek-V3 §2.2; the modules' blocks are counted as layers).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16, mtp_layers=1)
    >>> output_forward_flops(arch, 4, 1) == 2 * 4 * (8 * 16 * 2 + 2 * 8 * 8)
    True
    """
    h, d = arch.hidden_size, arch.mtp_layers
    columns = output_columns(arch, arch.vocab_size)  # a value head: 1 (model.value_head)
    return 2 * seq_len * batch * (h * columns * (1 + d) + d * 2 * h * h)


def layer_forward_flops(
    arch: Architecture,
    index: int,
    seq_len: int,
    batch: int,
    causal: bool = False,
    docs: Documents | None = None,
) -> int:
    """Forward FLOPs of layer ``index`` for ``batch`` sequences (whole layer, all tp/cp ranks).

    Examples
    --------
    GPT layer: ``24·b·s·h² + 4·b·s²·h``.

    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> layer_forward_flops(gpt, 0, 4, 1) == 24 * 4 * 64 + 4 * 16 * 8
    True
    """
    matmul = 2 * seq_len * batch * layer_matmul_weights(arch, index)
    return matmul + attention_core_forward_flops(arch, index, seq_len, batch, causal, docs)


@dataclass(frozen=True, slots=True)
class StepFlops:
    """FLOPs of one optimizer step, whole job (counts)."""

    model_flops: int
    """MFU numerator under the chosen :class:`MfuConvention`."""
    hardware_flops: int
    """HFU numerator: the model FLOPs of the same convention plus the recomputed FLOPs that
    convention counts (PaLM Appendix B: hardware FLOPs = model FLOPs + rematerialisation): under
    ``6n`` the recomputed matmuls only (``2·W·tokens`` of each recomputed layer's matmul weights
    W, the attention core left out as the ``6n`` model FLOPs leave it out), under
    ``6n+attention`` and ``megatron`` :attr:`recomputed_flops` whole. So HFU ≥ MFU under every
    convention, and HFU = MFU under ``6n`` when only attention cores are recomputed (an HFU is
    only compared with the MFU of its own convention: :attr:`with_attention_hardware_flops`
    beside the ``6n+attention`` MFU); for the GPT layer under ``megatron`` with full
    recomputation it is Eq. 3."""
    recomputed_flops: int
    """The recomputed forward work, attention cores included (what
    :attr:`with_attention_hardware_flops` adds; ``hardware_flops`` adds it whole except under
    ``6n``)."""
    pack_model_flops: int | None = None
    """With packed documents (``docs``), the model FLOPs of a counter that takes each pack for
    one sequence (its s² attention pairs; Megatron-LM's counter before it read
    ``cu_seqlens``): the MFU such a counter reports. None without packing."""
    with_attention_model_flops: int = 0
    """The model FLOPs under ``6n+attention`` whatever the convention (``6·N·B·s`` plus 3 × the
    attention cores' forward FLOPs, PaLM Appendix B): the figure printed beside a ``6n`` MFU."""

    @property
    def with_attention_hardware_flops(self) -> int:
        """:attr:`with_attention_model_flops` plus the recomputed FLOPs: the HFU under the same
        ``6n+attention`` convention, so it is never below that MFU."""
        return self.with_attention_model_flops + self.recomputed_flops


def recompute_forward_flops(
    arch: Architecture,
    index: int,
    seq_len: int,
    batch: int,
    recompute: Recompute,
    causal: bool = False,
    docs: Documents | None = None,
    attention_core: bool = True,
) -> int:
    """Forward FLOPs recomputed in backward for layer ``index`` and ``batch`` sequences of
    ``seq_len`` tokens under ``recompute`` (count, whole layer): its whole forward under full
    and √n recomputation (:func:`layer_forward_flops`), its attention core under selective
    (Korthikanti et al. 2022 §4.2), none otherwise. ``attention_core`` False: without the
    attention core's QKᵀ and scores·V (what the ``6n`` hardware FLOPs count, :func:`step_flops`):
    ``2·s·b·W`` of the layer's matmul weights under full, 0 under selective.

    An MTP block (``index`` ≥ L) recomputed whole also re-runs its module's 2h → h projection,
    ``2·s·b·2h·h`` (:func:`output_forward_flops` counts it forward): Megatron-Core checkpoints
    the module's ``_proj_and_transformer_layer`` — the two norms, the concatenation, ``eh_proj``,
    the transformer layer and the module's final norm — as one unit
    (``MultiTokenPredictionLayer._checkpointed_forward``, ``megatron/core/transformer/
    multi_token_prediction.py``, Megatron-LM d98e8a64dd; the uniform method with
    ``recompute_num_layers`` 1, the ``full`` mode here). Per-stage counts never recompute it
    (:func:`model.recompute_counts.block_counts`); under selective its transformer layer re-runs
    what every layer does.

    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> recompute_forward_flops(gpt, 0, 4, 1, Recompute.FULL, attention_core=False) == 24 * 4 * 64
    True
    >>> recompute_forward_flops(gpt, 0, 4, 1, Recompute.SELECTIVE, attention_core=False)
    0
    >>> mtp = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16, mtp_layers=1)
    >>> recompute_forward_flops(mtp, 1, 4, 1, Recompute.FULL, attention_core=False) == (
    ...     24 * 4 * 64 + 2 * 4 * 2 * 8 * 8)  # the layer and eh_proj [2h → h]
    True
    """
    if recompute not in (Recompute.FULL, Recompute.SQRT, Recompute.SELECTIVE):
        return 0
    core = 0
    if attention_core:
        core = attention_core_forward_flops(arch, index, seq_len, batch, causal, docs)
    if recompute is Recompute.SELECTIVE:
        return core
    h = arch.hidden_size
    projection = 2 * h * h if index >= arch.num_layers else 0  # an MTP module's eh_proj
    return 2 * seq_len * batch * (layer_matmul_weights(arch, index) + projection) + core


def step_flops(
    arch: Architecture,
    active_params: int,
    seq_len: int,
    global_batch_size: int,
    recompute: Recompute,
    convention: MfuConvention = MfuConvention.SIX_N,
    causal: bool = False,
    full_layers: frozenset[int] = frozenset(),
    docs: Documents | None = None,
    recomputed_of: Callable[[int, Recompute, bool], int] | None = None,
) -> StepFlops:
    """Model and hardware FLOPs of one step of ``global_batch_size`` sequences. ``full_layers``:
    layer indices fully recomputed whatever ``recompute`` says (the per-stage counts of
    :attr:`model.layout.Layout.recompute_layers`: one more forward of each, PaLM Appendix B).
    ``docs``: each sequence packs documents of this length distribution under document masking
    (:mod:`model.packing`): the attention core counts Σ lᵢ² (as Megatron-LM's counter does with
    ``seqlen_squared_sum``), and :attr:`StepFlops.pack_model_flops` the pack as one sequence.
    ``recomputed_of(index, mode, attention_core)``: the forward FLOPs layer ``index`` recomputes
    under ``mode``, with or without its attention core's
    (:func:`model.recompute_ops.layer_recompute_flops`: what the framework's selective
    recomputation re-runs); None = :func:`recompute_forward_flops` (the attention core).

    The hardware FLOPs are the model FLOPs plus the recomputed FLOPs the convention counts
    (PaLM Appendix B; :func:`_recomputed`).

    Examples
    --------
    Megatron-LM Eq. 3 for the GPT layer with full recomputation:

    >>> from trainplan.model.specs import Architecture
    >>> gpt = Architecture(num_layers=2, hidden_size=8, num_attention_heads=2,
    ...                    ffn_hidden_size=32, vocab_size=16)
    >>> f = step_flops(gpt, 0, 4, 3, Recompute.FULL, MfuConvention.MEGATRON)
    >>> f.hardware_flops == megatron_eq3_flops(3, 4, 2, 8, 16)
    True
    """
    B, s = global_batch_size, seq_len
    layers = range(arch.num_layers + arch.mtp_layers)  # the MTP blocks too
    layers_fwd = sum(layer_forward_flops(arch, i, s, B, causal, docs) for i in layers)
    logits_fwd = output_forward_flops(arch, s, B)
    if recomputed_of is None:

        def recomputed_of(i: int, mode: Recompute, core: bool) -> int:
            return recompute_forward_flops(arch, i, s, B, mode, causal, docs, core)

    modes = [(i, Recompute.FULL if i in full_layers else recompute) for i in layers]
    recomputed, counted = _recomputed(modes, recomputed_of, convention)
    model = _model_flops(
        arch, active_params, s, B, convention, causal, layers_fwd, logits_fwd, docs
    )
    pack = None
    if docs is not None:
        fwd = sum(layer_forward_flops(arch, i, s, B, causal) for i in layers)
        pack = _model_flops(arch, active_params, s, B, convention, causal, fwd, logits_fwd, None)
    with_attention = _model_flops(
        arch, active_params, s, B, MfuConvention.SIX_N_ATTENTION, causal, layers_fwd, logits_fwd,
        docs,
    )  # fmt: skip
    return StepFlops(model, model + counted, recomputed, pack, with_attention)


def _recomputed(
    modes: list[tuple[int, Recompute]],
    recomputed_of: Callable[[int, Recompute, bool], int],
    convention: MfuConvention,
) -> tuple[int, int]:
    """(every recomputed forward FLOP, the share of it ``convention``'s hardware FLOPs add) over
    ``modes``' (layer index, recompute mode) pairs (:func:`step_flops`; the second leaves the
    attention cores out where :func:`hardware_counts_attention_core` is False).

    The hardware FLOPs are the model FLOPs plus the recomputed FLOPs the convention counts
    (PaLM, Chowdhery et al. 2022, Appendix B: HFU's numerator adds rematerialisation to the
    model FLOPs). Under ``6n``, whose model FLOPs count ``2·N`` forward FLOPs per token and
    parameter and nothing for the attention core, a recomputed layer adds ``2·W·tokens``, W its
    matmul weights (:func:`layer_matmul_weights`; norms and biases do no matmul), and a
    recomputed attention core adds nothing: selective recomputation that re-runs only the core
    gives HFU = MFU, and a plan that re-runs matmuls (Megatron-Core's ``mlp``, torchtitan's
    op-level policy) adds those. Under ``6n+attention`` and ``megatron``, which count the core,
    it adds every recomputed FLOP (:attr:`StepFlops.recomputed_flops`).
    """
    recomputed = sum(recomputed_of(i, mode, True) for i, mode in modes)
    if hardware_counts_attention_core(convention):
        return recomputed, recomputed
    return recomputed, sum(recomputed_of(i, mode, False) for i, mode in modes)


def _model_flops(
    arch: Architecture,
    active_params: int,
    s: int,
    B: int,
    convention: MfuConvention,
    causal: bool,
    layers_fwd: int,
    logits_fwd: int,
    docs: Documents | None,
) -> int:
    """Model FLOPs of a step under ``convention`` (:func:`step_flops`)."""
    if convention is MfuConvention.MEGATRON:
        return 3 * (layers_fwd + logits_fwd)
    model = 6 * active_params * B * s
    if convention is MfuConvention.SIX_N_ATTENTION:
        model += attention_model_flops(arch, s, B, causal, docs)
    return model


def utilisation(flops, step_s, num_gpus, peak_flops_per_s):
    """FLOPs-utilisation of a step: ``flops / (step_s × num_gpus × peak)`` (MFU with model FLOPs,
    HFU with hardware FLOPs; Chowdhery et al. 2022, Appendix B). Works elementwise on numpy
    arrays (the search's tables) as on floats.

    Examples
    --------
    >>> round(utilisation(6 * 70e9 * 4e6, 7, 512, 989e12), 6)
    0.473964
    """
    return flops / (step_s * num_gpus * peak_flops_per_s)


def megatron_eq3_flops(
    batch: int, seq_len: int, num_layers: int, hidden_size: int, vocab_size: int
) -> int:
    """Megatron-LM Eq. 3: ``96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))`` FLOPs per iteration (GPT,
    full recomputation). Narayanan et al. 2021, arXiv 2104.04473, §5.1.

    Examples
    --------
    >>> megatron_eq3_flops(1, 2048, 1, 12288, 51200) == 96 * 2048 * 12288**2 + 16 * 2048**2 * 12288 + 6 * 2048 * 12288 * 51200
    True
    """
    B, s, L, h, V = batch, seq_len, num_layers, hidden_size, vocab_size
    return 96 * B * s * L * h * h + 16 * B * s * s * L * h + 6 * B * s * h * V


def korthikanti_model_flops(
    batch: int, seq_len: int, num_layers: int, hidden_size: int, vocab_size: int
) -> int:
    """Korthikanti et al. 2022 Appendix A model FLOPs: ``72·B·L·s·h²·(1 + s/(6h) + V/(12·h·L))``."""
    B, s, L, h, V = batch, seq_len, num_layers, hidden_size, vocab_size
    return 72 * B * L * s * h * h + 12 * B * L * s * s * h + 6 * B * s * h * V


def korthikanti_selective_hardware_flops(
    batch: int, seq_len: int, num_layers: int, hidden_size: int, vocab_size: int
) -> int:
    """Korthikanti et al. 2022 Appendix A hardware FLOPs with selective recomputation, as printed:
    ``72·B·L·s·h²·(1 + s/(3h) + V/(12·h·L))``. (Term by term, recomputing QKᵀ and scores·V adds
    ``4·B·s²·h`` per layer, i.e. 1 + 2s/(9h); the paper's s/(3h) is what its HFU column uses.)"""
    B, s, L, h, V = batch, seq_len, num_layers, hidden_size, vocab_size
    return 72 * B * L * s * h * h + 24 * B * L * s * s * h + 6 * B * s * h * V
