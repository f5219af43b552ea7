"""FSDP2 under PyTorch's multi-stage pipeline runtime (model/fsdp2_pipeline.py ``chunk_gathers``,
``runtime_regathers``, ``upfront_gather``; read by model/terms/dp_time.py and model/comm.py).

PyTorch 2.13.0 (git cf30153c4c) ``torch/distributed/pipelining/schedules.py``:
``_PipelineScheduleRuntime._prepare_schedule_with_comms`` lowers each rank's compute actions with
``_add_unshard_reshard(max_active_stages=3)``: before each action the next three distinct stages
the rank computes are kept, an ``UNSHARD`` (``unshard(async_op=True)`` of every FSDP unit) for
each that enters, a ``RESHARD`` (``FSDPModule.reshard``, which outside a forward frees the
unsharded parameters whatever ``reshard_after_forward`` says) for each that leaves. FSDP2's own
hooks then gather what a pass finds freed; a forward frees under ``reshard_after_forward``, a
backward leaves the units whole (``backward_maybe_with_nosync``). ``_assert_unsharded`` waits on
a stage's ``UNSHARD`` handles before its first pass.
"""

from __future__ import annotations

import re
from fractions import Fraction
from types import SimpleNamespace

import pytest

from tests.model.test_fsdp2_pipeline_gathers import dp_parts
from trainplan.model.fsdp2_pipeline import (
    _replay,
    chunk_gathers,
    runtime_mechanism,
    runtime_regathers,
    upfront_gather,
)
from trainplan.model.mechanisms import mechanism
from trainplan.model.schedule import stage_order

Z2, Z3 = (mechanism("fsdp2", z, pipelined=True) for z in (2, 3))

RANK0 = (
    "0UNSHARD 2UNSHARD 4UNSHARD 0F0 0F1 0RESHARD 6UNSHARD 2F0 2F1 2RESHARD 0UNSHARD 4F0 4F1 "
    "4RESHARD 2UNSHARD 6F0 6F1 0F2 6B0 0F3 0RESHARD 4UNSHARD 6B1 2F2 4B0 2F3 4B1 4F2 2B0 4F3 "
    "4RESHARD 0UNSHARD 2B1 2RESHARD 4UNSHARD 6F2 0B0 6F3 0B1 0RESHARD 2UNSHARD 6B2 6B3 "
    "6RESHARD 0UNSHARD 4B2 4B3 4RESHARD 2B2 2B3 2RESHARD 0B2 0B3 0RESHARD"
)
"""``ScheduleInterleaved1F1B`` at pp 2, v 4, m 4 (stages 0, 2, 4, 6 on rank 0), rank 0's
``pipeline_order_with_comms`` without its sends, receives and ``REDUCE_GRAD``: warm-up
``(v − 1)·pp + 2·(pp − 1 − 0) = 8`` forwards in rounds of pp (0F0 0F1 2F0 2F1 4F0 4F1 6F0 6F1),
then a forward and a backward in turn (0F2 6B0 0F3 6B1 2F2 4B0 …), then the backwards."""
RANK1 = (
    "1UNSHARD 3UNSHARD 5UNSHARD 1F0 1F1 1RESHARD 7UNSHARD 3F0 3F1 3RESHARD 1UNSHARD 5F0 5F1 "
    "7F0 7B0 7F1 7B1 7RESHARD 3UNSHARD 1F2 5B0 1F3 5B1 3F2 3B0 3F3 3B1 3RESHARD 7UNSHARD 5F2 "
    "1B0 5F3 1B1 1RESHARD 3UNSHARD 7F2 7B2 7F3 7B3 7RESHARD 1UNSHARD 5B2 5B3 5RESHARD 3B2 3B3 "
    "3RESHARD 1B2 1B3 1RESHARD"
)
"""… and rank 1's (stages 1, 3, 5, 7; warm-up 6)."""


def _gathers(actions: str, reshard_after_forward: bool) -> dict[int, int]:
    """All-gathers per stage of a lowered action list, by FSDP2's rules written out: ``UNSHARD``
    and a pass's hook gather what they find freed; ``RESHARD`` frees; a forward frees under
    ``reshard_after_forward``; a backward leaves the units whole."""
    freed: dict[int, bool] = {}
    out: dict[int, int] = {}
    for a in actions.split():
        parsed = re.fullmatch(r"(\d+)(UNSHARD|RESHARD|F|B)\d*", a)
        if parsed is None:  # a send, a receive, the gradient reduction: no FSDP unit moves
            continue
        stage, kind = int(parsed[1]), parsed[2]
        if kind == "RESHARD":
            freed[stage] = True
            continue
        if freed.get(stage, True):
            out[stage] = out.get(stage, 0) + 1
        freed[stage] = kind == "F" and reshard_after_forward
    return out


