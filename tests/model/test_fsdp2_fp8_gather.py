"""torchao's FP8 all-gather under ``fsdp2`` (torchtitan's ``enable_fsdp_float8_all_gather`` with
``precompute_float8_dynamic_scale_for_fsdp``; ``fp8_param_gather``, :func:`model.fp8_gathers.
fp8_param_gathers`): each ``Float8Linear`` weight's ``fsdp_pre_all_gather`` casts the FP32 shard
to FP8 and FSDP2 gathers the ``uint8`` bytes (pytorch/ao 36027d82d ``torchao/float8/
fsdp_utils.py``); the forward and backward use the gathered FP8 weight as it is
(``float8_linear.py``: ``tensor_already_casted_to_fp8``). Every figure derived by hand below,
Llama 3 8B (torchtitan's llama3 float8 configs leave the output layer out) on 8 H100s."""

from __future__ import annotations

import pytest

from trainplan.api import Case
from trainplan.model.errors import LayoutError
from trainplan.model.memory import fp8_unit_cut
from trainplan.model.roofline import RooflineParams
from trainplan.model.terms.split_key import SplitKey
from trainplan.model.terms.stage_params import fp8_gather_units
from trainplan.model.torchao_rates import FP8_GATHER_CAST_BYTES, TorchaoFp8, cast_seconds
from trainplan.scenarios.catalogue import get_model

LINEAR = 32 * (4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336)
"""Llama 3 8B's block linear weights: 32 × (Q 4096², K and V 4096·1024, O 4096², the SwiGLU
MLP's three 4096 × 14336): 6,979,321,856 elements. The embedding and output layer
(128,256 × 4,096 each) and the norms stay at the BF16 weight bytes."""

BASE = {"framework": "fsdp2", "dp": 8, "num_gpus": 8, "micro_batch_size": 1,
        "global_batch_size": 8, "seq_len": 8192, "precision": "fp8",
        "fp8_recipe": "tensorwise"}  # fmt: skip


def _pair(**options):
    on = Case.of("llama3-8b", "H100-SXM", **BASE, **options, fp8_param_gather=True).evaluate()
    off = Case.of("llama3-8b", "H100-SXM", **BASE, **options, fp8_param_gather=False).evaluate()
    return on, off


def _dp(estimate):
    return next(r.traffic for r in estimate.traffic if r.traffic.axis == "dp")


def test_zero3_gathers_the_linear_weights_at_a_byte():
    """ZeRO-3 (reshard_after_forward=True), one micro-batch: the forward's and the backward's
    all-gathers each send the ring share 7/8 of every linear weight at 1 B instead of 2:
    7/8 · 6,979,321,856 = 6,106,906,624 B less a gather, 12,213,813,248 B less the step; the
    FP32 reduce-scatter unchanged. The gathered units do not shrink: the largest unit is the
    embedding (128,256 · 4,096 = 525,336,576 elements, BF16), larger than a whole layer
    (218,112,000), so the two units FSDP2 holds at once stay 2 · 2 · 525,336,576 =
    2,101,346,304 B, and its all-gather stream's pool, with the next unit's copy-in buffer
    (2 · 525,336,576 / 8 = 131,334,144), 2,232,680,448 B."""
    assert LINEAR == 6_979_321_856
    on, off = _pair(zero_stage=3)
    assert _dp(off).bytes_per_step - _dp(on).bytes_per_step == 2 * 6_106_906_624 == 12_213_813_248
    assert 8 * 6_106_906_624 == 7 * LINEAR
    assert "linear weights gathered in fp8" in _dp(on).collective
    assert "fp8" not in _dp(off).collective
    assert on.peak.state.gathered_bytes == off.peak.state.gathered_bytes == 2_101_346_304
    assert on.peak.stream_pool_bytes == off.peak.stream_pool_bytes == 2_232_680_448
    assert on.peak.state.weights_bytes == off.peak.state.weights_bytes  # the FP32 shard stays


