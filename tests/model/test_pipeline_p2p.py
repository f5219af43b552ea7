"""Pipeline messages and the data-parallel reduction as each framework's pipeline schedule runs
them: Megatron-Core's interleaved schedule overlaps its sends (``overlap_p2p_comm``), DeepSpeed's
pipeline engine sends 1/tp of each tensor with blocking transfers and reduces the gradients after
the flush (``deepspeed/runtime/pipe/schedule.py``, ``engine.py``, ``p2p.py``)."""

from __future__ import annotations

import pytest

from trainplan.model.comm import grad_reduce_overlaps, p2p_overlapped, pipe_partitioned
from trainplan.model.roofline import Collective, RooflineParams, collective_time
from trainplan.model.step_time import (
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
    four blocking sends of 8 MiB and two all-gathers over tp rebuilding the 64 MiB tensor."""
    p = RooflineParams(gemm_efficiency=0.7)
    out = 64 * 2**20
    send = collective_time(Collective.SEND_RECV, 2, out / 8, 25e9, False, p)
    gather = collective_time(Collective.ALL_GATHER, 8, out * 7 / 8, 300e9, True, p)
    # NCCL's base + one network hop, the bytes at 0.96 of the NIC
    assert send == pytest.approx(8.4e-6 + 14e-6 + 8 * 2**20 / (0.96 * 25e9))
    t = pipe_engine_seconds(out, 8, 20, 0.0, 25e9, False, 300e9, True, p)
    assert DEEPSPEED_TRANSFERS_PER_CYCLE == 4
    assert t == pytest.approx(20 * (4 * send + 2 * gather))
    # tp 1: the whole tensor, no gather
    whole = collective_time(Collective.SEND_RECV, 2, out, 25e9, False, p)
    assert pipe_engine_seconds(out, 1, 20, 0.0, 25e9, False, 1.0, True, p) == pytest.approx(
        20 * 4 * whole
    )


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


def test_megatron_interleaved_hides_its_sends_unless_told_not_to() -> None:
    """Megatron-Core, v 4: the pipeline row sends the same bytes either way; with
    overlap_p2p_comm (the default) only the fill and drain's 2·(pp − 1) sends wait, without it
    every one of the 2·m·v sends waits (Megatron-LM of 2021–2022)."""
    on, t_on = _rows(framework="megatron", schedule="interleaved", virtual_stages=4)
    off, t_off = _rows(
        framework="megatron", schedule="interleaved", virtual_stages=4, p2p_overlap=False
    )
    assert on["pp"].seconds == pytest.approx(off["pp"].seconds)
    assert off["pp"].exposed_seconds == pytest.approx(off["pp"].seconds)
    m, v, pp = 128 // 8, 4, 4
    send = off["pp"].seconds / (2 * m * v)
    assert on["pp"].exposed_seconds == pytest.approx(2 * (pp - 1) * send)
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
