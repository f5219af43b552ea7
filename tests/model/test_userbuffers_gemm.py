"""Transformer Engine's userbuffers GEMMs (model/userbuffers_gemm.py, model/op_time.py
``_linear``): each overlapped GEMM on the SMs its communicator leaves it, in its chunks.

Sources: NVIDIA/TransformerEngine d0067d0da ``transformer_engine/pytorch/module/base.py``
``get_default_config`` (ring exchange: 1 SM, no margin, tp chunks; pipeline and bulk: 16 SMs with
the margin, 4 splits) and ``comm_gemm_overlap.cpp`` (``_math_sms = sm_count − num_comm_sm``
under ``set_sm_margin``; ``split_overlap_rs`` cuts the output's columns, ``CommOverlapP2PBase::
split_overlap_ag`` / ``_rs`` the rows, the latter ending with ``reduce_bf16``); Megatron Bridge
97ad8cc6f ``comm_overlap.py``; NeMo-Framework-Launcher 8325688d ``conf/training/tp_overlap``.

The hand derivations below are Llama 3 70B's layer at tp 4, s 8192, b 1, BF16, on an H100 SXM:
peak 989.4 TFLOP/s, e_GEMM 0.5725 (fitted), HBM 3.35 TB/s × 0.9, t_kernel 3 µs, 132 SMs; the
depth rule k₀ = 0.5725 · 989.4e12 / (0.9 · 3.35e12) = 187.87.
"""

from __future__ import annotations

import pytest

from trainplan.model.errors import InputError
from trainplan.model.op_rates import deployed_params
from trainplan.model.op_time import Clock, dgrad_seconds, op_seconds, wgrad_seconds
from trainplan.model.ops import LayerShape, layer_ops
from trainplan.model.roofline import Collective, LinkTime, collective_seconds
from trainplan.model.userbuffers_gemm import UbGemm, check_ub_config, ub_sm_share, userbuffers_for
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model

PEAK, K0, T_KERNEL = 989.4e12, 0.5725 * 989.4e12 / (0.9 * 3.35e12), 3e-6
TILE = 256 * 128  # DeepGEMM's tile for every output below (model.gemm_shapes.deepgemm_blocks)
_P = deployed_params("H100-SXM")


def _e(k: float) -> float:
    return 0.5725 * k / (k + K0)


def _ops():
    arch = get_model("llama3-70b").model.arch
    ops = {
        o.name: o for o in layer_ops(LayerShape(arch, False, 8192, 1, 4, sequence_parallel=True))
    }
    p = deployed_params("H100-SXM")
    plain = Clock(PEAK, 3.35e12, p)
    return ops, plain, lambda cfg: Clock(PEAK, 3.35e12, p, userbuffers=userbuffers_for(cfg, 4))


def test_configs_resolve_as_the_code_sets_them():
    """Transformer Engine's defaults at tp 4: the four ring exchanges in 4 row chunks on every SM
    (no margin), the two pipelined forwards in 4 column chunks and the four bulk GEMMs whole,
    each without 16 SMs; before Transformer Engine 2.0 (``te-1``) no margin. Megatron Bridge's
    FP8 Llama 3 70B config: ``proj_fprop`` by ring exchange on 1 SM with the margin, ending
    with the sum of the partial chunks; its bulk overlaps without margin. The NeMo launcher's
    Llama 2 70B file aggregates ``fc2_dgrad``: 2 chunks of two."""
    te = userbuffers_for("te", 4)
    assert te.gemm("attn_in", 0) == UbGemm(4, "rows", 0, False)
    assert te.gemm("attn_out", 0) == UbGemm(4, "cols", 16, False)
    assert te.gemm("mlp_in", 1) == te.gemm("mlp_in", 2) == UbGemm(1, "", 16, False)
    assert te.gemm("attn_out", 1) == UbGemm(4, "rows", 0, False)
    assert te.gemm("attn_out", 2) is None and te.gemm("mlp_out", 2) is None
    te1 = userbuffers_for("te-1", 4)  # every SM at launch, the kernel's 16 held beside
    assert te1.gemm("attn_out", 0) == UbGemm(4, "cols", 0, False, 16)
    assert te1.gemm("attn_in", 2) == UbGemm(1, "", 0, False, 16)
    assert te1.gemm("attn_in", 0) == UbGemm(4, "rows", 0, False, 0)  # copy engine
    fp8 = userbuffers_for("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192", 4)
    assert fp8.gemm("attn_out", 0) == UbGemm(4, "rows", 1, True)
    assert fp8.gemm("attn_in", 2) == UbGemm(1, "", 0, False, 24)  # BulkOverlapCfg(num_sm=24)
    assert fp8.gemm("mlp_in", 1) == UbGemm(1, "", 0, False, 2)
    nemo = userbuffers_for("ub_cfg_h100_h8192_tp4_mbs1_seqlen4096", 4)
    assert nemo.gemm("mlp_out", 1) == UbGemm(2, "rows", 0, False)
    assert nemo.gemm("mlp_out", 0) == UbGemm(4, "cols", 16, False)
    assert nemo.gemm("attn_out", 0) == UbGemm(4, "cols", 24, False)


