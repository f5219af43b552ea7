"""Models whose layers Megatron-DeepSpeed cannot build are refused under ``deepspeed`` in one
line (model.deepspeed_layers): its ParallelTransformerLayer (deepspeedai/Megatron-DeepSpeed
4efb479d megatron/model/transformer.py) and arguments (megatron/arguments.py) have no QK-norm,
post-norms, GeGLU, local or chunked attention, sinks, soft-capping, clamped GLU, YaRN, MLA or
MTP; a Llama (pre-norm RMSNorm, GQA, SwiGLU, RoPE) and Mixtral (its MoE as DeepSpeed's) run."""

import pytest

from trainplan.model.deepspeed_layers import deepspeed_missing_features
from trainplan.model.legality import Setting, refusal
from trainplan.model.specs import TrainingSpec
from trainplan.scenarios.catalogue import get_model


def _missing(name: str, seq: int = 4096) -> list[str]:
    return deepspeed_missing_features(get_model(name).model.arch, seq)


def test_features_read_off_the_catalogue():
    assert _missing("gemma3-27b") == [
        "QK-norm", "local attention (sliding window 1024)", "post-norms", "GeGLU",
    ]  # fmt: skip
    assert _missing("gpt-oss-20b") == [
        "local attention (sliding window 128)", "attention sinks", "YaRN RoPE",
        "a clamped gated activation",
    ]  # fmt: skip
    assert _missing("qwen3-8b") == ["QK-norm"]
    assert _missing("deepseek-v3") == ["multi-latent attention", "multi-token prediction"]
    # a window or chunk no shorter than the sequence masks nothing: plain causal attention
    assert _missing("llama4-scout", 16384) == ["chunked attention (8192 tokens)"]
    assert _missing("llama4-scout", 8192) == []
    for name in ("llama3-8b", "llama3-405b", "mixtral-8x7b", "gpt3-175b", "qwen2.5-72b"):
        assert _missing(name) == [], name


@pytest.mark.parametrize("framework", ["megatron", "fsdp2", "textbook"])
def test_other_profiles_take_gemma3(framework):
    spec = get_model("gemma3-27b").model
    s = Setting(spec, TrainingSpec(seq_len=4096, global_batch_size=8))
    assert refusal(s, framework=framework) == ""


def test_gemma3_refused_in_one_line():
    spec = get_model("gemma3-27b").model
    s = Setting(spec, TrainingSpec(seq_len=4096, global_batch_size=8))
    assert refusal(s, framework="deepspeed") == (
        "framework: deepspeed runs Megatron-DeepSpeed's transformer layer, which has no QK-norm, "
        "local attention (sliding window 1024), post-norms, GeGLU (use `framework` megatron or "
        "fsdp2)"
    )
