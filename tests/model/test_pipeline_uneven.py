"""The bubble of Megatron-Core's interleaved 1F1B with unequal model chunks (model.pipeline_uneven)
in the one cost model (model.terms.pipeline_span): read off the order itself, checked against the
project's own timeline engine, and charged by evaluate() and the search alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.estimate import evaluation_context
from trainplan.model.layout import Recompute
from trainplan.model.pipeline_sim import Step, run
from trainplan.model.pipeline_uneven import (
    _run,
    chunk_counts,
    chunks_alike,
    interleaved_steps,
    layout_bubbles,
)
from trainplan.model.schedule import stage_order
from trainplan.model.schedule_zb import loop_stage
from trainplan.model.terms.fields import LayoutFields
from trainplan.model.terms.roofline import kind_seconds
from trainplan.optimizer.case import Case, links_for
from trainplan.scenarios.catalogue import get_model

LLAMA_70B = get_model("llama3-70b").model.arch
"""80 layers."""


def _engine_step(pp: int, m: int, forward: list[list], backward: list[list]):  # type: ignore[no-untyped-def]
    """The step of the interleaved order on model.pipeline_sim.run — the engine the pipeline tab
    draws with — rank i's chunk c taking forward[i][c] and backward[i][c]."""
    v = len(forward[0])
    orders = [
        [(Step(kind, j, c),) for kind, j, c in stage_order(pp, m, "interleaved", v, i)]
        for i in range(pp)
    ]

    def duration(rank: int, entry: tuple[Step, ...]):  # type: ignore[no-untyped-def]
        step = entry[0]
        return (forward if step.kind == "F" else backward)[rank][step.chunk]

    slots = run(pp, pp * v, loop_stage(pp), duration, orders=orders)
    return max(s.end for row in slots for s in row)


def test_llama3_70b_pp4_v8_chunks_of_two_and_three_layers() -> None:
    """80 layers over pp 4 × v 8 = 32 chunks: ⌈80/32⌉ = 3 each, 16 give one back from the ends
    (model.split.default_chunk_sizes: model chunks 0–7 and 24–31 hold 2), so every rank's chunks
    (model chunks i, i + 4, …) hold 2, 2, 3, 3, 3, 3, 2, 2. With a layer's forward 1 and its
    backward 2 and m = 8: each rank computes 8 × 20 × 3 = 480; the order's step is 507, a bubble
    of 27 = (pp − 1) × (3 + 6), the 3-layer chunk's forward and backward on each of the other
    three ranks, where equal chunks of 2.5 layers give (pp − 1) × 7.5 = 22.5: 1.2×."""
    counts = chunk_counts(LLAMA_70B, 4, 8, True, None, "interleaved")
    # then the layers of each span group: one (dense, global), so the same counts again
    assert counts == (2, 2, 3, 3, 3, 3, 2, 2) * 4 * 2
    chunks = np.array([counts[:32]])
    assert interleaved_steps(4, 8, chunks, 2 * chunks)[0] == 507
    assert _engine_step(4, 8, [[2, 2, 3, 3, 3, 3, 2, 2]] * 4, [[4, 4, 6, 6, 6, 6, 4, 4]] * 4) == 507
    assert layout_bubbles(4, np.array([8]), chunks, 2 * chunks, np.array([60]))[0] == 27
    equal = np.full((1, 32), 2.5)
    assert layout_bubbles(4, np.array([8]), equal, 2 * equal, np.array([60]))[0] == 22.5
    assert not chunks_alike(LLAMA_70B, 4, 8, True, None, "interleaved")
    assert chunks_alike(LLAMA_70B, 4, 10, True, None, "interleaved")  # 20 = 10 × 2
    assert chunks_alike(LLAMA_70B, 4, 1, True, None, "1f1b")


