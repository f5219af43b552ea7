"""The command-line and interface parts of tests/optimizer/test_per_stage.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

import json

import pytest

from tests.optimizer.test_per_stage import tiny_case
from trainplan.interface.inputs import build_case
from trainplan.interface.launch import megatron_flags, single_count_layout, torchtitan_toml
from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case
from trainplan.optimizer.per_stage import EQUAL_CHUNKS_SCOPE


def test_megatron_flags_say_what_one_count_cannot():
    """Megatron-LM's --recompute-num-layers is one count for every stage: the plan's 37,33 is
    launched as 37 with a note, and the single-count layout recomputes 37 on both stages."""
    arch = tiny_case(80, 2).model.arch
    lay = Layout(pp=2, tp=8, stage_layers=(40, 40), recompute_layers=(37, 33))
    flags = megatron_flags(arch, lay, 2048)
    text = " ".join(flags.flags)
    assert "--recompute-granularity full --recompute-method block --recompute-num-layers 37" in text
    assert "--decoder-first-pipeline-num-layers 40 --decoder-last-pipeline-num-layers 40" in text
    assert any("one count for every stage" in n for n in flags.notes)
    assert single_count_layout(lay) == lay.with_(recompute_layers=(37, 37))
    assert single_count_layout(lay.with_(recompute_layers=(3, 3))) is None
    uneven = Layout(pp=4, stage_layers=(1, 2, 3, 2))
    notes = megatron_flags(tiny_case(8, 4).model.arch, uneven, 8).notes
    assert any("--pipeline-model-parallel-layout" in n for n in notes)
    assert megatron_flags(tiny_case(8, 4).model.arch, uneven, 8).flags[-2:] == (
        "--pipeline-model-parallel-layout",
        "Et*1|t*2|t*3|t*2L",
    )
    titan = torchtitan_toml(arch, lay)
    # 40, 40 is torchtitan's own split of 80 layers (82 = 2·41, each end one fewer): no key
    assert not any(x.startswith("module_fqns_per_model_part") for x in titan.flags)
    # 37 of 40 layers: N = 40 // 37 = 1, every block, which is torchtitan's full mode
    assert titan.flags[-2:] == ("[activation_checkpoint]", 'mode = "full"')
    assert any("has no count per stage; mode = " in n for n in titan.notes)
    assert torchtitan_toml(arch, lay.with_(recompute_layers=(40, 40))).flags[-1] == 'mode = "full"'


def test_megatron_flags_of_an_interleaved_per_stage_plan():
    """7 layers on pp 2 × v 2, stages of 2 and 5 layers: balanced over their chunks, 1 + 1 and
    2 + 3, in model order 1, 2, 1, 3 — uneven, so the layout string; counts 1,3 are per chunk
    (Megatron-LM's --recompute-num-layers per virtual stage): the single count 3 recomputes
    min(3, chunk) — stage 0's largest chunk has 1 layer, so the run Megatron makes is 1,3."""
    from trainplan.optimizer.stage_bases import plan_layout

    arch = tiny_case(7, 2).model.arch
    base = Layout(pp=2, schedule="interleaved", virtual_stages=2)
    lay = plan_layout(base, (2, 5), (1, 3))
    assert lay.stage_layers == (1, 2, 1, 3)
    flags = megatron_flags(arch, lay, 8)
    text = " ".join(flags.flags)
    assert "--pipeline-model-parallel-layout Et*1|t*2|t*1|t*3L" in text
    assert text.endswith("--recompute-method block --recompute-num-layers 3")
    assert any("first min(3, its layers) of each model chunk" in n for n in flags.notes)
    assert single_count_layout(lay, arch) == lay.with_(recompute_layers=(1, 3))
    titan = torchtitan_toml(arch, lay)  # stage 0 recomputes 1 + 1 of 2, stage 1 3 + 2 of 5
    assert titan.flags[-1] == 'mode = "full"'


def test_cli_per_stage_prints_the_plan_gain_proof_and_flags(monkeypatch, capsys, tmp_path):
    """Llama 3 70B on 16 H100 at 6K: the best uniform layout recomputes every layer (pp 2, tp 8,
    1,190.706 s); per stage, 38 of stage 0's 40 layers and 37 of stage 1's are enough in the
    H100's 83.21 GB (stage 0 holds one layer's backward working set on top, the last stage the
    loss's working set, both the NCCL rings and Transformer Engine's placeholder weight
    gradients): 1,167.074 s, 1.020× faster, proven (the tp collectives at their message sizes
    on the published H100 bus-bandwidth curve).

    At 8K (where this case was first derived: 39 and 38 of 40 recomputed, 1,573.689 s against
    the uniform 1,594.593 s, 1.013×) the placeholders, one BF16 tensor per distinct weight
    shape held for the whole run (model/terms/dummy_wgrads.py: 213,909,504 B on stage 0,
    478,150,656 B on the last with the output layer), take the room of the one layer each
    stage kept whole: the per-stage plan is the uniform one there."""
    monkeypatch.setattr("sys.argv", ["trainplan", "search"])
    args = ["--model", "llama3-70b", "--gpus", "16", "--seq-len", "6144", "--per-stage"]
    from trainplan.interface.cli import main

    monkeypatch.setattr("sys.argv", ["trainplan", "search", *args, "--json"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code in (0, None)
    d = json.loads(capsys.readouterr().out)
    ps = d["per_stage"]
    assert ps["status"] == "optimal"
    assert ps["stage_layers"] == [40, 40]
    assert ps["recompute_layers"] == [38, 37]
    assert ps["uniform"]["layout"]["recompute"] == "full"
    assert ps["step_s"] == pytest.approx(1167.074, abs=1e-3)
    assert ps["gain"] == pytest.approx(1190.706 / 1167.074, abs=1e-4)
    assert d["layout"]["recompute_layers"] == [38, 37]
    assert "--recompute-num-layers" in d["launch"]["megatron"]
    assert d["launch"]["megatron_step_s"] > ps["step_s"]
    scenario = tmp_path / "s.toml"
    scenario.write_text('model = "llama3-70b"\ngpus = 16\nseq_len = 6144\nper_stage = true\n')
    monkeypatch.setattr("sys.argv", ["trainplan", "search", "--scenario", str(scenario)])
    with pytest.raises(SystemExit):
        main()
    out = capsys.readouterr().out
    assert f"OPTIMAL (proven over {EQUAL_CHUNKS_SCOPE})" in out
    assert "1.020× the uniform" in out
    assert "Megatron-LM: --tensor-model-parallel-size 8" in out


def test_cli_per_stage_refuses_top(monkeypatch, capsys):
    monkeypatch.setattr(
        "sys.argv",
        ["trainplan", "search", "--model", "llama3-8b", "--gpus", "8", "--per-stage", "--top", "2"],
    )
    from trainplan.interface.cli import main

    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "Error: --per-stage: takes neither --top nor --maximize (one plan, step time)"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--model", "llama3-70b", "--gpus", "16", "--seq-len", "8192", "--framework", "textbook"],
            "--per-stage: needs the roofline time model",
        ),
        (
            ["--model", "llama3-70b", "--gpus", "32", "--seq-len", "8192",
             "--set", "offload_activations=core_attn"],
            "--per-stage: activation offload",
        ),
    ],
)  # fmt: skip
def test_cli_per_stage_says_its_rule_when_no_shape_qualifies(monkeypatch, capsys, args, message):
    """A rule of check_per_stage that leaves no base shape is said (exit 2), never "OPTIMAL over
    0 base layouts"."""
    monkeypatch.setattr(
        "sys.argv", ["trainplan", "search", *args, "--gpu", "H100-SXM", "--per-stage"]
    )
    from trainplan.interface.cli import main

    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and message in err, err


