"""SOAP's state and step as each profile's code runs it (:mod:`trainplan.model.optimizers`,
:mod:`trainplan.model.soap`). Every figure is derived by hand below.

Sources: Megatron-Core ``megatron/core/optimizer/emerging_optimizers.py`` (``--optimizer soap``
is Emerging-Optimizers' registered ``SOAP``; ``_is_nonlinear_or_embedding`` sends the
embedding, output layer and vectors to Adam; the module's tp-local parameters, ``linear_qkv``
fused); Emerging-Optimizers v0.3.0 ``emerging_optimizers/soap/soap.py`` ``SOAP._init_group``
(L = zeros(m, m), R = zeros(n, n), Q_L = eye(m), Q_R = eye(n), FP32, no dimension cap) and
``SOAP.step``; the reference ``soap.py`` (Vyas et al. 2024) ``max_precond_dim = 10000`` for the
``textbook`` profile.
"""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.layer_wise import layer_wise_owners, layer_wise_padding
from trainplan.model.optimizers import (
    layer_matrices,
    matrix_extra_bytes,
    soap_preconditions_every_side,
    stage_state_split,
)
from trainplan.model.soap import SOAP_CARRIED_TENSORS, soap_step_bytes
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model

LLAMA8 = get_model("llama3-8b").model.arch
LLAMA405 = get_model("llama3-405b").model.arch


def test_megatron_soap_preconditions_every_side_of_the_fused_modules():
    """Llama 3 405B (h 16,384, 128 heads, 8 KV heads of 128, f 53,248), one layer on a rank of
    tp 2, as Megatron-Core's SOAP holds it (SOAP._init_group: 8·(m² + n²) B a matrix, every
    side):

    * linear_qkv [(128 + 2·8)·128 / 2, 16,384] = [9,216, 16,384]:
      8·(84,934,656 + 268,435,456) = 2,826,960,896;
    * linear_proj [16,384, 8,192]: 8·(268,435,456 + 67,108,864) = 2,684,354,560;
    * linear_fc1 [2·53,248 / 2, 16,384] = [53,248, 16,384]:
      8·(2,835,349,504 + 268,435,456) = 24,830,279,680;
    * linear_fc2 [16,384, 26,624]: 8·(268,435,456 + 708,837,376) = 7,818,182,656;

    38,159,777,792 B beside the 12 B of master and moments on its 16,384 · (9,216 + 8,192 +
    53,248 + 26,624) = 1,593,835,520 elements. The reference rule (textbook: Q, K, V apart, no
    side over 10,000) keeps Q's 8·8,192², K's and V's 8·512² each, the output's 8·8,192²,
    nothing of fc1 or fc2: 536,870,912 · 2 + 2 · 2,097,152 = 1,077,936,128."""
    assert soap_preconditions_every_side("megatron") and not soap_preconditions_every_side("fsdp2")
    fused = [m.local(2) for m in layer_matrices(LLAMA405, 0, fused_qkv=True)]
    assert fused == [(9216, 16384), (16384, 8192), (53248, 16384), (16384, 26624)]
    per = [matrix_extra_bytes("soap", r, c, "megatron") for r, c in fused]
    assert per == [2_826_960_896, 2_684_354_560, 24_830_279_680, 7_818_182_656]
    elements = 16384 * (9216 + 8192 + 53248 + 26624)
    assert elements == 1_593_835_520
    dense, _ = stage_state_split("soap", LLAMA405, [0], 2, 1, 1, 0, elements, 0, 12, "megatron")
    assert dense == 12 * elements + 38_159_777_792
    dense, _ = stage_state_split("soap", LLAMA405, [0], 2, 1, 1, 0, elements, 0, 12, "textbook")
    assert 8 * 8192**2 == 536_870_912 and 8 * 512**2 == 2_097_152
    assert dense == 12 * elements + 1_077_936_128


