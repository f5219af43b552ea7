"""The command-line and interface parts of tests/optimizer/test_search.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner


def test_search_cli_json_and_infeasible_exit_code():
    from trainplan.interface.cli import cli, register_commands

    register_commands()
    runner = CliRunner()
    res = runner.invoke(
        cli,
        [
            "search",
            "--model",
            "megatron-1.7b",
            "--gpus",
            "8",
            "--gpu",
            "A100-80GB",
            "--global-batch",
            "32",
            "--max-micro-batch",
            "2",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["status"] == "optimal" and out["num_gpus"] == 8 and out["solve_seconds"] >= 0
    assert out["memory"]["fits"] is True
    res = runner.invoke(cli, ["search", "--model", "llama3-405b", "--gpus", "64", "--json"])
    assert res.exit_code == 1
    assert json.loads(res.output)["status"] == "infeasible"


def test_an_objective_above_two_to_the_53_is_read_exactly():
    """Mixtral 8x7B's time to train 15T tokens on 32,768 A100s is 1.12·10^16 ns, above 2^53: the
    solver's objective_value (a double) rounds it to a value no candidate has, and the tie-break
    found no candidate at it (ValueError in LayoutModel.first_at; the sweep benchmark's internal
    error). The optimum is read as the solution's exact integer."""
    from tests.cli_runs import trainplan

    args = ["--model", "mixtral-8x7b", "--gpus", "32,768", "--gpu", "A100-80GB"]
    args += ["--objective", "time-to-train", "--tokens", "15e12", "--workers", "1"]
    done = trainplan("search", *args, "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    d = json.loads(done.stdout)
    assert d["status"] == "optimal" and d["objective_kind"] == "time-to-train"
    assert d["objective_s"] * 1e9 > 2**53  # the case the double could not hold
    text = trainplan("search", *args)
    assert text.returncode == 0, text.stderr[-2000:]
    assert (
        "proven optimal" in text.stdout and "days to train 15,000,000,000,000 tokens" in text.stdout
    )


def test_llama3_70b_on_1024_h100_finds_a_v_outside_the_old_set_as_the_user_runs_it() -> None:
    """``trainplan search --model llama3-70b --gpus 1024 --gpu H100-SXM --global-batch 512``
    answered dp 64 × tp 4 × pp 4 interleaved v 8 (the set 2, 3, 4, 8) while ``evaluate`` of the
    same layout at v 10 — 2 layers a chunk, which Megatron-Core builds with
    --num-virtual-stages-per-pipeline-rank 10 — was faster (4.460 s against 4.516 s, v 8's
    chunks of 2 and 3 layers paying their bubble). The search now tries every v dividing the
    20 layers a rank holds: its answer is one of them outside the old set, its step evaluate's
    to the nanosecond, and the exhaustive oracle over the same tables agrees. Each command in its
    own process. Since NCCL's SM charge follows the algorithm NCCL runs (model.nccl_channels),
    v 20 (one layer a chunk) is 4.4296 s and v 10 4.4307 s, v 8 4.4870 s: the answer is v 20.
    NCCL runs the cross-entropy's all-reduces over tp 4 as rings (NCCL's tuner: NVLS's 240 GB/s
    of bus bandwidth at 4 GPUs against the ring's 360, model/nccl_search.py): 4.4298, 4.4309
    and 4.4872 s, the same answer. Megatron-Core's interleaved schedule launches the parameter
    all-gathers chunk by chunk (model.pipeline_reduce.chunked_param_gathers): at v 20 chunk 0's
    gathers, 156.36 / 20 = 7.82 ms, fit its one-layer forward (513.92 / 60 = 8.57 ms), but its
    first of 71 buckets, 156.36 / 71 = 2.20 ms, waits whole where φ × 7.82 = 1.18 ms was
    charged: + 1.0 ms, 4.4308 s, still the fastest (v 10 and v 8 unmoved: there φ of a chunk
    is more than a bucket). Since NCCL's ring latency counts only the dp ring's 31 steps
    between its 32 nodes at the network's 14 µs (model/nccl_latency.py: 8.4 + 31 × 14 + 32 ×
    3.4 = 551.2 µs a call where 890.4 were charged, 2 × 71 calls), the dp row is 357.69 ms,
    not 410.26: v 20 4.4224 s (its first bucket still waits whole), v 10 4.4216 s, v 8
    4.4774 s: the answer is v 10, also outside the old set. Since every interleaved layout's
    bubble is Megatron-Core's order on its chunks as timed (model.pipeline_uneven; v 8 ran it
    already, its chunks of 2 and 3 layers): v 20 4.4220 s, v 10 4.4171 s (the end chunks carry
    the embedding and the output layer, the others shorter than a v-th of the last rank's
    micro-batch), v 8 4.4774 s: still v 10. Since NCCL's tuner picks each collective's protocol
    (model/nccl_tuner.py; ``ncclTopoTuneModel``, ``topoGetAlgoInfo``): the dp ring (2 members a
    node on 2 NICs, 96 GB/s, the ring graph's 4 channels) runs its 71 fp32 reduce-scatters
    (251.9 MB a rank) and 71 bf16 all-gathers (125.9 MB) in LL128, 14 + 31 × 4.0 + 32 × 1.9 =
    198.8 µs and the bytes at min(0.92 × 96, 4 × 36.7) = 88.32 GB/s: 3,050.6 and 1,624.7 µs a
    call against Simple's 551.2 µs at 96 GB/s, 3,174.9 and 1,863.0: 362.6 µs a pair less, the
    dp row 357.69 → 331.95 ms, each layout's exposed dp 4.4–4.8 ms less: v 20 4.4177 s, v 10
    4.4124 s, v 8 4.4726 s: still v 10. The optimizer step zeroing the distributed optimizer's
    whole FP32 gradient buffer (model.terms.optimizer_time.whole_buffer_zeroing_bytes) adds 6.0 ms to each:
    v 20 4.4237 s, v 10 4.4185 s, v 8 4.4786 s. Megatron-Core's own optimizer-step passes, 38
    → 50 B an element (the clip's scaling +8, the master's re-read +4,
    model.step_passes.step_pass_bytes): +12 B × 71 M owned elements / (3.35 TB/s × 0.887) =
    +0.29 ms each: v 20 4.4240 s, v 10 4.4188 s, v 8 4.4789 s, still v 10."""
    from tests.cli_runs import trainplan
    from trainplan.interface.scenario import build_problem
    from trainplan.optimizer import enumerate as oracle
    from trainplan.optimizer.search import prepare

    user = ["--model", "llama3-70b", "--gpus", "1024", "--gpu", "H100-SXM", "--global-batch", "512"]
    found = json.loads(trainplan("search", *user, "--json").stdout)
    lay = found["layout"]
    assert (lay["dp"], lay["tp"], lay["pp"], lay["schedule"], lay["virtual_stages"]) == (
        64, 4, 4, "interleaved", 10,
    )  # fmt: skip
    shape = ["--dp", "64", "--tp", "4", "--pp", "4", "--zero", str(lay["zero_stage"])]
    shape += ["--recompute", lay["recompute"], "--micro-batch", "1", "--schedule", "interleaved"]
    steps = {
        v: json.loads(trainplan("evaluate", *user, *shape, "--virtual-stages", v, "--json").stdout)
        for v in ("8", "10", "20")
    }
    assert found["time"]["step_s"] == pytest.approx(steps["10"]["time"]["step_s"], abs=1e-9)
    assert steps["20"]["time"]["step_s"] == pytest.approx(4.4240, abs=5e-5)
    assert steps["10"]["time"]["step_s"] == pytest.approx(4.4188, abs=5e-5)
    assert steps["8"]["time"]["step_s"] == pytest.approx(4.4789, abs=5e-5)
    problem = build_problem({}, {"model": "llama3-70b", "gpus": "1024", "gpu": "H100-SXM",
                                 "global_batch": "512"})  # fmt: skip
    tables = prepare(problem)[0]
    (s, _, _), objective = oracle.best(problem, tables)
    assert tables.shapes[s].virtual_stages == 10
    assert (
        objective == round(found["time"]["step_s"] * 1e9)
        or abs(objective - found["time"]["step_s"] * 1e9) <= 2
    )
