"""The NCCL SM charge (:class:`model.timing.CostOptions` ``nccl_sm_charge``) as a user reaches
it: on by default, ``--set nccl_sm_charge=false`` on the command line (its own process), stated in the JSON and
the assumptions, refused under the single time model; and the validation set's goal table with
it on, the figures ``docs/time-model-sources.md`` §2 reports."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from tests.cli_runs import refusal, run_many
from trainplan.interface.fidelity.validation import evaluate_all, validation_runs
from trainplan.interface.fidelity.validation_report import goal_table

BASE = ("evaluate", "--model", "llama3-8b", "--gpus", "16", "--gpu", "H100-SXM", "--dp", "16")
SENTENCE = (
    "the SMs NCCL's collectives hold (NVLS's or the ring's channels) charged to the computation "
    "they hide under"
)
OFF = "NCCL's SMs not charged to overlapped computation (--set nccl_sm_charge=false)"


def test_the_charge_from_the_command_line() -> None:
    """Llama 3 8B on 16 H100s, dp 16 under Megatron-Core (the default profile): on by default
    (the JSON says so, the assumptions say what is charged and each group's φ: the dp group's
    reduce-scatters and all-gathers over 2 nodes, 8 GPUs each, run as rings on 16 channels,
    φ = 1 − 1/1.314 = 0.239; no tp group); off, the dp row's exposed time and the step are smaller, the memory does not move,
    and the assumptions say it is off. The textbook profile's single model has no such
    mechanism: the key is refused in one line."""
    runs = run_many(
        {
            "off": (*BASE, "--json", "--set", "nccl_sm_charge=false"),
            "on": (*BASE, "--json"),
            "text": BASE,
            "off_text": (*BASE, "--set", "nccl_sm_charge=false"),
            "textbook": (*BASE, "--framework", "textbook", "--set", "nccl_sm_charge=true"),
            "bad": (*BASE, "--set", "nccl_sm_charge=maybe"),
        }
    )
    for name in ("off", "on", "text", "off_text"):
        assert runs[name].returncode == 0, (name, runs[name].stderr[-2000:])
    off, on = json.loads(runs["off"].stdout), json.loads(runs["on"].stdout)
    assert off["time"]["nccl_sm_charge"] is False and on["time"]["nccl_sm_charge"] is True
    assert on["time"]["step_s"] > off["time"]["step_s"]
    assert on["memory"] == off["memory"]
    assert (
        f"{SENTENCE} (φ dp 0.239)" in runs["text"].stdout
        and SENTENCE not in runs["off_text"].stdout
    )
    assert OFF in runs["off_text"].stdout and OFF not in runs["text"].stdout
    assert "nccl_sm_charge" in refusal(runs["textbook"])
    assert refusal(runs["bad"]) == "--set nccl_sm_charge: 'maybe' must be true or false"


def _charged(params: dict[str, Any], on: bool = True) -> dict[str, Any]:
    """A validation run's parameters with the NCCL charge set where the roofline model times it
    (the textbook profile keeps the single model, which refuses roofline options)."""
    single = params.get("framework") == "textbook" or params.get("time_model") == "single"
    return params if single else {**params, "nccl_sm_charge": on}


def test_the_charge_measures_as_documented() -> None:
    """With the NCCL charge on, the validation set measures what docs/time-model-sources.md §2
    reports for the current model: dense 8.8 %, MoE 23.7 %, 19 of 77 runs beyond 15 % (the
    default, as the validation page shows it; 8.9 % dense while llm-foundry's FSDP1 runs were
    charged FSDP2's copies around the collectives, before flat_parameters, model.fsdp2_copies;
    8.9 %, 23.8 %, 19 on before the saved BF16 inputs
    Megatron-Core's linears quantise again were charged their second cast,
    model.saved_originals; 9.0 %, 23.8 %, 19 on and 9.3 %, 24.4 %, 20 off
    before the Megatron-Core profiles' optimizer step zeroed the whole gradient buffer,
    model.terms.optimizer_time.whole_buffer_zeroing_bytes; 8.9 %, 23.8 %, 18 before NCCL's tuner picked each
    collective's algorithm and protocol, model/nccl_tuner.py: llm-foundry's MPT-3B on 512 H100s,
    dp 512 over 64 nodes, −13.2 → −15.4 %, its FSDP reduce-scatters (330.8 MB a rank) and
    all-gathers (165.4 MB) running the ring in LL128, 14 + 63 × 4.0 + 448 × 1.9 = 1,117.2 µs
    and the bytes at min(0.92 × 384, 8 × 36.7) = 293.6 GB/s against Simple's 8.4 + 63 × 14 +
    448 × 3.4 = 2,413.6 µs at 384: 2,244.0 against 3,275.1 µs and 1,680.6 against 2,844.4 µs a
    call, the dp row 195.8 → 125.6 ms and the charge on its hidden share with it; with the charge
    off the same row moves −18.6 → −18.9 % and the counts stay. MoE 23.9 % before NCCL's channels on multi-node
    NVLink were counted per clique, model.rank_groups.nccl_node_size, the GB300 DeepSeek-V3
    row; 9.3 %, 24.3 %, 20 of 77 with it off; 8.8 %,
    23.5 %, 18 on and 9.2 %, 24.1 %, 20 off before 1F1B's bubble was the order's own on
    stages of unequal time, model.pipeline_onef; 8.6 %,
    23.4 %, 18 on and 9.0 %, 24.0 %, 19 off before each pass's ZeRO-3 gathers ran in calls of
    their own and a ring's latency counted only its steps between nodes at the network's; 23.0 % and
    23.6 % before each layer's attention core was timed at its own span, the gpt-oss rows'
    128-key bands; 23.5 % before a Hopper band shorter than the causal sweep was timed by its
    tiles, model.band_tiles, and each pipeline stage's core at its own layers' spans: the H100
    gpt-oss row's pp 4). The charge
    is the H200's measured φ at the blocks of the algorithm NCCL runs each group's collectives
    as (NVLS's 16 on Hopper for an all-reduce with NVLS, else the ring's channels: 24 in a node,
    on A100 too). Before the charge followed the algorithm (NVLS's count for every collective,
    nothing on A100): 9.0 %, 22.5 %, 21 of 77. When it was made
    the default the same two runs measured 9.3 %, 23.2 %, 19 of 77 against 9.9 %, 23.5 %, 23 of
    77 (and 9.6 %, 23.3 %, 21 of 77 at the SM share, 16/132 = 0.121); the async-TP, expert-dp
    and pipeline-reduction terms added since moved both; last, together: the charge reaching the
    dense layers' and the output layer's asynchronous tp collectives and NCCL's overlapped
    all-to-all, the userbuffers' SM margin and GEMM chunks, Megatron-Core's interleaved chunk-0
    reduction and ZeRO-3's traffic timed pass by pass (9.0 %, 22.9 %, 20 of 77 on, 9.6 %,
    23.0 %, 23 of 77 off, before them); then the SMs userbuffers' margin-less kernels hold,
    charged either way (9.1 %, 22.5 %, 21 of 77 on, 9.4 %, 23.0 %, 22 of 77 off, before); then Transformer Engine's FP8
    sequence-parallel all-gathers and FP8 primary weights' data-parallel all-gathers at 1 B an element (9.0 %,
    22.5 %, 21 of 77 on, 9.3 %, 23.0 %, 21 of 77 off, before them); DeepSpeed's gradient
    accumulation, DeepEP's and HybridEP's once-a-rank dispatch at their kernels' published rates
    came after."""
    runs = [replace(r, params=_charged(dict(r.params))) for r in validation_runs()]
    assert sum("nccl_sm_charge" in r.params for r in runs) >= 70
    table = "\n".join(goal_table(evaluate_all(runs)))
    assert "8.8 % (59 runs)" in table
    assert "23.7 % (18 runs)" in table
    assert "19 of 77" in table


def test_the_validation_without_the_charge() -> None:
    """With the NCCL charge off (``nccl_sm_charge=false``, the earlier default), the
    validation set measures dense 9.0 %, MoE 24.3 %, 20 of 77 runs beyond 15 %: both means
    worse than with it on (8.8 %, 23.7 %, 19), the reason it is on by default (24.2 % for MoE
    before combined 1F1B's unpaired share was taken on the stage with the most MoE layers and
    counted the layers uneven chunks run alone, model.moe_run.stage_unpaired_fraction: the two
    Qwen3-235B-A22B rows run with the all-to-all overlap moved; 8.9 %, 24.2 %,
    19, the dense mean level with it, while llm-foundry's FSDP1 runs were charged FSDP2's copies,
    before flat_parameters; 9.2 %, 24.2 %, 20 before FSDP2's copies around its collectives were charged,
    model.fsdp2_copies, which slow the fsdp2 rows the charge-free model ran too fast; 9.3 %,
    24.3 % before each framework's own optimizer-step passes were charged, model.step_passes)."""
    runs = [replace(r, params=_charged(dict(r.params), on=False)) for r in validation_runs()]
    table = "\n".join(goal_table(evaluate_all(runs)))
    assert "9.0 % (59 runs)" in table
    assert "24.3 % (18 runs)" in table
    assert "20 of 77" in table
