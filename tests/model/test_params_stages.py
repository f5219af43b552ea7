"""Parameter counts per pipeline stage (issue 2 item 2). The whole-model golden counts
(Llama 3 8B = 8,030,261,248; Mixtral-8x7B = 46,702,792,704) are in tests/test_catalogue.py."""

from __future__ import annotations

from trainplan.model.params import count_params, stage_params
from trainplan.model.split import split_layers
from trainplan.scenarios.catalogue import get_model

from ._shared import load


def test_llama3_405b_dimensions_match_the_published_table():
    pub = load("published.toml")["llama3_405b"]
    arch = get_model("llama3-405b").model.arch
    assert (arch.num_layers, arch.hidden_size, arch.ffn_hidden_size) == (
        pub["layers"],
        pub["hidden"],
        pub["ffn_hidden"],
    )
    assert (arch.num_attention_heads, arch.kv_heads, arch.vocab_size) == (
        pub["heads"],
        pub["kv_heads"],
        pub["vocab"],
    )
    assert abs(count_params(arch).total - pub["params"]) / pub["params"] < 0.01


def test_llama3_405b_pp16_split_is_7_8x14_7():
    arch = get_model("llama3-405b").model.arch
    stages = stage_params(arch, 16)
    assert [len(s.layers) for s in stages] == [7] + [8] * 14 + [7]
    # every layer exactly once, in order
    assert [j for s in stages for j in s.layers] == list(range(126))
    assert split_layers(126, 16) == tuple(s.layers for s in stages)


def test_llama3_405b_stage_placement():
    """First stage: embedding; last: final norm and the untied output layer; middle: layers."""
    arch = get_model("llama3-405b").model.arch
    counts = count_params(arch)
    stages = stage_params(arch, 16)
    per_layer = (counts.layers_dense) // 126
    h, V = arch.hidden_size, arch.vocab_size
    assert counts.embedding == V * h and counts.output == V * h and counts.final_norm == h
    assert stages[0].dense == 7 * per_layer + V * h
    assert all(s.dense == 8 * per_layer for s in stages[1:-1])
    assert stages[-1].dense == 7 * per_layer + h + V * h
    assert sum(s.dense for s in stages) == counts.total
    assert all(s.experts == 0 for s in stages)


def test_tied_embeddings_last_stage_keeps_a_copy():
    """megatron-1t (tied): with pp > 1 the last stage holds its own V·h for the output layer."""
    arch = get_model("megatron-1t").model.arch
    counts = count_params(arch)
    assert counts.output == 0
    stages = stage_params(arch, 64)
    assert [len(s.layers) for s in stages] == [2] * 64
    assert sum(s.dense for s in stages) == counts.total + arch.vocab_size * arch.hidden_size
    assert sum(s.dense for s in stage_params(arch, 1)) == counts.total


def test_mixtral_experts_by_stage():
    arch = get_model("mixtral-8x7b").model.arch
    counts = count_params(arch)
    stages = stage_params(arch, 4)
    assert sum(s.experts for s in stages) == counts.layers_experts
    assert sum(s.dense for s in stages) == counts.total - counts.layers_experts
    assert len({s.experts for s in stages}) == 1
