"""The roofline clock against figures derived by hand (issue 16, "Done when"): one norm, one
GEMM and one collective of Korthikanti et al.'s 22B layer (h 6144, a 64, s 2048, b 4, tp 8
with sequence parallelism) on an A100-80GB (312 TFLOP/s, 2,039 GB/s HBM, 300 GB/s NVLink),
and the invariants of the clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainplan.model.flops import layer_forward_flops
from trainplan.model.layer_time import layer_time
from trainplan.model.layout import Recompute
from trainplan.model.op_time import Clock, TpOverlap, op_seconds
from trainplan.model.ops import LayerShape, OpKind, layer_ops
from trainplan.model.roofline import (
    Collective,
    LinkTime,
    RooflineParams,
    collective_seconds,
    gemm_efficiency,
    memory_seconds,
)
from trainplan.model.specs import Architecture
from trainplan.scenarios.catalogue import get_model

PEAK, HBM, NVLINK = 312e12, 2.039e12, 300e9  # A100-80GB: datasheet figures
P = RooflineParams(gemm_efficiency=0.7)  # e = 0.7; e_HBM 0.9, NVLink 0.8, t_kernel 3 µs
GPT_22B = Architecture(
    num_layers=48, hidden_size=6144, num_attention_heads=64, ffn_hidden_size=4 * 6144,
    vocab_size=51200, position_embedding="learned", max_position_embeddings=2048,
    linear_bias=True, dropout=True,
)  # fmt: skip
SHAPE = LayerShape(GPT_22B, False, 2048, 4, 8, sequence_parallel=True, flash_attention=False)
CLOCK = Clock(PEAK, 2.039e12, P, LinkTime(NVLINK, True), tp_comm_overlap=TpOverlap.ASYNC)


def _op(name: str):
    return next(o for o in layer_ops(SHAPE) if o.name == name)


def test_layernorm_is_its_bytes_over_hbm():
    """The input LayerNorm over the local sequence shard [s·b/tp, h] = [1024, 6144] reads x and
    writes y in bf16: 2·2·1024·6144 = 25,165,824 B; at 0.9 × 2,039 GB/s that is 13.714 µs, plus
    the 3 µs kernel overhead: 16.714 µs. Backward reads x and dy and writes dx: 1.5× the bytes."""
    norm = _op("input norm")
    assert norm.kind is OpKind.MEMORY and norm.forward_bytes == 25_165_824
    assert norm.backward_bytes == 37_748_736
    seconds = op_seconds(norm, CLOCK)
    assert seconds == pytest.approx(25_165_824 / (0.9 * 2.039e12) + 3e-6, rel=1e-12)
    assert seconds * 1e6 == pytest.approx(16.714, abs=1e-3)


def test_qkv_gemm_at_its_shape_efficiency():
    """QKV projection per GPU: [8192, 6144] × [6144, 2304] (3h/tp columns), 2·8192·2304·6144 =
    231,928,233,984 FLOPs. Depth k = 6144; k₀ = e·peak/(e_HBM·HBM) = 0.7·312e12/(0.9·2.039e12)
    = 119.013; e(k) = 0.7·6144/6263.013 = 0.686698. Compute 231.93e9/(312e12·0.686698) =
    1.08251 ms, above its 166,723,584 B / (0.9·2.039e12) = 90.9 µs of memory: 1.08551 ms with
    the 3 µs kernel overhead."""
    qkv = _op("QKV projection")
    assert (qkv.m, qkv.n, qkv.k) == (8192, 2304, 6144)
    k0 = 0.7 * 312e12 / (0.9 * 2.039e12)
    assert k0 == pytest.approx(119.013, abs=1e-3)
    e = gemm_efficiency(6144, PEAK, HBM, P)
    assert e == pytest.approx(0.7 * 6144 / (6144 + k0), rel=1e-12)
    assert e == pytest.approx(0.686698, abs=1e-6)
    flops = 231_928_233_984
    assert qkv.gemm_flops == flops
    seconds = op_seconds(qkv, CLOCK)
    assert seconds == pytest.approx(flops / (PEAK * e) + 3e-6, rel=1e-12)
    assert seconds * 1e3 == pytest.approx(1.08551, abs=1e-5)


def test_sequence_parallel_all_gather_is_latency_plus_bytes():
    """One sequence-parallel all-gather of the layer input over tp 8 on NVLink: each GPU sends
    (7/8)·2·8192·6144 = 88,080,384 B at 0.8 × 300 GB/s = 367.0016 µs, after NCCL's latency
    8.4 µs + 7 ring steps × 3.4 µs = 32.2 µs: 399.2016 µs."""
    sent = 7 / 8 * 2 * 8192 * 6144
    assert sent == 88_080_384
    t = collective_seconds(Collective.ALL_GATHER, 8, sent, LinkTime(NVLINK, True), P)
    assert t * 1e6 == pytest.approx(32.2 + 367.0016, abs=1e-4)


def test_all_reduce_over_the_network_takes_the_tree_latency():
    """1,024 ranks over InfiniBand: a ring would need 2·1023 steps; NCCL's tree 2·log₂1024 = 20
    hops of 14 µs: 8.4 + 280 = 288.4 µs of latency."""
    link = LinkTime(25e9, False)
    t = collective_seconds(Collective.ALL_REDUCE, 1024, 1e6, link, P)
    assert t * 1e6 == pytest.approx(288.4 + 1e6 / (0.96 * 25e9) * 1e6, abs=1e-6)


def test_degree_one_and_no_bytes_cost_nothing():
    link = LinkTime(NVLINK, True)
    assert collective_seconds(Collective.ALL_GATHER, 1, 1e9, link, P) == 0
    assert collective_seconds(Collective.ALL_GATHER, 8, 0, link, P) == 0


def test_memory_bound_op_ignores_the_gemm_efficiency():
    assert memory_seconds(1e9, HBM, P) == memory_seconds(1e9, HBM, P.with_(gemm_efficiency=0.3))


@pytest.mark.parametrize(
    "arch",
    [
        GPT_22B,
        get_model("llama3-70b").model.arch,
        get_model("mixtral-8x7b").model.arch,
        get_model("deepseek-v3").model.arch,
    ],
    ids=["gpt", "gqa-swiglu", "moe", "mla-moe"],
)
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_layer_gemm_flops_are_the_layers_matmul_flops(arch, tp):
    """Σ GEMM FLOPs of a layer's forward over its tp ranks (replicated GEMMs — MLA's
    down-projections, counted once) + the attention core = the layer's forward
    FLOPs of model.flops; the operation inventory and the FLOP count describe one layer. With
    sequence parallelism the router and the experts see each rank's own T/tp tokens."""
    moe = arch.moe is not None
    index = arch.moe.first_k_dense_layers if moe else 0
    s, b = 4096, 2
    x = LayerShape(arch, moe, s, b, tp, sequence_parallel=tp > 1, flash_attention=False)
    replicated = {"Q down-projection", "KV down-projection"}
    total = 0.0
    for op in layer_ops(x):
        if op.kind is OpKind.GEMM:
            total += op.gemm_flops * (1 if op.name in replicated else tp)
    assert total == pytest.approx(layer_forward_flops(arch, index, s, b), rel=1e-9)


