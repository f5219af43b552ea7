"""A new user's first hour, each ``trainplan`` call its own process (:mod:`tests.cli_runs`):
another command's spelling of a flag, a flag of another command, ``--gpus`` on an RLHF example
and on an MFU example, the cost objective without a price, and a GPU count given to the RLHF textbook accounting."""

from __future__ import annotations

import json
import shlex
from fractions import Fraction

from tests.cli_runs import refusal, run_many


def test_another_commands_spelling_of_a_flag_names_this_commands():
    """``trainplan pipeline --pp 8`` (evaluate's spelling of the stages) said "No such option
    '--pp'. (Did you mean one of: '--help', '--png'?)"; ``evaluate --stages 4`` suggested
    ``--per-stage``. The web API already answers ``'pp': … write it stages``. A micro-batch count
    given to evaluate (``--microbatches 16``) was answered "Did you mean '--micro-batch'?" — the
    size of one micro-batch, another figure: evaluate derives the count from the batch
    (Megatron-LM megatron/core/num_microbatches_calculator.py: global batch ÷ (micro batch × dp))."""
    runs = run_many(
        {
            "pp": "pipeline --pp 8 -m 8".split(),
            "pp=": "pipeline --pp=8 -m 8".split(),
            "stages": "evaluate --model llama3-8b --stages 4".split(),
            "m": "pipeline -p 4 --micro-batches 8".split(),
            "num": "pipeline -p 4 --num-microbatches 8".split(),
            "evaluate m": "evaluate --model llama3-8b --microbatches 16".split(),
            "search m": "search --model llama3-8b --gpus 8 --micro-batches 16".split(),
            "frontier pp": "frontier --model llama3-8b --gpus 8 --pp 9".split(),
        }
    )
    assert refusal(runs["pp"]) == (
        "--pp: no such option of trainplan pipeline; write it --stages (-p): --stages 8"
    )
    assert refusal(runs["pp="]) == refusal(runs["pp"])
    assert refusal(runs["stages"]) == (
        "--stages: no such option of trainplan evaluate; write it --pp: --pp 4"
    )
    assert refusal(runs["m"]) == (
        "--micro-batches: no such option of trainplan pipeline; write it --microbatches (-m): "
        "--microbatches 8"
    )
    assert refusal(runs["num"]).startswith(
        "--num-microbatches: no such option of trainplan pipeline"
    )
    derived = (
        "no such option of trainplan {}, which derives the micro-batch count m from the batch: "
        "m = --global-batch ÷ (--micro-batch × dp), --micro-batch being the sequences of one "
        "micro-batch"
    )
    assert refusal(runs["evaluate m"]) == "--microbatches: " + derived.format("evaluate")
    assert refusal(runs["search m"]) == "--micro-batches: " + derived.format("search")
    # a command that takes the flag is not touched: frontier's --pp is its own (9 ∤ 8 GPUs)
    assert "no such option" not in runs["frontier pp"].stderr


def test_gpus_on_an_rlhf_example_is_its_chip_count():
    """``trainplan example ppo-70b --gpus 64`` was refused ("--gpus: does not apply to example
    ppo-70b (the rlhf tab); set its parameters with --set KEY=VALUE (…, gpus, …)") and
    ``--set gpus=64`` then refused as the faithful accounting's; ``--gpu B200`` was honoured. The
    GPU count of this tab is ``chips``.

    Hand derivation: the rollout of PPO 70B: 2 · 70e9 FLOPs a token × 16,384 sequences × 5,120
    tokens = 1.1744e19 FLOPs at the decode MFU 0.04 of 989.4 TFLOP/s on 64 chips = 4,636.7 s
    (on 1 chip: 296,746.8 s)."""
    runs = run_many(
        {
            "ppo": "example ppo-70b --gpus 64 --json".split(),
            "pipeline": "example 1f1b-4x8 --gpus 8".split(),
            "zero": "example ppo-70b --gpus 0".split(),
        }
    )
    ppo = json.loads(runs["ppo"].stdout)
    rollout = 2 * 70 * 10**9 * 16384 * 5120
    assert ppo["chips"] == 64 and ppo["phase_flops"]["rollout"] == rollout
    seconds = Fraction(rollout) / (Fraction(4, 100) * Fraction(9894, 10) * 10**12 * 64)
    assert abs(ppo["phase_seconds"]["rollout"] - float(seconds)) < 1e-6
    assert round(float(seconds), 1) == 4636.7
    # the pipeline tab has no GPU count: still refused, naming its parameters
    assert refusal(runs["pipeline"]).startswith(
        "--gpus: does not apply to example 1f1b-4x8 (the pipeline tab)"
    )
    assert refusal(runs["zero"]) == "--gpus: '0' must be at least 1"