def test_zero2_holds_the_gathered_linear_weights_in_fp8():
    """ZeRO-2 (reshard_after_forward=False) holds the whole unsharded weights between forward
    and backward: the linear ones are ``Float8TrainingTensor`` (1 B), 6,979,321,856 B less;
    one gather a micro-batch, 6,106,906,624 B less on the wire."""
    on, off = _pair(zero_stage=2)
    assert off.peak.state.weights_bytes - on.peak.state.weights_bytes == LINEAR
    assert _dp(off).bytes_per_step - _dp(on).bytes_per_step == 6_106_906_624


def test_the_copy_outs_move_two_bytes_an_fp8_element():
    """FSDP2's all-gather copy-out (``split_with_sizes_copy`` on the compute stream) reads and
    writes 1 B an FP8 element instead of 2: 2 B less a gather an element. ZeRO-3 gathers twice
    a micro-batch (4 B less an element), ZeRO-2 once (2 B less); the same HBM rate times both,
    so the savings are in the ratio 2 exactly. Of ZeRO-3's 14 B an element (two copy-outs of
    4 B and the reduce-scatter copy-in of 6 B, every parameter), FP8 takes 4 B off the
    linear ones: 4 · 6,979,321,856 / (14 · 8,030,261,248) of the term."""
    on3, off3 = _pair(zero_stage=3)
    on2, off2 = _pair(zero_stage=2)
    saved3 = off3.time_terms.grad_accumulation_s - on3.time_terms.grad_accumulation_s
    saved2 = off2.time_terms.grad_accumulation_s - on2.time_terms.grad_accumulation_s
    assert abs(saved3 / saved2 - 2) < 1e-9
    assert abs(saved3 - 4 * LINEAR / 2.97e12) < 1e-12  # at the STREAM triad's 2.97 TB/s
    share = 4 * LINEAR / (14 * 8_030_261_248)
    assert abs(saved3 / off3.time_terms.grad_accumulation_s - share) < 1e-9


def test_the_precompute_reads_the_shard_once_a_step():
    """``precompute_float8_dynamic_scale_for_fsdp`` after the optimizer step: ``_foreach_norm``
    over the FP32 shards of the linear weights, 4 · 6,979,321,856 / 8 = 3,489,660,928 B on one
    GPU, at the optimizer step's streaming rate (the H100's STREAM triad, 2.97 TB/s, the
    catalogue's 0.887 of 3.35 TB/s): 1.175 ms; its one all-reduce (224 FP32 amaxes, 896 B) not
    counted."""
    assert 4 * LINEAR // 8 == 3_489_660_928
    on, off = _pair(zero_stage=3)
    extra = on.time_terms.optimizer_s - off.time_terms.optimizer_s
    assert abs(extra - 3_489_660_928 / 2.97e12) < 1e-12


def test_the_gemms_no_longer_cast_the_weight():
    """The forward's weight cast (6 B an element: amax read 2, cast read 2, write 1 + 1) and its
    three kernels are gone; the input's and the output gradient's remain. For one 4096 → 14336
    linear at 8,192 tokens on a 3.35 TB/s part at 0.9: 6 · 4096 · 14336 B / (0.9 · 3.35e12)
    + 3 × 3 µs."""
    p = RooflineParams(gemm_efficiency=0.6, hbm_efficiency=0.9, kernel_overhead_s=3e-6)
    plain = TorchaoFp8(1.5)
    gathered = TorchaoFp8(1.5, FP8_GATHER_CAST_BYTES, (2, 2))
    before = cast_seconds(8192, 4096, 14336, 1, 3.35e12, p, plain, 0)
    after = cast_seconds(8192, 4096, 14336, 1, 3.35e12, p, gathered, 0)
    assert abs((before - after) - (6 * 4096 * 14336 / (0.9 * 3.35e12) + 9e-6)) < 1e-15
    for which in (1, 2):  # the input gradient casts the output gradient only; wgrad nothing
        assert cast_seconds(8192, 4096, 14336, 1, 3.35e12, p, plain, which) == cast_seconds(
            8192, 4096, 14336, 1, 3.35e12, p, gathered, which
        )
    on, off = _pair(zero_stage=3)
    assert on.time_terms.compute_s < off.time_terms.compute_s


