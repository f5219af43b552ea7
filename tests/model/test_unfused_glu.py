"""Megatron-Core's unfused GeGLU (:mod:`model.unfused_glu`): what Gemma 3's MLP keeps under the
``megatron`` profile, derived by hand from the code and measured on the CPU.

Code (Megatron-LM d98e8a64dd, Megatron Bridge 067f987d): Bridge's ``Gemma3ModelProvider`` sets
``activation_func = fast_gelu`` and ``gated_linear_unit = True`` and leaves
``bias_activation_fusion`` at its default False, which ``TransformerConfig.__post_init__``
would refuse for ``fast_gelu`` anyway; ``MLP.forward`` runs ``glu``:
``fast_gelu(x_glu) * (x_linear + glu_linear_offset)``.

Measurement (torch 2.13, CPU, bf16, S = 64 tokens, f = 96): FC1's output a non-leaf
``[S, 2f]`` (``src * 1``), then ``torch.chunk(x, 2, dim=-1)``, ``fast_gelu`` written as
Megatron-Core writes it under ``torch.compile`` (``jit_fuser`` from torch 2.2 on),
``* (x_linear + 0.0)``, then ``@ w`` for FC2; every tensor autograd saves recorded by storage
through ``torch.autograd.graph.saved_tensors_hooks`` (the second iteration, after
compilation). Saved: FC1's output storage (2·[S, f], the compiled GELU's input is a view of
it), GELU's output, ``x_linear + 0.0`` and the product (FC2's input), [S, f] each: 5·[S, f],
where the fused count has 3·[S, f]. The same with the eager ``F.gelu(approximate="tanh")``:
5·[S, f]. The routed experts' ``bias_act_func`` with its ``* permuted_probs`` (FP32 [S, 1],
needing a gradient) and ``.to(bf16)``: 6·[S, f] and the FP32 probabilities. The whole MLP
under one ``torch.compile`` (Inductor's partitioner, what a compiled torchtitan block does):
3·[S, f], the fused count."""

from __future__ import annotations

from trainplan.model.activations import kind_activations
from trainplan.model.context_parallel import CpKind
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Layout
from trainplan.model.specs import Architecture, MoESpec, TrainingSpec
from trainplan.model.terms.activation_fields import activation_context
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model

GEMMA = get_model("gemma3-27b").model.arch
SEQ = 32768


def _layer(framework, arch=GEMMA, moe=False, tp=8, modules=("core_attn",), seq=SEQ, **training):
    t = TrainingSpec(seq_len=seq, global_batch_size=256, recompute_modules=modules, **training)
    ctx = activation_context(t, 1, 1, tp, tp > 1, CpKind.RING, 1, 1, framework)
    return kind_activations(arch, moe, ctx)


def test_gemma3_megatron_layer_keeps_two_more_rows():
    """Gemma 3 27B, s 32,768, b 1, tp 8 with sequence parallelism: f/tp = 21,504/8 = 2,688.
    One [S, f/tp] row is 2·32,768·2,688 = 176,160,768 B. The layer was 944,242,688 B (the
    fused count); the two rows add 352,321,536: 1,296,564,224 B (944.2 → 1,296.6 MB)."""
    terms = dict(_layer(Framework.MEGATRON).terms)
    row = 2 * SEQ * 21504 // 8
    assert row == 176_160_768
    assert terms["MLP GELU output (unfused glu)"] == row
    assert terms["MLP up + glu_linear_offset (unfused glu)"] == row
    assert _layer(Framework.MEGATRON).full_bytes == 944_242_688 + 2 * row == 1_296_564_224


def test_recompute_mlp_drops_them():
    """The module ``mlp`` checkpoints the MLP whole: it keeps the MLP's input (the norm's,
    44,040,192 B) and drops FC1's input 2·32,768·5,376/8 = 44,040,192, the GeGLU input
    352,321,536, the down projection's input and the two rows, 176,160,768 each."""
    full = _layer(Framework.MEGATRON)
    sel = _layer(Framework.MEGATRON, modules=("mlp",))
    assert full.full_bytes - sel.selective_bytes == 44_040_192 + 352_321_536 + 3 * 176_160_768