def test_megatron_flags_carry_the_recipe_the_plan_assumes():
    """The flags launch the plan's figures: the CP flavour (Megatron-Core --cp-comm-type), FP8,
    CPU optimizer offload and fine-grained activation offload; uneven interleaved chunks as the
    layout string (--num-layers-per-virtual-pipeline-stage would build another v); √n as the
    uniform method every round(√n) layers."""
    from dataclasses import replace

    from trainplan.model.offload import Offload
    from trainplan.model.precision import Precision

    case = build_case({"model": "llama3-8b", "gpu": "H100-SXM"})
    arch = case.model.arch
    training = replace(
        case.training,
        precision=Precision.FP8,
        offload=Offload(optimizer=1, activations=("core_attn", "attn_proj")),
    )
    lay = Layout(tp=2, cp=4, cp_kind="a2a+p2p", cp_a2a=2, pp=2)
    text = " ".join(megatron_flags(arch, lay, 64, training).flags)
    assert "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2" in text
    assert "--fp8-format hybrid" in text
    # Megatron-LM arguments.py validate_args asserts --use-precision-aware-optimizer with it
    assert (
        "--optimizer-cpu-offload --optimizer-offload-fraction 1 --use-precision-aware-optimizer"
        in text
    )
    assert text.endswith(
        "--fine-grained-activation-offloading --offload-modules core_attn attn_proj"
    )
    ring = " ".join(megatron_flags(arch, Layout(cp=2, pp=2), 64).flags)
    assert "--cp-comm-type p2p" in ring
    # 32 layers over pp 4 × v 3 = 12 chunks: uneven (2 or 3 layers each)
    inter = Layout(pp=4, virtual_stages=3, schedule="interleaved")
    flags = megatron_flags(arch, inter, 64)
    assert "--num-layers-per-virtual-pipeline-stage" not in flags.flags
    assert "--pipeline-model-parallel-layout" in flags.flags
    even = megatron_flags(arch, Layout(pp=4, virtual_stages=2, schedule="interleaved"), 64)
    assert " ".join(even.flags).endswith("--num-layers-per-virtual-pipeline-stage 4")
    sqrt = megatron_flags(arch, Layout(pp=2, recompute="sqrt"), 64)  # 16 layers a stage: every 4
    assert " ".join(sqrt.flags).endswith(
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 4"
    )


