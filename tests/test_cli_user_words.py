"""What a second new user met following the README on a clean clone (part B): the command line's
words — a refusal names the flag the user typed, prints nothing before its one line, counts in
the output grammar, a missing figure asked for with a value and its unit, the scenario keys
listed at the terminal — Megatron-LM's own rules for a plan's pipeline split, and worked
examples that say where they part from their source. Each command runs as a user runs it, its
own ``trainplan`` process (:func:`tests.cli_runs.run_many`), all of them once per session."""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

import pytest

from tests.cli_runs import Done, refusal, run_many
from trainplan.interface.launch_split import megatron_pipeline_flags, split_flags
from trainplan.model.layout import Layout
from trainplan.model.specs import Architecture

EVAL_70B = ["evaluate", "--model", "llama3-70b"]
README_405B = [
    "evaluate", "--model", "llama3-405b", "--gpu", "H100-SXM",
    "--tp", "8", "--pp", "32", "--dp", "64", "--schedule", "interleaved", "--virtual-stages", "4",
]  # fmt: skip
"""The README's headline answer (``trainplan search --model llama3-405b --gpus 16384``)."""

CALLS: dict[str, list[str]] = {
    "pipeline_m": [
        "pipeline",
        "--stages",
        "4",
        "--microbatches",
        "6",
        "--schedule",
        "interleaved",
        "-v",
        "2",
    ],  # fmt: skip
    "example_tp": ["example", "llama3-405b", "--set", "tp=3"],
    "example_foo": ["example", "llama3-405b", "--set", "foo=1"],
    "example_nope": ["example", "nope"],
    "example_near": ["example", "one-gpu"],
    "size_only": ["search", "--params", "70B", "--gpus", "64"],
    "size_only_batch": ["search", "--params", "70B", "--gpus", "64", "--global-batch", "64"],
    "misspelt": [*EVAL_70B, "--set", "memory_efficent_norm=true"],
    "keys_evaluate": ["evaluate", "--set", "help"],
    "keys_search": ["search", "--set", "help"],
    "gpus": ["gpus"],
    "mi300x_evaluate": ["evaluate", "--model", "llama3-8b", "--gpu", "MI300X", "--gpus", "16"],
    "mi300x_search": ["search", "--model", "llama3-70b", "--gpu", "MI300X", "--gpus", "64"],
    "four_million": [*EVAL_70B, "--gpus", "4,000,000"],
    "four_million_typed": [*EVAL_70B, "--gpus", "4,000,000", "--global-batch", "2,048"],
    "pp7": [*EVAL_70B, "--pp", "7", "--gpus", "56"],
    "pp7_json": [*EVAL_70B, "--pp", "7", "--gpus", "56", "--json"],
    "pp8_json": [*EVAL_70B, "--pp", "8", "--gpus", "64", "--json"],
    "readme_405b": README_405B,
    "ex_128k": ["example", "llama3-405b-128k"],
    "ex_128k_json": ["example", "llama3-405b-128k", "--json"],
    "ex_128k_changed": ["example", "llama3-405b-128k", "--set", "compile=false"],
    "ex_1t_json": ["example", "megatron-1t", "--json"],
    "ex_fsdp": ["example", "fsdp-70b-64"],
    "mfu_peak": [
        "mfu",
        "--params",
        "70B",
        "--tokens",
        "4e6",
        "--step-seconds",
        "7000",
        "--gpu",
        "H100-SXM",
    ],  # fmt: skip
    "rlhf_peak": ["rlhf", "--algorithm", "grpo", "--policy-params", "7e9", "--gpu", "H100-SXM"],
    "rlhf_plan": [
        "rlhf-plan",
        "--algorithm",
        "grpo",
        "--model",
        "qwen2.5-7b",
        "--reward",
        "rule",
        "--gpus",
        "8",
    ],  # fmt: skip
    **{f"help_{c}": [c, "--help"] for c in ("pipeline", "mfu", "ckpt", "rlhf-plan")},
}


