"""The step of 1F1B (and GPipe) with pipeline stages of unequal time (model.pipeline_onef), in
the one cost model (model.terms.pipeline_span): the order every framework runs, checked
against the project's timeline engine and DeepSpeed's lock-step, and charged by evaluate()."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.deepspeed_pipe import _stage_ops
from trainplan.model.estimate import evaluation_context
from trainplan.model.pipeline_onef import onef_bubble, onef_steps, warmup
from trainplan.model.pipeline_sim import Step, run
from trainplan.model.schedule import stage_order
from trainplan.model.schedule_zb import loop_stage
from trainplan.model.terms.fields import LayoutFields
from trainplan.model.terms.roofline import kind_seconds
from trainplan.optimizer.case import Case, links_for

TIMES = st.lists(st.integers(1, 40), min_size=1, max_size=8)


def _megatron_order(pp: int, m: int, rank: int) -> list[tuple[str, int]]:
    """forward_backward_pipelining_without_interleaving's passes on ``rank``: warm-up
    min(pp − rank − 1, m) forwards, forward and backward in turn, the cool-down backwards."""
    w = min(pp - rank - 1, m)
    out = [("F", j) for j in range(w)]
    for q in range(m - w):
        out += [("F", w + q), ("B", q)]
    return out + [("B", j) for j in range(m - w, m)]


def _torch_order(pp: int, m: int, rank: int) -> list[tuple[str, int]]:
    """Schedule1F1B's passes on stage ``rank``: min(m, pp − rank) warm-up forwards, then a
    backward and a forward in turn until the forwards run out, then the backwards."""
    warm = min(m, pp - rank)
    out = [("F", j) for j in range(warm)]
    f, b = warm, 0
    while b < m:
        out.append(("B", b))
        b += 1
        if f < m:
            out.append(("F", f))
            f += 1
    return out


def _engine_step(pp: int, m: int, f: list, b: list, schedule: str = "1f1b"):  # type: ignore[no-untyped-def]
    """The step of the order on model.pipeline_sim.run, the engine the pipeline tab draws."""
    orders = [[(Step(k, j, c),) for k, j, c in stage_order(pp, m, schedule, 1, i)]
              for i in range(pp)]  # fmt: skip
    slots = run(
        pp, pp, loop_stage(pp), lambda i, e: (f if e[0].kind == "F" else b)[i], orders=orders
    )
    return max(s.end for row in slots for s in row)


def _lockstep(pp: int, m: int, f: list, b: list):  # type: ignore[no-untyped-def]
    """DeepSpeed's TrainSchedule run with every transfer an instantaneous rendezvous of both
    stages (model.deepspeed_pipe._stage_ops' order), stage s's passes f[s] and b[s]."""
    ops = [_stage_ops(m, pp, s) for s in range(pp)]
    at, clock = [0] * pp, [Fraction(0)] * pp
    while any(at[s] < len(ops[s]) for s in range(pp)):
        for s in range(pp):
            while at[s] < len(ops[s]):
                op = ops[s][at[s]]
                if op[0] != "x":
                    clock[s] += f[s] if op[0] == "F" else b[s]
                    at[s] += 1
                    continue
                peer = op[1]
                if at[peer] >= len(ops[peer]) or ops[peer][at[peer]] != ("x", s, *op[2:]):
                    break
                clock[s] = clock[peer] = max(clock[s], clock[peer])
                at[s] += 1
                at[peer] += 1
    return max(clock)


@pytest.mark.parametrize(("pp", "m"), [(1, 3), (2, 1), (4, 2), (4, 8), (8, 5), (8, 20)])
def test_every_framework_runs_the_same_order(pp, m) -> None:
    """Megatron-Core's warm-up of pp − rank − 1 forwards then forward–backward pairs, PyTorch's
    Schedule1F1B's pp − rank forwards then backward–forward pairs, DeepSpeed TrainSchedule's
    lock-step and the project's own stage_order are one order of passes on every rank."""
    for rank in range(pp):
        megatron = _megatron_order(pp, m, rank)
        assert _torch_order(pp, m, rank) == megatron
        assert [(k, j) for k, j, _ in stage_order(pp, m, "1f1b", 1, rank)] == megatron
        deepspeed = [op for op in _stage_ops(m, pp, rank) if op[0] != "x"]
        assert deepspeed == megatron
        # forwards before the first backward: the warm-up and the first pair's forward
        assert megatron.index(("B", 0)) == min(warmup(pp, m, rank) + 1, m)


@settings(max_examples=150, deadline=None)
@given(TIMES, st.data(), st.integers(1, 24))
def test_the_recursion_is_the_longest_path(forward, data, m) -> None:
    """On random stage times (Fractions: exact) the round-by-round recursion equals the timeline
    engine's run of the order and DeepSpeed's lock-step with instantaneous transfers; it
    never exceeds the closed form (m + pp − 1)·max T_i (checked here, not proven) and never
    falls below m·T_k + Σ_{i<k} T_i for any stage k (a path: the first micro-batch's forwards
    down to k, all of k's passes, the last micro-batch's backwards up). With stages alike it
    is the closed form. GPipe's order (w = m) is the same recursion, whose step is two flow
    shops' ``Σ t_i + (m − 1)·max t_i``."""
    pp = len(forward)
    backward = data.draw(st.lists(st.integers(1, 80), min_size=pp, max_size=pp))
    f, b = [Fraction(x) for x in forward], [Fraction(x) for x in backward]
    step = onef_steps(pp, m, f, b)
    assert step == _engine_step(pp, m, f, b)
    assert step == _lockstep(pp, m, f, b)
    t = [x + y for x, y in zip(f, b, strict=True)]
    assert step <= (m + pp - 1) * max(t)
    assert step >= max(m * t[k] + sum(t[:k]) for k in range(pp))
    assert onef_steps(pp, m, [f[0]] * pp, [b[0]] * pp) == (m + pp - 1) * t[0]
    gpipe = onef_steps(pp, m, f, b, "gpipe")  # the closed form, model.pipeline_onef._gpipe
    assert gpipe == _engine_step(pp, m, f, b, "gpipe")
    assert gpipe == onef_steps(pp, m, f, b, "gpipe", settle=False)  # the sweep, round by round


def test_a_warm_up_can_hide_the_round_trip_behind_it() -> None:
    """``m·T_k + Σ_{i≠k} T_i`` is no lower bound: pp 2, stage 0 f = b = 10, stage 1 f = b = 1.
    Stage 0 runs F0, F1 (its warm-up and first forward); stage 1's F0 B0 (2) fit inside F1,
    so B0 follows at once and stage 0 never idles: 20·m, not 20·m + 2. The closed form says
    (m + 1)·20."""
    for m in (1, 2, 5, 40):
        step = onef_steps(2, m, [10, 1], [10, 1])
        assert step == 20 * m + (2 if m == 1 else 0)
        assert onef_bubble(2, m, [10, 1], [10, 1]) == step - 20 * m


def test_the_steady_phase_jump_is_exact() -> None:
    """Past the warm-up a round whose ends all moved by one c makes every later steady round
    move by c: the jump gives the round-by-round run to the rounding of float sums, one layout
    or many (the arrays' rounds take the backwards' chain as a running maximum)."""
    rng = np.random.default_rng(7)
    for pp, m in ((2, 50), (4, 128), (8, 300), (16, 64)):
        f = [rng.uniform(1, 3, 6) for _ in range(pp)]
        b = [2 * x + rng.uniform(0, 1, 6) for x in f]
        many = onef_steps(pp, m, f, b)
        for k in range(6):
            exact = _engine_step(pp, m, [Fraction(float(x[k])) for x in f],
                                 [Fraction(float(x[k])) for x in b])  # fmt: skip
            one = onef_steps(pp, m, [float(x[k]) for x in f], [float(x[k]) for x in b])
            assert one == pytest.approx(float(exact), rel=1e-12)
            assert many[k] == pytest.approx(float(exact), rel=1e-12)


def test_many_micro_batch_counts_in_one_call() -> None:
    """Layouts of several m in one call (the tables' rows of one group: the search's speed) give,
    to the bit, what one call per m gives. Hand derivation: pp 4, stages alike (f 1, b 2):
    ``(m + pp − 1)(f + b)`` = 33 at m 8, 45 at m 12; pp 2, stage 0 f = b = 10, stage 1
    f = b = 1: ``20·m`` (the warm-up hides stage 1) = 100 at m 5, 140 at m 7."""
    m = np.array([8, 12, 8])
    got = onef_steps(4, m, [np.ones(3)] * 4, [np.full(3, 2.0)] * 4)
    assert got.tolist() == [33.0, 45.0, 33.0]
    got = onef_steps(
        2, np.array([5, 7]), [np.full(2, 10.0), np.ones(2)], [np.full(2, 10.0), np.ones(2)]
    )
    assert got.tolist() == [100.0, 140.0]
    rng = np.random.default_rng(11)
    for pp in (2, 4, 8, 32):
        ms = rng.choice([pp - 1, pp, 2 * pp, 64 * pp, 512], 40)
        f = [rng.uniform(1, 3, 40) for _ in range(pp)]
        b = [2 * x + rng.uniform(0, 1, 40) for x in f]
        together = onef_bubble(pp, ms, f, b)
        for mi in set(ms.tolist()):
            rows = ms == mi
            alone = onef_bubble(pp, int(mi), [x[rows] for x in f], [x[rows] for x in b])
            assert np.array_equal(together[rows], alone)
    with pytest.raises(ValueError, match="one m"):
        onef_steps(4, np.array([2, 8]), [np.ones(2)] * 4, [np.ones(2)] * 4)


def test_evaluate_charges_it_llama3_70b_pp4_19_21_20_20() -> None:
    """Llama 3 70B on 64 H100s, dp 2 × tp 8 × pp 4, 1F1B, B 256 (m = 128), no recomputation,
    stages of 19, 21, 20, 20 layers: a layer L, the embedding e on stage 0, the output layer o
    on stage 3 (model.terms.roofline.kind_seconds; a forward a third, the backward the rest).
    Stage 3 (20L + o) is the slowest; its warm-up is empty and its forwards reach it before it
    is free, so the step is its own m micro-batches plus the first micro-batch's forwards down
    to it and the last one's backwards up from it: 128·(20L + o) + (19L + e) + 21L + 20L. The
    closed form charged 3·(20L + o) for the bubble: 874.1 → 831.4 ms."""
    kw = dict(
        model="llama3-70b", device="H100-SXM", num_gpus=64, dp=2, tp=8, pp=4,
        global_batch_size=256, recompute="none", schedule="1f1b", framework="megatron",
    )  # fmt: skip
    case = Case.of(**kw, stage_layers=(19, 21, 20, 20))
    tt = case.evaluate().time_terms
    assert tt is not None
    c = evaluation_context(case.model, case.training, case.device, case.options)
    fields = LayoutFields(case.layout, 256, 0, links_for(case.layout, case.links, case.fabric))
    (layer,), e, o = kind_seconds(c, fields)
    t = [19 * layer + e, 21 * layer, 20 * layer, 20 * layer + o]
    assert max(t) == t[3]
    assert tt.busy_s == pytest.approx(128 * t[3], rel=1e-12)
    assert tt.bubble_s == pytest.approx(t[0] + t[1] + t[2], rel=1e-9)
    assert tt.bubble_s == pytest.approx(0.8314, abs=5e-5)
    assert 3 * t[3] == pytest.approx(0.8741, abs=5e-5)  # the closed form's bubble
    est = case.evaluate()
    assert float(est.bubble_ratio) == pytest.approx(tt.bubble_s / tt.busy_s, rel=1e-5)
