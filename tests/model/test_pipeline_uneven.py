"""The bubble of Megatron-Core's interleaved 1F1B with unequal model chunks (model.pipeline_uneven)
in the one cost model (model.terms.pipeline_span): read off the order itself, checked against the
project's own timeline engine, and charged by evaluate() and the search alike."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from trainplan.model.estimate import evaluation_context
from trainplan.model.pipeline_sim import Step, run
from trainplan.model.pipeline_uneven import (
    chunk_counts,
    interleaved_steps,
    layout_bubbles,
    uneven_chunks,
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
    assert uneven_chunks(LLAMA_70B, 4, 8, True, None, "interleaved")
    assert not uneven_chunks(LLAMA_70B, 4, 10, True, None, "interleaved")  # 20 = 10 × 2
    assert not uneven_chunks(LLAMA_70B, 4, 8, True, None, "1f1b")


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
def test_beyond_two_groups_the_bubble_is_read_off_the_runs_at_two_and_four(layers, pp, v):
    """Past 2 groups of pp micro-batches the bubble grows by the same time every group once the
    steady phase runs: the runs at 2 and 4 groups give the whole order's bubble at 3, 5, 6 and 8
    groups, for the default split's chunks (a layer 1, the output layer 1.2 on the last chunk)
    and a backward 2, 2.25 and 3 times the forward."""
    arch = get_model("llama3-405b").model.arch if layers == 126 else LLAMA_70B
    chunks = [float(n) for n in chunk_counts(arch, pp, v, True, None, "interleaved")[: pp * v]]
    chunks[-1] += 1.2
    busy = max(sum(chunks[i * v : (i + 1) * v]) for i in range(pp))
    for rho in (2.0, 2.25, 3.0):
        back = [rho * c for c in chunks]
        for groups in (3, 5, 6, 8):
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


def test_steady_phase_stalls_grow_with_m() -> None:
    """Every rank's chunks hold 3, 4, 4, 4 layers (pp 8, v 4: 120 layers written per chunk). A
    rank's 3-layer forward runs beside a 4-layer backward while the next rank, two passes behind
    in its order, runs 4 beside 4, so every group of 8 micro-batches adds the same wait: with a
    backward twice the forward the bubble grows by 9 layer forwards a group (84, 93, 102, 111 at
    1 … 4 groups, each rank computing 8 × 15 × 3 = 360 a group)."""
    chunks = np.array([[3, 4, 4, 4] * 8])
    bubbles = [interleaved_steps(8, g * 8, chunks, 2 * chunks)[0] - g * 360 for g in (1, 2, 3, 4)]
    assert bubbles == [84, 93, 102, 111]


def test_evaluate_charges_it_llama3_70b_on_1024_h100() -> None:
    """Llama 3 70B on 1,024 H100s, dp 64 × tp 4 × pp 4, v 8, B 512 (m = 8), no recomputation:
    every rank's chunks hold 2, 2, 3, 3, 3, 3, 2, 2 layers, the embedding with rank 0's first
    and the output layer with rank 3's last. The step's pipeline section is 8 × t_mb plus the
    bubble of the order run on those chunks, a layer's and the end layers' times as the cost
    model gives them (model.terms.roofline.kind_seconds: 24.27 ms a layer, 0.97 ms the embedding,
    28.00 ms the output layer; a forward a third, the backward two), here run again on the
    timeline engine: 1.155× the closed form's 8 × t_mb × 3/64 (192.5 → 222.3 ms). v 10 (20 = 10
    × 2) keeps the closed form. The reported bubble_ratio is the charged one."""
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
    assert even.time_terms is not None
    assert even.time_terms.bubble_s == pytest.approx(even.time_terms.busy_s * 3 / 80, rel=1e-12)
    assert even.bubble_ratio == Fraction(3, 80)
