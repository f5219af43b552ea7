"""Pipeline messages and the data-parallel reduction as each framework's pipeline schedule runs
them: Megatron-Core's interleaved schedule overlaps its sends (``overlap_p2p_comm``), DeepSpeed's
pipeline engine sends 1/tp of each tensor with blocking transfers and reduces the gradients after
the flush (``deepspeed/runtime/pipe/schedule.py``, ``engine.py``, ``p2p.py``)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.model.comm import (
    grad_reduce_overlaps,
    p2p_critical_sends,
    p2p_exposed_sends,
    p2p_overlapped,
    p2p_waiting_sends,
    pipe_partitioned,
    reduces_beside_compute,
)
from trainplan.model.errors import LayoutError
from trainplan.model.pipeline_p2p import interleaved_send_span
from trainplan.model.step_time import pp_exposed_seconds
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


def test_deepspeed_pipeline_sends_split_once_over_tp() -> None:
    """The engine splits the whole stage output once over tp, sequence parallelism or not: the
    pipeline row is the same either way (not 1/tp² with sequence parallelism), and its bytes are
    2·m·v messages of β·s·b·h/tp."""
    sp, _ = _rows(framework="deepspeed", zero_stage=1)
    no_sp, _ = _rows(framework="deepspeed", zero_stage=1, sequence_parallel=False)
    assert sp["pp"].seconds == pytest.approx(no_sp["pp"].seconds)
    assert sp["pp"].traffic.bytes_per_step == no_sp["pp"].traffic.bytes_per_step
    assert sp["pp"].traffic.bytes_per_step == 2 * 16 * 2 * 4096 * 4096 // 2


def test_overlapped_sends_add_their_critical_path() -> None:
    """80 sends of 2 ms, chunk forwards of 5 ms (backwards 10 ms), 1 ms of tied all-reduce:
    short against the passes, the 14 critical sends add 28 ms; the longest path (18 sends)
    skips a forward and a backward: 18·8 − 15 = 129 ms once sends take 8 ms."""
    seconds = 80 * 0.002 + 0.001
    on = pp_exposed_seconds(seconds, 0.001, 80, 0.005, True, 14, 18)
    assert on == pytest.approx(14 * 0.002 + 0.001)
    assert pp_exposed_seconds(seconds, 0.001, 80, 0.005, False, 14, 18) == pytest.approx(seconds)
    slow = 80 * 0.008  # 8 ms sends: max(14·8, 15·8 − 5, 17·8 − 10, 18·8 − 15) = 129 ms
    assert pp_exposed_seconds(slow, 0.0, 80, 0.005, True, 14, 18) == pytest.approx(0.129)


def test_interleaved_critical_sends_by_hand() -> None:
    """pp 2, m 2, v 2, forwards 1, backwards 2, sends s, the default code (every forward send
    waited on; W_0 = 4 and W_1 = 2 blocking cool-down backward sends). Rank 0 runs F00 F10 F01
    F11 B01 B11 B00 B10, rank 1 F00 F10 F01 B01 F11 B11 B00 B10 (Fjc: micro-batch j, chunk
    c). The path that ends the step: rank 0 F00 [0, 1] + s → rank 1 F00 [1 + s, 2 + s] + s →
    rank 0 F01 [2 + 2s, 3 + 2s] + s → rank 1 F01, B01, F11, B11 back to back [3 + 3s, 9 + 3s],
    B11's gradient arriving s later (not waited on) → rank 0 B11 [9 + 4s, 11 + 4s] + s (cool-
    down) → rank 1 B10 [11 + 5s, 13 + 5s] + s → rank 0 B10 [13 + 6s, 15 + 6s]: 6 sends =
    2·(pp·v − 1), not the 2(pp − 1) + 4 + 2 = 8 the last rank's own waits and the fill would
    give."""
    s = Fraction(1, 100)
    assert interleaved_send_span(2, 2, 2, Fraction(1), Fraction(2), s) == 15 + 6 * s
    assert p2p_critical_sends(2, 2, 2, True) == 6
    assert 2 * (2 - 1) + p2p_waiting_sends(2, 2, 2, False, True) == 8


@pytest.mark.parametrize("flush,wait", [(False, True), (False, False), (True, True), (True, False)])
def test_critical_sends_match_the_timeline(flush: bool, wait: bool) -> None:
    """For short sends the step grows by p2p_critical_sends of them, under every flag: the
    timeline with each rank's waits placed (model.pipeline_p2p) at pp 3, 4, v 2, 3, m = pp, 2pp."""
    s = Fraction(1, 1000)
    for pp, v, k in [(3, 2, 1), (3, 3, 2), (4, 2, 2), (4, 3, 1)]:
        m = k * pp
        base = (m * v + pp - 1) * 3  # (m·v + pp − 1)·(t_f + t_b), sends free
        span = interleaved_send_span(pp, m, v, Fraction(1), Fraction(2), s, flush, wait)
        assert (span - base) / s == p2p_critical_sends(m, v, pp, wait), (pp, m, v)


