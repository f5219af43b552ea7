"""First-hour behaviours of the command line, each run as a user runs it: its own process, text
and ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_runs import refusal, run_many, trainplan


def test_a_gpu_count_without_dp_sets_dp():
    """``evaluate --gpus 8`` with no degrees is dp 8 (8 ÷ (tp 1 · pp 1 · cp 1)), listed among the
    defaults used; ``--tp 2 --gpus 8`` is dp 4; an explicit dp that disagrees is refused."""
    done = trainplan("evaluate", "--model", "llama3-8b", "--gpus", "8", "--json")
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    assert (d["layout"]["dp"], d["num_gpus"], d["defaults_used"]["dp"]) == (8, 8, 8)
    done = trainplan("evaluate", "--model", "llama3-8b", "--gpus", "8", "--tp", "2")
    assert done.returncode == 0, done.stderr
    assert "layout: dp 4 × tp 2 × pp 1" in done.stdout
    line = refusal(trainplan("evaluate", "--model", "llama3-8b", "--gpus", "8", "--dp", "4"))
    assert line == "--gpus: dp 4 × tp 1 × pp 1 × cp 1 = 4, not 8"
    line = refusal(trainplan("evaluate", "--model", "llama3-8b", "--gpus", "12", "--pp", "8"))
    assert line.startswith("--gpus: 12 is not divisible by tp·pp·cp = 8")
    # and --help says so (it said only "Check that dp·tp·pp·cp equals this.")
    shown = " ".join(trainplan("evaluate", "--help").stdout.split())
    assert "--gpus COUNT GPUs in all: without --dp, dp is this ÷ (tp·pp·cp); with --dp, " in shown


def test_a_price_is_said_whatever_the_objective():
    """``--gpu-hour-price 2.5`` on a step-time search: 64 GPUs × $2.5 = $160.00/hour; per step
    $160 × step_s / 3600 (text and JSON agree)."""
    args = ("search", "--model", "llama3-8b", "--gpus", "64", "--gpu-hour-price", "2.5")
    d = json.loads(trainplan(*args, "--json").stdout)
    assert d["price_per_hour"] == 160.0
    assert abs(d["price_per_step"] - 160.0 * d["time"]["step_s"] / 3600) < 1e-9
    text = trainplan(*args).stdout
    assert f"price: $160.00/hour, ${d['price_per_step']:,.2f} per step" in text


def test_a_search_without_a_model_asks_for_one():
    """``search --gpus 8`` with no model is refused as ``evaluate`` refuses it (the model first,
    not a batch size of a model nobody named), in text and under ``--json``."""
    want = (
        "--model: give --model NAME (a catalogue name or a config.json path), --params SIZE, or "
        "the dimensions --layers --hidden --heads"
    )
    for extra in ((), ("--json",)):
        done = trainplan("search", "--gpus", "8", *extra)
        assert done.returncode == 2 and refusal(done) == want, done.stderr


def test_a_search_under_one_optimizer_uses_it():
    """``search --optimizer lion`` searches Lion, not Adam: Lion's state is the FP32 master and
    one momentum, 8 B/param, so Llama 3 8B's 8,030,261,248 parameters at the answer's ZeRO-1
    over dp 8 hold 8 × 8,030,261,248 / 8 = 8.03 GB (Adam's 12 B would be 12.05 GB). Under
    Megatron-FSDP (``--zero 3``) Megatron-LM takes Adam or SGD only (validate_args): that rule
    is the refusal, not "divisibility"."""
    args = ("search", "--model", "llama3-8b", "--gpus", "8", "--framework", "megatron")
    d = json.loads(trainplan(*args, "--optimizer", "lion", "--json").stdout)
    assert (d["layout"]["optimizer"], d["layout"]["zero_stage"]) == ("lion", 1)
    assert abs(d["memory"]["optimizer_bytes"] / (8 * 8_030_261_248 / 8) - 1) < 1e-4
    line = refusal(trainplan(*args, "--zero", "3", "--optimizer", "lion"))
    assert line.startswith("--optimizer: lion under megatron runs at ZeRO 0 or 1 (Megatron-FSDP")


def test_a_search_takes_megatron_cores_loss_and_fp8_weights():
    """The fused losses and FP8 primary weights are Megatron-Core's recipe choices: a search
    under megatron takes them (its answer says so), one under fsdp2 is refused with the loss's
    rule, not with "divisibility"."""
    args = ("search", "--model", "llama3-8b", "--gpus", "8", "--framework", "megatron", "--json")
    for key in ("cross_entropy_fusion_impl=te", "cross_entropy_fusion_impl=native"):
        d = json.loads(trainplan(*args, "--set", key).stdout)
        assert d["layout"]["cross_entropy_fusion_impl"] == key.split("=")[1]
    d = json.loads(trainplan(*args, "--precision", "fp8", "--set", "fp8_param_gather=true").stdout)
    assert d["layout"]["fp8_param_gather"] is True
    line = refusal(
        trainplan("search", "--model", "llama3-8b", "--gpus", "8", "--framework", "fsdp2",
                  "--set", "cross_entropy_fusion_impl=te")
    )  # fmt: skip
    assert line.startswith("--set cross_entropy_fusion_impl: te is Megatron-Core's fused loss")


def test_fsdp2_runs_torchaos_float8_recipes():
    """torchao's Float8 scales dynamically only (delayed scaling was deleted from
    torchao.float8): ``--framework fsdp2 --fp8-recipe delayed`` is refused with that rule, in
    evaluate and in search; with no recipe given fsdp2 runs torchao's default, tensorwise, and
    is timed as such (the same step as ``--fp8-recipe tensorwise``)."""
    base = ("--model", "llama3-8b", "--gpus", "8", "--framework", "fsdp2", "--precision", "fp8")
    want = "--fp8-recipe: delayed is Transformer Engine's; fsdp2 runs torchao's Float8"
    for command in ("evaluate", "search"):
        line = refusal(trainplan(command, *base, "--fp8-recipe", "delayed"))
        assert line.startswith(want), line
    plain = json.loads(trainplan("evaluate", *base, "--zero", "3", "--json").stdout)
    given = json.loads(
        trainplan("evaluate", *base, "--zero", "3", "--fp8-recipe", "tensorwise", "--json").stdout
    )
    assert plain["time"]["step_s"] == given["time"]["step_s"]
    assert plain["memory"]["total_bytes"] == given["memory"]["total_bytes"]


def test_fsdp2_refuses_blockwise_fp8_torchtitan_has_none():
    """torchtitan offers no blockwise FP8 recipe (820504e ``config_manager.py``:
    ``Float8.recipe_name`` tensorwise, rowwise, rowwise_with_gw_hp; ``MX.recipe_name`` mxfp8;
    b5bcd76c ``Float8LinearConverter.Config.recipe_name``: rowwise, rowwise_with_gw_hp):
    ``--framework fsdp2 --fp8-recipe blockwise`` is refused in one line naming the flag, the value
    and torchtitan's recipes, in evaluate and in search, exit 2 (it was answered, as tensorwise's
    memory); under megatron (Transformer Engine's Float8BlockScaling) it still runs."""
    base = (
        "--model",
        "llama3-8b",
        "--gpus",
        "8",
        "--precision",
        "fp8",
        "--fp8-recipe",
        "blockwise",
    )
    want = (
        "--fp8-recipe: blockwise is Transformer Engine's (Float8BlockScaling); torchtitan "
        "(--framework fsdp2) offers torchao's tensorwise (at 9dec370, the validation runs'), "
        "rowwise, rowwise_with_gw_hp and mxfp8 (at b5bcd76c6), no blockwise"
    )
    done = run_many(
        {
            "evaluate": ["evaluate", *base, "--framework", "fsdp2", "--zero", "2", "--json"],
            "search": ["search", *base, "--framework", "fsdp2"],
            "megatron": ["evaluate", *base, "--framework", "megatron", "--json"],
        }
    )
    for command in ("evaluate", "search"):
        assert refusal(done[command]).startswith(want), done[command].stderr
    assert done["megatron"].returncode == 0, done["megatron"].stderr[-2000:]


def test_deepspeed_runs_what_its_code_runs():
    """DeepSpeed's native MoE refuses ZeRO-3 (engine.py _validate_zero3_moe_compatibility), and
    Megatron-DeepSpeed's FP8 (Transformer Engine's TransformerLayer: no GQA, LayerNorm and GELU,
    delayed scaling) cannot run Llama 3 at tp > 1: evaluate refuses both with the rule, and a
    search over several frameworks answers under another one instead of leaning on them."""
    line = refusal(
        trainplan("evaluate", "--model", "qwen3-235b-a22b", "--gpus", "64", "--framework",
                  "deepspeed", "--zero", "3", "--ep", "2")
    )  # fmt: skip
    assert line.startswith("--zero: 3 with --framework deepspeed and a MoE model")
    line = refusal(
        trainplan("evaluate", "--model", "llama3-70b", "--gpus", "64", "--framework",
                  "deepspeed", "--zero", "3", "--tp", "4", "--precision", "fp8")
    )  # fmt: skip
    assert line.startswith("--precision: fp8 with --framework deepspeed at tp 4 runs ")
    # at tp 4 and pp 1 (a fraction of the search's time over every tp and pp) DeepSpeed's FP8
    # is never legal
    frameworks = ("--framework", "megatron", "--framework", "fsdp2", "--framework", "deepspeed")
    d = json.loads(
        trainplan("search", "--model", "llama3-70b", "--gpus", "64", "--precision", "fp8",
                  "--tp", "4", "--pp", "1", *frameworks, "--json").stdout
    )  # fmt: skip
    assert d["layout"]["framework"] != "deepspeed" and d["layout"]["tp"] == 4


def test_torchtitans_tensor_parallelism_waits_unless_asked():
    """torchtitan's tensor-parallel collectives wait unless enable_async_tensor_parallel (its
    default False; that is tp_comm_overlap async-tp): under fsdp2 with torchtitan's plan the
    default is none, and the step is the one ``--set tp_comm_overlap=none`` gives; Megatron-
    Core's default stays async, and so does the Megatron-style plan (tp_block_inputs sharded)."""
    base = ("evaluate", "--model", "llama3-70b", "--gpus", "64", "--tp", "4", "--json")
    fsdp = ("--framework", "fsdp2", "--zero", "3")
    plain = json.loads(trainplan(*base, *fsdp).stdout)["time"]
    none = json.loads(trainplan(*base, *fsdp, "--set", "tp_comm_overlap=none").stdout)["time"]
    assert plain["tp_comm_overlap"] == "none" and plain["step_s"] == none["step_s"]
    sharded = json.loads(trainplan(*base, *fsdp, "--set", "tp_block_inputs=sharded").stdout)
    assert sharded["time"]["tp_comm_overlap"] == "async"
    assert json.loads(trainplan(*base).stdout)["time"]["tp_comm_overlap"] == "async"


def test_a_timeline_too_long_to_simulate_names_every_factor():
    """256 stages (the drawing's limit) × 1,000 micro-batches is over the passes the timeline
    simulates; the advice named only the micro-batches, not the stages that make it too long
    (more stages than the drawing's 256 are refused first: tests/tabs/test_tab_cli.py)."""
    line = refusal(trainplan("pipeline", "--stages", "256", "--microbatches", "1000"))
    assert line == (
        "stages × microbatches × virtual_stages: 256·1,000·1 is over the 200,000 passes this "
        "timeline simulates; use fewer stages, micro-batches or virtual stages"
    )


def test_the_help_says_where_megatron_fsdp_is():
    """`--framework megatron-fsdp` is refused (exit 2, the four profiles named); the help of
    evaluate and search says that Megatron-FSDP is megatron's ZeRO-3."""
    line = refusal(trainplan("search", "--model", "llama3-8b", "--gpus", "8", "--framework",
                             "megatron-fsdp"))  # fmt: skip
    assert line.startswith("--framework: 'megatron-fsdp' is not one of 'megatron'")
    for command, said in (
        ("evaluate", "megatron --zero 3 is Megatron-FSDP"),
        ("search", "its ZeRO-3 is Megatron-FSDP"),
    ):
        assert said in " ".join(trainplan(command, "--help").stdout.split())


def test_the_accelerator_tables_status_column_is_headed_and_explained():
    """``trainplan gpus``: the rows' ``status`` (accelerators.toml: vendor, secondary, derived)
    is headed "figures from" and a line under the table says what each value means (the page:
    tests/web/test_api.py). JSON keeps the key ``status``."""
    done = trainplan("gpus")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[-2:] == ["figures", "from"] and "status" not in lines[0]
    legend = next(line for line in lines if line.startswith("figures from: "))
    rows = json.loads(trainplan("gpus", "--json").stdout)
    kinds = {r["status"] for r in rows}
    assert kinds == {"vendor", "secondary", "derived"}
    assert all(f"{k} = " in legend for k in kinds)
    assert "secondary = a copy of the vendor's table" in legend


def test_figures_read_in_the_vendors_datasheet_are_not_called_a_copy():
    """``trainplan gpus`` said H100-SXM's figures were "secondary" (a copy of the vendor's table)
    although its source is NVIDIA's H100 datasheet. A row whose source names the vendor's own
    datasheet or specifications is "vendor"; "secondary" is left to rows sourced otherwise (the
    H800 from the H100's rates and DeepSeek-V3's report, the H20 as secondary sources copy it)."""
    done = trainplan("gpus")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("H100-SXM "))
    assert row.split()[-1] == "vendor"
    rows = json.loads(trainplan("gpus", "--json").stdout)
    vendor_doc = ("datasheet", "data sheet", "specifications")
    for r in rows:
        if r["status"] == "secondary":
            said = r["source"].lower()
            assert "secondary sources" in said or not any(d in said for d in vendor_doc), r["name"]
    assert {r["name"] for r in rows if r["status"] == "secondary"} == {"H800", "H20"}


