"""Simulated timelines against the closed forms, and hypothesis properties of the four tabs."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.interface.tabs import mfu_report, rlhf_report
from trainplan.model import checkpointing as ck
from trainplan.model.mfu import recompute_flops_per_token
from trainplan.model.pipeline import bubble_fraction, bubble_ratio, microbatches_in_flight
from trainplan.model.schedule import simulate

PP = st.integers(1, 8)
M = st.integers(1, 24)


@settings(max_examples=60, deadline=None)
@given(PP, M, st.sampled_from(["gpipe", "1f1b"]))
def test_simulated_bubble_and_held_match_closed_forms(p, m, schedule):
    t = simulate(p, m, schedule)
    for i in range(p):
        assert t.idle_fraction(i) == bubble_fraction(p, m)
        assert t.peak_held(i) == microbatches_in_flight(p, m, schedule, stage=i)
    idle = t.step_time - t.busy_time(0)
    assert idle / t.busy_time(0) == bubble_ratio(p, m)


@settings(max_examples=40, deadline=None)
@given(PP, st.integers(1, 4), st.integers(1, 4))
def test_interleaved_bubble_and_first_stage_held(p, mult, v):
    m = p * mult
    t = simulate(p, m, "interleaved", v)
    assert all(t.idle_fraction(i) == bubble_fraction(p, m, v) for i in range(p))
    # Korthikanti et al. 2022 §4.2.3: p·(1 + (p−1)/(p·v)) on the first stage
    assert t.peak_held(0) == min(Fraction(m), p * (1 + Fraction(p - 1, p * v)))


@settings(max_examples=60, deadline=None)
@given(PP, M, st.sampled_from(["gpipe", "1f1b"]), st.integers(1, 4))
def test_bubble_properties(p, m, schedule, ratio):
    t = simulate(p, m, schedule, backward_ratio=ratio)
    frac = t.idle_fraction(0)
    assert 0 <= frac < 1
    assert (frac == 0) == (p == 1)
    other = simulate(p, m, "gpipe" if schedule == "1f1b" else "1f1b", backward_ratio=ratio)
    assert other.idle_fraction(0) == frac  # GPipe and 1F1B: same bubble
    if schedule == "1f1b":
        assert all(t.peak_held(i) <= p for i in range(p))


def test_slots_never_overlap_and_respect_dependencies():
    t = simulate(4, 8, "interleaved", 2)
    for stage in t.slots:
        for a, b in zip(stage, stage[1:], strict=False):
            assert a.end <= b.start
    ends = {(s.kind, s.chunk * 4 + s.stage, s.microbatch): s for row in t.slots for s in row}
    for (kind, u, j), s in ends.items():
        if kind == "F" and u > 0:
            assert ends[("F", u - 1, j)].end <= s.start
        if kind == "B" and u < 7:
            assert ends[("B", u + 1, j)].end <= s.start


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))))
def test_checkpointing_peak(nk):
    n, k = nk
    steps = ck.walk(n, k)
    peak = max(len(s.held) for s in steps)
    assert peak == ck.peak_held_formula(n, k) <= n + 1
    if n % k == 0:
        assert peak == n // k + k or k == n
    assert len(steps) == 3 * n and not steps[-1].held
    assert all(len(s.held) <= s.held_without_checkpointing or s.phase != "forward" for s in steps)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 10**4),
    st.integers(1, 10**4),
    st.integers(1, 100),
    st.sampled_from(["none", "selective", "full"]),
    st.booleans(),
)
def test_hfu_at_least_mfu(tps, chips, pct, mode, attention):
    kw = dict(params=1e9, tokens_per_second=tps, peak_tflops=1000, chips=chips, attention=attention)
    dims = dict(layers=4, heads=8, head_dim=64, seq_len=512)  # given only where they apply
    by_pct = mfu_report(**kw, **(dims if attention else {}), recomputed_flops_pct=pct)
    by_mode = mfu_report(**kw, **(dims if attention else {}), recompute=mode)
    for r in (by_pct, by_mode):
        assert r["hfu"] >= r["mfu"] >= 0
        assert r["mfu"] >= r["mfu_without_attention"]


def test_full_recompute_is_a_third_of_six_n():
    assert recompute_flops_per_token("full", 10**9) * 3 == 6 * 10**9


@pytest.mark.parametrize(
    "algorithm, reward, nets",
    [("ppo", "model", 4), ("grpo", "model", 3), ("grpo", "rule", 2), ("dpo", None, 2)],
)
def test_rlhf_share_sums(algorithm, reward, nets):
    r = rlhf_report(algorithm, 7e9, reward=reward, peak_tflops=1000)
    assert r["networks"] == nets
    assert abs(sum(r["phase_flops_share"].values()) - 1) < 1e-12
    assert abs(sum(r["phase_time_share"].values()) - 1) < 1e-12


def test_rlhf_options_add_memory():
    base = rlhf_report("grpo", 70e9, reward="rule", peak_tflops=1000)
    more = rlhf_report(
        "grpo",
        70e9,
        reward="rule",
        peak_tflops=1000,
        rollout_engine=True,
        layers=80,
        kv_heads=8,
        head_dim=128,
        rollout_batch=1,
        prompt_tokens=1024,
        completion_tokens=1024,
        logits_buffer=True,
        vocab_size=128256,
    )
    extra = more["extra_bytes"]
    assert extra["rollout_weights_bytes"] == 140 * 10**9
    assert extra["kv_cache_bytes"] == 2 * 80 * 8 * 128 * 2 * 2048
    assert extra["logits_buffer_bytes"] == 2048 * 128256 * 4
    assert more["resident_bytes"] == base["resident_bytes"] + sum(extra.values())
    assert more["bytes_per_policy_param"] == base["bytes_per_policy_param"] == 18