def test_exposed_sends_match_the_timeline_for_long_sends() -> None:
    """The default code (forward waits, no flush): p2p_exposed_sends equals the timeline's step
    less the send-free one for sends from 1/20 of a chunk forward to twice it, backward 2 or 3
    forwards (the four forms read off the symbolic timeline)."""
    one = Fraction(1)
    for pp, m, v in [(3, 6, 2), (4, 4, 3), (4, 8, 2)]:
        critical = p2p_critical_sends(m, v, pp, True)
        longest = 2 * (pp - 1) + p2p_waiting_sends(m, v, pp, False, True)
        for t_b in (Fraction(2), Fraction(3)):
            base = (m * v + pp - 1) * (1 + t_b)
            for s in (Fraction(1, 20), Fraction(1, 2), one, Fraction(2)):
                span = interleaved_send_span(pp, m, v, one, t_b, s)
                assert span - base == p2p_exposed_sends(s, one, t_b, critical, longest)


def test_interleaved_waiting_sends_written_out() -> None:
    """Megatron-Core's interleaved schedule (schedules.py ``get_pp_rank_microbatches``): the last
    rank warms up with W = min(m·v, (v − 1)·pp) forward passes, each send blocking, and cools
    down with W blocking backward sends; since core 0.18 every forward send is waited on. The
    cases: Llama 3 405B, pp 16, v 8, m 16 (W 112) and pp 32, v 4, m 32 (W 96)."""
    assert p2p_waiting_sends(16, 8, 16, False, True) == 128 + 112
    assert p2p_waiting_sends(32, 4, 32, False, True) == 128 + 96
    assert p2p_waiting_sends(32, 4, 32, False, False) == 96 + 96  # core 0.10–0.17
    assert p2p_waiting_sends(32, 4, 32, True, True) == 128  # the warm-up flush flag
    assert p2p_waiting_sends(32, 4, 32, True, False) == 0  # core before 0.10
    # m·v at most W: every send of the warm-up and cool-down, all of them
    assert p2p_waiting_sends(2, 8, 2, False, False) == 2 * 14


def test_megatron_interleaved_hides_its_sends_unless_told_not_to() -> None:
    """Megatron-Core, v 4, pp 4, m 16: the pipeline row sends the same bytes either way. With
    overlap_p2p_comm, short sends add those on the critical path: 2·(pp·v − 1) = 30 as core
    before 0.18 runs them, and (v − 1)·(m − pp) = 36 more for the forward waits of the current
    code (the default); without overlap every one of the 2·m·v sends waits (Megatron-LM of
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
    m, v = 128 // 8, 4
    send = off["pp"].seconds / (2 * m * v)
    assert old["pp"].exposed_seconds == pytest.approx(30 * send)
    assert on["pp"].exposed_seconds == pytest.approx((30 + 36) * send)
    assert t_on is not None and t_off is not None
    assert t_off.step_s - t_on.step_s == pytest.approx(
        off["pp"].exposed_seconds - on["pp"].exposed_seconds
    )


def test_deepspeed_moe_sends_whole_tensors() -> None:
    """Megatron-DeepSpeed asserts pipe_partitioned and grad_partitioned off for an MoE model at
    pp > 1 and tp > 1 (GPTModelPipe.__init__), so its sends would be the whole β·s·b·h
    activation; a MoE model under deepspeed at tp > 1 is refused (DeepSpeed's MOELayer drops and
    gathers the tokens duplicated over tp, not counted: model.expert_groups.check_expert_groups),
    and at tp 1 the whole tensor is what every profile sends."""
    assert not pipe_partitioned("deepspeed", moe=True)
    kw = dict(framework="deepspeed", zero_stage=1, sequence_parallel=False)
    with pytest.raises(LayoutError, match="^tp: 2 under framework deepspeed with routed experts"):
        Case.of(**{**BASE, **kw, "model": "mixtral-8x7b"}).evaluate()


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
