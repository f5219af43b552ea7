"""The search's tables read NCCL's latency by placement for every axis as the evaluator does
(model.terms.fields.axis_members, model.terms.ep_link.ep_dispatch_members, through the same
clock key, model.terms.roofline._kinds): each row is re-evaluated and compared term by term
(``check_against_evaluate`` raises on any difference) where the tp, cp, ep and pp groups leave
an NVLink domain — and the figures they agree on are the hand-derived ones of
tests/model/test_axis_latency.py."""

from __future__ import annotations

import pytest

from trainplan.model.context_parallel import CpKind
from trainplan.model.layout import Recompute
from trainplan.model.pipeline import Schedule
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import check_against_evaluate
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import build_tables


def _agree(case: Case, gpus: int, **space: object) -> list:
    """The evaluator's estimates of every row of the tables over ``space`` (1F1B, ZeRO-1, no
    recomputation, b 1 unless given), each checked against the tables; at least one row."""
    base: dict[str, object] = {
        "micro_batch_size": (1,), "schedules": (Schedule.ONE_F_ONE_B,), "zero_stages": (1,),
        "recomputes": (Recompute.NONE,), "virtual_stages": (1,),
    }  # fmt: skip
    tables = build_tables(
        Problem(jobs=(Job(case, gpus, "t"),), space=SearchSpace(num_gpus=gpus, **base | space))
    )
    assert tables.shapes
    return [check_against_evaluate(tables, (s, 0, 0)) for s in range(len(tables.shapes))]


def test_tp_16_over_two_nodes_in_the_tables():
    """Megatron 18.4B, tp 16 on two H100 nodes (one ring crossing a node, not 15): the tables
    agree with the evaluator, whose tp figure is the hand derivation's 53,510.52 µs a
    micro-batch under ``tp_comm_overlap`` none."""
    case = Case.of("megatron-18.4b", "H100-SXM", global_batch_size=4, tp_comm_overlap="none")
    (est,) = _agree(case, 16, tp=(16,), pp=(1,))
    assert est.layout.tp == 16 and est.time_terms is not None


def test_every_cp_flavour_across_two_nodes_in_the_tables():
    """cp groups of 2 a node on two H100 nodes: Llama 3 8B, tp 4 × cp 4 under ring and
    all-gather, and under PyTorch's two (fsdp2, ZeRO-2); tp 2 × cp 8 under a2a+p2p with inner
    pairs (the ring 2 a node, each pair on one node); Megatron 18.4B (48 heads: 3 a rank) tp 2
    × cp 8 under Ulysses (one network hop)."""
    llama = Case.of("llama3-8b", "H100-SXM", global_batch_size=4)
    kinds = {e.layout.cp_kind for e in _agree(llama, 16, tp=(4,), pp=(1,), cp=(4,))}
    assert kinds == {CpKind.RING, CpKind.ALL_GATHER}
    torch = _agree(llama, 16, tp=(4,), pp=(1,), cp=(4,), frameworks=("fsdp2",), zero_stages=(2,))
    assert {e.layout.cp_kind for e in torch} == {CpKind.PYTORCH_ALLGATHER, CpKind.PYTORCH_ALLTOALL}
    hybrid = _agree(llama, 16, tp=(2,), pp=(1,), cp=(8,), cp_kinds=(CpKind.HYBRID,), cp_a2a=(2,))
    assert {(e.layout.cp_kind, e.layout.cp_a2a) for e in hybrid} == {(CpKind.HYBRID, 2)}
    gpt = Case.of("megatron-18.4b", "H100-SXM", global_batch_size=4)
    ulysses = _agree(gpt, 16, tp=(2,), pp=(1,), cp=(8,), cp_kinds=(CpKind.ULYSSES,))
    assert {e.layout.cp_kind for e in ulysses} == {CpKind.ULYSSES}


@pytest.mark.parametrize("gpu", ["GB200", "H100-SXM"])
def test_ep_64_and_pp_across_domains_in_the_tables(gpu):
    """Qwen3-30B-A3B, ep 64 (the all-to-all one NVLink hop inside GB200's NVL72, one network
    hop across 8 H100 nodes; the token counts' ring by members a node) and pp 2 beside it on 128
    GPUs (the stages on two domains of GB200, 8 nodes apart on H100)."""
    case = Case.of("qwen3-30b-a3b", gpu, global_batch_size=128)
    rows = _agree(case, 128, tp=(1,), pp=(2,), ep=(64,))
    assert {e.layout.ep for e in rows} == {64}
