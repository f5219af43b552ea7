"""DeepSpeed-Ulysses (``deepspeed``, cp > 1) reduces gradients in FP32, derived by hand from
DeepSpeed edaa72212 (model/deepspeed_mechanisms.py, the module's docstring):

* ``engine.py`` ``_configure_distributed_model``: with ``sequence_parallel_size > 1``,
  ``self.communication_data_type = self._config.seq_parallel_communication_data_type``, default
  ``"fp32"`` (``runtime/constants.py``, the unconditional last assignment);
* ZeRO-1/2, ``stage_1_and_2.py`` ``allreduce_bucket``: ``if pg_correctness_test or
  self.sequence_parallel_size > 1: communication_data_type = torch.float32`` whatever the config
  says, then ``tensor_to_allreduce = tensor.to(communication_data_type)``: an FP32 copy of the
  flattened bucket (5e8 × 4 B) beside it, and 4 B a gradient element on the wire;
* ZeRO-3, ``stage3.py``: the IPG buffer ``torch.empty(self.reduce_bucket_size, dtype=dtype)``
  in the communication dtype (5e8 × 4 B, persistent), reduce-scattered in it; a gradient larger
  than the bucket is copied ``g.to(communication_data_type)`` (``__avg_scatter_grads``) on the
  side stream;
* ``BF16_Optimizer`` (ZeRO-1, FP32 gradients), ``engine.py`` ``allreduce_bucket``: the FP32
  buffer is already in the communication dtype, so no BF16 cast (``step_full`` 0) and 4 B on
  the wire.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

import trainplan
from trainplan.model.mechanisms import mechanism

P = 8_030_261_248
"""Llama 3 8B's parameters, all on each GPU at tp = pp = 1."""

R = 500_000_000
"""DeepSpeed's ``reduce_bucket_size`` default, elements."""

ULYSSES_8B = dict(
    model="llama3-8b", num_gpus=32, gpu="H100-SXM", framework="deepspeed", dp=16, cp=2,
    cp_kind="ulysses", recompute="full", micro_batch_size=1, global_batch_size=256,
    seq_len=16384,
)  # fmt: skip
"""The layout: dp 16 × cp 2, m = 256 / 16 = 16 micro-batches, D = dp·cp = 32."""


def _evaluate(zero: int, **more: object):
    e = trainplan.evaluate(**ULYSSES_8B, zero_stage=zero, **more)
    assert e.stages[0].dense_params == P and e.num_microbatches == 16
    return e