@pytest.mark.parametrize(
    ("pp", "m", "forward"),
    [
        (4, 16, [[3, 3, 2, 2, 2, 2, 3, 3]] * 4),  # the 3-layer chunks at the ends: 36
        (8, 16, [[3, 4, 4, 4]] + [[4, 4, 4, 4]] * 6 + [[4, 4, 4, 3]]),  # 126 layers' ends
        (4, 12, [[2, 3, 3, 3, 2, 2]] * 3 + [[2, 3, 3, 3, 2, 3.5]]),  # an output layer's 1.5
        (3, 9, [[2, 0, 5]] * 3),  # an empty chunk (an embedding-only one)
        (2, 6, [[1, 3], [2.5, 1]]),
    ],
)
def test_the_order_runs_as_the_timeline_engine_runs_it(pp, m, forward) -> None:
    """The depth-by-depth run (every layout of a batch at once) gives the engine's step: the same
    order (model.schedule.stage_order, Megatron-Core's), the same dataflow; backwards 2.25×."""
    backward = [[2.25 * x for x in row] for row in forward]
    got = interleaved_steps(pp, m, np.array([sum(forward, [])]), np.array([sum(backward, [])]))
    assert got[0] == pytest.approx(_engine_step(pp, m, forward, backward), rel=1e-12)


@pytest.mark.parametrize(
    ("layers", "pp", "v"), [(80, 4, 8), (80, 8, 3), (80, 8, 4), (126, 8, 4), (126, 16, 8)]
)
def test_from_three_groups_the_bubble_is_read_off_the_steady_phase(layers, pp, v):
    """From 3 groups of pp micro-batches on, the step is the run at 5 or 6 groups (m's parity)
    moved by its steady phase's shift per group, where two of its blocks end the same time
    apart at every pass (model.pipeline_uneven._extend), else the order run whole at m (up to 32
    groups) or read off the run at 32 or 33: the whole order's bubble at 3, 4, 7, 9, 10, 12, 17
    and 40 groups, for the default split's chunks (a layer 1, the output layer 1.2 on the last
    chunk) and a backward 2, 2.25 and 3 times the forward."""
    arch = get_model("llama3-405b").model.arch if layers == 126 else LLAMA_70B
    chunks = [float(n) for n in chunk_counts(arch, pp, v, True, None, "interleaved")[: pp * v]]
    chunks[-1] += 1.2
    busy = max(sum(chunks[i * v : (i + 1) * v]) for i in range(pp))
    for rho in (2.0, 2.25, 3.0):
        back = [rho * c for c in chunks]
        for groups in (3, 4, 7, 9, 10, 12, 17, 40) if pp < 16 else (3, 9, 12):
            m = groups * pp
            whole = interleaved_steps(pp, m, chunks, back) - m * busy * (1 + rho)
            got = layout_bubbles(pp, m, chunks, back, busy * (1 + rho))
            assert got == pytest.approx(whole, rel=1e-9, abs=1e-9)
            batch = layout_bubbles(  # a batch of two layouts, run at once as arrays
                pp, np.array([m, 2 * pp]), np.array([chunks] * 2), np.array([back] * 2),
                np.array([busy * (1 + rho)] * 2),
            )  # fmt: skip
            assert batch[0] == pytest.approx(got, rel=1e-12, abs=1e-12)
            two = layout_bubbles(pp, 2 * pp, chunks, back, busy * (1 + rho))
            assert batch[1] == pytest.approx(two, rel=1e-12, abs=1e-12)


def test_a_bubble_that_shrinks_settles_and_never_turns_negative() -> None:
    """The tester's split (issue: the bubble went negative): 80 layers over pp 4 × v 2 as 10,
    11, 10, 10 | 10, 10, 10, 9 in model order, so ranks hold chunks (10, 10), (11, 10), (10, 10),
    (10, 9). A layer's forward 1, its backward 2: rank 1 computes 21 × 3 = 63 a micro-batch, the
    others 60 and 57, and their slack absorbs rank 1's fill: the bubble is 78, 55, 46 at 1, 2,
    3 groups and 46 from then on — every block of the steady phase ends 4 × 63 = 252 after the
    one before from block 3 on, at every pass, so the step grows by exactly the busiest rank's
    work: read off the run at 32 (33) groups past 32 groups, the order run whole below. The runs
    at 2 and 4 groups gave a line through 55 and 46 that crossed 0 past 14 groups (−3.5 at 15, −512 at 128);
    now every m gives the whole order's 46, and the engine's step agrees at 64 groups."""
    chunks = [10, 10, 11, 10, 10, 10, 10, 9]
    back = [2 * c for c in chunks]
    bubbles = [interleaved_steps(4, g * 4, chunks, back) - g * 4 * 63 for g in (1, 2, 3, 4, 5)]
    assert bubbles == [78, 55, 46, 46, 46]
    step, kept = _run(4, 36, chunks, back, keep=True)  # 9 groups: blocks 0 … 6
    shifts = [{a - b for a, b in zip(kept[j + 1], kept[j], strict=True)} for j in range(6)]
    assert [min(d) for d in shifts] == [228, 228, 246, 252, 252, 252]
    assert shifts[3:] == [{252.0}] * 3  # from block 3 on: the run at 5 groups has blocks 0 … 2
    for groups in (9, 10, 16, 32, 64, 128, 256):
        assert layout_bubbles(4, groups * 4, chunks, back, 63) == 46
    pairs = [[10, 10], [11, 10], [10, 10], [10, 9]]
    engine = _engine_step(4, 256, pairs, [[2 * x for x in r] for r in pairs])
    assert engine - 256 * 63 == 46