def test_megatron_flags_say_when_the_plan_is_another_frameworks():
    """A plan under DeepSpeed or the textbook profile is not what Megatron-LM's flags launch:
    the note says so."""
    arch = build_case({"model": "llama3-8b", "gpu": "H100-SXM"}).model.arch
    notes = megatron_flags(arch, Layout(framework="deepspeed", zero_stage=3), 64).notes
    assert any(n.startswith("framework deepspeed:") for n in notes)
    assert not megatron_flags(arch, Layout(), 64).notes


def test_cli_per_stage_keeps_to_the_schedules_asked_for(monkeypatch, capsys):
    """--schedule interleaved: every base with a pipeline stays interleaved (pp 1 has no
    schedule to keep); no 1F1B plan is answered as a gain. Llama 3 8B on 8 H100, B 32.

    The per-stage plan was pp 2 × v 8 with 17 + 15 layers, chunks 2+2+2+2+2+2+2+3 and 1+2+…+2,
    at 3.564716 s under the closed-form bubble, 1.02042× the uniform plan. An interleaved stage
    now holds a multiple of v layers (optimizer.stage_tables: unequal chunks' bubble is the whole
    pipeline's, model.pipeline_uneven), so pp 2 × v 8 splits 16 + 16 — 3.764 s, its last stage
    holding the output layer beside as many layers as the first — and the answer is the uniform
    plan itself, gain 1.

    The uniform plan (dp 4 × tp 2, b 2): its distributed optimizer's traffic, once a step beside
    the last backward, waits φ·c under NCCL's SM charge, φ = 1 − 1/1.314 = 0.238965, c = 59.518
    ms, 0.589 → 14.223 ms exposed, 3.596854 → 3.610487 s; the charge reaches its asynchronous
    tp 2 collectives in every layer and the output layer (model.step_time.kind_parts): 0.113006
    s of its 0.282804 s hid under their GEMMs uncharged, each shorter than (1 − φ) of its GEMM,
    so φ × 0.113006 = 27.004 ms more waits: 3.610487 → 3.637491 s. Since the charge follows the algorithm NCCL runs
    (model.nccl_channels), the uniform plan's dp group lies in the node and its reduce-scatters
    and all-gathers, and the tp 2 all-gathers and reduce-scatters (sequence parallelism), are
    rings on its 24 channels: φ = 1 − 1/1.350 = 0.259259, not NVLS's 0.238965: 3.611696 →
    3.640994 s. The cross-entropy's all-reduces over tp 2 run as rings (NCCL's tuner: NVLS's
    102 GB/s of bus bandwidth at 2 GPUs against the ring's 360, model.nccl_search), the NVLS
    curve ÷ 480/370: 0.085 ms more, 3.641079 s. The optimizer step zeroes the distributed
    optimizer's whole FP32 gradient buffer, not the shard (Megatron-LM ``train_step`` →
    ``zero_grad_buffer`` → ``_ParamAndGradBuffer.reset``: ``grad_data.zero_()``;
    model.terms.optimizer_time.whole_buffer_zeroing_bytes): 4 B × (P − P/4) beyond the 4 B × P/4
    counted, P = 8,030,261,248 / 2 = 4,015,130,624 a GPU at tp 2 (V 128,256 needs no padding at
    256), 12.045 GB at H100's 2.97 TB/s: 4.056 ms more, 3.645135 s. Megatron-Core's own
    optimizer-step passes (model.step_passes: the clip's scaling of every FP32 gradient and the
    second read of the master) add 12 B × P/4 = 12.045 GB, 4.056 ms more: 3.649191 s."""
    from trainplan.interface.cli import main

    args = ["--model", "llama3-8b", "--gpus", "8", "--seq-len", "8192", "--global-batch", "32"]
    args += ["--zero", "0", "--zero", "1"]  # Megatron-FSDP (ZeRO-3) has no pipeline to interleave
    argv = ["trainplan", "search", *args, "--schedule", "interleaved", "--per-stage", "--json"]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code in (0, None)
    d = json.loads(capsys.readouterr().out)
    assert {(s["pp"] > 1, s["schedule"]) for s in d["per_stage"]["shapes"]} == {
        (False, "1f1b"),
        (True, "interleaved"),
    }
    lay = d["layout"]
    assert (lay["pp"], lay["tp"], lay["stage_layers"]) == (1, 2, [32])
    phi = 1 - 1 / 1.350  # the ring's 24 blocks of a node (dp and tp alike)
    uniform = 3.596854 + phi * 0.059518 - 0.000589
    assert uniform == pytest.approx(3.611696, abs=2e-6)
    uniform += phi * 0.113006  # its tp 2 collectives hidden under their GEMMs, charged
    assert uniform == pytest.approx(3.640994, abs=2e-6)
    uniform += 0.000085  # the cross-entropy's tp 2 all-reduces as rings
    uniform += 4 * 4_015_130_624 * 3 / 4 / 2.97e12  # the whole gradient buffer zeroed
    uniform += 12 * 4_015_130_624 / 4 / 2.97e12  # the clip's scaling, the master read again
    assert d["per_stage"]["step_s"] == pytest.approx(uniform, abs=1e-5)
    assert d["per_stage"]["gain"] == 1.0
    even = Case.of(
        model="llama3-8b", device="H100-SXM", num_gpus=8, seq_len=8192, global_batch_size=32,
        dp=4, pp=2, zero_stage=1, schedule="interleaved", virtual_stages=8, recompute="none",
        stage_layers="16,16",
    ).evaluate()  # fmt: skip
    # 3.761 s: its bubble Megatron-Core's order on the chunks as timed (the embedding and the
    # output layer on the end chunks), 7 ms under the closed form's; the whole gradient buffer
    # zeroed, 4 B × 3/4 of its last stage's 16 × 218,112,000 + 525,336,576 + 4,096 =
    # 4,015,132,672 parameters at 2.97 TB/s, 4.056 ms (3.757 s before); Megatron-Core's own
    # optimizer-step passes (model.step_passes), 12 B × 1/4 of them, 4.056 ms more: 3.765 s
    assert even.fits and even.step_s == pytest.approx(3.765, abs=1e-3)


