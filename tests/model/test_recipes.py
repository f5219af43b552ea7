"""Training recipes the planner states with their sources (:mod:`trainplan.model.optimizers`,
:mod:`trainplan.model.packing`, :mod:`trainplan.model.context_parallel`): other optimizers'
state and step, packed documents' attention, verl's Ulysses with repeated K/V heads and
sliding-window layers under context parallelism. Every figure is derived by hand below."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.model.attention import AttentionSpan
from trainplan.model.context_parallel import (
    CpKind,
    cp_layer_bytes,
    cp_transient_bytes,
    kv_repeat,
)
from trainplan.model.cp_rules import check_cp_framework, check_cp_kind, window_kv_tokens
from trainplan.model.errors import InputError, LayoutError
from trainplan.model.flops import MfuConvention, step_flops
from trainplan.model.layout import Recompute
from trainplan.model.muon import (
    muon_gather_bytes,
    muon_tp_gathers,
    newton_schulz_bytes,
    newton_schulz_flops,
)
from trainplan.model.optimizers import (
    ParamClass,
    check_optimizer,
    element_bytes,
    layer_matrices,
    matrix_extra_bytes,
    optimizer_step_bytes,
    state_bytes,
)
from trainplan.model.packing import Documents, pack_pair_ratio, packed_pairs
from trainplan.model.params import count_params
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model

LLAMA8 = get_model("llama3-8b").model.arch
assert LLAMA8 is not None

# Llama 3 8B: h 4096, a 32, g 8, d 128, f 14336 (SwiGLU), V 128256, 32 layers, untied.
# Matrices of one layer: Q 4096×4096 = 16,777,216; K and V 1024×4096 = 4,194,304 each;
# O 4096×4096 = 16,777,216; fc1 (gate and up fused) 28672×4096 = 117,440,512;
# fc2 4096×14336 = 58,720,256; in all 218,103,808.
LAYER_MATRIX = 16_777_216 + 2 * 4_194_304 + 16_777_216 + 117_440_512 + 58_720_256
EMBEDDING = 2 * 128_256 * 4096  # input embedding and output layer, 1,050,673,152
VECTORS = 32 * 2 * 4096 + 4096  # two RMSNorm weights per layer and the final norm: 266,240


def test_llama3_8b_matrices_add_up_to_the_checkpoint():
    """32 × 218,103,808 + 1,050,673,152 + 266,240 = 8,030,261,248, the released checkpoint."""
    per_layer = sum(m.rows * m.cols * m.count for m in layer_matrices(LLAMA8, 0))
    assert per_layer == LAYER_MATRIX == 218_103_808
    assert 32 * per_layer + EMBEDDING + VECTORS == count_params(LLAMA8).total == 8_030_261_248


def test_state_bytes_per_optimizer_by_hand():
    """Llama 3 8B, one GPU holding everything (tp 1, no ZeRO), the FP32 master included:

    * Adam: 12 × 8,030,261,248 = 96,363,134,976 B.
    * 8-bit Adam: matrices 4 + 2 + 2·4/256 = 6.03125 B × 6,979,321,856 = 42,094,034,944; the
      embeddings (Hugging Face's Trainer: 32-bit) and norms 12 B × 1,050,939,392 =
      12,611,272,704; in all 54,705,307,648 B (57 % of Adam's).
    * Lion: 8 B × every parameter = 64,242,089,984 B.
    * Muon: matrices 8 B (master + momentum) = 55,834,574,848, the rest AdamW's 12 B =
      12,611,272,704: 68,445,847,552 B.
    * Adafactor: master 4 B everywhere, + 4 B of second moment for the norms (vectors), + per
      matrix a row and a column of FP32: per layer 4·(4096+4096)·2 (Q, O) + 4·(1024+4096)·2
      (K, V) + 4·(28672+4096) + 4·(4096+14336) = 65,536 + 40,960 + 131,072 + 73,728 = 311,296;
      32 × 311,296 = 9,961,472; the embeddings are 2-D too (factored: 4·(128,256 + 4,096) × 2
      = 1,058,816, not counted by this call, which is given them as ``embedding``):
      4 × 8,030,261,248 + 4 × 266,240 + 9,961,472 = 32,132,071,424 B.
    """
    n_matrix = 32 * LAYER_MATRIX
    rest = EMBEDDING + VECTORS

    def state(kind: str) -> Fraction:
        return state_bytes(kind, LLAMA8, range(32), embedding=EMBEDDING, vectors=VECTORS)

    assert state("adam") == 12 * (n_matrix + rest) == 96_363_134_976
    assert n_matrix * Fraction(193, 32) == 42_094_034_944
    assert state("adam-8bit") == 42_094_034_944 + 12 * rest == 54_705_307_648
    assert state("lion") == 8 * 8_030_261_248 == 64_242_089_984
    assert state("muon") == 8 * n_matrix + 12 * rest == 68_445_847_552
    per_layer_factors = 4 * 8192 * 2 + 4 * 5120 * 2 + 4 * 32768 + 4 * 18432
    assert per_layer_factors == 311_296
    assert state("adafactor") == 4 * 8_030_261_248 + 4 * VECTORS + 32 * 311_296
    assert state("adafactor") == 32_132_071_424


def test_soap_preconditioners_by_hand():
    """SOAP keeps, per matrix of m × n, L (m²), R (n²) and their eigenbases, FP32:
    8·(m² + n²) B. Q of Llama 3 8B (4096 × 4096): 8 · 2 · 4096² = 268,435,456 B, 16 B per
    element on top of the 12 of master and moments. Under tp 8 the column-parallel Q is
    512 × 4096 on a rank: 8 · (512² + 4096²) = 136,314,880 B."""
    assert matrix_extra_bytes("soap", 4096, 4096) == 268_435_456
    q = layer_matrices(LLAMA8, 0)[0]
    assert (q.rows, q.cols) == (4096, 4096) and q.local(8) == (512, 4096)
    assert matrix_extra_bytes("soap", *q.local(8)) == 136_314_880
    assert element_bytes("soap", ParamClass.MATRIX) == 12


def test_muon_newton_schulz_and_gathers_by_hand():
    """Newton–Schulz on fc2 (4096 × 14336, m = 4096, n = 14336), 5 iterations of X·Xᵀ (2m²n),
    A·A (2m³) and B·X (2m²n): 5 · (4 · 4096² · 14336 + 2 · 4096³) = 5 · (962,072,674,304 +
    137,438,953,472) = 5,497,558,138,880 FLOPs — about 5.5 ms at 1 PFLOP/s, on every tp rank
    (Megatron-Core's duplicated mode).

    Gathers, per step, for 1,000,000 matrix elements on a GPU (after tp): tp 4 all-gathers
    the FP32 update from 3 others, 12,000,000 B; Megatron's layer-wise optimizer (ZeRO 1, D 8)
    all-reduces instead of reduce-scattering, 7/8 · 4 · 10⁶ = 3,500,000 B more; torchtitan's
    DistMuon (FSDP, D 8) routes each shard to its owner and back, 2 · 7/8 · 10⁶/8 · 4 =
    875,000 B."""
    assert 4 * 4096**2 * 14336 == 962_072_674_304 and 2 * 4096**3 == 137_438_953_472
    assert newton_schulz_flops(4096, 14336) == 5_497_558_138_880
    assert newton_schulz_flops(14336, 4096) == 5_497_558_138_880  # transposed first
    assert muon_gather_bytes("megatron", 1, 8, 4, 1_000_000) == (12_000_000, 3_500_000)
    assert muon_gather_bytes("fsdp2", 3, 8, 1, 1_000_000) == (0, 875_000)
    assert muon_gather_bytes("textbook", 0, 8, 1, 1_000_000) == (0, 0)


def test_muon_gathers_rows_and_transient_by_hand():
    """Llama 3 8B under Megatron-Core's Muon at dp 8 × tp 2, ZeRO 1 (the layer-wise distributed
    optimizer), H100 (NVLink 450 GB/s at 0.8, scale-out 50 GB/s at 0.96).

    Matrix elements on a GPU after tp 2: 32 × 218,103,808 / 2 = 3,489,660,928. Per step and
    rank, the traffic table's Muon rows:

    * dp: the gradient all-reduce beyond the reduce-scatter, 7/8 · 4 · 3,489,660,928 =
      12,213,813,248 B, scale-out; the dp group (stride 2, span 16) has 4 members in each
      8-GPU NVLink domain, so 4 rings leave through 4 NICs (``link_time_of``): 4 · 50 GB/s at
      0.96, 63.61 ms;
    * tp, only with ``muon_tp_mode = duplicated`` (Megatron's default ``blockwise``
      orthogonalises each tp block apart, nothing gathered): the FP32 shards all-gathered from
      the 1 other rank, 1 · 4 · 3,489,660,928 = 13,958,643,712 B over NVLink,
      13,958,643,712 / (450e9 · 0.8) = 38.77 ms.

    These are the seconds the optimizer step already holds (the rows read the same volume).

    The transient, for the largest matrix, fc1 (28,672 × 4,096, 117,440,512 elements):

    * blockwise: its tp block, 14,336 × 4,096 (m = 4,096, n = 14,336), not gathered:
      Newton–Schulz's most, max(6·m·n, 4·m·n + 4·m²) = 6·m·n = 352,321,536 B (the FP32
      normalise beside its BF16 cast; the loop's 4·m·n + 4·m² = 301,989,888);
    * duplicated: the whole matrix (m = 4,096, n = 28,672), gathered: the all-gather's list and
      its ``torch.cat``, FP32, 8·m·n = 939,524,096 B, and 6·m·n = 704,643,072 B:
      1,644,167,168 B."""
    base = {
        "model": "llama3-8b", "seq_len": 8192, "global_batch_size": 64, "dp": 8, "tp": 2,
        "optimizer": "muon",
    }  # fmt: skip
    elements = 32 * LAYER_MATRIX // 2
    assert elements == 3_489_660_928
    for mode in ("blockwise", "duplicated"):
        case = Case.of(**{**base, "muon_tp_mode": mode}).evaluate()
        rows = {r.traffic.axis: r for r in case.traffic if r.optimizer_step}
        assert rows["dp"].traffic.bytes_per_step == Fraction(7, 8) * 4 * elements
        assert rows["dp"].traffic.bytes_per_step == 12_213_813_248
        assert rows["dp"].traffic.group_size == 8 and rows["dp"].link == "scale-out"
        assert rows["dp"].exposed_seconds == pytest.approx(12_213_813_248 / (4 * 50e9 * 0.96))
        # the rows' time is the optimizer step's, not counted again as exposed communication
        plain = sum(r.exposed_seconds for r in case.traffic if not r.optimizer_step)
        assert case.exposed_comm_s == pytest.approx(plain)
        if mode == "blockwise":
            assert "tp" not in rows
            assert case.stages[0].state.step_bytes == 6 * 4096 * 14_336 == 352_321_536
            continue
        assert rows["tp"].traffic.bytes_per_step == 4 * elements == 13_958_643_712
        assert rows["tp"].traffic.group_size == 2 and rows["tp"].link == "nvlink"
        assert rows["tp"].seconds == pytest.approx(13_958_643_712 / (450e9 * 0.8))
        assert case.stages[0].state.step_bytes == 1_644_167_168
    m, n = 4096, 28_672
    assert 8 * m * n == 939_524_096 and 6 * m * n == 704_643_072
    assert newton_schulz_bytes(n, m, "megatron", True) == 1_644_167_168
    assert newton_schulz_bytes(n, m, "megatron", False) == 704_643_072
    assert newton_schulz_bytes(14_336, m, "megatron", False) == 352_321_536
    # the reference (textbook): BF16 loop 8·m·n + 4·m², plus the FP32 gathered matrix 4·m·n
    assert newton_schulz_bytes(n, m, "textbook", True) == 12 * m * n + 4 * m * m


def test_muon_tp_mode_is_megatrons_and_muons():
    """Megatron-Core's ``--muon-tp-mode`` defaults to ``duplicated`` (each tp matrix gathered
    whole) since bb47df5416 (OptimizerConfig.muon_tp_mode, arguments.py); ``blockwise`` gathers
    nothing; its ``distributed`` is refused (not modelled); the other profiles orthogonalise
    whole matrices; the mode is refused elsewhere and without Muon."""
    assert muon_tp_gathers("megatron") is True
    assert muon_tp_gathers("megatron", "duplicated") is True
    assert muon_tp_gathers("megatron", "blockwise") is False
    assert muon_tp_gathers("fsdp2") is True and muon_tp_gathers("textbook") is True
    with pytest.raises(LayoutError, match="^muon_tp_mode: duplicated is Megatron-Core's option"):
        muon_tp_gathers("fsdp2", "duplicated")
    with pytest.raises(InputError, match="^muon_tp_mode: 'distributed' .* is not modelled"):
        Case.of("llama3-8b", dp=8, optimizer="muon", muon_tp_mode="distributed")
    with pytest.raises(InputError, match="^muon_tp_mode: 'rowwise' is not one of"):
        Case.of("llama3-8b", dp=8, optimizer="muon", muon_tp_mode="rowwise")


def test_optimizer_step_bytes_follow_the_state():
    """The step reads and writes its state, reads the FP32 gradient (4), writes the BF16
    weight (2), and clips and zeroes the gradient (8): Adam 2·12 + 14 = 38 B per element (as
    ``adam_step_bytes``), Lion and Muon 2·8 + 14 = 30, 8-bit Adam 2·193/32 + 14 = 26.0625."""
    assert optimizer_step_bytes(12, 2) == 38
    assert optimizer_step_bytes(element_bytes("lion", ParamClass.MATRIX), 2) == 30
    assert optimizer_step_bytes(element_bytes("adam-8bit", "matrix"), 2) == Fraction(417, 16)


@pytest.mark.parametrize(
    ("kind", "framework", "zero", "message"),
    [
        ("adam-8bit", "megatron", 1, "optimizer: adam-8bit does not run under megatron"),
        ("adafactor", "fsdp2", 3, "optimizer: adafactor does not run under fsdp2"),
        ("soap", "deepspeed", 1, "optimizer: soap does not run under deepspeed"),
        ("muon", "deepspeed", 2, "optimizer: muon does not run under deepspeed"),
    ],
)
def test_optimizers_are_refused_by_name(kind, framework, zero, message):
    with pytest.raises(LayoutError, match=message):
        check_optimizer(kind, framework, zero)


def test_optimizers_run_where_their_frameworks_offer_them():
    for kind, fw, z in [("muon", "megatron", 1), ("muon", "fsdp2", 3), ("lion", "deepspeed", 2)]:
        check_optimizer(kind, fw, z)
    for kind in ("adam", "adam-8bit", "adafactor", "lion", "muon", "soap"):
        check_optimizer(kind, "textbook", 0)


# --- packed documents -------------------------------------------------------------------------


def test_packed_pairs_follow_the_sum_of_squares():
    """Packs of s = 8,192 tokens.

    * Documents of 2,048 tokens, four per pack: the full score matrix's count is
      Σ lᵢ² = 4 · 2,048² = 16,777,216 against 8,192² = 67,108,864: a quarter. Causal:
      4 · 2,048·2,049/2 = 8,392,704 against 8,192·8,193/2 = 33,558,528.
    * Mean 2,048 and spread 1,024 (half the documents 1,024, half 3,072): per pack
      s·E[l²]/E[l] = 8,192 · (1,024² + 3,072²)/2 / 2,048 = 8,192 · 5,242,880 / 2,048 =
      20,971,520 — 5/16 of s².
    * Documents of 20,000 tokens: cut into two packs of 8,192 and a remainder of 3,616, so a
      pack holds s·(2·8,192² + 3,616²)/20,000 = 8,192 · 147,293,184/20,000 pairs.
    """
    g = AttentionSpan.GLOBAL
    four = Documents.mean_spread(2048)
    assert packed_pairs(g, 8192, None, False, four) == 16_777_216
    assert pack_pair_ratio(g, 8192, None, False, four) == Fraction(1, 4)
    assert packed_pairs(g, 8192, None, True, four) == 8_392_704
    spread = Documents.mean_spread(2048, 1024)
    assert spread.lengths == (1024, 3072)
    assert packed_pairs(g, 8192, None, False, spread) == 20_971_520
    assert pack_pair_ratio(g, 8192, None, False, spread) == Fraction(5, 16)
    long = Documents.histogram([(20_000, 1)])
    assert 2 * 8192**2 + 3616**2 == 147_293_184
    assert packed_pairs(g, 8192, None, False, long) == Fraction(8192 * 147_293_184, 20_000)


def test_packed_documents_under_a_window():
    """A sliding window of 1,024 over documents of 2,048, causal: a document computes
    1,024·1,025/2 + (2,048 − 1,024)·1,024 = 524,800 + 1,048,576 = 1,573,376 pairs, four per
    pack 6,293,504, against the whole pack's 524,800 + 7,168·1,024 = 7,864,832."""
    local = AttentionSpan.LOCAL
    docs = Documents.mean_spread(2048)
    assert packed_pairs(local, 8192, 1024, True, docs) == 4 * 1_573_376 == 6_293_504
    assert pack_pair_ratio(local, 8192, 1024, True, docs) == Fraction(6_293_504, 7_864_832)


def test_mfu_both_ways_as_megatrons_counter():
    """Megatron's convention on a GPT layer (h 8, 2 heads, f 32, V 16, 2 layers), s 8, B 3,
    documents of 4 tokens (two per pack), no causal halving: per layer forward 24·B·s·h² +
    4·B·Σlᵢ²·h; the pack's own count has s² = 64 where the documents have Σ lᵢ² = 32.
    Model FLOPs 3 · (2 · (24·3·8·64 + 4·3·P·8) + 2·3·8·8·16): P = 32 → 3 · (2 · (36,864 +
    3,072) + 6,144) = 258,048; P = 64 → 3 · (2 · (36,864 + 6,144) + 6,144) = 276,480. The MFU
    of a counter that takes the pack for one sequence is 276,480/258,048 = 1.0714 × the true
    one."""
    from trainplan.model.specs import Architecture

    gpt = Architecture(
        num_layers=2, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16
    )
    docs = Documents.mean_spread(4)
    f = step_flops(gpt, 0, 8, 3, Recompute.NONE, MfuConvention.MEGATRON, docs=docs)
    assert f.model_flops == 258_048
    assert f.pack_model_flops == 276_480
    plain = step_flops(gpt, 0, 8, 3, Recompute.NONE, MfuConvention.MEGATRON)
    assert plain.model_flops == 276_480 and plain.pack_model_flops is None


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Documents.mean_spread(100, 200), "mean 100 minus spread 200 must be at least 1"),
        (lambda: Documents.histogram([]), "document_lengths: give lengths"),
        (lambda: Documents.histogram([(0, 1)]), "document_lengths: length 0 must be"),
        (lambda: Documents.histogram([(10, 0)]), "document_lengths: weight 0 must be above 0"),
    ],
)
def test_document_lengths_refused_in_one_line(make, message):
    with pytest.raises(InputError, match=message):
        make()


