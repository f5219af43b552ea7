"""The commands that print a ``trainplan evaluate`` line (``calibrate`` for each fitted run,
``search`` for its answer) and that line, each run in a fresh process as a user runs them: the
line gives the same step time (and, for a search, peak memory) as the command printed."""

from __future__ import annotations

import json
import shlex
from importlib import resources

from tests.cli_runs import refusal, trainplan

MEASUREMENTS = resources.files("trainplan.scenarios").joinpath("measurements-megatron-2021.toml")


def _evaluate(line: str) -> dict:
    words = shlex.split(line)
    assert words[:2] == ["trainplan", "evaluate"], line
    done = trainplan(*words[1:], "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_calibrate_prints_the_evaluate_line_of_each_fitted_run():
    """The worked example's three runs (Megatron-LM Table 1, 2021): each printed line, run on its
    own, gives the prediction the fit printed (9.390 s for the 18.4B run: the run's recipe, ZeRO-0,
    full recomputation, no FlashAttention, bf16 gradients, synchronous TP, no gradient overlap,
    and gemm_efficiency 0.7495; 0.7457 and 9.394 s before Megatron-Core's own optimizer-step
    passes, model.step_passes; 0.7461 before the optimizer step zeroed the whole gradient
    buffer, model.terms.optimizer_time.whole_buffer_zeroing_bytes: 2 B × every element of the
    DDP's BF16 buffer in place of 4 B).

    9.393 s at 0.746 before NCCL's tuner (model/nccl_tuner.py: ``ncclTopoTuneModel``,
    ``ncclTopoGetAlgoTime``): each run's one dp all-reduce (no gradient overlap: one call) had
    the tree's latency with the ring's bandwidth; NCCL times each algorithm whole, and the tree's
    bytes at half its bus bandwidth lose, so the ring runs it in Simple, its latency × 1.4 (the
    multi-node ring's plateau) and none of the tree's. The 18.4B's: 32 ranks one a node,
    8.98 GB sent a rank at 24 GB/s, (8.4 + 62 × 14) × 1.4 = 1,226.96 µs where 8.4 + 2 × 5 × 14
    = 148.4 were charged: +1.08 ms (the 7.5B's, 2 a node over 16 nodes, (8.4 + 2 × (15 × 14 +
    16 × 3.4)) × 1.4 = 752.08 µs against 8.4 + 2 × (4 + 4 × 14) = 128.4, +0.62 ms; the 39.1B's
    +1.08 ms and its embedding all-reduce over pp 2, 36.4 × 1.4 µs, +14.6 µs). The least-squares
    fit moves 0.74596 → 0.74610, printed at 4 places 0.7460 → 0.7461, and the 18.4B's prediction
    at the printed figure 9.3933 → 9.3936 s (9.39366 → 9.39368 at the unrounded fit)."""
    done = trainplan("calibrate", str(MEASUREMENTS), "--json")
    assert done.returncode == 0, done.stderr
    residuals = json.loads(done.stdout)["residuals"]
    assert len(residuals) == 3
    for r in residuals:
        line = r["evaluate_command"]
        assert line.endswith("--set gemm_efficiency=0.7495") and "--no-flash" in line
        assert _evaluate(line)["time"]["step_s"] == r["predicted_s"]
    assert round(residuals[2]["predicted_s"], 3) == 9.390
    text = trainplan("calibrate", str(MEASUREMENTS)).stdout
    assert "each run's prediction, as evaluate gives it:" in text
    assert f"  18.4B on 256 GPUs: {residuals[2]['evaluate_command']}" in text


def test_calibrate_refuses_a_key_the_runs_layout_does_not_read(tmp_path):
    """``p2p_overlap`` on a pp 1 run: evaluate's own rule (model.key_rules
    check_layout_reads_options), naming the file, the run and the key."""
    m = tmp_path / "m.toml"
    m.write_text(
        'gpu = "A100-80GB"\n[[run]]\nlabel = "7.5B"\nstep_seconds = 3.696\n'
        'model = "megatron-7.5b"\ntp = 4\ndp = 32\nmicro_batch_size = 16\n'
        "global_batch_size = 512\np2p_overlap = false\n"
    )
    line = refusal(trainplan("calibrate", str(m)))
    assert line == (
        f"measurements {m}: run 1 ('7.5B'): p2p_overlap: false is read by Megatron-Core's "
        "interleaved schedule only (virtual_stages > 1), not pp 1 with virtual_stages 1"
    )
    assert "p2p_overlap" not in MEASUREMENTS.read_text()


SEARCHES = {
    "dense": ["search", "--model", "llama3-70b", "--gpus", "64", "--gpu", "H100-SXM",
              "--seq-len", "8192", "--global-batch", "2048"],
    "moe": ["search", "--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "H100-SXM",
            "--set", "moe_ep_overlap=overlap_moe_expert_parallel_comm"],
    "per-stage": ["search", "--per-stage", "--model", "llama3-8b", "--gpus", "16", "--pp", "4",
                  "--per-stage-shapes", "1"],
}  # fmt: skip
"""A dense, an MoE and a per-stage search (each a few seconds)."""


def test_search_prints_the_evaluate_line_of_its_answer():
    """Each search's ``evaluate_command`` (JSON) and ``evaluate it:`` line (text), run in a fresh
    process, gives the answer's step time and peak memory to the last bit: the layout (with
    the per-stage answer's --stage-layers and --recompute-layers) and the ``--set`` keys the
    answer was evaluated under (moe_ep_overlap) are all on the line."""
    from tests.cli_runs import run_many

    done = run_many({k: [*v, "--json"] for k, v in SEARCHES.items()})
    for name, d in done.items():
        assert d.returncode == 0, (name, d.stderr[-2000:])
        answer = json.loads(d.stdout)
        line = answer["evaluate_command"]
        again = _evaluate(line)
        assert again["time"]["step_s"] == answer["time"]["step_s"], name
        assert again["memory"]["total_bytes"] == answer["memory"]["total_bytes"], name
        if name == "moe":
            assert "--set moe_ep_overlap=overlap_moe_expert_parallel_comm" in line
        if name == "per-stage":
            lay = answer["per_stage"]
            assert f"--stage-layers {','.join(map(str, lay['stage_layers']))}" in line
            assert f"--recompute-layers {','.join(map(str, lay['recompute_layers']))}" in line
    text = trainplan(*SEARCHES["dense"]).stdout
    # the step in evaluate's seconds (3 decimals), the minutes beside: 280.686 s / 60 = 4.68 min
    # (280.679 s before the optimizer step zeroed the whole gradient buffer, 280.681 s before
    # Megatron-Core's own optimizer-step passes, model.step_passes: 12 B more an element stepped)
    step = json.loads(done["dense"].stdout)["time"]["step_s"]
    assert f"{step:.3f}" == "280.686"
    assert "\nobjective (step-time): 280.686 s (4.7 min) per step\n" in text
    assert f"\nevaluate it: {json.loads(done['dense'].stdout)['evaluate_command']}\n" in text
