"""The command-line and interface parts of tests/model/test_recompute_layers.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.model.test_recompute_layers import LLAMA3_70B
from trainplan.interface.render.report_dict import estimate_to_dict
from trainplan.optimizer.case import Case


def test_llama3_70b_partial_recompute_by_hand():
    """Llama 3 70B, tp 8 (SP), pp 4, s 8192, b 1, m 32, 1F1B: 20 layers per stage; stage i holds
    4 − i micro-batches. Without recomputation a layer keeps 22,502,440,960 / (4 · 20) =
    281,280,512 B per micro-batch (262,144 B of it Transformer Engine's FP32 softmax statistics,
    4 B × 64/8 heads × 8,192); fully recomputed it keeps its input, 2·s·h/tp =
    2 · 8192 · 8192 / 8 = 16,777,216 B. --recompute-layers 2,4,4,0:

    * stage 0: 4 · (2 · 16,777,216 + 18 · 281,280,512) = 4 · 5,096,603,648 = 20,386,414,592 B;
    * stage 1: 3 · (4 · 16,777,216 + 16 · 281,280,512) = 3 · 4,567,597,056 = 13,702,791,168 B;
    * stage 3: as without recomputation, 5,625,610,240 B.

    The transient is 0: recomputing the stage's last recomputed layer holds 281,280,512 −
    16,777,216 = 264,503,296 B, less than the 16 (or 18) later layers' bytes its micro-batch has
    already freed. With every layer recomputed it is full recomputation's 264,503,296 B."""
    none = Case.of(**LLAMA3_70B).evaluate()
    part = Case.of(**{**LLAMA3_70B, "recompute_layers": "2,4,4,0"}).evaluate()
    full = Case.of(**{**LLAMA3_70B, "recompute": "full"}).evaluate()
    layer, ckpt = 281_280_512, 16_777_216
    assert none.stages[0].activations.layers_bytes == 4 * 20 * layer == 22_502_440_960
    assert full.stages[0].activations.layers_bytes == 4 * 20 * ckpt
    acts = [s.activations for s in part.stages]
    assert acts[0].layers_bytes == 4 * (2 * ckpt + 18 * layer) == 20_386_414_592
    assert acts[1].layers_bytes == 3 * (4 * ckpt + 16 * layer) == 13_702_791_168
    assert acts[2].layers_bytes == 2 * (4 * ckpt + 16 * layer)
    assert acts[3].layers_bytes == 5_625_610_240
    assert all(a.recompute_transient_bytes == 0 for a in acts)
    assert full.stages[0].activations.recompute_transient_bytes == layer - ckpt == 264_503_296
    # time: stages 1 and 2 recompute 4 layers and set the pace; one more forward of each
    assert none.step_s < part.step_s < full.step_s
    # hardware FLOPs: 10 of 80 layers recomputed add 10/80 of full recomputation's extra
    extra_full = full.flops.hardware_flops - none.flops.hardware_flops
    assert part.flops.hardware_flops - none.flops.hardware_flops == extra_full * 10 // 80
    d = estimate_to_dict(part)
    assert d["layout"]["recompute_layers"] == [2, 4, 4, 0]
    assert any("per-stage recomputation" in a for a in d["assumptions"])


def test_llama3_70b_per_chunk_counts_by_hand():
    """The same Llama 3 70B run interleaved, v = 2: 80 layers in 8 chunks of 10, stage i holds
    chunks i and i + 4. --recompute-layers 2,4,4,0 recomputes the first 2 (4, 4, 0) layers of
    *each* chunk (Megatron-LM's --recompute-num-layers per virtual stage). Megatron's warm-up is
    2·(pp − i − 1) + (v − 1)·pp chunk forwards, so stage i holds 11, 9, 7, 5 chunks at its peak:

    * stage 0, a chunk = 2 · 16,777,216 + 8 · 281,280,512 = 2,283,798,528 B; × 11 =
      25,121,783,808 B (30,940,856,320 B without recomputation);
    * stage 1, a chunk = 4 · 16,777,216 + 6 · 281,280,512 = 1,754,791,936 B; × 9 =
      15,793,127,424 B; stage 2 × 7 = 12,283,543,552 B;
    * stage 3: 5 · 10 · 281,280,512 = 14,064,025,600 B, as without recomputation.

    FLOPs: 2·2 + 4·2 + 4·2 + 0 = 20 of the 80 layers recomputed, 20/80 of full recomputation's
    extra. Time: the slowest stages recompute 8 of their 20 layers, as a 1F1B layout with counts
    4,8,8,0 — the same m·t_mb (compute_s, the same float); the bubble Megatron-Core's interleaved
    order leaves on the chunks as timed (model.pipeline_uneven), 371.1 ms, under the closed
    form's (pp − 1)/(v·m) of it, 478.1 ms (half of 1F1B's closed (pp − 1)/m): its fill and drain
    run the lighter chunks (the 1F1B layout's own bubble is its order's too, model.pipeline_onef,
    below the closed form).
    Counts at the largest chunk (10) everywhere are full recomputation, exactly."""
    inter = {**LLAMA3_70B, "schedule": "interleaved", "virtual_stages": 2}
    part = Case.of(**{**inter, "recompute_layers": "2,4,4,0"}).evaluate()
    none = Case.of(**inter).evaluate()
    full = Case.of(**{**inter, "recompute": "full"}).evaluate()
    layer, ckpt = 281_280_512, 16_777_216
    acts = [s.activations for s in part.stages]
    assert [a.microbatches_in_flight for a in acts] == [
        Fraction(11, 2), Fraction(9, 2), Fraction(7, 2), Fraction(5, 2)
    ]  # fmt: skip
    assert none.stages[0].activations.layers_bytes == 11 * 10 * layer == 30_940_856_320
    assert acts[0].layers_bytes == 11 * (2 * ckpt + 8 * layer) == 25_121_783_808
    assert acts[1].layers_bytes == 9 * (4 * ckpt + 6 * layer) == 15_793_127_424
    assert acts[2].layers_bytes == 7 * (4 * ckpt + 6 * layer) == 12_283_543_552
    assert acts[3].layers_bytes == 5 * 10 * layer == 14_064_025_600
    assert all(a.recompute_transient_bytes == 0 for a in acts)
    extra_full = full.flops.hardware_flops - none.flops.hardware_flops
    assert part.flops.hardware_flops - none.flops.hardware_flops == extra_full * 20 // 80
    flat = Case.of(**{**LLAMA3_70B, "recompute_layers": "4,8,8,0"}).evaluate()
    assert part.time_terms.compute_s == flat.time_terms.compute_s
    pp, m = flat.layout.pp, flat.num_microbatches
    closed = flat.time_terms.busy_s * (pp - 1) / m
    assert closed / 2 * 1e3 == pytest.approx(478.05, abs=0.01)
    assert part.time_terms.bubble_s * 1e3 == pytest.approx(371.08, abs=0.01)
    assert flat.time_terms.bubble_s < closed
    alln = Case.of(**{**inter, "recompute_layers": "10,10,10,10"}).evaluate()
    assert [s.total_bytes for s in alln.stages] == [s.total_bytes for s in full.stages]
    assert alln.step_s == full.step_s
    assert any(
        "of each stage's model chunks (per chunk)" in a
        for a in estimate_to_dict(part)["assumptions"]
    )