# --- verl's Ulysses with repeated K/V heads ---------------------------------------------------


def test_ulysses_kv_repeat_rule_and_bytes():
    """Llama 3 8B has 8 K/V heads: Transformer Engine's Ulysses refuses cp 16 (16 does not
    divide 8); verl's repeats each K/V head 16 // 8 = 2 times and runs it.

    Bytes of one layer's head all-to-alls at cp 16, tp 1, S = 2,048 tokens on a rank, β = 2:
    Q = O = 2·2,048·4,096 = 16,777,216; K + V = 2·2,048·2·1,024 = 8,388,608, repeated twice
    16,777,216. Forward Q + 2·KV + O, backward Q + 2·KV + 2·O, each × 15/16:
    15/16 · (2·Q + 2·(2·KV) + 3·O) = 15/16 · 7 · 16,777,216 = 15/16 · 117,440,512 =
    110,100,480 B. The exchange's buffers: 2·(Q + 2·KV) = 67,108,864 B."""
    with pytest.raises(LayoutError, match="cp: ulysses splits the heads over 16 ranks"):
        check_cp_kind(CpKind.ULYSSES, 16, None, 1, LLAMA8)
    check_cp_kind(CpKind.ULYSSES_KV_REPEAT, 16, None, 1, LLAMA8)
    assert kv_repeat(CpKind.ULYSSES_KV_REPEAT, 16, 1, LLAMA8) == 2
    assert kv_repeat(CpKind.ULYSSES_KV_REPEAT, 4, 1, LLAMA8) == 1
    assert kv_repeat(CpKind.ULYSSES, 16, 1, LLAMA8) == 1
    per_layer = cp_layer_bytes(LLAMA8, 1, 16, 1, 2048, 2, False, 2)
    assert per_layer == Fraction(15, 16) * 117_440_512 == 110_100_480
    plain = cp_layer_bytes(LLAMA8, 1, 16, 1, 2048, 2, False, 1)
    assert per_layer - plain == Fraction(15, 16) * 2 * 8_388_608
    assert cp_transient_bytes(LLAMA8, 1, 16, False, 1, 2048, 2, 2, 0, 0) == 67_108_864  # verl's


