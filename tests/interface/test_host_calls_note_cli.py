"""The note on the host's expert calls (:func:`trainplan.interface.render.moe_text.host_calls_note`,
:mod:`trainplan.model.host_calls`), as a user sees it: each command its own process, text and
JSON.

Hand derivation for Qwen3-30B-A3B (128 routed experts) at ep 8 under Megatron-Core: 128 / 8 = 16
experts a GPU; Transformer Engine's GroupedLinear runs one cuBLAS GEMM per expert for the
forward, the input gradient and the weight gradient of both expert linears: 2 × 3 × 16 = 96
calls per MoE layer and micro-batch; at 13.7 µs a call (nvte_cublas_gemm's median host time in
the DGX B200 trace of Megatron-MoE-ModelZoo issue #7) 96 × 13.7 µs = 1.3152 ms, printed 1.3 ms.
Under full recomputation the backward re-runs each layer's forward (Megatron-LM
``transformer_block.py`` ``_checkpointed_forward``), its expert GEMMs too: 2 × 4 × 16 = 128
calls, 128 × 13.7 µs = 1.7536 ms, printed 1.8 ms. With pp 2 × ep 4 (32 experts a GPU) and the
first 4 layers of stage 0 recomputed in full: 2 × 3 × 32 = 192 calls in the other layers,
2 × 4 × 32 = 256 in those (2.6304 and 3.5072 ms).
torchtitan's grouped kernel (fsdp2) issues one call a pass whatever the experts, and Mixtral at
ep 8 holds one expert a GPU: neither gets the note, nor does a dense model.

Under FP8 Transformer Engine v2.9 (``_GroupedLinear.forward``/``backward``, ``tex.split_quantize``
→ ``cast.cpp`` ``multi_tensor_quantize_impl``) quantises per micro-batch each expert linear's
input in every forward and its output gradient in the backward: 2 × 2 = 4 tensors a layer
without recomputation, 2 × 3 = 6 when the forward runs twice. Per expert and tensor, current
scaling (tensorwise) launches 4 kernels (amax reset, amax, scale, cast:
``Float8CurrentScalingQuantizer::quantize_impl``), MXFP8 1 (``nvte_quantize_v2``), delayed
scaling none on an H100 (one fused ``nvte_multi_cast_transpose`` for all experts) but 1 on a
B200, whose FP8 tensors keep no transpose, so the fused kernel does not apply. Qwen3-30B-A3B
at ep 8, 16 experts a GPU:
  tensorwise, B200: 4 tensors × 4 × 16 = 256 launches;
  delayed, B200: 4 × 1 × 16 = 64; delayed, H100: 0 (one call per tensor);
  MXFP8 under full recomputation, B200: 6 × 1 × 16 = 96;
  tensorwise with the moe_act recompute module, B200: FC2 saves its BF16 input and quantises it
  again in the backward (Megatron-Core ``TEGroupedMLP.__init__`` ``set_save_original_input``),
  5 tensors × 4 × 16 = 320.
gpt-oss-120b (128 experts, FC1 with a bias) at ep 8, delayed, H100: FC1's output gradient goes
through ``tex.bgrad_quantize`` one expert at a time, 2 kernels each (the fused cast and
``reduce_dbias``), the other tensors fused: 16 × 2 = 32.
No host time is given for these (no measurement of a quantise call's host time is published),
and a BF16 layout gets no FP8 clause."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import run_many


def _evaluate(model, gpu, *layout):
    """``evaluate`` of ``model`` on 8 ``gpu``s at B 64, s 4,096 and ``layout``'s flags."""
    base = ("evaluate", "--model", model, "--gpus", "8", "--gpu", gpu)
    return (*base, *layout, "--global-batch", "64", "--seq-len", "4096")


QWEN = _evaluate("qwen3-30b-a3b", "B200", "--dp", "8", "--ep", "8")
QWEN_H100 = _evaluate("qwen3-30b-a3b", "H100-SXM", "--dp", "8", "--ep", "8")
MOE_ACT = ("--recompute", "selective", "--set", "recompute_modules=moe_act")
PP2 = _evaluate("qwen3-30b-a3b", "B200", "--dp", "4", "--pp", "2", "--ep", "4")
HEAD = "step time leaves out the host's time to issue the routed experts' calls"
FP8 = ("--precision", "fp8", "--fp8-recipe")
NO_TIME = "whose host time is not counted (no measurement of one is published)"


