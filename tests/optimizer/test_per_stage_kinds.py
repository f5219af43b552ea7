"""The per-stage search on models whose MoE and dense layers alternate (Llama 4 Maverick,
``interleave_moe_layer_step`` 2): the period of :func:`optimizer.stage_rules.layer_pattern` then
covers FFN kinds as well as attention spans, so a stage's rows per (start residue, layer count)
hold its own dense and MoE layers, and the solver's key counts the busiest stage's dense and
routed-expert parameters apart (:mod:`optimizer.stage_cpsat`), as the evaluator reads them
(:func:`model.terms.stage_params.busiest_params`). Checked against an exhaustive oracle, by hand
on Maverick's split, and end to end against ``trainplan evaluate``."""

from __future__ import annotations

import pytest

from tests.optimizer.test_per_stage import oracle, tight_headroom
from tests.optimizer.test_per_stage_spans import check_per_stage_answer, span_case
from trainplan.model.arch_parts import MoESpec
from trainplan.model.estimate import objective_ns
from trainplan.model.terms.stage_params import SplitKey, busiest_stage, stage_params_per_gpu
from trainplan.optimizer.case import Case
from trainplan.optimizer.per_stage import solve_shape
from trainplan.optimizer.stage_cpsat import StageModel
from trainplan.optimizer.stage_rules import layer_pattern
from trainplan.optimizer.stage_tables import build_stage_tables
from trainplan.scenarios.catalogue import get_model

ALTERNATING = MoESpec(
    num_experts=8, experts_per_token=2, expert_ffn_hidden_size=512, moe_layer_step=2
)
"""MoE on layers 1, 3, 5, … (Maverick's rule at a tiny size), dense SwiGLU of 688 between."""