def test_the_per_stage_table_has_readable_headers_with_units():
    """``evaluate --per-stage``: the table's headers say what each column is, in its unit
    (they were the JSON's keys: stage_layers, stage_state, stage_in_flight …); the figures are
    the JSON's, GB = 10^9 bytes, and a fractional in-flight count is rounded (16/3 → 5.333)."""
    args = ["evaluate", "--model", "llama3-8b", "--gpus", "16", "--pp", "4"]
    args += ["--schedule", "interleaved", "--virtual-stages", "2", "--per-stage"]
    done = trainplan(*args)
    assert done.returncode == 0, done.stderr
    table = done.stdout.split("Per pipeline stage (per GPU; GB = 10^9 bytes):\n")[1].splitlines()
    header = table[0]
    for name in ("stage", "layers", "model state GB", "layer activations GB",
                 "other activations GB", "micro-batches in flight", "peak GB"):  # fmt: skip
        assert name in header
    assert "stage_" not in done.stdout.split("Per pipeline stage")[1]
    stages = json.loads(trainplan(*args, "--json").stdout)["stages"]
    for row, st in zip(table[2:], stages, strict=False):
        cells = row.split()
        assert cells[0] == str(st["stage"]) and cells[1] == str(st["stage_layers"])
        assert cells[2] == f"{st['stage_state_bytes'] / 1e9:,.2f}"
        assert cells[-1] == f"{st['stage_total_bytes'] / 1e9:,.2f}"
        assert cells[-2] == f"{st['stage_in_flight']:,.4g}"
    assert table[2 + len(stages)].startswith("other activations: embedding")


