"""Bytes each parallel axis sends per GPU per step (ring algorithms; SPEC.md "Communication").

For a ring collective over n ranks of a buffer of S bytes each GPU sends ``(n−1)/n·S`` for an
all-gather or reduce-scatter and ``2·(n−1)/n·S`` for an all-reduce (Thakur, Rabenseifner & Gropp
2005; NCCL-tests PERFORMANCE.md "bus bandwidth"). ``S_tok = (s/cp)·b`` tokens per micro-batch on a
rank; β = 2 bytes per activation element; m micro-batches per step; "passes" = forward + backward
(+ the recomputed forward under full or √n recomputation).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from trainplan.model.layout import Layout, Recompute
from trainplan.model.specs import Architecture, AttentionKind, TrainingSpec

__all__ = ["AxisTraffic", "dp_traffic", "tp_traffic", "pp_traffic", "cp_traffic", "ep_traffic"]


@dataclass(frozen=True, slots=True)
class AxisTraffic:
    """What one axis sends per GPU per step."""

    axis: str
    """dp, tp, pp, cp or ep."""
    collective: str
    """The collective(s), named."""
    group_size: int
    """Ranks in one group of this axis."""
    bytes_per_step: Fraction
    """Bytes sent by one GPU per optimizer step."""


def _ring(n: int) -> Fraction:
    return Fraction(n - 1, n)


def dp_traffic(
    dense_params: Fraction,
    expert_params: Fraction,
    layout: Layout,
    training: TrainingSpec,
    zero_stage: int | None = None,
    regather_per_microbatch: bool = False,
) -> AxisTraffic:
    """Data-parallel gradient traffic over D = dp·cp ranks (experts over dp·cp/ep).

    ZeRO-0/1/2: ``2·(D−1)/D · 2·P`` (an all-reduce, or a reduce-scatter plus the all-gather of the
    updated weights); ZeRO-3 adds one all-gather of the weights: ``3·(D−1)/D · 2·P`` (1.5×;
    Rajbhandari et al. 2019 §7). ``regather_per_microbatch`` (off by default, as in the seed)
    makes ZeRO-3 gather the weights before every micro-batch's forward and backward instead:
    ``(D−1)/D·2·P·(1 + 2m)``. P = parameters on this GPU (after tp/pp/ep split).

    Examples
    --------
    >>> from trainplan.model.specs import TrainingSpec
    >>> t = TrainingSpec(seq_len=1, global_batch_size=64)
    >>> dp_traffic(Fraction(70 * 10**9), Fraction(0), Layout(dp=64, zero_stage=3), t).bytes_per_step
    Fraction(413437500000, 1)
    """
    stage = layout.zero_stage if zero_stage is None else zero_stage
    g, w = training.gradient_bytes, training.weight_bytes
    if stage == 0:  # all-reduce of the gradients: a reduce-scatter and an all-gather of g bytes
        per_param, name = 2 * g, "all-reduce"
    elif stage < 3:  # reduce-scatter the gradients, all-gather the updated (bf16) weights
        per_param, name = g + w, "reduce-scatter + all-gather"
    elif regather_per_microbatch:
        m = layout.num_microbatches(training.global_batch_size)
        per_param, name = g + w * 2 * m, "reduce-scatter + all-gather per micro-batch (fwd, bwd)"
    else:
        per_param, name = g + 2 * w, "reduce-scatter + 2 all-gathers"
    total = _ring(layout.shard_degree) * per_param * dense_params
    if expert_params:
        total += _ring(layout.expert_shard_degree) * per_param * expert_params
    return AxisTraffic("dp", name, layout.shard_degree, total)


def _passes(recompute: Recompute, attention_core: bool = False) -> int:
    extra = recompute in (Recompute.FULL, Recompute.SQRT) or (
        attention_core and recompute is Recompute.SELECTIVE
    )
    return 2 + int(extra)


def tp_traffic(
    arch: Architecture, num_layers: int, layout: Layout, training: TrainingSpec
) -> AxisTraffic:
    """Tensor-parallel traffic: per layer, per micro-batch, per pass, 2 all-gathers + 2
    reduce-scatters of ``β·S_tok·h`` (sequence parallel) or 2 all-reduces (without), the same
    bytes: ``4·(t−1)/t·β·S_tok·h``. Korthikanti et al. 2022 §4.2.2.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, TrainingSpec
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1)
    >>> tp_traffic(arch, 1, Layout(tp=2), t).bytes_per_step == 2 * 4 * Fraction(1, 2) * 2 * 4 * 8
    True
    """
    if layout.tp == 1:
        return AxisTraffic("tp", "none", 1, Fraction(0))
    m = layout.num_microbatches(training.global_batch_size)
    tokens = Fraction(training.seq_len, layout.cp) * layout.micro_batch_size
    per_pass = 4 * _ring(layout.tp) * training.activation_bytes * tokens * arch.hidden_size
    name = "all-gather + reduce-scatter" if layout.sp else "all-reduce"
    total = per_pass * _passes(layout.recompute) * num_layers * m
    return AxisTraffic("tp", name, layout.tp, total)


def pp_traffic(hidden_size: int, layout: Layout, training: TrainingSpec) -> AxisTraffic:
    """Pipeline traffic of a middle stage: per micro-batch (and per model chunk with
    interleaving) one activation forward and one gradient backward of ``β·S_tok·h/tp`` bytes
    (scatter/gather over tp; Narayanan et al. 2021 §4.1).

    Examples
    --------
    >>> from trainplan.model.specs import TrainingSpec
    >>> t = TrainingSpec(seq_len=4, global_batch_size=8)
    >>> pp_traffic(8, Layout(pp=2), t).bytes_per_step
    Fraction(1024, 1)
    """
    if layout.pp == 1:
        return AxisTraffic("pp", "none", 1, Fraction(0))
    m = layout.num_microbatches(training.global_batch_size)
    tokens = Fraction(training.seq_len, layout.cp) * layout.micro_batch_size
    one = training.activation_bytes * tokens * hidden_size / layout.tp
    return AxisTraffic(
        "pp", "send/recv (point-to-point)", layout.pp, 2 * one * m * layout.virtual_stages
    )


def cp_traffic(
    arch: Architecture, num_layers: int, layout: Layout, training: TrainingSpec
) -> AxisTraffic:
    """Context-parallel ring attention: per layer, per micro-batch, each rank passes its K and V
    chunk around the ring, cp − 1 hops of ``β·S_tok·(K + V dims)/tp`` (g KV heads of d for MHA/GQA;
    MLA exchanges the expanded a·(d_qk) keys and a·d_v values). Backward sends K, V again and
    their gradients: 2× the forward; a recomputed forward (full, √n, and selective, which
    recomputes the attention core) sends it once more. Liu et al. 2023 (Ring Attention);
    Llama 3 §3.3.2 all-gathers K/V instead, the same bytes.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, TrainingSpec
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> t = TrainingSpec(seq_len=8, global_batch_size=1)
    >>> cp_traffic(arch, 1, Layout(cp=2), t).bytes_per_step
    Fraction(384, 1)
    """
    if layout.cp == 1:
        return AxisTraffic("cp", "none", 1, Fraction(0))
    m = layout.num_microbatches(training.global_batch_size)
    tokens = Fraction(training.seq_len, layout.cp) * layout.micro_batch_size
    if arch.attention is AttentionKind.MLA:
        assert arch.mla is not None
        dims = arch.num_attention_heads * (
            arch.mla.qk_nope_head_dim + arch.mla.qk_rope_head_dim + arch.mla.v_head_dim
        )
    else:
        dims = 2 * arch.kv_heads * arch.dim_per_head
    forward = (layout.cp - 1) * training.activation_bytes * tokens * Fraction(dims, layout.tp)
    passes = 1 + 2 + (_passes(layout.recompute, attention_core=True) - 2)
    total = forward * passes * num_layers * m
    return AxisTraffic("cp", "ring send/recv of K, V (ring attention)", layout.cp, total)


def ep_traffic(
    arch: Architecture, num_moe_layers: int, layout: Layout, training: TrainingSpec
) -> AxisTraffic:
    """Expert-parallel all-to-all: per MoE layer, per micro-batch, dispatch and combine in
    forward and again in backward (and in a recomputed forward), each sending the (ep−1)/ep of
    the ``k·T·h`` routed token copies that go to other ranks (uniform routing), ``T`` = tokens on
    this GPU (``S_tok/tp`` with sequence parallelism). Lepikhin et al. 2020 (GShard) §2;
    DeepSeek-V3 §3.2.2.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, MoESpec, TrainingSpec
    >>> arch = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32,
    ...     vocab_size=16, moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=16))
    >>> t = TrainingSpec(seq_len=4, global_batch_size=2)
    >>> ep_traffic(arch, 1, Layout(dp=2, ep=2), t).bytes_per_step
    Fraction(256, 1)
    """
    if layout.ep == 1 or arch.moe is None:
        return AxisTraffic("ep", "none", 1, Fraction(0))
    m = layout.num_microbatches(training.global_batch_size)
    tokens = (
        Fraction(training.seq_len, layout.cp)
        * layout.micro_batch_size
        / (layout.tp if layout.sp else 1)
    )
    one = (
        _ring(layout.ep)
        * arch.moe.experts_per_token
        * tokens
        * arch.hidden_size
        * training.activation_bytes
    )
    total = 2 * one * _passes(layout.recompute) * num_moe_layers * m
    return AxisTraffic("ep", "all-to-all (dispatch + combine)", layout.ep, total)
