"""What a new user met running every example and the commands after the quick start on a clean
clone, each fixed at its cause and checked here as the user ran it (its own ``trainplan``
process, :func:`tests.cli_runs.run_many`) or on the library term the command prints.

* the textbook ZeRO-3 row counted its gathers once a step, ZeRO-2's reduce-scatter every
  micro-batch (megatron-1t: 1,826.76 GB for ZeRO-2 against 10.68 GB for ZeRO-3), and the
  textbook search took ZeRO-3 for it;
* ``megatron-502pf`` called the paper's hardware FLOP rate an MFU;
* ``None`` in refusals of a missing value; ``--calibration`` refused without ``--gpu``;
* DPO's hints, ``--width`` dropped, ``K``/``M`` refused for counts, a closed pipe exiting 1;
* a ``llama4_text`` config without ``intermediate_size_mlp``;
* interleaving's closed form beside 1F1B's order run on the same unequal stages.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from tests.cli_runs import Done, refusal, run_many

ROOT = Path(__file__).resolve().parents[1]
CALIBRATION = """\
description = "a test calibration"
source = "tests/test_user_findings.py"
gpu = "A100-80GB"

[cluster]
gemm_efficiency = 0.7
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Done]:
    where = tmp_path_factory.mktemp("user")
    (where / "a100.toml").write_text(CALIBRATION)
    (where / "nostep.toml").write_text(
        'gpu = "A100-80GB"\n[[run]]\nlabel = "a"\nmodel = "megatron-7.5b"\ntp = 4\ndp = 32\n'
    )
    ev = ["evaluate", "--model", "megatron-7.5b", "--tp", "4", "--dp", "32", "--json"]
    pp4 = "--model llama3-8b --gpus 8 --dp 2 --pp 4 --global-batch 16".split()
    calls = {
        "1t": ["example", "megatron-1t", "--json"],
        "502pf": ["example", "megatron-502pf"],
        "mfu no step": "mfu --params 70B --tokens 4e6 --chips 512 --gpu H100-SXM".split(),
        "mfu 70M": "mfu --params 70M --tokens 4M --step-seconds 10 --peak-tflops 989 --json".split(),
        "seq 8K": ["evaluate", "--model", "llama3-8b", "--seq-len", "8K"],
        "calibrate no step": ["calibrate", "nostep.toml"],
        "calibration": [*ev, "--calibration", "a100.toml"],
        "calibration H100": [*ev, "--calibration", "a100.toml", "--gpu", "H100-SXM"],
        "dpo model": ["rlhf", "--algorithm", "dpo", "--model", "llama3-8b"],
        "plan help": ["rlhf-plan", "--help"],
        "width": ["rlhf", "--algorithm", "grpo", "--policy-params", "8B", "--width", "100"],
        "grpo": ["rlhf", "--algorithm", "grpo", "--policy-params", "70B", "--reward", "rule"],
        "1f1b": ["evaluate", *pp4, "--json"],
        "v2": ["evaluate", *pp4, "--schedule", "interleaved", "--virtual-stages", "2", "--json"],
    }
    return run_many(calls, cwd=where)


def _json(done: Done) -> dict:
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_textbook_zero3_counts_its_collectives_every_micro_batch(runs):
    """megatron-1t, dp 6, m = 3072 / 6 = 512 micro-batches. ZeRO-0's row is an all-reduce once a
    step, 2·(5/6)·2·P; ZeRO-2 reduce-scatters every micro-batch and gathers once, (1 + m)·(5/6)·2·P;
    ZeRO-3 gathers the weights for each micro-batch's forward and backward and reduce-scatters
    every micro-batch (ZeRO §7.2.2's 3Ψ at one micro-batch; DeepSpeed's stage 3 does so):
    3m·(5/6)·2·P = (3m/2) × ZeRO-0's = 768 × 7.12 GB, where it printed 10.68 GB (1.5 ×)."""
    rows = {r["zero_stage"]: r["dp_bytes_per_step"] for r in _json(runs["1t"])["zero_table"]}
    ring = Fraction(rows[0]) / 2  # (5/6)·2·P
    assert rows[1] == rows[0]
    assert rows[2] == pytest.approx(float(513 * ring), rel=1e-12)
    assert rows[3] == pytest.approx(float(3 * 512 * ring), rel=1e-12)
    assert rows[3] / rows[0] == pytest.approx(768, rel=1e-12)
    assert rows[3] == pytest.approx(5_469.59e9, rel=1e-6)


def test_textbook_zero3_mechanism_is_per_micro_batch():
    """The one term the evaluator, the search and the RLHF placements read
    (:func:`model.comm.dp_bytes` over :meth:`Mechanism.traffic_terms`): 70e9 parameters on
    dp 64, bf16; m = 4 (B 256): 3·4·(63/64)·2·70e9 = 1,653.75e9 B, four times m = 1's."""
    from trainplan.model.comm import dp_bytes
    from trainplan.model.mechanisms import mechanism

    for m in (1, 4):
        total, per_mb = dp_bytes(mechanism("textbook", 3), Fraction(70 * 10**9), 0, 64, 1, m)
        assert total == 3 * m * Fraction(63, 64) * 2 * 70 * 10**9
        assert per_mb == 3 * Fraction(63, 64) * 2 * 70 * 10**9


