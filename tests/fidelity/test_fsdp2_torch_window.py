"""The chunks FSDP2 holds gathered under PyTorch's multi-stage pipeline runtime
(:func:`model.fsdp2_pipeline.held_chunks`) against PyTorch's own lowering of the schedule: each
rank's ``ScheduleInterleaved1F1B`` order from ``_calculate_single_rank_operations``, with the
``UNSHARD``/``RESHARD`` actions ``_add_unshard_reshard`` inserts (PyTorch 2.13.0 cf30153c4c,
``torch/distributed/pipelining/schedules.py``), stepped through chunk by chunk: a chunk is held
from its ``UNSHARD`` (its all-gather in flight) until its ``RESHARD``, and after a forward under
``reshard_after_forward`` (ZeRO-3) it is sharded again. The model's sets must be the largest sets
this walk holds at a forward or backward, and never more than three chunks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
if not torch.__version__.startswith("2.13."):
    pytest.skip(
        f"the model reads PyTorch 2.13.0's runtime; torch {torch.__version__} may lower the "
        "schedule differently",
        allow_module_level=True,
    )

from torch.distributed.pipelining import schedules  # noqa: E402

from trainplan.model.fsdp2_pipeline import held_chunks  # noqa: E402


def torch_actions(pp: int, v: int, m: int, rank: int) -> list:
    """Rank ``rank``'s actions as PyTorch lowers them (the schedule object's fields that
    ``_calculate_single_rank_operations`` reads, set as its constructor sets them)."""
    rounds = max(1, m // pp)
    fields = SimpleNamespace(
        n_local_stages=v,
        microbatches_per_round=m // rounds,
        pp_group_size=pp,
        _n_microbatches=m,
        number_of_rounds=rounds,
    )
    ops = schedules.ScheduleInterleaved1F1B._calculate_single_rank_operations(fields, rank)
    return schedules._add_unshard_reshard(ops)


def walk(pp: int, v: int, m: int, rank: int, reshard_after_forward: bool) -> tuple[int, set]:
    """(most chunks held at once at a pass, the sets held at the passes), local chunk c being
    stage ``rank + c·pp``."""
    kind = schedules._ComputationType
    held: dict[int, bool] = {}
    seen: set[frozenset[int]] = set()
    most = 0
    for action in torch_actions(pp, v, m, rank):
        t, stage = action.computation_type, action.stage_index
        if t == kind.UNSHARD:
            held[stage] = True
        elif t == kind.RESHARD:
            held[stage] = False
        elif t in (kind.FORWARD, kind.FULL_BACKWARD):
            held[stage] = True
            now = frozenset(s // pp for s, h in held.items() if h)
            seen.add(now)
            most = max(most, len(now))
            if t == kind.FORWARD and reshard_after_forward:
                held[stage] = False
        else:
            raise AssertionError(f"an action the walk does not know: {action}")
    return most, seen


@pytest.mark.parametrize("reshard_after_forward", [False, True], ids=["zero2", "zero3"])
@pytest.mark.parametrize(
    ("pp", "v", "m"),
    [(2, 4, 2), (2, 4, 4), (2, 8, 2), (3, 7, 9), (4, 4, 8), (4, 5, 16), (4, 32, 4), (8, 6, 56)],
)
def test_held_chunks_are_what_torch_lowers(pp, v, m, reshard_after_forward):
    for rank in range(pp):
        most, seen = walk(pp, v, m, rank, reshard_after_forward)
        largest = frozenset(s for s in seen if not any(s < t for t in seen))
        assert most <= 3
        assert held_chunks(pp, v, m, rank, reshard_after_forward) == largest, rank
