"""Interleaved 1F1B priced by Megatron-Core's own order on every layout at pp > 1
(model.terms.pipeline_span.classic_span → model.pipeline_uneven), not only where a rank's chunks
hold unequal layer counts: the embedding on the first rank's first chunk and the output layer and
loss on the last rank's last make the chunks unequal in time even where their counts are equal.

The order, from Megatron-LM (d98e8a64dd) megatron/core/pipeline_parallel/schedules.py
``forward_backward_pipelining_with_interleaving``: rank i warms up with
``(pp − i − 1)·2 + (v − 1)·pp`` forwards (``get_pp_rank_microbatches``), then runs one forward
and one backward in turn, then the cool-down's backwards; its k-th forward runs model chunk
``(k // pp) mod v`` (``get_model_chunk_id``) on micro-batch ``(k // (pp·v))·pp + k mod pp``, its
k-th backward chunk ``v − 1 − (k // pp) mod v`` on the same micro-batch numbering. The simulation
below is written from those rules alone (micro-batch ids and stages, not the model's pass
indices) and is the reference the term is held to.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trainplan
from trainplan.model.pipeline_report import interleaved_order
from trainplan.model.pipeline_uneven import chunks_alike, layout_bubbles
from trainplan.scenarios.catalogue import get_model


def _megatron_step(pp: int, v: int, m: int, forward: list[float], backward: list[float]) -> float:
    """The step of Megatron-Core's interleaved order by an event simulation: ``forward`` and
    ``backward`` per model stage ``s = c·pp + i`` (rank i's chunk c; pp·v each), every pass
    starting when its rank is free and its input is there (forward: the stage before's forward
    of the same micro-batch; backward: the stage after's backward, the last stage's its own
    forward); messages instantaneous (the cost model charges them apart)."""
    total = m * v
    orders = []
    for i in range(pp):
        warm = min((pp - i - 1) * 2 + (v - 1) * pp, total)
        fw = [("F", (k // pp) % v, (k // (pp * v)) * pp + k % pp) for k in range(total)]
        bw = [("B", v - 1 - (k // pp) % v, (k // (pp * v)) * pp + k % pp) for k in range(total)]
        steady = [x for j in range(total - warm) for x in (fw[warm + j], bw[j])]
        orders.append(fw[:warm] + steady + bw[total - warm :])
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * pp
    at = [0] * pp
    last = pp * v - 1
    while any(at[i] < len(orders[i]) for i in range(pp)):
        moved = False
        for i in range(pp):
            while at[i] < len(orders[i]):
                kind, c, mb = orders[i][at[i]]
                s = c * pp + i
                if kind == "F":
                    need = None if s == 0 else ("F", s - 1, mb)
                else:
                    need = ("F", s, mb) if s == last else ("B", s + 1, mb)
                if need is not None and need not in done:
                    break
                start = max(free[i], 0.0 if need is None else done[need])
                free[i] = start + (forward[s] if kind == "F" else backward[s])
                done[(kind, s, mb)] = free[i]
                at[i] += 1
                moved = True
        assert moved, "deadlock"
    return max(free)


def _by_slot(pp: int, v: int, per_stage: list[float]) -> list[float]:
    """Per model stage s = c·pp + i → the term's layout, rank i's chunk c at i·v + c."""
    return [per_stage[c * pp + i] for i in range(pp) for c in range(v)]


def test_llama3_8b_pp4_v2_m8_by_hand():
    """Llama 3 8B on 4 H100s, pp 4, v 2, b 1, B 8 (m 8), recompute none. Its 32 layers make 8
    chunks of 4; evaluate's per-rank passes (TimeTerms.stage_s, a rank's chunks summed) give:

    - ranks 1, 2: 65.835 + 131.670 ms = 8 layers, so one chunk of 4 layers f = 32.917 ms,
      b = 65.835 ms (the backward twice the forward, recompute none);
    - rank 0: 65.889 + 131.778 ms: its chunk 0 (stage 0) carries the embedding, f = 65.889 −
      32.917 = 32.971 ms, b = 65.943 ms;
    - rank 3: 86.725 + 173.450 ms: its chunk 1 (stage 7, the last) carries the output layer and
      the loss, f = 86.725 − 32.917 = 53.808 ms, b = 107.615 ms; the slowest rank, t_mb =
      260.175 ms, busy m·t_mb = 2,081.4 ms.

    The closed form charged (pp − 1)/(v·m) = 3/16 of the busy time, 390.3 ms (a bubble of 15.8 %
    of the section), every rank's chunk taken as the slowest rank's. The order: rank 3 cannot
    start before stage 0–2's first forwards (32.971 + 2 × 32.917 = 98.806 ms), and after its last
    backward the backwards of stages 2, 1, 0 remain (2 × 65.835 + 65.943 = 197.613 ms): at least
    296.42 ms; the simulation above gives 296.90 ms (rank 3 waits 0.48 ms more in the cool-down,
    where its output chunk's backward meets the stages before it), a bubble of 12.5 % of the
    section. 1F1B's own order on the same stages keeps 592.7 ms (22.2 %)."""
    e = trainplan.evaluate(
        model="llama3-8b", gpu="H100-SXM", dp=1, tp=1, pp=4, schedule="interleaved",
        virtual_stages=2, global_batch_size=8, micro_batch_size=1,
    )  # fmt: skip
    tt = e.time_terms
    assert tt is not None
    (f0, b0), (f1, b1), (f2, b2), (f3, b3) = tt.stage_s
    assert (f1 * 1e3, b1 * 1e3) == pytest.approx((65.835, 131.670), abs=1e-3)
    assert (f1, b1) == (f2, b2)
    assert (f0 * 1e3, f3 * 1e3) == pytest.approx((65.889, 86.725), abs=1e-3)
    layer_f, layer_b = f1 / 2, b1 / 2  # one chunk of 4 layers
    forward = [layer_f] * 8
    backward = [layer_b] * 8
    forward[0], backward[0] = f0 - layer_f, b0 - layer_b  # stage 0: the embedding
    forward[7], backward[7] = f3 - layer_f, b3 - layer_b  # stage 7: the output layer, the loss
    assert forward[7] * 1e3 == pytest.approx(53.808, abs=1e-3)
    busy = 8 * (f3 + b3)
    assert tt.busy_s == pytest.approx(busy, rel=1e-12)
    assert busy * 1e3 == pytest.approx(2081.4, abs=0.1)
    closed = busy * 3 / 16
    assert closed * 1e3 == pytest.approx(390.26, abs=0.01)
    path = sum(forward[:3]) + backward[0] + sum(backward[1:3])
    assert path * 1e3 == pytest.approx(296.42, abs=0.01)
    step = _megatron_step(4, 2, 8, forward, backward)
    assert (step - busy) * 1e3 == pytest.approx(296.90, abs=0.01)
    assert tt.bubble_s == pytest.approx(step - busy, rel=1e-9)
    assert path <= tt.bubble_s < closed
    assert float(e.bubble_fraction) == pytest.approx(0.125, abs=5e-4)  # was 3/19 = 15.8 %
    onef = trainplan.evaluate(
        model="llama3-8b", gpu="H100-SXM", dp=1, tp=1, pp=4, schedule="1f1b",
        global_batch_size=8, micro_batch_size=1,
    )  # fmt: skip
    assert onef.time_terms is not None
    assert onef.time_terms.bubble_s * 1e3 == pytest.approx(592.68, abs=0.01)
    assert onef.step_s > e.step_s


@settings(max_examples=40, deadline=None)
@given(
    pp=st.integers(2, 6),
    v=st.integers(2, 4),
    groups=st.integers(1, 7),
    f=st.integers(1, 9),
    extra=st.integers(0, 9),
)
def test_equal_chunks_give_the_closed_form(pp, v, groups, f, extra):
    """Every chunk of equal time (forward f, backward f + extra ≥ f, whole numbers so the sums
    are exact): the order's bubble is the closed form's (pp − 1)/(v·m) × m·t, t = v·(f + b) a
    rank's micro-batch, i.e. (pp − 1)·(f + b) exactly, at every m = groups·pp; and so is the
    independent simulation's."""
    m, b = groups * pp, f + extra
    width = pp * v
    bubble = layout_bubbles(pp, m, [float(f)] * width, [float(b)] * width, v * (f + b))
    assert bubble == (pp - 1) * (f + b)
    step = _megatron_step(pp, v, m, [float(f)] * width, [float(b)] * width)
    assert step == m * v * (f + b) + (pp - 1) * (f + b)


@settings(max_examples=25, deadline=None)
@given(
    pp=st.integers(2, 5),
    v=st.integers(2, 3),
    groups=st.integers(1, 4),
    data=st.data(),
)
def test_the_term_runs_megatrons_order(pp, v, groups, data):
    """On chunks of random times the term's order (model.pipeline_uneven.layout_bubbles) is the
    independent simulation's step to the rounding of float sums."""
    width = pp * v
    times = st.lists(st.integers(1, 20), min_size=width, max_size=width)
    fw, extra = data.draw(times), data.draw(times)
    forward = [float(x) for x in fw]
    backward = [float(x + y) for x, y in zip(fw, extra, strict=True)]
    m = groups * pp
    step = _megatron_step(pp, v, m, forward, backward)
    slot_f, slot_b = _by_slot(pp, v, forward), _by_slot(pp, v, backward)
    busy = max(sum(slot_f[i * v : (i + 1) * v]) + sum(slot_b[i * v : (i + 1) * v])
               for i in range(pp))  # fmt: skip
    assert layout_bubbles(pp, m, slot_f, slot_b, busy) == pytest.approx(step - m * busy, abs=1e-9)


def test_which_layouts_run_the_order():
    """Interleaved at pp > 1 runs the order whatever its chunks' counts; under the single model
    chunks alike in counts keep the closed form (chunks_alike): Llama 3 70B's 80 layers at pp 4 ×
    v 2 (chunks of 10) are alike, at v 8 (2s and 3s) not."""
    arch = get_model("llama3-70b").model.arch
    assert interleaved_order("interleaved", 2) and not interleaved_order("interleaved", 1)
    assert not interleaved_order("1f1b", 4)
    assert chunks_alike(arch, 4, 2, True, None, "interleaved")
    assert not chunks_alike(arch, 4, 8, True, None, "interleaved")
    assert chunks_alike(arch, 4, 1, True, None, "1f1b")
