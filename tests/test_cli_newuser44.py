"""A new user's first hour, each ``trainplan`` call its own process (:mod:`tests.cli_runs`):
an RLHF token cap below one sequence, a train batch that does not divide the step, what ``--dp``
defaults to, an example given a flag that does not fit it, and ``--set`` of a key that is one of
the command's flags."""

from __future__ import annotations

import json

import click

from tests.cli_runs import refusal, run_many
from trainplan.interface.cli import cli
from trainplan.interface.cli.options import command_flags
from trainplan.interface.flags import PARAMETER_FLAGS
from trainplan.interface.scenario_keys import EVALUATE_KEYS, SEARCH_KEYS, read_sets
from trainplan.model.errors import InputError

GRPO_8B = "rlhf --algorithm grpo --model llama3-8b --gpus 8".split()

CAP_LINE = (
    "--micro-batch-tokens: 4,096 must hold at least one sequence, --prompt-tokens + "
    "--completion-tokens = 1,024 + 4,096 = 5,120 tokens: verl's balanced packing asserts its "
    "token cap holds the longest sequence (rearrange_micro_batches); --packing first-fit "
    "(OpenRLHF) gives such a sequence a micro-batch of its own"
)


def test_a_token_cap_below_one_sequence_is_refused_under_verls_packing():
    """``--micro-batch-tokens 4096`` at the defaults' 1,024-token prompts and 4,096-token
    completions (one sequence: 1,024 + 4,096 = 5,120 tokens) ran silently, the micro-batch counted
    as one whole rollout (⌈4,096 / 5,120⌉ = 1). verl's ``rearrange_micro_batches``
    (``verl/utils/seqlen_balancing.py``) asserts ``max_token_len >= max_seq_len``: such a run
    stops at its first update. With lengths that vary the sequence is the prompt plus the longest
    completion: 1,024 + 8,192 = 9,216. OpenRLHF's first fit (``get_minimum_num_micro_batch_size``)
    gives an over-long sequence a bin of its own, so ``--packing first-fit`` (and the deepspeed
    profile, OpenRLHF's) keeps it; a cap of exactly one sequence is accepted."""
    runs = run_many(
        {
            "text": [*GRPO_8B, "--micro-batch-tokens", "4096"],
            "json": [*GRPO_8B, "--micro-batch-tokens", "4096", "--json"],
            "plan": ["rlhf-plan", *GRPO_8B[1:], "--micro-batch-tokens", "4,096", "--json"],
            "longest": [*GRPO_8B, "--micro-batch-tokens", "6000", "--max-completion-tokens", "8192"],
            "first-fit": [*GRPO_8B, "--micro-batch-tokens", "4096", "--packing", "first-fit", "--json"],
            "deepspeed": [*GRPO_8B, "--micro-batch-tokens", "4096", "--framework", "deepspeed", "--json"],
            "one": [*GRPO_8B, "--micro-batch-tokens", "5120", "--json"],
        }
    )  # fmt: skip
    for name in ("text", "json", "plan"):
        assert refusal(runs[name]) == CAP_LINE, name
    assert refusal(runs["longest"]) == (
        "--micro-batch-tokens: 6,000 must hold at least one sequence, --prompt-tokens + "
        "--max-completion-tokens = 1,024 + 8,192 = 9,216 tokens: verl's balanced packing asserts "
        "its token cap holds the longest sequence (rearrange_micro_batches); --packing first-fit "
        "(OpenRLHF) gives such a sequence a micro-batch of its own"
    )
    for name in ("first-fit", "deepspeed", "one"):
        done = runs[name]
        assert done.returncode == 0, (name, done.stderr[-2000:])
        assert json.loads(done.stdout)["faithful"]["sequences"] == 16_384


def test_the_default_token_cap_below_one_sequence_says_it_is_the_default_and_what_to_give():
    """``--max-completion-tokens 16384`` without ``--micro-batch-tokens``: the cap is the default,
    verl's ``ppo_max_token_len_per_gpu`` of 16,384 (``verl/trainer/config/actor/actor.yaml``),
    and one sequence is 1,024 + 16,384 = 17,408 tokens. verl itself stops at that default
    (``rearrange_micro_batches`` asserts ``max_token_len >= max_seq_len``), so refusing is right;
    the line says the value is the default, which the user never typed, and the smallest cap to
    give. In ``rlhf`` and ``rlhf-plan`` alike; a cap of 17,408 runs."""
    long = ["--max-completion-tokens", "16384"]
    runs = run_many(
        {
            "rlhf": [*GRPO_8B, *long],
            "json": [*GRPO_8B, *long, "--json"],
            "plan": ["rlhf-plan", *GRPO_8B[1:], *long, "--json"],
            "given": [*GRPO_8B, *long, "--micro-batch-tokens", "17408", "--json"],
        }
    )
    line = (
        "--micro-batch-tokens: the default 16,384 (verl's ppo_max_token_len_per_gpu) must hold at "
        "least one sequence, --prompt-tokens + --max-completion-tokens = 1,024 + 16,384 = 17,408 "
        "tokens: give --micro-batch-tokens 17,408 or more (verl's balanced packing asserts its "
        "token cap holds the longest sequence, rearrange_micro_batches), or --packing first-fit "
        "(OpenRLHF), which gives such a sequence a micro-batch of its own"
    )
    for name in ("rlhf", "json", "plan"):
        assert refusal(runs[name]) == line, name
    assert runs["given"].returncode == 0, runs["given"].stderr[-2000:]


