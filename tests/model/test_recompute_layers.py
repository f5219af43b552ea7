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

from tests.test_cli_planner import run_main
from trainplan.interface.inputs import build_case
from trainplan.model.errors import LayoutError
from trainplan.model.layout import Layout, Recompute
from trainplan.model.schedule import simulate
from trainplan.model.specs import Architecture, Mlp, ModelSpec, Norm, PositionEmbedding
from trainplan.model.stage_bytes import block_forms, stage_forms

LLAMA3_70B = {
    "model": "llama3-70b",
    "tp": 8,
    "pp": 4,
    "seq_len": 8192,
    "global_batch_size": 32,
    "gpu": "H100-SXM",
}


def test_llama3_70b_partial_recompute_by_hand():
    """Llama 3 70B, tp 8 (SP), pp 4, s 8192, b 1, m 32, 1F1B: 20 layers per stage; stage i holds
    4 − i micro-batches. Without recomputation a layer keeps 22,481,469,440 / (4 · 20) =
    281,018,368 B per micro-batch; fully recomputed it keeps its input, 2·s·h/tp =
    2 · 8192 · 8192 / 8 = 16,777,216 B. --recompute-layers 2,4,4,0:

    * stage 0: 4 · (2 · 16,777,216 + 18 · 281,018,368) = 4 · 5,091,885,056 = 20,367,540,224 B;
    * stage 1: 3 · (4 · 16,777,216 + 16 · 281,018,368) = 3 · 4,563,402,752 = 13,690,208,256 B;
    * stage 3: as without recomputation, 5,620,367,360 B.

    The transient is 0: recomputing the stage's last recomputed layer holds 281,018,368 −
    16,777,216 = 264,241,152 B, less than the 16 (or 18) later layers' bytes its micro-batch has
    already freed. With every layer recomputed it is full recomputation's 264,241,152 B."""
    none = build_case(LLAMA3_70B).evaluate()
    part = build_case({**LLAMA3_70B, "recompute_layers": "2,4,4,0"}).evaluate()
    full = build_case({**LLAMA3_70B, "recompute": "full"}).evaluate()
    layer, ckpt = 281_018_368, 16_777_216
    assert none.stages[0].activations.layers_bytes == 4 * 20 * layer == 22_481_469_440
    assert full.stages[0].activations.layers_bytes == 4 * 20 * ckpt
    acts = [s.activations for s in part.stages]
    assert acts[0].layers_bytes == 4 * (2 * ckpt + 18 * layer) == 20_367_540_224
    assert acts[1].layers_bytes == 3 * (4 * ckpt + 16 * layer) == 13_690_208_256
    assert acts[2].layers_bytes == 2 * (4 * ckpt + 16 * layer)
    assert acts[3].layers_bytes == 5_620_367_360
    assert all(a.recompute_transient_bytes == 0 for a in acts)
    assert full.stages[0].activations.recompute_transient_bytes == layer - ckpt == 264_241_152
    # time: stages 1 and 2 recompute 4 layers and set the pace; one more forward of each
    assert none.step_s < part.step_s < full.step_s
    # hardware FLOPs: 10 of 80 layers recomputed add 10/80 of full recomputation's extra
    extra_full = full.flops.hardware_flops - none.flops.hardware_flops
    assert part.flops.hardware_flops - none.flops.hardware_flops == extra_full * 10 // 80
    d = part.to_dict()
    assert d["layout"]["recompute_layers"] == [2, 4, 4, 0]
    assert any("per-stage recomputation" in a for a in d["assumptions"])


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
    arch = Architecture(
        num_layers=sum(layers),
        hidden_size=2048,
        num_attention_heads=16,
        ffn_hidden_size=5504,
        vocab_size=32000,
        mlp=Mlp.SWIGLU,
        norm=Norm.RMSNORM,
        position_embedding=PositionEmbedding.ROPE,
    )
    return {
        "model_spec": ModelSpec(name="small", source="test", arch=arch),
        "pp": pp,
        "tp": 2,
        "seq_len": 2048,
        "global_batch_size": 8,
        "gpu": "H100-SXM",
        "stage_layers": ",".join(map(str, layers)),
        **extra,
    }


_SPLITS = st.integers(min_value=1, max_value=4).flatmap(
    lambda pp: st.tuples(*[st.integers(min_value=1, max_value=6)] * pp)
)


@settings(max_examples=15, deadline=None)
@given(layers=_SPLITS, base=st.sampled_from(["none", "selective"]))
def test_counts_at_the_ends_are_the_uniform_modes(layers, base):
    """recompute_layers = every stage's layers is the existing ``full`` mode (memory exact,
    time to float rounding); all zeros is the base mode (exact)."""
    pp = len(layers)
    case = _small_case(pp, layers)
    base_e = build_case({**case, "recompute": base}).evaluate()
    zeros = build_case(
        {**case, "recompute": base, "recompute_layers": ",".join(["0"] * pp)}
    ).evaluate()
    full = build_case({**case, "recompute": "full"}).evaluate()
    alln = build_case(
        {**case, "recompute": base, "recompute_layers": ",".join(map(str, layers))}
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
    a = build_case({**case, "recompute_layers": ",".join(map(str, counts))}).evaluate()
    b = build_case({**case, "recompute_layers": ",".join(map(str, more))}).evaluate()
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
            "1,1,1,1",
            {"schedule": "interleaved", "virtual_stages": 2},
            "needs virtual_stages 1, not 2",
        ),
    ],
)
def test_bad_counts_are_refused_in_one_line(value, extra, message):
    with pytest.raises(LayoutError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_case({**LLAMA3_70B, "recompute_layers": value, **extra}).evaluate()


def test_cli_refuses_bad_counts_with_exit_2(monkeypatch, capsys):
    args = ["--model", "llama3-70b", "--tp", "8", "--pp", "4", "--seq-len", "8192"]
    code, out, err = run_main(
        monkeypatch, capsys, *args, "--global-batch", "32", "--recompute-layers", "2,4,21,0"
    )
    assert code == 2
    assert err.strip().splitlines() == [
        "Error: recompute_layers: 21 on stage 2 is more than its 20 layers (each count must be "
        "at most its stage's layers)"
    ]


def test_single_time_model_refuses_per_stage_counts():
    with pytest.raises(Exception, match="timed by the roofline model only"):
        build_case(
            {**LLAMA3_70B, "recompute_layers": "1,1,1,1", "framework": "textbook"}
        ).evaluate()


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