def test_zero2_all_reduces_fp32_and_holds_the_fp32_cast():
    """ZeRO-2, m = 16: 16 all-reduces of FP32 gradients (2 × 4 B) + the BF16 weights' all-gather
    once (2 B): (16 × 8 + 2) × 31/32 × 8,030,261,248 = 1,011,311,025,920 B (was 16 × 4 + 2 = 66
    B a parameter: 513,432,329,792 B). Buffers in backward: the IPG bucket 5e8 × 2 B + its
    flattened copy 5e8 × 2 B + the copy's FP32 cast 5e8 × 4 B = 4e9 B (was 2e9). The step: 25.366
    → 26.662 s (the all-reduce exposed, overlap_comm off below ZeRO-3), and the 16 backwards'
    copies into the IPG bucket, 16 × 4 B × 8,030,261,248 at the H100's triad (3.35 TB/s ×
    0.8866) = 0.173 s (model/deepspeed_accumulate.py): 26.835 s with every ring step at the
    network's 14 µs. NCCL's latency by placement (32 ranks, 8 on each of 4 nodes): the
    all-reduce's tree 8.4 + 2·(7·4.0 + log2i(4)·14) = 120.4 µs (the tree's own NVLink hop, 4.0
    µs; 112.0 with the ring's 3.4), not 148.4; the all-gather 8.4 + 3·14 + 28·3.4 = 145.6 µs,
    not 442.4: 16 × 17 all-reduces and 17 all-gathers (⌈P / 5e8⌉ buckets) save 272 × 28.0 + 17 ×
    296.8 µs = 12.66 ms: 26.822 s (26.835 s rounded, less 12.66 ms; 26.823 s to the ns). NCCL's
    tuner (model.nccl_tuner) weighs each algorithm whole: a bucket's all-reduce, 8,030,261,248
    / 17 FP32 elements (1.89 GB), runs the ring in Simple, its latency (8.4 + 2·3·14 + 56·3.4)
    × 1.4 (the ring's plateau) = 395.92 µs and the bytes at the ring's 360 GB/s (below), where the
    tree's 120.4 µs came with min(0.92 × 360, 8 × 36.0) × 0.5 = 144 GB/s (2 × 31/32 of the buffer
    at 360 against the whole buffer at 144) and the ring in LL128 (144.4 µs) with
    min(0.92 × 360, 8 × 36.7) = 293.6 GB/s; the all-gathers stay the ring in Simple. So the
    272 all-reduces pay 395.92 − 120.4 = 275.52 µs more each, 74.94 ms: 26.898 s. DeepSpeed
    ZeRO-2's own optimizer-step passes (model.step_passes: the overflow check, the norm through
    ``.double()``, the partition's flatten and FP32 cast, the clip's ``mul_``, the master's second
    read, no zeroing: 60 B more an element with BF16 gradients) over 8,030,261,248 / 32 at
    2.97 TB/s: 5.07 ms more, 26.903 s. The ring across nodes moves at the slower of its NICs and
    its NVLink (model/nvlink_bound.py ``ring_busbw``; NCCL's search keeps the graph every link it
    crosses fits): min(8 × 50 × 0.96, 450 × 0.8) = min(384, 360) = 360 GB/s, NCCL's 8 channels at
    45 GB/s through the H100's 18 × 20.6 GB/s of NVLink, not the NICs' 384. The 1,011,311,025,920
    B all exposed at 360 instead of 384 GB/s: × (1/360 − 1/384) ns a byte = 0.1756 s more,
    27.078 s (26.903 s with the ring at the NICs' 384)."""
    e = _evaluate(2)
    row = e.traffic[0].traffic
    assert row.collective == "all-reduce (fp32) per micro-batch + all-gather per step"
    assert row.bytes_per_step == Fraction(31, 32) * P * 130 == 1_011_311_025_920
    assert e.stages[0].state.buffers_bytes == 2 * R * 2 + R * 4 == 4 * 10**9
    assert round(e.time_terms.grad_accumulation_s, 3) == 0.173
    saved = (16 * 17 * (148.4 - 120.4) + 17 * (442.4 - 145.6)) * 1e-6
    assert saved == pytest.approx(12.66e-3, abs=1e-5)
    assert 26.835 - saved == pytest.approx(26.823, abs=1e-3)
    plateau = (8.4 + 2 * 3 * 14 + 56 * 3.4) * 1.4 - 120.4
    assert plateau == pytest.approx(275.52)
    own = 60 * 8_030_261_248 / 32 / 2.97e12
    nvlink = 1_011_311_025_920 * (1 / 360e9 - 1 / 384e9)  # the ring at NVLink's 360, not 384
    assert nvlink == pytest.approx(0.17557, abs=1e-5)
    assert e.step_s == pytest.approx(26.823 + 16 * 17 * plateau * 1e-6 + own + nvlink, abs=1e-3)
    assert round(e.step_s, 3) == 27.078


def test_zero2_ignores_the_key_allreduce_bucket_forces_fp32():
    """``seq_parallel_communication_data_type=bf16`` changes nothing under ZeRO-1/2:
    ``allreduce_bucket`` sets FP32 itself when ``sequence_parallel_size > 1``."""
    a, b = _evaluate(2), _evaluate(2, seq_parallel_communication_data_type="bf16")
    assert a.traffic[0].traffic.bytes_per_step == b.traffic[0].traffic.bytes_per_step
    assert a.peak.allocated_bytes == b.peak.allocated_bytes


