"""A user's first hour, each ``trainplan`` call its own process (:mod:`tests.cli_runs`), and the
web API where it takes the same parameter: a percent on a fraction and a unit on a flag that
names its unit (one number grammar, :func:`model.units.parse_number`), DPO's refusals naming
what to run instead, and an example's headline (the options as click read them, the example's
values that gave way)."""

from __future__ import annotations

import json
import warnings
from fractions import Fraction
from typing import Any

from tests.cli_runs import refusal, run_many

FRACTION_RULE = "a fraction from 0 to 1, or a percent such as 40%"
PPO = "rlhf --algorithm ppo --policy-params 70B --json"
FAITHFUL = "rlhf --algorithm ppo --model llama3-8b --json"
SINGLE = "evaluate --model llama3-8b --gpus 8 --set time_model=single"


def _api(*queries: str) -> list[Any]:
    """The web API's answers (status, JSON) to ``queries``, in-process (FastAPI's TestClient)."""
    from tests.web.conftest import need

    need("fastapi", "the web API")
    need("httpx", "the web API's test client")
    with warnings.catch_warnings():  # starlette's notice about its httpx client
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

        from trainplan.interface.web.app import create_app

        client = TestClient(create_app(("testserver",)))
        return [(r.status_code, r.json()) for r in map(client.get, queries)]


def test_a_percent_reads_as_hundredths_on_a_fraction():
    """``--train-mfu 40%`` was refused ("'40%' is not a number"): on a 0–1 fraction a percent
    is hundredths, so the run is the one of ``--train-mfu 0.4``; ``40`` (a percent without its
    sign) is refused naming both ways to write it; a percent on a count is refused.

    Hand derivation of the training time (PPO 70B, the textbook accounting): 16,384 sequences ×
    5,120 tokens = 83,886,080 tokens; 6 · 70e9 FLOPs a token for each of the two trained 70B
    networks (actor and critic), one epoch: 7.0464e19 FLOPs, at 0.40 × 989.4 TFLOP/s on 1 chip
    = 178,048.08 s."""
    runs = run_many(
        {
            "40%": f"{PPO} --train-mfu 40%".split(),
            "0.4": f"{PPO} --train-mfu 0.4".split(),
            "40": f"{PPO} --train-mfu 40".split(),
            "heads": "evaluate --model llama3-8b --offload-optimizer 50".split(),
            "set": "evaluate --model llama3-8b --set time_model=single --set "
            "kernel_efficiency=45%".split(),
            "set 0.45": "evaluate --model llama3-8b --set time_model=single --set "
            "kernel_efficiency=0.45 --json".split(),
            "gpus": "evaluate --model llama3-8b --gpus 8%".split(),
            "headroom": "search --model llama3-8b --gpus 8 --headroom 10".split(),
            # a table's entry given as text TOML does not read (50%, .5) crashed the time model
            "overlap 50%": f"{SINGLE} --set overlap.dp=50% --json".split(),
            "overlap .5": f"{SINGLE} --set overlap.dp=.5 --json".split(),
            "overlap 0.5": f"{SINGLE} --set overlap.dp=0.5 --json".split(),
        }
    )
    got, plain = json.loads(runs["40%"].stdout), json.loads(runs["0.4"].stdout)
    assert got == plain and got["train_mfu"] == 0.4
    flops = 6 * 70 * 10**9 * 16384 * 5120 * 2
    assert got["phase_flops"]["training"] == flops == 70_464_307_200_000_000_000
    seconds = Fraction(flops) / (Fraction(2, 5) * Fraction(9894, 10) * 10**12)
    assert abs(got["phase_seconds"]["training"] - float(seconds)) < 1e-6
    assert round(float(seconds), 2) == 178048.08
    assert refusal(runs["40"]) == f"--train-mfu: 40 must be in (0, 1]: {FRACTION_RULE}"
    assert refusal(runs["heads"]) == f"--offload-optimizer: 50 must be {FRACTION_RULE}"
    assert runs["set"].returncode == 0, runs["set"].stderr
    assert "kernel efficiency 0.45 of the dense peak" in runs["set"].stdout
    assert refusal(runs["gpus"]) == (
        "--gpus: '8%' is a percent, and the value is no fraction (0 to 1); write a number"
    )
    assert (
        refusal(runs["headroom"])
        == f"--headroom: 10 must be at least 0 and below 1 (100%) ({FRACTION_RULE})"
    )
    overlap = [json.loads(runs[f"overlap {v}"].stdout) for v in ("50%", ".5", "0.5")]
    assert overlap[0] == overlap[1] == overlap[2]
    (ok, page), (bad, line) = _api(
        "/api/rlhf?algorithm=ppo&policy-params=70e9&train-mfu=40%25",
        "/api/rlhf?algorithm=ppo&policy-params=70e9&train-mfu=40",
    )
    assert ok == 200 and page["phase_seconds"] == plain["phase_seconds"]
    assert (bad, line) == (422, {"error": f"train-mfu: 40 must be in (0, 1]: {FRACTION_RULE}"})