def test_ulysses_kv_repeat_refusals():
    """verl's rule: cp divides the query heads and divides or is a multiple of the K/V heads:
    on Llama 3 8B (32 and 8) cp 64 does not divide 32; on a model of 24 query and 8 K/V heads
    cp 12 divides 24 but is neither a multiple nor a divisor of 8. Under Megatron-Core (TE's
    all-to-all) and DeepSpeed the flavour is refused by name."""
    from trainplan.model.specs import Architecture

    with pytest.raises(LayoutError, match="does not divide num_attention_heads / tp = 32 / 1"):
        check_cp_kind(CpKind.ULYSSES_KV_REPEAT, 64, None, 1, LLAMA8)
    odd = Architecture(
        num_layers=1, hidden_size=3072, num_attention_heads=24, num_kv_heads=8,
        ffn_hidden_size=8192, vocab_size=16,
    )  # fmt: skip
    with pytest.raises(LayoutError, match="num_kv_heads / tp = 8 / 1 = 8 to be a multiple"):
        check_cp_kind(CpKind.ULYSSES_KV_REPEAT, 12, None, 1, odd)
    for fw in ("megatron", "deepspeed"):
        with pytest.raises(LayoutError, match=f"cp_kind: ulysses-kv-repeat is verl's.*{fw}"):
            check_cp_framework(CpKind.ULYSSES_KV_REPEAT, 16, fw, LLAMA8)
    check_cp_framework(CpKind.ULYSSES_KV_REPEAT, 16, "fsdp2", LLAMA8)


