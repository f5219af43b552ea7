"""Pipeline messages and the data-parallel reduction as each framework's pipeline schedule runs
them: Megatron-Core's interleaved schedule overlaps its sends (``overlap_p2p_comm``), DeepSpeed's
pipeline engine sends 1/tp of each tensor with blocking transfers and reduces the gradients after
the flush (``deepspeed/runtime/pipe/schedule.py``, ``engine.py``, ``p2p.py``)."""

from __future__ import annotations

import pytest

from trainplan.model.comm import (
    grad_reduce_overlaps,
    p2p_overlapped,
    p2p_waiting_sends,
    pipe_partitioned,
    reduces_beside_compute,
)
from trainplan.model.roofline import Collective, RooflineParams, collective_time
from trainplan.model.step_time import (
    DEEPSPEED_GATHERS_PER_CYCLE,
    DEEPSPEED_TRANSFERS_PER_CYCLE,
    pipe_engine_seconds,
    pp_exposed_seconds,
)
from trainplan.optimizer.case import Case

BASE = dict(model="llama3-8b", num_gpus=64, dp=8, tp=2, pp=4, global_batch_size=128, seq_len=4096)


def _rows(**extra: object):  # type: ignore[no-untyped-def]
    est = Case.of(**{**BASE, **extra}).evaluate()
    return {r.traffic.axis: r for r in est.traffic}, est.time_terms


def test_which_frameworks_overlap_what() -> None:
    """Megatron-Core overlaps pipeline sends only with virtual stages (Megatron-LM's
    validate_args turns overlap_p2p_comm off without them); DeepSpeed reduces gradients after
    the flush at pp > 1 and partitions pipeline tensors over tp."""
    assert p2p_overlapped("megatron", "interleaved", 4) is True
    assert p2p_overlapped("megatron", "1f1b", 1) is False
    assert p2p_overlapped("megatron", "zb-h1", 2) is False
    assert p2p_overlapped("fsdp2", "interleaved", 4) is False
    assert grad_reduce_overlaps("deepspeed", 2, True) is False
    assert grad_reduce_overlaps("deepspeed", 1, True) is True
    assert grad_reduce_overlaps("megatron", 8, True) is True
    assert pipe_partitioned("deepspeed") and not pipe_partitioned("megatron")


def test_deepspeed_pipe_engine_seconds_written_out() -> None:
    """A 64 MiB stage output, tp 8, m + pp − 1 = 20 cycles, 25 GB/s across nodes: each cycle
    four blocking sends of its 8 MiB share (``PartitionedTensor`` over tp, once) and three
    all-gathers over tp rebuilding the 64 MiB tensor (``_exec_forward_pass``'s input,
    ``_exec_backward_pass``'s own output and the received gradient)."""
    p = RooflineParams(gemm_efficiency=0.7)
    out = 64 * 2**20
    send = collective_time(Collective.SEND_RECV, 2, out / 8, 25e9, False, p)
    gather = collective_time(Collective.ALL_GATHER, 8, out * 7 / 8, 300e9, True, p)
    # NCCL's base + one network hop, the bytes at 0.96 of the NIC
    assert send == pytest.approx(8.4e-6 + 14e-6 + 8 * 2**20 / (0.96 * 25e9))
    t = pipe_engine_seconds(out / 8, 8, 20, 0.0, 25e9, False, 300e9, True, p)
    assert (DEEPSPEED_TRANSFERS_PER_CYCLE, DEEPSPEED_GATHERS_PER_CYCLE) == (4, 3)
    assert t == pytest.approx(20 * (4 * send + 3 * gather))
    # tp 1: the whole tensor, no gather
    whole = collective_time(Collective.SEND_RECV, 2, out, 25e9, False, p)
    assert pipe_engine_seconds(out, 1, 20, 0.0, 25e9, False, 1.0, True, p) == pytest.approx(
        20 * 4 * whole
    )


def test_deepspeed_pipeline_sends_split_once_over_tp() -> None:
    """The engine splits the whole stage output once over tp, sequence parallelism or not: the
    pipeline row is the same either way (not 1/tp² with sequence parallelism), and its bytes are
    2·m·v messages of β·s·b·h/tp."""
    sp, _ = _rows(framework="deepspeed", zero_stage=1)
    no_sp, _ = _rows(framework="deepspeed", zero_stage=1, sequence_parallel=False)
    assert sp["pp"].seconds == pytest.approx(no_sp["pp"].seconds)
    assert sp["pp"].traffic.bytes_per_step == no_sp["pp"].traffic.bytes_per_step
    assert sp["pp"].traffic.bytes_per_step == 2 * 16 * 2 * 4096 * 4096 // 2