@pytest.fixture(scope="module")
def done() -> dict[str, Done]:
    return run_many(CALLS)


def _ok(d: Done) -> str:
    assert d.returncode == 0, d.stderr[-2000:]
    return d.stdout


def _json(d: Done) -> Any:
    return json.loads(_ok(d))


# ------------------------------------------------------------------ refusals as the user typed them
def test_a_refusal_names_the_flags_of_the_command_run(done) -> None:
    """The interleaved rule is the library's (``num_microbatches``, ``pp``); ``trainplan
    pipeline`` calls them ``--microbatches`` and ``--stages`` (interface.flags.PARAMETER_FLAGS,
    the one mapping, read for the command run)."""
    assert refusal(done["pipeline_m"]) == (
        "--microbatches: 6 must be a multiple of --stages = 4 for the interleaved schedule"
    )


def test_the_web_attaches_it_to_the_field() -> None:
    """The API's line heads with the pipeline page's field, ``microbatches`` (the page puts an
    error next to the field its head names), and names the stages as that page's field,
    ``stages`` (labelled "stages p"), not evaluate's ``pp`` (a new user's finding: the page said
    pp beside a field it does not have; interface.web.api.error_line reads the request's own
    command's keys)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    warnings.filterwarnings("ignore", message=".*httpx2.*")
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    client = TestClient(create_app(("testserver",)))
    got = client.get("/api/pipeline?stages=4&microbatches=6&schedule=interleaved&virtual-stages=2")
    assert got.status_code == 422
    assert got.json()["error"] == (
        "microbatches: 6 must be a multiple of stages = 4 for the interleaved schedule"
    )


def test_an_example_prints_nothing_before_its_refusal(done) -> None:
    assert refusal(done["example_tp"]) == "--set tp: 3 does not divide num_attention_heads = 128"
    assert refusal(done["example_foo"]) == (
        "--set foo: not a planner parameter (docs/guides/python.md#parameter-names lists them)"
    )


def test_a_size_only_model_is_refused_by_the_search_first(done) -> None:
    """With or without a batch: the dimensions are what the search lacks first; the size is
    written in the output grammar (70B = 70,000,000,000)."""
    line = (
        "--params: 70,000,000,000 is a size only, and a search needs the model's dimensions (its "
        "layers and widths) to place and time it; give --model NAME (a catalogue name or a "
        "config.json), or --layers --hidden --heads with --params"
    )
    assert refusal(done["size_only"]) == line
    assert refusal(done["size_only_batch"]) == line


def test_the_scenario_keys_are_listed_at_the_terminal(done) -> None:
    """A misspelt key points to ``--set help``, which lists every key the command takes with its
    kind and help: evaluate the [cluster] table's, search every table's."""
    assert refusal(done["misspelt"]) == (
        "--set: 'memory_efficent_norm' is not a scenario key evaluate takes; did you mean "
        "memory_efficient_norm? (trainplan evaluate --set help lists them)"
    )
    keys = _ok(done["keys_evaluate"]).splitlines()
    assert keys[0].startswith("Scenario keys of trainplan evaluate: --set KEY=VALUE")
    assert "  memory_efficient_norm (true | false)" in keys
    assert "  scaleout_gbps (number)" in keys
    assert not any(line.startswith("  tp ") for line in keys)  # the search space's, not evaluate's
    assert "  tp [space] (count, or a list; also --tp)" in _ok(done["keys_search"]).splitlines()


def test_a_missing_link_figure_is_asked_for_with_a_value_and_its_unit(done) -> None:
    """The table has no scale-out figure for the MI300X (one 8-GPU domain needs none; 16 and 64
    GPUs span two and eight): the key with an example value, GB/s per GPU per direction (one
    400 Gb/s NIC = 50 GB/s). The table's own sources name the parameter, not a flag."""
    give = "give --set scaleout_gbps=50 (GB/s per GPU per direction, one 400 Gb/s NIC per GPU)"
    assert refusal(done["mi300x_evaluate"]) == (
        f"--gpu MI300X: the accelerator table has no scaleout_gbps; {give}"
    )
    assert refusal(done["mi300x_search"]).endswith(f"NVLink domain of 8; {give}")
    table = _ok(done["gpus"])
    assert "--scaleout-gbps" not in table and "give --" not in table
    assert table.count("scaleout_gbps left out (a run gives its own)") == 3  # PCIe, NVL, H20