def test_megatron_502pf_is_the_papers_hardware_rate(runs):
    """Narayanan et al. 2021's 502 PFLOP/s counts Eq. 3, the recomputed forward included:
    96·B·s·l·h²·(1 + s/6h + V/16lh) at B 3072, s 2048, l 128, h 25600, V 51200 = 5.139e19 a step,
    102.37 s at 502e15 FLOP/s. Model FLOPs over that step: 6 · 1,008,038,758,400 · 6,291,456 ÷
    (312e12 · 3072 · 102.37) = 38.8 % (the 6·N MFU). With the attention Eq. 3 counts (its s/6h,
    non-causal) and the recomputed forward, the HFU is the paper's 52.4 %: 6·N + 16·s·l·h +
    24·l·h² = 8,168,872,652,800 FLOPs a token against Eq. 3's 8,168,302,182,400 (the
    difference, 6 · 95,078,400, N's biases, norms and position embeddings)."""
    b, s, l_, h, v = 3072, 2048, 128, 25600, 51200
    eq3 = 96 * b * s * l_ * h * h * (1 + s / (6 * h) + v / (16 * l_ * h))
    assert eq3 / 502e15 == pytest.approx(102.37, abs=5e-3)
    out = runs["502pf"].stdout
    assert runs["502pf"].returncode == 0, runs["502pf"].stderr
    assert "÷ (312e12 · 3072 · 102.37 s) = 39.3%" in out
    assert "without attention FLOPs: 38.8%" in out
    assert "(full)) = 52.4%" in out and "no recomputation given" not in out
    n = 1_008_038_758_400
    assert 6 * n + 16 * s * l_ * h + 24 * l_ * h * h == 8_168_872_652_800
    assert 96 * l_ * h * h + 16 * s * l_ * h + 6 * v * h == 8_168_302_182_400


def test_a_missing_value_is_named_not_none(runs):
    assert refusal(runs["mfu no step"]) == (
        "--step-seconds: missing; MFU from a step needs both --tokens (tokens in the step, all "
        "chips) and --step-seconds (seconds per step): --tokens alone is given"
    )
    line = refusal(runs["calibrate no step"])
    assert line.endswith(
        "run 1: step_seconds missing: give the run's measured seconds per step (step_seconds = 3.7)"
    )
    assert "None" not in line


def test_counts_take_decimal_suffixes_lengths_stay_refused(runs):
    """70M parameters are 7·10⁷ and 4M tokens 4·10⁶: 6 · 7e7 · 4e6 ÷ (989e12 · 10 s) = 0.016987;
    a length of 8K tokens keeps both readings."""
    out = _json(runs["mfu 70M"])
    assert out["mfu"] == pytest.approx(6 * 70e6 * 4e6 / (989e12 * 10), rel=1e-12)
    assert refusal(runs["seq 8K"]) == "--seq-len: '8K' is ambiguous: write 8192 (8 × 1,024) or 8000"


def test_a_calibration_without_gpu_takes_its_own(runs):
    assert _json(runs["calibration"])["gpu"]["name"] == "A100-80GB"
    assert "was fitted on A100-80GB; it does not apply to H100-SXM" in refusal(
        runs["calibration H100"]
    )


def test_calibrate_writes_the_catalogues_name(tmp_path):
    from trainplan.interface.calibration import read_measurements

    path = tmp_path / "m.toml"
    path.write_text('gpu = "A100-80G"\n[[run]]\nstep_seconds = 3.7\nmodel = "megatron-7.5b"\n')
    assert read_measurements(path)[0] == "A100-80GB"


def test_dpo_hints_name_the_command_the_user_is_in(runs):
    assert refusal(runs["dpo model"]) == (
        "--algorithm: 'dpo' is not one of ppo, grpo (DPO has no rollout to place: its textbook "
        "accounting takes --policy-params, without --model)"
    )
    help_text = " ".join(runs["plan help"].stdout.split())
    assert "ppo or grpo (DPO has no rollout to place" in help_text
    assert "textbook accounting only" not in help_text


def test_rlhf_text_says_what_its_flops_count_and_refuses_width(runs):
    """GRPO's defaults: 1,024 prompts × 16 samples = 16,384 sequences of 1,024 + 4,096 tokens;
    rollout 2·70e9 · 16,384 · 5,120 = 1.174e19 FLOPs."""
    assert runs["grpo"].returncode == 0, runs["grpo"].stderr
    assert (
        "16,384 sequences a step of 5,120 tokens each (prompt + completion): 83,886,080 tokens"
        in runs["grpo"].stdout
    )
    assert 2 * 70e9 * 83_886_080 == pytest.approx(1.174e19, rel=1e-3)
    assert refusal(runs["width"]).startswith("--width: 100 draws the timeline of the faithful")


