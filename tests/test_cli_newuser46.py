"""A new user's first two hours, each ``trainplan`` call its own process (:mod:`tests.cli_runs`):
a model size typed without its unit."""

from __future__ import annotations

from tests.cli_runs import refusal, run_many, trainplan

FLOOR = (
    "below the floor of 1,000,000 (a model size counts parameters: write 70B or 70e9 for 70 "
    "billion; the smallest published language models have ~10^8, GPT-2 small 124M (Radford et al. "
    "2019))"
)


def test_a_model_size_without_its_unit_is_refused():
    """``--params 70`` (meant: 70B) was read as a 70-parameter model and planned: evaluate printed
    "7e-08B: 70 parameters" with 0.00 GB of model state, ``rlhf --policy-params 70`` 0.000 TB,
    ``mfu --params 70`` an MFU of 0.0 % — every figure absurd and exit 0. A size below 10^6
    parameters (model/limits.py FLOORS, far below GPT-2 small's 124M: Radford et al. 2019) is
    refused, naming the parameter, the value and the rule; 10^6 itself is still planned."""
    runs = run_many(
        {
            "evaluate": ["evaluate", "--params", "70", "--gpus", "64"],
            "grouped": ["evaluate", "--params", "999,999", "--gpus", "8"],
            "rlhf": ["rlhf", "--algorithm", "ppo", "--policy-params", "70"],
            "reward": [
                "rlhf",
                "--algorithm",
                "ppo",
                "--policy-params",
                "7B",
                "--reward-params",
                "7",
            ],
            "mfu": "mfu --params 70 --tokens 4e6 --step-seconds 7 --chips 512 --gpu H100-SXM".split(),
            "floor": ["evaluate", "--params", "1e6", "--gpus", "8"],
        }
    )
    assert refusal(runs["evaluate"]) == f"--params: 70 parameters is {FLOOR}"
    assert refusal(runs["grouped"]) == f"--params: 999,999 parameters is {FLOOR}"
    assert refusal(runs["rlhf"]) == f"--policy-params: 70 parameters is {FLOOR}"
    assert refusal(runs["reward"]) == f"--reward-params: 7 parameters is {FLOOR}"
    assert refusal(runs["mfu"]) == f"--params: 70 parameters is {FLOOR}"
    assert runs["floor"].returncode == 0, runs["floor"].stderr
    assert "1,000,000 parameters (1,000,000 active) on 8 × H100-SXM" in runs["floor"].stdout


RUN = """gpu = "H100-SXM"

[[run]]
label = "70B on 256"
step_seconds = {step}
model = "llama3-70b"
tp = {tp}
pp = 4
dp = 16
global_batch_size = {batch}
seq_len = 8192
schedule = "interleaved"
virtual_stages = 8
"""


def test_a_measured_runs_impossible_layout_names_the_file_and_the_run(tmp_path):
    """A measurements file whose run has tp 3 (64 heads) or a batch of 2,000 (125 micro-batches
    of 16 ranks, not a multiple of pp 4 under interleaving: Megatron-LM
    megatron/training/arguments.py validate_args) was refused with evaluate's bare line
    ("tp: 3 does not divide num_attention_heads = 64"), not saying which file or run, as every
    other refusal of the file does. And ``step_seconds = "4,000,000"`` (a number written as text,
    one number as every input reads it) was refused as not positive; it is now read, as is
    ``"70 s"`` (a time's unit on ``step_seconds``, docs/guides/cli.md "Numbers"), and
    ``"seventy"`` is refused as not a number."""
    files = {
        "tp3": RUN.format(step=70, tp=3, batch=2048),
        "batch": RUN.format(step=70, tp=4, batch=2000),
        "text": RUN.format(step='"70"', tp=4, batch=2048),
        "units": RUN.format(step='"70 s"', tp=4, batch=2048),
        "words": RUN.format(step='"seventy"', tp=4, batch=2048),
        "number": RUN.format(step=70, tp=4, batch=2048),
    }
    for name, text in files.items():
        (tmp_path / f"{name}.toml").write_text(text)
    runs = run_many({k: ["calibrate", f"{k}.toml", "--json"] for k in files}, cwd=tmp_path)
    where = "measurements {}.toml: run 1 ('70B on 256'): "
    assert refusal(runs["tp3"]) == where.format("tp3") + (
        "tp: 3 does not divide num_attention_heads = 64"
    )
    assert refusal(runs["batch"]) == where.format("batch") + (
        "num_microbatches: 125 must be a multiple of --pp = 4 for the interleaved schedule"
    )
    assert refusal(runs["words"]) == (
        "measurements words.toml: run 1: step_seconds: 'seventy' is not a number (write e.g. "
        "0.5, 4e6, 4000000 or 4,000,000)"
    )
    for k in ("text", "units"):
        assert runs[k].returncode == 0, runs[k].stderr
        assert runs[k].stdout == runs["number"].stdout


