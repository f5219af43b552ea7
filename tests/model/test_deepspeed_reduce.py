"""DeepSpeed ZeRO-1/2's gradient reduction, derived by hand from DeepSpeed edaa7221
``deepspeed/runtime/zero/stage_1_and_2.py`` (model/deepspeed_mechanisms.py, the module's
docstring): ``average_tensor`` puts every slice of the IPG bucket under one
``("allreduce", process_group)`` key while ``use_multi_rank_bucket_allreduce`` (``zero/config.py``
default True since PR #4695, v0.12.4) and ``allreduce_and_scatter`` → ``allreduce_bucket``
all-reduces the flattened bucket: 2 · 2 B a BF16 gradient × (D − 1)/D on the ring. ZeRO-2 does it
every micro-batch (``engine.allreduce_gradients``: "ZeRO stage >= 2 communicates during non
gradient accumulation boundaries as well"), ZeRO-1 at the accumulation boundary only. With the
key false (``--set use_multi_rank_bucket_allreduce=false``) each owner's slices go in one
``dist.reduce`` to it: D reduces, each rank the root of one, (D − 1)/D of the bucket per rank, a
reduce-scatter's bytes."""

from __future__ import annotations

from fractions import Fraction

import pytest

import trainplan
from trainplan.model.mechanisms import mechanism
from trainplan.model.timing import CostOptions

P = 8_030_261_248
"""Llama 3 8B's parameters, all on each GPU at tp = pp = 1."""


def _dp(zero: int, **options: bool) -> tuple[str, Fraction]:
    e = trainplan.evaluate(
        model="llama3-8b", num_gpus=32, gpu="H100-SXM", framework="deepspeed", dp=32,
        zero_stage=zero, micro_batch_size=1, global_batch_size=256, **options,
    )  # fmt: skip
    assert e.stages[0].dense_params == P and e.num_microbatches == 8
    row = e.traffic[0].traffic
    return row.collective, row.bytes_per_step


@pytest.mark.parametrize(
    ("zero", "options", "per_param", "name"),
    [
        # ZeRO-2, m = 8: the all-gather of the BF16 weights once (2 B) + 8 all-reduces of the
        # BF16 gradients (2 × 2 B): 2 + 8 × 4 = 34 B; the per-rank reduce 2 + 8 × 2 = 18 B
        (2, {}, 34, "all-reduce (bf16) per micro-batch + all-gather per step"),
        (2, {"use_multi_rank_bucket_allreduce": False}, 18,
         "reduce per rank (bf16) per micro-batch + all-gather per step"),
        # ZeRO-1: one all-reduce at the boundary, 2 + 2 × 2 = 6 B; per-rank reduce 2 + 2 = 4 B
        (1, {}, 6, "all-reduce (bf16) + all-gather per step"),
        (1, {"use_multi_rank_bucket_allreduce": False}, 4,
         "reduce per rank (bf16) + all-gather per step"),
    ],
)  # fmt: skip
def test_llama3_8b_on_32_gpus_by_hand(zero, options, per_param, name):
    """Llama 3 8B, dp 32, b 1, B 256 (m 8), BF16 gradients (DeepSpeed's default):
    (31/32) × P × bytes. ZeRO-2: 34 × 31/32 × 8,030,261,248 = 264,496,729,856 B (was 18:
    140,027,680,512 B, as the per-rank reduce still is)."""
    collective, sent = _dp(zero, **options)
    assert collective == name
    assert sent == Fraction(31, 32) * P * per_param
    if (zero, per_param) == (2, 34):
        assert sent == 264_496_729_856
    if (zero, per_param) == (2, 18):
        assert sent == 140_027_680_512


def test_the_option_reaches_the_mechanism_and_nothing_else_moves():
    """The key changes the reduction only: ZeRO-3 (``stage3.py`` reduce-scatters its own way)
    and ``BF16_Optimizer`` (ZeRO-1, FP32 gradients: ``buffered_allreduce_fallback``) keep
    theirs; memory is the same both ways."""
    assert CostOptions().use_multi_rank_bucket_allreduce is True
    on, off = (mechanism("deepspeed", 2, multi_rank_allreduce=x) for x in (True, False))
    assert (on.all_reduce, on.per_rank_reduce, off.all_reduce, off.per_rank_reduce) == (
        True, False, False, True,
    )  # fmt: skip
    assert on.memory_terms(P, 32, 0) == off.memory_terms(P, 32, 0)
    for z, g in ((3, 2), (1, 4)):
        a, b = (mechanism("deepspeed", z, 2, g, multi_rank_allreduce=x) for x in (True, False))
        assert a == b
