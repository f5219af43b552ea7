"""One Megatron-Core MoE layer against Megatron-LM's own MoE-layer benchmark.

Megatron-LM ``tests/functional_tests/test_cases/common/moe_perf/`` (commit cf39a4ddcf,
2025-12-16, "Add moe layer perf UT", #2673) times one ``MoELayer`` forward and backward with
CUDA events on 8 H100s (EP 8, TP 1, sequence 4,096, micro-batch 1, BF16 input,
``moe_permute_fusion``, ``moe_router_fusion``, forced load balancing, Transformer Engine grouped
experts, no bias, no gated unit: ``_build_transformer_config`` sets no ``gated_linear_unit``, so
the experts run GELU with two GEMMs) and keeps the means in ``baseline.json``. CUDA events
catch the device idling while the host issues the layer after the dispatcher's
device-to-host wait, so the baselines hold the host's share as well as the kernels'.

The model's layer is the MoE part of :func:`model.ops.layer_ops` (the router onward, without
the residual add) on H100's deployed roofline figures plus the all-to-alls of
:func:`model.layer_time.ep_all_to_all_seconds` over the node's NVLink (450 GB/s), under
Megatron-Core's passes (:func:`model.moe_kernels.expert_passes_of`). Nothing here is fitted:
the model reproduces the BF16 ``alltoall`` baselines within 6 % with one and with four local
experts (docs/moe.md, "The grouped GEMMs and the passes around them").
"""

from __future__ import annotations

import pytest

from trainplan.model.arch_parts import MoESpec
from trainplan.model.layer_time import ep_all_to_all_seconds
from trainplan.model.moe_kernels import expert_passes_of
from trainplan.model.op_rates import deployed_params
from trainplan.model.op_time import Clock, op_seconds
from trainplan.model.ops import LayerShape, layer_ops
from trainplan.model.roofline import LinkTime
from trainplan.model.specs import Architecture, Mlp
from trainplan.topology.accelerators import get_accelerator

# test_cases.py MIXTRAL_PROXY and DEEPSEEK_PROXY (the DeepSeek proxy's shared expert is not passed
# to the layer's config; its group-limited routing, sigmoid score and FP32 router run in the
# router's [T, E] passes, under 1/h of a row pass).
MIXTRAL = MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=14336)
DEEPSEEK = MoESpec(num_experts=32, experts_per_token=8, expert_ffn_hidden_size=2048)

# baseline.json: (forward_ms, backward_ms) of mixtral_a2a_tp1ep8_bf16, deepseek_a2a_tp1ep8_bf16.
PUBLISHED = {"mixtral": (4.327, 7.684), "deepseek": (7.119, 10.483)}


def _moe_layer_ms(hidden: int, moe: MoESpec) -> tuple[float, float]:
    arch = Architecture(
        num_layers=1, hidden_size=hidden, num_attention_heads=8, ffn_hidden_size=moe.expert_ffn_hidden_size,
        vocab_size=32000, mlp=Mlp.GELU, moe=moe,
    )  # fmt: skip
    x = LayerShape(
        arch, True, 4096, 1, tp=1, ep=8, causal=True, expert_passes=expert_passes_of("megatron", "bf16")
    )  # fmt: skip
    h100 = get_accelerator("H100-SXM")
    c = Clock(h100.peak_flops_per_s, h100.hbm_bytes_per_s, deployed_params("H100-SXM"),
              ep_link=LinkTime(450e9, True))  # fmt: skip
    ops = layer_ops(x)
    start = [o.name for o in ops].index("router")
    moe_ops = [o for o in ops[start:] if o.name != "MLP residual"]
    a2a_f, a2a_b = ep_all_to_all_seconds(x, c, False)
    forward = sum(op_seconds(o, c) for o in moe_ops) + a2a_f
    backward = sum(op_seconds(o, c, backward=True) for o in moe_ops) + a2a_b
    return forward * 1e3, backward * 1e3


@pytest.mark.parametrize(
    "name, hidden, moe, ratios",
    [
        # one local expert, 8,192 rows: the two expert GEMMs dominate (0.37 ms of all-to-alls)
        ("mixtral", 4096, MIXTRAL, (0.98, 1.03)),
        # four local experts of 8,192 rows; 32,768 rows of 7,168 cross the all-to-alls
        ("deepseek", 7168, DEEPSEEK, (1.04, 1.06)),
    ],
)
def test_megatron_moe_layer_benchmark_on_h100(name, hidden, moe, ratios) -> None:
    forward, backward = _moe_layer_ms(hidden, moe)
    pub_f, pub_b = PUBLISHED[name]
    assert (round(forward / pub_f, 2), round(backward / pub_b, 2)) == ratios