def test_the_largest_gathered_unit_narrows_only_when_a_layer_is_it():
    """Llama 3 405B at tp 8: a layer (3,187,671,040 linear elements ÷ 8 = 398,458,880, plus
    32,768 replicated norm weights) outweighs the embedding (128,256 · 16,384 ÷ 8 =
    262,668,288). In FP8 the layer's output is 2 · 398,491,648 − 398,458,880 = 398,524,416 B,
    below the BF16 embedding's 525,336,576 B, which becomes the largest: each gathered unit
    796,983,296 − 525,336,576 = 271,646,720 B narrower, two held: 543,293,440 B; the
    all-gather stream's pool, two outputs and the next unit's copy-in buffer (1/8 of one),
    2.125 × 271,646,720 = 577,249,280 B."""
    assert fp8_unit_cut(2, 262_668_288, 398_491_648, 398_458_880) == 271_646_720
    opts = {**BASE, "num_gpus": 64, "dp": 8, "tp": 8, "global_batch_size": 64, "zero_stage": 3}
    on = Case.of("llama3-405b", "H100-SXM", **opts, fp8_param_gather=True).evaluate()
    off = Case.of("llama3-405b", "H100-SXM", **opts, fp8_param_gather=False).evaluate()
    assert off.peak.state.gathered_bytes - on.peak.state.gathered_bytes == 543_293_440
    assert off.peak.stream_pool_bytes - on.peak.stream_pool_bytes == 577_249_280
    assert 2 * 271_646_720 + 271_646_720 // 8 == 577_249_280


def test_a_pipeline_stage_holds_its_gathered_linear_weights_in_fp8():
    """pp 4 under 1F1B, ZeRO-2 (torchtitan's "never" reshard with pp > 1): each rank holds its
    8 layers' weights whole through the step, the linear ones at 1 B — 8 · 218,103,808 =
    1,744,830,464 B less than BF16."""
    opts = {**BASE, "num_gpus": 16, "dp": 4, "pp": 4, "global_batch_size": 64, "zero_stage": 2}
    on = Case.of("llama3-8b", "H100-SXM", **opts, fp8_param_gather=True).evaluate()
    off = Case.of("llama3-8b", "H100-SXM", **opts, fp8_param_gather=False).evaluate()
    assert LINEAR // 32 == 218_103_808
    assert off.peak.state.weights_bytes - on.peak.state.weights_bytes == 8 * 218_103_808


def test_dp_1_is_refused_even_with_cp():
    """torchtitan shards over its ``fsdp`` mesh, dp_shard × cp ranks (1ea5d511f
    ``parallel_dims.py``: ``fsdp = self.dp_shard * self.cp``; ``fsdp_enabled`` is
    ``dp_shard_enabled or cp_enabled``), but ``Float8LinearConverter.__init__`` passes
    ``enable_fsdp_float8_all_gather=parallel_dims.dp_shard_enabled and …`` (dp_shard > 1): at
    dp 1, cp 2 FSDP gathers over the two cp ranks in BF16 and the key would be dropped."""
    opts = {**BASE, "num_gpus": 2, "dp": 1, "cp": 2, "global_batch_size": 1, "zero_stage": 3}
    with pytest.raises(LayoutError) as refused:
        Case.of("llama3-8b", "H100-SXM", **opts, fp8_param_gather=True).evaluate()
    message = str(refused.value)
    assert message.startswith("fp8_param_gather: ") and "\n" not in message
    assert "dp_shard > 1" in message and "not at dp 1" in message
    assert "FSDP shards over the 2 cp ranks there and gathers BF16 weights" in message
    opts = {**opts, "num_gpus": 1, "cp": 1}
    with pytest.raises(LayoutError, match="not at dp 1$"):
        Case.of("llama3-8b", "H100-SXM", **opts, fp8_param_gather=True).evaluate()


