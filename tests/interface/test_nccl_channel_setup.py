"""NCCL's channel set-up allocations (:class:`model.timing.CostOptions` ``nccl_channel_setup``,
:func:`model.terms.comm_memory.channel_setup_bytes`) as a user reaches them:
on by default, ``--set nccl_channel_setup=false`` in its own process, stated in the JSON and the
assumptions; the one-rank measurement of an H200 they reproduce; and the validation runs, all of
which still fit with them in force."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_runs import refusal, run_many
from trainplan.interface.fidelity.validation import evaluate_all, validation_runs
from trainplan.interface.fidelity.validation_report import goal_table
from trainplan.model.terms.comm_memory import channel_setup_bytes

MIB = 2**20
BASE = ("evaluate", "--model", "llama3-70b", "--gpus", "64", "--tp", "4", "--pp", "2")
SENTENCE = "without their channels' set-up (--set nccl_channel_setup=false)"
MEASURED = Path(__file__).resolve().parents[1] / "data" / "device" / "h200-2026-12-04"


def test_the_set_up_from_the_command_line() -> None:
    """Llama 3 70B on 64 H100s at tp 4 × pp 2 (dp 8) under Megatron-Core, rank order
    tp-cp-ep-dp-pp, 8 GPUs a node with a 50 GB/s NIC each
    (:func:`model.terms.comm_memory.collective_channels`):

    * tp (4 ranks in a node): 24 collective channels, 32 set up: (32 × 3 + 2) × 2 MiB = 196 MiB;
    * dp (8 ranks at stride 4, spanning 32 ranks: 2 a node on 4 nodes): 2 search channels at
      48 GB/s, doubled to 4 at 24 GB/s, Postset 8: (8 × 3 + 2) × 2 MiB = 52 MiB;
    * the optimizer's gradient-statistics group and the world group (64 ranks, 8 a node on 8
      nodes): 16 each, (16 × 3 + 2) × 2 MiB = 100 MiB each;
    * the pipeline pair (one rank on each of 2 nodes): 4 channels, (4 × 3 + 2) × 2 MiB = 28 MiB;
    * the model-parallel group train_step reduces over (the tp block of 4 at each pp stride of
      32: ranks 0-3 and 32-35, 4 a node on 2 nodes): 16 channels, 100 MiB.

    196 + 52 + 3 × 100 + 28 = 576 MiB more communicator bytes than with the option off, nothing
    else in the memory moves. Off, the buffers: 24 + 8 + 16 + 16 + 16 ring channels and 4 to
    the pipeline neighbour, 84 × 12 MiB = 1,008 MiB, and NVLink SHARP's, which the option leaves
    (tests/model/test_nvls_memory.py): 2 MiB of credits on the tp ring (4 ranks in a node, its
    all-reduces rings: NCCL's tuner, model/nccl_search.py; 130 MiB with the buffers before) and
    on each of the four other rings with ≥ 2 ranks a node, 10 MiB."""
    runs = run_many({
        "off": (*BASE, "--json", "--set", "nccl_channel_setup=false"),
        "on": (*BASE, "--json"),
        "text": (*BASE, "--set", "nccl_channel_setup=false"),
        "default_text": BASE,
        "bad": (*BASE, "--set", "nccl_channel_setup=maybe"),
    })  # fmt: skip
    for name in ("off", "on", "text", "default_text"):
        assert runs[name].returncode == 0, (name, runs[name].stderr[-2000:])
    off, on = json.loads(runs["off"].stdout), json.loads(runs["on"].stdout)
    assert off["time"]["nccl_channel_setup"] is False and on["time"]["nccl_channel_setup"] is True
    assert off["memory"]["communicator_bytes"] == (84 * 12 + 10) * MIB == 1_067_450_368
    grown = on["memory"]["communicator_bytes"] - off["memory"]["communicator_bytes"]
    assert grown == (196 + 52 + 3 * 100 + 28) * MIB == 603_979_776
    assert on["memory"]["total_bytes"] - off["memory"]["total_bytes"] == grown
    assert SENTENCE in runs["text"].stdout and SENTENCE not in runs["default_text"].stdout
    assert refusal(runs["bad"]) == "--set nccl_channel_setup: 'maybe' must be true or false"


def test_the_rule_reproduces_the_one_rank_measurement() -> None:
    """One H200, NCCL 2.28.9: each ``new_group`` of one rank took 406,847,488–408,944,640 B
    outside PyTorch's allocator (388–390 MiB), and its ALLOC log shows 64 channels' three
    allocations and the communicator's two, each its own 2 MiB: (64 × 3 + 2) × 2 MiB."""
    steps = json.loads((MEASURED / "nccl_steps.json").read_text())
    grown = [b for name, b in steps["delta_bytes"] if name.endswith("new_group")]
    assert channel_setup_bytes(64) == 388 * MIB == 406_847_488
    assert min(grown) == channel_setup_bytes(64) and max(grown) - min(grown) == 2 * MIB
    log = (MEASURED / "nccl_alloc_log.txt").read_text().splitlines()
    per_comm = [line for line in log if "channel.cc" in line]
    assert len(per_comm) == 5 * 64 * 3  # five communicators in that run


def test_in_force_every_run_that_ran_fits() -> None:
    """The set-up is in force for every validation run (the default), and no run that ran is
    called "does not fit". NeMo 24.07's GPT-3 20B on 64 H100s (dp 32 × tp 2, FP8), which a
    flat 32 channels a ring put 0.53 GB over: its tp ring in a node sets up 32 channels (196
    MiB beside 24 × 12 = 288 MiB of buffers), its dp ring (4 ranks a node on 8 nodes), its
    gradient-statistics and world rings (8 a node on 8 nodes) 16 each (100 MiB beside 192 MiB):
    484 + 3 × 292 = 1,360 MiB, 82.74 GB of the 83.21 usable. Since then its rows run
    ``grad_stats_group = "world"`` (Apex's DistributedFusedAdam reduces the grad norm over the
    default group: no gradient-statistics ring, −292) and the model-parallel ring is counted at
    every ZeRO stage (tp 2 in a node, +484): 484 + 292 + 484 + 292 = 1,552 MiB, 82.95 GB
    (test_distributed_fused_adam_cli). NVLink SHARP's buffers (tests/model/test_nvls_memory.py)
    are not counted: NeMo-Framework-Launcher at tag 24.07 sets ``NCCL_NVLS_ENABLE: 0``
    (launcher_scripts/conf/config.yaml env_vars), the rows' ``nccl_nvls = false``; with it on
    the tp ring's 66 MiB and three rings' 2 MiB of credits would make it 83.03 GB, still
    under."""
    results = evaluate_all(validation_runs())
    table = "\n".join(goal_table(results))
    assert '| runs that ran called "does not fit" | none | 0 | yes |' in table
    nemo = next(x for x in results if x.run.key == "nemo-24.07-h100/gpt3-20b")
    assert nemo.fits is True
