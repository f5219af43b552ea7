"""Transformer Engine's cached placeholder weight gradients (model/terms/dummy_wgrads.py), derived
by hand from ``get_dummy_wgrad`` (TE ``transformer_engine/pytorch/module/base.py``, d0067d0da:
one ``torch.empty`` per distinct (shape, dtype), never freed) and the callers Megatron-Core's
layers reach: TE ``Linear``, ``LayerNormLinear``, ``GroupedLinear`` and Megatron-Core's output
layer (``megatron/core/tensor_parallel/layers.py``, d98e8a64dd)."""

from __future__ import annotations

from dataclasses import replace

from trainplan.model.estimate import stage_memory
from trainplan.model.layout import Layout, Recompute
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.dummy_wgrads import layer_weight_shapes, stage_dummy_wgrad_bytes
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

LLAMA_70B = get_model("llama3-70b").model
DSV3 = get_model("deepseek-v3").model.arch
TRAINING = TrainingSpec(seq_len=8192, global_batch_size=64)
H100 = get_accelerator("H100-SXM")
BASE = Layout(
    dp=1, tp=8, pp=2, cp=1, micro_batch_size=1, zero_stage=1, recompute=Recompute.FULL,
    sequence_parallel=False, framework="megatron",
)  # fmt: skip
"""No sequence parallelism: the output layer's "mpu" gather buffer is 0, so the persistent
buffers are the placeholders alone (tests/model/test_persistent_buffers.py has the buffer)."""

LAYER = 2 * (1280 * 8192 + 8192 * 1024 + 7168 * 8192 + 8192 * 3584)
"""Llama 3 70B (h 8,192, 64 heads of 128, 8 KV heads, SwiGLU f 28,672) at tp 8, BF16:
QKV [(64 + 2·8)·128/8, 8,192] = [1,280, 8,192] = 10,485,760 elements; proj [8,192, 8,192/8] =
8,388,608; FC1 [2·28,672/8, 8,192] = [7,168, 8,192] = 58,720,256; FC2 [8,192, 3,584] =
29,360,128; 106,954,752 elements × 2 B = 213,909,504 B: every layer has the same four shapes,
so one set of four tensors however many layers a stage holds."""

OUTPUT = 2 * 16128 * 8192
"""The output layer [V/tp, h]: V 128,256 padded to a multiple of 128·8 (Megatron-LM's
``_vocab_size_with_padding``) is 129,024, 16,128 rows a rank; × 8,192 × 2 B = 264,241,152 B."""


def _held(layout: Layout, training: TrainingSpec = TRAINING, model=LLAMA_70B) -> list[int]:
    stages = stage_memory(model, training, layout, device=H100)
    return [int(s.persistent_buffers_bytes) for s in stages]


def test_llama3_70b_tp8_pp2_by_hand():
    assert LAYER == 213_909_504 and OUTPUT == 264_241_152
    # first stage: the four layer shapes; last: the same four and the output layer's
    assert _held(BASE) == [213_909_504, 213_909_504 + 264_241_152] == [213_909_504, 478_150_656]


def test_one_set_however_many_layers_or_chunks():
    """pp 4 (20 layers a stage) or interleaved (two chunks a stage): the same shapes, the same
    tensors; pp 1: the four and the output layer on the one stage."""
    assert _held(replace(BASE, pp=4)) == [LAYER] * 3 + [LAYER + OUTPUT]
    assert _held(replace(BASE, pp=1)) == [LAYER + OUTPUT]
    inter = replace(BASE, pp=2, virtual_stages=2, schedule="interleaved")
    assert _held(inter, replace(TRAINING, global_batch_size=64)) == [LAYER, LAYER + OUTPUT]


def test_llama3_405b_tp2_by_hand():
    """Llama 3 405B (h 16,384, 128 heads of 128, 8 KV heads, f 53,248) at tp 2: QKV [(128 +
    16)·128/2, 16,384] = [9,216, 16,384], proj [16,384, 8,192], FC1 [53,248, 16,384], FC2
    [16,384, 26,624]: 1,593,835,520 elements, 3,187,671,040 B; the output layer: V padded to a
    multiple of 128·2 is 128,256 (501·256), 64,128 rows × 16,384 × 2 B = 2,101,346,304 B."""
    arch = get_model("llama3-405b").model.arch
    layer = 9216 * 16384 + 16384 * 8192 + 53248 * 16384 + 16384 * 26624
    assert 2 * layer == 3_187_671_040
    got = stage_dummy_wgrad_bytes(arch, 2, 2, None, 2, 2, "megatron", 1, 1, True, None)
    assert got == ((3_187_671_040, 3_187_671_040 + 2_101_346_304),)
    assert got[0][1] == 5_289_017_344  # 5.29 GB on the one stage