def test_other_profiles_keep_their_count():
    """textbook: the paper's fused count; deepspeed: Megatron-DeepSpeed's eager ``gelu`` keeps
    its output (one row, already counted); fsdp2 compiled: Inductor's minimum cut, the paper's
    three [S, f/tp]."""
    for framework in (Framework.TEXTBOOK, Framework.DEEPSPEED, Framework.FSDP2):
        names = [n for n, _ in _layer(framework, compile=framework is Framework.FSDP2).terms]
        assert not [n for n in names if "unfused glu" in n], framework
    deepspeed = dict(_layer(Framework.DEEPSPEED).terms)
    assert deepspeed["MLP GELU output (eager GeGLU)"] == 176_160_768


def test_geglu_experts():
    """A GeGLU MoE (none in the catalogue; a config can name one): S = 4,096, tp 1, k = 2,
    f_e = 1,024, one shared expert of 2,048. Routed: k·S = 8,192 rows, three rows of
    2·8,192·1,024 = 16,777,216 B (GELU's output, the sum, the product the probabilities'
    multiply keeps); shared: two of 2·4,096·2,048 = 16,777,216 B. ``moe_act`` drops the three
    routed ones and the down projection's input, 16,777,216 more."""
    moe = MoESpec(num_experts=8, experts_per_token=2, expert_ffn_hidden_size=1024,
                  num_shared_experts=1, shared_expert_ffn_hidden_size=2048)  # fmt: skip
    arch = Architecture(num_layers=2, hidden_size=512, num_attention_heads=8, ffn_hidden_size=2048,
                        vocab_size=1024, mlp="geglu", norm="rmsnorm", moe=moe)  # fmt: skip
    full = _layer(Framework.MEGATRON, arch, True, 1, seq=4096)
    sel = _layer(Framework.MEGATRON, arch, True, 1, ("moe_act",), seq=4096)
    terms = dict(full.terms)
    routed = [v for n, v in terms.items() if n.startswith("routed expert") and "unfused" in n]
    shared = [v for n, v in terms.items() if n.startswith("shared expert") and "unfused" in n]
    assert routed == [2 * 8192 * 1024] * 3 and shared == [2 * 4096 * 2048] * 2
    assert full.full_bytes - sel.selective_bytes == 4 * 16_777_216


def test_the_search_answer_no_longer_fits():
    """``trainplan search --model gemma3-27b --gpus 32 --gpu H100-SXM`` answered dp 2 × tp 8 ×
    pp 2, ZeRO-1, no recomputation, at 82.30 GB of 83.21. Stage 0 holds 31 layers and, under
    1F1B at pp 2, two micro-batches: 62 × 1,296,564,224 = 80,386,981,888 B of layers (was
    62 × 944,242,688 = 58,543,046,656): 21.84 GB more, 104.14 GB. The search now answers
    dp 16 × tp 2, ZeRO-3, full recomputation (one layer's 1,296.6 MB in its transient)."""
    lay = Layout.of(dp=2, tp=8, pp=2, micro_batch_size=1, zero_stage=1, recompute="none",
                    schedule="1f1b")  # fmt: skip
    est = Case.of("gemma3-27b", "H100-SXM", lay).evaluate()
    assert est.stages[0].activations.layers_bytes == 62 * 1_296_564_224 == 80_386_981_888
    assert not est.fits
    # the search's answer now: dp 16 × tp 2, Megatron-FSDP, full recomputation, 65.39 GB
    # without NCCL's NVLink SHARP and 10 MiB more with it (model/terms/nvls_memory.py): the tp
    # ring of 2 in a node 2 MiB of credits (NCCL's tuner runs a 2-GPU all-reduce of an H100 node
    # as a ring, model/nccl_search.py: no buffers; 64 MiB more were counted before), four other
    # rings 2 MiB of credits each: 65,387,998,816 + 10,485,760 B. Transformer Engine's
    # placeholder weight gradients (model/terms/dummy_wgrads.py) at tp 2: QKV [(32 + 32)·128/2,
    # 5,376], proj [5,376, 2,048], FC1 [21,504, 5,376], FC2 [5,376, 10,752], 2·5,376·38,400 =
    # 412,876,800 B, and the output layer [V/tp, h], V 262,208 padded to 262,400 (a multiple of
    # 128·2), 2·131,200·5,376 = 1,410,662,400 B: 1,823,539,200 B more, 67.22 GB
    lay = Layout.of(dp=16, tp=2, micro_batch_size=1, zero_stage=3, recompute="full")
    dummies = 2 * 5376 * (4096 + 2048 + 21504 + 10752) + 2 * 131_200 * 5376
    assert dummies == 412_876_800 + 1_410_662_400 == 1_823_539_200
    off = Case.of("gemma3-27b", "H100-SXM", lay, nccl_nvls=False).evaluate()
    assert off.stages[off.busiest].total_bytes == 65_387_998_816 + dummies == 67_211_538_016
    est = Case.of("gemma3-27b", "H100-SXM", lay).evaluate()
    assert est.stages[est.busiest].total_bytes == 67_211_538_016 + 10 * 2**20 == 67_222_023_776
    assert est.fits and round(float(est.stages[est.busiest].total_bytes) / 1e9, 2) == 67.22


