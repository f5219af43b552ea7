"""Megatron-Core's expert MLP transients in the MoE forward working set, derived by hand from
Megatron-LM d98e8a64dd ``moe/experts.py`` ``TEGroupedMLP.forward`` and Transformer Engine
d0067d0da ``module/grouped_linear.py`` ``_GroupedLinear.forward``, ``module/fp8_padding.py``,
``module/fp8_unpadding.py`` (model/moe_working_set.py ``ExpertMlp``, ``_experts_peak``)."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.layout import Layout
from trainplan.model.moe_run import Dispatcher, MoERun
from trainplan.model.moe_working_set import ExpertMlp, megatron_forward_working_set
from trainplan.model.terms.moe_working import expert_mlp
from trainplan.optimizer.case import Case

# Mixtral-8x7B: h 4,096, f_e 14,336, k 2, 8 experts; s 32,768, b 2: S = 65,536 tokens a rank
H, F, K = 4096, 14336, 2
S = 2 * 32768
U = 2 * K * S * H  # β·k·S·h = 1,073,741,824


def test_mixtral_fp8_fc2_point():
    """ep 8 (one local expert), delayed scaling on H100. Held by the caller: the permuted tokens
    and the all-to-all output, 2U (FC1 saves an FP8 copy). Padding to 16 rows: R = k·S + 15 =
    131,087 rows. At FC2: the padded input 2·R·h = 1,073,864,704, the BF16 activation output
    2·R·f_e = 3,758,526,464, FC2's row-wise FP8 copy R·f_e = 1,879,263,232 and FC2's output
    1,073,864,704: 9,933,002,752 B, against the combine's 4U = 4,294,967,296 B. The unpadding
    point (the row-wise copy freed, the unpadded copy U made) is 9,127,481,344 B."""
    R = K * S + 15
    assert R == 131_087
    mlp = ExpertMlp(ffn=F, fp8_rowwise_bytes=Fraction(1), pad_align=16)
    got = megatron_forward_working_set(H, K, Fraction(S), 2, 8, 1, 1, True, False, mlp)
    assert got == 2 * U + 2 * R * H + 2 * R * F + R * F + 2 * R * H == 9_933_002_752
    # no row-wise copy (a per-tensor recipe on Blackwell): the unpadding point is the larger
    mlp = ExpertMlp(ffn=F, pad_align=16)
    got = megatron_forward_working_set(H, K, Fraction(S), 2, 8, 1, 1, True, False, mlp)
    assert got == 2 * U + 2 * R * H + 2 * R * F + 2 * R * H + U == 9_127_481_344
    # the combine's figure as before where the experts hold nothing of their own
    assert megatron_forward_working_set(H, K, Fraction(S), 2, 8, 1, 1, True, False) == 4 * U


def test_mixtral_fp8_former_answer_does_not_fit():
    """The search's former answer for Mixtral-8x7B FP8 on 64 H100 (dp 64 ep 8, ZeRO-3, full
    recomputation, b 2, s 32,768; 82.65 of 83.21 GB): the MoE forward working set is the FC2
    point above on top of the recompute transient, 9,933,002,752 − 4U = 5,638,035,456 B more
    than the 4U counted before: 88.28 GB, over the H100's 83.21; the recomputed layer's fused
    attention keeps its FP32 softmax statistics, 4·32 heads·2·32,768 = 8,388,608 B more: 88.29 GB
    (88,293,108,864 B). With NCCL's channels by placement and their set-up
    (model/terms/comm_memory.py group_channels): the dp 64 ring over 8 nodes, 16 channels,
    192 + 100 = 292 MiB; the all-to-all's 7 NVLink peers × 32 channels × 12 MiB = 2,688 MiB and
    the ep communicator's set-up of 32 channels, (32 × 3 + 2) × 2 = 196; the expert dp ring (on
    the dp placement), the gradient-statistics and world rings, 292 each: 4,052 MiB, against
    384 + 2,688 + 3 × 384 = 4,224 before, 180,355,072 B fewer: 88,112,753,792 B, 88.11 GB,
    still over. Megatron-Core's MoE groups placed as they lie (model/terms/comm_groups.py): the
    expert dp ring's 8 ranks at stride etp·ep = 8, one a node, 4 channels, 48 + 28 = 76 (not
    292); the expert tp·ep group of the token counts' all-gather, the 8 ep ranks in a node, 484:
    4,320 MiB, 268 MiB more: 88,393,772,160 B. NVLink SHARP (model/terms/nvls_memory.py): the
    tp·ep ring of 8 in a node 2 MiB of credits (its token counts' all-gather runs as a ring, so
    NCCL never sets up its 256 MiB of NVLS buffers), the dp, gradient-statistics and world rings
    (8 a node) 2 each: 8 MiB more, 88,402,160,768 B. Transformer Engine's placeholder weight
    gradients (model/terms/dummy_wgrads.py) at tp = etp 1: QKV [6,144, 4,096], proj [4,096,
    4,096], the experts' FC1 [28,672, 4,096] and FC2 [4,096, 14,336], 436,207,616 B, and the
    output layer [32,000, 4,096], 262,144,000 B: 698,351,616 B more, 89,100,512,384 B."""
    layout = Layout(framework="megatron", dp=64, ep=8, zero_stage=3, recompute="full",
                    micro_batch_size=2)  # fmt: skip
    case = Case.of("mixtral-8x7b", "H100-SXM", layout, precision="fp8", seq_len=32768,
                   global_batch_size=128)  # fmt: skip
    stage = case.evaluate().stages[0]
    acts = stage.activations
    assert acts.moe_forward_bytes == acts.recompute_transient_bytes + 9_933_002_752
    nvls = 4 * 2
    assert stage.communicator_bytes == (292 + 2688 + 196 + 76 + 2 * 292 + 484 + nvls) * 2**20
    assert 88_293_108_864 - (4224 - 4052) * 2**20 == 88_112_753_792
    assert 88_112_753_792 + 268 * 2**20 == 88_393_772_160
    assert 88_393_772_160 + nvls * 2**20 == 88_402_160_768
    dummies = 2 * 4096 * (6144 + 4096 + 28672 + 14336) + 2 * 32000 * 4096
    assert dummies == 436_207_616 + 262_144_000 == 698_351_616
    assert stage.total_bytes == 88_402_160_768 + dummies == 89_100_512_384


def test_recipes_and_dispatchers():
    """What the profile reads of the recipe, the part and the dispatcher: MXFP8 pads to 32 rows
    and its row-wise copy carries one scale byte per 32 elements; blockwise one FP32 scale per
    128 elements; the per-tensor recipes on B200 keep one FP8 copy (saved): no row-wise copy, but
    one under ``moe_act`` (row-wise only, the BF16 input saved instead); HybridEP pads in its
    dispatch: no padded copies; the expert-TP group splits f_e."""
    mixtral = Case.of("mixtral-8x7b", "H100-SXM", Layout(dp=8, ep=8)).model.arch

    def mlp(recipe, dispatcher="alltoall", keeps=True, act=False, etp=1):
        case = Case.of("mixtral-8x7b", "H100-SXM", Layout(dp=8, ep=8), precision="fp8",
                       fp8_recipe=recipe, moe_run=MoERun(dispatcher=Dispatcher(dispatcher)))  # fmt: skip
        ctx = type("Ctx", (), {"fp8_linear_inputs": True})()
        return expert_mlp(mixtral, case.training, ctx, etp, keeps, act)

    assert mlp("mxfp8") == ExpertMlp(ffn=F, fp8_rowwise_bytes=Fraction(33, 32), pad_align=32)
    assert mlp("blockwise").fp8_rowwise_bytes == 1 + Fraction(4, 128)
    assert mlp("delayed", keeps=False).fp8_rowwise_bytes == 0
    assert mlp("tensorwise", keeps=False, act=True).fp8_rowwise_bytes == 1
    assert mlp("delayed", dispatcher="hybridep").pad_align == 0
    assert mlp("delayed", dispatcher="deepep").pad_align == 16
    assert mlp("delayed", etp=2).ffn == F // 2


def test_bf16_moe_act_keeps_the_activation_output_until_fc2():
    """BF16 with the ``moe_act`` recompute module, Mixtral at s 8,192 b 1 (S = 8,192), ep 8:
    the caller holds the permuted tokens U (FC1 saves the all-to-all output); FC2's input, saved
    but released after FC2, is alive beside FC2's output: U + 2·k·S·f_e + U = 5.5U, against the
    combine's U + U + U. No padding, no FP8 copy."""
    s, u = 8192, 2 * K * 8192 * H
    mlp = ExpertMlp(ffn=F, act_recompute=True)
    got = megatron_forward_working_set(H, K, Fraction(s), 2, 8, 1, 1, False, False, mlp)
    assert got == u + 2 * K * s * F + u == 11 * u // 2 == 738_197_504
    assert megatron_forward_working_set(H, K, Fraction(s), 2, 8, 1, 1, False, False) == 3 * u


def test_gpt_oss_expert_bias_fp32_sums():
    """gpt-oss-120b (h = f_e = 2,880, k 4, 128 experts) at ep 8 (16 local experts), BF16,
    S = 4,096: ``_apply_bias`` adds each expert's bias scaled by the FP32 probabilities into
    FP32 chunks (4·k·S·h) and concatenates them in FP32 (4·k·S·h) beside FC2's output
    (2·k·S·h); the caller holds the permuted tokens and the all-to-all output (2·2·k·S·h):
    2·2·k·S·h + 2·k·S·h + 8·k·S·h = 14·k·S·h, against the combine's 4·2·k·S·h."""
    h, k, s = 2880, 4, 4096
    mlp = ExpertMlp(ffn=h, bias=True)
    got = megatron_forward_working_set(h, k, Fraction(s), 2, 8, 1, 16, False, False, mlp)
    assert got == 14 * k * s * h == 660_602_880
