"""The collectives the terms charge at their message sizes (the published bus-bandwidth curves,
the frameworks' gradient buckets) and torchtitan's async tensor parallelism, derived by hand."""

from __future__ import annotations

import math

import pytest

from trainplan.model.comm import dp_collective_calls
from trainplan.model.errors import InputError
from trainplan.model.layer_time import _tp_collectives
from trainplan.model.mechanisms import mechanism
from trainplan.model.op_rates import deployed_params
from trainplan.model.op_time import (
    Clock,
    TpOverlap,
    check_tp_overlap,
    layer_compute,
    tp_overlap_run,
)
from trainplan.model.ops import LayerShape
from trainplan.model.recompute_ops import repeated_tp
from trainplan.model.roofline import Collective, LinkTime, collective_time
from trainplan.model.specs import Architecture
from trainplan.model.step_time import dp_seconds


def test_async_tp_hides_each_collective_under_the_other_shards_of_its_gemm():
    """torchtitan's async TP over 8 GPUs on a link so slow that every collective outlasts its
    GEMM: each of the 8 fused collectives of a layer (forward AG + RS per half, backward AG of
    the output gradient + RS of the input gradient per half) waits for all but 7/8 of its GEMM,
    plus the 7 extra kernels of the decomposed GEMM, and each fused RS its reduction;
    Transformer Engine's userbuffers (full) hide the whole GEMM and run the input's re-gather
    too."""
    arch = Architecture(num_layers=1, hidden_size=1024, num_attention_heads=8,
                        ffn_hidden_size=4096, vocab_size=32000)  # fmt: skip
    x = LayerShape(arch, False, 2048, 1, 8, sequence_parallel=True)
    p = deployed_params("MI300X")  # no curve: the α-β clock
    c = Clock(1e15, 3e12, p, tp_link=LinkTime(1e9, True), tp_comm_overlap=TpOverlap.ASYNC_TP)
    ops = layer_compute(x, Clock(1e15, 3e12, p))
    total, exposed = _tp_collectives(x, ops, c, repeated_tp(x, (), False))[:2]
    one = 7 / 8 * 2 * 2048 * 1024
    ag = collective_time(Collective.ALL_GATHER, 8, one, 1e9, True, p)
    rs = collective_time(Collective.REDUCE_SCATTER, 8, one, 1e9, True, p)
    assert total == pytest.approx(4 * (ag + rs))
    covered = sum(
        ops.role(col, "forward") + ops.role(row, "forward") + ops.role(row, "dgrad")
        + ops.role(col, "dgrad")
        for col, row in (("attn_in", "attn_out"), ("mlp_in", "mlp_out"))
    )  # fmt: skip
    # each of the 4 fused reduce-scatters (a GeLU MLP's one FC1 and the one QKV GEMM: every
    # input gradient is one matmul's) ends with torch.sum over its 8 partials: 2·2048·1024 B
    # read, 1/8 of it written, at 0.9 of 3 TB/s, + 3 µs
    reduction = 2 * 2048 * 1024 * 9 / 8 / (0.9 * 3e12) + p.kernel_overhead_s
    assert exposed == pytest.approx(
        total - 7 / 8 * covered + 8 * 7 * p.kernel_overhead_s + 4 * reduction
    )
    full = Clock(1e15, 3e12, p, tp_link=LinkTime(1e9, True), tp_comm_overlap=TpOverlap.FULL)
    assert _tp_collectives(x, ops, full, repeated_tp(x, (), False))[0] == pytest.approx(
        4 * (ag + rs) + 2 * ag
    )


def test_async_tp_is_torchtitans_and_userbuffers_are_not():
    check_tp_overlap(TpOverlap.ASYNC_TP, "fsdp2")
    check_tp_overlap(TpOverlap.FULL, "megatron")
    with pytest.raises(InputError, match="async-tp .* needs framework fsdp2, not deepspeed"):
        check_tp_overlap(TpOverlap.ASYNC_TP, "deepspeed")
    with pytest.raises(InputError, match="full .* not fsdp2"):
        check_tp_overlap(TpOverlap.FULL, "fsdp2")
    # Megatron-DeepSpeed (f4157bea) has no --tp-comm-overlap and never calls initialize_ub
    with pytest.raises(InputError) as err:
        check_tp_overlap(TpOverlap.FULL, "deepspeed")
    assert str(err.value) == (
        "tp_comm_overlap: full (Transformer Engine's userbuffers) needs framework megatron or "
        "textbook, not deepspeed"
    )