# --- sliding windows under context parallelism ------------------------------------------------


def test_window_needs_only_the_neighbours_keys():
    """s = 32,768 over cp 4: chunks of c = 4,096, rank i holds chunks i and 7 − i. A window of
    4,096 needs the 4,095 keys before each chunk; rank 0 (chunks 0 and 7) needs 0 + 4,095,
    rank 1 (1 and 6) 4,095 + 4,095 = 8,190, rank 3 (3 and 4) 4,095 + 0 (chunk 4's predecessor
    is its own chunk 3). The ring brings (cp − 1)·s/cp = 24,576 tokens' K/V: a windowed layer
    needs a third of it. A window wider than the sequence needs the whole ring."""
    assert window_kv_tokens(32768, 4, 4096) == 8190
    assert window_kv_tokens(32768, 4, 1 << 20) == 24_576


def test_transformer_engine_refuses_the_ring_on_windowed_layers():
    """Gemma 3 has sliding-window layers: Transformer Engine's ``attn_forward_func_with_cp``
    asserts that sliding-window attention runs with ``all_gather`` or ``a2a`` only."""
    gemma = get_model("gemma3-27b").model.arch
    with pytest.raises(LayoutError, match="cp_kind: ring on a model with sliding-window layers"):
        check_cp_framework(CpKind.RING, 2, "megatron", gemma)
    with pytest.raises(LayoutError, match="cp_kind: a2a\\+p2p on a model with sliding-window"):
        check_cp_framework(CpKind.HYBRID, 4, "megatron", gemma)
    check_cp_framework(CpKind.ALL_GATHER, 2, "megatron", gemma)
    check_cp_framework(CpKind.PYTORCH_ALLGATHER, 2, "fsdp2", gemma)
    check_cp_framework(CpKind.RING, 2, "megatron", LLAMA8)  # no window, no rule