def test_a_catalogue_model_typed_in_another_case_is_the_catalogues(tmp_path):
    """``--model Llama3-70B`` was "unknown model 'Llama3-70B'; did you mean llama3-70b", while
    ``--gpu h100_sxm`` is the H100-SXM: a catalogue name is now read in any case and with other
    separators (``llama-3_70B``), as an accelerator's is, and plans the catalogue's model (the
    same figures as its own spelling), in a sweep's grid too. A name no catalogue model has so
    read is still refused with the closest names."""
    (tmp_path / "grid.toml").write_text(
        'command = "evaluate"\n[layout]\ntp = 8\n[sweep]\nmodel = ["Llama3-8B"]\ngpus = [8]\n'
    )
    runs = run_many(
        {
            "typed": "evaluate --model Llama3-70B --tp 4 --pp 4 --dp 16 --json".split(),
            "catalogue": "evaluate --model llama3-70b --tp 4 --pp 4 --dp 16 --json".split(),
            "separators": "evaluate --model llama-3_70B --tp 4 --pp 4 --dp 16 --json".split(),
            "mfu": "mfu --model DeepSeek-V3 --tokens-per-second 1e6 --chips 1024 --gpu H100-SXM".split(),
            "unknown": "evaluate --model Llama3-70 --tp 4".split(),
            "sweep": ["sweep", "grid.toml", "--point", "0"],
        },
        cwd=tmp_path,
    )
    assert runs["typed"].returncode == 0, runs["typed"].stderr
    assert runs["typed"].stdout == runs["catalogue"].stdout == runs["separators"].stdout
    assert runs["mfu"].stdout.startswith("model deepseek-v3: N = ")
    assert runs["sweep"].returncode == 0, runs["sweep"].stderr  # a grid's name likewise
    assert "num_params  8030261248" in runs["sweep"].stdout  # Llama 3 8B's
    assert refusal(runs["unknown"]).startswith(
        "--model: unknown model 'Llama3-70'; did you mean llama3-70b"
    )


def test_a_rollout_that_fits_no_gpu_says_what_the_widest_engine_holds():
    """``rlhf-plan`` for a model whose rollout engine fits no GPU (DeepSeek-V3 on 1,024 H100s,
    Llama 3 405B on 16) said only "rollout: no pool size and parallelism fits a GPU's 83.21 GB on
    its own", not why: the search offers an engine replica tp up to the NVLink domain and pp 1
    (optimizer/rlhf/tables.py ``rollout_options``), so each GPU holds at least an eighth of the
    weights. Llama 3 405B at tp 8: 2 B × 405,853,388,800 / 8 = 101,463,347,200 B, plus the norms
    whole on every rank ((2 × 126 + 1) × 16,384 = 4,145,152 elements, 7/8 of them × 2 B =
    7,254,016 B more): 101,470,601,216 B = 101.47 GB, above the 83.21 GB usable."""
    done = trainplan("rlhf-plan", "--algorithm", "grpo", "--model", "llama3-405b", "--gpus", "16")
    assert (done.returncode, done.stdout) == (1, "")  # no placement: exit 1, the reasons on stderr
    assert done.stderr.splitlines()[:2] == [
        "No placement fits:",
        "  - rollout: no pool size and parallelism fits a GPU's 83.21 GB on its own (an engine "
        "replica is searched at tp up to 8, the NVLink domain of 8 GPUs, pp 1 and no expert parallelism; "
        "at tp 8 the policy's BF16 weights alone are 101.47 GB a GPU)",
    ]