def test_dp_2_cp_2_gathers_fp8_over_the_four_fsdp_ranks():
    """dp 2 × cp 2: dp_shard 2 turns the FP8 all-gather on, and FSDP shards over dp_shard × cp
    = 4 ranks, so each ZeRO-3 gather sends the ring share 3/4 of every linear weight a byte
    less: 2 · 3/4 · 6,979,321,856 = 10,468,982,784 B less a micro-batch (one a step here)."""
    opts = {**BASE, "num_gpus": 4, "dp": 2, "cp": 2, "global_batch_size": 2, "zero_stage": 3}
    on = Case.of("llama3-8b", "H100-SXM", **opts, fp8_param_gather=True).evaluate()
    off = Case.of("llama3-8b", "H100-SXM", **opts, fp8_param_gather=False).evaluate()
    assert _dp(on).group_size == 4
    assert _dp(off).bytes_per_step - _dp(on).bytes_per_step == 2 * 3 * LINEAR // 4
    assert 2 * 3 * LINEAR // 4 == 10_468_982_784


MIXTRAL_ATTENTION = 2 * 4096 * 4096 + 2 * 4096 * 1024
"""A Mixtral 8x7B layer's ``Float8Linear`` weights: Q and O 4,096², K and V 4,096 · 1,024
(41,943,040); no shared expert, the router (``router.gate``, 4,096 × 8) filtered, the eight
routed experts (``GroupedExperts``, 8 · 3 · 4,096 · 14,336 = 1,409,286,144) plain parameters."""


def test_a_moe_model_gathers_its_linears_in_fp8_and_its_experts_in_bf16():
    """Mixtral 8x7B on 8 H100s, ZeRO-3, ep 1: torchtitan's ``Float8LinearConverter`` swaps the
    blocks' ``nn.Linear`` modules, the routed experts stay ``GroupedExperts`` in the same
    ``fully_shard`` unit. The dense group's gathers send 2 · 7/8 · 32 · 41,943,040 =
    2,348,810,240 B less; the expert group's (edp) nothing less. The largest gathered unit is a
    layer: 41,943,040 + 8,192 norm + 32,768 router + 1,409,286,144 experts = 1,451,270,144
    elements (the embedding 32,000 · 4,096 is smaller), 41,943,040 B narrower in FP8, two held
    at once: 83,886,080 B less; the all-gather stream's pool (two outputs and the next unit's
    copy-in buffer, 1/8 of one) 2.125 × 41,943,040 = 89,128,960 B less."""
    opts = {**BASE, "seq_len": 4096, "zero_stage": 3}
    on = Case.of("mixtral-8x7b", "H100-SXM", **opts, fp8_param_gather=True).evaluate()
    off = Case.of("mixtral-8x7b", "H100-SXM", **opts, fp8_param_gather=False).evaluate()
    row_on, row_off = ({r.traffic.axis: r.traffic for r in e.traffic} for e in (on, off))
    saved = row_off["dp"].bytes_per_step - row_on["dp"].bytes_per_step
    assert saved == 2 * 7 * 32 * MIXTRAL_ATTENTION // 8 == 2_348_810_240
    assert row_off["edp"].bytes_per_step == row_on["edp"].bytes_per_step
    unit = MIXTRAL_ATTENTION + 8_192 + 32_768 + 8 * 3 * 4096 * 14336
    assert unit == 1_451_270_144 and 32_000 * 4096 < unit
    assert off.peak.state.gathered_bytes == 2 * 2 * unit
    assert off.peak.state.gathered_bytes - on.peak.state.gathered_bytes == 2 * MIXTRAL_ATTENTION
    pool = 2 * MIXTRAL_ATTENTION + MIXTRAL_ATTENTION // 8
    assert off.peak.stream_pool_bytes - on.peak.stream_pool_bytes == pool == 89_128_960
    # the copy-outs: 2 B less an FP8 element a gather, ZeRO-3's two a micro-batch, the
    # attention's only (the experts copy out 2 · 2 B an element as before)
    copy_saved = off.time_terms.grad_accumulation_s - on.time_terms.grad_accumulation_s
    assert abs(copy_saved - 4 * 32 * MIXTRAL_ATTENTION / 2.97e12) < 1e-12
    # the precompute reads the FP32 shard of the converted weights only: 4 B · 32 · 41,943,040 / 8
    extra = on.time_terms.optimizer_s - off.time_terms.optimizer_s
    assert abs(extra - 4 * 32 * MIXTRAL_ATTENTION / 8 / 2.97e12) < 1e-12


