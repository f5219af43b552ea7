"""The per-stage search on models whose attention spans repeat a period (gpt-oss's 128-key band
on every other layer, Gemma 3's five local layers to one global, Llama 4's three chunked to one
global): a stage's layers, and so its cost, depend on where it starts within the period, so the
tables are per (start residue, layer count) and CP-SAT ties each stage's residue to the prefix
sum of the stages before it (optimizer.stage_cpsat). Checked against an exhaustive oracle that
evaluates every split, and end to end against ``trainplan evaluate`` of the answer's
``--stage-layers``."""

from __future__ import annotations

import json

import pytest

from tests.archs import llama_like
from tests.optimizer.test_per_stage import oracle, tight_headroom
from trainplan.model.arch_parts import MoESpec
from trainplan.model.errors import InputError
from trainplan.model.estimate import objective_ns
from trainplan.model.model_spec import ModelSpec
from trainplan.model.terms.activation_fields import LAYER_FIELDS
from trainplan.model.terms.span_counts import stage_group_counts
from trainplan.optimizer.case import Case
from trainplan.optimizer.per_stage import solve_shape
from trainplan.optimizer.stage_rules import layer_pattern, realization, start_residue
from trainplan.optimizer.stage_tables import build_stage_tables
from trainplan.scenarios.catalogue import get_model


def span_case(
    num_layers: int, pp: int, pattern: tuple[str, ...], window: int | None = 512, **extra
):
    """A 256-wide Llama-like model (s 8192, as tests/optimizer/test_per_stage.py's tiny_case)
    whose layers take ``pattern``'s spans in turn, the local ones a ``window``-key band."""
    arch = llama_like(
        num_layers, 256, 4, 688, 1024, sliding_window=window, attention_pattern=pattern, **extra
    )
    model = ModelSpec(name="tiny-spans", source="test", arch=arch)
    return Case.of(
        model=model, pp=pp, seq_len=8192, global_batch_size=8, device="H100-SXM"
    )  # fmt: skip


@pytest.mark.parametrize(
    ("model", "pattern"),
    [
        ("llama3-70b", (0, 1)),  # alike layers
        ("deepseek-v3", (3, 1)),  # first_k_dense_replace = 3, MoE after
        ("gpt-oss-120b", (0, 2)),  # layer_types: sliding_attention, full_attention in turn
        ("llama4-scout", (0, 4)),  # no_rope_layers: three chunked, then one global
        ("gemma3-27b", (0, 6)),  # sliding_window_pattern 6: five local, then one global
    ],
)
def test_layer_pattern_of_catalogue_models(model, pattern):
    assert layer_pattern(get_model(model).model.arch) == pattern


def test_start_residue_by_hand():
    """gpt-oss-120b (P = 2, d = 0) split 9, 10, 10, 7: stage 1 starts at layer 9 (odd: residue
    1, a global layer first), stage 2 at 19 (1), the last at 36 − 7 = 29 (1); the first stage
    always 0. A leading block shifts the count: d = 3, P = 2, a stage after 8 layers starts at
    (8 − 3) mod 2 = 1."""
    assert [start_residue(s, 4, b, n, 36, 0, 2) for s, b, n in
            [(0, 0, 9), (1, 9, 10), (2, 19, 10), (3, 29, 7)]] == [0, 1, 1, 1]  # fmt: skip
    assert start_residue(3, 4, 0, 8, 36, 0, 2) == 0  # the last stage: 36 − 8 = 28, even
    assert start_residue(1, 4, 8, 4, 20, 3, 2) == 1
    assert start_residue(2, 4, 8, 4, 20, 0, 1) == 0  # alike layers: always 0


