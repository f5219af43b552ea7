"""``trainplan`` in its own process on DeepSpeed MoE layouts: tp > 1 refused (DeepSpeed's
MOELayer drops and gathers the tokens duplicated over tp, not counted; the figures' derivation:
tests/model/test_deepspeed_experts.py), so the search splits the experts over ep; and a search
whose given degree breaks one of the model's rules names it."""

from __future__ import annotations

from tests.cli_runs import refusal, run_many

MIXTRAL = ("--model", "mixtral-8x7b", "--gpus", "32", "--framework", "deepspeed")


def test_deepspeed_moe_search_etp_refusal_and_axis_rule():
    done = run_many({
        "search": ("search", *MIXTRAL, "--pp", "2", "--pp", "4", "--pp", "8"),
        "etp2": ("evaluate", *MIXTRAL, "--dp", "2", "--tp", "8", "--pp", "2", "--etp", "2"),
        "tp8": ("evaluate", *MIXTRAL, "--dp", "2", "--tp", "8", "--pp", "2"),
        "tp16": ("search", "--model", "llama3-70b", "--gpus", "64", "--tp", "16"),
    })  # fmt: skip
    search = done["search"]
    assert search.returncode == 0, search.stderr[-2000:]
    assert (
        "layout: dp 16 × tp 1 × pp 2 × cp 1 (ep 8), deepspeed ZeRO-1, recompute full"
        in search.stdout
    )
    # 53.89 GB before the MoE forward working set (DeepSpeed's decode, 22·S·h = 2.95 GB at
    # S = 32,768 on top of the recompute transient (full), and the gate rows in that transient),
    # one layer's backward working set and the world group's NCCL ring; 58.15 GB before
    # DeepSpeed's pipeline engine: stage 0 (tp 1, nothing partitioned) keeps its whole output
    # per micro-batch in flight, 2 × 2·32,768·4,096 = 536,870,912 B, and its gradient receive
    # buffer, 268,435,456 B, for the whole run: 58.96 GB; 61.24 GB with what Megatron-DeepSpeed's
    # eager layer keeps in the recompute transient (its derivation: tests/model/
    # test_glu_saved_copies.py): the experts' SiLU output, k·β·S·f = 2·2·32,768·14,336 =
    # 1,879,048,192 B, and K and V repeated to the 32 query heads, 2·β·S·(a − g)·d =
    # 2·2·32,768·24·128 = 402,653,184 B: 58.96 + 2.28 = 61.24 GB; 62.05 GB with DeepSpeed's own
    # groups' communicators, the model-parallel group's and the pipe group's rings,
    # 2 × 402,653,184 B (tests/model/test_deepspeed_groups.py); 65.27 GB on stage 0 with
    # Megatron-DeepSpeed's bool causal masks there, args.attn_mask and the input buffers' clones
    # of pp 2 micro-batches, 3 × 32,768² = 3,221,225,472 B (tests/model/
    # test_deepspeed_causal_mask.py). Stage 1 (61.14 GB before) is now the busiest: the pipeline
    # engine keeps the last stage's fp32 logits of two micro-batches for the whole run
    # (pipe_buffers['outputs'], never emptied there; tests/model/test_deepspeed_pipe_logits.py),
    # 2·4·32,768·32,000 = 8,388,608,000 B, and its args.attn_mask, 32,768² = 1,073,741,824 B:
    # 61.14 + 8.39 + 1.07 = 70.60 GB; flash-attn's FP32 softmax statistics in the recomputed
    # layer (FlashAttnVarlenFunc saves softmax_lse), 4·32·32,768 = 4,194,304 B: 70.61 GB
    # (70,605,641,216 B); 70.36 GB (70,358,177,280 B) with NCCL's channels by placement and their
    # set-up (model/terms/comm_memory.py): stage 1's communicators, the dp ring over 2 nodes (16
    # channels: 192 + 100 = 292 MiB), the all-to-all's 7 NVLink peers (2,688 MiB) and its set-up
    # (196), the expert dp pair (292), the pipeline pair across nodes (4 channels: 48 + 28), the
    # world, model-parallel and pipe rings (292 each): 4,420 MiB, against 384 + 2,688 + 384 + 48
    # + 3 × 384 = 4,656 MiB before, 236 MiB = 247,463,936 B fewer. 70.13 GB (70,131,684,864 B)
    # with the expert dp pair placed as DeepSpeed builds it (utils/groups.py
    # _create_expert_and_data_parallel at edaa72212: range(i, pp_stride, ep), stride ep = 8),
    # one rank on each of 2 nodes: 4 channels, 48 + 28 = 76 MiB, 216 MiB = 226,492,416 B fewer.
    # 70.40 GB (70,400,120,320 B) with the recomputed layer's two bool masks of Megatron-DeepSpeed's
    # TorchScript bias-dropout-add (model.activation_rows.BIAS_DROPOUT_MASKS; kept at dropout 0),
    # 2 × 32,768·4,096 (tp 1) = 268,435,456 B, in the recompute transient. 70.41 GB
    # (70,408,508,928 B) with NVLink SHARP's credits (model/terms/nvls_memory.py): the dp ring
    # (8 ranks a node on 2 nodes) and the world, model-parallel and pipe rings (counted at the
    # world's placement, 8 a node on 4 nodes) run no NVLS across nodes but hold 16 × 2 × 64 B × 8
    # → 2 MiB of credits each: 8 MiB; the all-to-all's and the pipeline's peers connect no ring
    assert "Memory per GPU (busiest pipeline stage: 1, counted from 0)" in search.stdout
    assert 70_358_177_280 - 216 * 2**20 + 2 * 32768 * 4096 == 70_400_120_320
    assert 70_400_120_320 + 4 * 2 * 2**20 == 70_408_508_928
    assert "= total (peak: forward-backward)                    70.41 GB" in search.stdout
    assert refusal(done["etp2"]) == (
        "--etp: 2 under framework deepspeed must be 1 (experts whole on every tp rank, the "
        "default) or tp = 8 (--enable-expert-tensor-parallelism)"
    )
    assert refusal(done["tp8"]).startswith(
        "--tp: 8 under framework deepspeed with routed experts is not modelled"
    )
    assert refusal(done["tp16"]) == "--tp: 16 does not divide num_kv_heads = 8"