def test_a_moe_pipeline_stage_holds_only_its_linears_in_fp8():
    """Mixtral at pp 2 under 1F1B, ZeRO-2 (torchtitan's "never" with pp > 1): each rank holds
    its 16 layers whole through the step; their attention linears at 1 B, 16 · 41,943,040 =
    671,088,640 B less than BF16, the experts' 16 · 1,409,286,144 elements at 2 B still."""
    opts = {**BASE, "seq_len": 4096, "num_gpus": 16, "pp": 2, "global_batch_size": 64}
    opts = {**opts, "zero_stage": 2}
    on = Case.of("mixtral-8x7b", "H100-SXM", **opts, fp8_param_gather=True).evaluate()
    off = Case.of("mixtral-8x7b", "H100-SXM", **opts, fp8_param_gather=False).evaluate()
    assert off.peak.state.weights_bytes - on.peak.state.weights_bytes == 16 * MIXTRAL_ATTENTION


def test_the_largest_unit_of_each_layer_kind():
    """Llama 4 Maverick (dense and MoE layers alternate) at pp 4, ep 128: a stage in the middle
    holds no embedding. A dense layer: attention 2 · 5,120² + 2 · 5,120 · 1,024 = 62,914,560,
    the SwiGLU 3 · 5,120 · 16,384 = 251,658,240, norms 10,240: 314,583,040 elements, of which
    314,572,800 FP8; a MoE layer: attention, norms, router 5,120 · 128 = 655,360, the shared
    expert 3 · 5,120 · 8,192 = 125,829,120 and one routed expert as much: 315,238,400, of which
    attention and shared expert FP8, 188,743,680. In BF16 the MoE layer is the largest
    (630,476,800 B); in FP8 it is still (630,476,800 − 188,743,680 = 441,733,120 B against the
    dense layer's 2 · 314,583,040 − 314,572,800 = 314,593,280): 188,743,680 B narrower, not the
    dense layer's 314,572,800 linear elements."""
    m = get_model("llama4-maverick").model
    units = fp8_gather_units(SplitKey(m, 1, 4, 1, 128, False, 1, True, None, 1))
    assert units[1] == (0, 314_583_040, 314_572_800, 315_238_400, 188_743_680)
    assert fp8_unit_cut(2, *units[1]) == 188_743_680
    assert units[0][0] == 202_048 * 5_120 and fp8_unit_cut(2, *units[0]) == 0  # the embedding


def test_the_runtime_unshard_copies_in_fp8_on_the_compute_stream():
    """Interleaved 1F1B on PyTorch's multi-stage runtime, dp 4 × pp 2, v 2, ZeRO-2: each chunk's
    one gather a step is the runtime's ``UNSHARD`` (``unshard(async_op=True)``), whose copy-in
    ``get_all_gather_streams`` leaves on the compute stream. A converted weight's copy-in casts
    the FP32 shard to FP8 (read 4, write 1) and copies it (1 + 1): 7 B a shard element instead
    of BF16's 10 (4 + 2, 2 + 2), 3/4 B less an unsharded element at dp 4; its copy-out 2 B less.
    The busiest stage (16 blocks and the BF16 output layer) holds 16 · 218,103,808 FP8-gathered
    elements: (2 + 3/4) · 3,489,660,928 B less on the step's first micro-batch, at the H100's
    triad 2.97 TB/s."""
    lay = {**BASE, "num_gpus": 8, "dp": 4, "pp": 2, "global_batch_size": 32}
    lay = {**lay, "schedule": "interleaved", "virtual_stages": 2, "zero_stage": 2}
    on = Case.of("llama3-8b", "H100-SXM", **lay, fp8_param_gather=True).evaluate()
    off = Case.of("llama3-8b", "H100-SXM", **lay, fp8_param_gather=False).evaluate()
    saved = off.time_terms.grad_accumulation_s - on.time_terms.grad_accumulation_s
    assert 16 * (LINEAR // 32) == 3_489_660_928
    assert abs(saved - (2 + 3 / 4) * 3_489_660_928 / 2.97e12) < 1e-12