def test_zero3_bucket_and_reduce_scatter_in_the_communication_dtype():
    """ZeRO-3, m = 16: per micro-batch an FP32 reduce-scatter (4 B) and two BF16 all-gathers
    (2 × 2 B): 16 × 8 × 31/32 × P = 995,752,394,752 B (bf16: 16 × 6, 746,814,296,064 B) were
    every pass to gather every weight. DeepSpeed's coordinator does not gather (tests/model/
    test_zero_gather_calls.py, Llama 3 8B at tp 1) the output weight after the step's first
    forward, the embedding in the later forwards, nor the last two layers' 436,207,616
    elements it keeps into the backward: 525,336,576 + 436,207,616 in the first micro-batch,
    3 × 525,336,576 + 436,207,616 in the others, (961,544,192 + 15 × 2,012,217,344) / 16 =
    1,946,550,272 elements a micro-batch, 2 B each: 16 × 31/32 × (8P − 2 × 1,946,550,272) =
    935,409,336,320 B. The persistent IPG bucket 5e8 × 4 = 2e9 B (bf16: 1e9), in backward and
    at the step."""
    fp32, bf16 = _evaluate(3), _evaluate(3, seq_parallel_communication_data_type="bf16")
    unfetched = (961_544_192 + 15 * 2_012_217_344) // 16
    assert unfetched == 1_946_550_272
    assert fp32.traffic[0].traffic.bytes_per_step == Fraction(31, 32) * 16 * (8 * P - 2 * unfetched)
    assert bf16.traffic[0].traffic.bytes_per_step == Fraction(31, 32) * 16 * (6 * P - 2 * unfetched)
    assert fp32.traffic[0].traffic.bytes_per_step == 935_409_336_320
    assert fp32.stages[0].state.buffers_bytes == R * 4
    assert bf16.stages[0].state.buffers_bytes == R * 2
    assert fp32.stages[0].state.step_bytes - bf16.stages[0].state.step_bytes == R * 2


def test_bf16_optimizer_reduces_its_fp32_buffer_without_a_cast():
    """``BF16_Optimizer`` (ZeRO-1, ``gradient_dtype`` fp32): all-reduce 2 × 4 B + all-gather 2 B
    = 10 B a parameter (was 6) and no 2 B/param BF16 copy at the step (was 2 × 8,030,261,248 =
    16,060,522,496 B); ``bf16`` gives both back."""
    u, b = (mechanism("deepspeed", 1, 2, 4, sp_comm=c) for c in (4, 2))
    assert (u.reduce_bytes, u.step_full, u.traffic_terms()) == (4, 0, (10, 0))
    assert (b.reduce_bytes, b.step_full, b.traffic_terms()) == (2, 2, (6, 0))
    fp32 = _evaluate(1, gradient_dtype="fp32")
    bf16 = _evaluate(1, gradient_dtype="fp32", seq_parallel_communication_data_type="bf16")
    assert fp32.traffic[0].traffic.bytes_per_step == Fraction(31, 32) * P * 10
    assert bf16.stages[0].state.step_bytes - fp32.stages[0].state.step_bytes == 2 * P


def test_cp_1_keeps_the_engine_dtype():
    """Without sequence parallelism the engine's own dtype (BF16): the mechanism is unchanged."""
    assert mechanism("deepspeed", 2, sp_comm=None) == mechanism("deepspeed", 2)
    assert mechanism("deepspeed", 2).reduce_bytes == 2


