"""What one H200 showed on 2026-12-04, set beside the cost model.

The measurements are files under ``tests/data/device/h200-2026-12-04/``, made by
``tests/fidelity/device/measure_kernels.py``, ``measure_memory.py`` and ``measure_nccl_steps.py``
on one H200 SXM (141 GB, 700 W limit, driver 580.159.04, PyTorch 2.11.0+cu130, cuDNN 9.19, NCCL
2.28.9). Nothing here runs on a GPU; each test reads the files and derives, by hand where it
can, what the measurement says about a figure of the model. Which of them are in force is said
per test; ``docs/time-model-sources.md`` carries the same findings for readers.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from trainplan.model.gemm_shapes import GemmPart, large_gemm_fraction
from trainplan.model.kernels import AttentionKey, published_attention_seconds
from trainplan.model.loss_memory import loss_peak_bytes_per_element
from trainplan.model.roofline import GEMM_EFFICIENCY_BY_GENERATION
from trainplan.scenarios.kernel_data import attention_curves

DATA = Path(__file__).resolve().parents[1] / "data" / "device" / "h200-2026-12-04"
H200 = GemmPart(sms=132, peak_tflops=989.4, hbm_tbps=4.8, hbm_efficiency=0.9)
"""The accelerator table's H200 (dense BF16 989.4 TFLOP/s, 4.8 TB/s) and gemm.toml's 132 SMs."""


def _load(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def _layer_rows(dtype: str) -> list[dict[str, Any]]:
    rows = _load("kernels.json")[f"gemm_{dtype}"]["rows"]
    return [r for r in rows if r["model"] not in ("square", "mamf-best-h100")]


def test_bf16_gemms_at_training_shapes_run_at_0_70_of_peak() -> None:
    """120 BF16 GEMMs — the forward, input-gradient and weight-gradient GEMMs of the four linear
    layers of Llama 3 8B/70B/405B and MPT 7B/30B/70B layers at the tensor-parallel sizes and
    micro-batch tokens of the validation set's Hopper runs — back to back: 597–801 TFLOP/s,
    median 0.698 of the 989.4 TFLOP/s peak. Under the step time's GEMM rule (depth k/(k + k₀),
    the wave share of DeepGEMM's tiles) that is e_GEMM 0.637–0.876, median 0.732: between the
    fitted figure in force (0.5725) and the best-shape anchor (0.845), 41 % of the way down."""
    rows = _layer_rows("bf16")
    assert len(rows) == 120
    rates = [r["tflops"] / H200.peak_tflops for r in rows]
    e = [large_gemm_fraction(r["tflops"], *r["mnk"], 1, H200, 2) for r in rows]
    assert statistics.median(rates) == pytest.approx(0.698, abs=5e-4)
    assert (min(rates), max(rates)) == pytest.approx((0.603, 0.810), abs=5e-4)
    assert statistics.median(e) == pytest.approx(0.732, abs=5e-4)
    assert (min(e), max(e)) == pytest.approx((0.637, 0.876), abs=5e-4)
    fitted, anchor = GEMM_EFFICIENCY_BY_GENERATION["H100"], 0.845
    assert (anchor - statistics.median(e)) / (anchor - fitted) == pytest.approx(0.41, abs=0.01)


def test_a_sustained_gemm_stream_holds_the_sm_clock_near_1_4_ghz() -> None:
    """Llama 3 70B's FC1 at tp 4 (8192 × 14336 × 8192) back to back for 20 s: 678.5 TFLOP/s in
    the median half-second window, while nvidia-smi read 686–695 W of the 700 W limit and the SM
    clock at 1,410–1,440 MHz in 68 of its 85 samples (4 a second) above 600 W. 132 SMs × 4,096 dense
    BF16 FLOP per clock give 989.4 TFLOP/s at 1,830 MHz and 770.5 at 1,425 MHz: the stream runs
    at 0.88 of its clock's peak, and the clock is 0.78 of the one the datasheet's rate assumes.
    The best shape of the published search (2048 × 2048 × 13312, 794.5 TFLOP/s on an H100 with
    the L2 flushed between calls) ran here at 653.4 in the stream."""
    sustained = _load("kernels_sustained_gqa.json")["sustained"]
    windows = [w["tflops"] for w in sustained["windows"]]
    assert statistics.median(windows) == pytest.approx(678.5, abs=0.1)
    with (DATA / "nvidia_smi_run2.csv").open() as fh:
        samples = [
            (float(r[" power.draw [W]"].split()[0]), int(r[" clocks.current.sm [MHz]"].split()[0]))
            for r in csv.DictReader(fh)
        ]
    loaded = [mhz for watts, mhz in samples if watts > 600]
    common = [mhz for mhz in loaded if 1410 <= mhz <= 1440]
    assert len(common) == 68 and len(loaded) == 85
    assert 132 * 4096 * 1830e6 / 1e12 == pytest.approx(989.4, abs=0.5)
    clock_peak = 132 * 4096 * 1425e6 / 1e12
    assert clock_peak == pytest.approx(770.5, abs=0.1)
    assert statistics.median(windows) / clock_peak == pytest.approx(0.88, abs=0.005)
    best = next(
        r for r in _load("kernels.json")["gemm_bf16"]["rows"] if r["model"] == "mamf-best-h100"
    )
    assert best["tflops"] == pytest.approx(653.4, abs=0.1)


def test_fp8_gemms_at_training_shapes() -> None:
    """The same 120 shapes through ``torch._scaled_mm`` (E4M3, per-tensor scales): median 0.628
    of the 1,978.9 TFLOP/s FP8 peak, 1.79× the BF16 rate of the same shape at the median."""
    fp8, bf16 = _layer_rows("fp8"), _layer_rows("bf16")
    assert statistics.median(r["tflops"] / 1978.9 for r in fp8) == pytest.approx(0.628, abs=5e-4)
    speedup = [f["tflops"] / b["tflops"] for f, b in zip(fp8, bf16, strict=True)]
    assert statistics.median(speedup) == pytest.approx(1.79, abs=0.005)


def _attention_ratio(row: dict[str, Any], direction: str) -> float:
    key = AttentionKey("cudnn", "H200", "bf16", direction, True)
    t = published_attention_seconds(
        attention_curves(), key, row["batch"], 32, row["seq"], (128, 128)
    )
    return float(row[f"{direction}_s"] / t)


def test_cudnn_attention_runs_slower_than_the_published_locked_clock_sweep() -> None:
    """cuDNN's causal attention through SDPA, 32 heads of 128, 2K to 64K tokens: the measured
    time over the model's (the cudnn-frontend H200 sweep, run with the clocks locked at
    1,980 MHz) is 0.90–1.25 forward and 0.89–1.11 backward, means 1.11 and 1.03: the model's
    attention is up to a fifth too fast where the power limit, not a locked clock, sets the
    speed. Not in force: the sweep stays the source of the curve (its head counts and version
    are the runs'); this is the size of the clock effect on it."""
    rows = [
        r for r in _load("kernels.json")["attention"]["rows"]
        if r["backend"] == "cudnn" and 2048 <= r["seq"] <= 65536
    ]  # fmt: skip
    fwd = [_attention_ratio(r, "fwd") for r in rows]
    bwd = [_attention_ratio(r, "bwd") for r in rows]
    assert (min(fwd), max(fwd)) == pytest.approx((0.90, 1.25), abs=0.005)
    assert (min(bwd), max(bwd)) == pytest.approx((0.895, 1.108), abs=0.005)
    assert statistics.mean(fwd) == pytest.approx(1.11, abs=0.01)
    assert statistics.mean(bwd) == pytest.approx(1.03, abs=0.01)


def test_a_ring_ranks_attention_calls_cost_what_the_unsplit_call_does() -> None:
    """One rank of a load-balanced causal ring at 128K tokens (cp 2, 4, 8): its causal call over
    its two chunks plus cp − 1 unmasked calls of 2c × c pairs take 0.92–0.97 (forward) and
    0.99–1.06 (backward) of the unsplit causal call over cp, on both kernels. Splitting the core
    does not slow the kernel, so it is not what makes the long-context runs under context
    parallelism 28–35 % slower than predicted (README, "What remains")."""
    rows = _load("kernels.json")["ring_chunks"]["rows"]
    assert len(rows) == 6
    fwd = [r["rank_fwd_s"] / r["whole_over_cp_fwd_s"] for r in rows]
    bwd = [r["rank_bwd_s"] / r["whole_over_cp_bwd_s"] for r in rows]
    assert 0.91 < min(fwd) and max(fwd) < 0.98
    assert 0.99 < min(bwd) and max(bwd) < 1.06


def test_grouped_gemm_few_tokens_per_expert_and_the_host_loop() -> None:
    """Qwen3-30B-A3B's expert FC1 (2,048 → 2 × 768), 16 experts on a GPU: ``torch._grouped_mm``
    takes 1.11× a dense GEMM of the same FLOPs at 2,048 tokens per expert, 1.19× at 512 and
    2.19× at 128; a Python loop of one ``torch.mm`` per expert takes 0.32–0.33 ms whatever the
    tokens (20 µs of host time per expert call: the GPU waits on the host below about 2,048
    tokens per expert)."""
    rows = {
        (r["groups"], r["tokens_per_group"]): r
        for r in _load("kernels.json")["grouped_gemm"]["rows"]
    }
    ratio = {
        t: rows[16, t]["grouped_mm_s"] / rows[16, t]["dense_same_flops_s"] for t in (2048, 512, 128)
    }
    assert ratio == pytest.approx({2048: 1.11, 512: 1.19, 128: 2.19}, abs=0.005)
    loops = [rows[16, t]["loop_mm_s"] for t in (2048, 512, 128)]
    assert min(loops) > 0.32e-3 and max(loops) < 0.335e-3
    assert max(loops) / 16 == pytest.approx(20.6e-6, abs=0.1e-6)


def test_fused_adamw_streams_at_0_71_of_the_datasheet_bandwidth() -> None:
    """``torch.optim.AdamW(fused=True)`` over 2²⁸ FP32 parameters (FP32 gradients): 2.21 ms, 28 B
    a parameter (read parameter, gradient, two moments; write parameter and moments) at 3.40
    TB/s: 0.708 of the 4.8 TB/s datasheet figure and 0.80 of what a device-to-device copy moved
    (4.27 TB/s read + write). The for-each path takes 2.7× as long."""
    opt, copy = _load("kernels.json")["optimizer"], _load("kernels.json")["stream"]
    assert opt["fused"]["bytes_per_s"] / 4.8e12 == pytest.approx(0.708, abs=5e-4)
    assert opt["fused"]["bytes_per_s"] / copy["read_plus_write_bytes_per_s"] == pytest.approx(
        0.795, abs=5e-4
    )
    assert opt["foreach"]["seconds"] / opt["fused"]["seconds"] == pytest.approx(2.69, abs=0.01)


def test_the_loss_working_set_is_the_models_12_bytes_a_logit() -> None:
    """PyTorch's cross entropy on an FP32 copy of BF16 logits, 8,192 tokens × 128,256 (torchtitan's
    unfused loss): 11.97 B a logit at the peak beyond the gradients, the model's 12
    (:func:`model.loss_memory.loss_peak_bytes_per_element`), in force.
    Under ``loss_parallel`` on a one-rank mesh the device showed 14.0 B against the model's 16
    at tp 8; one rank runs no all-reduce, so the 2 B are not settled by this measurement."""
    mem = _load("memory.json")
    assert mem["loss"]["peak_bytes_per_logit"] == pytest.approx(12, rel=5e-3)
    assert loss_peak_bytes_per_element("fsdp2", 1) == 12
    assert mem["loss_parallel"]["peak_bytes_per_logit"] == pytest.approx(14.0, abs=0.01)


def test_the_allocator_reserves_a_quarter_beyond_the_allocated_peak() -> None:
    """Four Llama 3 8B blocks under full checkpointing and the 128K-vocabulary loss, 8,192
    tokens, the second step: allocated peak 17.39 GiB; reserved 21.56 GiB by default (+4.17 GiB,
    +24 %) and 20.49 GiB with ``expandable_segments:True`` (+3.10 GiB, +18 %), no retries."""
    default, expandable = (
        _load("memory.json")["allocator"],
        _load("memory_expandable_segments.json")["allocator"],
    )
    assert default["max_allocated_gib"] == pytest.approx(17.387, abs=1e-3)
    assert default["gap_gib"] == pytest.approx(4.174, abs=1e-3)
    assert expandable["gap_gib"] == pytest.approx(3.103, abs=1e-3)
    assert default["num_alloc_retries"] == expandable["num_alloc_retries"] == 0


def _model_layer_seconds(hidden: int, heads: int, ffn: int) -> float:
    """The model's forward + backward seconds of one Llama-style layer on one H200 under the
    fsdp2 profile (torchtitan, eager), b 1, s 8,192, no recomputation: the difference of two
    evaluations, 32 and 16 layers, over 16 (the embedding, output layer and loss cancel)."""
    import trainplan

    def compute(layers: int) -> float:
        dims = {"arch": "llama", "layers": layers, "hidden": hidden, "heads": heads,
                "kv_heads": 8, "ffn_hidden": ffn, "vocab": 128256}  # fmt: skip
        n = 2 * (hidden * hidden + hidden * 1024) + 3 * hidden * ffn + 2 * hidden
        params = layers * n + 2 * 128256 * hidden + hidden
        e = trainplan.evaluate(
            params=params, **dims, gpu="H200", framework="fsdp2", seq_len=8192,
            micro_batch_size=1, global_batch_size=1, recompute="none", dp=1,
        )  # fmt: skip
        return float(e.compute_s)

    return (compute(32) - compute(16)) / 16


def test_a_whole_eager_layer_against_the_models_layer_time() -> None:
    """torchtitan's Llama 3 block in eager PyTorch, forward and backward, one sequence of 8,192
    tokens, no recomputation, BF16 weights (``measure_kernels.py`` ``layer``): 24.0 ms a layer
    at Llama 3 8B's widths and 80.2 ms at 70B's with PyTorch's FlashAttention-2 backend (21.3 and
    75.2 with cuDNN's). The GPU is busy for all but 1–5 % of the step (the profiled kernels' sum
    against the wall time), and the GEMMs inside the layer run at 744 TFLOP/s (8B, cuDNN run:
    6 · 218,103,808 parameters · 8,192 tokens in 14.4 ms), faster than a stream of GEMMs alone,
    whose clock the power limit holds lower. The model's layer under the fsdp2 profile, with its
    fitted e_GEMM, takes 26.9 and 90.3 ms: 1.12× the measured flash layers. So on one GPU, with
    no communication and no host stalls, the fitted figure already makes a layer 12 % slow; what
    it stands in for in the published runs lies outside the layer's own kernels."""
    rows = {(r["model"], r["backend"]): r for r in _load("layer.json")["layer"]["rows"]}
    measured = {k: r["per_layer_s"] for k, r in rows.items()}
    assert measured == pytest.approx(
        {("llama3-8b", "flash"): 24.02e-3, ("llama3-8b", "cudnn"): 21.28e-3,
         ("llama3-70b", "flash"): 80.23e-3, ("llama3-70b", "cudnn"): 75.16e-3}, abs=0.01e-3,
    )  # fmt: skip
    gemm_us = sum(
        k["device_us"] for k in rows["llama3-8b", "cudnn"]["kernels"] if k["name"] == "aten::mm"
    )
    assert 6 * 218_103_808 * 8192 / (gemm_us / 4 * 1e-6) / 1e12 == pytest.approx(744, abs=1)
    model_8b, model_70b = (
        _model_layer_seconds(4096, 32, 14336),
        _model_layer_seconds(8192, 64, 28672),
    )
    assert (model_8b, model_70b) == pytest.approx((26.88e-3, 90.25e-3), abs=0.01e-3)
    assert model_8b / measured["llama3-8b", "flash"] == pytest.approx(1.119, abs=0.001)
    assert model_70b / measured["llama3-70b", "flash"] == pytest.approx(1.125, abs=0.001)


def test_fsdp2_on_one_rank_keeps_its_side_stream_pool_apart() -> None:
    """Four Llama 3 8B blocks, each ``fully_shard``-ed on a one-rank mesh (FP32 parameters, BF16
    compute, FP32 reduction), the second step: 14.11 GB allocated at the peak, 16.09 GB reserved,
    of which 4,372,561,920 B on the one side stream that holds segments — exactly five segments of
    one unit's 218,112,000 FP32 elements (872,448,000 B, rounded up to 2 MiB: 874,512,384 B).
    At one rank FSDP2's sharded gradient is the whole unit, so this reads as the four units'
    FP32 gradients (``foreach_reduce``'s output, which the model counts in the gradient term)
    and one reduce-scatter input in flight; the all-gather copy-in pool of two BF16 units
    (``model.terms.peak.stream_pool_term``, 2 × 436,224,000 B) would need two ranks to show, so
    this run neither confirms nor refutes it."""
    pool = _load("memory_fsdp2.json")["fsdp2_pool"]
    unit_fp32 = 218_112_000 * 4
    segment = -(-unit_fp32 // 2**21) * 2**21
    assert (unit_fp32, segment) == (872_448_000, 874_512_384)
    side = {
        k: v for k, v in pool["reserved_by_stream_bytes"].items() if k != pool["default_stream"]
    }
    assert list(side.values()) == [5 * segment]
    assert pool["unit_bf16_bytes"] == 218_112_000 * 2