KIND_ORACLE_CASES = [  # (L, pp, share of the way from full recompute's peak)
    (6, 3, 0.5),
    pytest.param(7, 3, 0.3, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("num_layers", "pp", "share"), KIND_ORACLE_CASES)
def test_cp_sat_equals_the_exhaustive_oracle_with_alternating_kinds(num_layers, pp, share):
    """Every composition of L into pp stages and every recomputed count, evaluated
    (tests/optimizer/test_per_stage.py's oracle): CP-SAT's optimum over the (residue, n) rows is
    the oracle's, to the nanosecond. Oracle figures (10 to 30 s each on 2 cores): 12,870,743 ns
    at 2, 2, 2 recomputing 0, 1, 0 (L 6); 15,867,552 ns at 3, 2, 2 recomputing 1, 1, 0 (L 7: stage
    1 starts at layer 3, a MoE layer, residue 1). Megatron-Core's own optimizer-step passes
    (model.step_passes.step_pass_bytes: the clip's scale +8, the master re-read +4; 38 → 50 B an
    element) at 2.97 TB/s (3.35 × 0.8866) moved both, the splits not: +12 B × 4,463,662 owned
    elements = +18,035 ns (12,852,708 → 12,870,743), +12 B × 5,254,672 = +21,231 ns (15,846,321
    → 15,867,552)."""
    case = span_case(num_layers, pp, ("global",), None, moe=ALTERNATING)
    assert layer_pattern(case.model.arch) == (0, 2)
    headroom = tight_headroom(case, share)
    want = oracle(case, headroom)
    got = solve_shape(case, case.layout, headroom)
    assert want is not None and got.status == "optimal" and got.estimate is not None
    assert got.objective_ns == want[0] == {6: 12_870_743, 7: 15_867_552}[num_layers]
    assert got.objective_ns == sum(objective_ns(got.estimate.time_terms))


def maverick_case(pp: int, dp: int) -> Case:
    """Llama 4 Maverick on 256 H100s at the catalogue's s 8,192 and B 1,024: tp 2, ep 16, etp 2,
    megatron ZeRO-1, 1F1B, b 1, no base recomputation (the per-stage answers' base)."""
    entry = get_model("llama4-maverick")
    return Case.of(
        entry.model, "H100-SXM", num_gpus=256, dp=dp, tp=2, pp=pp, ep=16, etp=2,
        recompute="none", zero_stage=1, framework="megatron", schedule="1f1b",
        micro_batch_size=1, seq_len=8192, global_batch_size=1024,
    )  # fmt: skip


def test_maverick_stages_of_one_count_hold_different_parameters():
    """Maverick split 12, 13, 13, 10 at tp 2, ep 16, etp 2 (pp 4). Per GPU (model.params,
    Megatron's tp-replicated norms and router kept whole): a dense layer (314,583,040, norms
    10,240) (314,583,040 − 10,240)/2 + 10,240 = 157,296,640; a MoE layer's dense part (attention
    62,914,560 + shared expert 125,829,120 + router 655,360 + norms 10,240 = 189,409,280, of it
    665,600 replicated) 94,371,840 + 665,600 = 95,037,440; its routed experts 128 · 125,829,120
    / (etp 2 · ep 16) = 503,316,480. The embedding and output layer, V 202,048 padded to a
    multiple of 128 · tp = 202,240, 202,240 · 5120 / 2 = 517,734,400 each; the final norm 5,120.

    Stage 1 (layers 12 … 24, starting on a dense layer, residue 0): 7 dense + 6 MoE; stage 2
    (25 … 37, residue 1): 6 dense + 7 MoE — the same count, 501,986,560 more parameters per
    GPU. Stage 0 (0 … 11) with the embedding has the most dense parameters, stage 2 the most of
    both together: the evaluator's busiest stage (model.terms.stage_params.busiest_stage), whose
    dense and expert parameters decide the dp bytes (ZeRO shards them over dp and edp apart),
    the optimizer step and offload. The most dense parameters (the key before) is stage 0's,
    not the busiest stage's; CP-SAT's key (D, E, B, M, C) at this split is stage 2's dense and
    experts × lcm(tp, etp·ep) = 32, 13 layers and 7 MoE layers on a stage at most."""
    case = maverick_case(4, 32)
    lay = case.layout.with_(stage_layers=(12, 13, 13, 10), recompute_layers=(3, 0, 0, 0))
    split = stage_params_per_gpu(SplitKey.of_layout(case.model, lay, case.vocab_multiple))
    dense, moe_dense, experts, ends = 157_296_640, 95_037_440, 503_316_480, 517_734_400
    assert [(d, e) for _, _, d, e in split] == [
        (6 * dense + 6 * moe_dense + ends, 6 * experts),
        (7 * dense + 6 * moe_dense, 6 * experts),
        (6 * dense + 7 * moe_dense, 7 * experts),
        (5 * dense + 5 * moe_dense + ends + 5_120, 5 * experts),
    ]
    assert busiest_stage(split) == 2
    assert max(range(4), key=lambda s: split[s][2]) == 0
    tables = build_stage_tables(case, case.layout)
    assert (tables.prefix, tables.period) == (0, 4)
    model = StageModel(tables, 0)
    # (3 of stage 0's layers recomputed: the per-stage answer below; with 2 its stage 0 no
    # longer fits beside Transformer Engine's placeholder weight gradients)
    for var, value in zip(model.n + model.k, (12, 13, 13, 10, 3, 0, 0, 0), strict=True):
        model.model.add(var == value)
    sol = model.solve()
    assert sol is not None and sol.layers == (12, 13, 13, 10)
    d2, e2 = split[2][2], split[2][3]
    assert sol.key[:4] == (d2 * 32, e2 * 32, 13, 7)


MAVERICK_SEARCHES = [
    # (pp, the per-stage answer's dp, split, recomputed, step s, the plain search's step s)
    pytest.param(4, 32, [12, 13, 13, 10], [3, 0, 0, 0], 9.580616956234614, 10.727025708454905,
                 id="pp4"),
    pytest.param(8, 16, ([7, 7, 6, 6, 7, 6, 6, 3], [7, 7, 6, 6, 6, 7, 6, 3],
                         [7, 7, 7, 6, 6, 6, 6, 3]), [0] * 8,
                 10.332349350292516, 12.7186343034054, id="pp8", marks=pytest.mark.exhaustive),
]  # fmt: skip


@pytest.mark.parametrize(("pp", "dp", "layers", "recomputed", "step", "plain"), MAVERICK_SEARCHES)
def test_maverick_per_stage_answer_is_what_evaluate_says(pp, dp, layers, recomputed, step, plain):
    """``trainplan search --model llama4-maverick --gpus 256 --gpu H100-SXM --per-stage --pp P
    --tp 2`` (at pp 8 ``--ep 16`` too: the answers' degrees, fixed to keep the test short)
    was refused ("MoE and dense layers alternate"); now its answer, evaluated by ``trainplan
    evaluate`` with the answer's ``--stage-layers`` and ``--recompute-layers``, has the same step
    time and peak bytes to the last digit, and is faster than the plain search's under the same
    constraints (the uniform 12 × 4 at pp 4, ep 32: 10.718 s; 6 × 8 at pp 8: 12.711 s). At pp 8
    the answer is the best under 1F1B's own order (optimizer.stage_exact): 7,7,6,6,7,6,6,3,
    7,7,6,6,6,7,6,3 or 7,7,7,6,6,6,6,3 (one step and one peak; one CP-SAT worker answers the
    first) at 10.326 s, where the split best under the closed form,
    7,7,7,7,7,7,5,1, evaluates to 10.351 s; the last stage holds three layers beside the
    202,048-token output layer.

    NCCL's tuner (model/nccl_tuner.py: ``ncclTopoTuneModel``, ``topoGetAlgoInfo``) moved every
    step here, the splits and layouts not. Each dp ring (4 members a node on 4 NICs, 192 GB/s;
    the ring graph's 8 channels; LL128's bytes at min(0.92 × 192, 8 × 36.7) = 176.64 GB/s):
    at pp 4, dp 32 over 8 nodes, LL128's latency 14 + 7 × 4.0 + 24 × 1.9 = 87.6 µs against
    Simple's 8.4 + 7 × 14 + 24 × 3.4 = 188.0, so the reduce-scatters (152.1 MB a rank) and
    all-gathers (76.0 MB) both run in LL128: 948.5 and 518.1 µs against 980.1 and 584.0, 97.5 µs
    a pair; the dp row 64.13 → 60.13 ms, the step 9.563464 → 9.562509 s (the uniform search's
    ep 32 layout, 154.4 and 77.2 MB a call, 80.68 → 75.79 ms: 10.719187 → 10.718018 s). At pp 8,
    dp 16 over 4 nodes, 14 + 3 × 4.0 + 12 × 1.9 = 48.8 µs against 8.4 + 3 × 14 + 12 × 3.4 =
    91.2: the all-gathers (74.6 MB) in LL128, 471.0 µs against 479.7, the reduce-scatters
    (149.2 MB) still Simple (893.3 against 868.1): 10.324153 → 10.324079 s (7,7,7,7,7,7,5,1
    10.349120 → 10.349045; the uniform search's 12.710668 → 12.710602). The optimizer step
    zeroing the distributed optimizer's whole FP32 gradient buffers, dense and expert
    (model.terms.optimizer_time.whole_buffer_zeroing_bytes): at pp 4 9.562509 → 9.566981 s, the
    uniform search's 10.718018 → 10.720668 s; at pp 8 10.324079 → 10.325887 s (7,7,7,7,7,7,5,1
    10.349045 → 10.350853 s, the uniform search's 12.710602 → 12.712212 s). Megatron-Core's
    own optimizer-step passes (model.step_passes.step_pass_bytes: the clip's scale +8, the
    master re-read +4; 38 → 50 B an element) at 2.97 TB/s (3.35 × 0.8866), the splits and
    layouts not: at pp 4 +12 B × 1,811,890,240 owned elements (stage 2's dense over dp 32, its
    experts over edp 2) = +7.3208 ms, 9.566981 → 9.574302 s, the uniform search's +12 B ×
    1,573,441,440 = +6.3573 ms, 10.720668 → 10.727026 s; at pp 8 +12 B × 1,599,451,520 =
    +6.4624 ms, 10.325887 → 10.332349 s, the uniform search's +12 B × 1,589,620,800 =
    +6.4227 ms, 12.712212 → 12.718634 s. Transformer Engine's placeholder weight gradients
    (model/terms/dummy_wgrads.py: one BF16 tensor per distinct weight shape, held for the run)
    leave the pp 4 answer's stage 0 no room for 10 of its 12 layers kept whole: it recomputes
    3 (2 before), 9.574302 → 9.580617 s; the uniform search's answer is unchanged."""
    common = ["--model", "llama4-maverick", "--gpus", "256", "--gpu", "H100-SXM", "--pp", str(pp),
              "--tp", "2", *(["--ep", "16"] if pp == 8 else []), "--json"]  # fmt: skip
    flags = ["--dp", str(dp), "--tp", "2", "--ep", "16", "--etp", "2", "--recompute", "none"]
    answer = check_per_stage_answer(common, flags, layers, recomputed, step, plain, timeout=900)
    assert answer["per_stage"]["status"] == "optimal"
