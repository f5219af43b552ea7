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
ep 8 holds one expert a GPU: neither gets the note, nor does a dense model."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import run_many


def _evaluate(model, gpu, *layout):
    """``evaluate`` of ``model`` on 8 ``gpu``s at B 64, s 4,096 and ``layout``'s flags."""
    base = ("evaluate", "--model", model, "--gpus", "8", "--gpu", gpu)
    return (*base, *layout, "--global-batch", "64", "--seq-len", "4096")


QWEN = _evaluate("qwen3-30b-a3b", "B200", "--dp", "8", "--ep", "8")
PP2 = _evaluate("qwen3-30b-a3b", "B200", "--dp", "4", "--pp", "2", "--ep", "4")
HEAD = "step time leaves out the host's time to issue the routed experts' calls"


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