def test_the_web_api_refuses_the_token_cap_with_the_same_line():
    """``GET /api/rlhf?…&micro-batch-tokens=4096``: HTTP 422 with the command line's sentence,
    each flag written as its query parameter."""
    import warnings

    from tests.web.conftest import need

    need("fastapi", "the web API")
    need("httpx", "the web API's test client")
    with warnings.catch_warnings():  # starlette's notice about its httpx client
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

        from trainplan.interface.web.app import create_app

        client = TestClient(create_app(("testserver",)))
        got = client.get("/api/rlhf?algorithm=grpo&model=llama3-8b&gpus=8&micro-batch-tokens=4096")
    assert got.status_code == 422
    assert got.json()["error"] == CAP_LINE.replace("--", "")


def test_a_train_batch_that_does_not_divide_names_the_rule_and_the_nearest():
    """``--train-batch 7`` said it "must divide the step's 16,384 sequences (prompts ×
    samples_per_prompt)" — Python names, no way forward. The step: 1,024 prompts × 16 = 16,384 =
    2¹⁴ sequences, whose divisors are the powers of two: PPO's nearest are 4 and 8; GRPO's must
    also be multiples of the group, 16 (none below 7). With 6 prompts × 4 =
    24 sequences under GRPO, 6 divides 24 but is no multiple of the group 4; the multiples of 4
    dividing 24 are 4, 8, 12, 24: nearest 4 and 8."""
    small = ["--prompts", "6", "--samples-per-prompt", "4", "--train-batch", "6"]
    runs = run_many(
        {
            "ppo": ["rlhf", "--algorithm", "ppo", *GRPO_8B[3:], "--train-batch", "7"],
            "ppo-json": ["rlhf", "--algorithm", "ppo", *GRPO_8B[3:], "--train-batch", "7", "--json"],
            "grpo": [*GRPO_8B, "--train-batch", "7"],
            "group": [*GRPO_8B, *small],
            "group-json": [*GRPO_8B, *small, "--json"],
        }
    )  # fmt: skip
    head = (
        "--train-batch: 7 must divide the step's 16,384 sequences (--prompts 1,024 × "
        "--samples-per-prompt 16): every update takes the same number of rollouts; the nearest "
        "that do"
    )
    assert refusal(runs["ppo"]) == refusal(runs["ppo-json"]) == head + ": 4 or 8"
    assert refusal(runs["grpo"]) == (head + " and are multiples of the group size 16 (GRPO): 16")
    assert (
        refusal(runs["group"])
        == refusal(runs["group-json"])
        == (
            "--train-batch: 6 is not a multiple of the group size 4 (--samples-per-prompt): GRPO "
            "normalises each group's rewards together, so a group cannot straddle two updates (verl "
            "counts mini-batches in whole prompts); the nearest that are and divide the step's 24 "
            "sequences: 4 or 8"
        )
    )


