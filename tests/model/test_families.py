"""Issue 11 item 6: today's model families from their ``config.json``, each count derived by hand.

Fixtures in ``tests/data/hf`` are written from the published dimensions (nothing is downloaded):
Qwen1.5-72B and Qwen3 (Qwen/… model cards and configs; Qwen2.5 report arXiv 2412.15115, Qwen3
report arXiv 2505.09388), Gemma 2 9B and Gemma 3 1B/27B (Gemma 2 report arXiv 2408.00118,
Gemma 3 report arXiv 2503.19786), gpt-oss-120b (model card arXiv 2508.10925, Table 1), Llama 4
Scout and Maverick (Meta's model cards and configs), Phi-3-mini-4k (arXiv 2404.14219), DeepSeek-V3
with its MTP module (arXiv 2412.19437 §2.2, §4.2).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trainplan.model.errors import ScenarioError
from trainplan.model.estimate import stage_memory
from trainplan.model.flops import MfuConvention, step_flops
from trainplan.model.hf_families import read_hf_config
from trainplan.model.layout import Layout, Recompute
from trainplan.model.model_spec import ModelSpec
from trainplan.model.params import count_params, stage_params
from trainplan.model.specs import Mlp, TrainingSpec
from trainplan.model.split import stage_layers
from trainplan.model.timing import stage_microbatch_flops
from trainplan.scenarios.catalogue import get_model

HF = Path(__file__).parent.parent / "data" / "hf"


def _read(name: str, **changes):
    config = {**json.loads((HF / name / "config.json").read_text()), **changes}
    return read_hf_config(config, f"{name}/config.json")


def test_qwen15_72b_counts_its_qkv_biases():
    # Qwen1.5-72B (model_type qwen2): 80 layers, h 8192, 64 heads (MHA), f 24576, V 152064,
    # untied, biases on q, k and v only (Qwen2Attention). Per layer:
    #   q, k, v, o weights 4·h² = 268,435,456; q, k, v biases 3·h = 24,576
    #   SwiGLU 3·h·f = 603,979,776; two RMSNorms 2·h = 16,384       → 872,456,192
    # 80 layers = 69,796,495,360; embedding and output 2·V·h = 2,491,416,576; final norm 8,192
    arch, notes = _read("qwen1.5-72b")
    assert arch.qkv_bias and not arch.linear_bias and notes == ()
    assert count_params(arch).total == 69_796_495_360 + 2_491_416_576 + 8_192 == 72_287_920_128


def test_qwen3_counts_qk_norm_and_reads_moe_layer_rules():
    # Qwen3-8B: 36 layers, h 4096, 32 heads of 128, 8 KV heads, f 12288, V 151936, untied.
    # Per layer: q 4096·4096 + k, v 2·4096·1024 + o 4096·4096 = 41,943,040; QK-norm 2·128;
    # SwiGLU 3·4096·12288 = 150,994,944; norms 8,192 → 192,946,432; × 36 = 6,946,071,552;
    # + 2·151936·4096 = 1,244,659,712 + 4,096
    arch, _ = _read("qwen3-8b")
    assert arch.qk_norm and count_params(arch).total == 8_190_735_360
    # Qwen3-30B-A3B: 48 MoE layers (decoder_sparse_step 1), 128 experts of 768, top-8, h 2048,
    # 32 heads of 128, 4 KV heads. Per layer: attention 2·2048·4096 + 2·2048·512 = 18,874,368,
    # QK-norm 256, norms 4,096, router 2048·128 = 262,144, experts 128·3·2048·768 = 603,979,776
    # (8 of them active: 37,748,736). Embedding and output 2·151936·2048 = 622,329,856.
    moe, _ = _read("qwen3-30b-a3b")
    layer = 18_874_368 + 256 + 4_096 + 262_144
    counts = count_params(moe)
    assert counts.total == 48 * (layer + 603_979_776) + 622_329_856 + 2_048 == 30_532_122_624
    assert counts.active == 48 * (layer + 37_748_736) + 622_329_856 + 2_048 == 3_353_032_704
    # decoder_sparse_step 2 and mlp_only_layers [1]: MoE on layers i with (i + 1) even, not 1
    sparse, _ = _read("qwen3-30b-a3b", decoder_sparse_step=2, mlp_only_layers=[1])
    assert [i for i in range(6) if sparse.is_moe_layer(i)] == [3, 5]
    assert sparse.num_moe_layers == 23  # 24 odd layers, less layer 1


def test_gemma2_and_gemma3():
    # Gemma 2 9B: 42 layers, h 3584, 16 heads of 256, 8 KV heads, GeGLU f 14336, V 256000,
    # tied, four RMSNorms per layer. Per layer: q 3584·4096 + k, v 2·3584·2048 + o 4096·3584
    # = 44,040,192; GeGLU 3·3584·14336 = 154,140,672; norms 4·3584 = 14,336 → 198,195,200;
    # × 42 = 8,324,198,400; + embedding 256000·3584 = 917,504,000 (tied) + final norm 3,584
    gemma2, notes = _read("gemma-2-9b")
    assert (gemma2.mlp, gemma2.post_norms, gemma2.tie_embeddings) == (Mlp.GEGLU, True, True)
    assert gemma2.attention_softcapping and gemma2.final_logit_softcapping and notes == ()
    assert [gemma2.layer_span(i).value for i in range(3)] == ["local", "global", "local"]
    assert count_params(gemma2).total == 8_324_198_400 + 917_504_000 + 3_584 == 9_241_705_984
    # Gemma 3 1B (gemma3_text): 26 layers, h 1152, 4 heads of 256, 1 KV head, f 6912,
    # V 262144, QK-norm. Per layer: 1152·1024 + 2·1152·256 + 1024·1152 = 2,949,120; QK-norm 512;
    # GeGLU 3·1152·6912 = 23,887,872; norms 4·1152 = 4,608 → 26,842,112; × 26 = 697,894,912;
    # + embedding 262144·1152 = 301,989,888 + 1,152
    gemma3, _ = _read("gemma-3-1b")
    assert count_params(gemma3).total == 697_894_912 + 301_989_888 + 1_152 == 999_885_952
    assert (gemma3.sliding_window, gemma3.layer_span(5).value) == (512, "global")
    # Gemma 3 27B through its multimodal wrapper: V 262,208 is Gemma3TextConfig's default
    big, notes = _read("gemma-3-27b")
    assert big.vocab_size == 262_208 and big == get_model("gemma3-27b").model.arch
    assert notes == (
        "gemma-3-27b/config.json: the vision encoder (vision_config) is not modelled: the text "
        "decoder only",
    )


def test_gpt_oss_matches_its_model_card():
    # gpt-oss-120b (model card Table 1: 116.83B total, 5.13B active): h 2880, 64 heads of 64,
    # 8 KV heads, 128 experts of 2880, top-4, V 201088, untied. Per layer:
    #   attention 2880·4096·2 + 2·2880·512 = 26,542,080, biases 4096 + 1024 + 2880 = 8,000,
    #   sinks 64                                                              → 26,550,144
    #   an expert 3·2880·2880 + biases 2·2880 + 2880 = 24,891,840; router 2880·128 + 128
    #   norms 2·2880 = 5,760
    arch, notes = _read("gpt-oss-120b")
    layer_dense = 26_550_144 + 368_768 + 5_760
    counts = count_params(arch)
    embed = 201088 * 2880  # 579,133,440, and the same for the output layer
    assert counts.total == 36 * (layer_dense + 128 * 24_891_840) + 2 * embed + 2_880
    assert counts.total == 116_829_156_672
    assert counts.active == 36 * (layer_dense + 4 * 24_891_840) + 2 * embed + 2_880
    # the card's 5.13B leaves out the input embedding (a lookup): 5,711,982,912 − 579,133,440
    assert round((counts.active - embed) / 1e7) == 513
    assert "quantization_config" in notes[0]
    # swiglu_limit 7.0 and rope_scaling {"rope_type": "yarn"}: what Megatron-Core runs unfused
    assert arch.glu_clamp and arch.yarn_rope


def test_llama4_scout_and_maverick():
    # Scout: 48 MoE layers of 16 experts of 8192 (top-1) + 1 shared expert of 8192; h 5120,
    # 40 heads of 128, 8 KV heads; V 202048, untied. Per layer: attention 2·5120·5120 +
    # 2·5120·1024 = 62,914,560; an expert 3·5120·8192 = 125,829,120; router 5120·16 = 81,920;
    # norms 10,240. Embedding and output 2·202048·5120 = 2,068,971,520; final norm 5,120.
    scout, notes = _read("llama-4-scout")
    layer = 62_914_560 + 125_829_120 + 81_920 + 10_240  # everything but the routed experts
    counts = count_params(scout)
    assert counts.total == 48 * (layer + 16 * 125_829_120) + 2_068_971_520 + 5_120
    assert counts.active == 48 * (layer + 125_829_120) + 2_068_976_640 == 17_172_894_720
    assert [scout.layer_span(i).value for i in range(4)] == ["chunked"] * 3 + ["global"]
    assert scout.attention_chunk_size == 8192 and any("use_qk_norm" in n for n in notes)
    # Maverick: 128 experts on every second layer (1, 3, …, 47), dense SwiGLU of 16384 between
    maverick, _ = _read("llama-4-maverick")
    assert maverick.num_moe_layers == 24 and not maverick.is_moe_layer(0)
    dense = 62_914_560 + 3 * 5120 * 16384 + 10_240  # 314,583,040
    moe = 62_914_560 + 129 * 125_829_120 + 5120 * 128 + 10_240  # 16,295,536,640
    assert count_params(maverick).total == 24 * (dense + moe) + 2_068_976_640 == 400_711_848_960


def test_phi3_and_refusals():
    # Phi-3-mini: 32 layers, h 3072, 32 heads (MHA), f 8192, V 32064, untied; its fused qkv_proj
    # and gate_up_proj hold 4·h² = 37,748,736 and 3·h·f = 75,497,472 per layer, + norms 6,144
    # → 113,252,352 × 32 = 3,624,075,264; + 2·32064·3072 = 197,001,216 + 3,072
    phi, _ = _read("phi-3-mini-4k")
    assert count_params(phi).total == 3_821_079_552 and phi.sliding_window == 2047
    with pytest.raises(ScenarioError, match=r"resid_pdrop = 0.1: dropout above 0 is not modelled"):
        _read("phi-3-mini-4k", resid_pdrop=0.1)
    with pytest.raises(ScenarioError, match="model_type 'qwen2_vl' is not supported"):
        _read("qwen3-8b", model_type="qwen2_vl")


def test_deepseek_v3_mtp_parameters_memory_and_flops():
    # One MTP module (num_nextn_predict_layers 1) on the last of 16 pipeline stages: its MoE
    # block (dense part 187,107,328 attention + 14,336 norms + 1,835,264 router + 44,040,192
    # shared expert = 232,997,120; routed experts 11,274,289,152), its projection and norms
    # 102,781,952, and — the embedding being shared and pp > 1 — a copy of it, V·h = 926,679,040
    arch = get_model("deepseek-v3").model.arch
    plain = replace(arch, mtp_layers=0)
    with_mtp, without = stage_params(arch, 16)[-1], stage_params(plain, 16)[-1]
    assert with_mtp.layers == (58, 59, 60, 61) and without.layers == (58, 59, 60)
    assert with_mtp.dense - without.dense == 232_997_120 + 102_781_952 + 926_679_040
    assert with_mtp.experts - without.experts == 11_274_289_152
    # FLOPs of one micro-batch (b 1, s 4096, causal) on that stage: 3 passes of the block's
    # matmuls 2·s·W, W = 187,105,280 (MLA less its two latent norms) + 9·3·7168·2048 +
    # 7168·256 = 585,302,016, its attention core 2·(4096·4097/2)·128·(192 + 128), the shared
    # head once more 2·s·h·V and the projection 2·s·2h·h
    t = TrainingSpec(seq_len=4096, global_batch_size=16)
    s, h, V = 4096, 7168, 129280
    extra = 3 * (2 * s * 585_302_016 + 2 * (s * (s + 1) // 2) * 128 * 320 + 2 * s * h * V)
    extra += 3 * 2 * s * 2 * h * h
    more = stage_microbatch_flops(arch, stage_layers(arch, 16)[-1], True, Layout(), t, True)
    less = stage_microbatch_flops(plain, stage_layers(plain, 16)[-1], True, Layout(), t, True)
    assert more - less == extra == 41_745_974_820_864
    # the whole step counts them too (megatron convention: B = 16 sequences)
    args = (0, s, 16, Recompute.NONE, MfuConvention.MEGATRON, True)
    assert step_flops(arch, *args).model_flops - step_flops(plain, *args).model_flops == 16 * extra
    # memory of the last stage (tp 1, b 1, 1F1B: one micro-batch in flight there): the block's
    # activations as another MoE layer, and its pass through the head — final-norm and head
    # inputs 2·β·S·h, FP32 logits 4·S·V — with the shifted embedding's norm input and the
    # projection's [S, 2h] input, 3·β·S·h, and (megatron: the heads read Megatron-Core's
    # torch.cat copy) the incoming hidden state's norm input, β·S·h: 117,440,512 +
    # 2,118,123,520 + 176,160,768 + 58,720,256
    lay = Layout(pp=16)
    acts = stage_memory(ModelSpec(name="v3", arch=arch), t, lay)[-1].activations
    base = stage_memory(ModelSpec(name="v3", arch=plain), t, lay)[-1].activations
    assert acts.embedding_bytes - base.embedding_bytes == 2_470_445_056
    one_moe_layer = base.layers_bytes / 3  # the stage's three main layers are MoE layers
    assert acts.layers_bytes - base.layers_bytes == one_moe_layer


def test_mtp_layers_is_a_choice_for_evaluate_and_search(tmp_path):
    """``--mtp-layers N`` (0 drops the modules) on evaluate and search, ``mtp_layers`` in a
    scenario file; a declared size has no layers to add one to."""
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "trainplan", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    lay = ["--gpus", "2048", "--dp", "128", "--pp", "16", "--ep", "64", "--json"]
    dropped = json.loads(
        run("evaluate", "--model", "deepseek-v3", "--mtp-layers", "0", *lay).stdout
    )
    kept = json.loads(run("evaluate", "--model", "deepseek-v3", *lay).stdout)
    # 671,026,419,200 main parameters, + 11,610,068,224 for the one module (above)
    assert dropped["model"]["num_params"] == 671_026_419_200
    assert kept["model"]["num_params"] == 671_026_419_200 + 11_610_068_224
    assert kept["time"]["step_s"] > dropped["time"]["step_s"]  # the last stage sets the pace
    out = run("evaluate", "--params", "7B", "--mtp-layers", "1")
    assert out.returncode == 2 and "--mtp-layers: 1 needs a model with dimensions" in out.stderr
    scenario = tmp_path / "s.toml"
    scenario.write_text('model = "deepseek-v3"\ngpus = 2048\ngpu = "H800"\nmtp_layers = -1\n')
    out = run("search", "--scenario", str(scenario))
    assert out.returncode == 2 and "mtp_layers: -1 must be at least 0" in out.stderr
