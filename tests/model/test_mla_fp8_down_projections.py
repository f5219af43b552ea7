"""Under FP8, MLA's two down-projections each keep their own quantised copy of the attention
norm's output (model.activation_rows.MLA_SECOND_DOWN_PROJECTION): Megatron-Core's MLA spec builds
``linear_q_down_proj`` and ``linear_kv_down_proj`` as two Transformer Engine linears
(``mla_down_proj_fusion`` False by default) and ``MLASelfAttention._qkv_down_projection`` calls
both on ``hidden_states``; each ``_Linear.forward`` saves its own quantised input."""

from fractions import Fraction

import pytest

import trainplan
from trainplan.model.activation_rows import MLA_SECOND_DOWN_PROJECTION
from trainplan.model.activations import ActivationContext, kind_activations
from trainplan.model.attention_core import attention_core_step, mla_down_step
from trainplan.model.context_parallel import CpKind
from trainplan.model.specs import Precision, TrainingSpec
from trainplan.model.te_fp8_backward import te_fp8_backward
from trainplan.model.terms.activation_fields import activation_context
from trainplan.scenarios.catalogue import get_model

ARCH = get_model("deepseek-v3").model.arch


def _terms(moe: bool, **training) -> dict[str, object]:
    t = TrainingSpec(seq_len=4096, global_batch_size=8, **training)
    ctx = activation_context(t, 1, 1, 1, False, CpKind.RING, 8, 1, "megatron")
    return dict(kind_activations(ARCH, moe, ctx).terms)


