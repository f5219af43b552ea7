"""The FP8 sentence of evaluate's assumptions says what the memory figures count, read from
the same flags (:attr:`model.frameworks.Framework.fp8_caches_weights`,
:attr:`model.frameworks.Framework.fp8_saves_fp8_inputs`) and the same cache bytes
(:func:`model.memory.cache_bytes_per_element`).

Llama 3 8B, dp 8, fp8 (delayed recipe) on H100. Under ``fsdp2`` (torchao's ``Float8Linear``:
the weight cast inside each GEMM, the BF16 input saved) there is no FP8 weight cache, so the
weights are 16.06 GB of BF16 whole under ZeRO-2 (8,030,261,248 × 2 B) plus the FP32 shard
(÷ 8 × 4 B = 4.02 GB), and the sentence says no copy is kept and the inputs are saved in BF16.
Under ``megatron`` (Transformer Engine) the row- and column-wise FP8 copies, 2 B per linear
weight, and 1 B FP8 saved inputs."""

from __future__ import annotations

from trainplan.interface.inputs import build_case
from trainplan.interface.render.assumptions import assumptions

BASE = {"model": "llama3-8b", "gpu": "H100-SXM", "precision": "fp8", "seq_len": 8192,
        "micro_batch_size": 1, "dp": 8, "global_batch_size": 8}  # fmt: skip


def _fp8(est) -> str:
    return next(line for line in assumptions(est) if line.startswith("precision fp8"))


def test_fsdp2_says_torchao_no_cache_bf16_inputs() -> None:
    est = build_case({**BASE, "framework": "fsdp2", "zero_stage": 2}).evaluate()
    assert est.peak.state.weights_bytes == 8_030_261_248 * 2 + 8_030_261_248 * 4 // 8
    line = _fp8(est)
    assert "(torchao Float8Linear): linear weights cast to FP8 inside each GEMM, no FP8 copy " \
        "kept, linear inputs saved in BF16" in line  # fmt: skip
    assert "Transformer Engine:" not in line and "cached" not in line and "in FP8 (1 B" not in line


def test_megatron_says_transformer_engine_cache_and_fp8_inputs() -> None:
    line = _fp8(build_case({**BASE, "framework": "megatron"}).evaluate())
    assert "(Transformer Engine): linear weights cached as FP8 row- and column-wise copies " \
        "(+2 B per linear weight), linear inputs saved in FP8 (1 B per element)" in line  # fmt: skip