MFU_LINES = {
    "mfu-70b-512": "trainplan mfu --params 70e9 --tokens 4e6 --step-seconds 7 --peak-tflops 989 "
    "--chips 512",
    "palm-540b": "trainplan mfu --params 540.35e9 --tokens-per-second 238.3e3 --gpu TPUv4 "
    "--chips 6144 --attention --layers 118 --heads 48 --head-dim 256 --seq-len 2048 "
    "--recomputed-flops-pct 25",
    "megatron-502pf": "trainplan mfu --model megatron-1t --tokens 6291456 --step-seconds 102.37 "
    "--gpu A100-80GB --chips 3072 --recompute full --attention --non-causal",
}
"""The ``trainplan mfu`` line each MFU example's refusal of a chip count alone gives: the
example's own values (scenarios/examples.toml), as the command line takes them."""


def test_a_chip_count_alone_on_an_mfu_example_is_refused_with_the_mfu_line():
    """An MFU example is one measured run's step (or rate) on its own chips: ``example
    mfu-70b-512 --gpus 1024`` printed 6 · 70e9 · 4e6 ÷ (989e12 · 1024 · 7 s) = 23.7 %, the
    512-GPU step over 1,024 chips, no run's MFU; ``palm-540b --gpus 1024`` and ``mfu-70b-512
    --gpus 8`` were refused as above 100 % blaming ``--tokens-per-second``, ``--step-seconds``
    or ``--chips``, flags the user never typed. Now a chip count alone (``--gpus`` or ``--set
    chips``) is refused in one line naming the option, why, and the ``trainplan mfu`` line with
    the example's values to edit; that line, run as printed, gives the example's figure (47.4 %,
    46.2 %, 39.3 %). With a new step time too the chip count applies: 6 · 70e9 · 4e6 ÷ (989e12
    · 1024 · 3.5 s) = 47.4 %, the same FLOPs a second over twice the chips."""
    calls = {f"{n} gpus": ["example", n, "--gpus", "1024"] for n in MFU_LINES}
    calls["set chips"] = "example mfu-70b-512 --set chips=8".split()
    calls["with step"] = "example mfu-70b-512 --gpus 1,024 --set step_seconds=3.5 --json".split()
    calls |= {f"{n} line": [*shlex.split(line)[1:], "--json"] for n, line in MFU_LINES.items()}
    runs = run_many(calls)
    why = {
        "mfu-70b-512": ("--step-seconds 7 on 512 chips", "--step-seconds"),
        "palm-540b": ("--tokens-per-second 238.3e3 on 6,144 chips", "--tokens-per-second"),
        "megatron-502pf": ("--step-seconds 102.37 on 3,072 chips", "--step-seconds"),
    }
    for name, line in MFU_LINES.items():
        measured, flag = why[name]
        assert refusal(runs[f"{name} gpus"]) == (
            f"--gpus: example {name}'s MFU is one measured run's ({measured}); another chip "
            f"count runs a step of its own, not that one. Give your run's --chips and {flag}: "
            f"{line}"
        )
    assert refusal(runs["set chips"]).startswith(
        "--set chips: example mfu-70b-512's MFU is one measured run's (--step-seconds 7 on 512 "
    )
    figures = {n: json.loads(runs[f"{n} line"].stdout)["mfu"] for n in MFU_LINES}
    assert f"{figures['mfu-70b-512']:.1%}" == "47.4%"  # 6·70e9·4e6 ÷ (989e12·512·7)
    assert f"{figures['palm-540b']:.1%}" == "46.2%"  # PaLM Table 3
    assert f"{figures['megatron-502pf']:.1%}" == "39.3%"  # scenarios/examples.toml's 0.392985
    mfu = json.loads(runs["with step"].stdout)
    assert (mfu["chips"], mfu["changed"]) == (1024, {"step_seconds": "3.5", "chips": 1024})
    expected = Fraction(6 * 70 * 10**9 * 4 * 10**6) / (989 * 10**12 * 1024 * Fraction(7, 2))
    assert abs(mfu["mfu"] - float(expected)) < 1e-12 and f"{float(expected):.1%}" == "47.4%"