def test_a_unit_on_a_flag_that_names_its_unit_is_converted():
    """``--host-memory-gb 2TB`` was refused ("'2TB' is not a number"). A unit of the flag's kind
    is converted — TB and GB decimal, TiB binary — and one of another kind refused naming the
    flag's unit.

    Hand derivation (the faithful accounting's host share: host memory per node ÷ 8 GPUs a
    node): 2TB = 2,000 GB = 2e12 B → 2.5e11 B a GPU; 2TiB = 2 · 2^40 B = 2,199,023,255,552 B →
    274,877,906,944 B a GPU; ``--step-seconds 7000ms`` is 7 s, MFU = 6 · 70e9 · 4e6 ÷
    (989.4e12 · 512 · 7) = 47.4%."""
    mfu = "mfu --params 70e9 --tokens 4e6 --gpu H100-SXM --chips 512 --step-seconds"
    runs = run_many(
        {
            "2TB": f"{FAITHFUL} --host-memory-gb 2TB".split(),
            "2000": f"{FAITHFUL} --host-memory-gb 2,000".split(),
            "2TiB": f"{FAITHFUL} --host-memory-gb 2TiB".split(),
            "ms": f"{FAITHFUL} --host-memory-gb 2ms".split(),
            "7000ms": f"{mfu} 7000ms".split(),
            "7": f"{mfu} 7".split(),
            "PFLOPS": "mfu --achieved-tflops-per-gpu 0.4PFLOPS --gpu H100-SXM".split(),
            "TFLOPS": "mfu --achieved-tflops-per-gpu 400 --gpu H100-SXM".split(),
            "Gbps": "evaluate --model llama3-8b --set nvlink_gbps=400Gbps".split(),
            "bits": "evaluate --model llama3-8b --gpus 16 --tp 8 --set scaleout_gbps=400Gb/s "
            "--json".split(),
            "bytes": "evaluate --model llama3-8b --gpus 16 --tp 8 --set scaleout_gbps=50 "
            "--json".split(),
        }
    )

    def host(name: str) -> int:
        return json.loads(runs[name].stdout)["faithful"]["host_capacity_bytes_per_gpu"]

    assert host("2TB") == host("2000") == 250_000_000_000
    assert host("2TiB") == 2 * 2**40 // 8 == 274_877_906_944
    assert refusal(runs["ms"]) == (
        "--host-memory-gb: '2ms' is a time, not a size in bytes (given in GB): write e.g. 2000, "
        "2TB or 64GiB; TB and GB are decimal, TiB and GiB binary"
    )
    assert runs["7000ms"].stdout == runs["7"].stdout and "= 47.4%" in runs["7"].stdout
    # a rate per GPU names its unit before "per GPU": 0.4 PFLOP/s = 400 TFLOP/s; 400/989.4 = 40.4%
    assert runs["PFLOPS"].stdout == runs["TFLOPS"].stdout
    assert "400e12 FLOP/s per chip ÷ 989.4e12 = 40.4%" in runs["TFLOPS"].stdout
    assert refusal(runs["Gbps"]) == (
        "--set nvlink_gbps: '400Gbps' is ambiguous: write 400Gb/s (bits) or 400GB/s (bytes); "
        "the value is in GB/s"
    )
    assert json.loads(runs["bits"].stdout) == json.loads(runs["bytes"].stdout)  # 400/8 = 50
    ((ok, page), (bad, line)) = _api(
        "/api/rlhf?algorithm=ppo&model=llama3-8b&host-memory-gb=2TB",
        "/api/rlhf?algorithm=ppo&model=llama3-8b&host-memory-gb=2ms",
    )
    assert ok == 200 and page["faithful"]["host_capacity_bytes_per_gpu"] == 250_000_000_000
    assert bad == 422 and line["error"].startswith(
        "host-memory-gb: '2ms' is a time, not a size in bytes (given in GB)"
    )