def test_the_peak_is_said_by_the_figure_used_first():
    """The MFU and RLHF answers' ``peak_source`` leads with what the peak is (the accelerator
    table's dense BF16) before the row's source text, which opens with the BF16 figure's own
    datasheet (the FP8 figure's source is apart, ``fp8_source``); ``trainplan mfu`` prints the
    figure used, then that."""
    args = ["--params", "70e9", "--tokens", "4e6", "--step-seconds", "7", "--chips", "512"]
    done = trainplan("mfu", *args, "--gpu", "H100-SXM")
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("peak "))
    assert line.startswith(
        "peak 989.4 TFLOP/s per chip — H100-SXM dense BF16, the accelerator table's (source: "
        "NVIDIA H100 Tensor Core GPU datasheet (1,979 TFLOPS with sparsity;"
    )
    rlhf = json.loads(
        trainplan("rlhf", "--algorithm", "ppo", "--policy-params", "70e9", "--json").stdout
    )
    assert rlhf["peak_flops_per_s"] == 989.4e12
    assert rlhf["peak_source"].startswith("H100-SXM dense BF16, the accelerator table's")


def test_rlhf_text_names_the_peak_it_divides_by():
    """``trainplan rlhf`` (text) heads its answer with the peak FLOP/s per chip and the chips its
    times divide by, then whose peak it is — as the RLHF page and ``trainplan mfu`` give it;
    ``rlhf-plan`` and the faithful accounting name the GPU's dense BF16 peak and HBM bandwidth
    in their headers. Text and ``--json`` agree."""
    args = ("rlhf", "--algorithm", "grpo", "--policy-params", "70e9", "--reward", "rule")
    d = json.loads(trainplan(*args, "--peak-tflops", "500", "--chips", "8", "--json").stdout)
    assert (d["peak_flops_per_s"], d["chips"], d["decode_mfu"], d["train_mfu"]) == (
        500e12,
        8,
        0.04,
        0.4,
    )
    text = trainplan(*args, "--peak-tflops", "500", "--chips", "8").stdout.splitlines()
    assert text[0].endswith("networks; times at peak 500.0 TFLOP/s per chip × 8 chip(s)")
    assert "peak: given (--peak-tflops); rollout MFU 0.04, scoring and training MFU 0.4" in text
    rollout = d["phase_seconds"]["rollout"]  # 2N per token ÷ (0.04 · 500e12 · 8)
    assert abs(rollout - d["phase_flops"]["rollout"] / (0.04 * 500e12 * 8)) < 1e-6 * rollout
    assert any(ln.startswith("  rollout ") and f"{rollout:,.1f} s" in ln for ln in text)
    text = trainplan(*args).stdout
    assert "times at peak 989.4 TFLOP/s per chip × 1 chip(s)" in text
    assert "peak: H100-SXM dense BF16, the accelerator table's (source:" in text
    plan = ("rlhf-plan", "--algorithm", "grpo", "--model", "qwen2.5-7b", "--reward", "rule",
            "--gpus", "8", "--prompts", "64", "--completion-tokens", "512")  # fmt: skip
    done = trainplan(*plan)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "GRPO qwen2.5-7b on 8 × H100-SXM (peak 989.4 TFLOP/s dense BF16 per GPU, HBM 3.35 TB/s; "
        "megatron ZeRO-1): "
    )
    d = json.loads(trainplan(*plan, "--json").stdout)
    assert (d["peak_flops_per_s"], d["hbm_bytes_per_s"]) == (989.4e12, 3.35e12)