def test_a_middle_stage_is_costed_at_the_layers_it_starts_at():
    """9 layers local, global, local, … on 3 stages: stage 1 holding 3 layers after 3 (residue
    1) holds layers 3, 4, 5 — global, local, global: 1 local and 2 global; after 4 (residue 0)
    layers 4, 5, 6 — 2 local and 1 global. Its rows differ by residue, the global-heavy one
    slower (a global layer's core reads 8,192 keys, a local one's 512), and each row is the
    evaluator's figure at that start (stage_group_counts of the realization's layout)."""
    case = span_case(9, 3, ("local", "global"))
    tables = build_stage_tables(case, case.layout)
    assert (tables.prefix, tables.period) == (0, 2)
    rows = {(o.residue, o.layers): o for o in tables.options[1]}
    arch = case.model.arch
    for residue, groups in ((1, (1, 2)), (0, (2, 1))):
        lay = realization(case.layout, 9, 1, 3, 0, residue)
        held = stage_group_counts(arch, *(getattr(lay, name) for name in LAYER_FIELDS))
        assert held[1] == groups
    assert rows[1, 3].paced_ns > rows[0, 3].paced_ns
    # the first stage starts at 0 (residue 0 only), the last stage's residue is read off n
    assert {o.residue for o in tables.options[0]} == {0}
    assert all(o.residue == (9 - o.layers) % 2 for o in tables.options[2])


MOE = MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=128)
"""Every layer MoE, as gpt-oss's: the spans alone alternate."""

SPAN_ORACLE_CASES = [  # (L, pp, pattern, window, share of the way from full recompute's peak, MoE)
    (6, 3, ("local", "global"), 512, 0.5, None),
    pytest.param(
        7, 3, ("local", "local", "global"), 512, 0.4, None, marks=pytest.mark.exhaustive
    ),  # fmt: skip
    (7, 3, ("global", "local", "local"), 128, 0.2, None),
    (6, 3, ("local", "global"), 128, 0.5, MOE),
    pytest.param(7, 3, ("local", "local", "global"), 128, 0.3, MOE, marks=pytest.mark.slow),
    pytest.param(9, 3, ("local", "global"), 128, 0.9, None, marks=pytest.mark.exhaustive),
    pytest.param(8, 4, ("local", "global"), 512, 0.5, None, marks=pytest.mark.exhaustive),
]


@pytest.mark.parametrize(
    ("num_layers", "pp", "pattern", "window", "share", "moe"), SPAN_ORACLE_CASES
)
def test_cp_sat_equals_the_exhaustive_oracle_with_spans(
    num_layers, pp, pattern, window, share, moe
):
    """Every composition of L into pp stages and every recomputed count, evaluated
    (tests/optimizer/test_per_stage.py's oracle): CP-SAT's optimum over the (residue, n) rows is
    the oracle's, to the nanosecond. Figures (10 to 40 s of oracle each on 2 cores, 90 s for
    pp 4): 9,918,203 ns at 2, 2, 2 recomputing 0, 1, 0; 11,368,549 ns at 3, 2, 2 (0, 1, 0: stage
    1 starts at layer 3, residue 0, stage 2 at 5, residue 2); 12,437,587 ns at 3, 2, 2 (1, 1,
    0); MoE 10,755,604 ns at 2, 2, 2 (0, 1, 0) and 12,501,000 ns at 3, 2, 2 (0, 1, 0);
    14,045,586 ns at 3, 3, 3 (0, 1, 0); 10,870,142 ns at 2, 2, 2, 2 (0, 1, 1, 0)."""
    extra = {} if moe is None else {"moe": moe}
    case = span_case(num_layers, pp, pattern, window, **extra)
    headroom = tight_headroom(case, share)
    want = oracle(case, headroom)
    got = solve_shape(case, case.layout, headroom)
    assert want is not None and got.status == "optimal" and got.estimate is not None
    assert got.objective_ns == want[0]
    assert got.objective_ns == sum(objective_ns(got.estimate.time_terms))


