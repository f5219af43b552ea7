"""torchao's FP8 all-gather under ``fsdp2`` (``--set fp8_param_gather=true``) as a user runs it,
each call its own process: refused at dp 1 (torchtitan 1ea5d511f ``Float8LinearConverter``
turns it on only where ``parallel_dims.dp_shard_enabled``, dp_shard > 1), cp > 1 included,
where FSDP still shards over the cp ranks in BF16; accepted for a MoE model, whose routed
experts gather in BF16 beside the FP8 linears (their edp row unchanged)."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many

FSDP2 = ("evaluate", "--gpu", "H100-SXM", "--framework", "fsdp2", "--precision", "fp8")
FP8 = ("--set", "fp8_param_gather=true")
MIXTRAL = (*FSDP2, "--model", "mixtral-8x7b", "--gpus", "8", "--dp", "8", "--tp", "1", "--pp", "1",
           "--global-batch", "8", "--seq-len", "4096", "--json")  # fmt: skip


def test_dp_1_with_cp_is_refused_and_a_moe_model_is_accepted() -> None:
    done = run_many(
        {
            "cp": (*FSDP2, "--model", "llama3-8b", "--gpus", "2", "--dp", "1", "--cp", "2",
                   "--tp", "1", "--pp", "1", "--global-batch", "1", *FP8),
            "moe": (*MIXTRAL, *FP8),
            "moe-bf16": MIXTRAL,
            "megatron": tuple("megatron" if a == "fsdp2" else a for a in (*MIXTRAL, *FP8)),
        }
    )  # fmt: skip
    line = refusal(done["cp"])
    assert line.startswith("--set fp8_param_gather:"), line
    assert "dp_shard > 1" in line and "not at dp 1" in line and "2 cp ranks" in line, line
    for key in ("moe", "moe-bf16"):
        assert done[key].returncode == 0, done[key].stderr[-2000:]
    on, off = (json.loads(done[k].stdout) for k in ("moe", "moe-bf16"))
    rows_on, rows_off = ({r["axis"]: r for r in d["traffic"]} for d in (on, off))
    # 2 gathers · 7/8 · 32 layers · (2 · 4,096² + 2 · 4,096 · 1,024) attention linears a byte less
    saved = rows_off["dp"]["bytes_per_step"] - rows_on["dp"]["bytes_per_step"]
    assert saved == 2 * 7 * 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024) // 8 == 2_348_810_240
    assert rows_on["edp"]["bytes_per_step"] == rows_off["edp"]["bytes_per_step"]
    assert "fp8" in rows_on["dp"]["collective"]
    # the edp row named its collective "..., linear weights gathered in fp8 (routed experts)"
    # though its bytes are the BF16 ones (torchtitan's GroupedExperts are no Float8Linear:
    # model.fp8_gathers.fp8_gathered_experts); it names no FP8 gather now
    assert "fp8" not in rows_on["edp"]["collective"], rows_on["edp"]["collective"]
    # under megatron the grouped experts are FP8 parameters too: their row says so
    megatron = {r["axis"]: r for r in json.loads(done["megatron"].stdout)["traffic"]}
    assert megatron["edp"]["collective"].endswith("gathered in fp8 (routed experts)")