def test_llama3_8b_soap_state_on_a_rank_by_hand():
    """Llama 3 8B, dp 4 × tp 2, ZeRO 1 (Megatron-Core's layer-wise distributed optimizer: whole
    parameters, with all their SOAP state, on one data-parallel rank each — ``layer_wise_
    optimizer.py`` ``LayerWiseDistributedOptimizer``). On average over the 4 ranks:
    4,015,263,744 parameters on a GPU (norms whole on each tp rank) at 12 B, and per
    layer 8·(m² + n²) of linear_qkv [3,072, 4,096], linear_proj [4,096, 2,048], fc1
    [14,336, 4,096] and fc2 [4,096, 7,168]: 8·(9,437,184 + 16,777,216 + 16,777,216 + 4,194,304
    + 205,520,896 + 16,777,216 + 16,777,216 + 51,380,224) = 2,701,131,776 B;
    (12 · 4,015,263,744 + 32 · 2,701,131,776) / 4 = 12,045,791,232 + 21,609,054,208 =
    33,654,845,440 B. The busiest rank of the layer-wise packing (its one model chunk cut into
    buckets of 40,000,000 elements, :mod:`trainplan.model.layer_wise`) holds 956,301,312 B
    more: 34,611,146,752 B.

    The textbook profile (ZeRO 1 shards evenly there) (the reference soap.py; norms split over tp: 4,015,130,624
    parameters): Q [2,048, 4,096] 167,772,160, K and V [512, 4,096] 136,314,880 each, the output
    167,772,160, fc1's 4,096 side only 134,217,728, fc2 545,259,520: 1,287,651,328 a layer;
    12,045,391,872 + 32 · 1,287,651,328 / 4 = 22,346,602,496 B."""
    layer = 8 * sum(x * x for x in (3072, 4096, 4096, 2048, 14336, 4096, 4096, 7168))
    assert layer == 2_701_131_776
    base = {"seq_len": 8192, "global_batch_size": 64, "dp": 4, "tp": 2, "optimizer": "soap"}
    case = Case.of(model="llama3-8b", **base).evaluate()
    average = 12 * 4_015_263_744 // 4 + 32 * layer // 4
    assert average == 33_654_845_440
    assert case.stages[0].state.optimizer_bytes == average + 956_301_312 == 34_611_146_752
    ref = 167_772_160 + 2 * 136_314_880 + 167_772_160 + 134_217_728 + 545_259_520
    assert ref == 1_287_651_328
    text = Case.of(model="llama3-8b", framework="textbook", **base).evaluate()
    assert text.stages[0].state.optimizer_bytes == 12 * 4_015_130_624 // 4 + 32 * ref // 4
    assert text.stages[0].state.optimizer_bytes == 22_346_602_496


def test_megatron_soap_step_transient_by_hand():
    """Emerging-Optimizers v0.3.0 ``SOAP.step`` (KL-Shampoo factors, one orthogonal iteration;
    :func:`trainplan.model.soap.soap_step_bytes` lists the phases), for Llama 3 8B's largest
    matrix on a rank of tp 2, fc1 (m = 14,336, n = 4,096; E = 58,720,256 elements; m² =
    205,520,896, n² = 16,777,216), in elements:

    * KL factors: 2m² = 411,041,792; m² + 3n² = 255,852,544; m² + E + 2n² = 297,795,584;
    * sort: 3E + m² + n² = 398,458,880; QR of L: 2E + 4m² + n² = 956,301,312; QR of R:
      2E + 2m² + 4n² = 595,591,168; projection in: 4E + 2m² + 2n² = 679,477,248;
    * Adam: 5E = 293,601,280.

    The most, 956,301,312 · 4 = 3,825,205,248 B, plus the previous parameter's three
    FP32 update tensors, bounded by fc1's 3 · 4 · 58,720,256 = 704,643,072: 4,529,848,320 B
    in the optimizer step (``step_bytes``). Not modelled under textbook (0)."""
    m, n = 14336, 4096
    e, mm, nn = m * n, m * m, n * n
    assert (e, mm, nn) == (58_720_256, 205_520_896, 16_777_216)
    phases = [
        2 * mm, mm + 3 * nn, mm + e + 2 * nn, 3 * e + mm + nn, 2 * e + 4 * mm + nn,
        2 * e + 2 * mm + 4 * nn, 4 * e + 2 * mm + 2 * nn, 5 * e,
    ]  # fmt: skip
    assert phases == [
        411_041_792, 255_852_544, 297_795_584, 398_458_880, 956_301_312, 595_591_168,
        679_477_248, 293_601_280,
    ]  # fmt: skip
    assert soap_step_bytes(m, n, "megatron") == 4 * 956_301_312 == 3_825_205_248
    assert SOAP_CARRIED_TENSORS * 4 * e == 704_643_072
    base = {"seq_len": 8192, "global_batch_size": 64, "dp": 4, "tp": 2, "optimizer": "soap"}
    case = Case.of(model="llama3-8b", **base).evaluate()
    assert case.stages[0].state.step_bytes == 4_529_848_320
    text = Case.of(model="llama3-8b", framework="textbook", **base).evaluate()
    assert text.stages[0].state.step_bytes == 0
    assert Fraction(soap_step_bytes(4096, 4096, "megatron"), 4096**2) == 32  # 4·(4E + 2m² + 2n²)


