"""Published layouts checked by hand as a practitioner checks them, each ``trainplan`` call its own
process (:mod:`tests.cli_runs`).

Hand derivations (every matrix, norm and embedding counted; β = 2 B):

* DeepSeek-V3 (arXiv 2412.19437 §2.1, §4.2 and its config.json: h 7168, 128 heads, MLA q rank
  1536, kv rank 512, head dims 128 + 64 (RoPE) and v 128, 256 routed + 1 shared expert of 2048,
  top-8, first 3 layers dense with f 18432, V 129280, one MTP module) on the paper's layout
  (§3.2: 2,048 H800, pp 16, ep 64, ZeRO-1, DualPipe; dp 128, tp 1), s 4096, b 1, B 15,360, so
  m = 15360 / 128 = 120, under ``textbook`` (the only profile that runs DualPipe):

  - MLA attention 7168·1536 + 1536 + 1536·128·192 + 7168·576 + 512 + 512·128·256 + 128·128·7168
    = 187,107,328; two norms 14,336; an expert 3·7168·2048 = 44,040,192; the router 256·7168
    and its 256 routing biases (§2.1.2's b_i, a parameter of the released model) = 1,835,264; a
    dense MLP 3·7168·18432 = 396,361,728. A MoE layer's dense part (attention,
    norms, shared expert, router) 232,997,120; a dense layer 583,483,392.
  - The 61 layers in 16 stages [3, 3, 4 × 12, 3]; DualPipe puts stages r and 15 − r on rank r
    (two copies of every stage, DeepSeek-V3 Table 2). Rank 2 holds stages 2 and 13: 8 MoE
    layers, 8 · 232,997,120 = 1,863,976,960 dense and 8 · 4 · 44,040,192 = 1,409,286,144 routed
    parameters (256 / ep 64 = 4 experts a rank). Weights 2 B: 6,546,526,208 B; ZeRO-1's
    optimizer 12 B ÷ D, D = dp = 128 dense and dp / ep = 2 routed:
    12 · (1,863,976,960 / 128 + 1,409,286,144 / 2) = 8,630,464,704 B.
  - Expert all-to-all: a MoE layer sends k·S·h·β·(ep − 1)/ep = 8·4096·7168·2·63/64 = 462,422,016
    B each way (dispatch, combine), forward and backward: 4 × that a layer and micro-batch. Each
    of the 120 micro-batches passes rank 2 through 4 MoE layers (one of its two stages):
    480 · 4 · 462,422,016 = 887,850,270,720 B.
  - Pipeline: one activation forward and one gradient backward of s·b·h·β = 58,720,256 B per
    micro-batch: 120 · 2 · 58,720,256 = 14,092,861,440 B; and DualPipe's mirror ranks' gradient
    all-reduce once a step (rank r and rank 15 − r hold the same two stages,
    deepseek-ai/DualPipe examples/example_dualpipe.py sums their gradients): over 2 ranks each
    sends 2 · 1/2 of rank 0's BF16 gradients, its P = 4,638,585,856 dense (below) and
    704,643,072 routed parameters, 2 · 5,343,228,928 = 10,686,457,856 B: 24,779,319,296 B.
  - Data parallel (ZeRO-1 textbook: a reduce-scatter and an all-gather of β·P once a step, each
    (D − 1)/D): rank 0 holds the most dense parameters, stages 0 and 15: the embedding and the
    output layer 2 · 129280 · 7168 = 1,853,358,080, the final norm 7,168, 3 dense layers
    1,750,450,176, 3 MoE layers' dense parts 698,991,360 and the MTP module (two norms 14,336,
    its projection 2 · 7168² = 102,760,448, one MoE layer's dense part, its head norm 7,168:
    335,779,072): P = 4,638,585,856, 2 · 2 · 127/128 · P = 18,409,387,616 B. Its routed
    experts, 4 MoE layers (3 and the MTP's) of 4 experts, 704,643,072 parameters over the
    dp / ep = 2 replicas: 2 · 2 · 1/2 · 704,643,072 = 1,409,286,144 B.

* Qwen3-235B-A22B (config.json: 94 layers, h 4096, 64 / 4 heads of 128, 128 experts of 1536,
  QK-norm, V 151936 untied) at tp 4, ep 8, dp 16 under ``megatron``: a layer's attention
  2 · 4096 · 8192 + 2 · 4096 · 512 = 71,303,168 ÷ tp, the router 128 · 4096 = 524,288 and norms
  2 · 4096 + 2 · 128 whole on every tp rank (Megatron-Core's TopKRouter weight and the norms are
  not tp-split): 18,358,528 a layer, × 94 = 1,725,701,632; the vocabulary padded to 128 · tp =
  512, 152,064 rows, embedding and output 2 · 152064 · 4096 / 4 = 311,427,072, final norm 4,096:
  2,037,132,800 dense; experts 94 · 128 · 3 · 4096 · 1536 / (tp · ep = 32) = 7,096,762,368.
  Weights 2 B · 9,133,895,168; the distributed optimizer's 12 B over D = 16 dense and
  16 / 8 = 2 routed: 12 · (2,037,132,800 / 16 + 7,096,762,368 / 2) = 44,108,423,808 B.

* Korthikanti et al. 2022 Table 5, 175B (L 96, h 12288, s 2048, B 64, 64 A100s at 312 TFLOP/s),
  selective recomputation, 13.75 s an iteration: model FLOPs per token 6 · 175e9 + PaLM's
  12 · 96 · 12288 · 2048 = 1,078,991,029,248; MFU = that · 131,072 / (312e12 · 64 · 13.75) =
  51.5 % (the paper: 51.4 %). Selective recomputation re-runs QKᵀ and scores·V forward,
  4 · s · h per token and layer: 4 · 2048 · 12288 · 96 = 9,663,676,416; HFU 52.0 %. The paper
  prints 52.8 %: its Appendix A hardware formula 72·B·L·s·h²·(1 + s/(3h) + V/(12hL)) counts
  that term three times (docs/concepts/conventions.md, "MFU from a measurement").
"""