def test_a_long_transient_is_bounded_above() -> None:
    """pp 2 × v 4, rank 0's chunks 11.05, 9, 11, 10 and rank 1's 11, 10, 10, 10 (model order
    11.05, 11, 9, 10, 11, 10, 10, 10), a backward twice the forward: rank 0 computes 41.05 a
    micro-batch, rank 1 only 0.05 less, so the bubble shrinks by 2 × 0.05 = 0.1 a group (12.3 at
    8 groups, 9.9 at 32, 9.8 at 33) until it settles at 7.567 (by 64 groups). Its blocks still
    differ at 33 groups, so past them the step is the run at 32 (33: m's parity) groups plus the
    most any pass of a block ends after the one two before, per two groups
    (model.pipeline_uneven._extend) — here the busiest rank's 2 × 2 × 41.05 = 164.2 — and the
    bubble stays 32 groups' 9.9 (33's 9.8 for odd m): above the whole order's, never below."""
    chunks = [11.05, 9.0, 11.0, 10.0, 11.0, 10.0, 10.0, 10.0]
    forward = [c / 3 for c in chunks]
    back = [c - f for c, f in zip(chunks, forward, strict=True)]
    busy = 41.05
    whole = {
        g: interleaved_steps(2, 2 * g, forward, back) - 2 * g * busy
        for g in (8, 32, 33, 34, 64, 101)
    }
    assert [round(x, 4) for x in whole.values()] == [12.3, 9.9, 9.8, 9.7, 7.5667, 7.5667]
    for groups in (8, 32, 33):
        assert layout_bubbles(2, 2 * groups, forward, back, busy) == pytest.approx(whole[groups])
    for groups, held in ((34, 32), (64, 32), (101, 33)):
        got = layout_bubbles(2, 2 * groups, forward, back, busy)
        assert got == pytest.approx(whole[held], abs=1e-9)
        assert got > whole[groups]


@settings(max_examples=60, deadline=None)
@given(
    pp=st.integers(2, 4),
    v=st.integers(2, 3),
    data=st.data(),
    groups=st.integers(1, 40),
    rho=st.sampled_from([2.0, 2.25, 3.0]),
)
def test_the_bubble_is_the_whole_orders_or_above_it(pp, v, data, groups, rho) -> None:
    """Any split of 0–4 layers a chunk (a layer 1, the embedding and output layer extra): the
    bubble is never below 0 (no rank ends before its own m micro-batches) and never below the
    whole order's; up to 33 groups it is the whole order's (from a steady phase that repeats by 5
    or 6 groups, or the order run whole), beyond at most above it (an upper bound); a batch gives the
    single layout's."""
    chunks = [float(data.draw(st.integers(0, 4))) for _ in range(pp * v)]
    chunks[0] += data.draw(st.sampled_from([0.0, 0.05, 0.5]))
    chunks[-1] += data.draw(st.sampled_from([0.0, 0.3, 1.2]))
    chunks = [max(c, 0.01) for c in chunks]
    forward = [c / (1 + rho) for c in chunks]
    back = [c - f for c, f in zip(chunks, forward, strict=True)]
    busy = max(sum(chunks[i * v : (i + 1) * v]) for i in range(pp))
    m = groups * pp
    whole = interleaved_steps(pp, m, forward, back) - m * busy
    got = layout_bubbles(pp, m, forward, back, busy)
    tolerance = 1e-9 * m * busy
    assert whole >= -tolerance
    assert got >= whole - tolerance
    if groups <= 33:
        assert got == pytest.approx(whole, abs=tolerance)
    batch = layout_bubbles(
        pp, np.array([m]), np.array([forward]), np.array([back]), np.array([busy])
    )
    assert batch[0] == pytest.approx(got, abs=tolerance)


