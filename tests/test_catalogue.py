"""The model catalogue, strict scenario loading and Hugging Face config mapping.

Golden parameter counts are those of the released checkpoints: Llama 3 8B = 8,030,261,248
(meta-llama/Meta-Llama-3-8B) and Mixtral 8x7B = 46,702,792,704 (mistralai/Mixtral-8x7B-v0.1).
The fixtures in ``tests/data/hf/`` copy the released ``config.json`` files' keys and values.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from trainplan import scenarios
from trainplan.model.errors import PlannerError, ScenarioError
from trainplan.model.hf_config import architecture_from_dict
from trainplan.model.hf_families import architecture_from_hf
from trainplan.model.model_spec import ModelSpec
from trainplan.model.params import count_params
from trainplan.model.specs import AttentionKind, Mlp, Norm, PositionEmbedding
from trainplan.scenarios.catalogue import LAYOUT_KEYS, entry_from_dict, get_model, model_names

HF = Path(__file__).parent / "data" / "hf"

REQUIRED_MODELS = [
    "gpt3-175b",
    "megatron-1.7b",
    "megatron-3.6b",
    "megatron-7.5b",
    "megatron-18.4b",
    "megatron-39.1b",
    "megatron-76.1b",
    "megatron-145.6b",
    "megatron-310.1b",
    "megatron-529.6b",
    "megatron-1t",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "mixtral-8x7b",
    "deepseek-v3",
    "palm-540b",
    # issue 11 item 6: today's families
    "mistral-7b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "qwen3-8b",
    "qwen3-235b-a22b",
    "qwen3-30b-a3b",  # the validation runs' model (scenarios/validation/megatron-bridge-*.toml)
    "gemma3-27b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "llama4-scout",
    "llama4-maverick",
]


def _hf(name: str) -> dict:
    return json.loads((HF / name / "config.json").read_text())


# ---------------------------------------------------------------------------------------------
# Every catalogue file


def test_required_models_are_in_the_catalogue():
    assert set(REQUIRED_MODELS) <= set(model_names())


@pytest.mark.parametrize("name", model_names())
def test_every_catalogue_file_loads_with_source_and_training_defaults(name):
    entry = get_model(name)
    assert entry.model.name == name
    assert entry.model.arch is not None
    assert len(entry.model.source) > 20
    assert entry.training_source
    assert entry.training["seq_len"] >= 1 and entry.training["global_batch_size"] >= 1
    assert set(entry.layout) <= set(LAYOUT_KEYS)
    if entry.layout:
        assert entry.layout_source


@pytest.mark.parametrize("name", [n for n in model_names() if get_model(n).layout])
def test_published_layout_is_consistent(name):
    """G = dp·tp·pp·cp, ep divides dp·cp, and B is a multiple of dp (docs/concepts/conventions.md "Layout")."""
    layout = get_model(name).layout
    dp, tp, pp, cp = (layout.get(k, 1) for k in ("dp", "tp", "pp", "cp"))
    assert dp * tp * pp * cp == layout["num_gpus"]
    assert (dp * cp) % layout.get("ep", 1) == 0
    assert get_model(name).training["global_batch_size"] % dp == 0


def test_published_figures_close_to_counted_parameters():
    """Counted N within the papers' rounding (Megatron 1.7B is 1.652 B: Table 1 rounds 3%)."""
    for name in model_names():
        entry = get_model(name)
        published = entry.published.get("params_total")
        if published is None:
            continue
        counted = count_params(entry.model.arch).total
        assert abs(counted - published) / published < 0.035, name


def test_megatron_table1_dims():
    entry = get_model("megatron-1t")
    arch = entry.model.arch
    assert (arch.num_layers, arch.hidden_size, arch.num_attention_heads) == (128, 25600, 160)
    assert arch.vocab_size == 51200 and arch.ffn_hidden_size == 4 * arch.hidden_size
    assert arch.tie_embeddings and arch.linear_bias and arch.dropout
    assert entry.layout == {
        "gpu": "A100-80GB",
        "num_gpus": 3072,
        "dp": 6,
        "tp": 8,
        "pp": 64,
        "cp": 1,
        "ep": 1,
        "zero_stage": 0,
        "recompute": "full",
    }
    assert entry.training == {"seq_len": 2048, "global_batch_size": 3072}