def test_geglu_times_gate_and_up():
    """A GeGLU MLP's first GEMM is the gate and the up projection, ``[T, h] × [h, 2f]``, as
    SwiGLU's (Shazeer 2020; :func:`model.flops.layer_forward_flops` counts ``3·h·f``): Gemma 3
    27B at T = 4,096, tp 1: n = 2·21,504 = 43,008. The layer's weight GEMMs, h = 5,376 on one
    side of each (QKV n = (32 + 2·16)·128 = 8,192; the output projection k = 32·128 = 4,096;
    the down projection k = 21,504): 2·4,096·5,376·(8,192 + 4,096 + 43,008 + 21,504) =
    3,382,286,745,600 FLOPs (was timed with n = 21,504, one matrix: 2,435,246,456,832)."""
    from trainplan.model.ops import LayerShape, OpKind, layer_ops

    ops = layer_ops(LayerShape(GEMMA, False, 4096, 1, 1))
    gemms = {o.name: o for o in ops if o.kind is OpKind.GEMM}
    assert gemms["MLP gate+up projection"].n == 2 * 21504 == 43008
    total = sum(o.gemm_flops for o in gemms.values())
    assert total == 2 * 4096 * 5376 * (8192 + 4096 + 43008 + 21504) == 3_382_286_745_600


def test_megatron_times_the_unfused_passes():
    """Gemma 3 27B, s 32,768, b 1, tp 8 (sequence parallel): the activation's output is
    T·f/tp = 32,768·2,688 = 88,080,384 elements. Fused (textbook): 3β = 6 B an element
    forward, 5β = 10 backward, one kernel each: 528,482,304 | 880,803,840 B. Megatron-Core's
    glu (:func:`model.unfused_glu.unfused_glu_pass`): the compiled GELU 2β, the add 2β, the
    product 3β forward, 14 B: 1,233,125,376 B in 3 kernels; backward the product's two
    gradients 3β each, GELU's 3β, the chunk's cat 4β, 26 B: 2,290,089,984 B in 4 kernels."""
    from trainplan.model.moe_kernels import expert_passes_of
    from trainplan.model.ops import LayerShape, layer_ops

    elements = 32768 * 21504 // 8
    assert elements == 88_080_384
    want = {
        "textbook": (6 * elements, 10 * elements, 1, 1),
        "megatron": (14 * elements, 26 * elements, 3, 4),
    }
    for framework, figures in want.items():
        passes = expert_passes_of(framework, "bf16")
        x = LayerShape(GEMMA, False, SEQ, 1, 8, sequence_parallel=True, expert_passes=passes)
        (act,) = [o for o in layer_ops(x) if o.name == "MLP GeGLU"]
        got = (act.forward_bytes, act.backward_bytes, act.forward_kernels, act.backward_kernels)
        assert got == figures, framework
    assert want["megatron"][:2] == (1_233_125_376, 2_290_089_984)


def test_fsdp2_eager_geglu_keeps_gelu_output():
    """``fsdp2`` without ``compile`` runs a torchtitan-style ``w2(F.gelu(w1(x)) * w3(x))``
    op by op: the product keeps GELU's output, 2·32,768·2,688 = 176,160,768 B at tp 8, as
    eager SwiGLU keeps SiLU's (measured: ``F.gelu(approximate="tanh")`` saves its input, the
    product both operands). Compiled, Inductor's cut keeps the paper's three rows."""
    eager = dict(_layer(Framework.FSDP2).terms)
    assert eager["MLP GELU output (eager GeGLU)"] == 176_160_768
    compiled = dict(_layer(Framework.FSDP2, compile=True).terms)
    assert not [n for n in compiled if "GELU output" in n]