@pytest.fixture(scope="module")
def runs():
    return run_many(
        {
            "megatron": (*QWEN, "--json"),
            "megatron text": QWEN,
            "fsdp2": (*QWEN, "--framework", "fsdp2", "--json"),
            "full": (*QWEN, "--recompute", "full", "--json"),
            "some layers": (*PP2, "--recompute-layers", "4,0", "--json"),
            "mixtral ep 8": (
                *_evaluate("mixtral-8x7b", "H100-SXM", "--dp", "8", "--ep", "8"),
                *("--recompute", "full", "--json"),
            ),
            "dense": (*_evaluate("llama3-8b", "H100-SXM", "--dp", "8"), "--json"),
            "tensorwise": (*QWEN, *FP8, "tensorwise", "--json"),
            "tensorwise text": (*QWEN, *FP8, "tensorwise"),
            "delayed b200": (*QWEN, *FP8, "delayed", "--json"),
            "delayed h100": (*QWEN_H100, *FP8, "delayed", "--json"),
            "mxfp8 full": (*QWEN, *FP8, "mxfp8", "--recompute", "full", "--json"),
            "moe_act": (*QWEN, *FP8, "tensorwise", *MOE_ACT, "--json"),
            "gpt-oss": (
                *_evaluate("gpt-oss-120b", "H100-SXM", "--dp", "8", "--ep", "8"),
                *("--precision", "fp8", "--json"),
            ),
        }
    )


def _notes(done):
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["notes"]


def test_megatron_with_sixteen_experts_a_gpu_says_96_calls_and_1_3_ms(runs):
    (note,) = [n for n in _notes(runs["megatron"]) if n.startswith(HEAD)]
    assert "issues 96 expert GEMM calls per micro-batch on a GPU here (16 experts a GPU" in note
    assert "about 1.3 ms of host time at 13.7 µs a call" in note
    text = runs["megatron text"]
    assert text.returncode == 0 and f"Note: {HEAD}: each MoE layer issues 96" in text.stdout


@pytest.mark.parametrize("key", ["fsdp2", "mixtral ep 8", "dense"])
def test_no_note_without_per_expert_calls(runs, key):
    assert not [n for n in _notes(runs[key]) if n.startswith(HEAD)]


def test_full_recomputation_counts_the_experts_forward_again(runs):
    (note,) = [n for n in _notes(runs["full"]) if n.startswith(HEAD)]
    assert "issues 128 expert GEMM calls per micro-batch on a GPU here (16 experts a GPU" in note
    assert "for the forward, its recomputation, the input and weight gradient" in note
    assert "about 1.8 ms of host time" in note


def test_layers_recomputed_in_full_get_their_own_count(runs):
    (note,) = [n for n in _notes(runs["some layers"]) if n.startswith(HEAD)]
    assert "issues 192 expert GEMM calls per micro-batch on a GPU here (256 in a layer" in note
    assert "32 experts a GPU" in note and "about 2.6 or 3.5 ms of host time" in note


def _note(done):
    (note,) = [n for n in _notes(done) if n.startswith(HEAD)]
    return note


def test_bf16_note_has_no_fp8_clause(runs):
    assert "FP8" not in _note(runs["megatron"])


def test_tensorwise_counts_four_launches_per_expert_and_tensor(runs):
    note = _note(runs["tensorwise"])
    assert "issues 96 expert GEMM calls" in note and "about 1.3 ms of host time" in note
    assert (
        "under FP8 (recipe tensorwise) Transformer Engine also quantises each expert's inputs "
        "and output gradients one expert at a time: 256 more kernel launches per micro-batch on "
        "a GPU here (4 per expert and tensor: the amax reset, the amax, the scale and the cast), "
        f"{NO_TIME}"
    ) in note
    text = runs["tensorwise text"]
    assert text.returncode == 0 and "256 more kernel launches per micro-batch" in text.stdout


def test_delayed_scaling_goes_expert_by_expert_only_without_the_transpose(runs):
    b200 = _note(runs["delayed b200"])
    assert "(recipe delayed) Transformer Engine also quantises each expert's inputs" in b200
    assert "64 more kernel launches per micro-batch on a GPU here (1 per expert and tensor" in b200
    assert "keeps no FP8 transpose" in b200
    h100 = _note(runs["delayed h100"])
    assert (
        "under FP8 (recipe delayed) Transformer Engine quantises all experts' inputs and output "
        "gradients in one call per tensor, none per expert;"
    ) in h100
    assert "kernel launches" not in h100


def test_mxfp8_recomputed_forward_quantises_again(runs):
    note = _note(runs["mxfp8 full"])
    assert "issues 128 expert GEMM calls" in note
    assert "96 more kernel launches per micro-batch on a GPU here (1 per expert and tensor)" in note


def test_moe_act_requantises_fc2_input_in_backward(runs):
    note = _note(runs["moe_act"])
    assert "and the inputs saved in BF16 again in the backward, one expert at a time" in note
    assert "320 more kernel launches per micro-batch" in note


def test_expert_bias_gradient_quantises_expert_by_expert_under_delayed(runs):
    note = _note(runs["gpt-oss"])
    assert (
        "(recipe delayed) Transformer Engine also quantises FC1's output gradient with its bias "
        "gradient one expert at a time: 32 more kernel launches per micro-batch on a GPU here "
        "(2 per expert; the rest in one call a tensor)"
    ) in note