def test_deepseek_v3_catalogue():
    entry = get_model("deepseek-v3")
    arch = entry.model.arch
    assert arch.attention is AttentionKind.MLA and arch.mla.kv_lora_rank == 512
    assert arch.moe.num_experts == 256 and arch.moe.router_bias
    assert arch.num_moe_layers == 58
    assert entry.layout["ep"] == 64 and entry.layout["zero_stage"] == 1
    assert entry.training == {"seq_len": 4096, "global_batch_size": 15360}
    counts = count_params(arch)
    assert round(counts.main / 1e9) == 671
    # the main model's exact counts (DeepSeek-V3 report: 671B total, 37B activated, MTP excluded)
    assert counts.main == 671_026_419_200
    assert counts.active - counts.mtp_active == 37_552_297_472
    # One MTP module (§2.2; num_nextn_predict_layers = 1), h = 7168:
    #   its MoE block, as layer 60's: attention 187,107,328 + norms 2h = 14,336 + router
    #   256·h + 256 = 1,835,264 + shared expert 3·h·2048 = 44,040,192 + 256 routed experts of
    #   3·h·2048 = 11,274,289,152  → 11,507,286,272
    #   projection 2h·h = 102,760,448 + three RMSNorms 3h = 21,504 → 102,781,952
    assert arch.mtp_layers == 1
    assert counts.mtp == 11_507_286_272 + 102_781_952 == 11_610_068_224
    # with the copies of the embedding and the head the release stores for it (2·V·h =
    # 1,853,358,080): 13,463,426,304, the model card's "14B" (685B = 671B + 14B, rounded)
    assert round((counts.mtp + 2 * 129280 * 7168) / 1e9) == 13
    # the module's parameters a token uses: the block's active part (attention, norms, router,
    # shared and 8 routed experts: 187,107,328 + 14,336 + 1,835,264 + 44,040,192 + 8·44,040,192)
    # and the projection and norms; the shared head (V·h) is the main model's, counted there once
    assert counts.mtp_active == (
        187_107_328 + 14_336 + 1_835_264 + 44_040_192 + 8 * 44_040_192 + 102_781_952
    )
    assert counts.active <= counts.total


# ---------------------------------------------------------------------------------------------
# Errors


def test_unknown_model_name_suggests_close_names():
    with pytest.raises(
        ScenarioError, match=r"unknown model 'llama3-405'; did you mean .*llama3-405b"
    ):
        get_model("llama3-405")
    with pytest.raises(ScenarioError, match="unknown model"):
        scenarios.load("models", "no-such-model")


def test_unknown_scenario_kind():
    with pytest.raises(ScenarioError, match="unknown scenario kind"):
        scenarios.names("../model")


def test_unknown_architecture_key_is_rejected():
    d = scenarios.load("models", "llama3-8b")
    d["architecture"]["num_layer"] = 32
    with pytest.raises(ScenarioError, match=r"bad\.toml \[architecture\]: unknown key 'num_layer'"):
        entry_from_dict(d, "bad.toml")


@pytest.mark.parametrize(
    ("table", "key"),
    [(None, "parameters"), ("training", "batch"), ("layout", "dpp"), ("architecture.moe", "k")],
)
def test_unknown_keys_rejected_everywhere(table, key):
    d = scenarios.load("models", "mixtral-8x7b")
    d.setdefault("layout", {"dp": 1, "source": "x"})
    target = d
    for part in table.split(".") if table else []:
        target = target[part]
    target[key] = 1
    with pytest.raises(ScenarioError, match=f"unknown key '{key}'"):
        entry_from_dict(d, "bad.toml")


def test_missing_source_is_rejected():
    d = scenarios.load("models", "llama3-8b")
    del d["source"]
    with pytest.raises(ScenarioError, match="source"):
        entry_from_dict(d, "bad.toml")
    d = scenarios.load("models", "llama3-8b")
    del d["training"]["source"]
    with pytest.raises(ScenarioError, match=r"\[training\].*source"):
        entry_from_dict(d, "bad.toml")


def test_architecture_from_dict_types():
    base = {
        "num_layers": 2,
        "hidden_size": 8,
        "num_attention_heads": 2,
        "ffn_hidden_size": 32,
        "vocab_size": 16,
    }
    assert architecture_from_dict({**base, "hidden_size": 8.0}, "t").hidden_size == 8
    with pytest.raises(ScenarioError, match=r"t: hidden_size = 8\.5 must be a whole number"):
        architecture_from_dict({**base, "hidden_size": 8.5}, "t")
    with pytest.raises(ScenarioError, match="must be true or false"):
        architecture_from_dict({**base, "linear_bias": 1}, "t")
    with pytest.raises(ScenarioError, match="'gelu', 'swiglu'"):
        architecture_from_dict({**base, "mlp": "relu"}, "t")
    with pytest.raises(ScenarioError, match="missing required key.*vocab_size"):
        architecture_from_dict({k: v for k, v in base.items() if k != "vocab_size"}, "t")
    with pytest.raises(ScenarioError, match=r"t: model\.num_kv_heads: 3 must divide"):
        architecture_from_dict({**base, "num_kv_heads": 3}, "t")
    with pytest.raises(ScenarioError, match=r"t \[moe\]: unknown key 'top_k'"):
        architecture_from_dict({**base, "moe": {"top_k": 2}}, "t")