def test_per_stage_times_are_what_the_bubble_rests_on(runs):
    """llama3-8b, pp 4, m 8: the last stage also runs the output layer, so 1F1B's bubble is its
    order's on unequal stages (22.2 %, not 3/11). Both schedules report each stage's forward and
    backward of one micro-batch, the same stages, and the compute is m × the slowest's."""
    one, two = _json(runs["1f1b"]), _json(runs["v2"])
    for out in (one, two):
        stages = out["pipeline"]["stage_microbatch_s"]
        assert [r["stage"] for r in stages] == [0, 1, 2, 3]
        slowest = max(r["forward_s"] + r["backward_s"] for r in stages)
        assert stages[3]["forward_s"] + stages[3]["backward_s"] == slowest
        assert out["time"]["compute_s"] == pytest.approx(8 * slowest, rel=1e-9)
    pairs = zip(
        one["pipeline"]["stage_microbatch_s"], two["pipeline"]["stage_microbatch_s"], strict=True
    )
    for a, b in pairs:
        assert a == pytest.approx(b, rel=1e-12)
    assert one["pipeline"]["bubble_fraction"] == pytest.approx(0.222, abs=1e-3)


def test_interleaved_order_of_equal_chunks_is_the_closed_form():
    """Every chunk alike (forward 1, backward 2): the order's bubble is (pp − 1)·t/v = 3·6/2."""
    from trainplan.model.pipeline_uneven import layout_bubbles

    assert layout_bubbles(4, 8, [1.0] * 8, [2.0] * 8, 6.0) == pytest.approx(9.0)


def test_llama4_text_takes_transformers_defaults_and_says_so():
    """transformers' ``Llama4TextConfig.__init__`` sets ``intermediate_size_mlp`` to 16,384: two
    dense layers (step 2 of 4) at h 512 hold 3·512·(16,384 − 2,048) more parameters each than
    with the 2,048 the config below names."""
    from trainplan.model.hf_families import read_hf_config

    config = {
        "model_type": "llama4_text", "hidden_size": 512, "intermediate_size": 1024,
        "intermediate_size_mlp": 2048, "num_local_experts": 4, "num_experts_per_tok": 1,
        "num_hidden_layers": 4, "interleave_moe_layer_step": 2, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000,
        "tie_word_embeddings": False, "use_qk_norm": True, "no_rope_layers": [1, 1, 1, 0],
        "attention_chunk_size": 2048,
    }  # fmt: skip
    named, _ = read_hf_config(config, "l4/config.json")
    left = dict(config)
    del left["intermediate_size_mlp"]
    arch, notes = read_hf_config(left, "l4/config.json")
    assert arch.ffn_hidden_size == 16384 and named.ffn_hidden_size == 2048
    assert any(
        "intermediate_size_mlp = 16384: not in the config, transformers' Llama4TextConfig" in n
        for n in notes
    )


def test_a_closed_pipe_ends_as_cat_does():
    """``trainplan example … | head``: the reader gone before the output, the process dies of
    SIGPIPE as ``cat`` does (the shell's 141), with nothing on stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainplan", "example", "ckpt-100-every-10"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == -signal.SIGPIPE
    assert err == b""


@pytest.mark.parametrize(
    ("model", "options"),
    [
        # DeepSpeed ZeRO-3: the weights its coordinator does not gather again are not sent
        ("llama3-70b", {"framework": "deepspeed", "dp": 128, "tp": 2, "zero_stage": 3}),
        # PyTorch's pipeline runtime re-gathers FSDP2's weights beyond FSDP's own count
        ("llama3-70b", {"framework": "fsdp2", "dp": 64, "tp": 2, "pp": 2, "zero_stage": 3}),
        # FP8 primary weights gathered at a byte (Megatron-Core only); routed experts on edp
        ("mixtral-8x7b", {"framework": "megatron", "dp": 16, "ep": 4, "zero_stage": 1,
                          "precision": "fp8", "fp8_recipe": "tensorwise",
                          "fp8_param_gather": True}),
    ],
)  # fmt: skip
def test_zero_table_row_is_the_traffic_rows(model, options):
    """The ZeRO table's row at the layout's own stage sends what the traffic table's dp and edp
    rows send (one term, :func:`model.terms.traffic.dp_traffic_bytes`): DeepSpeed ZeRO-3 on
    Llama 3 70B at dp 128 tp 2 was 3,360.18 GB in the table against 3,298.65 GB in the
    traffic row, the weights DeepSpeed does not gather again counted only in the latter."""
    from trainplan.optimizer.case import Case

    case = Case.of(model, "H200", global_batch_size=256, seq_len=4096, **options)
    est = case.evaluate(case.layout)
    rows = {r.traffic.axis: r.traffic.bytes_per_step for r in est.traffic}
    (own,) = [z for z in est.zero_table if z.zero_stage == est.layout.zero_stage]
    assert own.dp_bytes_per_step == rows["dp"] + rows.get("edp", 0)
    assert own.dp_bytes_per_step > 0
