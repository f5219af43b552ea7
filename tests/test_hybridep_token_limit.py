"""HybridEP's token limit across NVLink domains as a user meets it (each run its own process):
its dispatch may post 3 InfiniBand work requests a token and one more, which must stay under
the queue pair's 65,536 (deepseek-ai/DeepEP ``hybrid-ep`` 94a9f8f6b1 ``csrc/hybrid_ep/
config.cuh`` ``hybrid_ep_token_capacity_is_valid``, ``HYBRID_EP_IB_QP_MAX_TX_DEPTH`` 65,536,
``HYBRID_EP_DISPATCH_TX_DEPTH_TOKEN_FACTOR`` 3, ``_EXTRA`` 1), checked only where the group
spans more than one domain (``num_of_nodes > 1``): ``3·T + 1 < 65,536``, ``T ≤ (65,536 − 2)/3 =
21,844`` tokens a rank, ``T`` being the ``Configurer``'s ``max_num_of_tokens_per_rank``, the
first dispatch's ``x.shape[-2]`` (Megatron-LM d98e8a64dd ``fused_a2a.py``
``HybridEPDispatch.forward``) at least 512 and padded up to the 64-token combine chunk: so at
most 21,824 = 341 × 64 tokens a rank a micro-batch. The legality rule (model.moe_rules.
hybridep_tokens_rule) refuses a layout beyond it in one line, exit 2; the search skips it."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import refusal, run_many
from trainplan.model.dispatch_buffers import (
    HYBRIDEP_ACROSS_DOMAINS_MAX_TOKENS,
    hybridep_tokens_per_rank,
)

QWEN = ("--model", "qwen3-30b-a3b", "--gpu", "B300", "--set", "moe_dispatcher=hybridep")
"""Qwen3-30B-A3B on 8-GPU B300 nodes (NVLink domains of 8), 4,096-token sequences."""
EVAL = ("evaluate", *QWEN)
SEARCH = ("search", *QWEN, "--gpus", "16", "--framework", "megatron", "--tp", "1", "--pp", "1",
          "--ep", "16", "--global-batch", "512", "--json")  # fmt: skip


@pytest.fixture(scope="module")
def runs():
    return run_many({
        "ep16 b8": [*EVAL, "--dp", "16", "--ep", "16", "--micro-batch", "8", "--global-batch", "512"],
        "ep16 b6": [*EVAL, "--dp", "16", "--ep", "16", "--micro-batch", "6", "--global-batch", "480"],
        "ep16 b5": [*EVAL, "--dp", "16", "--ep", "16", "--micro-batch", "5", "--global-batch",
                    "480", "--json"],
        "ep16 b8 cp2": [*EVAL, "--dp", "8", "--cp", "2", "--ep", "16", "--micro-batch", "8",
                        "--global-batch", "512", "--json"],
        "ep8 b8": [*EVAL, "--dp", "8", "--ep", "8", "--micro-batch", "8", "--global-batch", "512",
                   "--json"],
        "gb200 ep64 b8": ["evaluate", "--model", "qwen3-30b-a3b", "--gpu", "GB200", "--dp", "64",
                          "--ep", "64", "--micro-batch", "8", "--global-batch", "512",
                          "--set", "moe_dispatcher=hybridep", "--set", "nvlink_domain=72",
                          "--json"],
        "alltoall ep16 b8": ["evaluate", "--model", "qwen3-30b-a3b", "--gpu", "B300", "--dp", "16",
                             "--ep", "16", "--micro-batch", "8", "--global-batch", "512", "--json"],
        "search": [*SEARCH, "--micro-batch", "4", "--micro-batch", "8"],
        "search b8": [*SEARCH, "--micro-batch", "8"],
    })  # fmt: skip


def test_the_limit_from_hybrideps_code():
    """(65,536 − 1 − 1) // 3 = 21,844 tokens; with the 64-token padding 21,824 fit (341 chunks)
    and 21,825 do not (21,888)."""
    assert HYBRIDEP_ACROSS_DOMAINS_MAX_TOKENS == (65536 - 1 - 1) // 3 == 21844
    assert 3 * 21844 + 1 < 65536 <= 3 * 21845 + 1
    assert hybridep_tokens_per_rank(21824) == 21824 <= 21844
    assert hybridep_tokens_per_rank(21825) == 21888 > 21844


def test_a_micro_batch_beyond_it_across_domains_is_refused_in_one_line(runs):
    """EP 16 over two 8-GPU B300 nodes: micro-batch 8 × 4,096 = 32,768 tokens a rank, and 6 ×
    4,096 = 24,576, exceed 21,844: one line naming the micro-batch, the tokens and the rule,
    exit 2, no traceback."""
    line = refusal(runs["ep16 b8"])
    assert line.startswith("--micro-batch: 8 × seq_len 4,096 = 32,768 tokens a rank dispatches")
    assert "exceed the 21,844 HybridEP takes across NVLink domains" in line
    assert "its group of 16 ranks spans 16 GPUs, domains of 8" in line
    assert "hybrid_ep_token_capacity_is_valid" in line
    assert "6 × seq_len 4,096 = 24,576 tokens" in refusal(runs["ep16 b6"])


def test_what_stays_legal(runs):
    """Micro-batch 5 (20,480 tokens) across the two domains; micro-batch 8 with cp 2 (16,384 a
    rank); micro-batch 8 with the group in one domain (EP 8 in a B300 node, Megatron Bridge's
    preset; EP 64 in a GB200 NVL72 the job owns, ``nvlink_domain=72``: by default 64 GPUs lie in
    Slurm segments of 16, model.segments): no RDMA, no limit; the NCCL all-to-all has none."""
    for name in ("ep16 b5", "ep16 b8 cp2", "ep8 b8", "gb200 ep64 b8", "alltoall ep16 b8"):
        done = runs[name]
        assert done.returncode == 0, (name, done.stderr[-2000:])
        assert json.loads(done.stdout)["time"]["step_s"] > 0


def test_the_search_skips_what_hybridep_refuses(runs):
    """Offered micro-batches 4 and 8 at EP 16 across two nodes, the search keeps 4 (16,384
    tokens); offered 8 alone it has nothing legal and says the rule's line, exit 2."""
    done = runs["search"]
    assert done.returncode == 0, done.stderr[-2000:]
    layout = json.loads(done.stdout)["layout"]
    assert (layout["ep"], layout["micro_batch_size"]) == (16, 4)
    line = refusal(runs["search b8"])
    assert "exceed the 21,844 HybridEP takes across NVLink domains" in line
