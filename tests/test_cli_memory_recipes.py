"""The memory recipes a user states on the command line, as a user runs them (each call its own
process): Megatron-Core's --recompute-modules and --fp8-param-gather, and their refusals."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many

LLAMA = ("evaluate", "--model", "llama3-8b", "--gpus", "8", "--dp", "4", "--tp", "2", "--pp", "1")


def test_recompute_modules_and_fp8_param_gather_from_the_cli():
    done = run_many(
        {
            "fsdp2": (*LLAMA, "--framework", "fsdp2", "--recompute", "selective",
                      "--set", "recompute_modules=layernorm"),
            "full": (*LLAMA, "--recompute", "full", "--set", "recompute_modules=mlp"),
            "bf16": (*LLAMA, "--set", "fp8_param_gather=true"),
            "fsdp2-fp8": (*LLAMA, "--framework", "fsdp2", "--precision", "fp8",
                          "--set", "fp8_param_gather=true", "--json"),
            "fsdp2-dp1": ("evaluate", "--model", "llama3-8b", "--gpus", "8", "--dp", "1",
                          "--tp", "8", "--framework", "fsdp2", "--precision", "fp8",
                          "--set", "fp8_param_gather=true"),
            "mlp": (*LLAMA, "--recompute", "selective", "--set", "recompute_modules=mlp", "--json"),
            "core": (*LLAMA, "--recompute", "selective", "--json"),
            "fp8": (*LLAMA, "--precision", "fp8", "--json"),
            "fp8w": (*LLAMA, "--precision", "fp8", "--set", "fp8_param_gather=true", "--json"),
            "text": (*LLAMA, "--recompute", "selective", "--set", "recompute_modules=core_attn,mlp"),
        }
    )  # fmt: skip
    assert "recompute_modules" in refusal(done["fsdp2"]) and "megatron" in refusal(done["fsdp2"])
    assert "selective" in refusal(done["full"])
    assert "fp8_param_gather" in refusal(done["bf16"]) and "fp8" in refusal(done["bf16"])
    # fsdp2 runs torchao's FP8 all-gather (torchtitan's enable_fsdp_float8_all_gather), which
    # torchtitan turns on only where FSDP shards over dp
    line = refusal(done["fsdp2-dp1"])
    assert line.startswith("--set fp8_param_gather:") and "dp 1" in line, line
    for key in ("mlp", "core", "fp8", "fp8w", "text", "fsdp2-fp8"):
        assert done[key].returncode == 0, done[key].stderr[-2000:]

    def peak(key: str) -> int:
        return json.loads(done[key].stdout)["memory"]["total_bytes"]

    # recomputing the dense MLP drops its FC1 input, SwiGLU input and down-projection input
    # (2 + 4 + 2 B per element of [S, h] / [S, f] / [S, f]) on each of the 32 layers
    S, h, f, tp = 8192, 4096, 14336, 2  # llama3-8b's default sequence (8,192), tp 2 with SP
    dropped = 32 * (2 * S * h / tp + 4 * S * f / tp + 2 * S * f / tp)
    # the transients: one layer's recomputed MLP while its backward runs, or the unfused
    # vocab-parallel loss (the BF16 logits beside the kept fp32 softmax, 2·S·V/tp); the peak
    # holds the larger, here the loss in both runs (one stage)
    transient, loss = dropped / 32, 2 * S * 128_256 / tp
    assert transient < loss
    # core_attn drops the fused attention's FP32 softmax statistics (4·32/tp heads·S a layer),
    # which recomputing the MLP keeps
    lse = 32 * 4 * 32 / tp * S
    assert peak("core") - peak("mlp") == dropped - lse
    # FP8 primary weights: 1 B less per linear weight element in the weights and in the cache
    assert peak("fp8w") < peak("fp8")
    assert json.loads(done["fsdp2-fp8"].stdout)["layout"]["fp8_param_gather"] is True


def test_fsdp2_fp8_gather_refusals_from_the_cli():
    """What torchtitan and torchao refuse for the FP8 all-gather, each one line with exit code 2:
    a recipe other than tensorwise (torchao's ``Float8LinearConfig`` asserts
    "enable_fsdp_float8_all_gather only supports tensorwise scaling granularity"), FSDP1
    (``flat_parameters``: torchao's hook is FSDP2's). A MoE model runs (its routed experts
    gather in BF16 beside the FP8 linears: tests/test_cli_fsdp2_fp8_gather.py)."""
    fsdp2 = ("evaluate", "--gpus", "8", "--dp", "8", "--framework", "fsdp2", "--precision", "fp8")
    done = run_many(
        {
            "mxfp8": (*fsdp2, "--model", "llama3-8b", "--gpu", "B200", "--fp8-recipe", "mxfp8",
                      "--set", "fp8_param_gather=true"),
            "moe": (*fsdp2, "--model", "mixtral-8x7b", "--set", "fp8_param_gather=true"),
            "fsdp1": (*fsdp2, "--model", "llama3-8b", "--set", "flat_parameters=true",
                      "--set", "fp8_param_gather=true"),
        }
    )  # fmt: skip
    line = refusal(done["mxfp8"])
    assert line.startswith("--set fp8_param_gather:") and "tensorwise only, not mxfp8" in line
    assert done["moe"].returncode == 0, done["moe"].stderr[-2000:]
    line = refusal(done["fsdp1"])
    assert "fp8_param_gather" in line and "flat_parameters" in line, line