def test_deepseek_v3_mxfp8_counts_both_copies():
    """DeepSeek-V3 on 256 B200, dp 16 × pp 16 × ep 8, MXFP8, no recomputation, b 1: stage 2
    holds 4 MLA layers × 14 micro-batches in flight. The second copy is 1.03125 B (MXFP8: a
    1-byte element and an 8-bit scale per 32) × 4,096 tokens × h 7,168 = 30,277,632 B per layer
    and micro-batch. Under MXFP8 (not ``delayed``) the output projection saves the BF16 attention
    output the kernel keeps, not its own copy of a·v_head = 128·128 values: 1.03125 × 4,096 ×
    16,384 = 69,206,016 B less. From the 186,020,637,440 B counted before:
    + 56 × 30,277,632 − 56 × 69,206,016 = 183,840,647,936 B, and with the fused permutation's
    int32 row map (4 × 4,096 × 513 = 8,404,992 B a MoE layer, tests/model/test_fused_permute_map.py)
    184,311,327,488 B. The MoE forward working set (the stage's peak phase) then counts the expert
    MLP's own copies (tests/model/test_moe_expert_mlp.py): MXFP8 pads each of the 32 local
    experts' rows to 32, R = 8·4,096 + 32·31 = 33,760 rows, and Fp8Unpadding's point holds,
    beside the caller's 3U (U = 2·8·4,096·7,168), the padded input 2·R·h, the BF16 activation
    output 2·R·f_e (f_e 2,048), FC2's padded output 2·R·h and the unpadded copy U:
    4U + 2·R·(2h + f_e) = 2,985,295,872 B against the combine's 5U = 2,348,810,240 B:
    636,485,632 B more, 184,947,813,120 B. Transformer Engine's fused attention keeps its FP32
    softmax statistics ``[b, a, s, 1]`` (``FusedAttnFunc.forward``'s ``aux_ctx_tensors``): 4 ×
    128 heads × 4,096 = 2,097,152 B a layer, + 56 × 2,097,152 = 117,440,512 B. The shared
    expert's FC1 saves the router's BF16 input under MXFP8 (Megatron-Core
    ``SharedExpertMLP.__init__``; test_shared_fc1_original.py), not its own copy of the same
    30,277,632 B: − 56 × 30,277,632: 183,369,706,240 B. NCCL's communicators by placement and
    with their channels' set-up (model/terms/comm_memory.py; tests/model/test_nccl_channels.py;
    B200 is NVLink 5, 32 channels a node; NICs 50 GB/s): the dp ring, 16 ranks on 2 nodes at
    8 a node, 16 × 12 + (16 × 3 + 2) × 2 = 292 MiB; the expert all-to-all, 7 NVLink peers × 32
    channels, 2,688 + (32 × 3 + 2) × 2 = 2,884; the expert data-parallel ring on dp's channels,
    292; the pipeline's two neighbours on other nodes, 4 channels each (⌈50 ÷ 14⌉ rounded up to
    a power of two) and the pp group's 4 collective channels (one rank a node), 2 × 4 × 12 +
    (4 × 3 + 2) × 2 = 124; the distributed optimizer's gradient-statistics group and the world
    barrier, 256 ranks at 8 a node, 292 each: 4,176 MiB, against 4,320 (dp 32 + ep 224 + expert
    dp 32 + pp 8 + 32 + 32 connections of 12 MiB) before: − 144 MiB, 183,218,711,296 B.
    Megatron-Core's MoE groups placed as they lie (model/terms/comm_groups.py): the expert dp
    ring's 2 ranks at stride etp·ep = 8, one a node on 2 nodes, 4 channels, 48 + 28 = 76 (not
    292); the expert tp·ep group of the token counts' all-gather, the 8 ep ranks in a node,
    32 × 12 + 196 = 580; the tp·dp·cp group of the expert bias's token counts, 16 ranks 8 a
    node, 292; the MoE metrics' ring on the pp communicator, 4 connections, 48: 4,880 MiB,
    704 MiB more, 183,956,908,800 B. The model-parallel group train_step reduces over at every
    ZeRO stage (tp 1 × pp 16 ranks at stride 16, one a node on 16 nodes: 4 channels, 48 + 28 =
    76): 4,956 MiB, 184,036,600,576 B. NVLink SHARP on a B200 (model/terms/nvls_memory.py;
    NVLS_NCHANNELS_SM100_NVL 24 channels): the tp·ep ring of 8 in a node 2 MiB of credits (its
    buffers, 24 × 2 × (128 KiB × 8) × 8 = 384 MiB, NCCL sets up on the first collective it runs
    as NVLS, and the token counts' all-gather, a few KiB, runs as a ring), the dp, tp·dp·cp,
    gradient-statistics and world rings (8 a node) 2 MiB each: 10 MiB more, 4,966 MiB,
    184,047,086,336 B. Transformer Engine's placeholder weight gradients (model/terms/
    dummy_wgrads.py; layers 6–9, all MoE, at tp = etp 1): MLA's q_down [1,536, 7,168], q_up
    [24,576, 1,536], kv_down [576, 7,168], kv_up [32,768, 512], proj [7,168, 16,384] and the
    experts' FC1 [4,096, 7,168] and FC2 [7,168, 2,048] (the shared expert's shapes too): 2 ×
    231,145,472 = 462,290,944 B more, 184,509,377,280 B."""
    e = trainplan.evaluate(
        model="deepseek-v3", gpu="B200", dp=16, pp=16, ep=8, precision="fp8",
        fp8_recipe="mxfp8", global_batch_size=2048,
    )  # fmt: skip
    assert e.busiest == 2
    one, proj = 30_277_632, 69_206_016
    assert one == 4096 * 7168 * 33 // 32 and proj == 4096 * 128 * 128 * 33 // 32
    assert 186_020_637_440 + 56 * (one - proj) == 183_840_647_936
    assert 183_840_647_936 + 56 * 8_404_992 == 184_311_327_488
    U, R = 2 * 8 * 4096 * 7168, 8 * 4096 + 32 * 31
    assert 4 * U + 2 * R * (2 * 7168 + 2048) - 5 * U == 636_485_632
    assert 184_311_327_488 + 636_485_632 == 184_947_813_120
    lse = 4 * 128 * 4096
    assert 184_947_813_120 + 56 * lse - 56 * one == 183_369_706_240
    comms = [292, 2_688 + 196, 292, 2 * 4 * 12 + 28, 292, 292]
    assert sum(comms) == 4_176 and 360 * 12 == 4_320
    moe_groups = [76 - 292, 32 * 12 + 196, 292, 4 * 12]
    assert sum(comms) + sum(moe_groups) == 4_880
    nvls = 2 + 4 * 2
    assert e.peak.communicator_bytes == (4_880 + 4 * 12 + 28 + nvls) * 2**20 == 4_966 * 2**20
    assert 183_369_706_240 - 144 * 2**20 == 183_218_711_296
    assert 183_218_711_296 + 704 * 2**20 == 183_956_908_800
    assert 183_956_908_800 + 76 * 2**20 == 184_036_600_576
    assert 184_036_600_576 + nvls * 2**20 == 184_047_086_336
    attention = 1536 * 7168 + 24576 * 1536 + 576 * 7168 + 32768 * 512 + 7168 * 16384
    dummies = 2 * (attention + 4096 * 7168 + 7168 * 2048)
    assert dummies == 462_290_944
    assert e.peak.total_bytes == 184_047_086_336 + dummies == 184_509_377_280