# ---------------------------------------------------------------------------------------------
# Hugging Face configs


def test_hf_llama3_8b_matches_catalogue():
    arch = architecture_from_hf(_hf("llama3-8b"), "llama3-8b/config.json")
    assert arch == get_model("llama3-8b").model.arch
    assert (arch.mlp, arch.norm, arch.position_embedding) == (
        Mlp.SWIGLU,
        Norm.RMSNORM,
        PositionEmbedding.ROPE,
    )
    assert arch.kv_heads == 8 and arch.dim_per_head == 128 and not arch.dropout


def test_hf_mixtral_matches_catalogue():
    arch = architecture_from_hf(_hf("mixtral-8x7b"), "mixtral-8x7b/config.json")
    assert arch == get_model("mixtral-8x7b").model.arch
    assert arch.moe.num_experts == 8 and arch.moe.experts_per_token == 2
    assert arch.moe.expert_ffn_hidden_size == 14336 and not arch.moe.router_bias


def test_hf_deepseek_v3_matches_catalogue():
    arch = architecture_from_hf(_hf("deepseek-v3"), "deepseek-v3/config.json")
    assert arch == get_model("deepseek-v3").model.arch
    assert arch.moe.first_k_dense_layers == 3 and arch.moe.num_shared_experts == 1
    assert arch.moe.router_bias  # e_score_correction_bias
    assert arch.mla.q_lora_rank == 1536 and arch.mla.qk_rope_head_dim == 64


@pytest.mark.parametrize(
    ("name", "fixture"),
    [
        ("mistral-7b", "mistral-7b"),
        ("qwen2.5-7b", "qwen2-7b"),  # Qwen2.5-7B keeps Qwen2-7B's dimensions
        ("qwen3-8b", "qwen3-8b"),
        ("qwen3-30b-a3b", "qwen3-30b-a3b"),
        ("gemma3-27b", "gemma-3-27b"),
        ("gpt-oss-120b", "gpt-oss-120b"),
        ("llama4-scout", "llama-4-scout"),
        ("llama4-maverick", "llama-4-maverick"),
    ],
)
def test_new_catalogue_entries_match_their_released_configs(name, fixture):
    """Each new catalogue entry is what the importer reads from the released config.json."""
    assert (
        architecture_from_hf(_hf(fixture), f"{fixture}/config.json") == get_model(name).model.arch
    )