from __future__ import annotations

import json
from fractions import Fraction

from tests.cli_runs import run_many

DSV3 = (
    "evaluate --model deepseek-v3 --gpu H800 --framework textbook --tp 1 --pp 16 --dp 128 "
    "--ep 64 --zero 1 --schedule dualpipe --seq-len 4096 --micro-batch 1 --global-batch 15,360 "
    "--json"
).split()
QWEN3 = (
    "evaluate --model qwen3-235b-a22b --tp 4 --ep 8 --dp 16 --seq-len 4096 --global-batch 1024 "
    "--json"
).split()
KORTHIKANTI = (
    "mfu --params 175B --layers 96 --hidden 12288 --seq-len 2048 --tokens 131,072 "
    "--step-seconds 13.75 --peak-tflops 312 --chips 64 --attention --recompute selective --json"
).split()

MLA = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128**2 * 7168
EXPERT = 3 * 7168 * 2048
MOE_DENSE = MLA + 2 * 7168 + EXPERT + 256 * 7168 + 256
DENSE_LAYER = MLA + 2 * 7168 + 3 * 7168 * 18432


def _runs() -> dict[str, dict]:
    done = run_many({"dsv3": DSV3, "qwen3": QWEN3, "korthikanti": KORTHIKANTI})
    for name, d in done.items():
        assert d.returncode == 0, (name, d.stderr)
    return {name: json.loads(d.stdout) for name, d in done.items()}


def test_published_layouts_match_the_hand_derivations():
    runs = _runs()
    assert (MLA, MOE_DENSE, DENSE_LAYER) == (187_107_328, 232_997_120, 583_483_392)

    ds = runs["dsv3"]
    dense, routed = 8 * MOE_DENSE, 8 * 4 * EXPERT
    assert ds["memory"]["weights_bytes"] == 2 * (dense + routed) == 6_546_526_208
    assert ds["memory"]["optimizer_bytes"] == 12 * (dense // 128 + routed // 2) == 8_630_464_704
    traffic = {t["axis"]: t["bytes_per_step"] for t in ds["traffic"]}
    each_way = Fraction(8 * 4096 * 7168 * 2 * 63, 64)
    assert traffic["ep"] == 480 * 4 * each_way == 887_850_270_720
    sends = 120 * 2 * 4096 * 7168 * 2
    mtp = 2 * 7168 + 2 * 7168**2 + MOE_DENSE + 7168
    rank0 = 2 * 129280 * 7168 + 7168 + 3 * DENSE_LAYER + 3 * MOE_DENSE + mtp
    assert rank0 == 4_638_585_856 and 4 * 4 * EXPERT == 704_643_072
    mirror = 2 * (rank0 + 4 * 4 * EXPERT)
    assert (sends, mirror) == (14_092_861_440, 10_686_457_856)
    assert traffic["pp"] == sends + mirror == 24_779_319_296
    assert traffic["dp"] == Fraction(2 * 2 * 127, 128) * rank0 == 18_409_387_616
    assert traffic["edp"] == 2 * 2 * Fraction(1, 2) * 4 * 4 * EXPERT == 1_409_286_144

    qw = runs["qwen3"]
    layer = (2 * 4096 * 8192 + 2 * 4096 * 512) // 4 + 128 * 4096 + 2 * 4096 + 2 * 128
    q_dense = 94 * layer + 2 * 152064 * 4096 // 4 + 4096
    q_experts = 94 * 128 * 3 * 4096 * 1536 // 32
    assert (q_dense, q_experts) == (2_037_132_800, 7_096_762_368)
    assert qw["memory"]["weights_bytes"] == 2 * (q_dense + q_experts)
    assert qw["memory"]["optimizer_bytes"] == 12 * (q_dense // 16 + q_experts // 2)

    k = runs["korthikanti"]
    per_token = 6 * 175 * 10**9 + 12 * 96 * 12288 * 2048
    assert k["model_flops_per_token"] == per_token == 1_078_991_029_248
    mfu = Fraction(per_token * 131_072) / (312 * 10**12 * 64 * Fraction(1375, 100))
    assert round(k["mfu"], 12) == round(float(mfu), 12) and f"{k['mfu']:.1%}" == "51.5%"
    recomputed = 4 * 2048 * 12288 * 96
    assert round(k["hfu"], 12) == round(float(mfu * (1 + Fraction(recomputed, per_token))), 12)
    assert f"{k['hfu']:.1%}" == "52.0%"