def test_every_shape_is_searched_by_default(monkeypatch, capsys):
    """Llama 3 70B on 32 H100 at 8K: the best uniform plan (tp 8 × pp 2) recomputes nothing, and
    the fastest uniform shape has no split more than 0.04 % faster; tp 4 × pp 4, whose uniform
    layouts fit only fully recomputed, does: 19, 20, 21, 20 layers with 7, 3, 0, 0 recomputed,
    537.8 s, 1.081× the best uniform plan, tp 8 × pp 2 interleaved v 2 at 581.52 s (limited to
    the 8 fastest uniform shapes the search missed it).

    NCCL's SM charge (``nccl_sm_charge``, on by default) charges each plan's distributed
    optimizer traffic, once a step beside the last backward, φ·c where its last bucket waited,
    φ = 1 − 1/1.314 = 0.238965 (model.step_time.dp_exposed_seconds): the per-stage plan's dp 2
    c = 44.871 ms, 0.394 → 10.723 ms exposed, 531.668 → 531.678 s; the uniform plan's dp 2
    c = 280.659 ms (a stage of 40 layers ÷ tp 8, with the whole of its chunks' gradients),
    2.528 → 67.068 ms, 568.763 → 568.828 s; what stock Megatron-LM runs (7 recomputed on every
    stage, the per-stage plan's dp traffic) 583.866 → 583.877 s. Gain 1.06977 → 1.06987.

    The charge reaches the layers' and the output layer's asynchronous tp collectives too
    (model.step_time.kind_parts). The per-stage plan's tp 4: 25.369 s of its 73.436 s hid under
    their GEMMs uncharged, each shorter than (1 − φ) of its GEMM, so φ × 25.369 = 6.062 s more
    waits, 6.080 s of the step with the pipeline bubble's 3/m share (pp 4, m 1,024): 531.678 →
    537.758 s. The uniform plan's tp 8: 60.632 s hid, 12.619 s more waits (short of φ × 60.632
    = 14.489 s: some collectives outlast (1 − φ) of their GEMM and already waited a − c), 568.828
    → 581.449 s; stock Megatron-LM's 7 on every stage 583.877 → 590.437 s.

    The uniform plan runs Megatron-Core's interleaved schedule, which launches rank 0's chunk 0
    reduction after the step's last backward (``align_grad_reduce``, model.pipeline_reduce): its
    half of the reduce-scatter waits whole. The stage holds 40 layers of 855,654,400 and the
    embedding's 128,256 × 8,192, ÷ tp 8: 4.4096e9 per GPU, ⌈4.4096e9 / 4e7⌉ = 111 buckets, each
    call 8.4 µs + 1 × 14 µs of latency across the 2 nodes (L = 2.486 ms a collective); of the
    280.659 − 2L = 275.686 ms of bytes the FP32 reduce-scatter's 2/3: 186.277 ms, half of it,
    93.138 ms, waits: + 93.138 · (1 − φ) = 70.88 ms, 581.449 → 581.520 s; the per-stage plan
    (1F1B) keeps 537.758 s: gain 581.520 / 537.758 = 1.08138.

    Since the charge follows the algorithm NCCL runs each group's collectives as
    (model.nccl_channels): the per-stage plan's dp 2 group lies in one node (tp 4 × dp 2 = 8
    consecutive ranks), its reduce-scatter and all-gather rings on the node's 24 channels, and
    its tp 4 all-gathers and reduce-scatters likewise: φ = 1 − 1/1.350 = 0.259259 for both,
    11.633 ms of dp exposed, 0.259259 × 25.369 = 6.577 s of tp, 6.596 s of step with the 3/m
    share: 538.275 s. The uniform plan's dp 2 group has one rank on each of 2 nodes: 4 ring
    blocks, φ = 0.15038 × 4/8 = 0.075191 (0.280659 s: 21.103 ms exposed, chunk 0's half waits
    (1 − 0.075191) × 93.138 = 86.135 ms), its tp 8 on the node's 24, 13.902 s more: 582.770 s;
    stock Megatron-LM's 591.02 s (590.94 s with its 1F1B bubble the order's own; its last
    stage's tp 4 cross-entropy all-reduces as rings,
    NCCL's tuner; 590.99 s at the NVLS curve). Gain 582.770 / 538.275 = 1.08266; with the
    per-stage plan's 1F1B bubble the order's own on its four stages (model.pipeline_onef)
    538.211 s, 1.08279.

    The optimizer step zeroes the distributed optimizer's whole FP32 gradient buffer, not the
    shard (Megatron-LM ``zero_grad_buffer`` → ``_ParamAndGradBuffer.reset``: ``grad_data.zero_()``;
    model.terms.optimizer_time.whole_buffer_zeroing_bytes): 4 B × (P − P/2) more on the stage with
    the most parameters, at 2.97 TB/s. Per-stage plan: its last stage, 20 layers of
    (150,994,944 + 704,643,072)/4 + 16,384 = 213,925,888 a GPU, the output layer's 128,512 ×
    8,192 / 4 = 263,192,576 and the final norm's 8,192: P = 4,541,718,528, +3.058 ms, 538.214 s.
    Uniform plan (tp 8 × pp 2): 40 layers of 106,971,136, the 129,024-row output layer's
    132,120,576 and 8,192: P = 4,410,974,208, +2.970 ms, 582.768 s. Gain 1.08278.

    Megatron-Core's own optimizer-step passes (model.step_passes: the clip's scaling of every
    FP32 gradient and the second read of the master) add 12 B × P/2: per-stage 9.175 ms,
    538.223 s; uniform 8.911 ms, 582.777 s. Gain 1.08278."""
    from trainplan.interface.cli import main

    args = ["--model", "llama3-70b", "--gpus", "32", "--seq-len", "8192", "--per-stage"]
    got = {}
    for extra in ([], ["--per-stage-shapes", "1"]):
        monkeypatch.setattr("sys.argv", ["trainplan", "search", *args, *extra, "--json"])
        with pytest.raises(SystemExit):
            main()
        got[bool(extra)] = json.loads(capsys.readouterr().out)
    assert got[True]["per_stage"]["gain"] == pytest.approx(1.0, abs=5e-4)
    d = got[False]
    assert d["per_stage"]["gain"] == pytest.approx(1.0834, abs=1e-4)
    lay = d["layout"]
    assert (lay["dp"], lay["tp"], lay["pp"], lay["schedule"]) == (2, 4, 4, "1f1b")
    assert d["per_stage"]["stage_layers"] == [19, 20, 21, 20]
    assert d["per_stage"]["recompute_layers"] == [7, 3, 0, 0]
    phi = 1 - 1 / 1.350  # the per-stage plan's dp and tp groups: the ring's 24 blocks
    assert 531.668 + phi * 0.044871 - 0.000394 == pytest.approx(531.679, abs=1e-3)
    assert phi * 25.369 == pytest.approx(6.577, abs=1e-3)
    per_stage = 531.679 + phi * 25.369 * (1 + 3 / 1024)
    # 1F1B's bubble the order's own on the four stages (model.pipeline_onef): 64.65 ms under
    # the closed form's 3 × the slowest stage's micro-batch
    zeroing = 2 * 4_541_718_528 / 2.97e12  # 4 B × (P − P/2), the whole buffer zeroed
    zeroing += 12 * 4_541_718_528 / 2 / 2.97e12  # the clip's scaling, the master read again
    assert d["per_stage"]["step_s"] == pytest.approx(per_stage - 0.06465 + zeroing, abs=1e-3)
    phi_u = (1 - 1 / 1.177) * 4 / 8  # the uniform plan's dp group: 4 ring blocks
    assert 568.763 + phi_u * 0.280659 - 0.002528 == pytest.approx(568.782, abs=1e-3)
    latency = 111 * (8.4e-6 + 14e-6)
    half = (latency + (0.280659 - 2 * latency) * 2 / 3) / 2
    assert half == pytest.approx(0.093138, abs=1e-6)
    uniform = 568.782 + 13.902 + (1 - phi_u) * half  # the tp charge, then chunk 0's wait
    assert uniform == pytest.approx(582.770, abs=1e-3)
    # the uniform plan interleaves: its bubble Megatron-Core's order on its chunks as timed
    # (model.pipeline_uneven; the end chunks carry the embedding and the output layer), 5.4 ms
    # under the closed form's the sum above takes: 582.765 s
    uniform -= 0.0054
    uniform += 2 * 4_410_974_208 / 2.97e12  # its whole gradient buffer zeroed: 582.768 s
    uniform += 12 * 4_410_974_208 / 2 / 2.97e12  # the clip's scaling, the master read: 582.777
    assert uniform == pytest.approx(582.777, abs=1e-3)
    # Transformer Engine's placeholder weight gradients (model/terms/dummy_wgrads.py: 213,909,504
    # B a tp 8 stage, 478,150,656 B on the last with the output layer, held for the run) leave
    # that v 2 plan no room: the best uniform plan is v 3, 583.109 s; the per-stage plan keeps
    # 538.223 s (its tp 4 stages hold their placeholders beside the same counts)
    assert d["per_stage"]["uniform"]["layout"]["virtual_stages"] == 3
    assert d["per_stage"]["uniform"]["step_s"] == pytest.approx(583.109, abs=1e-3)
    assert d["per_stage"]["step_s"] == pytest.approx(538.223, abs=1e-3)
    assert d["per_stage"]["gain"] == pytest.approx(583.109 / 538.223, abs=1e-4)
    # stock Megatron-LM runs the largest count (7) on every stage: 590.95 s (590.94 before the
    # optimizer step's own passes, model.step_passes; 591.02 before 1F1B's
    # bubble was the order's own, model.pipeline_onef), slower than the
    # uniform plan's 582.78 s — the flags say so instead of promising the gain (590.99 s while
    # the tp 4 cross-entropy all-reduces read the NVLS curve; NCCL runs them as rings)
    assert d["launch"]["megatron_step_s"] == pytest.approx(590.95, abs=0.01)
    assert any(
        "no faster than the best uniform plan's 583.11 s" in n
        for n in d["launch"]["megatron_notes"]
    )


