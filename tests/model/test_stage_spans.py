"""Each pipeline stage's attention core at the spans of the layers it holds (model/core_spans.py
span_groups and group_counts, model/terms/span_counts.py, model.terms.roofline.stage_parts_term):
a stage is one layer of each span group times its own layers in that group, so the stage that
holds more global layers than the model's mix (which paces the pipeline) is charged them.

Which layers a stage holds is the split's (model.split: Megatron's even split, the ends giving
a layer back first; explicit stage_layers as Megatron-Core's --pipeline-model-parallel-layout).
The core times are the H200 cudnn-frontend sweeps' (tests/model/test_window_spans.py: Gemma 3's
1,024-key band at 349 TFLOP/s forward and 300·0.8 backward, the global causal core at 644 and
432.8, s = 8,192, each call + t_kernel = 3 µs).
"""

from __future__ import annotations

import pytest

from trainplan.model.estimate import evaluation_context
from trainplan.model.pipeline_uneven import chunk_counts, chunks_alike
from trainplan.model.split import split_rule_of
from trainplan.model.terms.fields import LayoutFields
from trainplan.model.terms.roofline import kind_seconds, stage_parts_term
from trainplan.model.terms.span_counts import stage_group_counts
from trainplan.optimizer.case import Case, links_for
from trainplan.scenarios.catalogue import get_model

GEMMA = get_model("gemma3-27b").model.arch
"""62 layers, five local (W = 1,024) to one global: layers 5, 11, …, 59 global."""
GPT_OSS = get_model("gpt-oss-120b").model.arch
"""36 layers alternating a 128-key band (even layers) and a global layer (odd)."""
T_KERNEL = 3e-6


def _stages(model: str, pp: int, **kw):  # type: ignore[no-untyped-def]
    """(each stage's micro-batch seconds, kind_seconds) of ``model`` on 64 H200s at dp·pp, tp 1,
    s 8,192, b 1, no recomputation (stage_parts_term's total)."""
    case = Case.of(
        model=model, device="H200", num_gpus=64, dp=64 // pp, pp=pp, recompute="none",
        global_batch_size=64, seq_len=8192, **kw,
    )  # fmt: skip
    c = evaluation_context(case.model, case.training, case.device, case.options)
    links = links_for(case.layout, case.links, case.fabric)
    fields = [LayoutFields(case.layout, 64, i, links) for i in range(pp)]
    return [stage_parts_term(c, f)[0] for f in fields], kind_seconds(c, fields[0]), case


def _gemma_delta() -> float:
    """A global layer's core less a local one's, forward + backward (seconds): 32 heads of 128,
    local P = 1,024·1,025/2 + 7,168·1,024 = 7,864,832 pairs, global 8,192·8,193/2 = 33,558,528;
    F = 2·P·a·(d_qk + d_v); forward F/rate + t_kernel, backward 2F/rate + t_kernel."""
    loc_f = 2 * 7_864_832 * 32 * 256
    glob_f = 2 * 33_558_528 * 32 * 256
    loc = loc_f / 349e12 + 2 * loc_f / 240e12 + 2 * T_KERNEL
    glob = glob_f / 644e12 + 2 * glob_f / 432.8e12 + 2 * T_KERNEL
    return glob - loc


def test_gemma3_global_layers_per_stage():
    """Megatron's split of 62 layers: pp 2 — 31, 31 (0–30: globals 5, 11, 17, 23, 29; 31–61:
    35, 41, 47, 53, 59); pp 4 — 15, 16, 16, 15 (0–14: 5, 11; 15–30: 17, 23, 29; 31–46: 35, 41;
    47–61: 47, 53, 59); pp 8 — 7, 8 × 6, 7 (0–6: 5; 7–14: 11; 15–22: 17; 23–30: 23, 29; 31–38:
    35; 39–46: 41; 47–54: 47, 53; 55–61: 59). The model-wide mix is 10/62 global."""
    assert stage_group_counts(GEMMA, 2, 1, True, None) == ((26, 5), (26, 5))
    assert stage_group_counts(GEMMA, 4, 1, True, None) == ((13, 2), (13, 3), (14, 2), (12, 3))
    assert stage_group_counts(GEMMA, 8, 1, True, None) == (
        (6, 1), (7, 1), (7, 1), (6, 2), (7, 1), (7, 1), (6, 2), (6, 1),
    )  # fmt: skip