def test_a_training_role_that_fits_no_gpu_at_zero_1_names_zero_3():
    """``rlhf-plan --framework deepspeed`` for PPO on Llama 3 70B (256 GPUs) answered "No placement
    fits" with "actor: no pool size and parallelism fits a GPU's 83.21 GB on its own" for every
    role, not saying that the ZeRO stage, which the search does not vary, was the cause: at
    deepspeed's ZeRO-1 each GPU holds the 70B role's BF16 weights whole (141 GB; tp 1, pp 1),
    while ``--zero 3`` shards them over the 256 GPUs and the same workload fits."""
    runs = run_many(
        {
            k: [
                "rlhf-plan",
                "--algorithm",
                "ppo",
                "--model",
                "llama3-70b",
                "--gpus",
                "256",
                "--framework",
                "deepspeed",
                *extra,
            ]
            for k, extra in {"default": [], "zero 3": ["--zero", "3"]}.items()
        }
    )
    assert runs["default"].returncode == 1, runs["default"].stderr
    reasons = runs["default"].stderr.splitlines()
    assert reasons[0] == "No placement fits:"
    assert reasons[1:] == [
        f"  - {role}: no pool size and parallelism fits a GPU's 83.21 GB on its own at ZeRO-1, "
        "where each GPU holds its tp·pp share of the role's weights whole (--zero 3 shards them "
        f"over dp too, and then it fits on a pool of {n} GPUs or more)"
        for role, n in (("actor", 8), ("critic", 8), ("reference", 4), ("reward", 2))
    ]  # each role's pools at ZeRO-3 (tests/optimizer/test_rlhf_explain.py)
    assert runs["zero 3"].returncode == 0, runs["zero 3"].stderr
    assert "placement: colocated, synchronous — fits" in runs["zero 3"].stdout


def test_a_flag_with_one_dash_or_in_capitals_names_its_spelling():
    """``evaluate -tp 4`` (one dash, as some launchers spell flags) was "No such option '-t'"
    (click reads ``-tp`` as ``-t`` and ``-p``), ``--TP 4`` "No such option '--TP'"; ``sweep
    -out x.parquet`` likewise. Each now names the flag as typed and this command's spelling, with
    the value; a short option (``-p``) and a negative number as a value are left to click and
    the value's own rule."""
    runs = run_many(
        {
            "one dash": "evaluate --model llama3-70b --gpus 256 -tp 4".split(),
            "capitals": "evaluate --model llama3-70b --gpus 256 --TP=4".split(),
            "sweep": "sweep -out x.parquet grid.toml".split(),
            "short": "evaluate --model llama3-70b --gpus 256 -p 4".split(),
            "negative": "evaluate --model llama3-70b --gpus 256 --tp -4".split(),
        }
    )
    assert refusal(runs["one dash"]) == (
        "-tp: no such option of trainplan evaluate; write it --tp: --tp 4"
    )
    assert refusal(runs["capitals"]) == (
        "--TP: no such option of trainplan evaluate; write it --tp: --tp 4"
    )
    assert refusal(runs["sweep"]) == (
        "-out: no such option of trainplan sweep; write it --out: --out x.parquet"
    )
    assert refusal(runs["short"]) == "No such option '-p'."
    assert refusal(runs["negative"]) == "--tp: '-4' must be at least 1"


def test_a_named_choice_typed_in_capitals_is_the_choice():
    """``evaluate --framework Megatron`` was "'Megatron' is not one of 'megatron', …" (and
    ``--recompute Full``, ``--precision BF16``), while ``rlhf --framework Megatron
    --algorithm GRPO`` was read: every command's named choices are now read in any case, as
    the accelerator and model names are, and give the same plan as the choice's own spelling;
    a misspelt choice is still refused with the choices."""
    flags = "evaluate --model llama3-70b --gpus 256 --tp 4 --pp 4 --virtual-stages 2 --json"
    runs = run_many(
        {
            "capitals": [
                *flags.split(),
                *"--framework Megatron --recompute Full --precision BF16".split(),
                *"--schedule Interleaved".split(),
            ],
            "own": [
                *flags.split(),
                *"--framework megatron --recompute full --precision bf16".split(),
                *"--schedule interleaved".split(),
            ],
            "misspelt": "evaluate --model llama3-70b --framework Megatronn".split(),
        }
    )
    assert runs["capitals"].returncode == 0, runs["capitals"].stderr
    assert runs["capitals"].stdout == runs["own"].stdout
    assert refusal(runs["misspelt"]) == (
        "--framework: 'Megatronn' is not one of 'megatron', 'deepspeed', 'fsdp2', 'textbook'."
    )
