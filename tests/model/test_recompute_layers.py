"""Per-stage recomputation (issue 13 item 1): ``Layout.recompute_layers`` — the first k layers of
each pipeline stage fully recomputed, the others keeping the base mode, as Megatron-LM's
``--recompute-granularity full --recompute-method block --recompute-num-layers k`` per stage —
its memory, time, FLOPs, errors, and the pipeline simulation with unequal stage times that the
step's closed form is checked against.

Sources: Korthikanti et al. 2022 (arXiv 2205.05198) §5 for full recomputation's kept input and
transient; Megatron-LM ``transformer_block._checkpointed_forward`` (block method); Narayanan et
al. 2021 §2.2.1 for 1F1B's in-flight micro-batches.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.archs import llama_like
from tests.test_cli_planner import run_main
from trainplan.model.errors import LayoutError
from trainplan.model.layout import Layout, Recompute
from trainplan.model.model_spec import ModelSpec
from trainplan.model.pipeline import interleaved_chunks_held_simulated
from trainplan.model.schedule import simulate
from trainplan.model.stage_bytes import block_forms, stage_forms
from trainplan.optimizer.case import Case

LLAMA3_70B = {
    "model": "llama3-70b",
    "tp": 8,
    "pp": 4,
    "seq_len": 8192,
    "global_batch_size": 32,
    "device": "H100-SXM",
}


def test_block_forms_by_hand():
    """3 dense layers, the first recomputed: kept per micro-batch = its checkpoint + 2 full
    layers; its transient = full − input − the 2 later layers' full bytes (negative: 0, the
    other candidate, is the peak). Selective base: 2 selective layers instead. 3 of 3 is
    stage_forms(full); 0 is the base mode's forms."""
    per_mb, transients = block_forms((False,) * 3, Recompute.NONE, 1)
    assert per_mb == (2, 0, 1, 0, 0, 0, 0, 0)
    assert transients == ((-1, 0, 0, -1, 0, 0, 0, 0), (0,) * 8)
    sel, _ = block_forms((False,) * 3, Recompute.SELECTIVE, 1)
    assert sel == (0, 2, 1, 0, 0, 0, 0, 0)
    assert block_forms((False,) * 3, Recompute.NONE, 3) == stage_forms((False,) * 3, Recompute.FULL)
    assert block_forms((False,) * 3, Recompute.SELECTIVE, 0) == stage_forms(
        (False,) * 3, Recompute.SELECTIVE
    )


def _small_case(pp: int, layers: tuple[int, ...], **extra: object) -> dict[str, object]:
    """A Llama-like 2,048-wide model of ``sum(layers)`` layers cut as ``layers``."""
    arch = llama_like(sum(layers), 2048, 16, 5504, 32000)
    return {
        "model": ModelSpec(name="small", source="test", arch=arch),
        "pp": pp,
        "tp": 2,
        "seq_len": 2048,
        "global_batch_size": 8,
        "device": "H100-SXM",
        "stage_layers": ",".join(map(str, layers)),
        **extra,
    }


_SPLITS = st.integers(min_value=1, max_value=4).flatmap(
    lambda pp: st.tuples(*[st.integers(min_value=1, max_value=6)] * pp)
)


@settings(max_examples=15, deadline=None)
@given(layers=_SPLITS, base=st.sampled_from(["none"]))
def test_counts_at_the_ends_are_the_uniform_modes(layers, base):
    """recompute_layers = every stage's layers is the existing ``full`` mode (memory exact,
    time to float rounding); all zeros is the base mode (exact). Base none only: Megatron-Core
    (the default profile) refuses counts over selective (:func:`test_counts_over_selective_are_refused`)."""
    pp = len(layers)
    case = _small_case(pp, layers)
    base_e = Case.of(**{**case, "recompute": base}).evaluate()
    zeros = Case.of(
        **{**case, "recompute": base, "recompute_layers": ",".join(["0"] * pp)}
    ).evaluate()
    full = Case.of(**{**case, "recompute": "full"}).evaluate()
    alln = Case.of(
        **{**case, "recompute": base, "recompute_layers": ",".join(map(str, layers))}
    ).evaluate()
    assert [s.total_bytes for s in zeros.stages] == [s.total_bytes for s in base_e.stages]
    assert zeros.step_s == base_e.step_s
    assert zeros.flops.hardware_flops == base_e.flops.hardware_flops
    assert [s.total_bytes for s in alln.stages] == [s.total_bytes for s in full.stages]
    assert alln.step_s == pytest.approx(full.step_s, rel=1e-12)
    assert alln.flops.hardware_flops == full.flops.hardware_flops