def test_the_cost_objective_without_a_price_names_the_flag_and_the_accelerator():
    """``search --objective cost`` without a price said ``objective cost: give --gpu-hour-price
    for every accelerator`` — the one refusal whose head was not the flag typed, and without the
    accelerator lacking a price (the frontier's ``--against price`` names it)."""
    runs = run_many(
        {
            "none": "search --model llama3-8b --gpus 8 --objective cost --tokens 1e9".split(),
            "one": (
                "search --model llama3-8b --gpus 8 --gpu H100-SXM,B200 --objective cost "
                "--tokens 1e9 --gpu-hour-price B200=5"
            ).split(),
        }
    )
    assert refusal(runs["none"]) == (
        "--objective: 'cost' needs --gpu-hour-price for every accelerator; none given for "
        "H100-SXM (e.g. --gpu-hour-price H100-SXM=2.5)"
    )
    assert refusal(runs["one"]).endswith(
        "none given for H100-SXM (e.g. --gpu-hour-price H100-SXM=2.5)"
    )


def test_a_gpu_count_in_the_rlhf_textbook_accounting_names_chips():
    """``rlhf --algorithm ppo --policy-params 7B --gpus 8`` said only that ``--gpus`` belongs to
    the faithful accounting (add ``--model``); the textbook accounting's count is ``--chips``."""
    done = run_many({"gpus": "rlhf --algorithm ppo --policy-params 7B --gpus 8".split()})["gpus"]
    assert refusal(done) == (
        "--gpus: '8' does not apply: it belongs to the faithful accounting; add --model NAME "
        "(this accounting's GPU count is --chips)"
    )


EXAMPLE_KEYS = ("example", "says", "source", "changed", "replaced")
"""What ``trainplan example NAME --json`` adds to its tab's command's JSON."""

WITH_MODEL = "with --model the sizes, dimensions, GPUs and engine come from the model and placement"
"""The faithful RLHF accounting's refusal of a textbook-only size (interface.rlhf.report)."""


FSDP2_ZERO3 = "--framework fsdp2 --zero 3"