def test_misspelled_names_and_bad_numbers_name_their_flag():
    """A misspelled model or accelerator is refused naming the flag that gave it (the critic's
    model as ``--critic-model``), a range without an end and a document length as the user wrote
    them (not the parsed ``Fraction``), and the MFU's missing peak names ``--gpu`` and
    ``--peak-tflops``: one line, exit 2, each in its own process."""
    llama = ("--model", "llama3-8b")
    mfu = ("mfu", "--params", "70e9", "--tokens", "4e6", "--step-seconds", "7", "--chips", "8")
    runs = run_many(
        {
            "evaluate model": ["evaluate", "--model", "lama3-8b"],
            "search model": ["search", "--model", "lama3-8b", "--gpus", "8"],
            "frontier model": ["frontier", "--model", "lama3-8b", "--gpus", "8"],
            "search gpu": ["search", *llama, "--gpus", "8", "--gpu", "B900"],
            "critic": [
                "rlhf",
                "--algorithm",
                "grpo",
                *llama,
                "--critic-model",
                "lama",
                "--gpus",
                "8",
            ],
            "mfu gpu": [*mfu, "--gpu", "B900"],
            "mfu no peak": list(mfu),
            "open range": ["search", *llama, "--gpus", "8.."],
            "document 0": ["evaluate", *llama, "--document-length", "0"],
            "document long": ["evaluate", *llama, "--document-length", "1.5e4"],
        }
    )
    said = {name: refusal(done) for name, done in runs.items()}
    for name in ("evaluate model", "search model", "frontier model"):
        assert said[name].startswith("--model: unknown model 'lama3-8b'; did you mean llama3-8b")
    assert said["search gpu"].startswith("--gpu: unknown gpu 'B900'; did you mean B300")
    assert said["mfu gpu"].startswith("--gpu: unknown gpu 'B900'")
    assert said["critic"].startswith("--critic-model: unknown model 'lama'; did you mean")
    assert (
        said["mfu no peak"]
        == "--gpu: missing; give --gpu (e.g. H100-SXM) or --peak-tflops (per chip)"
    )
    assert said["open range"] == "--gpus: range '8..' needs both ends, e.g. 1024..16384"
    assert said["document 0"] == "--document-length: 0 must be at least 1 token"
    assert said["document long"].startswith(
        "--document-length: mean 15,000 plus spread 0 exceeds seq_len 8192"
    )