def test_userbuffers_need_sequence_parallelism_and_async_tp_fuses_nothing_without_it():
    """Megatron-LM d98e8a64dd ``validate_args``: ``--tp-comm-overlap`` asserts
    ``sequence_parallel``; at tp 1 nothing is overlapped and it stands (no userbuffers). torchtitan
    runs async TP without sequence parallelism, and Inductor's pass finds no all-gather or
    reduce-scatter to fuse: the layers run ``none``; the other mechanisms run as given."""
    check_tp_overlap(TpOverlap.FULL, "megatron", tp=8, sp=True)
    check_tp_overlap(TpOverlap.FULL, "megatron", tp=1, sp=False)
    check_tp_overlap(TpOverlap.ASYNC, "megatron", tp=8, sp=False)
    with pytest.raises(InputError, match="needs sequence parallelism at tp 8"):
        check_tp_overlap(TpOverlap.FULL, "megatron", tp=8, sp=False)
    with pytest.raises(InputError, match="needs sequence parallelism at tp 2"):
        check_tp_overlap(TpOverlap.FULL, "textbook", tp=2, sp=False)
    assert tp_overlap_run(TpOverlap.ASYNC_TP, 8, False) is TpOverlap.NONE
    assert tp_overlap_run(TpOverlap.ASYNC_TP, 1, False) is TpOverlap.NONE
    assert tp_overlap_run(TpOverlap.ASYNC_TP, 8, True) is TpOverlap.ASYNC_TP
    assert tp_overlap_run(TpOverlap.ASYNC, 8, False) is TpOverlap.ASYNC
    assert tp_overlap_run(TpOverlap.FULL, 8, True) is TpOverlap.FULL


def test_the_search_masks_userbuffers_without_sequence_parallelism():
    """The rule is a legality rule (``model.legality.RULES`` ``tp_comm_overlap``): the search's
    mask and the evaluator's check read the same line; the framework's default (None) passes."""
    from trainplan.model.layout import Layout
    from trainplan.model.legality import Setting, legality
    from trainplan.model.model_spec import ModelSpec
    from trainplan.model.specs import TrainingSpec
    from trainplan.model.terms.fields import LayoutFields
    from trainplan.model.timing import CostOptions

    model = ModelSpec(name="m", num_params_declared=10**9)
    training = TrainingSpec(seq_len=8192, global_batch_size=8)
    full = Setting.of(model, training, None, CostOptions(tp_comm_overlap=TpOverlap.FULL))
    off = LayoutFields(Layout(tp=8, sequence_parallel=False), 8)
    assert legality(full, off) == (
        False,
        "tp_comm_overlap: full (Transformer Engine's userbuffers) needs sequence parallelism at "
        "tp 8 (Megatron-LM's validate_args asserts it); turn sequence_parallel on or use "
        "tp_comm_overlap async",
    )
    assert legality(full, LayoutFields(Layout(tp=8), 8)) == (True, "")
    assert legality(Setting.of(model, training, None, CostOptions()), off) == (True, "")


def test_gradient_buckets_by_framework():
    """Megatron-Core: max(4e7, 1e6·dp) parameters a bucket (dp 16: 4e7), so 1e9 parameters
    make 25 reduce-scatters; DeepSpeed's 5e8-element reduce bucket, 2; FSDP2 one per block."""
    assert dp_collective_calls("megatron", 1e9, 20, 16, True) == 25
    assert dp_collective_calls("megatron", 1e9, 20, 128, True) == 8  # 1.28e8 a bucket
    assert dp_collective_calls("deepspeed", 1e9, 20, 16, True) == 2
    assert dp_collective_calls("fsdp2", 1e9, 20, 16, True) == 20


def test_dp_calls_each_at_their_own_message_size_inside_an_hgx_board():
    """Megatron's distributed optimizer over 8 H100 of one board, 25 buckets: per bucket an
    FP32 reduce-scatter and a bf16 all-gather, 4 : 2 of the bytes; each a ring on the
    published NVLS curve ÷ 480/370 at its buffer (sent · 8/7)."""
    p = deployed_params("H100-SXM")
    mech = mechanism("megatron", 1, 2, 4, 12)
    sent = 7 / 8 * 6 * 1e9  # (D−1)/D · 6 bytes · 1e9 parameters
    got = dp_seconds(mech, sent, 0.0, 8, 25, 450e9, True, p)
    step, mb = got.step_s, got.microbatch_s
    rs = collective_time(Collective.REDUCE_SCATTER, 8, sent * 4 / 6 / 25, 450e9, True, p)
    ag = collective_time(Collective.ALL_GATHER, 8, sent * 2 / 6 / 25, 450e9, True, p)
    assert step == pytest.approx(25 * (rs + ag)) and mb == 0.0
    # the reduce-scatter's buffer 1.6e8 B lies 0.2535 of the way in log2 from 128 MiB (400.61
    # GB/s) to 256 MiB (423.38): 406.38 GB/s NVLS, 313.24 as a ring; 1.4e8 B sent in 0.447 ms
    bw = (400.61 + (math.log2(1.6e8) - 27) * (423.38 - 400.61)) * 1e9 * 370 / 480
    assert rs == pytest.approx(1.4e8 / bw) and rs == pytest.approx(4.469e-4, rel=1e-3)