def test_an_rlhf_examples_own_values_give_way_to_the_users():
    """``trainplan example ppo-70b --model qwen2.5-7b`` was refused ("policy_params:
    70,000,000,000 does not apply: with --model …"): the example's own 70B size, not the user's
    input, conflicted with the model; ``grpo-70b --set reward=rule`` and ``ppo-70b --set
    algorithm=dpo`` were refused for the example's own reward_params. An example's values are
    defaults: the user's replace them, and the run is exactly the tab's command with the
    example's remaining values and the user's (the same JSON, less the example's keys). A value
    the USER gave that conflicts is still refused, named as typed."""
    grpo_rule = "--algorithm grpo --reward rule --epochs 1 --decode-mfu 0.04 --train-mfu 0.4"
    runs = run_many(
        {
            "ppo model": "example ppo-70b --model qwen2.5-7b --json".split(),
            "ppo model cmd": "rlhf --algorithm ppo --model qwen2.5-7b --json".split(),
            "grpo model": "example grpo-70b --model qwen2.5-7b".split(),
            "rule model": "example grpo-rule-70b --model qwen2.5-7b --gpus 16 --json".split(),
            "rule model cmd": f"rlhf {grpo_rule} --model qwen2.5-7b --gpus 16 --json".split(),
            "rule": "example grpo-70b --set reward=rule --json".split(),
            "rule cmd": "rlhf --algorithm grpo --reward rule --policy-params 70e9 --json".split(),
            "dpo": "example ppo-70b --set algorithm=dpo --json".split(),
            "dpo cmd": "rlhf --algorithm dpo --policy-params 70e9 --json".split(),
            "user size": "example ppo-70b --model qwen2.5-7b --set policy_params=7e9".split(),
            "user reward": "example grpo-70b --set reward=rule --set reward_params=7e9".split(),
            "dpo model": "example dpo-70b --model qwen2.5-7b".split(),
            # evaluate's --zero (zero_stage) is the RLHF command's --zero (zero): it was refused
            # as "does not apply to example ppo-70b (the rlhf tab)"
            "zero": f"example ppo-70b --model qwen2.5-7b {FSDP2_ZERO3} --json".split(),
            "zero cmd": f"rlhf --algorithm ppo --model qwen2.5-7b {FSDP2_ZERO3} --json".split(),
        }
    )
    for name in ("ppo model", "rule model", "rule", "dpo", "zero"):
        ex, cmd = json.loads(runs[name].stdout), json.loads(runs[f"{name} cmd"].stdout)
        assert {k: v for k, v in ex.items() if k not in EXAMPLE_KEYS} == cmd, name
    # the faithful accounting of qwen2.5-7b (7,615,616,512 parameters) in four PPO roles
    ppo = json.loads(runs["ppo model"].stdout)
    assert ppo["changed"] == {"model": "qwen2.5-7b"} and ppo["accounting"] == "faithful"
    # the critic and the reward model end in a value head (model.value_head, verl's
    # LinearForLastLayer with its bias): 7,615,616,512 − 152,064 × 3,584 + 3,584 + 1
    value = 7_615_616_512 - 152_064 * 3_584 + 3_584 + 1
    assert value == 7_070_622_721
    got = [r["params"] for r in ppo["network_table"]]
    assert got == [7_615_616_512, value, 7_615_616_512, value]
    assert runs["grpo model"].stdout.startswith(
        "Example grpo-70b with --model qwen2.5-7b (in place of the example's policy_params=70e9, "
        "reward_params=70e9; the figures below are for these; as published: GRPO: 3 networks "
        "instead of 4"
    )
    # a rule-based reward: actor and reference, no reward network: 70e9 × (16 + 2) = 1.26 TB
    rule = json.loads(runs["rule"].stdout)
    assert rule["networks"] == 2 and rule["resident_bytes"] == 70 * 10**9 * 18
    assert refusal(runs["user size"]) == f"--set policy_params: '7e9' does not apply: {WITH_MODEL}"
    assert refusal(runs["user reward"]) == (
        "--set reward_params: '7e9' does not apply: GRPO with a rule-based reward has no reward "
        "model and no critic"
    )
    # DPO places no roles, so a model does not apply to its example: the user's --model named
    # (it names how the example takes the policy's size: --set policy_params, not rlhf's flag)
    assert refusal(runs["dpo model"]) == (
        "--model: 'qwen2.5-7b' does not apply to example dpo-70b: algorithm: 'dpo' is not one of "
        "ppo, grpo (DPO has no rollout to place: its textbook accounting takes the policy's "
        "size: trainplan example dpo-70b --set policy_params=SIZE (e.g. 70B))"
    )


def test_an_examples_headline_names_the_options_as_typed():
    """``trainplan example ppo-70b --gpus 8`` headed its figures "with chips = 8" (the tab's
    parameter) and ``fsdp-70b-64 --gpus 128`` "with num_gpus = 128" (evaluate's): names the user
    never typed. The headline repeats the options as click read them, in order, each in its long
    name (``--gpus=8,192`` as ``--gpus 8,192``), and the example's values they replaced."""
    runs = run_many(
        {
            "ppo": "example ppo-70b --gpus 8".split(),
            "fsdp": "example fsdp-70b-64 --gpus=8,192 --json".split(),
            "fsdp text": "example fsdp-70b-64 --gpus=8,192 --no-flash".split(),
            "pipeline": "example 1f1b-4x8 --set=microbatches=16".split(),
        }
    )
    tail = " (the figures below are for these; as published: "
    assert runs["ppo"].stdout.startswith(f"Example ppo-70b with --gpus 8{tail}PPO: four")
    assert runs["fsdp text"].stdout.startswith(
        "Example fsdp-70b-64 with --gpus 8,192, --no-flash (in place of the example's dp=64; "
        "the figures below are for these; as published: "
    )
    assert runs["pipeline"].stdout.startswith(f"Example 1f1b-4x8 with --set microbatches=16{tail}")
    # the JSON names them by parameter, as it names every value
    assert json.loads(runs["fsdp"].stdout)["changed"]["num_gpus"] == 8192