def test_dimensions_beside_a_named_model_are_refused_not_dropped():
    """``evaluate --model llama3-8b --layers 12`` printed llama3-8b's 32-layer figures as if the
    flag had been read; a catalogue model (or config.json) has its own dimensions, so the flag is
    refused as ``--params`` beside ``--model`` is. A dimension beside ``--params`` without
    ``--layers --hidden --heads`` (a size-only model, which reads none) is refused too."""
    runs = run_many(
        {
            "layers": ["evaluate", "--model", "llama3-8b", "--layers", "12"],
            "vocab": ["search", "--model", "llama3-8b", "--gpus", "8", "--vocab", "1000"],
            "size heads": ["evaluate", "--params", "7e9", "--heads", "32"],
            "size dims": [
                "evaluate",
                "--params",
                "7e9",
                "--layers",
                "32",
                "--hidden",
                "4096",
                "--heads",
                "32",
                "--json",
            ],  # fmt: skip
        }
    )
    assert refusal(runs["layers"]) == (
        "--layers: 12 does not apply: model llama3-8b has its own dimensions; give them with "
        "--params instead of --model"
    )
    assert refusal(runs["vocab"]).startswith("--vocab: 1000 does not apply: model llama3-8b")
    assert refusal(runs["size heads"]) == (
        "model dimensions: --heads is read only with all of --layers, --hidden and --heads "
        "(without them --params is a size only)"
    )
    assert runs["size dims"].returncode == 0, runs["size dims"].stderr
    assert json.loads(runs["size dims"].stdout)["memory"]["activations_bytes"] > 0