def test_layer_wise_packing_puts_every_one_layer_chunks_fc1_on_rank_0():
    """Llama 3 405B, dp 4 × tp 4 × pp 32 with 4 model chunks of one layer per pipeline rank,
    ZeRO 1, SOAP: pipeline rank 1's chunks are one bucket each (``dist_utils.py``: no bucketing
    past the first chunk of the first rank), packed with fresh loads per chunk
    (``LayerWiseDistributedOptimizer._compute_per_buffer_param_layout``). A chunk's matrices on
    a rank: linear_qkv [4,608, 16,384] (75,497,472 elements), linear_proj [16,384, 4,096]
    (67,108,864), fc1 [26,624, 16,384] (436,207,616), fc2 [16,384, 13,312] (218,103,808):
    796,917,760 elements; cap 1.3 · 796,917,760 / 4 = 258,998,272. By Newton–Schulz cost
    fc1 first: over the cap on every rank, so the rank with the fewest elements, rank 0 (ties to
    the first); fc2 to the least-loaded rank under the cap, rank 1; linear_qkv rank 2,
    linear_proj rank 3. Every chunk alike: rank 0 holds the four fc1s, each 12 · 436,207,616 +
    8 · (26,624² + 16,384²) = 5,234,491,392 + 7,818,182,656 = 13,052,674,048 B: 52,210,696,192
    B, with its quarter of the norms' Adam state (8 norms of 16,384 at 12 B / 4 = 393,216):
    52,211,089,408 B — against an average of 25,545,801,728. The stage's peak is then
    94,188,470,272 B, over the 83,210,009,600 B capacity (with the padded buckets below,
    116,938,375,168 B). With NCCL's channels by placement and their set-up
    (model/terms/comm_memory.py group_channels) stage 1's communicators go 1,632 → 1,368 MiB,
    276,824,064 B fewer: 116,661,551,104 B. Before: 136 connections of 12 MiB (tp 32, dp 32,
    two pipeline neighbours 2 × 4, the gradient-statistics ring 32, the world 32). Now, on 512
    H100s: the tp 4 ring in a node, 24 channels, 288 + (32 × 3 + 2) × 2 = 484 MiB; the dp 4 ring
    over 16 consecutive ranks, 2 a node, 8 channels, 96 + 52 = 148; Megatron's interleaved
    schedule's two pair communicators (pp stride 16, one rank a node: 4 channels,
    48 + (4 × 3 + 2) × 2 = 76 each), 152; the gradient-statistics and world rings over 64 nodes,
    16 channels, 192 + 100 = 292 each. And the model-parallel group Megatron-LM's train_step
    all-reduces over at every ZeRO stage (model/terms/comm_groups.py ``megatron_rings``: the tp
    block of 4 at each pp stride of 16, 4 a node on 32 nodes, 16 channels): 292 more, 1,660
    MiB, 116,967,735,296 B. NVLink SHARP (model/terms/nvls_memory.py): the tp 4 ring in a node
    2 MiB of credits (NCCL's tuner runs a 4-GPU all-reduce of an H100 node as a ring,
    model/nccl_search.py: no buffers; 16 × 2 × (128 KiB × 8) × 4 = 128 MiB more were counted
    before), the dp, gradient-statistics, world and model-parallel rings (≥ 2 ranks a node)
    2 MiB each: 10 more, 1,670 MiB, 116,978,221,056 B. Transformer Engine's placeholder weight
    gradients (model/terms/dummy_wgrads.py), one per distinct matrix shape above, BF16:
    2 · 796,917,760 = 1,593,835,520 B more, 118,572,056,576 B."""
    shapes = [(4608, 16384), (16384, 4096), (26624, 16384), (16384, 13312)]
    assert sum(m * n for m, n in shapes) == 796_917_760
    assert layer_wise_owners(shapes, 4) == (2, 3, 0, 1)
    fc1 = 12 * 436_207_616 + 8 * (26624**2 + 16384**2)
    assert fc1 == 13_052_674_048
    case = Case.of(
        model="llama3-405b", optimizer="soap", seq_len=8192, global_batch_size=2048, dp=4, tp=4,
        pp=32, virtual_stages=4, recompute="sqrt", schedule="interleaved", zero_stage=1,
    ).evaluate()  # fmt: skip
    assert case.stages[1].state.optimizer_bytes == 4 * fc1 + 393_216 == 52_211_089_408
    assert layer_wise_padding(shapes, 4) == 4 * 436_207_616 - 796_917_760 == 947_912_704
    assert case.stages[1].state.weights_bytes == 2 * (3_187_802_112 + 4 * 947_912_704)
    nvls = 2 + 4 * 2
    assert case.stages[1].communicator_bytes == (484 + 148 + 2 * 76 + 2 * 292 + 292 + nvls) * 2**20
    nccl = (484 + 148 + 2 * 76 + 2 * 292 - 136 * 12) * 2**20
    assert nccl == -276_824_064
    total = 94_188_470_272 + 4 * 947_912_704 * 6 + nccl
    assert total == 116_661_551_104
    assert total + 292 * 2**20 == 116_967_735_296
    assert 116_967_735_296 + nvls * 2**20 == 116_978_221_056
    dummies = 2 * 796_917_760
    assert int(case.peak.total_bytes) == 116_978_221_056 + dummies == 118_572_056_576