@given(
    e=st.floats(0.2, 1.0),
    factor=st.floats(1.01, 3.0),
    recompute=st.sampled_from(list(Recompute)),
)
def test_a_faster_gemm_never_lengthens_a_layer(e, factor, recompute):
    slow = Clock(PEAK, HBM, P.with_(gemm_efficiency=e / factor), LinkTime(NVLINK, True))
    fast = Clock(PEAK, HBM, P.with_(gemm_efficiency=e), LinkTime(NVLINK, True))
    assert layer_time(SHAPE, fast, recompute).seconds <= layer_time(SHAPE, slow, recompute).seconds


@given(nbytes=st.floats(1.0, 1e12), more=st.floats(1.0, 1e12), n=st.integers(2, 4096))
def test_collective_time_grows_with_bytes(nbytes, more, n):
    link = LinkTime(50e9, False)
    for kind in Collective:
        assert collective_seconds(kind, n, nbytes, link, P) <= collective_seconds(
            kind, n, nbytes + more, link, P
        )


def test_recomputation_adds_time_and_overlap_hides_some():
    """Selective recomputation runs the attention core again, full the whole forward; the async
    mechanism hides part of the backward tp traffic that `none` exposes."""
    none, sel, full = (
        layer_time(SHAPE, CLOCK, r) for r in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
    )
    assert none.seconds < sel.seconds < full.seconds
    assert math.isclose(full.recompute_s, full.forward_s)
    bare = Clock(PEAK, HBM, P, LinkTime(NVLINK, True), tp_comm_overlap=TpOverlap.NONE)
    exposed = layer_time(SHAPE, bare, Recompute.NONE)
    assert exposed.tp_s == none.tp_s and none.tp_exposed_s < exposed.tp_exposed_s == exposed.tp_s


def test_expert_all_to_all_leaves_through_each_gpus_own_nic():
    """An all-to-all is not a ring: the ring rule's parallel rings (dp with tp 1 gets a node's
    8 NICs) must not apply to the expert dispatch and combine. ep 256 with tp 1 on 8-GPU H800
    nodes, 400 Gb/s = 50 GB/s NICs, NVLink 200 GB/s per direction: each GPU sends to 255 peers,
    248 of them off-node, and those bytes leave through its own NIC. Over all its bytes the GPU
    moves at 50 × 255/248 = 51.41 GB/s, not a ring's 8 × 50 = 400 capped at 200 GB/s."""
    from trainplan.model.step_time import link_time
    from trainplan.topology.placement import AxisLink

    link = AxisLink("ep", 256, 256, "scale-out", 50e9)
    a2a = link_time(link, 200e9, 8, all_to_all=True)
    ring = link_time(link, 200e9, 8)
    assert a2a is not None and ring is not None and not a2a.scaleup
    assert a2a.bandwidth_bytes_per_s == pytest.approx(50e9 * 255 / 248)
    assert ring.bandwidth_bytes_per_s == 200e9  # 8 rings × 50 GB/s, capped at NVLink