def test_ckpt_over_80_tensors_says_its_bar():
    """Over 80 tensors ``trainplan ckpt`` draws each step as a bar of the tensors held, not a cell
    per tensor: its legend says so (it listed the cells' C, R, x that the bar never shows);
    9 layers keep the cells' legend."""
    text = trainplan("ckpt", "--layers", "100", "--every", "10").stdout.splitlines()
    assert text[2] == (
        "bar: tensors held, one # per 1.68 tensors (over 80 tensors a cell each would not fit a "
        "line)"
    )
    assert text[3].startswith("   1 forward   layer 1    #    2 held")
    small = trainplan("ckpt", "--layers", "9", "--every", "3").stdout.splitlines()
    assert small[2] == "cells: C checkpoint, # held, R recomputed, x discarded now, . free"


def test_an_empty_name_in_a_list_is_refused_as_typed():
    """``--gpu H100-SXM,,B200`` searched the two named parts and dropped the empty one unread
    (``;;`` was refused), and ``--framework megatron,,fsdp2`` was refused quoting
    ``'megatron;;fsdp2'``, a value nobody typed: both are refused as typed now."""
    args = ("search", "--model", "llama3-8b", "--gpus", "8")
    runs = run_many(
        {
            "gpu": [*args, "--gpu", "H100-SXM,,B200"],
            "gpu end": [*args, "--gpu", "H100-SXM,"],
            "framework": [*args, "--framework", "megatron,,fsdp2"],
        }
    )
    assert refusal(runs["gpu"]) == "--gpu: 'H100-SXM,,B200' has an empty item"
    assert refusal(runs["gpu end"]) == "--gpu: 'H100-SXM,' has an empty item"
    assert refusal(runs["framework"]) == "--framework: 'megatron,,fsdp2' has an empty item"