def test_pp2_v4_m4_action_by_action():
    """Rank 0 of :data:`RANK0`, ZeRO-2 (``reshard_after_forward=False``): only the ``UNSHARD``\\ s
    gather. Stage 0 enters four times: at the start, before 4F0 (for 0F2; 0RESHARD after 0F1
    made room for stage 6), before 2B1 (for 0B0) and before 4B2 (for 0B2); stage 2 three times
    (start, before 6F0, before 6B2), stage 4 three times (start, before 6B1, before 6F2), stage
    6 once: 4 + 3 + 3 + 1 = 11 gathers of a chunk, 11/4 of the rank's weights, where one a step
    was counted. Rank 1 (:data:`RANK1`): 3 + 3 + 1 + 2 = 9.

    ZeRO-3 (``"always"``): a forward frees too, so a pass right after a forward of its chunk
    gathers through its hook. Stage 0: the four ``UNSHARD``\\ s less the one before 0B2's …
    written out: 0UNSHARD, 0F1 (after 0F0), 0UNSHARD (for 0F2), 0F3 (after 0F2), 0UNSHARD (for
    0B0), 0UNSHARD (for 0B2): 6. Stage 2: 2UNSHARD, 2F1, 2UNSHARD (for 2F2), 2F3, 2B0 (after
    2F3), 2UNSHARD (for 2B2): 6. Stage 4: 4UNSHARD, 4F1, 4UNSHARD (for 4B0), 4F3 (after 4F2; 4F2
    found 4B1's units whole), 4UNSHARD (for 4B2): 5. Stage 6: 6UNSHARD, 6F1, 6B0, 6F3, 6B2: 5.
    So 22 on rank 0 (23 on rank 1), where (m + 1)·v = 20 were counted."""
    assert _gathers(RANK0, False) == {0: 4, 2: 3, 4: 3, 6: 1}
    assert _gathers(RANK1, False) == {1: 3, 3: 3, 5: 1, 7: 2}
    assert _gathers(RANK0, True) == {0: 6, 2: 6, 4: 5, 6: 5}
    assert sum(_gathers(RANK1, True).values()) == 23
    # the model's replay of the same order: the most a rank issues
    assert chunk_gathers(2, 4, 4, False) == 11 and chunk_gathers(2, 4, 4, True) == 23
    order0 = [f"{c * 2}{k}{j}" for k, j, c in stage_order(2, 4, "interleaved", 4, 0)]
    assert order0 == [a for a in RANK0.split() if "SHARD" not in a]
    # beyond the mechanism's count, in gathers of the rank's whole weights
    assert runtime_regathers(Z2, "interleaved", 2, 4, 4) == Fraction(11 - 4, 4)
    assert runtime_regathers(Z3, "interleaved", 2, 4, 4) == Fraction(23 - 5 * 4, 4)


@pytest.mark.parametrize("pp", [2, 3, 4, 8])
@pytest.mark.parametrize("v", [4, 5, 6, 8])
def test_zero2_counts_by_rounds(pp, v):
    """The most a rank gathers a chunk under ZeRO-2, over n = m/pp rounds: at n = 1 every
    forward runs before every backward, so each chunk is gathered for its forwards and the
    v − 3 chunks not kept from the last forwards again for their backwards, 2v − 3; from n = 2
    on 2(v − 3)·n + 7, whatever pp."""
    for n in range(1, 7):
        expected = 2 * v - 3 if n == 1 else 2 * (v - 3) * n + 7
        assert chunk_gathers(pp, v, n * pp, False) == expected, n


@pytest.mark.parametrize("reshard", [False, True])
def test_the_rounds_beyond_are_the_replay(reshard):
    """Up to 12 rounds, the count is the whole order replayed pass by pass (``_replay``); it
    grows by the same number every round from the second on (what an earlier version carried
    on past four rounds: the figures are the same)."""
    for pp, v in ((2, 4), (4, 5), (3, 7), (4, 8)):
        counts = []
        for n in range(1, 13):
            whole = max(
                _replay(stage_order(pp, n * pp, "interleaved", v, r), reshard) for r in range(pp)
            )
            assert chunk_gathers(pp, v, n * pp, reshard) == whole, (pp, v, n)
            counts.append(whole)
        steps = {b - a for a, b in zip(counts[1:], counts[2:], strict=False)}
        assert len(steps) == 1, (pp, v, steps)


