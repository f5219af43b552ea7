"""Transformer Engine's cuBLAS workspaces beyond the plain one the runtime reserve counts
(``transformer_engine/pytorch/cpp_extensions/gemm.py`` ``get_cublas_workspace``, d0067d0da):
``get_cublas_workspace_size_bytes()`` = 32 MiB + 1 KiB = 33,555,456 B from compute capability 9;
3 of them (``_NUM_MAX_UB_STREAMS``) for the userbuffers GEMMs, 4 (``nvte_get_num_compute_streams``)
for ``general_grouped_gemm`` (GroupedLinear, Megatron-LM's grouped MoE experts). Held for the run
in the caching allocator, so in ``persistent_buffers_bytes`` (both phases, the fit figure)."""

from __future__ import annotations

from dataclasses import replace

from trainplan.model.estimate import stage_memory
from trainplan.model.layout import Layout, Recompute
from trainplan.model.op_time import TpOverlap
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.userbuffers import te_workspace_bytes
from trainplan.model.timing import CostOptions
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

WS = 32 * 1024 * 1024 + 1024
FULL = CostOptions(tp_comm_overlap=TpOverlap.FULL)
DEFAULT = CostOptions()
H100 = get_accelerator("H100-SXM")
TRAINING = TrainingSpec(seq_len=4096, global_batch_size=64)
DENSE = get_model("llama3-8b").model
MOE = get_model("mixtral-8x7b").model
BASE = Layout(
    dp=1, tp=2, pp=2, cp=1, micro_batch_size=1, zero_stage=1, recompute=Recompute.FULL,
    sequence_parallel=True, framework="megatron",
)  # fmt: skip


def _held(model, layout, options=DEFAULT) -> list[int]:
    stages = stage_memory(model, TRAINING, layout, device=H100, options=options)
    return [int(s.persistent_buffers_bytes) for s in stages]


def test_counts_by_hand():
    assert WS == 33_555_456
    assert te_workspace_bytes(True, False) == 3 * WS == 100_666_368
    assert te_workspace_bytes(False, True) == 4 * WS == 134_221_824
    assert te_workspace_bytes(True, True) == 7 * WS == 234_888_192


def test_where_the_code_allocates_them():
    # dense megatron: nothing beyond the plain workspace; userbuffers add 3 on every stage
    # (the last stage also holds the "mpu" output-layer buffer: compare differences)
    dense = _held(DENSE, BASE)
    dense_full = _held(DENSE, BASE, FULL)
    assert [b - a for a, b in zip(dense, dense_full, strict=True)] == [3 * WS, 3 * WS]
    # MoE: 4 for the grouped expert GEMMs at any overlap, 3 more with userbuffers
    moe = _held(MOE, replace(BASE, ep=1))
    moe_full = _held(MOE, replace(BASE, ep=1), FULL)
    assert [b - a for a, b in zip(moe, moe_full, strict=True)] == [3 * WS, 3 * WS]
    # first stage: no output layer, so the workspaces and Transformer Engine's placeholder
    # weight gradients (model/terms/dummy_wgrads.py): Mixtral (h 4,096, 32 heads of 128, 8 KV
    # heads, experts' f 14,336) at tp = etp 2, QKV [3,072, 4,096], proj [4,096, 2,048], the
    # experts' FC1 [14,336, 4,096] and FC2 [4,096, 7,168]: 2·4,096·26,624 = 218,103,808 B
    assert 2 * 4096 * (3072 + 2048 + 14336 + 7168) == 218_103_808
    assert moe[0] == 4 * WS + 218_103_808
    # tp 1: no userbuffers, so no ub workspaces; grouped ones stay (the placeholders at tp 1:
    # [6,144, 4,096], [4,096, 4,096], [28,672, 4,096], [4,096, 14,336], 436,207,616 B)
    assert 2 * 4096 * (6144 + 4096 + 28672 + 14336) == 436_207_616
    tp1 = _held(MOE, replace(BASE, tp=1, sequence_parallel=False), FULL)[0]
    assert tp1 == 4 * WS + 436_207_616
    # other profiles call no Transformer Engine GEMM: the option moves nothing
    for fw in ("deepspeed", "textbook"):
        lay = replace(BASE, framework=fw)
        assert _held(DENSE, lay, FULL) == _held(DENSE, lay)
    assert _held(DENSE, replace(BASE, framework="textbook"), FULL) == [0, 0]