def test_gemma3_stage_core_times_pp_2_4_8():
    """One global layer costs Δ = 1.9515 ms more than a local one per micro-batch (forward +
    backward; _gemma_delta), the rest of the layer alike. pp 4: stage 1 (13 local, 3 global)
    less stage 2 (14, 2) is Δ; the slowest stage is 3 (12 local, 3 global, the output layer),
    which the model-wide mean charged 15·10/62 = 2.419 globals: (3 − 150/62)·Δ = 1.133 ms less.
    pp 8: stages 3 and 6 (two globals in eight layers) exceed stage 1 (one) by Δ; the last
    stage (6 local, 1 global, output) still paces. pp 2: both stages hold 5 globals of 31, each
    stage its own layers: stage 1 less stage 0 is the output layer less the embedding."""
    delta = _gemma_delta()
    assert delta * 1e3 == pytest.approx(1.9515, abs=1e-4)
    t, (groups, embedding, output), _ = _stages("gemma3-27b", 4)
    local, glob = groups
    assert glob - local == pytest.approx(delta, rel=1e-9)
    assert t[1] - t[2] == pytest.approx(delta, rel=1e-6)
    assert max(t) == t[3] == pytest.approx(12 * local + 3 * glob + output, rel=1e-12)
    mean = local + 10 / 62 * delta  # the old charge: every layer the model-wide mix
    assert t[3] - (15 * mean + output) == pytest.approx((3 - 150 / 62) * delta, rel=1e-6)
    assert (t[3] - (15 * mean + output)) * 1e3 == pytest.approx(1.1331, abs=1e-3)
    t8, (groups8, _, output8), _ = _stages("gemma3-27b", 8)
    assert groups8 == groups and output8 == output  # one layer's parts: pp does not move them
    assert t8[3] - t8[1] == pytest.approx(delta, rel=1e-6)
    assert t8[6] - t8[2] == pytest.approx(delta, rel=1e-6)
    assert max(t8) == t8[7] == pytest.approx(6 * local + glob + output, rel=1e-12)
    t2, _, _ = _stages("gemma3-27b", 2)
    assert t2[1] - t2[0] == pytest.approx(output - embedding, rel=1e-9)


def test_gpt_oss_120b_pp_4_holds_nine_layers_a_stage():
    """36 layers over pp 4: nine a stage (0–8, 9–17, 18–26, 27–35), so the alternation does not
    split evenly: stages 0 and 2 hold five bands (even layers) and four globals, stages 1 and 3
    four and five. Stage 1 less stage 2 is one global layer less one band layer (Δ, 2.825 ms
    here at s 8,192 on the H200, the 128-key band timed by its tiles, model.band_tiles: 3.244 ms
    with the band held at the causal 2,048 rate); the last stage (five globals and the output layer) exceeds the
    model-wide mean's charge by Δ/2. At pp 2 (18 layers, 9 of each) every stage holds the
    model's mix: the mean was exact there."""
    assert stage_group_counts(GPT_OSS, 4, 1, True, None) == ((5, 4), (4, 5), (5, 4), (4, 5))
    assert stage_group_counts(GPT_OSS, 2, 1, True, None) == ((9, 9), (9, 9))
    t, ((band, glob), _, output), _ = _stages("gpt-oss-120b", 4)
    assert t[1] - t[2] == pytest.approx(glob - band, rel=1e-6)
    assert (glob - band) * 1e3 == pytest.approx(2.825, abs=1e-3)
    assert max(t) == t[3] == pytest.approx(4 * band + 5 * glob + output, rel=1e-12)
    mean = (band + glob) / 2
    assert t[3] - (9 * mean + output) == pytest.approx((glob - band) / 2, rel=1e-6)


def test_an_uneven_split_moves_the_global_layers():
    """Gemma 3 split 20, 14, 14, 14 (explicit stage_layers): 0–19 holds globals 5, 11, 17;
    20–33: 23, 29; 34–47: 35, 41, 47; 48–61: 53, 59. Stages 1 and 2 hold 14 layers each, stage 2
    one global more: Δ more."""
    sizes = (20, 14, 14, 14)
    assert stage_group_counts(GEMMA, 4, 1, True, sizes) == ((17, 3), (12, 2), (11, 3), (12, 2))
    t, _, _ = _stages("gemma3-27b", 4, stage_layers=sizes)
    assert t[2] - t[1] == pytest.approx(_gemma_delta(), rel=1e-6)


def test_interleaved_chunks_of_unequal_span_mixes():
    """Gemma 3 at pp 2, v 2, chunks of 17, 14, 17, 14 layers (explicit stage_layers, per chunk):
    rank 0 holds chunks 0 (layers 0–16: globals 5, 11) and 2 (31–47: 35, 41, 47), rank 1 chunks
    1 (17–30: 17, 23, 29) and 3 (48–61: 53, 59). Each rank's chunks hold equal counts, their
    global layers differ (2 and 3), so the chunks are not alike (chunks_alike) and the
    interleaved order run on the chunks as timed (model.terms.pipeline_span) leaves a bubble
    that is not (pp − 1)/(v·m) of the busy time: 740.9 ms where the closed form gives
    2,775.5 ms × 1/4 = 693.9 ms (m = 2; s 8,192 on 64 H200s). Llama 3 70B's chunks (80 layers
    over pp 4 × v 2 chunks of 10, one span) are alike in their layers (the roofline model still
    runs the order there: the embedding and the output layer make the end chunks longer)."""
    sizes = (17, 14, 17, 14)
    counts = chunk_counts(GEMMA, 2, 2, True, sizes, "interleaved")
    assert counts[:4] == (17, 17, 14, 14)  # rank 0's chunks, then rank 1's
    assert counts[4:] == (15, 14, 11, 12) + (2, 3, 3, 2)  # local, then global, each chunk
    assert not chunks_alike(GEMMA, 2, 2, True, sizes, "interleaved")
    assert chunks_alike(get_model("llama3-70b").model.arch, 4, 2, True, None, "interleaved")
    _, _, case = _stages("gemma3-27b", 2, stage_layers=sizes, schedule="interleaved",
                         virtual_stages=2)  # fmt: skip
    tt = case.evaluate().time_terms
    assert tt is not None
    m = 64 // 32  # B 64 over dp 32, b 1
    closed = tt.busy_s * (2 - 1) / (2 * m)
    assert closed * 1e3 == pytest.approx(693.9, abs=0.1)
    assert tt.bubble_s * 1e3 == pytest.approx(740.9, abs=0.1)