def test_three_chunks_or_fewer_and_other_schedules_add_nothing():
    """At v ≤ 3 a chunk leaves the window only after its last pass: one gather a chunk under
    ZeRO-2, m + 1 under ZeRO-3. GPipe and 1F1B (``PipelineScheduleSingle``), ZB-V and DualPipeV
    (two chunks a rank) add none; nor do the other frameworks' mechanisms."""
    for v in (2, 3):
        assert chunk_gathers(4, v, 16, False) == v and chunk_gathers(4, v, 16, True) == 17 * v
        assert runtime_regathers(Z2, "interleaved", 4, v, 16) == 0
    for schedule in ("gpipe", "1f1b", "zb-v", "dualpipev"):
        assert runtime_regathers(Z2, schedule, 4, 2, 16) == 0
    assert runtime_regathers(mechanism("megatron", 1, pipelined=True), "interleaved", 4, 8, 16) == 0
    assert runtime_regathers(mechanism("fsdp2", 3), "interleaved", 4, 8, 16) == 0


def test_upfront_share():
    """The multi-stage schedules wait for the first chunk whole: 1/v of the first forward's
    gather; the rest under (v − 1)·min(m, pp)/v forwards of a micro-batch. The single-stage
    schedules gather unit by unit under the first forward."""
    assert upfront_gather(Z2, "interleaved", 8, 2, 8) == (0.5, 4.0)
    assert upfront_gather(Z3, "interleaved", 4, 8, 16) == (0.125, 3.5)
    assert upfront_gather(Z2, "zb-v", 4, 2, 2) == (0.5, 1.0)
    assert upfront_gather(Z2, "1f1b", 4, 1, 16) == (0, 1)


def test_llama3_8b_bytes_by_hand():
    """Llama 3 8B on A100-80GB, dp 16 × pp 2, s 512, B 256: m = 16, n = 8 rounds. The busiest
    rank holds 16 blocks, the final norm and the output layer, P = 4,015,132,672 (torchtitan's
    split of the 34 units over 8 chunks: rank 1's chunks 5, 4, 4 and 3 + the output layer). Ring
    share 15/16; ZeRO-2 sends the FP32 reduce-scatter (4 B) and one BF16 gather (2 B) a step:
    15/16 · P · 6 = 22,585,121,280 B. Interleaved at v 4 its rank gathers a chunk 2·1·8 + 7 = 23
    times, 19/4 of its weights beyond the one: 15/16 · P · (6 + 2 · 19/4) = 58,344,896,640 B."""
    P = 16 * 218_112_000 + 4_096 + 128_256 * 4_096
    v2 = dp_parts("interleaved", 2, virtual_stages=2)[3]
    v4 = dp_parts("interleaved", 2, virtual_stages=4)[3]
    assert v2.traffic.bytes_per_step == Fraction(15, 16) * P * 6 == 22_585_121_280
    assert v4.traffic.bytes_per_step == Fraction(15, 16) * P * Fraction(31, 2) == 58_344_896_640