def test_the_dp_help_says_its_default_with_a_gpu_count_and_it_holds():
    """``--dp``'s help said "(default 1)" while ``--gpus 16 --tp 2 --pp 2`` gives dp 16 ÷ (2·2)
    = 4 (``interface.inputs._dp_from_gpus``; ep and etp subdivide dp·cp and tp)."""
    runs = run_many(
        {
            "help": ["evaluate", "--help"],
            "run": "evaluate --model llama3-8b --gpus 16 --tp 2 --pp 2 --json".split(),
        }
    )
    help_text = " ".join(runs["help"].stdout.split())
    assert (
        "--dp COUNT Data-parallel degree; default with --gpus: --gpus ÷ (tp·pp·cp), which must "
        "divide it (ep and etp are carved from dp·cp and tp: no GPUs of their own); without "
        "--gpus: 1 (an example: its own)."
    ) in help_text
    out = json.loads(runs["run"].stdout)
    assert (out["num_gpus"], out["layout"]["dp"]) == (16, 16 // (2 * 2))


def test_an_example_given_a_gpu_count_sets_dp_from_it_or_says_what_to_do():
    """``example one-gpu-70b --gpus 8`` was refused as "dp 1 × tp 1 × pp 1 × cp 1 = 1, not 8":
    the example's own dp against the count. Given --gpus without --dp, dp is now the count ÷
    (tp·pp·cp) as evaluate derives it — 8 ÷ 1 = 8, the same figures as ``--dp 8``; Llama 3 405B's
    tp 8 × pp 16 = 128 does not divide 8 and is refused naming both; --gpus with --dp keeps the
    product check. A pipeline, MFU, checkpointing or RLHF example has no GPU count: --gpus was
    refused by its Python name (``'num_gpus' is not a parameter of the pipeline tab``), now as the
    flag, with the keys ``--set`` takes and the tab's own command."""
    runs = run_many(
        {
            "gpus": "example one-gpu-70b --gpus 8 --json".split(),
            "dp": "example one-gpu-70b --dp 8 --json".split(),
            "text": "example one-gpu-70b --gpus 8".split(),
            "405b": "example llama3-405b --gpus 8".split(),
            "both": "example one-gpu-70b --gpus 8 --dp 4".split(),
            "pipeline": "example 1f1b-4x8 --gpus 8".split(),
            "ckpt": "example ckpt-9-every-3 --tp 2 --json".split(),
        }
    )
    by_gpus, by_dp = json.loads(runs["gpus"].stdout), json.loads(runs["dp"].stdout)
    assert (by_gpus["num_gpus"], by_gpus["layout"]["dp"]) == (8, 8)
    assert by_gpus["memory"] == by_dp["memory"]
    assert "layout: dp 8 × tp 1 × pp 1 × cp 1" in runs["text"].stdout
    assert refusal(runs["405b"]) == (
        "--gpus: 8 is not divisible by tp·pp·cp = 128; give --dp, or a GPU count that tp·pp·cp "
        "divides"
    )
    assert refusal(runs["both"]) == "--gpus: dp 4 × tp 1 × pp 1 × cp 1 = 4, not 8"
    assert refusal(runs["pipeline"]) == (
        "--gpus: does not apply to example 1f1b-4x8 (the pipeline tab); set its parameters with "
        "--set KEY=VALUE (backward_ratio, framework, microbatches, schedule, stages, t_b, t_f, "
        "t_fb, t_w, virtual_stages), or run trainplan pipeline (trainplan pipeline --help)"
    )
    assert refusal(runs["ckpt"]).startswith(
        "--tp: does not apply to example ckpt-9-every-3 (the ckpt tab); set its parameters with "
        "--set KEY=VALUE (backward_ratio, every, labels, layers, step)"
    )


def test_a_set_key_that_is_a_flag_of_the_command_names_the_flag():
    """The five layout fields refused with their flag were a list typed beside the flags; any
    option of the command given as ``--set`` is now answered with its flag, read off the
    command's own options: ``num_gpus`` (``--gpus``), ``seq_len`` (evaluate's ``--seq-len``),
    frontier's ``micro_batch_size`` (``--micro-batch``)."""
    runs = run_many(
        {
            "gpus": "evaluate --model llama3-8b --set num_gpus=8".split(),
            "seq": "evaluate --model llama3-8b --gpus 8 --set seq_len=4096".split(),
            "micro": "frontier --model llama3-8b --gpus 8 --set micro_batch_size=2".split(),
            "zero": "search --model llama3-8b --gpus 8 --set zero_stage=1".split(),
        }
    )
    assert refusal(runs["gpus"]) == (
        "--set: 'num_gpus' is not a scenario key evaluate takes; give it as --gpus (trainplan "
        "evaluate --set help lists them)"
    )
    assert "; give it as --seq-len (" in refusal(runs["seq"])
    assert "frontier takes; give it as --micro-batch (" in refusal(runs["micro"])
    assert "search takes; give it as --zero (" in refusal(runs["zero"])


def test_every_option_of_a_set_command_given_as_set_names_its_flag():
    """For every command with ``--set`` (evaluate, search, frontier), each of its options given
    as ``--set NAME=1`` — by its parameter's name, or by the cost model's name of what the flag
    gives (:data:`interface.flags.PARAMETER_FLAGS`) — is either a scenario key the command takes
    or refused naming that option's flag."""
    ctx = click.Context(cli)
    for name, keys in (
        ("evaluate", EVALUATE_KEYS),
        ("search", SEARCH_KEYS),
        ("frontier", SEARCH_KEYS),
    ):
        command = cli.get_command(ctx, name)
        assert command is not None
        flags = command_flags(command)
        assert "set" not in flags and flags["as_json"] == "--json"
        named = {**flags, **{k: v[0] for k, v in PARAMETER_FLAGS.items() if v[0] in flags.values()}}
        for key, flag in named.items():
            if key in keys:
                continue
            try:
                read_sets([f"{key}=1"], keys, name, flags)
            except InputError as err:
                assert f"; give it as {flag} (" in str(err), (name, key, str(err))
            else:
                raise AssertionError((name, key))
