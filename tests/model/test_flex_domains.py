"""An expert-parallel group laid across NVLink domains under DeepEP or HybridEP
(:mod:`model.flex_domains`, the legality rule ``flex_domains``): each library numbers its group
into NVLink groups of its own size by rank — DeepEP runs of 8 consecutive ranks whose memory
handles it opens (deepseek-ai/DeepEP dd758ca ``csrc/legacy/buffer.hpp`` ``Buffer::Buffer``:
``rdma_rank = rank / 8``, ``nvl_rank = rank % 8``; ``Buffer::sync``), HybridEP ``group_size / R``
domains of the ``R`` ranks each rank reaches (``hybrid-ep`` 94a9f8f6b1
``deep_ep/hybrid_ep_buffer.py`` ``HybridEPBuffer.__init__``, asserting ``group_size % R == 0``;
``allocator.cu`` ``detect_accessible_ranks``) — so a group the rank order lays otherwise cannot
be built, and is refused where it was timed as ``ep/g`` domains of its fewest ``g``. The groups
below are listed by hand."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many
from trainplan.model.flex_domains import flex_domain_refusal
from trainplan.model.rank_groups import domain_counts, group_members


def test_the_groups_by_hand():
    """Nodes of 8 (0–7, 8–15, 16–23):

    * ep 8 at stride 3 (tp 3) in a world of 24: {0, 3, 6, 9, 12, 15, 18, 21}, {1, 4, …, 22},
      {2, 5, …, 23}; the first lies 0 3 6 | 9 12 15 | 18 21, 3 + 3 + 2: DeepEP's one run of 8
      crosses two edges; HybridEP's ranks would reach 3, 3 and 2 (8 % 3 ≠ 0): both refused.
    * ep 8 at stride 2 (ep after dp 16): {0, 2, …, 14} lies 4 + 4. DeepEP's group of 8 is one
      run, across: refused. HybridEP: R = 4 on every rank, group ranks 0–3 on node 0 and 4–7 on
      node 1 (``node_rank = rank // 4``): 2 domains of 4, as the time reads it (fewest 4).
    * the same at tp 2 under Megatron-Core: the group is etp·ep = 16 ranks, runs of 8 group
      ranks = 4 ep members: {0, 2, 4, 6} on node 0, {8, …, 14} on node 1, each in one: runs.

    72-GPU domains (GB200 NVL72 filled): ep 64 in a world of 576 (dp 64 × pp 9): 64–127 lies
    8 + 56 (R = 8 on 64–71, 56 on 72–127, 64 % 56 ≠ 0): HybridEP refused; DeepEP's runs 64–71,
    72–79, … each lie in one domain: runs. ep 16 in a world of 144: 64–79 lies 8 + 8: both run.
    """
    first = group_members(3, 8, 24, 8)[0]
    assert first == (0, 3, 6, 9, 12, 15, 18, 21)
    assert domain_counts(first, 8) == [3, 3, 2]
    assert "ranks 0, 3, …, 21 cross a domain's edge" in flex_domain_refusal(
        "deepep", 3, 8, 24, 8, 8
    )
    assert "ranks 0, 3, …, 21 lie 3 + 3 + 2" in flex_domain_refusal("hybridep", 3, 8, 24, 8, 8)
    assert domain_counts(group_members(2, 8, 16, 8)[0], 8) == [4, 4]
    assert "ranks 0, 2, …, 14 cross" in flex_domain_refusal("deepep", 2, 8, 16, 8, 8)
    assert flex_domain_refusal("hybridep", 2, 8, 16, 8, 8) == ""
    assert flex_domain_refusal("deepep", 2, 8, 16, 8, 16) == ""
    assert domain_counts(group_members(1, 64, 576, 72)[1], 72) == [8, 56]
    assert "ranks 64–127 lie 8 + 56" in flex_domain_refusal("hybridep", 1, 64, 576, 72, 64)
    assert flex_domain_refusal("deepep", 1, 64, 576, 72, 64) == ""
    assert domain_counts(group_members(1, 16, 144, 72)[4], 72) == [8, 8]
    assert flex_domain_refusal("hybridep", 1, 16, 144, 72, 16) == ""
    assert flex_domain_refusal("alltoall", 3, 8, 24, 8, 8) == ""


def test_the_planner_refuses_them_and_the_search_answers_around_them():
    """Mixtral 8x7B on 16 H100s, dp 16, ep 8, rank order tp-cp-dp-ep-pp (ep after dp: stride
    16/8 = 2): DeepEP refused, one line naming ``moe_dispatcher`` (before: 56.774 s a step, a
    layout DeepEP cannot build); NCCL's all-to-all runs it. A search at pp 1 over the same order
    answers a layout DeepEP builds (not tp 1 × dp 16), and evaluating that answer passes."""
    base = ("--model", "mixtral-8x7b", "--gpus", "16", "--ep", "8", "--rank-order",
            "tp-cp-dp-ep-pp")  # fmt: skip
    runs = run_many({
        "deepep": ("evaluate", *base, "--dp", "16", "--set", "moe_dispatcher=deepep"),
        "alltoall": ("evaluate", *base, "--dp", "16"),
        "search": ("search", *base, "--pp", "1", "--set", "moe_dispatcher=deepep", "--json"),
    })  # fmt: skip
    line = refusal(runs["deepep"])
    assert line.startswith("--set moe_dispatcher: deepep with ep 8 at stride 2 on NVLink domains")
    assert "ranks 0, 2, …, 14 cross a domain's edge" in line
    assert runs["alltoall"].returncode == 0, runs["alltoall"].stderr[-2000:]
    assert runs["search"].returncode == 0, runs["search"].stderr[-2000:]
    lay = json.loads(runs["search"].stdout)["layout"]
    assert (lay["tp"], lay["dp"]) != (1, 16)
    again = run_many({"answer": ("evaluate", *base, "--dp", str(lay["dp"]), "--tp",
                                 str(lay["tp"]), "--cp", str(lay["cp"]), "--set",
                                 "moe_dispatcher=deepep")})  # fmt: skip
    assert again["answer"].returncode == 0, again["answer"].stderr[-2000:]