def test_llama3_8b_exposure_by_hand():
    """The same layout (NCCL's SM charge off, φ = 0). One gather of the rank's weights a =
    40.33 ms, the FP32 reduce-scatter R = 79.54 ms (the dp group's 16 ranks 8 on each of 2
    nodes: 1 of a ring's 15 steps over the network, 70.0 µs a call,
    tests/model/test_fsdp2_pipeline_gathers.py), a micro-batch's window t = 79.47 ms (its
    forward t/3 = 26.49 ms); 16 units, tail 1/16. Interleaved, the share of R that waits after
    the last backward is 1/v (model.pipeline_reduce), the rest hides but its last bucket.

    * v 2: R/2 = 39.77 ms waits; the rest R/2 leaves its last bucket, 2.49 ms; the first chunk's
      gather a/2 = 20.17 ms waits whole (it would be max(a − t/3, a/16) = 13.84 ms unit by
      unit), the other under 1 × t/3: 62.42 ms (56.10 unit by unit).
    * v 4: R/4 = 19.89 ms; the rest 3R/4 − … : its last bucket (R + a − R/4 − a)/16 = 3.73 ms;
      a/4 = 10.08 ms waits, the rest 3a/4 = 30.25 ms under 1.5 × t/3 = 39.74 ms, hidden; the
      19/4 re-gathers, 191.57 ms, spread over the 16 micro-batches in their backwards (11.97 ms
      under 2t/3 = 52.98 ms each), hidden but the last micro-batch's last unit, 0.75 ms: 34.44 ms.
    """
    d, calls, t, v2, _ = dp_parts("interleaved", 2, virtual_stages=2)
    a, reduce_s = d.step_forward_s, d.step_reduce_s
    assert calls == 16 and d.again_s == 0
    assert (reduce_s, a, t) == (
        pytest.approx(0.07954, abs=1e-5),
        pytest.approx(0.04033, abs=1e-5),
        pytest.approx(0.07947, abs=1e-5),
    )
    rest = reduce_s / 2
    assert v2.exposed_seconds == pytest.approx(reduce_s / 2 + rest / 16 + a / 2, abs=1e-9)
    assert v2.exposed_seconds == pytest.approx(0.06242, abs=1e-5)
    d4, _, _, v4, _ = dp_parts("interleaved", 2, virtual_stages=4)
    assert d4.again_s == pytest.approx(19 / 4 * a, rel=1e-12)
    last = d4.again_s / 16 / 16
    expected = reduce_s / 4 + (3 * reduce_s / 4) / 16 + a / 4 + last
    assert v4.exposed_seconds == pytest.approx(expected, abs=1e-9)
    assert v4.exposed_seconds == pytest.approx(0.03444, abs=1e-5)


def test_against_pytorch_action_lists():
    """PyTorch's own lists (2.13.0 where installed: the ``fidelity`` extra): for pp 2–8, v 2–8
    and 1–6 rounds, every rank's ``ScheduleInterleaved1F1B._calculate_single_rank_operations``
    (its empty slots dropped) is :func:`model.schedule.stage_order`'s order, the order whose
    unequal-chunk bubble :mod:`model.pipeline_uneven` runs, and its ``_add_unshard_reshard``
    lowering replayed with FSDP2's rules (:func:`_gathers`) gives :func:`chunk_gathers` on the
    rank that issues the most, under both ZeRO stages."""
    torch_schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    interleaved = torch_schedules.ScheduleInterleaved1F1B
    for pp in (2, 3, 4, 8):
        for v in range(2, 9):
            for n in range(1, 7):
                m = n * pp
                rank = SimpleNamespace(
                    n_local_stages=v, pp_group_size=pp, _n_microbatches=m,
                    number_of_rounds=n, microbatches_per_round=pp,
                )  # fmt: skip
                most = {False: 0, True: 0}
                for r in range(pp):
                    ops = interleaved._calculate_single_rank_operations(rank, r)
                    ours = [
                        f"{c * pp + r}{k}{j}" for k, j, c in stage_order(pp, m, "interleaved", v, r)
                    ]
                    assert [str(a) for a in ops if a is not None] == ours, (pp, v, n, r)
                    lowered = " ".join(map(str, torch_schedules._add_unshard_reshard(ops)))
                    for reshard in most:
                        most[reshard] = max(most[reshard], sum(_gathers(lowered, reshard).values()))
                for reshard, count in most.items():
                    assert chunk_gathers(pp, v, m, reshard) == count, (pp, v, n, reshard)


def test_meta_runtime_leaves_it_out():
    """``pipeline_frees_stage_tensors`` stands for Meta's pipeline runtime (Llama 3 §3.3.2),
    whose FSDP does not reshard after forward (§3.3.1): no chunk freed and gathered again, no
    up-front wait; the Llama 3 published rows set it. The same v 4 layout sends the one gather
    a step again, 22,585,121,280 B."""
    meta = runtime_mechanism(mechanism("fsdp2", 2, pipelined=True), True)
    assert runtime_regathers(meta, "interleaved", 4, 8, 16) == 0
    assert upfront_gather(meta, "interleaved", 4, 8, 16) == (0, 1)
    row = dp_parts("interleaved", 2, virtual_stages=4, pipeline_frees_stage_tensors=True)[3]
    assert row.traffic.bytes_per_step == 22_585_121_280