def test_the_examples_list_drops_nothing_typed():
    """``trainplan example --gpus 8`` (no NAME) and ``example --list ppo-70b`` printed the list,
    the option and the name dropped without a word; ``example ppo-70b --per-stage`` printed the
    RLHF example, the planner's option ignored. Each is one line naming what was typed."""
    runs = run_many(
        {
            "no name": "example --gpus 8".split(),
            "set no name": "example --set microbatches=16 --json".split(),
            "list name": "example --list ppo-70b".split(),
            "list option": "example --list --per-stage".split(),
            "per-stage": "example ppo-70b --per-stage".split(),
            "list": "example --list --json".split(),
        }
    )
    assert refusal(runs["no name"]) == (
        "NAME: required with --gpus 8 (the example it changes): trainplan example NAME --gpus 8; "
        "trainplan example --list lists them"
    )
    assert refusal(runs["set no name"]).startswith("NAME: required with --set microbatches=16 ")
    assert refusal(runs["list name"]) == (
        "--list: lists every example, so it takes no NAME ('ppo-70b'); run that one with "
        "trainplan example ppo-70b"
    )
    assert refusal(runs["list option"]).startswith("--per-stage: does not apply to --list ")
    assert refusal(runs["per-stage"]).startswith(
        "--per-stage: does not apply to example ppo-70b (the rlhf tab); set its parameters with "
        "--set KEY=VALUE ("
    )
    assert len(json.loads(runs["list"].stdout)) == 20


def test_the_textbook_engine_and_logits_options_name_what_they_need_as_typed():
    """``trainplan rlhf … --rollout-engine --layers 32`` said "the KV cache needs kv_heads,
    head_dim" and ``--logits-buffer`` "needs vocab_size": Python names where the user types
    ``--kv-heads``; the web, ``kv-heads``."""
    base = "rlhf --algorithm ppo --policy-params 7e9"
    runs = run_many(
        {
            "engine": f"{base} --rollout-engine --layers 32 --json".split(),
            "logits": f"{base} --logits-buffer".split(),
        }
    )
    assert refusal(runs["engine"]) == "--rollout-engine: the KV cache needs --kv-heads, --head-dim"
    assert refusal(runs["logits"]) == "--logits-buffer: needs --vocab-size"

    import warnings

    from tests.web.conftest import need

    need("fastapi", "the web API")
    need("httpx", "the web API's test client")
    with warnings.catch_warnings():  # starlette's notice about its httpx client
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

        from trainplan.interface.web.app import create_app

        client = TestClient(create_app(("testserver",)))
        query = "/api/rlhf?algorithm=ppo&policy-params=7e9&rollout-engine=true&layers=32"
        engine = client.get(query)
        logits = client.get("/api/rlhf?algorithm=ppo&policy-params=7e9&logits-buffer=true")
    assert engine.status_code == 422 and logits.status_code == 422
    assert engine.json() == {"error": "rollout-engine: the KV cache needs kv-heads, head-dim"}
    assert logits.json() == {"error": "logits-buffer: needs vocab-size"}


def test_a_critic_model_where_the_step_has_no_critic_is_refused():
    """``--critic-model llama3-8b`` with GRPO and a rule-based reward (DeepSeek-R1's: no reward
    model, no critic, model.rlhf.phases.step_roles) was dropped without a word by ``rlhf`` and
    ``rlhf-plan``: the figures were those of actor and reference alone. Refused as the
    textbook accounting refuses ``--reward-params`` there; PPO with a rule keeps its critic."""
    faithful = "--model qwen2.5-7b --gpus 8 --critic-model llama3-8b"
    runs = run_many(
        {
            "rlhf": f"rlhf --algorithm grpo --reward rule {faithful} --json".split(),
            "plan": f"rlhf-plan --algorithm grpo --reward RULE {faithful}".split(),
            "ppo": f"rlhf --algorithm ppo --reward rule {faithful} --json".split(),
        }
    )
    line = (
        "--critic-model: 'llama3-8b' does not apply: GRPO with a rule-based reward has no reward "
        "model and no critic"
    )
    assert refusal(runs["rlhf"]) == line and refusal(runs["plan"]) == line
    # PPO's critic is the given network with a value head (model.value_head): llama3-8b's
    # 8,030,261,248 parameters less its output layer 128,256 × 4,096, plus 4,096 + 1
    table = json.loads(runs["ppo"].stdout)["network_table"]
    assert 8_030_261_248 - 128_256 * 4_096 + 4_096 + 1 == 7_504_928_769
    assert [(r["role"], r["params"]) for r in table] == [
        ("actor", 7_615_616_512),
        ("critic", 7_504_928_769),
        ("reference", 7_615_616_512),
    ]