def test_deepseek_v3_shapes_dedupe_the_shared_and_routed_experts():
    """DeepSeek-V3 at tp = etp = 1 (h 7,168, 128 heads, MLA q_lora 1,536, kv_lora 512, d_nope
    128, d_rope 64, d_v 128; dense f 18,432; 256 routed experts and 1 shared of f 2,048):
    attention q_down [1,536, 7,168], q_up [128·192, 1,536] = [24,576, 1,536], kv_down
    [512 + 64, 7,168], kv_up [128·256, 512] = [32,768, 512], proj [7,168, 16,384]; the routed
    experts' FC1 [2·2,048, 7,168] and FC2 [7,168, 2,048] are the shared expert's shapes too: one
    tensor each for both (TE keys the cache by shape and dtype)."""
    attention = {(1536, 7168), (24576, 1536), (576, 7168), (32768, 512), (7168, 16384)}
    assert layer_weight_shapes(DSV3, 1, 1, True) == attention | {(4096, 7168), (7168, 2048)}
    assert layer_weight_shapes(DSV3, 1, 1, False) == attention | {(36864, 7168), (7168, 18432)}


def test_deepseek_v3_pp16_first_and_last_stage_by_hand():
    """pp 16 (the split puts layers 0–2 on the first stage, 58–60 and the MTP block on the
    last): the first stage holds the three dense layers, attention and dense MLP shapes only;
    the last MoE layers, the MTP block (its ``eh_proj`` [7,168, 2·7,168]) and the output layer
    [129,280, 7,168] (V 129,280 = 1,010·128 needs no padding at tp 1)."""
    attention = 1536 * 7168 + 24576 * 1536 + 576 * 7168 + 32768 * 512 + 7168 * 16384
    moe = 4096 * 7168 + 7168 * 2048
    dense = 36864 * 7168 + 7168 * 18432
    got = stage_dummy_wgrad_bytes(DSV3, 2, 2, None, 1, 1, "megatron", 16, 1, True, None)
    assert got[0][0] == 2 * (attention + dense) == 1_166_934_016
    eh_proj, output = 7168 * 14336, 129280 * 7168
    assert got[-1] == (2 * (attention + moe + eh_proj), 2 * (attention + moe + eh_proj + output))
    assert got[-1] == (667_811_840, 2_521_169_920)


def test_none_without_a_backward_or_under_apex_or_other_profiles():
    # an RLHF reference or reward model's scoring forward runs no backward
    assert _held(BASE, replace(TRAINING, runs_backward=False)) == [0, 0]
    # Apex's distributed_fused_adam: NeMo ≤ 24.x with TE 1.x, the placeholder per call
    apex = replace(TRAINING, distributed_optimizer="distributed_fused_adam")
    assert _held(BASE, apex) == [0, 0]
    # autograd's own weight gradients: torchtitan's nn.Linear (fsdp2), no runtime buffer (textbook)
    fsdp2 = replace(BASE, pp=1, dp=8, tp=1, zero_stage=3, framework="fsdp2")
    assert _held(fsdp2) == [0]
    assert _held(replace(BASE, framework="textbook")) == [0, 0]


def test_held_in_both_phases():
    """Allocated at the first backward and kept: it adds to the forward/backward peak and to
    the optimizer step alike."""
    last = stage_memory(LLAMA_70B, TRAINING, BASE, device=H100)[-1]
    st, acts = last.state, last.activations.total_bytes
    expected = max(st.backward_bytes + acts, st.optimizer_step_bytes) + LAYER + OUTPUT
    assert last.allocated_bytes == expected


def test_an_rlhf_reference_holds_none_its_actor_does():
    """verl's Megatron workers (the ``megatron`` profile), GRPO on Qwen2.5 7B (h 3,584, 28 heads
    of 128, 4 KV heads, SwiGLU f 18,944, V 152,064 = 1,188·128), actor and reference each at dp
    8, tp 1, pp 1 on 8 H100: the same communicators, so what the actor holds in every phase
    beyond the reference is its placeholders, QKV [(28 + 8)·128, 3,584] = [4,608, 3,584], proj
    [3,584, 3,584], FC1 [37,888, 3,584], FC2 [3,584, 18,944], output [152,064, 3,584]:
    2·3,584·(4,608 + 3,584 + 37,888 + 18,944 + 152,064) = 1,556,086,784 B. The reference only
    scores (a forward-only pass): none."""
    from tests.model._rlhf_specs import qwen_grpo
    from trainplan.model.hardware import ClusterLinks
    from trainplan.model.rlhf.roles import RoleOption
    from trainplan.model.rlhf.spec import Role
    from trainplan.optimizer.rlhf.tables import RLHFProblem, cost_of

    p = RLHFProblem(qwen_grpo(framework="megatron"), H100, 8, ClusterLinks.from_device(H100))
    actor = cost_of(p, RoleOption(Role.ACTOR, 8, 8, 1, 1))
    reference = cost_of(p, RoleOption(Role.REFERENCE, 8, 8, 1, 1))
    assert 2 * 3584 * (4608 + 3584 + 37888 + 18944 + 152064) == 1_556_086_784
    assert actor.resident_bytes - reference.resident_bytes == 1_556_086_784