@pytest.mark.parametrize("recipe", ["delayed", "tensorwise", "mxfp8", "blockwise"])
def test_output_projection_input_by_recipe(recipe):
    """Megatron-Core's ``Attention.__init__`` / ``MultiLatentAttention.__init__``: under any recipe
    but ``delayed`` ``set_save_original_input(self.linear_proj)``: the BF16 row, 2 B × 4,096 ×
    16,384; under ``delayed`` the kernel's BF16 output (a score row) and the FP8 copy, 1 B each."""
    terms = _terms(True, precision=Precision.FP8, fp8_recipe=recipe)
    names = [n for n in terms if n.startswith("output projection input")]
    if recipe == "delayed":
        assert names == ["output projection input (FP8)"]
        assert terms["output projection input (FP8)"] == 4096 * 16384
    else:
        assert names == ["output projection input"]
        assert terms["output projection input"] == 2 * 4096 * 16384


@pytest.mark.parametrize("moe", [False, True])
def test_the_row_in_both_layer_kinds(moe):
    """FP8 (1 B an element): 4,096 × 7,168 = 29,360,128 B, as much as the first copy."""
    terms = _terms(moe, precision=Precision.FP8)
    assert terms[MLA_SECOND_DOWN_PROJECTION] == 4096 * 7168 == 29_360_128
    assert terms["attention projection input (FP8)"] == 29_360_128


def test_bf16_keeps_one():
    """In BF16 both linears save the one norm output, 2 B an element."""
    bf16 = _terms(True)
    assert MLA_SECOND_DOWN_PROJECTION not in bf16
    assert bf16["attention projection input"] == 2 * 4096 * 7168


def test_down_projections_step_requantises_under_layernorm_by_hand():
    """MLA's down-projections' step (model.attention_core.mla_down_step), DeepSeek-V3, s 4,096,
    b 1, tp 1, blockwise on Hopper, recompute_modules layernorm (Megatron-Core then sets
    save_original_input on both down-projections, set_for_recompute_input_layernorm):

    n + 2x (the layer's output gradient; the two down-projections' input gradients, autograd
    holding the first while the second is made) = 3·2·4,096·7,168 = 176,160,768
    the larger latent's gradient (q_lora 1,536 > 512 + 64): 2·4,096·1,536 = 12,582,912, and its
    FP8 copy for both usages 33/16·4,096·1,536 = 12,976,128
    the saved BF16 norm output quantised column-wise again: 33/32·4,096·7,168 = 30,277,632
    = 231,997,440 before any released row; without layernorm 201,719,808.

    The attention core's step is n + O + Q + KV = 58,720,256 + 2·4,096·128·(128 + 192 + 320)
    = 729,808,896: the down-projections' step stays below it even releasing nothing, so it does
    not set the layer's peak here."""
    arch = get_model("deepseek-v3").model.arch
    te = te_fp8_backward("blockwise", True)

    def ctx(modules):
        return ActivationContext(
            seq_len=4096, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
            flash_attention=True, fp8_gemms=True, fp8_linear_inputs=True,
            fp8_input_bytes=Fraction(33, 32), te_linears=True, fp8_proj_saves_original=True,
            recompute_modules=modules,
        )  # fmt: skip

    layernorm = ctx(("layernorm",))
    assert layernorm.fp8_mla_down_saves_original
    assert mla_down_step(layernorm, arch, te, Fraction(0)) == 231_997_440
    assert mla_down_step(ctx(("core_attn",)), arch, te, Fraction(0)) == 201_719_808
    assert attention_core_step(layernorm, arch, "cudnn") == 729_808_896
    assert mla_down_step(layernorm, get_model("llama3-8b").model.arch, te, Fraction(0)) == 0