def test_pipeline_times_of_the_other_schedule_kind_name_the_flags_to_give():
    """A split schedule's pass times beside a whole-backward schedule (and the reverse) were
    refused with "give backward_ratio" / "give t_b and t_w", parameter names no flag is spelled
    as: the line names --backward-ratio, --t-b and --t-w."""
    runs = run_many(
        {
            "t-fb": ["pipeline", "--stages", "4", "--microbatches", "8", "--t-fb", "2"],
            "ratio": [
                "pipeline",
                "--stages",
                "4",
                "--microbatches",
                "8",
                "--schedule",
                "zb-h1",
                "--backward-ratio",
                "2",
            ],  # fmt: skip
        }
    )
    assert refusal(runs["t-fb"]) == (
        "--t-fb: '2' does not apply: 1f1b runs whole backwards: give --backward-ratio"
    )
    assert refusal(runs["ratio"]) == (
        "--backward-ratio: '2' does not apply: zb-h1 splits the backward: give --t-b and --t-w"
    )


def test_mfu_refusals_name_the_flags_to_check():
    """``trainplan mfu``'s impossible answers and its recompute refusals named the parameters
    (``step_seconds``, ``peak_tflops``, ``recomputed_flops_pct``, ``head_dim``) where a user reads
    flags: they name --step-seconds, --tokens, --chips, --peak-tflops, --gpu,
    --recomputed-flops-pct, --recompute and --head-dim now."""
    base = ("mfu", "--params", "70e9", "--tokens", "4e6", "--step-seconds", "7", "--gpu",
            "H100-SXM")  # fmt: skip
    runs = run_many(
        {
            "too high": [*base, "--chips", "8"],
            "both": [
                *base,
                "--chips",
                "512",
                "--recompute",
                "full",
                "--recomputed-flops-pct",
                "20",
            ],
            "dims": [*base, "--chips", "512", "--recompute", "selective", "--layers", "80"],
        }
    )
    assert refusal(runs["too high"]).endswith(
        "the likely wrong input is --step-seconds (seconds per whole step?), --tokens (tokens in "
        "the step, all chips) or --chips (8: the job's chip count), else the peak (--peak-tflops "
        "/ --gpu)"
    )
    assert (
        refusal(runs["both"]) == "--recompute: give --recomputed-flops-pct or --recompute, not both"
    )
    # without --attention the 6·N MFU's HFU adds no recomputed attention core: selective
    # recomputation reads no dimension, and one given is refused as entering nothing
    assert refusal(runs["dims"]) == (
        "--layers: '80' does not apply: it enters only attention FLOPs (--attention); without "
        "them the 6·N MFU counts no attention and its HFU adds no recomputed attention core"
    )


def test_a_one_point_frontier_says_point():
    """A price frontier of one accelerator at one price is one point: "1 point of", not
    "1 points of"."""
    done = trainplan("frontier", "--model", "llama3-8b", "--gpus", "8", "--gpu-hour-price", "2.5",
                     "--against", "price")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Pareto frontier: step-time against price, 1 point of ")