def test_an_unknown_example_names_the_argument_and_where_the_names_are(done) -> None:
    """``trainplan example NAME``: a name that is none of scenarios/examples.toml's is refused at
    ``NAME`` (the usage line's word), with the names close to it (difflib, as for models and
    accelerators) or, none being close, the command that lists them."""
    assert refusal(done["example_nope"]) == (
        "NAME: 'nope' is not an example; trainplan example --list lists them"
    )
    assert refusal(done["example_near"]) == (
        "NAME: 'one-gpu' is not an example; did you mean one-gpu-70b? "
        "(trainplan example --list lists them all)"
    )


def test_counts_in_a_refusal_are_written_as_the_output_writes_them(done) -> None:
    """B = 2048 sequences, b = 1, dp = G = 4,000,000 (tp = pp = cp = 1). Not typed, the batch is
    Llama 3 70B's published one (the catalogue's, the ``Defaults used:`` line's), and the line
    says so and names the flag that sets it; typed, the line is the rule alone."""
    rule = "--global-batch: 2,048 is not divisible by micro_batch_size 1 × dp 4,000,000 = 4,000,000"
    assert refusal(done["four_million"]) == (
        f"{rule} (2,048 is llama3-70b's default; give --global-batch to set another)"
    )
    assert refusal(done["four_million_typed"]) == rule


# ------------------------------------------------------------------ Megatron-LM's split rules
ARCH_80 = Architecture(
    num_layers=80, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16
)
ARCH_126 = Architecture(
    num_layers=126, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16
)
ARCH_6 = Architecture(
    num_layers=6, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16
)


def test_each_split_takes_the_megatron_flags_that_build_it() -> None:
    """Megatron-LM (d98e8a64dd) ``validate_args`` asserts pp | L without split flags,
    ``TransformerConfig`` refuses an end stage of 0 layers and an uneven rest,
    ``get_num_layers_to_build`` builds (hand derivations):

    * 80 layers over pp 8: 10 each, Megatron-LM's own split — no flags;
    * 80 over pp 7: ⌈80/7⌉ = 12, 7·12 − 80 = 4 given back by stages 0, 6, 1, 5 → 11, 11, 12, 12,
      12, 11, 11; first/last 11 + 11 leave 58 for 5 middle stages (not whole), 81 and 82 are
      not multiples of 7 → only the layout string;
    * 126 over pp 16: 7, 8 × 14, 7; first/last 7 + 7 leave 112 = 14 × 8 → the first/last counts;
    * 126 over pp 32 × v 4 = 128 chunks: 0, 1 × 126, 0; rank 0 holds chunks 0, 32, 64, 96 =
      3 layers, not a multiple of v = 4 (first/last refused); 126 + 2 = 128 = 32 × 4 with the
      embedding and the loss counted a layer each → the account-for flags and the v flag;
    * 6 over pp 8: 0, 1 × 6, 0; a first stage of 0 layers is refused, 6 + 2 = 8 slots → the
      account-for flags.
    """
    megatron = {"framework": "megatron"}
    assert split_flags(ARCH_80, Layout(pp=8, **megatron)) is None
    assert split_flags(ARCH_80, Layout(pp=7, **megatron)) == [
        "--pipeline-model-parallel-layout",
        "Et*11|t*11|t*12|t*12|t*12|t*11|t*11L",
    ]
    assert split_flags(ARCH_126, Layout(pp=16, **megatron)) == [
        "--decoder-first-pipeline-num-layers", "7", "--decoder-last-pipeline-num-layers", "7",
    ]  # fmt: skip
    readme = Layout(pp=32, schedule="interleaved", virtual_stages=4, **megatron)
    assert split_flags(ARCH_126, readme) == [
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
        "--num-virtual-stages-per-pipeline-rank", "4",
    ]  # fmt: skip
    assert split_flags(ARCH_6, Layout(pp=8, **megatron)) == [
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
    ]
    # another framework's plan: no Megatron-LM line (its launch line still writes them)
    assert split_flags(ARCH_80, Layout(pp=7, framework="fsdp2")) is None
    notes: list[str] = []
    assert megatron_pipeline_flags(ARCH_80, Layout(pp=7), notes)[0] == (
        "--pipeline-model-parallel-layout"
    )
    assert notes and "the middle stages differ" in notes[0]