def test_the_search_tables_equal_evaluate_on_gemma3_stages():
    """The search's array tables (optimizer.tables.build_tables: stage_parts_term over columns
    of layouts, the stage's group counts a per-stage lookup) give evaluate()'s t1 to the
    nanosecond for Gemma 3 27B on 16 H100s at pp > 1, among them layouts whose stages hold
    unequal numbers of global layers (pp 4: 2, 3, 2, 3) and interleaved ones whose chunks do."""
    from trainplan.model.estimate import objective_ns
    from trainplan.optimizer.problem import Job, Problem
    from trainplan.optimizer.search import NS_TOLERANCE
    from trainplan.optimizer.space import SearchSpace
    from trainplan.optimizer.tables import build_tables

    case = Case.of("gemma3-27b", "H100-SXM", global_batch_size=32, seq_len=8192)
    space = SearchSpace(num_gpus=16, max_micro_batch_size=1, virtual_stages=(2,))
    tables = build_tables(Problem(jobs=(Job(case, 16, "gemma3"),), space=space))
    rows = [
        (s, r)
        for s in range(len(tables.shapes))
        for r in range(len(tables.recomputes))
        if tables.shapes[s].pp > 1 and tables.legal[s, :, r].any()
    ]
    mixed = interleaved = 0
    for s, r in rows[::3]:
        shape = tables.shapes[s]
        lay = shape.layout(tables.zero_stages[0], tables.recomputes[r])
        t1, _ = objective_ns(case.evaluate(lay).time_terms)
        assert abs(t1 - tables.t1_at(s, 0, r)) <= NS_TOLERANCE, lay
        rule = split_rule_of(lay.uneven_stages, lay.framework, lay.pp)
        held = stage_group_counts(GEMMA, lay.pp, lay.virtual_stages, rule, lay.stage_layers,
                                  lay.schedule)  # fmt: skip
        mixed += len({g for _, g in held}) > 1
        interleaved += str(lay.schedule) == "interleaved" and not chunks_alike(
            GEMMA, lay.pp, lay.virtual_stages, rule, lay.stage_layers, str(lay.schedule)
        )
    assert mixed and interleaved


def test_dense_layers_between_moe_layers_are_timed():
    """Llama 4 Scout with a MoE FFN on every other layer (moe_layer_step 2, as Maverick's
    interleave_moe_layer_step; no leading dense block): layers 0, 2, … dense, 1, 3, … MoE
    ((index + 1) mod 2 = 0); the pattern's global layers are 3, 7, 11, … (chunked × 3, global),
    all MoE. Three span groups: dense chunked (layer 0), MoE chunked (1), MoE global (3). At pp 2
    stage 0 holds layers 0–23: 12 dense, 6 MoE chunked (1, 5, …, 21), 6 MoE global (3, 7, …,
    23). Its micro-batch is 12 dense layers + 6 + 6 MoE + the embedding: the dense layers, 34.4 ms
    each here (tp 1, s 8,192 on the H100), were charged nothing when the clock read the dense
    kind off the leading block alone (first_k_dense_layers 0)."""
    from dataclasses import replace

    from trainplan.model.core_spans import span_groups

    spec = get_model("llama4-scout").model
    arch = replace(spec.arch, moe=replace(spec.arch.moe, moe_layer_step=2))
    assert span_groups(arch) == ((False, 0), (True, 1), (True, 3))
    assert stage_group_counts(arch, 2, 1, True, None) == ((12, 6, 6), (12, 6, 6))
    case = Case.of(
        replace(spec, arch=arch), "H100-SXM", num_gpus=16, dp=8, pp=2, recompute="none",
        global_batch_size=16, seq_len=8192,
    )  # fmt: skip
    c = evaluation_context(case.model, case.training, case.device, case.options)
    f = LayoutFields(case.layout, 16, 0, links_for(case.layout, case.links, case.fabric))
    (dense, chunked, glob), embedding, _ = kind_seconds(c, f)
    assert dense * 1e3 == pytest.approx(34.41, abs=0.01)
    t = stage_parts_term(c, f)[0]
    assert t == pytest.approx(12 * dense + 6 * chunked + 6 * glob + embedding, rel=1e-12)