def test_overlapped_sends_wait_only_on_the_fill_and_drain() -> None:
    """80 sends of 2 ms under chunk forwards of 5 ms at pp 4: 2·3 sends wait (the fill and the
    drain), the tied all-reduce of 1 ms after the flush; sends longer than the pass wait for the
    difference each."""
    seconds = 80 * 0.002 + 0.001
    assert pp_exposed_seconds(seconds, 0.001, 80, 4, 0.005, True) == pytest.approx(0.013)
    assert pp_exposed_seconds(seconds, 0.001, 80, 4, 0.005, False) == pytest.approx(seconds)
    slow = 80 * 0.008
    assert pp_exposed_seconds(slow, 0.0, 80, 4, 0.005, True) == pytest.approx(
        6 * 0.008 + 80 * 0.003
    )


def test_interleaved_waiting_sends_written_out() -> None:
    """Megatron-Core's interleaved schedule (schedules.py ``get_pp_rank_microbatches``): the last
    rank warms up with W = min(m·v, (v − 1)·pp) forward passes, each send blocking, and cools
    down with W blocking backward sends; since core 0.18 every forward send is waited on. The
    review's cases: Llama 3 405B, pp 16, v 8, m 16 (W 112) and pp 32, v 4, m 32 (W 96)."""
    assert p2p_waiting_sends(16, 8, 16, False, True) == 128 + 112
    assert p2p_waiting_sends(32, 4, 32, False, True) == 128 + 96
    assert p2p_waiting_sends(32, 4, 32, False, False) == 96 + 96  # core 0.10–0.17
    assert p2p_waiting_sends(32, 4, 32, True, True) == 128  # the warm-up flush flag
    assert p2p_waiting_sends(32, 4, 32, True, False) == 0  # core before 0.10
    # m·v at most W: every send of the warm-up and cool-down, all of them
    assert p2p_waiting_sends(2, 8, 2, False, False) == 2 * 14


def test_megatron_interleaved_hides_its_sends_unless_told_not_to() -> None:
    """Megatron-Core, v 4, pp 4, m 16: the pipeline row sends the same bytes either way. With
    overlap_p2p_comm as core before 0.10 runs it (the warm-up flush, no forward wait) only the
    fill and drain's 2·(pp − 1) sends wait (when a send is shorter than a pass); as the
    current code runs it (the default) the 64 forward sends and the W = 12 cool-down backward
    sends wait as well; without overlap every one of the 2·m·v sends waits (Megatron-LM of
    2021–2022)."""
    old, _ = _rows(
        framework="megatron", schedule="interleaved", virtual_stages=4,
        p2p_warmup_flush=True, p2p_forward_send_wait=False,
    )  # fmt: skip
    on, t_on = _rows(framework="megatron", schedule="interleaved", virtual_stages=4)
    off, t_off = _rows(
        framework="megatron", schedule="interleaved", virtual_stages=4, p2p_overlap=False
    )
    assert on["pp"].seconds == pytest.approx(off["pp"].seconds)
    assert off["pp"].exposed_seconds == pytest.approx(off["pp"].seconds)
    m, v, pp = 128 // 8, 4, 4
    send = off["pp"].seconds / (2 * m * v)
    assert old["pp"].exposed_seconds == pytest.approx(2 * (pp - 1) * send)
    assert on["pp"].exposed_seconds == pytest.approx((2 * (pp - 1) + 64 + 12) * send)
    assert t_on is not None and t_off is not None
    assert t_off.step_s - t_on.step_s == pytest.approx(
        off["pp"].exposed_seconds - on["pp"].exposed_seconds
    )


def test_deepspeed_reduces_after_the_flush() -> None:
    """DeepSpeed at pp 4: the data-parallel reduction waits whole (ReduceGrads after the last
    backward); Megatron-Core's overlaps the last micro-batch."""
    ds, _ = _rows(framework="deepspeed", zero_stage=1)
    mg, _ = _rows(framework="megatron", zero_stage=1)
    assert ds["dp"].exposed_seconds == pytest.approx(ds["dp"].seconds)
    assert mg["dp"].exposed_seconds < mg["dp"].seconds


def test_deepspeed_zero2_reduces_on_the_compute_stream_without_overlap_comm() -> None:
    """DeepSpeed ZeRO-2 at pp 1 (config.py ``overlap_comm_valid``: off below ZeRO-3): every
    per-micro-batch reduce-scatter waits; with overlap_comm they hide under the backward, and
    the second IPG bucket (5·10⁸ BF16 elements, 1 GB) joins the peak."""
    assert reduces_beside_compute("deepspeed", 2, False) is False
    assert reduces_beside_compute("deepspeed", 3, False) is True
    kw = dict(framework="deepspeed", zero_stage=2, pp=1, dp=32)
    off = Case.of(**{**BASE, **kw}).evaluate()
    on = Case.of(**{**BASE, **kw, "deepspeed_overlap_comm": True}).evaluate()
    row_off = {r.traffic.axis: r for r in off.traffic}["dp"]
    row_on = {r.traffic.axis: r for r in on.traffic}["dp"]
    assert row_off.exposed_seconds == pytest.approx(row_off.seconds)
    assert row_on.exposed_seconds < row_off.seconds / 2
    assert on.peak.total_bytes - off.peak.total_bytes == pytest.approx(1e9)