def test_steady_phase_stalls_grow_with_m() -> None:
    """Every rank's chunks hold 3, 4, 4, 4 layers (pp 8, v 4: 120 layers written per chunk). A
    rank's 3-layer forward runs beside a 4-layer backward while the next rank, two passes behind
    in its order, runs 4 beside 4, so every group of 8 micro-batches adds the same wait: with a
    backward twice the forward the bubble grows by 9 layer forwards a group (84, 93, 102, 111 at
    1 … 4 groups, each rank computing 8 × 15 × 3 = 360 a group), and on: 84 + 9 × 39 = 435 at
    40 groups and 84 + 9 × 100 = 984 at 101, read off the steady phase as the whole order runs
    it (a bubble that grows is charged its growth, not bounded by a constant)."""
    chunks = np.array([[3, 4, 4, 4] * 8])
    bubbles = [interleaved_steps(8, g * 8, chunks, 2 * chunks)[0] - g * 360 for g in (1, 2, 3, 4)]
    assert bubbles == [84, 93, 102, 111]
    assert interleaved_steps(8, 320, chunks, 2 * chunks)[0] - 40 * 360 == 435
    got = layout_bubbles(
        8, np.array([320, 808]), chunks.repeat(2, 0), 2 * chunks.repeat(2, 0), np.array([45, 45])
    )
    assert list(got) == [435, 984]


def test_evaluate_charges_it_llama3_70b_on_1024_h100() -> None:
    """Llama 3 70B on 1,024 H100s, dp 64 × tp 4 × pp 4, v 8, B 512 (m = 8), no recomputation:
    every rank's chunks hold 2, 2, 3, 3, 3, 3, 2, 2 layers, the embedding with rank 0's first
    and the output layer with rank 3's last. The step's pipeline section is 8 × t_mb plus the
    bubble of the order run on those chunks, a layer's and the end layers' times as the cost
    model gives them (model.terms.roofline.kind_seconds: 24.27 ms a layer, 0.97 ms the embedding,
    28.00 ms the output layer; a forward a third, the backward two), here run again on the
    timeline engine: 1.155× the closed form's 8 × t_mb × 3/64 (192.5 → 222.3 ms). v 10 (20 = 10
    × 2, every chunk 2 layers) runs the same order: the end chunks carry the embedding and the
    output layer, and the bubble, 149.6 ms, is under the closed form's 8 × t_mb × 3/80 = 154.2
    ms (every other chunk a tenth of a lighter rank's micro-batch, not of the slowest's). The
    reported bubble_ratio is the charged one."""
    kw = dict(
        model="llama3-70b", device="H100-SXM", num_gpus=1024, dp=64, tp=4, pp=4,
        global_batch_size=512, recompute="none", schedule="interleaved",
    )  # fmt: skip
    case = Case.of(**kw, virtual_stages=8)
    est = case.evaluate()
    tt = est.time_terms
    assert tt is not None
    c = evaluation_context(case.model, case.training, case.device, case.options)
    links = links_for(case.layout, case.links, case.fabric)
    (layer,), embedding, output = kind_seconds(c, LayoutFields(case.layout, 512, 0, links))
    times = [[n * layer for n in (2, 2, 3, 3, 3, 3, 2, 2)] for _ in range(4)]
    times[0][0] += embedding
    times[3][7] += output
    t_mb = 20 * layer + output
    assert tt.busy_s == pytest.approx(8 * t_mb, rel=1e-12)
    step = _engine_step(
        4, 8, [[x / 3 for x in r] for r in times], [[2 * x / 3 for x in r] for r in times]
    )
    assert tt.bubble_s == pytest.approx(step - 8 * t_mb, rel=1e-9)
    assert tt.bubble_s / (tt.busy_s * 3 / 64) == pytest.approx(1.155, abs=5e-4)
    assert float(est.bubble_ratio) == pytest.approx(tt.bubble_s / tt.busy_s, rel=1e-5)
    even = Case.of(**kw, virtual_stages=10).evaluate()
    et = even.time_terms
    assert et is not None
    times = [[2 * layer] * 10 for _ in range(4)]
    times[0][0] += embedding
    times[3][9] += output
    step = _engine_step(
        4, 8, [[x / 3 for x in r] for r in times], [[2 * x / 3 for x in r] for r in times]
    )
    assert et.bubble_s == pytest.approx(step - 8 * t_mb, rel=1e-9)
    assert (et.bubble_s * 1e3, et.busy_s * 3 / 80 * 1e3) == pytest.approx((149.6, 154.2), abs=0.05)
    assert float(even.bubble_ratio) == pytest.approx(et.bubble_s / et.busy_s, rel=1e-5)