def test_the_search_answer_that_did_not_fit():
    """``trainplan search --model mixtral-8x7b --gpus 16 --gpu B200 --framework megatron
    --set tp_comm_overlap=full --precision fp8 --fp8-recipe mxfp8`` answered dp4 tp2 pp2 ep4
    etp2 interleaved v8, b 1, with a fit figure of 189,674,834,944 of 189,694,999,552 B (20.2 MB
    margin): with 7 workspaces (234,888,192 B) it was 189,909,723,136, over by 214,723,584 B.
    Under MXFP8 the output projection saves the BF16 attention output the kernel keeps and no
    FP8 copy (Megatron-Core ``Attention.__init__``, ``set_save_original_input``), 2,330,722,304 B
    fewer: 187,579,000,832 B, the workspaces still in it; the fused permutation's int32 row map
    (4·S·(2·8 + 1) per MoE layer and micro-batch in flight) adds 37,879,808: 187,616,880,640.
    The fused attention's FP32 softmax statistics (``FusedAttnFunc.forward`` keeps
    ``softmax_lse``), 4·32/2 heads·4,096 = 262,144 B over the same 272 layer micro-batches
    (37,879,808 = 272 × 4·4,096·17/2): 71,303,168 more, 187,688,183,808. NCCL's communicators
    by placement with their channels' set-up (model/terms/comm_memory.py; B200 is NVLink 5, 32
    channels a node, 384 + (32 × 3 + 2) × 2 = 580 MiB a ring): tp, dp and etp rings in the
    node, 3 × 580; the expert all-to-all, 3 NVLink peers × 32 channels, 1,152 + 196 = 1,348;
    the pp neighbour on the other node, 4 channels (one rank a node, NIC 50 GB/s), 48 +
    (4 × 3 + 2) × 2 = 76; the distributed optimizer's gradient-statistics group and the world
    barrier, 16 ranks at 8 a node, 16 × 12 + (16 × 3 + 2) × 2 = 292 each: 3,748 MiB against
    3,120 before (5 rings × 384 + 1,152 + 48): + 628 MiB, 188,346,689,536 B. Megatron-Core's
    MoE groups (model/terms/comm_groups.py): the expert tp·ep group of the token counts'
    all-gather, etp 2 × ep 4 = the node, 580; the tp·cp group of the auxiliary loss's token
    counts (tp 2, apart from the tp group), 580; the MoE metrics' ring on the pp communicator
    (2 ranks, one a node: 4 channels), 48: 4,956 MiB, 1,208 more, 189,613,369,344 B. The
    model-parallel group Megatron-LM's train_step all-reduces over at every ZeRO stage
    (``megatron_rings``: the tp block {0, 1} at the pp stride of 8, ranks 0, 1, 8, 9, 2 a node
    on 2 nodes: 8 channels, 96 + (8 × 3 + 2) × 2 = 148): 5,104 MiB, 189,768,558,592 B. NVLink
    SHARP on a B200 (model/terms/nvls_memory.py; 24 channels): a ring of r ranks in the node
    2 MiB of credits and, where its step runs a collective NCCL gives NVLS (the first one sets
    the buffers up, src/group.cc ncclCollPreconnect), 24 × 2 × (128 KiB × 8) × r = 48·r MiB of
    buffers — none here: NCCL's tuner runs an all-reduce of 2 or 4 GPUs of a B200 node as a
    ring (model/nccl_search.py: NVLS's 2 × min(90 × 0.74 × 1/2 × 2, 90) = 133.2 and 4 × min(99.9,
    90) = 360 GB/s of bus bandwidth against the ring's 16 × 45 = 720), so tp and etp (2) and dp
    (4) hold their credits alone (98, 98 and 194 MiB with the buffers before) — and the rings
    that run only token counts or one float, which NCCL runs as rings (src/graph/tuning.cc):
    tp·cp, tp·ep, gradient statistics, world and model-parallel, 2 each: 16 MiB more (400 with
    the tp, etp and dp buffers, 880 with every ring's), 189,785,335,808 B. Transformer Engine's
    placeholder weight gradients (model/terms/dummy_wgrads.py), one a distinct weight shape,
    QKV [3,072, 4,096], proj [4,096, 2,048], the experts' FC1 [14,336, 4,096] and FC2 [4,096,
    7,168] at tp = etp 2: 218,103,808 B more, 190,003,439,616 B."""
    case = Case.of("mixtral-8x7b", "B200", num_gpus=16, tp_comm_overlap="full",
                   precision="fp8", fp8_recipe="mxfp8")  # fmt: skip
    lay = Layout(dp=4, tp=2, pp=2, ep=4, etp=2, schedule="interleaved", virtual_stages=8,
                 zero_stage=1, framework="megatron")  # fmt: skip
    est = case.evaluate(lay)
    dummies = 2 * 4096 * (3072 + 2048 + 14336 + 7168)
    assert dummies == 218_103_808
    assert int(est.stages[0].persistent_buffers_bytes) == 7 * WS + dummies
    assert 7 * WS == 234_888_192
    assert 189_909_723_136 - 2_330_722_304 == 187_579_000_832
    assert 37_879_808 == 272 * 4 * 4096 * 17 // 2 and 272 * 4 * 32 // 2 * 4096 == 71_303_168
    total = 187_579_000_832 + 37_879_808 + 71_303_168
    assert total == 187_688_183_808
    comms = 3 * 580 + (1_152 + 196) + (48 + 28) + 2 * 292
    assert comms == 3_748 and 5 * 384 + 1_152 + 48 == 3_120
    moe_groups = 580 + 580 + 4 * 12
    nccl = est.peak.communicator_bytes - est.peak.userbuffer_bytes
    nvls = 2 * 2 + 2 + 5 * 2
    assert nccl == (comms + moe_groups + 96 + 52 + nvls) * 2**20 == (5_104 + 16) * 2**20
    assert total + 628 * 2**20 == 188_346_689_536
    assert 188_346_689_536 + 1_208 * 2**20 == 189_613_369_344
    assert 189_613_369_344 + 148 * 2**20 == 189_768_558_592
    assert 189_768_558_592 + nvls * 2**20 == 189_785_335_808
    assert est.peak.reserved_total_bytes == 189_785_335_808 + dummies == 190_003_439_616
