"""The ZeRO table reads the memory report's own model-state term
(:func:`model.terms.state.model_state_term`, one cost model), so under Muon its row of the
layout's own ZeRO stage is the report's model state (reviewer: 25.60 GB in the table, Adam's,
beside the report's 26.84 GB). Each call its own process.

Hand derivation, Llama 3 8B on dp 32 × tp 2 (Megatron, BF16 weights, FP32 gradients):
P = 8,030,527,488 / 2 = 4,015,263,744 parameters a GPU (the padded vocabulary's). Adam keeps
12 B a parameter (FP32 master, m, v): ZeRO-1 2·P + 4·P + 12·P/32 = 25,597,306,368 B, ZeRO-0
2·P + 4·P + 12·P = 72,274,747,392 B.
Muon (Megatron-Core's layer-wise distributed optimizer) keeps 8 B a matrix element (FP32 master
and momentum) and Adam's 12 B for the rest — the embedding and output layer
2 · 128,256 · 4,096 / 2 = 525,336,576 and 65 RMSNorms of 4,096 (266,240): unsharded
8·P + 4·(525,336,576 + 266,240) = 34,224,521,216 B, ZeRO-0 6·P + that = 58,316,103,680 B.
Under ZeRO-1 the layer-wise optimizer pads its shard-aligned buckets by 2^28 = 268,435,456
elements a GPU here, held as weights (2 B), gradients (4 B) and sharded state (8 B / 32):
2·(P + 2^28) + 4·(P + 2^28) + (34,224,521,216 + 8·2^28)/32 = 8,567,398,400 + 17,134,796,800 +
1,136,625,152 = 26,838,820,352 B, the report's model state.
"""

from __future__ import annotations

import json

from tests.cli_runs import run_many

LAYOUT = ["--model", "llama3-8b", "--gpu", "H100-SXM", "--dp", "32", "--tp", "2"]
LAYOUT += ["--micro-batch", "2", "--global-batch", "2048", "--json"]
P = 8_030_527_488 // 2
PAD = 2**28
MUON_FULL = 8 * P + 4 * (2 * 128_256 * 4_096 // 2 + 65 * 4_096)


def test_the_zero_table_is_the_report_under_muon_and_adam():
    done = run_many(
        {
            "muon": ["evaluate", *LAYOUT, "--optimizer", "muon"],
            "adam": ["evaluate", *LAYOUT],
            "muon text": ["evaluate", *LAYOUT[:-1], "--optimizer", "muon"],
        }
    )
    for d in done.values():
        assert d.returncode == 0, d.stderr[-2000:]
    muon, adam = json.loads(done["muon"].stdout), json.loads(done["adam"].stdout)
    rows = {r["zero_stage"]: r["model_state_bytes"] for r in muon["zero_table"]}
    assert MUON_FULL == 34_224_521_216
    assert muon["memory"]["weights_bytes"] == 2 * (P + PAD) == 8_567_398_400
    assert muon["memory"]["gradients_bytes"] == 4 * (P + PAD) == 17_134_796_800
    assert muon["memory"]["optimizer_bytes"] == (MUON_FULL + 8 * PAD) // 32 == 1_136_625_152
    assert rows[1] == muon["memory"]["model_state_bytes"] == 26_838_820_352
    assert rows[0] == 6 * P + MUON_FULL == 58_316_103_680
    adam_rows = {r["zero_stage"]: r["model_state_bytes"] for r in adam["zero_table"]}
    assert adam_rows[1] == adam["memory"]["model_state_bytes"] == 6 * P + 12 * P // 32
    assert adam_rows[0] == 18 * P == 72_274_747_392
    text = done["muon text"].stdout
    assert "  = model state                                        26.84 GB" in text
    assert "1       26.84 GB       2.17×" in text