@settings(max_examples=15, deadline=None)
@given(layers=_SPLITS, data=st.data())
def test_one_more_recomputed_layer_never_holds_more_nor_runs_faster(layers, data):
    """Recomputing one more layer of a stage never raises that stage's peak and never shortens
    the step (it only adds a forward)."""
    pp = len(layers)
    counts = [data.draw(st.integers(0, n)) for n in layers]
    stage = data.draw(st.sampled_from([i for i in range(pp) if counts[i] < layers[i]] or [None]))
    if stage is None:
        return
    more = list(counts)
    more[stage] += 1
    case = _small_case(pp, layers)
    a = Case.of(**{**case, "recompute_layers": ",".join(map(str, counts))}).evaluate()
    b = Case.of(**{**case, "recompute_layers": ",".join(map(str, more))}).evaluate()
    assert b.stages[stage].total_bytes <= a.stages[stage].total_bytes
    assert b.step_s >= a.step_s


@pytest.mark.parametrize(
    ("value", "extra", "message"),
    [
        ("2,4,4", {}, "recompute_layers: 3 counts for pp 4 (give one per stage)"),
        ("2,4,x,0", {}, "recompute_layers: '2,4,x,0' must be whole numbers >= 0"),
        ("2,4,-1,0", {}, "must be whole numbers >= 0"),
        ("2,4,21,0", {}, "recompute_layers: 21 on stage 2 is more than its 20 layers"),
        ("1,1,1,1", {"recompute": "full"}, "needs recompute none or selective"),
        (
            "11,1,1,1",
            {"schedule": "interleaved", "virtual_stages": 2},
            "recompute_layers: 11 on stage 0 is more than its largest model chunk's 10 layers "
            "(with virtual_stages 2 the count is per model chunk, as Megatron-LM's "
            "--recompute-num-layers; each must be at most its stage's largest chunk)",
        ),
    ],
)
def test_bad_counts_are_refused_in_one_line(value, extra, message):
    with pytest.raises(LayoutError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Case.of(**{**LLAMA3_70B, "recompute_layers": value, **extra}).evaluate()


def test_counts_over_selective_are_refused():
    """Megatron-LM d98e8a64dd ``transformer_config.py`` ``TransformerConfig.__post_init__``
    (l. 1927–1932): granularity selective with recompute_num_layers set raises ValueError; the
    block counts run under full granularity, which takes no recompute modules. So counts above 0
    over a selective base are refused under ``megatron`` (Megatron-FSDP too: ZeRO-3), all zeros
    (selective on every layer) and counts over none are not."""
    rule = (
        " with recompute selective on the other layers: Megatron-Core runs one "
        "recompute_granularity and refuses recompute_num_layers with selective "
        "(TransformerConfig.__post_init__); use recompute none with the counts, or selective on "
        "every layer"
    )
    for zero, pp, counts in ((1, 4, "2,0,0,0"), (3, 1, "2")):  # Megatron-FSDP at pp 1
        case = {**LLAMA3_70B, "pp": pp, "zero_stage": zero, "recompute": "selective"}
        with pytest.raises(LayoutError) as err:
            Case.of(**case, recompute_layers=counts).evaluate()
        assert str(err.value) == f"recompute_layers: {counts}{rule}"
    assert Case.of(**LLAMA3_70B, recompute="selective", recompute_layers="0,0,0,0").evaluate()
    assert Case.of(**LLAMA3_70B, recompute="none", recompute_layers="2,0,0,0").evaluate()


def test_cli_refuses_bad_counts_with_exit_2(monkeypatch, capsys):
    args = ["--model", "llama3-70b", "--tp", "8", "--pp", "4", "--seq-len", "8192"]
    code, out, err = run_main(
        monkeypatch, capsys, *args, "--global-batch", "32", "--recompute-layers", "2,4,21,0"
    )
    assert code == 2
    assert err.strip().splitlines() == [
        "Error: --recompute-layers: 21 on stage 2 is more than its 20 layers (each count must be "
        "at most its stage's layers)"
    ]


def test_single_time_model_refuses_per_stage_counts():
    with pytest.raises(Exception, match="timed by the roofline model only"):
        Case.of(**{**LLAMA3_70B, "recompute_layers": "1,1,1,1", "framework": "textbook"}).evaluate()


def test_layout_reads_counts_from_text():
    assert Layout(pp=4, recompute_layers="2, 4,4,0").recompute_layers == (2, 4, 4, 0)
    assert Layout(pp=2, recompute_layers=(1, 0)).recomputed_on(0) == 1
    assert Layout(pp=2).recomputed_on(1) is None


# --- the pipeline with unequal stages -------------------------------------------------------


def test_simulation_with_unequal_stages_by_hand():
    """1F1B, 2 stages, 2 micro-batches; stage 0 forward 1, backward 2; stage 1 forward 1,
    backward 3 (it recomputes a forward): F0(0) 0–1, F0(1) 1–2; F1(0) 1–2, B1(0) 2–5,
    F1(1) 5–6, B1(1) 6–9; B0(0) 5–7, B0(1) 9–11. Step 11 = (m + p − 1)·max(F + B) − 1 = 3 · 4 −
    1: the closed form the cost model uses, m·t_max·(1 + (p − 1)/m), is an upper bound here."""
    times = ((Fraction(1), Fraction(2)), (Fraction(1), Fraction(3)))
    t = simulate(2, 2, "1f1b", stage_times=times)
    assert t.step_time == 11
    assert t.step_time <= (2 + 2 - 1) * 4


@settings(max_examples=60, deadline=None)
@given(
    pp=st.integers(1, 5),
    m=st.integers(1, 10),
    times=st.lists(st.tuples(st.integers(1, 10), st.integers(0, 20)), min_size=5, max_size=5),
)
def test_closed_form_bounds_the_simulated_1f1b_step(pp, m, times):
    """With each stage's backward at least its forward (recomputation only adds to backward),
    the simulated 1F1B step of unequal stages never exceeds the closed form the evaluator uses,
    (m + p − 1) × the slowest stage's forward + backward, and equals it when the stages are
    equal. (GPipe can exceed it by a few percent on very unequal stages: the per-stage search
    takes 1F1B only.)"""
    st_times = tuple((Fraction(f), Fraction(f + extra)) for f, extra in times[:pp])
    sim = simulate(pp, m, "1f1b", stage_times=st_times).step_time
    slowest = max(f + b for f, b in st_times)
    assert sim <= (m + pp - 1) * slowest
    equal = (st_times[0],) * pp
    assert simulate(pp, m, "1f1b", stage_times=equal).step_time == (m + pp - 1) * sum(equal[0])


def test_uniform_simulation_unchanged():
    assert simulate(4, 8, "1f1b").step_time == 33
    assert simulate(4, 8, "1f1b", stage_times=((Fraction(1), Fraction(2)),) * 4).step_time == 33


# --- interleaved model chunks: the count is per chunk ----------------------------------------


def test_an_earlier_chunk_recomputed_adds_its_transient_to_the_held_peak():
    """Stage 0 with chunks of 2 and 18 layers (B 8, m 8), 2 recomputed per chunk: the schedule's
    held peak is 4 chunk-0 and 4 chunk-1 micro-batches less what its backwards freed,
    18,354,274,304 B, and it is held while chunk 0's backward recomputes its last layer (chunk
    1's backward of that micro-batch ran first and freed its share, so nothing more comes off):
    the stage's peak is that plus one layer's full less its input, 281,018,368 − 16,777,216 =
    264,241,152 B (walking model.schedule.stage_order by hand; the later chunk used to be
    taken off the transient a second time, leaving 0). Transformer Engine's fused attention
    keeps its FP32 softmax statistics, 4·64/8 heads·8,192 = 262,144 B a layer: 4 × 16 layers
    kept whole in chunk 1 hold 64 × 262,144 = 16,777,216 B more, 18,371,051,520 B, and the
    recomputed layer's full bytes are 281,280,512, the transient 264,503,296 B."""
    case = {**LLAMA3_70B, "global_batch_size": 8, "schedule": "interleaved", "virtual_stages": 2}
    case |= {"stage_layers": "2,10,10,10,18,10,10,10", "recompute_layers": "2,0,0,0"}
    stage = Case.of(**case).evaluate().stages[0]
    lse = 4 * 64 // 8 * 8192
    assert stage.activations.layers_bytes == 18_354_274_304 + 4 * 16 * lse == 18_371_051_520
    layer = 281_018_368 + lse
    assert stage.activations.recompute_transient_bytes == layer - 16_777_216 == 264_503_296


def test_per_chunk_counts_clip_at_a_small_chunk():
    """80 layers over pp 4 × v 3 = 12 chunks: the default split gives 6, 6, 7 × 8, 6, 6; stage 0
    holds chunks 0, 4, 8 (6, 7, 7 layers). A count of 6 recomputes 6 + 6 + 6 = 18 of its 20
    layers; 7 all 20 (full there); 8 is refused (its largest chunk has 7)."""
    from trainplan.model.estimate import recomputed_layers

    inter = {**LLAMA3_70B, "schedule": "interleaved", "virtual_stages": 3}
    case = Case.of(**{**inter, "recompute_layers": "6,0,0,0"})
    arch = case.model.arch
    rec = recomputed_layers(arch, case.layout)
    assert sorted(rec) == [*range(0, 6), *range(26, 32), *range(54, 60)]
    est = case.evaluate()
    # a layer's full bytes: 281,018,368 and the fused attention's FP32 softmax statistics,
    # 4·64/8 heads·8,192 = 262,144
    layer, ckpt = 281_018_368 + 262_144, 16_777_216
    # stage 0's warm-up is 2·3 + 2·4 = 14 chunk forwards in blocks of pp = 4 (chunk 0, 1, 2,
    # then 0 again): with the next forward 15 chunks held, 7 of chunk 0 and 4 of chunks 1 and 2
    chunk_bytes = (6 * ckpt, 6 * ckpt + layer, 6 * ckpt + layer)
    assert interleaved_chunks_held_simulated(4, 32, 3, 0, chunk_bytes) == (7, 4, 4)
    assert est.stages[0].activations.layers_bytes == 7 * 6 * ckpt + 8 * (6 * ckpt + layer)
    assert est.stages[0].activations.layers_bytes == 3_760_193_536
    full_stage0 = Case.of(**{**inter, "recompute_layers": "7,0,0,0"}).evaluate().stages[0]
    full = Case.of(**{**inter, "recompute": "full"}).evaluate().stages[0]
    assert full_stage0.total_bytes == full.total_bytes
    with pytest.raises(LayoutError, match="8 on stage 0 is more than its largest model chunk's 7"):
        Case.of(**{**inter, "recompute_layers": "8,0,0,0"}).evaluate()


_CHUNKS = st.integers(min_value=2, max_value=3).flatmap(
    lambda pp: st.tuples(
        st.just(pp),
        st.integers(min_value=2, max_value=3),
    ).flatmap(
        lambda pv: st.tuples(
            st.just(pv), st.tuples(*[st.integers(min_value=0, max_value=3)] * (pv[0] * pv[1]))
        )
    )
)


@settings(max_examples=12, deadline=None)
@given(shape=_CHUNKS, base=st.sampled_from(["none"]))
def test_interleaved_counts_at_the_ends_are_the_uniform_modes(shape, base):
    """Interleaved, any per-chunk split: counts of every stage's largest chunk are the ``full``
    mode (memory exact, time to float rounding), all zeros the base mode (exact). Base none only,
    as :func:`test_counts_at_the_ends_are_the_uniform_modes`."""
    (pp, v), chunks = shape
    if sum(chunks) == 0:
        return
    case = {
        **_small_case(pp, chunks),
        "pp": pp,
        "virtual_stages": v,
        "schedule": "interleaved",
        "global_batch_size": 2 * pp,
    }
    largest = [max(chunks[i::pp]) for i in range(pp)]
    base_e = Case.of(**{**case, "recompute": base}).evaluate()
    zeros = Case.of(**{**case, "recompute": base, "recompute_layers": "0," * (pp - 1) + "0"})
    zeros_e = zeros.evaluate()
    full = Case.of(**{**case, "recompute": "full"}).evaluate()
    alln = Case.of(
        **{**case, "recompute": base, "recompute_layers": ",".join(map(str, largest))}
    ).evaluate()
    assert [s.total_bytes for s in zeros_e.stages] == [s.total_bytes for s in base_e.stages]
    assert zeros_e.step_s == base_e.step_s
    assert [s.total_bytes for s in alln.stages] == [s.total_bytes for s in full.stages]
    assert alln.step_s == pytest.approx(full.step_s, rel=1e-12)
    assert alln.flops.hardware_flops == full.flops.hardware_flops


# --- the interleaved pipeline with unequal stages ---------------------------------------------


def test_interleaved_closed_form_is_not_a_bound_with_unequal_stages():
    """The evaluator's pipeline term is m·t_max·(1 + (p − 1)/(v·m)) = (m + (p − 1)/v)·t_max,
    t_max the slowest stage's forward + backward (model.estimate.time_terms), for interleaved
    stages too. Equal stages: exact. Unequal stages: not a bound. By hand, p 2, v 2, m 2,
    stage 0 (F 3, B 9), stage 1 (F 4, B 8) — both 12 per micro-batch, so the closed form says
    (2 + 1/2)·12 = 30; a chunk's passes take half (F 1.5/2, B 4.5/4):

    * stage 0: F(0,c0) 0–1.5, F(1,c0) 1.5–3, F(0,c1) 3.5–5 (after stage 1's F(0,c0) 1.5–3.5),
      F(1,c1) 5.5–7, then B(0,c1) 11.5–16, B(1,c1) 17.5–22, B(0,c0) 22–26.5, B(1,c0) 26.5–31;
    * stage 1: F(0,c0) 1.5–3.5, F(1,c0) 3.5–5.5, F(0,c1) 5.5–7.5, B(0,c1) 7.5–11.5,
      F(1,c1) 11.5–13.5, B(1,c1) 13.5–17.5, B(0,c0) 17.5–21.5, B(1,c0) 22–26.

    Step 31 > 30: stage 0's slow backward meets stage 1's slow forward. The 1F1B form
    (m + p − 1)·t_max = 36 still bounds it."""
    times = ((Fraction(3), Fraction(9)), (Fraction(4), Fraction(8)))
    t = simulate(2, 2, "interleaved", v=2, stage_times=times)
    assert t.step_time == 31
    assert [(s.kind, s.microbatch, s.chunk, s.start, s.end) for s in t.slots[1]][3] == (
        "B", 0, 1, Fraction(15, 2), Fraction(23, 2)
    )  # fmt: skip
    assert (2 + Fraction(1, 2)) * 12 == 30 < t.step_time <= (2 + 2 - 1) * 12


@settings(max_examples=40, deadline=None)
@given(
    pp=st.integers(2, 4),
    v=st.integers(2, 3),
    groups=st.integers(1, 3),
    stages=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 8)), min_size=4, max_size=4),
)
def test_interleaved_simulation_against_the_closed_form(pp, v, groups, stages):
    """Stages as the planner times them (n layers: forward n, backward 2n plus r ≤ n recomputed
    forwards): the simulated interleaved step is (m + (p − 1)/v)·t exactly when the stages are
    equal, and never above the 1F1B form (m + p − 1)·t_max when they are not — the interleaved
    closed form is an estimate there (test above), off by less than (p − 1)(1 − 1/v)·t_max."""
    m = pp * groups
    times = tuple((Fraction(n), Fraction(2 * n + min(r, n))) for n, r in stages[:pp])
    t_max = max(f + b for f, b in times)
    sim = simulate(pp, m, "interleaved", v=v, stage_times=times).step_time
    assert sim <= (m + pp - 1) * t_max
    equal = (times[0],) * pp
    assert simulate(pp, m, "interleaved", v=v, stage_times=equal).step_time == (
        m + Fraction(pp - 1, v)
    ) * sum(times[0])
