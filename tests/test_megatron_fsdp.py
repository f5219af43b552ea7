"""Megatron-FSDP (``--framework megatron --zero 3``) and whole-layer CPU activation offload
(``cpu_offloading_num_layers``), hand-derived from Megatron-LM's and Transformer Engine's code.

Megatron-FSDP's optim_grads_params (megatron/core/distributed/fsdp/src/megatron_fsdp/
param_and_grad_buffer.py): per parameter, ÷ D, the model weight shard (2 B), the FP32 main
weight (4 B), the main gradient (here BF16, 2 B) and the two FP32 Adam moments (8 B); two units
gathered (FixedPoolAllocator size UB_BUFFER_NUM = 2) and two units' unsharded gradients (2 × 2 B);
per micro-batch two all-gathers (2 × 2 B) and one reduce-scatter (2 B) per parameter.

Transformer Engine's offload of the first N of L layers leaves L − N layers' saved tensors on the
GPU at the end of the forward (cpu_offload_v1.py layer_window_map; cpu_offload.py
DefaultOffloadSynchronizer: "(num_layers - num_offloaded_layers) * T").
"""

import pytest

from trainplan.interface.inputs import build_case
from trainplan.model.errors import LayoutError, PlannerError
from trainplan.model.frameworks import Framework, check_framework
from trainplan.model.layout import Layout
from trainplan.model.mechanisms import mechanism
from trainplan.optimizer.case import Case

GB200_70B = {"model": "llama3-70b", "gpu": "GB200", "framework": "megatron", "zero_stage": 3,
             "dp": 64, "micro_batch_size": 2, "global_batch_size": 256, "seq_len": 8192,
             "precision": "fp8", "fp8_recipe": "tensorwise", "gradient_dtype": "bf16"}  # fmt: skip


def test_megatron_fsdp_bytes_per_parameter():
    m = mechanism("megatron", 3, gradient_bytes=2)
    assert (m.weights_full, m.grads_full, m.optimizer_full) == (0, 0, 0)
    assert (m.weights_sharded, m.grads_sharded, m.optimizer_sharded) == (2 + 4, 2, 8)
    assert (m.gathered_units, m.unit_grad_bytes, m.step_sharded) == (2, 2 * 2, 4)
    assert m.traffic_terms() == (0, 2 * 2 + 2)
    with pytest.raises(LayoutError, match="Megatron-FSDP"):
        check_framework(Framework.MEGATRON, 3, 2)


def test_whole_layer_offload_halves_the_layers_and_fills_the_host():
    base = build_case(GB200_70B).evaluate().stages[0].activations
    off = build_case({**GB200_70B, "cpu_offloading_num_layers": 40}).evaluate()
    acts = off.stages[0].activations
    assert acts.layers_bytes == base.layers_bytes * 40 / 80
    assert acts.offload_host_bytes == base.layers_bytes * 40 / 80
    assert off.stages[0].total_bytes < build_case(GB200_70B).evaluate().stages[0].total_bytes


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"framework": "fsdp2"}, "not fsdp2's"),
        ({"recompute": "full"}, "recompute none"),
        ({"cpu_offloading_num_layers": 80}, "below the model's 80 layers"),
    ],
)
def test_whole_layer_offload_refusals(change, rule):
    case = {**GB200_70B, "cpu_offloading_num_layers": 40} | change
    with pytest.raises(PlannerError, match=rule):
        build_case(case).evaluate()


def test_megatron_fsdp_keeps_the_embedding_and_output_layer_gathered():
    """Megatron-FSDP releases only its units' parameters (megatron_fsdp.py
    _register_fsdp_hooks: _post_forward and _post_backward_release_module on fsdp_unit_modules,
    the transformer layers; _root_pre_backward marks only unit buckets releasable), so the
    embedding and the output layer stay gathered beside two layer units. Llama 3 8B on dp 8:
    a layer 4096·(4096 + 2·1024 + 4096) + 3·4096·14,336 + 2·4096 = 218,112,000, the embedding
    and the untied output layer 128,256·4096 = 525,336,576 each; beyond the 1/8 shard, 2 B each:
    (2·218,112,000 + 2·525,336,576)·2·7/8 = 2,602,070,016 B (was 2 units of the largest, the
    embedding: 1,838,678,016, FSDP2's figure, whose torchtitan wraps embedding and output as
    units). The gradient buffers stay two of the largest unit's in FP32: 2·4·525,336,576."""

    def state(framework):
        lay = Layout.of(dp=8, framework=framework, zero_stage=3)
        return Case.of("llama3-8b", "H100-SXM", lay).evaluate().stages[0].state

    megatron, fsdp2 = state("megatron"), state("fsdp2")
    assert megatron.gathered_bytes == 2_602_070_016
    assert fsdp2.gathered_bytes == 1_838_678_016
    assert megatron.buffers_bytes == 2 * 4 * 525_336_576
