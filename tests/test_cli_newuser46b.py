"""A new user's first two hours, the second pass, each ``trainplan`` call its own process
(:mod:`tests.cli_runs`): a batch in tokens, a sequence past the trained context, MTP on a model
without it, a bare ``mfu``, a sweep's model name in capitals, calibrate's and a scenario file's
names in any case."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many

LAYOUT = "evaluate --model llama3-70b --tp 4 --pp 4 --dp 16".split()


def test_a_batch_in_tokens_and_a_batch_in_sequences_no_run_comes_near():
    """``--global-batch 4,000,000`` (meant: 4M tokens) planned 4 million sequences — 33 billion
    tokens a step — without a word. ``--global-batch-tokens`` gives the batch in tokens:
    16,777,216 = 2,048 × 8,192 (Llama 3 405B's 16M-token batch, arXiv 2407.21783 §3.4.1) plans
    what ``--global-batch 2048`` plans; 16e6 is 1,953.125 sequences, refused naming the two whole
    batches beside it (1,953 × 8,192 = 15,998,976 and 1,954 × 8,192 = 16,007,168); both flags
    at once are refused. A batch in sequences over 10^9 tokens a step is noted, text and JSON:
    4,000,000 × 8,192 = 32,768,000,000 tokens, ÷ DeepSeek-V3's 15,360 × 4,096 = 62,914,560
    (arXiv 2412.19437 §4.2) = 520.8, shown 521 ×."""
    runs = run_many(
        {
            "huge": [*LAYOUT, "--global-batch", "4,000,000"],
            "huge json": [*LAYOUT, "--global-batch", "4,000,000", "--json"],
            "tokens": [*LAYOUT, "--global-batch-tokens", "16,777,216", "--json"],
            "sequences": [*LAYOUT, "--global-batch", "2048", "--json"],
            "not whole": [*LAYOUT, "--global-batch-tokens", "16e6"],
            "both": [*LAYOUT, "--global-batch-tokens", "16777216", "--global-batch", "2048"],
        }
    )
    note = (
        "global_batch_size: 4,000,000 counts sequences: × 8,192 tokens = 32,768,000,000 tokens "
        "a step, 521 × the largest published batch (DeepSeek-V3: 15,360 × 4,096 = 62,914,560 "
        "tokens, arXiv 2412.19437 §4.2); for a batch in tokens give `global_batch_tokens`"
    )
    assert runs["huge"].returncode == 0, runs["huge"].stderr
    # the terminal writes the backticked parameter as its flag
    assert (
        f"Note: {note}\n".replace("`global_batch_tokens`", "--global-batch-tokens")
        in runs["huge"].stdout
    )
    assert note in json.loads(runs["huge json"].stdout)["notes"]
    tokens, sequences = (json.loads(runs[k].stdout) for k in ("tokens", "sequences"))
    assert tokens == sequences and tokens["layout"]["global_batch_size"] == 2048
    assert not any("counts sequences" in n for n in sequences["notes"])
    assert refusal(runs["not whole"]) == (
        "--global-batch-tokens: 16,000,000 is not a whole number of sequences of 8,192 "
        "(15,998,976 is 1,953, 16,007,168 is 1,954)"
    )
    assert refusal(runs["both"]) == (
        "--global-batch-tokens: '16777216' does not apply: give the batch in sequences "
        "(--global-batch) or in tokens, not both"
    )


def test_a_sequence_past_the_trained_context_and_mtp_on_a_model_without_it_are_noted():
    """``--seq-len 1000000`` on Gemma 3 27B (trained at 128K = 131,072 tokens: Gemma 3 report
    §2; the catalogue's ``[published] context_length``) passed without a word; it is planned
    (context is extended) and noted, 131,072 itself not. ``--mtp-layers 1`` on Llama 3 70B
    (published without MTP) is counted — Megatron-LM builds the MTP block on any GPT model
    (gpt_builders.py) — and noted with what it adds: one more Llama 3 70B layer, q 8192² + k, v
    2·8192·1024 + o 8192² = 150,994,944, SwiGLU 3·8192·28,672 = 704,643,072, two norms 16,384:
    855,654,400; and the MTP projection 2h² + its three norms 3h = 134,217,728 + 24,576
    (model/params.py mtp_extra_params): 989,896,704 parameters."""
    gemma = "evaluate --model gemma3-27b --gpus 8 --json --seq-len".split()
    runs = run_many(
        {
            "long": [*gemma, "1000000"],
            "trained": [*gemma, "131072"],
            "mtp": [*LAYOUT, "--mtp-layers", "1"],
            "none": [*LAYOUT, "--mtp-layers", "0", "--json"],
        }
    )
    long_notes = json.loads(runs["long"].stdout)["notes"]
    assert (
        "seq_len: 1,000,000 tokens is over the 131,072 gemma3-27b was trained at (planned as a "
        "context extension would run it)"
    ) in long_notes
    assert not any("trained at" in n for n in json.loads(runs["trained"].stdout)["notes"])
    assert (
        "Note: mtp_layers: 1 multi-token-prediction module added to llama3-70b, published "
        "without one: 989,896,704 parameters counted on the last pipeline stage, in its memory, "
        "FLOPs and time (DeepSeek-V3 §2.2's module; Megatron-LM's --mtp-num-layers builds it on "
        "any GPT model)\n"
    ) in runs["mtp"].stdout
    assert not any("mtp_layers" in n for n in json.loads(runs["none"].stdout)["notes"])


def test_a_bare_mfu_names_the_measurement_it_needs():
    """``trainplan mfu`` with nothing complained of ``--gpu`` first; what the command needs is a
    measurement, named first now; the peak is still asked for once one is given."""
    runs = run_many(
        {
            "bare": ["mfu"],
            "no peak": "mfu --params 70e9 --tokens 4e6 --step-seconds 7 --chips 512".split(),
        }
    )
    assert refusal(runs["bare"]) == (
        "mfu: no measurement given; give exactly one measurement: --tokens with "
        "--step-seconds, --tokens-per-second (either with --params or --model), "
        "--achieved-pflops or --achieved-tflops-per-gpu"
    )
    assert refusal(runs["no peak"]) == (
        "--gpu: missing; give --gpu (e.g. H100-SXM) or --peak-tflops (per chip)"
    )


GRID = """command = "evaluate"
[layout]
tp = 8
[sweep]
model = [{models}]
gpus = [8]
"""


def test_a_sweeps_model_in_capitals_is_the_catalogues_name(tmp_path):
    """A grid's ``"Llama3-8B"`` stayed as typed in the rows, and ``"Llama3-8B"`` with
    ``"llama3_8b"`` ran the same point twice: the name is the catalogue's where the grid is
    read, so the row says llama3-8b and the second spelling is refused as a repeat."""
    (tmp_path / "one.toml").write_text(GRID.format(models='"Llama3-8B"'))
    (tmp_path / "two.toml").write_text(GRID.format(models='"Llama3-8B", "llama3_8b"'))
    runs = run_many(
        {"one": ["sweep", "one.toml", "--point", "0"], "two": ["sweep", "two.toml"]},
        cwd=tmp_path,
    )
    assert runs["one"].returncode == 0, runs["one"].stderr
    assert "             model  llama3-8b\n" in runs["one"].stdout
    assert refusal(runs["two"]) == (
        "grid two.toml: point 1 repeats point 0 ({'model': 'llama3-8b', 'gpus': 8, "
        "'recipe': None, 'what_if': {}})"
    )


MEASURED = """gpu = "H100-SXM"
fit = [{fit}]

[[run]]
label = "70B on 256"
step_seconds = 70
model = "llama3-70b"
tp = 4
pp = 4
dp = 16
global_batch_size = 2048
seq_len = 8192
"""

SCENARIO = """model = "llama3-8b"
gpus = 8
[space]
framework = [{framework}]
recompute = [{recompute}]
"""


def test_calibrates_fit_and_a_scenario_files_choices_read_in_any_case(tmp_path):
    """``calibrate --fit GEMM_Efficiency`` was refused by click's choice, a measurements file's
    ``fit = ["GEMM_Efficiency"]`` and a scenario file's ``framework = ["Megatron"]`` as not
    one of the names, while every flag's choice is read in any case: each now gives what the
    lower-case spelling gives."""
    (tmp_path / "lower.toml").write_text(MEASURED.format(fit='"gemm_efficiency"'))
    (tmp_path / "upper.toml").write_text(MEASURED.format(fit='"GEMM_Efficiency"'))
    (tmp_path / "s.toml").write_text(SCENARIO.format(framework='"megatron"', recompute='"full"'))
    (tmp_path / "S.toml").write_text(SCENARIO.format(framework='"Megatron"', recompute='"Full"'))
    runs = run_many(
        {
            "lower": ["calibrate", "lower.toml", "--json"],
            "file": ["calibrate", "upper.toml", "--json"],
            "flag": ["calibrate", "lower.toml", "--fit", "GEMM_EFFICIENCY", "--json"],
            "scenario": ["search", "--scenario", "s.toml", "--json"],
            "capitals": ["search", "--scenario", "S.toml", "--json"],
        },
        cwd=tmp_path,
    )
    lower = json.loads(runs["lower"].stdout)
    assert lower["fitted"].keys() == {"gemm_efficiency"}
    for name in ("file", "flag"):
        assert runs[name].returncode == 0, runs[name].stderr
        assert json.loads(runs[name].stdout)["fitted"] == lower["fitted"]
    assert runs["capitals"].returncode == 0, runs["capitals"].stderr
    said, want = (json.loads(runs[k].stdout) for k in ("capitals", "scenario"))
    for answer in (said, want):
        answer.pop("timing", None)
    assert said["layout"] == want["layout"] and said["layout"]["recompute"] == "full"


def test_an_examples_batch_gives_way_to_a_batch_in_tokens():
    """``example llama3-405b --global-batch-tokens 16,777,216`` was refused as giving both
    batches (the example's own 2,048 sequences beside the user's tokens): the example's batch is a
    default, so the tokens replace it — 16,777,216 ÷ 8,192 = 2,048 sequences, the example's own
    batch, so its step time is the example's — and the headline and ``replaced`` say so."""
    runs = run_many(
        {
            "tokens": ["example", "llama3-405b", "--global-batch-tokens", "16,777,216", "--json"],
            "own": ["example", "llama3-405b", "--json"],
            "text": ["example", "llama3-405b", "--global-batch-tokens", "16,777,216"],
        }
    )
    tokens, own = (json.loads(runs[k].stdout) for k in ("tokens", "own"))
    assert tokens["replaced"] == {"global_batch_size": 2048}
    assert tokens["time"]["step_s"] == own["time"]["step_s"]
    assert "--global-batch-tokens 16,777,216 (in place of the example's global_batch_size=2048" in (
        runs["text"].stdout
    )