def test_unknown_config_is_refused():
    with pytest.raises(InputError, match="tp_comm_overlap_cfg: 'nope' is not one of te, te-1"):
        check_ub_config("nope")


def test_bulk_weight_gradient_on_116_sms_by_hand():
    """The QKV weight gradient, output [8192, 2560], depth 8192: 32 × 20 = 640 tiles. On 132 SMs
    5 waves, the useful share 8192·2560 / (5·132·TILE) = 0.96970; without the bulk overlap's 16
    SMs 6 waves of 116, 8192·2560 / (6·116·TILE) · 116/132 = 0.80808. 2·8192·2560·8192 FLOPs at
    989.4e12 · e(8192) · w + 3 µs: 0.6429 ms → 0.7709 ms (+20 %, more than 132/116 = +13.8 %:
    the sixth wave is 52 % full)."""
    ops, plain, ub = _ops()
    qkv = ops["QKV projection"]
    flops = 2 * 8192 * 2560 * 8192
    w132 = 8192 * 2560 / (5 * 132 * TILE)
    w116 = 8192 * 2560 / (6 * 116 * TILE) * 116 / 132
    assert (w132, w116) == (pytest.approx(0.96970, abs=1e-5), pytest.approx(0.80808, abs=1e-5))
    before = flops / (PEAK * _e(8192) * w132) + T_KERNEL
    after = flops / (PEAK * _e(8192) * w116) + T_KERNEL
    assert wgrad_seconds(qkv, plain) == pytest.approx(before, rel=1e-9)
    assert wgrad_seconds(qkv, ub("te")) == pytest.approx(after, rel=1e-9)
    assert (before * 1e3, after * 1e3) == (
        pytest.approx(0.6429, abs=1e-4),
        pytest.approx(0.7709, abs=1e-4),
    )
    assert wgrad_seconds(qkv, ub("te-1")) == pytest.approx(before, rel=1e-9)  # no margin


def test_pipelined_forward_in_four_column_chunks_by_hand():
    """The output projection's forward, output [8192, 8192], depth 2048 (h/tp). Whole on 132
    SMs: 32 × 64 = 2048 tiles, 16 waves, 8192² / (16·132·TILE) = 0.96970. Pipelined: 4 chunks of
    [8192, 2048] on 116 SMs, 4·32·16 = 2048 tiles in 18 waves of 116 (the chunks share waves:
    three streams), 4·8192·2048 / (18·116·TILE) · 116/132 = 0.86195, and one launch more than
    three streams hide (⌈4/3⌉ − 1). 2·8192²·2048 FLOPs: 0.5494 ms → 0.6207 ms."""
    ops, plain, ub = _ops()
    proj = next(o for o in ops.values() if o.role == "attn_out")
    flops = 2 * 8192 * 8192 * 2048
    whole = 8192 * 8192 / (16 * 132 * TILE)
    chunks = 4 * 8192 * 2048 / (18 * 116 * TILE) * 116 / 132
    assert chunks == pytest.approx(0.86195, abs=1e-5)
    before = flops / (PEAK * _e(2048) * whole) + T_KERNEL
    after = flops / (PEAK * _e(2048) * chunks) + 2 * T_KERNEL
    assert op_seconds(proj, plain) == pytest.approx(before, rel=1e-9)
    assert op_seconds(proj, ub("te")) == pytest.approx(after, rel=1e-9)
    assert (before * 1e3, after * 1e3) == (
        pytest.approx(0.5494, abs=1e-4),
        pytest.approx(0.6207, abs=1e-4),
    )


