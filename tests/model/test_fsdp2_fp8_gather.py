"""torchao's FP8 all-gather under ``fsdp2`` (torchtitan's ``enable_fsdp_float8_all_gather`` with
``precompute_float8_dynamic_scale_for_fsdp``; ``fp8_param_gather``, :func:`model.fp8_gathers.
fp8_param_gathers`): each ``Float8Linear`` weight's ``fsdp_pre_all_gather`` casts the FP32 shard
to FP8 and FSDP2 gathers the ``uint8`` bytes (pytorch/ao 36027d82d ``torchao/float8/
fsdp_utils.py``); the forward and backward use the gathered FP8 weight as it is
(``float8_linear.py``: ``tensor_already_casted_to_fp8``). Every figure derived by hand below,
Llama 3 8B (torchtitan's llama3 float8 configs leave the output layer out) on 8 H100s."""

from __future__ import annotations

from trainplan.api import Case
from trainplan.model.memory import fp8_unit_cut
from trainplan.model.roofline import RooflineParams
from trainplan.model.torchao_rates import FP8_GATHER_CAST_BYTES, TorchaoFp8, cast_seconds

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
    (218,112,000), so the two units FSDP2 holds at once (and its all-gather stream's pool) stay
    2 · 2 · 525,336,576 = 2,101,346,304 B."""
    assert LINEAR == 6_979_321_856
    on, off = _pair(zero_stage=3)
    assert _dp(off).bytes_per_step - _dp(on).bytes_per_step == 2 * 6_106_906_624 == 12_213_813_248
    assert 8 * 6_106_906_624 == 7 * LINEAR
    assert "linear weights gathered in fp8" in _dp(on).collective
    assert "fp8" not in _dp(off).collective
    assert on.peak.state.gathered_bytes == off.peak.state.gathered_bytes == 2_101_346_304
    assert on.peak.stream_pool_bytes == off.peak.stream_pool_bytes == 2_101_346_304
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
    796,983,296 − 525,336,576 = 271,646,720 B narrower, two held: 543,293,440 B."""
    assert fp8_unit_cut(2, 262_668_288, 398_491_648, 398_458_880) == 271_646_720
    opts = {**BASE, "num_gpus": 64, "dp": 8, "tp": 8, "global_batch_size": 64, "zero_stage": 3}
    on = Case.of("llama3-405b", "H100-SXM", **opts, fp8_param_gather=True).evaluate()
    off = Case.of("llama3-405b", "H100-SXM", **opts, fp8_param_gather=False).evaluate()
    assert off.peak.state.gathered_bytes - on.peak.state.gathered_bytes == 543_293_440
    assert off.peak.stream_pool_bytes - on.peak.stream_pool_bytes == 543_293_440


def test_a_pipeline_stage_holds_its_gathered_linear_weights_in_fp8():
    """pp 4 under 1F1B, ZeRO-2 (torchtitan's "never" reshard with pp > 1): each rank holds its
    8 layers' weights whole through the step, the linear ones at 1 B — 8 · 218,103,808 =
    1,744,830,464 B less than BF16."""
    opts = {**BASE, "num_gpus": 16, "dp": 4, "pp": 4, "global_batch_size": 64, "zero_stage": 2}
    on = Case.of("llama3-8b", "H100-SXM", **opts, fp8_param_gather=True).evaluate()
    off = Case.of("llama3-8b", "H100-SXM", **opts, fp8_param_gather=False).evaluate()
    assert LINEAR // 32 == 218_103_808
    assert off.peak.state.weights_bytes - on.peak.state.weights_bytes == 8 * 218_103_808