def test_llama4_maverick_counts_the_published_400b_and_17b():
    """meta-llama/Llama-4-Maverick-17B-128E-Instruct (model card: 17B active, 128 experts, 400B
    total; text_config of its config.json). 48 layers, h 5120, 40 heads of 128, 8 KV heads:
    attention q, o 2·5120·5120 + k, v 2·5120·1024 = 62,914,560; two RMSNorms 10,240. Layers 0,
    2, …, 46 (24) dense: SwiGLU 3·5120·16384 = 251,658,240 → 314,583,040. Layers 1, 3, …, 47
    (24, interleave_moe_layer_step 2) MoE: 128 routed experts of 3·5120·8192 = 125,829,120
    each, one shared expert of the same size, router 5120·128 = 655,360 → 16,295,536,640, of
    which active (top-1 + shared) 315,238,400. Embedding and output layer 2·202,048·5120 =
    2,068,971,520 (untied); final norm 5,120."""
    arch = get_model("llama4-maverick").model.arch
    counts = count_params(arch)
    attention, norms, embed = 62_914_560, 10_240, 2_068_971_520 + 5_120
    dense = attention + 3 * 5120 * 16384 + norms
    moe = attention + 129 * 125_829_120 + 5120 * 128 + norms
    active = attention + 2 * 125_829_120 + 5120 * 128 + norms
    assert (dense, moe, active) == (314_583_040, 16_295_536_640, 315_238_400)
    assert [arch.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert [arch.layer_span(i).value for i in range(4)] == ["chunked"] * 3 + ["global"]
    assert counts.total == 24 * (dense + moe) + embed == 400_711_848_960  # the card's 400B
    assert counts.active == 24 * (dense + active) + embed == 17_184_691_200  # the card's 17B


def test_qwen3_30b_a3b_counts_the_published_30_5b_and_3_3b():
    """Qwen/Qwen3-30B-A3B (model card: 30.5B total, 3.3B activated, 29.9B non-embedding).
    Per layer (48, every one MoE): attention q, o 2·2048·4096 + k, v 2·2048·512 = 18,874,368;
    QK-norm 2·128 = 256; two RMSNorms 2·2048 = 4,096; router 2048·128 = 262,144; experts
    128·3·2048·768 = 603,979,776, of which 8 active: 37,748,736. Embedding and output layer
    2·151,936·2048 = 622,329,856 (untied); final norm 2,048."""
    arch = get_model("qwen3-30b-a3b").model.arch
    counts = count_params(arch)
    layer = 18_874_368 + 256 + 4_096 + 262_144
    assert layer == 2 * 2048 * 4096 + 2 * 2048 * 512 + 2 * 128 + 2 * 2048 + 2048 * 128
    assert counts.total == 48 * (layer + 603_979_776) + 622_329_856 + 2_048 == 30_532_122_624
    assert counts.active == 48 * (layer + 37_748_736) + 622_329_856 + 2_048 == 3_353_032_704
    # the card's 30.5B, 3.3B and 29.9B: the counts to one decimal, cut (3.353 prints as 3.3)
    assert counts.total // 10**8 == 305 and counts.active // 10**8 == 33
    assert (counts.total - 622_329_856) // 10**8 == 299  # non-embedding


def test_validation_models_are_not_typed_twice():
    """A model of the catalogue is not typed again in scenarios/validation/models.toml (the
    validation rows name the catalogue entry)."""
    from trainplan.interface.fidelity.validation import validation_models

    assert not set(validation_models()) & set(model_names())


def test_hf_missing_key_names_key_and_file():
    config = _hf("mixtral-8x7b")
    del config["num_local_experts"]
    with pytest.raises(ScenarioError, match=r"x/config\.json: .*'num_local_experts'"):
        architecture_from_hf(config, "x/config.json")
    config = _hf("deepseek-v3")
    del config["kv_lora_rank"]
    with pytest.raises(ScenarioError, match="'kv_lora_rank'"):
        architecture_from_hf(config, "x/config.json")


def test_hf_qwen2_qkv_only_biases_are_counted():
    """Qwen2's q, k and v projections carry biases and nothing else does (``qkv_bias``): per
    layer a·d + 2·g·d = 28·128 + 2·4·128 = 4,608 parameters, 28 layers = 129,024 over the
    bias-free count. Total 7,615,616,512: the safetensors count of Qwen/Qwen2-7B (7.62B on the
    model card)."""
    arch = architecture_from_hf(_hf("qwen2-7b"), "qwen2-7b/config.json")
    assert arch.qkv_bias and not arch.linear_bias
    assert count_params(arch).total == 7_615_616_512
    plain = dataclasses.replace(arch, qkv_bias=False)
    assert count_params(arch).total - count_params(plain).total == 28 * (28 * 128 + 2 * 4 * 128)


def test_hf_partial_biases_and_unsupported_types_rejected():
    config = _hf("llama3-8b")
    config["attention_bias"] = True
    with pytest.raises(ScenarioError, match="attention projections only"):
        architecture_from_hf(config, "c.json")
    config["mlp_bias"] = True
    assert architecture_from_hf(config, "c.json").linear_bias
    with pytest.raises(ScenarioError, match="model_type 'gpt2' is not supported"):
        architecture_from_hf({**config, "model_type": "gpt2"}, "c.json")
    with pytest.raises(ScenarioError, match="c.json: hidden_act = 'relu': a gated MLP"):
        architecture_from_hf({**config, "hidden_act": "relu"}, "c.json")
    assert architecture_from_hf({**config, "hidden_act": "gelu"}, "c.json").mlp is Mlp.GEGLU


def test_model_spec_from_hf_config_and_catalogue_path():
    spec = ModelSpec.from_hf_config(HF / "llama3-8b" / "config.json")
    assert spec.name == "llama3-8b"
    entry = get_model(str(HF / "mixtral-8x7b" / "config.json"))
    assert entry.training == {} and entry.layout == {}
    assert entry.model.arch == get_model("mixtral-8x7b").model.arch
    assert get_model(str(HF / "deepseek-v3")).model.arch.moe.num_experts == 256
    with pytest.raises(PlannerError):
        ModelSpec.from_hf_config(HF / "missing" / "config.json")


# ---------------------------------------------------------------------------------------------
# Golden parameter counts (released checkpoints), from the catalogue and from the HF fixtures


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("llama3-8b", 8_030_261_248, 8_030_261_248),
        ("mixtral-8x7b", 46_702_792_704, 12_879_925_248),
    ],
)
def test_released_parameter_counts(name, total, active):
    for arch in (
        get_model(name).model.arch,
        architecture_from_hf(_hf(name), f"{name}/config.json"),
        get_model(str(HF / name / "config.json")).model.arch,
    ):
        counts = count_params(arch)
        assert counts.total == total
        assert counts.active == active