def test_the_plan_prints_the_flags_megatron_lm_needs_for_its_split(done) -> None:
    text = _ok(done["pp7"])
    assert (
        "  Megatron-LM builds this split with --pipeline-model-parallel-layout "
        "'Et*11|t*11|t*12|t*12|t*12|t*11|t*11L' (without them it builds L/pp layers a stage "
        "and asserts pp divides L: megatron/training/arguments.py validate_args)"
    ) in text.splitlines()
    assert "layers per stage [11, 11, 12, 12, 12, 11, 11]" in text
    assert _json(done["pp7_json"])["pipeline"]["megatron_split_flags"] == [
        "--pipeline-model-parallel-layout",
        "Et*11|t*11|t*12|t*12|t*12|t*11|t*11L",
    ]
    assert _json(done["pp8_json"])["pipeline"]["megatron_split_flags"] is None
    assert (
        "Megatron-LM builds this split with --account-for-embedding-in-pipeline-split "
        "--account-for-loss-in-pipeline-split --num-virtual-stages-per-pipeline-rank 4"
    ) in _ok(done["readme_405b"])


# ------------------------------------------------------------------ examples and their sources
def test_an_example_that_parts_from_its_source_says_so(done) -> None:
    """Meta's 128K layout is counted over the H100 (README, Sources: Memory): one line under the
    header, and in the JSON; gone once an option changes the example."""
    lines = _ok(done["ex_128k"]).splitlines()
    assert lines[1] == "Profile: fsdp2"
    assert lines[2].startswith("Note: Meta trained this layout, yet it is counted over the H100")
    assert "verdict: DOES NOT FIT" in "\n".join(lines)
    assert _json(done["ex_128k_json"])["note"] == lines[2].removeprefix("Note: ")
    assert "Note: Meta" not in _ok(done["ex_128k_changed"])


def test_the_1t_example_runs_the_papers_recomputation(done) -> None:
    """Narayanan et al. 2021 ran the 1T model with every layer recomputed (sc21/run_table_1.sh:
    --activations-checkpoint-method uniform; Eq. 3's 96 = 4 passes × 24·B·s·l·h²). The hardware
    FLOPs beyond the model FLOPs are one more forward of the layers per token, under the default
    ``6n`` convention (which counts no attention-core FLOPs) their GEMMs alone: 2·12·h²·L
    (h 25600, L 128, s 2048); the causal attention core's 2·h·(s + 1)·L is left out, as the
    ``6n`` model FLOPs leave it out (PaLM Appendix B: HFU = the MFU's FLOPs + rematerialisation)."""
    out = _json(done["ex_1t_json"])
    assert out["layout"]["recompute"] == "full" and out["flops"]["convention"] == "6n"
    h, layers, tokens = 25600, 128, 3072 * 2048
    extra = tokens * 2 * 12 * h * h * layers
    assert out["flops"]["hardware_flops"] - out["flops"]["model_flops"] == extra