def test_dpo_refusals_say_what_to_run_in_the_commands_own_words():
    """``rlhf-plan --algorithm dpo`` and ``example dpo-70b --model …`` said DPO "takes
    --policy-params", a flag neither command has. Each names what to run instead; the web's
    names the API's path and keys; ``trainplan rlhf``, which has the flag, keeps its line."""
    runs = run_many(
        {
            "plan": "rlhf-plan --algorithm dpo".split(),
            "example": "example dpo-70b --model llama3-8b".split(),
            "rlhf": "rlhf --algorithm dpo --model llama3-8b".split(),
            "instead": "example dpo-70b --set policy_params=8e9 --json".split(),
        }
    )
    head = "'dpo' is not one of ppo, grpo (DPO has no rollout to place: "
    assert refusal(runs["plan"]) == (
        f"--algorithm: {head}its textbook accounting is trainplan rlhf --algorithm dpo "
        "--policy-params SIZE (e.g. 70B))"
    )
    assert refusal(runs["example"]) == (
        f"--model: 'llama3-8b' does not apply to example dpo-70b: algorithm: {head}its textbook "
        "accounting takes the policy's size: trainplan example dpo-70b --set "
        "policy_params=SIZE (e.g. 70B))"
    )
    assert refusal(runs["rlhf"]) == (
        f"--algorithm: {head}its textbook accounting takes --policy-params, without --model)"
    )
    # the way out it names runs: 8e9 × (16 + 2) bytes, policy and reference
    assert json.loads(runs["instead"].stdout)["resident_bytes"] == 8 * 10**9 * 18
    ((status, line),) = _api("/api/rlhf-plan?algorithm=dpo")
    assert (status, line) == (
        422,
        {
            "error": f"algorithm: {head}its textbook accounting is "
            "/api/rlhf?algorithm=dpo&policy-params=SIZE (the RLHF tab))"
        },
    )


def test_an_examples_headline_is_the_options_as_click_read_them():
    """The headline walked the command line by hand: ``-x=v``, a short option or ``--`` could
    show wrong. Now each option click took from the command line, in its first long name, in
    the order typed; ``--set=KEY=VALUE`` as ``--set KEY=VALUE``."""
    runs = run_many(
        {
            "spellings": "example one-gpu-70b --gpus=8 --tp=2 --no-flash --set=seq_len=4096 "
            "--json".split(),
            "headline": "example one-gpu-70b --gpus=8 --tp=2 --no-flash --set=seq_len=4096".split(),
            "list": "example --list --gpus=8".split(),
        }
    )
    got = json.loads(runs["spellings"].stdout)
    assert got["changed"] == {"num_gpus": 8, "tp": 2, "flash_attention": False, "seq_len": "4096"}
    assert runs["headline"].stdout.startswith(
        "Example one-gpu-70b with --gpus 8, --tp 2, --no-flash, --set seq_len=4096 (in place of "
        "the example's dp=1; the figures below are for these; as published:"
    )
    assert refusal(runs["list"]) == (
        "--gpus: does not apply to --list (it lists the examples); give an example's NAME "
        "instead: trainplan example NAME --gpus 8"
    )


def test_an_examples_values_that_give_way_are_named():
    """``example ppo-70b --model llama3-8b`` dropped the example's 70B sizes without a word: the
    headline and the JSON (``replaced``) name each, and the figures are the ``rlhf`` command's
    with the model (the same JSON less the example's keys)."""
    runs = run_many(
        {
            "text": "example ppo-70b --model llama3-8b".split(),
            "json": "example ppo-70b --model llama3-8b --json".split(),
            "cmd": "rlhf --algorithm ppo --model llama3-8b --json".split(),
            "rule": "example grpo-70b --set reward=rule --json".split(),
        }
    )
    assert runs["text"].stdout.startswith(
        "Example ppo-70b with --model llama3-8b (in place of the example's policy_params=70e9, "
        "reward_params=70e9; the figures below are for these; as published: PPO:"
    )
    ex = json.loads(runs["json"].stdout)
    assert ex["replaced"] == {"policy_params": 70e9, "reward_params": 70e9}
    keys = ("example", "says", "source", "changed", "replaced")
    assert {k: v for k, v in ex.items() if k not in keys} == json.loads(runs["cmd"].stdout)
    assert json.loads(runs["rule"].stdout)["replaced"] == {"reward_params": 70e9}


def test_dpo_faithful_options_have_one_rule():
    """The textbook tab's DPO branch said its own words for the faithful options; one rule
    (:func:`model.rlhf.shares.not_applicable`, ``placed``) says them now, DPO's own reason
    where it has one."""
    runs = run_many({"gpus": "rlhf --algorithm dpo --policy-params 7e9 --gpus 8".split()})
    assert refusal(runs["gpus"]) == (
        "--gpus: '8' does not apply: DPO (Rafailov et al. 2023) learns from preference pairs: it "
        "has no rollout to place, so only the textbook accounting, by its sizes (this "
        "accounting's GPU count is --chips)"
    )