@pytest.mark.slow
def test_an_interleaved_only_space_searches_every_shape_interleaved(monkeypatch, capsys):
    """--schedule interleaved leaves no 1F1B base: every shape comes interleaved at every v its
    candidates take, not only the first 8 of a ranking. Llama 3 70B on 32 H100: the best uniform
    plan is tp 8 × pp 2, v 2 at 581.52 s (Megatron-Core waits on its forward sends, so more
    chunks cost sends as well as saving bubble), and the answer is the per-stage plan at
    tp 4 × pp 8, v 3 (9,10,10,10,10,10,11,10 layers per stage, 1,1,1,1,1,0,0,0 recomputed),
    557.23 s, 1.044× it (v 2 with one more layer recomputed on stage 0 was the answer before
    the backward working set and the world group's ring were counted; stage 4 recomputed none
    before NCCL's NVLink SHARP buffers on the tp 4 ring, 2 + 128 MiB, model/terms/nvls_memory.py:
    with ``--set nccl_nvls=false`` the answer is still 1,1,1,1,0,0,0,0 at 557.286 s, 550.579 s
    before the tp charge below, the tp all-reduces then at the ring's speed). A recomputed
    layer on a stage that does not pace the pipeline costs no step time here.

    NCCL's SM charge (``nccl_sm_charge``, on by default) moves the uniform plan only: its dp 2
    distributed optimizer traffic, c = 280.659 ms once a step, waits φ·c = 67.068 ms where its
    last bucket's 2.528 ms did (φ = 1 − 1/1.314 = 0.238965), 568.763 → 568.828 s; the per-stage
    plan is dp 1, no dp traffic, 550.526 s either way. Gain 568.763 / 550.526 = 1.03313 →
    568.828 / 550.526 = 1.03324. Rank 0's chunk-0 reduction after the last backward
    (Megatron-Core's ``align_grad_reduce``, model.pipeline_reduce; test_every_shape_is_searched_by
    _default derives it) moves the uniform plan again, 568.828 → 568.899 s: gain 1.03337.

    The charge reaches the layers' and the output layer's asynchronous tp collectives too
    (model.step_time.kind_parts). The per-stage plan's tp 4: 28.039 s of its 68.940 s hid under
    their GEMMs uncharged (40.900 s waited), each shorter than (1 − φ) of its GEMM, so
    φ × 28.039 = 6.700 s more waits, 6.708 s of the step with the interleaved bubble's
    (pp − 1)/(v·m) = 7/(3 × 2,048) share; each micro-batch 6.700 / 2,048 = 3.272 ms longer, a
    chunk's forward (a third of a micro-batch, over v 3 chunks: ÷ 9) 0.364 ms longer, and the
    pipeline sends' critical path ((n − 1) sends less two chunk forwards,
    model.comm.p2p_exposed_sends) 2 × 0.364 = 0.727 ms shorter: 550.526 → 557.234 s. The
    uniform plan 568.899 → 581.520 s (test_every_shape_is_searched_by_default derives it:
    12.621 s of its tp 8). Gain 581.520 / 557.234 = 1.04358.

    Since an interleaved stage holds a multiple of v layers (what Megatron-Core builds without a
    layout string; optimizer.stage_rules.layer_counts, model.pipeline_uneven), that tp 4 × pp 8
    plan (9 to 11 layers a stage at v 3) is no longer built, and with NCCL's charge at the blocks
    of the algorithm NCCL runs (model.nccl_channels: the tp 8 ring's 24 blocks, φ 0.259) the
    answer is the uniform plan itself, tp 8 × pp 2, v 2, 582.768 s (582.765 s before the
    optimizer step zeroed the whole gradient buffer, test_every_shape_is_searched_by_default;
    582.770 s under the closed form, before the interleaved bubble was Megatron-Core's order on
    the chunks), gain 1.

    Megatron-Core's own optimizer-step passes (model.step_passes.step_pass_bytes: the clip's
    scale +8, the master re-read +4; 38 → 50 B an element) on the answer's ZeRO-1 shard,
    +12 B × 2,205,487,104 owned elements / (3.35 TB/s × 0.8866) = +8.911 ms: 582.768 →
    582.776 s, the answer unchanged.

    Transformer Engine's placeholder weight gradients (model/terms/dummy_wgrads.py: one BF16
    tensor per distinct weight shape, held for the run; 213,909,504 B a tp 8 stage, 478,150,656 B
    on the last with the output layer) leave that uniform plan no room: the best uniform plan
    is v 3, 583.109 s, and the per-stage answer keeps tp 8 × pp 2, v 2 by recomputing one layer
    of stage 0: 582.792 s, 1.0005× the uniform one."""
    from trainplan.interface.cli import main

    args = ["--model", "llama3-70b", "--gpus", "32", "--seq-len", "8192", "--per-stage"]
    args += ["--zero", "0", "--zero", "1"]  # Megatron-FSDP (ZeRO-3) has no pipeline to interleave
    # at the answer's tp 8 (the other tp's shapes take the same path): 68 shapes, pp 2 and 4 at
    # every v their candidates take, the same answer as over every tp (a quarter of the time)
    args += ["--tp", "8"]
    monkeypatch.setattr(
        "sys.argv", ["trainplan", "search", *args, "--schedule", "interleaved", "--json"]
    )
    with pytest.raises(SystemExit):
        main()
    d = json.loads(capsys.readouterr().out)
    lay = d["layout"]
    assert (lay["tp"], lay["pp"], lay["schedule"], lay["virtual_stages"]) == (
        8,
        2,
        "interleaved",
        2,
    )
    assert d["per_stage"]["recompute_layers"] == [1, 0]
    assert d["per_stage"]["step_s"] == pytest.approx(582.792, abs=1e-3)
    assert d["per_stage"]["uniform"]["step_s"] == pytest.approx(583.109, abs=1e-3)
    assert d["per_stage"]["gain"] == pytest.approx(583.109 / 582.792, abs=1e-5)
    assert all(s["schedule"] == "interleaved" for s in d["per_stage"]["shapes"] if s["pp"] > 1)
    assert len(d["per_stage"]["shapes"]) == 68