def test_llama3_70b_zero3_cp2_allocated_and_reserved():
    """The search answer, Llama 3 70B on 64 GPUs, dp 32 × cp 2, ZeRO-3, full
    recomputation, s 32,768: the FP32 IPG bucket adds 5e8 × 2 B = 1e9 B to the allocated peak
    (76.14 → 77.14 GB with the communicators, 77.45 with the dp-only group below); the side
    stream's pool holds the output layer's FP32 copy, 128,256 × 8,192 × 4 = 4,202,692,608 B,
    its partition cast back in a 33,554,432 B segment and a 2 MiB small-pool segment:
    4,238,344,192 B (was 1,413,480,448;
    model/terms/reduce_pool.py ``stage_reduce_pools``), so reserved 76.33 → 80.16 GB (81.69 with
    the communicators). NCCL's communicators by placement with their channels' set-up
    (model/terms/comm_memory.py): the dp·cp ring, 64 ranks at 8 a node, 16 × 12 + (16 × 3 + 2) ×
    2 = 292 MiB; Ulysses' one all-to-all peer in the node, 32 NVLink channels, 384 + (32 × 3 +
    2) × 2 = 580; ZeRO-3's world barrier, 292; and Megatron-DeepSpeed's dp-only group, which
    ``loss_func`` reduces the loss over under Ulysses (``_DATA_PARALLEL_GROUP``, a ``new_group``
    apart from ZeRO's dp·cp group; model/terms/comm_groups.py data_rings): 32 ranks every
    second GPU, 4 a node on 8 nodes, 16 channels, 292: 1,456 MiB (4 × 32 connections of 12 MiB
    = 1,536 MiB before the set-up was counted, the peak 77,129,121,024 B then; + 12 MiB with
    the set-up, 77,141,703,936 B, and + 292 MiB for the dp-only group: 77,447,888,128 B); and
    NVLink SHARP's credits on the three rings across nodes (≥ 2 ranks a node: 2 MiB each,
    model/terms/nvls_memory.py; the all-to-all's peer none): 1,462 MiB, 77,454,179,584 B.
    DeepSpeed ZeRO-3's gathered weights from the walk of its coordinator
    (model/deepspeed_gathered.py; tests/model/test_deepspeed_offload_grads.py): at tp 1 the
    output weight and the gate-up at the turn, 2 · 1,520,435,200 B, 2 · 905,654,400 =
    1,811,308,800 B below the turn bound's: 75,642,870,784 B; with the recomputed forward in the
    walk (model/deepspeed_trace.py) the last layer's down too, kept from its recomputation for its
    backward, 2 · 234,881,024 = 469,762,048 B more: 76,112,632,832 B; reserved 80.16 → 78.35 →
    78.82 GB (80.35 with the communicators)."""
    common = dict(
        model="llama3-70b", num_gpus=64, gpu="H100-SXM", framework="deepspeed", dp=32, cp=2,
        cp_kind="ulysses", zero_stage=3, recompute="full", micro_batch_size=1,
        global_batch_size=2048, seq_len=32768,
    )  # fmt: skip
    fp32 = trainplan.evaluate(**common).peak
    bf16 = trainplan.evaluate(**common, seq_parallel_communication_data_type="bf16").peak
    assert 128_256 * 8_192 * 4 == 4_202_692_608 == 2_004 * 2**21
    assert fp32.stream_pool_bytes == 4_202_692_608 + 33_554_432 + 2**21 == 4_238_344_192
    assert bf16.stream_pool_bytes == 1_413_480_448
    assert fp32.allocated_bytes - bf16.allocated_bytes == R * 2
    assert fp32.communicator_bytes == (292 + 580 + 292 + 292 + 3 * 2) * 2**20 == 1_533_018_112
    before = 77_129_121_024 + (12 + 292 + 6) * 2**20
    assert before == 77_454_179_584
    assert before - 2 * 905_654_400 == 75_642_870_784
    assert fp32.total_bytes == 75_642_870_784 + 2 * 234_881_024 == 76_112_632_832
    assert round(fp32.total_bytes / 1e9, 2) == 76.11
    # reserved: allocated + the pool (80.16 GB) + 1.53 GB of communicators
    more = R * 2 + 4_238_344_192 - 1_413_480_448
    assert fp32.reserved_total_bytes - bf16.reserved_total_bytes == more == 3_824_863_744
    assert round((fp32.reserved_total_bytes - fp32.communicator_bytes) / 1e9, 2) == 78.82
    assert round(fp32.reserved_total_bytes / 1e9, 2) == 80.35  # 79.88 + 0.47 (the down kept)