@pytest.mark.parametrize("batch", [16, 64, 128, 256, 1024])
def test_the_testers_split_at_every_batch_is_the_engines_run(batch) -> None:
    """Llama 3 70B on 64 H100s, dp 2 × tp 8 × pp 4, v 2, selective recomputation, Megatron's
    layout 10, 11, 10, 10, 10, 10, 10, 9 (ranks' chunks (10, 10), (11, 10), (10, 10), (10, 9)),
    B 16 … 1024 (m = B/2 = 8 … 512): the bubble evaluate charges is the timeline engine's run of
    the whole order at that m on the chunks the cost model times (a layer 14.056 ms with its
    recomputation, its forward a third of 13.839 ms without; the embedding on rank 0's first
    chunk, the output layer on rank 3's last), less m × rank 1's 21 layers. It was +370.7 ms at
    B 16 and went negative from B 128 (−1,253 ms at 256: a step of 36.649 s under the busiest
    stage's own 37.90 s); now 370.7 ms at B 16 and 234.9 ms from B 64 on, the step never below
    m × the busiest stage's micro-batch + exposed dp + the optimizer step."""
    case = Case.of(
        model="llama3-70b", device="H100-SXM", num_gpus=64, dp=2, tp=8, pp=4,
        global_batch_size=batch, recompute="selective", schedule="interleaved",
        virtual_stages=2, stage_layers=(10, 11, 10, 10, 10, 10, 10, 9), framework="megatron",
    )  # fmt: skip
    tt = case.evaluate().time_terms
    assert tt is not None
    m = batch // 2
    c = evaluation_context(case.model, case.training, case.device, case.options)
    fields = LayoutFields(case.layout, batch, 0, links_for(case.layout, case.links, case.fabric))
    (layer,), embedding, output = kind_seconds(c, fields)  # one span group: every layer global
    (plain,), plain_embedding, plain_output = kind_seconds(c, fields, Recompute.NONE)
    assert (layer, plain) == (
        pytest.approx(14.0556e-3, rel=1e-5),
        pytest.approx(13.8391e-3, rel=1e-5),
    )
    layers = [[10, 10], [11, 10], [10, 10], [10, 9]]
    total = [[n * layer for n in row] for row in layers]
    forward = [[n * plain / 3 for n in row] for row in layers]
    total[0][0] += embedding
    forward[0][0] += plain_embedding / 3
    total[3][1] += output
    forward[3][1] += plain_output / 3
    backward = [
        [t - f for t, f in zip(*rows, strict=True)] for rows in zip(total, forward, strict=True)
    ]
    busy = 21 * layer
    assert tt.busy_s == pytest.approx(m * busy, rel=1e-12)
    step = _engine_step(4, m, forward, backward)
    assert tt.bubble_s == pytest.approx(step - m * busy, rel=1e-9)
    assert tt.bubble_s == pytest.approx(0.3707 if batch == 16 else 0.2349, abs=5e-5)
    assert tt.step_s >= tt.busy_s + tt.exposed_dp_s + tt.optimizer_s