def test_soap_search_answers_fit_with_the_state_megatron_keeps():
    """``trainplan search --model llama3-405b --gpus 512 --optimizer soap`` answered dp 8 × tp 2
    × pp 32 (v 4), ZeRO 1, sqrt recomputation, at 74.14 GB of 83.21 while the reference rule
    left fc1 and fc2 unpreconditioned. As Megatron-Core runs SOAP that layout holds, in the
    optimizer step, fc1's step on a rank of tp 2 (m = 53,248, n = 16,384; E = 872,415,232,
    m² = 2,835,349,504, n² = 268,435,456): the QR of L, 2E + 4m² + n² = 13,354,663,936 FP32
    elements, 53,418,655,744 B, and the previous parameter's three update tensors, bounded by
    12·E = 10,468,982,784 B: 63,887,638,528 B; with the layer-wise packing's busiest rank (all
    four fc1s on rank 0), 245.05 GB at its peak, far over capacity (374.30 GB with the padded
    buckets below). dp 4 × tp 4 × pp 32 (v 4)
    holds 94.19 GB (:func:`test_layer_wise_packing_puts_every_one_layer_chunks_fc1_on_rank_0`).
    With the layer-wise optimizer's padded buckets counted (each chunk's buffers ``dp`` × its
    largest shard; three one-layer chunks of that layout pad 3 × 947,912,704 elements, 98.4 GB)
    the answer is dp 4 × tp 4 × pp 32 with 2 model chunks a rank: fc1 [26,624, 16,384] on a
    rank, whose step holds 4·(2E + 4m² + n²) + 12·E = 4·3,976,200,192 + 5,234,491,392 =
    21,139,292,160 B; the busiest stage (31, three layers) holds 27.68 GB of optimizer state,
    74.90 GB of 83.21 at its peak (74.62 with NCCL's placed channels, below). Its buckets: a
    two-layer chunk (the two fc1 on two ranks, each
    fc2 with a linear_qkv and a linear_proj on the others: 4 × 436,207,616 − 1,593,835,520 =
    150,994,944) and a one-layer chunk (947,912,704). The output layer [32,128, 16,384] is not
    in them (``is_managed_by_layer_wise_optimizer``); packed into the one-layer chunk it filled
    the shard that is now padding (782,237,696 then), so the peak is 6 · 165,675,008 B above
    the 73,906,765,824 counted with it. The 8 × 2 × 32 layout's communicators with NCCL's
    channels by placement and their set-up (model/terms/comm_memory.py): the tp 2 ring in a node,
    484 MiB; the dp 8 ring over 16 consecutive ranks, 4 a node on 2 nodes (16 channels),
    192 + 100 = 292; the two interleaved pair communicators, 2 × 76; the gradient-statistics and
    world rings, 292 each: 1,512 MiB, against 136 × 12 = 1,632 before: 125,829,120 B fewer,
    374,300,672,000 → 374,174,842,880 B; with the model-parallel group (the tp 2 block at each
    pp stride of 16, 2 a node on 32 nodes, 8 channels, 96 + 52 = 148 MiB) 1,660 MiB,
    374,330,032,128 B. The search's answer keeps its layout; its stage 31 holds the
    model-parallel ring of the 4 × 4 × 32 layout above, 292 MiB: 74,930,176,000 B.

    Llama 3 8B on 8 GPUs moves from dp 4 × tp 2 (81.85 GB before the padding; its first chunk's
    output layer and embedding, 262,668,288 elements each, pad their buckets to 4× that) to
    dp 2 × tp 2 × pp 2 (v 2), ZeRO 1: 33.65 GB of optimizer state, 71.22 GB of 83.21 at the
    forward-backward peak (71.20 before the fused attention's FP32 softmax statistics, 4·32/2
    heads·8,192 = 524,288 B a layer, were counted: 16 layers × 2.5 micro-batches in flight on
    stage 0, 20,971,520 B). The embedding (262,668,288 elements) is not in the layer-wise
    buckets; packed into the first chunk's last bucket it filled a shard alone, the other shard
    padded to its size: 262,668,288 elements more at 2 + 4 B (72.78 GB then). 71.85 GB with
    NCCL's channels by placement and their set-up (model/terms/comm_memory.py): every group in
    the one node, the tp, dp, gradient-statistics and world rings 24 channels each, 288 +
    (32 × 3 + 2) × 2 = 484 MiB, and the pp 2 neighbour over 32 NVLink channels, 384 + 196 = 580:
    2,516 MiB against 5 × 384 = 1,920 before, 624,951,296 B more. 72.36 GB with the
    model-parallel group (the tp 2 block at the pp stride of 4, ranks 0, 1, 4, 5 in the node:
    484 MiB): 3,000 MiB, 72,355,414,016 B; the answer is unchanged. NVLink SHARP
    (model/terms/nvls_memory.py): a ring of r ranks in an H100 node 2 + 32·r MiB, one across
    nodes with ≥ 2 ranks a node 2 MiB — its 32·r MiB of buffers only where NCCL's tuner runs the
    ring's all-reduce as NVLS, from 6 of an H100 node's GPUs (model/nccl_search.py). The 405B
    answers' stages hold 10 MiB of it (tp 4: 2; dp, gradient statistics, world,
    model-parallel: 2 each; dp 8 × tp 2: tp 2 + 4 × 2 = 10), the 8B answer's 10 (tp 2 and dp 2
    in the node 2 each; the gradient statistics, world and model-parallel rings in the node run
    one-float all-reduces only, which NCCL runs as rings and so never sets their buffers up,
    src/graph/tuning.cc, src/group.cc: 2 each): 72,365,899,776 B, the answer unchanged (138,
    74 and 138 MiB while the tp 4, tp 2 and dp 2 rings held NVLS's buffers)."""
    import trainplan

    big = {"model": "llama3-405b", "optimizer": "soap", "seq_len": 8192}
    old = Case.of(
        **big, global_batch_size=2048, dp=8, tp=2, pp=32, virtual_stages=4, recompute="sqrt",
        schedule="interleaved", zero_stage=1,
    ).evaluate()  # fmt: skip
    e, mm, nn = 53248 * 16384, 53248**2, 16384**2
    assert 2 * e + 4 * mm + nn == 13_354_663_936
    assert old.stages[1].state.step_bytes == 4 * 13_354_663_936 + 12 * e == 63_887_638_528
    # each one-layer chunk's buckets: 8 × fc1's 872,415,232 elements for 1,593,835,520
    padding = 8 * 872_415_232 - 1_593_835_520
    assert old.stages[1].communicator_bytes == (484 + 292 + 2 * 76 + 2 * 292 + 148 + 10) * 2**20
    nccl = (484 + 292 + 2 * 76 + 2 * 292 - 136 * 12) * 2**20
    assert 245_048_999_936 + 4 * padding * 6 + nccl == 374_300_672_000 - 125_829_120
    assert 374_174_842_880 + (148 + 10) * 2**20 == 374_340_517_888
    # Transformer Engine's placeholder weight gradients at tp 2 (model/terms/dummy_wgrads.py):
    # [9,216, 16,384], [16,384, 8,192], [53,248, 16,384], [16,384, 26,624] in BF16
    dummies = 2 * (9216 * 16384 + 16384 * 8192 + 53248 * 16384 + 16384 * 26624)
    assert dummies == 3_187_671_040
    assert int(old.peak.total_bytes) == 374_340_517_888 + dummies == 377_528_188_928
    capacity = 83_210_009_600
    r = trainplan.search(model="llama3-405b", gpus=512, optimizer="soap")
    lay = r.best.estimate.layout
    assert (lay.dp, lay.tp, lay.pp, lay.virtual_stages, lay.zero_stage) == (4, 4, 32, 2, 1)
    e, mm = 26624 * 16384, 26624**2
    assert 4 * (2 * e + 4 * mm + nn) + 12 * e == 21_139_292_160
    assert r.best.estimate.stages[31].state.step_bytes == 21_139_292_160
    assert r.best.estimate.stages[31].state.optimizer_bytes == 27_684_847_616
    padding = 4 * 436_207_616 - 1_593_835_520 + 947_912_704
    assert padding == 150_994_944 + 947_912_704 == 1_098_907_648
    stage = r.best.estimate.stages[31]
    assert stage.state.weights_bytes == 2 * (stage.dense_params + padding)
    layer = [(4608, 16384), (16384, 4096), (26624, 16384), (16384, 13312)]
    assert layer_wise_padding(layer, 4) == 947_912_704
    assert layer_wise_padding([*layer, (32128, 16384)], 4) == 947_912_704 - 165_675_008
    assert 73_906_765_824 + 6 * 165_675_008 == 74_900_815_872
    # NCCL's channels by placement and their set-up: stage 31's communicators as stage 1's of
    # the same layout above (1,632 → 1,368 MiB; its pair communicators reach stage 30 and,
    # interleaved, stage 0): 276,824,064 B fewer
    mp = 292
    assert r.best.estimate.stages[31].communicator_bytes == (
        484 + 148 + 2 * 76 + 2 * 292 + mp + 10
    ) * 2**20  # fmt: skip
    total = 74_900_815_872 - 276_824_064 + mp * 2**20
    assert total == 74_930_176_000
    assert total + 10 * 2**20 == 74_940_661_760
    # Transformer Engine's placeholder weight gradients (model/terms/dummy_wgrads.py) on the
    # last stage at tp 4: the four layer shapes, 1,593,835,520 B, and the output layer
    # [32,128, 16,384] (V padded to 128,512), 1,052,770,304 B: 77.59 GB, the answer unchanged
    dummies = 2 * 796_917_760 + 2 * 32128 * 16384
    assert dummies == 1_593_835_520 + 1_052_770_304 == 2_646_605_824
    peak = int(r.best.estimate.peak.total_bytes)
    assert peak == 74_940_661_760 + dummies == 77_587_267_584 < capacity
    small = trainplan.search(model="llama3-8b", gpus=8, optimizer="soap").best.estimate
    assert (small.layout.dp, small.layout.tp, small.layout.pp, small.layout.zero_stage) == (
        2, 2, 2, 1,
    )  # fmt: skip
    assert small.stages[0].state.optimizer_bytes == 33_654_833_152
    lse = 16 * 5 // 2 * 4 * 32 // 2 * 8192
    assert lse == 20_971_520
    assert small.stages[0].communicator_bytes == (5 * 484 + 580 + 2 * 2 + 3 * 2) * 2**20
    nccl = (4 * 484 + 580 - 5 * 384) * 2**20
    assert nccl == 624_951_296
    total = 72_777_990_144 - 6 * 262_668_288 + lse + nccl
    assert total == 71_847_903_232
    assert total + 484 * 2**20 == 72_355_414_016
    assert 72_355_414_016 + 10 * 2**20 == 72_365_899_776
    # Transformer Engine's placeholder weight gradients on stage 0 at tp 2 (model/terms/
    # dummy_wgrads.py): [3,072, 4,096], [4,096, 2,048], [14,336, 4,096], [4,096, 7,168] in
    # BF16, 218,103,808 B: 72.58 GB, the answer unchanged
    dummies = 2 * 4096 * (3072 + 2048 + 14336 + 7168)
    assert dummies == 218_103_808
    assert int(small.peak.total_bytes) == 72_365_899_776 + dummies == 72_584_003_584