INTERLEAVED_SPAN_CASES = [  # (L, pp, v, pattern, share, B): L/v a whole number of periods
    (12, 2, 2, ("local", "global"), 0.5, 8),
    (12, 3, 2, ("global", "local", "local"), 0.3, 6),
    pytest.param(12, 3, 2, ("local", "global"), 0.5, 6, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(
    ("num_layers", "pp", "v", "pattern", "share", "gb"), INTERLEAVED_SPAN_CASES
)
def test_cp_sat_equals_the_exhaustive_oracle_interleaved_with_spans(
    num_layers, pp, v, pattern, share, gb
):
    """Interleaved, every stage's count a multiple of v over equal chunks: chunk c of a stage
    after S layers starts at c·L/v + S/v, so with L/v a multiple of P (12/2 = 6 of periods 2
    and 3) every chunk of the stage starts at residue S/v mod P, and CP-SAT ties
    r_s = (S_s/v) mod P. Oracle (every composition in multiples of v, every per-chunk count):
    24,931,592 ns at 6, 6 recomputing 2, 1 per chunk; 13,936,273 ns at 4, 4, 4 (2, 2, 1);
    12,483,061 ns at 4, 4, 4 (1, 1, 0), equal to CP-SAT's, proven under the order's own step
    (optimizer.stage_exact over the chunks' passes, model.interleaved_paths)."""
    arch_case = span_case(num_layers, pp, pattern, 128)
    case = Case.of(
        model=arch_case.model, pp=pp, seq_len=8192, global_batch_size=gb, device="H100-SXM",
        schedule="interleaved", virtual_stages=v,
    )  # fmt: skip
    headroom = tight_headroom(case, share)
    want = oracle(case, headroom)
    got = solve_shape(case, case.layout, headroom)
    assert want is not None and got.status == "optimal" and got.estimate is not None
    assert got.estimate.layout.virtual_stages == v
    assert got.gap_ns <= 2 and abs(got.objective_ns - want[0]) <= 2


def test_chunks_that_would_hold_unequal_spans_are_refused():
    """10 layers over v 2 chunks start 5 apart, an odd count under a period of 2: a rank's two
    chunks would hold different spans (layers 0 … 2: local, global, local; 5 … 7: global,
    local, global), timed by the whole schedule (model.pipeline_uneven), not a stage's row."""
    arch_case = span_case(10, 2, ("local", "global"), 128)
    case = Case.of(
        model=arch_case.model, pp=2, seq_len=8192, global_batch_size=8, device="H100-SXM",
        schedule="interleaved", virtual_stages=2,
    )  # fmt: skip
    with pytest.raises(InputError, match="start L/v = 5 layers apart, not a whole number"):
        solve_shape(case, case.layout)


SEARCHES = [
    # (model, the per-stage answer's layout flags and split, step s, the plain search's step s)
    pytest.param(
        "gpt-oss-120b",
        ["--dp", "16", "--tp", "1", "--ep", "8", "--recompute", "none", "--global-batch", "1024"],
        [9, 10, 10, 7], [0, 0, 0, 0], 7.90688441831931, 9.247905723206616,
        id="gpt-oss-120b",
    ),
    pytest.param(
        "gemma3-27b",
        ["--dp", "4", "--tp", "4", "--ep", "1", "--recompute", "none", "--global-batch", "256"],
        [15, 15, 17, 15], [10, 7, 5, 0], 62.18836653126265, 70.82777110641531,
        id="gemma3-27b", marks=pytest.mark.slow,
    ),
]  # fmt: skip


@pytest.mark.parametrize(("model", "flags", "layers", "recomputed", "step", "plain"), SEARCHES)
def test_per_stage_answer_is_what_evaluate_says(model, flags, layers, recomputed, step, plain):
    """``trainplan search --per-stage --pp 4`` on 64 H100s, as a user runs it, was refused
    ("layers differ beyond a leading block") for both; now its answer, evaluated by
    ``trainplan evaluate`` with the answer's ``--stage-layers`` and ``--recompute-layers``, has
    the same step time and peak bytes to the last digit, and is faster than the plain search's
    (the uniform layouts: gpt-oss 9, 9, 9, 9 layers at 9.236 s (1F1B's bubble the order's own:
    7.927 s and 9.355 s under the closed form), its last stage's 9 layers and
    201,088-token output layer the slowest; Gemma 3 interleaved v 8 at 70.826 s). Gemma 3's two
    steps 14.6 µs longer since its collectives are timed by NCCL's own choice of algorithm and
    protocol (model.nccl_tuner). Every step a few ms longer since the optimizer step zeroes the
    distributed optimizer's whole FP32 gradient buffer, not the shard
    (model.terms.optimizer_time.whole_buffer_zeroing_bytes): gpt-oss 7.895183 → 7.898634 s and
    9.236204 → 9.239655 s, Gemma 3 62.184525 → 62.186446 s and 70.821370 → 70.825851 s.
    Megatron-Core's own optimizer-step passes (model.step_passes.step_pass_bytes: the clip's
    scale +8, the master re-read +4; 38 → 50 B an element) at 3.35 TB/s × 0.8866 = 2.97 TB/s,
    the splits and layouts not: gpt-oss +12 B × 1,843,553,448 owned elements = +7.4487 ms,
    7.898634 → 7.906082 s and 9.239655 → 9.247104 s; Gemma 3 +12 B × 475,407,360 = +1.9208 ms,
    62.186446 → 62.188367 s, and × 475,279,872 = +1.9203 ms, 70.825851 → 70.827771 s.
    A ring across nodes at the slower of its NICs and its NVLink (model/nvlink_bound.py
    ``ring_busbw``): gpt-oss's dense dp 16 ring (8 ranks on each of 2 nodes) at min(8 × 50 ×
    0.96, 450 × 0.8) = 360 GB/s, not 384: its 4,620,687,120 B (the plain layout's 4,620,703,320)
    × (1/360 − 1/384) ns a byte = +0.8022 ms, all exposed, 7.906082 → 7.906884 s and 9.247104 →
    9.247906 s; its expert dp 2 ring (one rank a node, 48 GB/s) and Gemma 3's dp 4 (2 ranks a
    node, 96 GB/s) unmoved."""
    common = ["--model", model, "--gpus", "64", "--gpu", "H100-SXM", "--pp", "4", "--json"]
    check_per_stage_answer(common, flags, layers, recomputed, step, plain)


def check_per_stage_answer(common, flags, layers, recomputed, step, plain, timeout=300):
    """``trainplan search *common --per-stage`` answers ``layers`` recomputing ``recomputed``;
    ``trainplan evaluate *common *flags`` (the answer's base: ZeRO-1, megatron, 1F1B, b 1) on its
    ``--stage-layers`` and ``--recompute-layers`` has its layout, its step (``step`` s) and its
    peak bytes to the last digit; the plain search's step is ``plain`` s, slower. ``layers`` may
    be a tuple of splits of one step (a tie: CP-SAT's two workers may answer either), and the
    answer's own split is evaluated. Returns the answer's JSON."""
    from tests.cli_runs import trainplan

    searched = trainplan("search", *common, "--per-stage", timeout=timeout)
    assert searched.returncode == 0, searched.stderr[-2000:]
    answer = json.loads(searched.stdout)
    ties = layers if isinstance(layers, tuple) else (layers,)
    layers = answer["per_stage"]["stage_layers"]
    assert layers in ties
    assert answer["per_stage"]["recompute_layers"] == recomputed
    evaluated = trainplan(
        "evaluate", *common, *flags, "--zero", "1", "--framework", "megatron", "--schedule",
        "1f1b", "--micro-batch", "1", "--stage-layers", ",".join(map(str, layers)),
        "--recompute-layers", ",".join(map(str, recomputed)),
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    ev = json.loads(evaluated.stdout)
    assert ev["layout"] == answer["layout"]
    assert ev["time"]["step_s"] == answer["time"]["step_s"] == pytest.approx(step, abs=1e-9)
    assert ev["memory"]["total_bytes"] == answer["memory"]["total_bytes"]
    uniform = trainplan("search", *common, timeout=timeout)
    assert uniform.returncode == 0, uniform.stderr[-2000:]
    plain_step = json.loads(uniform.stdout)["time"]["step_s"]
    assert plain_step == pytest.approx(plain, abs=1e-9)
    assert answer["time"]["step_s"] < plain_step
    return answer