def test_one_micro_batch_in_flight_is_singular():
    """Without a pipeline one micro-batch is in flight: the Pipeline line said "1 micro-batches"."""
    done = trainplan("evaluate", "--model", "llama3-8b")
    assert done.returncode == 0, done.stderr
    assert "; 1 micro-batch in flight on the busiest stage; layers per stage [32]" in done.stdout
    done = trainplan("evaluate", "--model", "llama3-8b", "--pp", "4")
    assert "; 4 micro-batches in flight on the busiest stage; " in done.stdout


def test_sweep_group_by_is_refused_where_it_is_not_read_and_before_a_sweep_runs(tmp_path):
    """``--group-by`` groups the summary, which ``--point`` does not print: refused with it (was
    accepted silently, a misspelled column too); without ``--point`` a column the results lack is
    refused before the sweep runs (was after its last point), and nothing is written."""
    grid = str(Path(__file__).resolve().parents[1] / "docs" / "sweeps" / "study.toml")
    out = tmp_path / "study.parquet"
    runs = run_many(
        {
            "point": ["sweep", grid, "--point", "3", "--group-by", "nosuchcol"],
            "point, a column": ["sweep", grid, "--point", "3", "--group-by", "model;gpu"],
            "sweep": ["sweep", grid, "--group-by", "nosuchcol", "--out", str(out)],
        }
    )
    assert refusal(runs["point"]) == (
        "--group-by: 'nosuchcol' does not apply: --point prints the points' rows, not the summary "
        "it groups"
    )
    assert refusal(runs["point, a column"]).startswith("--group-by: 'model;gpu' does not apply")
    assert refusal(runs["sweep"]) == (
        "--group-by: 'nosuchcol' is not a results column (e.g. model, gpu, part, gpus, seq_len, "
        "recipe, framework or a what-if)"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_model_given_by_its_dimensions_alone():
    """``--layers --hidden --heads`` (with ``--arch llama`` and its FFN, K/V heads and vocabulary)
    describe a model without ``--params``: its size is their count. A Llama-style layer of
    hidden 4,096, 32 heads over 8 K/V heads of 128 and FFN 14,336 holds 2·(4096² + 4096·1024) +
    3·4096·14336 + 2·4096 = 218,112,000 parameters; 16 of them, the untied 128,256 × 4,096
    embedding and output layer (1,050,673,152) and the final norm (4,096) make 4,540,469,248."""
    dims = ("--arch", "llama", "--layers", "16", "--hidden", "4096", "--heads", "32",
            "--kv-heads", "8", "--ffn-hidden", "14336", "--vocab", "128256")  # fmt: skip
    done = trainplan("evaluate", *dims, "--gpus", "8", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"]["num_params"] == 4_540_469_248
    assert trainplan("evaluate", *dims, "--gpus", "8").stdout.startswith(
        "4.54B: 4,540,469,248 parameters"
    )


def test_a_search_whose_offload_leaves_nothing_legal_is_refused_in_one_line():
    """Llama 3 8B on one 40 GB A100 with the optimizer offloaded: every candidate's host share
    (145.60 GB at ZeRO-1 or -2 against the DGX A100's 128 GB a GPU) is over the host memory, so
    no candidate is legal. The search says so as every infeasible search does, in text and JSON,
    not with a traceback."""
    args = ("search", "--model", "llama3-8b", "--gpus", "1", "--gpu", "A100-40GB", "--framework",
            "deepspeed", "--offload-optimizer", "1", "--seq-len", "4096", "--global-batch", "8")  # fmt: skip
    runs = run_many({"text": args, "json": (*args, "--json")})
    assert "Traceback" not in runs["text"].stderr + runs["text"].stdout
    assert "every candidate's host share exceeds the host memory" in runs["text"].stderr
    assert runs["text"].returncode == runs["json"].returncode != 0
    message = json.loads(runs["json"].stdout)["message"]
    assert message.startswith("search: no layout is legal: with offload")