def test_the_launch_line_writes_the_mtp_block_as_megatron_parses_it():
    """A model with a multi-token-prediction block: Megatron-LM's layout string has ``m`` for it
    (megatron/core/transformer/pipeline_parallel_layer_layout.py ``parse_str_to_list``:
    E, L, t, m), and ``validate_layer_layout`` counts ``t`` against ``--num-layers`` (32 here),
    ``m`` against ``--mtp-num-layers`` (1), MTP after every decoder layer. The per-stage search's
    launch line wrote the MTP block as a 33rd decoder layer (``…|t*4L``) for the chunks below,
    an interleaved plan the per-stage search no longer makes (its stages hold a multiple of v
    layers now: optimizer.stage_tables); the same writer prints them for ``evaluate``, run as a
    user runs it."""
    import re

    from tests.cli_runs import trainplan

    done = trainplan("evaluate", "--model", "llama3-8b", "--mtp-layers", "1", "--gpus", "16",
                     "--tp", "1", "--pp", "4", "--schedule", "interleaved",
                     "--virtual-stages", "2", "--stage-layers", "4,4,4,2,5,5,5,3")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    layout = re.search(r"--pipeline-model-parallel-layout '([^']+)'", done.stdout).group(1)
    assert layout == "Et*4|t*4|t*4|t*2|t*5|t*5|t*5|t*3mL"
    decoder = sum(int(n or 1) for n in re.findall(r"t(?:\*(\d+))?", layout))
    assert decoder == 32 and layout.count("m") == 1 and layout.endswith("mL")


def test_megatron_counts_decoder_layers_beside_the_mtp_block():
    """DeepSeek-V3 (61 layers and one MTP block on the last stage): the first/last counts and
    the layout string are decoder layers; the MTP block is ``m`` on the last stage."""
    from trainplan.scenarios.catalogue import get_model

    arch = get_model("deepseek-v3").model.arch
    even = Layout(pp=16, dp=128, ep=64, stage_layers=(3, *[4] * 14, 2))
    text = " ".join(megatron_flags(arch, even, 15360).flags)
    assert "--decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 2" in text
    uneven = even.with_(stage_layers=(4, 4, 3, *[4] * 12, 2))
    flags = megatron_flags(arch, uneven, 15360).flags
    assert flags[-1] == "Et*4|t*4|t*3|" + "t*4|" * 12 + "t*2mL"
    interleaved = Layout(pp=4, dp=8, ep=8, schedule="interleaved", virtual_stages=2)
    flags = megatron_flags(arch, interleaved, 1024).flags
    assert flags[flags.index("--pipeline-model-parallel-layout") + 1] == (
        "Et*7|t*7|t*8|t*8|t*8|t*8|t*8|t*7mL"
    )