def test_zero3_traffic_is_said_as_counted(done) -> None:
    """ZeRO §7.2.2: ZeRO-3 gathers the weights for each micro-batch's forward and again for its
    backward and reduce-scatters its gradients, 1.5× the 2Ψ of ZeRO-1/2 at one micro-batch a step
    (fsdp-70b-64: m = 1, 3·(63/64)·2·70e9 = 413.44 GB); the assumption and the traffic row say
    the same."""
    text = _ok(done["ex_fsdp"])
    assert "reduce-scatter (bf16) per micro-batch + all-gather per micro-batch (fwd, bwd)" in text
    assert "413.44 GB" in text
    assert (
        "ZeRO-3 gathers the weights for every micro-batch's forward and backward and "
        "reduce-scatters its 1/D gradients every micro-batch" in text
    )
    assert "one gather per step" not in text


def test_the_bf16_peak_is_quoted_by_its_own_source(done) -> None:
    """The H100 SXM's dense BF16 peak, 989.4 TFLOP/s, is half the datasheet's 1,979 TFLOPS with
    sparsity; the FP8 figure's source is apart (``fp8_source``)."""
    want = (
        "H100-SXM dense BF16, the accelerator table's (source: NVIDIA H100 Tensor Core GPU "
        "datasheet (1,979 TFLOPS with sparsity;"
    )
    assert want in _ok(done["mfu_peak"]).splitlines()[-1]
    assert want in _ok(done["rlhf_peak"])
    assert "source: FP8" not in _ok(done["mfu_peak"]) + _ok(done["rlhf_peak"])


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("pipeline", ["--stages COUNT", "--microbatches COUNT", "--backward-ratio NUMBER"]),
        ("mfu", ["--params NUMBER", "--tokens NUMBER", "--chips COUNT", "--seq-len COUNT"]),
        ("ckpt", ["--layers COUNT", "--every COUNT", "--step COUNT"]),
        ("rlhf-plan", ["--gpus COUNT", "--prompts COUNT", "--engine-memory-fraction NUMBER"]),
    ],
)
def test_number_options_are_named_as_evaluate_names_them(done, command, options) -> None:
    text = _ok(done[f"help_{command}"])
    for option in options:
        assert option in text, option


def test_the_sweep_figure_defaults_to_a_metric_the_results_have() -> None:
    """Results without a token budget have no time to train: step time, which every answered
    point has."""
    pd = pytest.importorskip("pandas")
    from trainplan.interface.sweep.charts import default_metric

    assert default_metric(
        pd.DataFrame({"time_to_train_s": [None, None], "step_s": [1.0, 2.0]})
    ) == ("step-time")
    assert default_metric(pd.DataFrame({"time_to_train_s": [None, 9.0], "step_s": [1.0, 2.0]})) == (
        "time-to-train"
    )


def test_rlhf_writes_counts_and_steps_as_evaluate_and_search_write_them(done) -> None:
    """``trainplan rlhf``'s networks table gives each network's parameters whole and grouped, as
    evaluate's first line does (``7,615,616,512 parameters``), not ``7B params``; ``rlhf-plan``
    gives each step as search does (interface.render.report.step_text): seconds to the ms,
    minutes beside them from two minutes on (GRPO of Qwen2.5 7B on 8 H100 takes longer)."""
    table = [x for x in _ok(done["rlhf_peak"]).splitlines() if "B/param" in x]
    assert [x.split("  trainable")[0].split("  frozen")[0] for x in table] == [
        "  actor      7,000,000,000 parameters",
        "  reference  7,000,000,000 parameters",
        "  reward     7,000,000,000 parameters",  # GRPO with a reward model (no --reward rule)
    ]
    lines = _ok(done["rlhf_plan"]).splitlines()
    steps = [x for x in lines if x.startswith(("best: ", "best colocated: ", "best split: "))]
    steps += [x.split(" → ")[1] for x in lines if x.startswith("step: ")]
    assert len(steps) == 4
    for line in steps:
        found = re.search(r"([\d,]+\.\d{3}) s \(([\d.]+) min\) per step", line)
        assert found, line
        seconds = float(found.group(1).replace(",", ""))
        assert seconds >= 120 and found.group(2) == f"{seconds / 60:.1f}"
