"""FP8 primary weights (Megatron-Core's ``--fp8-param-gather``) are all-gathered over the
data-parallel group at a byte an element (:func:`model.fp8_gathers.fp8_param_gathers`):
Megatron-LM 92c8482e6d ``distributed_data_parallel.py`` gives a ``Float8Tensor`` parameter a
``torch.uint8`` param buffer (the distributed optimizer's all-gather), and Megatron-FSDP's
``_init_each_parameter_group_buffers`` a ``torch.uint8`` ``model_weight_buffer``. Only the
linear layers' weights are FP8; the embedding, the output layer and the norms stay BF16. Every
figure derived by hand below."""

from __future__ import annotations

from trainplan.api import Case

LLAMA3_8B_LINEAR = 32 * (4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336)
"""Llama 3 8B's linear weights: 32 layers of Q (4096²), K and V (4096·1024 each, GQA 8 heads),
O (4096²) and the SwiGLU MLP's three 4096 × 14336 matrices: 6,979,321,856 elements."""


def _dp(**options):
    case = Case.of("llama3-8b", "H100-SXM", **options)
    estimate = case.evaluate()
    row = next(r for r in estimate.traffic if r.traffic.axis == "dp")
    return row.traffic, row.exposed_seconds


def test_megatron_fsdp_gathers_the_fp8_linear_weights_at_a_byte():
    """Megatron Bridge 25.11's Llama 3 8B FSDP row (dp 8, ZeRO-3, b 1, B 128, s 8192, FP8
    current scaling): every micro-batch gathers the weights for its forward and again for its
    backward, m = 128/8 = 16. Each gather of a linear weight sends its ring share 7/8 at 1 B
    instead of 2: 7/8 · 6,979,321,856 = 6,106,906,624 B less a gather, × 2 gathers × 16
    micro-batches = 195,421,011,968 B less a step (12,213,813,248 a micro-batch); the
    reduce-scatters (BF16 gradients) and the BF16 embedding and output layer unchanged."""
    assert LLAMA3_8B_LINEAR == 6_979_321_856
    base = {"dp": 8, "num_gpus": 8, "zero_stage": 3, "micro_batch_size": 1,
            "global_batch_size": 128, "seq_len": 8192, "precision": "fp8",
            "fp8_recipe": "tensorwise"}  # fmt: skip
    fp8, fp8_exposed = _dp(**base, fp8_param_gather=True)
    bf16, bf16_exposed = _dp(**base, fp8_param_gather=False)
    per_gather = 6_106_906_624
    assert 7 * LLAMA3_8B_LINEAR == 8 * per_gather
    assert bf16.bytes_per_step - fp8.bytes_per_step == per_gather * 2 * 16 == 195_421_011_968
    assert bf16.microbatch_bytes - fp8.microbatch_bytes == 2 * per_gather
    assert fp8_exposed < bf16_exposed


def test_distributed_optimizer_gathers_the_fp8_linear_weights_once_a_step():
    """The distributed optimizer (ZeRO-1, dp 8): one all-gather of the weights a step, the
    linear ones at a byte: 7/8 · 6,979,321,856 = 6,106,906,624 B less a step. MXFP8 parameters
    are gathered in BF16 (the buffer shared with the gradients), and without
    ``fp8_param_gather`` every weight is BF16: no change."""
    base = {"dp": 8, "num_gpus": 8, "zero_stage": 1, "micro_batch_size": 1,
            "global_batch_size": 64, "seq_len": 8192, "precision": "fp8"}  # fmt: skip
    tensorwise = {**base, "fp8_recipe": "tensorwise"}
    fp8, _ = _dp(**tensorwise, fp8_param_gather=True)
    bf16, _ = _dp(**tensorwise, fp8_param_gather=False)
    assert bf16.bytes_per_step - fp8.bytes_per_step == 6_106_906_624
    assert fp8.microbatch_bytes == bf16.microbatch_bytes == 0
    mx = {**base, "fp8_recipe": "mxfp8"}
    b200 = Case.of("llama3-8b", "B200", **mx, fp8_param_gather=True).evaluate()
    b200_off = Case.of("llama3-8b", "B200", **mx, fp8_param_gather=False).evaluate()
    assert [r.traffic.bytes_per_step for r in b200.traffic if r.traffic.axis == "dp"] == [
        r.traffic.bytes_per_step for r in b200_off.traffic if r.traffic.axis == "dp"
    ]