def test_ring_exchange_reduce_scatter_sums_its_chunks_by_hand():
    """Megatron Bridge's FP8 configs run ``proj_fprop`` by ring exchange on 131 SMs: 4 row chunks
    of [2048, 8192], 8·64·4 = 2048 tiles in 16 waves of 131 (the same count as whole), the
    useful share 4·2048·8192 / (16·131·TILE) · 131/132 = 0.96970, one launch more; then
    ``reduce_bf16`` over the 4 partial chunks: 2·8192²·(1 + 1/4) bytes / (0.9 · 3.35e12) + 3 µs
    = 58.65 µs. 0.5494 → 0.6110 ms (shown here in BF16)."""
    ops, plain, ub = _ops()
    proj = next(o for o in ops.values() if o.role == "attn_out")
    flops = 2 * 8192 * 8192 * 2048
    w = 4 * 2048 * 8192 / (16 * 131 * TILE) * 131 / 132
    reduction = 2 * 8192 * 8192 * 1.25 / (0.9 * 3.35e12) + T_KERNEL
    assert reduction * 1e6 == pytest.approx(58.65, abs=0.01)
    after = flops / (PEAK * _e(2048) * w) + 2 * T_KERNEL + reduction
    got = op_seconds(proj, ub("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"))
    assert got == pytest.approx(after, rel=1e-9)
    assert got * 1e3 == pytest.approx(0.6110, abs=1e-4)
    assert dgrad_seconds(proj, ub("te")) == pytest.approx(dgrad_seconds(proj, plain) + T_KERNEL)


def test_ring_exchange_all_gather_keeps_its_waves_by_hand():
    """The QKV forward by ring exchange: 4 row chunks of [2048, 2560], 8·20·4 = 640 tiles in the
    5 waves of the whole GEMM on every SM: only the one launch three streams do not hide,
    0.6429 → 0.6459 ms."""
    ops, plain, ub = _ops()
    qkv = ops["QKV projection"]
    assert op_seconds(qkv, ub("te")) == pytest.approx(op_seconds(qkv, plain) + T_KERNEL, rel=1e-9)