def test_a_flag_of_another_command_names_that_command():
    """``trainplan rlhf-plan --policy-params 7e9`` said only "No such option '--policy-params'."
    (the size belongs to ``trainplan rlhf``'s textbook accounting; the placement takes it from
    the model); ``evaluate --prompts 3`` was offered ``--params`` and ``--recompute``, which
    are not what the user meant; ``example ckpt-9-every-3 --every 2`` takes it as ``--set``. A
    flag no command takes keeps click's suggestions."""
    runs = run_many(
        {
            "policy": "rlhf-plan --policy-params 7e9".split(),
            "prompts": "evaluate --model llama3-8b --prompts 3".split(),
            "typo": "evaluate --mdoel llama3-8b".split(),
            "gpus": "pipeline -p 4 -m 8 --gpus 8".split(),
            "off": "rlhf --algorithm ppo --no-offload".split(),
            "every": "example ckpt-9-every-3 --every 2".split(),
        }
    )
    assert refusal(runs["policy"]) == (
        "--policy-params: no such option of trainplan rlhf-plan; it is an option of trainplan "
        "rlhf (trainplan rlhf-plan --help lists this command's)"
    )
    assert refusal(runs["prompts"]) == (
        "--prompts: no such option of trainplan evaluate; it is an option of trainplan rlhf "
        "and rlhf-plan (trainplan evaluate --help lists this command's)"
    )
    assert refusal(runs["gpus"]) == (
        "--gpus: no such option of trainplan pipeline; it is an option of trainplan evaluate, "
        "frontier, rlhf, rlhf-plan and search (trainplan pipeline --help lists this command's)"
    )
    assert refusal(runs["off"]) == (
        "--no-offload: no such option of trainplan rlhf; it is an option of trainplan "
        "rlhf-plan (trainplan rlhf --help lists this command's)"
    )
    # the example command takes another tab's parameters through --set
    assert refusal(runs["every"]) == (
        "--every: no such option of trainplan example; give the example's every as --set every=2"
    )
    assert "Did you mean one of: '--help', '--model'?" in refusal(runs["typo"])


def test_an_examples_zero_stage_given_through_set_is_a_number():
    """``example fsdp-70b-64 --set zero_stage=1`` said "'1' must be 0, 1, 2 or 3": the text
    reached the layout unread. ZeRO-1 of 70B over dp 64 (Rajbhandari et al. 2019, Figure 1):
    2 + 2 + 12/64 bytes a parameter = 70e9 × 4.1875 = 293,125,000,000 bytes."""
    runs = run_many(
        {
            "one": "example fsdp-70b-64 --set zero_stage=1 --json".split(),
            "five": "example fsdp-70b-64 --set zero_stage=5".split(),
        }
    )
    assert runs["one"].returncode == 0, runs["one"].stderr
    got = json.loads(runs["one"].stdout)
    assert got["layout"]["zero_stage"] == 1
    assert got["memory"]["total_bytes"] == 70_000_000_000 * (2 + 2 + Fraction(12, 64))
    assert refusal(runs["five"]) == "--set zero_stage: 5 must be 0, 1, 2 or 3"


def test_a_faithful_option_under_dpo_does_not_ask_for_a_model():
    """``rlhf --algorithm dpo --critic-model …`` said "add --model NAME", which DPO then refuses
    (it has no rollout to place: only its textbook accounting)."""
    runs = run_many(
        {
            "dpo": "rlhf --algorithm dpo --critic-model llama3-8b --policy-params 7e9".split(),
            "ppo": "rlhf --algorithm ppo --critic-model llama3-8b --policy-params 7e9".split(),
        }
    )
    # one rule (model.rlhf.shares.not_applicable): DPO's own reason for a critic
    assert refusal(runs["dpo"]) == (
        "--critic-model: 'llama3-8b' does not apply: DPO (Rafailov et al. 2023) learns from "
        "preference pairs: it has no reward model or critic"
    )
    assert refusal(runs["ppo"]) == (
        "--critic-model: 'llama3-8b' does not apply: it belongs to the faithful accounting; add "
        "--model NAME"
    )
