"""FSDP2's whole weights under PyTorch's multi-stage pipeline runtime (model/terms/runtime_window.py
``held_whole_params``, model/fsdp2_pipeline.py ``held_chunks``, model/fsdp2_replay.py).

PyTorch 2.13.0 (git cf30153c4c) ``torch/distributed/pipelining/schedules.py``
``_add_unshard_reshard(max_active_stages=3)``: before each compute action the next three distinct
stages the rank computes are kept; a ``RESHARD`` (``FSDPModule.reshard`` → ``FSDPParamGroup.
reshard`` → ``_to_sharded`` → ``FSDPParam.free_unsharded_param``) frees the unsharded parameters
of each that leaves, before the ``UNSHARD`` of each that enters. So at v ≥ 4 chunks a rank holds
three chunks' BF16 weights whole at the most, where the model counted all v.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.model.test_fsdp2_runtime_gathers import RANK0, RANK1
from trainplan.model.frameworks import Framework
from trainplan.model.fsdp2_pipeline import held_chunks
from trainplan.model.fsdp2_replay import expand_runs, order_runs, replay_passes, replay_runs
from trainplan.model.layout import Layout, Recompute
from trainplan.model.pipeline import Schedule
from trainplan.model.schedule import stage_order
from trainplan.model.terms.runtime_window import chunk_params, window_params
from trainplan.model.terms.split_key import SplitKey
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import check_against_evaluate
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import build_tables
from trainplan.scenarios.catalogue import get_model


def _held(actions: str, pp: int, reshard_after_forward: bool) -> set[frozenset[int]]:
    """The sets of the rank's stages (as local chunks, stage // pp) whose parameters are whole
    during a compute action of a lowered list, by FSDP2's rules written out: ``UNSHARD`` gathers,
    ``RESHARD`` frees, a forward frees its stage after it under ``reshard_after_forward``, a
    pass's own hooks gather its stage first."""
    whole: set[int] = set()
    out: set[frozenset[int]] = set()
    for a in actions.split():
        parsed = re.fullmatch(r"(\d+)(UNSHARD|RESHARD|F|B)\d*", a)
        assert parsed is not None
        stage, kind = int(parsed[1]), parsed[2]
        if kind == "UNSHARD":
            whole.add(stage)
        elif kind == "RESHARD":
            whole.discard(stage)
        else:
            whole.add(stage)
            out.add(frozenset(s // pp for s in whole))
            if kind == "F" and reshard_after_forward:
                whole.discard(stage)
    return out


def _most(sets: set[frozenset[int]] | frozenset) -> set[frozenset[int]]:
    return {s for s in sets if not any(s < t for t in sets)}


def test_pp2_v4_m4_held_by_hand():
    """Rank 0 of :data:`RANK0` (stages 0, 2, 4, 6 = local chunks 0–3), ZeRO-2, written out:
    ``0UNSHARD 2UNSHARD 4UNSHARD`` → {0, 2, 4} whole for 0F0 0F1; ``0RESHARD 6UNSHARD`` → {2, 4,
    6} for 2F0 2F1; ``2RESHARD 0UNSHARD`` → {0, 4, 6} for 4F0 4F1; ``4RESHARD 2UNSHARD`` → {0, 2,
    6} for 6F0 … 0F3; … So every pass holds three of the four chunks (the last ones fewer, as the
    window empties: {0, 1} for 2B2 2B3 after ``4RESHARD``, {0} for 0B2 0B3), each set of three at
    some pass: chunks {0, 1, 2}, {1, 2, 3}, {0, 2, 3}, {0, 1, 3}. Never four (the ``RESHARD``
    comes first). Rank 1 (:data:`RANK1`): {0, 1, 2}, {1, 2, 3}, {0, 2, 3}. ZeRO-3 frees after each
    forward as well: fewer whole at some passes, the same largest sets."""
    threes = ({0, 1, 2}, {1, 2, 3}, {0, 2, 3}, {0, 1, 3})
    assert _held(RANK0, 2, False) == {frozenset(s) for s in (*threes, {0, 1}, {0})}
    assert _most(_held(RANK1, 2, False)) == {frozenset(s) for s in threes[:3]}
    for reshard in (False, True):
        assert held_chunks(2, 4, 4, 0, reshard) == _most(_held(RANK0, 2, reshard))
        assert held_chunks(2, 4, 4, 1, reshard) == _most(_held(RANK1, 2, reshard))
    assert held_chunks(2, 3, 4, 0, True) == {frozenset({0, 1, 2})}  # v ≤ 3: every chunk


def test_llama3_8b_window_by_hand():
    """Llama 3 8B at pp 2, v 4 under ``fsdp2`` (torchtitan's split of the 34 units over 8 chunks:
    rank 0's chunks hold 4 layers of 218,112,000 each, chunk 0 also the embedding 128,256 × 4,096
    = 525,336,576; rank 1's chunks 5, 4, 4 and 3 layers, the last with the final norm 4,096 and
    the output layer 525,336,576). Rank 0 at the most: chunk 0 and two others, 525,336,576 + 12
    × 218,112,000 = 3,142,680,576 of its 4,015,128,576; rank 1: chunks 0, 2, 3 (the set {0, 2,
    3} comes), 12 × 218,112,000 + 4,096 + 525,336,576 = 3,142,684,672 of 4,015,132,672."""
    layer, emb = 218_112_000, 128_256 * 4_096
    key = SplitKey.of(get_model("llama3-8b").model, None, 1, 2, 4, 1, "torchtitan", 1, "fsdp2",
                      None, "interleaved")  # fmt: skip
    chunks = chunk_params(key)
    assert [[d for d, _ in rank] for rank in chunks] == [
        [emb + 4 * layer, 4 * layer, 4 * layer, 4 * layer],
        [5 * layer, 4 * layer, 4 * layer, 3 * layer + 4_096 + emb],
    ]
    for m in (4, 16):
        assert window_params(key, m, False) == (
            (emb + 12 * layer, 0),
            (12 * layer + 4_096 + emb, 0),
        )


def test_llama3_8b_weights_evaluated():
    """The same layout evaluated (A100-80GB, dp 16 × pp 2, s 512, B 256: m 16), ZeRO-2: stage 0's
    weights 2 B × 3,142,680,576 whole + the FP32 shard 4 B × 4,015,128,576 / 16 = 6,285,361,152
    + 1,003,782,144 = 7,289,143,296 B, where every chunk whole was 9,034,039,296 B (one
    4-layer chunk less, 1,744,896,000 B); at v 2 (and with Meta's runtime,
    ``pipeline_frees_stage_tensors``) every chunk whole still."""

    def weights(v: int, **training: bool) -> int:
        case = Case.of("llama3-8b", "A100-80GB", framework="fsdp2", dp=16, pp=2, zero_stage=2,
                       seq_len=512, global_batch_size=256, schedule="interleaved",
                       virtual_stages=v, **training)  # fmt: skip
        return case.evaluate().stages[0].state.weights_bytes

    P = 16 * 218_112_000 + 128_256 * 4_096
    assert weights(4) == 2 * 3_142_680_576 + 4 * P // 16 == 7_289_143_296
    assert weights(2) == 2 * P + 4 * P // 16 == 9_034_039_296
    assert weights(4, pipeline_frees_stage_tensors=True) == 9_034_039_296


def test_llama31_405b_before_after():
    """Llama 3.1 405B on H100-SXM, dp 8 × tp 8 × pp 8, v 8 (64 chunks of 2 of the 126 layers, the
    end stages one fewer), s 8192, B 256, full recompute, ZeRO-2: stage 1 holds 16 layers of
    (3,187,703,808 − 32,768)/8 + 32,768 = 398,491,648 on one GPU (the norms whole on every tp
    rank): P = 6,375,866,368. Every chunk whole: 2P + 4P/8 = 15,939,665,920 B. The runtime holds
    three chunks of two layers: 2 × 6 × 398,491,648 + 4P/8 = 7,969,832,960 B, 7.97 GB less;
    its peak 76.13 → 68.16 GB. Beside the three chunks, the runtime's copy-out of a re-gathered
    chunk holds one unit's all-gather output beside its new parameters, allocated on the compute
    stream (``unshard(async_op=True)``; model/terms/runtime_unshard.py): 2 × 398,491,648 =
    796,983,296 B more, 68,157,120,512 → 68,954,103,808 B (68.95 GB)."""
    case = Case.of("llama3-405b", "H100-SXM", seq_len=8192, global_batch_size=256)
    lay = Layout(dp=8, tp=8, pp=8, zero_stage=2, framework=Framework.FSDP2,
                 recompute=Recompute.FULL, micro_batch_size=1, schedule=Schedule.INTERLEAVED,
                 virtual_stages=8)  # fmt: skip
    stage = case.evaluate(lay).stages[1]
    layer, P = 398_491_648, 16 * 398_491_648
    assert stage.dense_params == P == 6_375_866_368
    assert stage.state.weights_bytes == 2 * 6 * layer + 4 * P // 8 == 7_969_832_960
    assert 2 * P + 4 * P // 8 - 7_969_832_960 == 7_969_832_960  # the bytes no longer counted
    assert stage.state.gathered_bytes == 2 * layer == 796_983_296
    assert stage.total_bytes == 68_157_120_512 + 796_983_296 == 68_954_103_808


def test_the_search_reads_the_same_memory():
    """The search's tables against the evaluator, every term (``check_against_evaluate``: each
    stage's state, step and activation bytes to the byte, the time to the nanosecond), on every
    legal fsdp2 interleaved candidate of Llama 3 8B on 16 A100s at pp 2 and 4, v 2, 4 and 8,
    ZeRO-2 and 3: the window, the re-gathers and the first chunk's wait reach the search as they
    reach evaluate, and some candidate holds fewer than all chunks."""
    case = Case.of("llama3-8b", "A100-80GB", seq_len=2048, global_batch_size=64)
    space = SearchSpace(
        num_gpus=16, tp=(1,), pp=(2, 4), max_micro_batch_size=2, zero_stages=(2, 3),
        recomputes=(Recompute.FULL,), schedules=(Schedule.INTERLEAVED,), virtual_stages=(2, 4, 8),
        frameworks=(Framework.FSDP2,),
    )  # fmt: skip
    tables = build_tables(Problem(jobs=(Job(case, 16, "case"),), space=space))
    freed = 0
    for s, z, r in zip(*tables.legal.nonzero(), strict=True):
        est = check_against_evaluate(tables, (s, z, r))
        stage = est.stages[0]
        freed += stage.state.weights_bytes < 2 * stage.params + 4 * stage.params / est.layout.dp
    assert freed > 0


@settings(max_examples=60, deadline=None)
@given(
    pp=st.integers(2, 12),
    v=st.integers(2, 10),
    rounds=st.integers(1, 24),
    rank=st.integers(0, 11),
    reshard=st.booleans(),
)
def test_runs_are_the_passes(pp, v, rounds, rank, reshard):
    """The replay in runs (:func:`model.fsdp2_replay.replay_runs`, cached on the runs cut to three
    occurrences) equals the replay pass by pass of :func:`model.schedule.stage_order`'s order:
    the same gathers and the same sets of chunks held whole, over pp, v, m = rounds·pp and the
    rank."""
    rank %= pp
    m = rounds * pp
    runs = order_runs(pp, m, v, rank)
    passes = [(k, c) for k, _, c in stage_order(pp, m, "interleaved", v, rank)]
    assert expand_runs(runs) == passes
    assert replay_runs(runs, reshard) == replay_passes(passes, reshard)