def test_reviewer_check_llama3_70b_interleaved():
    """``trainplan evaluate --model llama3-70b --gpus 1024 --gpu H100-SXM --global-batch 512
    --dp 64 --tp 4 --pp 4 --zero 1 --recompute none --schedule interleaved --virtual-stages 8
    --micro-batch 1 --set tp_comm_overlap=full``: the six margin GEMMs (QKV and FC1 input and
    weight gradients, the two pipelined forwards) on 116 SMs and the chunks: compute 3.742 s
    without a margin (``te-1``, the chunks' launches alone) → 3.956 s with Transformer Engine's
    defaults, whose step is 4.299 s. ``te-1``'s step was 4.076 s while its bulk and pipeline
    kernels were charged nothing; but its six GEMMs run on every SM beside those kernels' 16,
    and each of their collectives (a = the model's all-gather or reduce-scatter of
    0.75·8192²·2 bytes over tp 4 on NVLink, 0.32598 ms, shorter than its GEMM, so hidden
    whole under either configuration) waits max(φ·a, a − c) = φ·a, φ = 1 − 1/1.314 (16 of 132
    SMs; model.userbuffers_gemm.ub_sm_share): the slowest stage's 20 layers × 6 collectives ×
    m = 8 micro-batches × φ·a = 960 × 0.23896 × 0.32598 ms = 74.78 ms more of tp exposed than
    ``te``'s, × (1 + (pp − 1)/(v·m) = 3/64) = 78.29 ms of step: 4.154 s. The ring exchanges
    (copy engine) add nothing. ``async`` is slower still (the collectives wait). (The steps
    were 32 ms longer — 4.108, 4.186 and 4.331 s — while the dp group's distributed-optimizer
    collectives were charged NVLS's 16 blocks, φ 0.239; its 64 ranks lie 2 on each of 32
    nodes, so NCCL runs them as rings on 8 blocks, φ = 1 − 1/1.177 = 0.150:
    model.nccl_channels.) At v 8 a rank's 20 layers split into chunks of 2 and 3, whose bubble
    is read off Megatron-Core's order (model.pipeline_uneven) rather than (pp − 1)/v of a
    micro-batch: 4.154 → 4.181 s (``te-1``) and 4.299 → 4.328 s (``te``). The dp group's ring
    calls then charged every step the network's 14 µs; NCCL's model charges only its 31 steps
    between nodes so, 8.4 + 31 × 14 + 32 × 3.4 = 551.2 µs a call, not 890.4
    (model.nccl_latency): 4.172 s and 4.318 s. NCCL's tuner (model.nccl_tuner) runs those
    calls, hundreds of MB a rank, as the ring in LL128, 14 + 31 × 4.0 + 32 × 1.9 = 198.8 µs a
    call at min(0.92 × 96, 4 × 36.7) = 88.32 GB/s on the 2 NICs: 4.167 s and 4.313 s."""
    layout = dict(model="llama3-70b", num_gpus=1024, device="H100-SXM", global_batch_size=512,
                  dp=64, tp=4, pp=4, zero_stage=1, recompute="none", schedule="interleaved",
                  virtual_stages=8, micro_batch_size=1, tp_comm_overlap="full")  # fmt: skip
    te = Case.of(**layout).evaluate()
    te1 = Case.of(**layout, tp_comm_overlap_cfg="te-1").evaluate()
    sent = 0.75 * 8192 * 8192 * 2
    a = collective_seconds(Collective.REDUCE_SCATTER, 4, sent, LinkTime(450e9, True), _P)
    assert a == collective_seconds(Collective.ALL_GATHER, 4, sent, LinkTime(450e9, True), _P)
    assert a * 1e3 == pytest.approx(0.32598, abs=1e-5)
    charge = 960 * (1 - 1 / 1.314) * a
    tp1, tp0 = (next(r for r in e.traffic if r.traffic.axis == "tp") for e in (te1, te))
    assert tp1.seconds == tp0.seconds
    assert tp1.exposed_seconds == pytest.approx(tp0.exposed_seconds + charge, rel=1e-9)
    assert charge * 1e3 == pytest.approx(74.78, abs=0.01)
    assert 4.076 + charge * (1 + 3 / 64) == pytest.approx(4.154, abs=1e-3)  # equal chunks
    # 4.167 and 4.313 s before the whole gradient buffer was zeroed at the step
    # (model.terms.optimizer_time.whole_buffer_zeroing_bytes)
    assert te1.step_s == pytest.approx(4.173, abs=1e-3)
    assert te.step_s == pytest.approx(4.319, abs=1e-3)
    assert Case.of(**{**layout, "tp_comm_overlap": "async"}).evaluate().step_s > te.step_s


def test_bulk_kernel_without_margin_costs_its_measured_phi():
    """The SMs a margin-less bulk kernel holds, by the measured rule (model.comm_sms
    held_sm_share): Megatron Bridge's FP8 Llama 3 70B config on an H100 holds 24 SMs beside the
    QKV weight gradient (φ(24) = 1 − 1/1.350 = 0.25926) and 2 beside the FC1 input gradient
    (0.15038 · 2/8 = 0.03760, from φ = 0 at none); its pipelined forwards take their SMs at
    launch (ring exchange on 1 SM with the margin) and hold none beside. On a B200 (148 SMs)
    the B200 config's 32 of the QKV weight gradient are 32·132/148 = 28.54 H200 blocks:
    0.25926 + (4.54/8)·(0.35149 − 0.25926) = 0.31160."""
    h100 = userbuffers_for("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192", 4)
    assert ub_sm_share(h100, "attn_in", 2, "H100-SXM") == pytest.approx(1 - 1 / 1.350)
    assert ub_sm_share(h100, "mlp_in", 1, "H100-SXM") == pytest.approx(0.03760, abs=1e-5)
    assert ub_sm_share(h100, "attn_out", 0, "H100-SXM") == 0.0
    assert ub_sm_share(h100, "attn_out", 2, "H100-SXM") == 0.0  # external: no overlap
    b200 = userbuffers_for("userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192", 4)
    assert ub_sm_share(b200, "attn_in", 2, "B200") == pytest.approx(0.31160, abs=1e-5)
    assert ub_sm_share(userbuffers_for("te", 4), "attn_in", 2, "B200") == 0.0  # the margin
    assert ub_sm_share(None, "attn_in", 2, "H100-SXM") == 0.0
