"""The weight pass of torch.distributed.pipelining's split schedules (``fsdp2``'s ZB-V and
DualPipeV) re-runs the checkpointed blocks' forward: ``stage_backward_input`` and
``stage_backward_weight`` are two ``torch.autograd.grad`` calls, and a non-reentrant checkpoint
recomputes once per graph task (pytorch/pytorch 0008d77 ``torch/utils/checkpoint.py``
``_checkpoint_hook.unpack_hook``; pytorch/pytorch#166536: "AC will always retrigger recompute
upon every distinct backward"). Full recomputation then costs a ZB-V step one more chunk
recomputation per weight pass; torchtitan's op-level selective recomputation raises on the
second pass ("Trying to backward an extra time"), so the search must refuse it there.

The search once picked ZB-V with full recomputation for gpt-oss-120b on 64 H100s under fsdp2
(10.435 s a step, the recomputation counted once); counted twice the step is 12.239 s, and
DualPipeV (10.614 s) is the answer."""

from __future__ import annotations

import pytest

from tests.cli_runs import trainplan
from trainplan.model import schedule_cost
from trainplan.model.errors import LayoutError
from trainplan.model.schedule_cost import pass_times, split_span, weight_pass_rerun
from trainplan.model.schedule_support import split_recompute_rule, weight_pass_recomputes
from trainplan.model.terms import step
from trainplan.optimizer.case import Case

BASE = dict(model="llama3-8b", num_gpus=16, dp=4, pp=4, global_batch_size=64, seq_len=4096)
M = 64 // 4  # micro-batches: B / (b · dp), b = 1


def _est(**extra: object):  # type: ignore[no-untyped-def]
    return Case.of(**{**BASE, "framework": "fsdp2", **extra}).evaluate()


def _pp_exposed(est) -> float:  # type: ignore[no-untyped-def]
    row = next(r for r in est.traffic if r.traffic.axis == "pp")
    return row.exposed_seconds or 0.0


def test_which_framework_and_schedule_rerun() -> None:
    """Only PyTorch's pipelining (fsdp2) with ZB-V or DualPipeV; the papers' schedules
    (textbook) recompute once, in B; 1F1B has no weight pass."""
    assert weight_pass_recomputes("fsdp2", "zb-v") and weight_pass_recomputes("fsdp2", "dualpipev")
    assert not weight_pass_recomputes("textbook", "zb-v")
    assert not weight_pass_recomputes("textbook", "dualpipev")
    assert not weight_pass_recomputes("fsdp2", "1f1b")
    assert not weight_pass_recomputes("fsdp2", "interleaved")


def test_rerun_seconds_by_hand() -> None:
    """t_mb 5 s with recomputation, 4 s without, v = 2 chunks: one chunk's recomputation is
    (5 − 4)/2 = 0.5 s. ZB-V adds it to every W pass (2·m of them on each rank); DualPipeV's
    busiest rank (rank 0) runs 2·pp − 1 = 7 split backwards at pp 4: 7 · 0.5 = 3.5 s after its
    timeline (rank r runs 2·pp − r − 1: 7, 6, 5, 4, counted off PyTorch's order)."""
    assert weight_pass_rerun("fsdp2", "zb-v", 4, 2, 5.0, 4.0) == (0.5, 0.0)
    assert weight_pass_rerun("fsdp2", "dualpipev", 4, 2, 5.0, 4.0) == (0.0, 3.5)
    assert weight_pass_rerun("fsdp2", "zb-v", 4, 2, 4.0, 4.0) == (0.0, 0.0)  # none recomputed
    assert weight_pass_rerun("textbook", "dualpipev", 4, 2, 5.0, 4.0) == (0.0, 0.0)
    from trainplan.model.schedule_zb import dualpipe_order

    splits = [
        sum(1 for entry in dualpipe_order(4, 16, r, True) for s in entry if s.kind == "I")
        for r in range(4)
    ]
    assert splits == [7, 6, 5, 4]


def test_zb_v_full_recompute_pays_the_recompute_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama 3 8B, fsdp2, pp 4, ZB-V (v 2), m 16, full recomputation: with the rule the step's
    compute grows by m · (t_mb − t_plain) — 2·m weight passes, each one chunk's recomputation
    (t_mb − t_plain)/2 — and the pipeline section is the ZB-V timeline with W = t_plain/6 +
    (t_mb − t_plain)/2 (pass_times' split, the recompute added to W). Switched off (the rerun
    made 0), the old figures come back: compute m · t_mb of operations."""
    seen: list[tuple[float, float]] = []
    real = schedule_cost.weight_pass_rerun

    def spy(framework, schedule, pp, v, t_mb, t_plain):  # type: ignore[no-untyped-def]
        seen.append((float(t_mb), float(t_plain)))
        return real(framework, schedule, pp, v, t_mb, t_plain)

    monkeypatch.setattr(step, "weight_pass_rerun", spy)
    new = _est(schedule="zb-v", virtual_stages=2, recompute="full")
    t_mb, t_plain = seen[-1]
    assert t_mb > t_plain > 0
    monkeypatch.setattr(step, "weight_pass_rerun", lambda *a: (0.0, 0.0))
    old = _est(schedule="zb-v", virtual_stages=2, recompute="full")
    tn, to = new.time_terms, old.time_terms
    assert tn is not None and to is not None
    rerun = M * (t_mb - t_plain)
    assert to.busy_s == tn.busy_s == pytest.approx(M * t_mb, rel=1e-9)
    assert tn.compute_s - to.compute_s == pytest.approx(rerun, rel=1e-9)
    f, b, w = pass_times(t_mb, t_plain, 2)
    section = max(split_span("zb-v", 4, M, f, b, w + (t_mb - t_plain) / 2), M * t_mb + rerun)
    assert tn.compute_and_pipeline_s == pytest.approx(section + _pp_exposed(new), rel=1e-9)
    assert new.step_s is not None and old.step_s is not None
    assert new.step_s > old.step_s + 0.9 * rerun


def test_no_recomputation_and_1f1b_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without recomputation nothing is re-run (t_mb = t_plain); 1F1B has no split pass."""
    for extra in (
        dict(schedule="zb-v", virtual_stages=2, recompute="none"),
        dict(schedule="1f1b", recompute="full"),
    ):
        monkeypatch.undo()
        with_rule = _est(**extra).step_s
        monkeypatch.setattr(step, "weight_pass_rerun", lambda *a: (0.0, 0.0))
        assert _est(**extra).step_s == with_rule


def test_selective_with_a_split_schedule_is_refused() -> None:
    """torchtitan's op-level selective recomputation raises at ZB-V's and DualPipeV's weight
    pass; full recomputation and none run; 1F1B and interleaved take selective; the textbook
    profile (the papers' schedules) is not torch's."""
    for schedule in ("zb-v", "dualpipev"):
        with pytest.raises(LayoutError, match="recompute: selective with schedule"):
            split_recompute_rule(None, "fsdp2", "selective", schedule, 4)
        with pytest.raises(LayoutError, match="Trying to backward an extra time"):
            _est(schedule=schedule, virtual_stages=2, recompute="selective")
        split_recompute_rule(None, "fsdp2", "full", schedule, 4)
        split_recompute_rule(None, "textbook", "selective", schedule, 4)
    for schedule in ("1f1b", "interleaved"):
        split_recompute_rule(None, "fsdp2", "selective", schedule, 4)


def test_cli_refuses_it_in_one_line() -> None:
    """``trainplan evaluate`` with the combination: exit code 2, one line naming it."""
    done = trainplan(
        "evaluate", "--model", "llama3-8b", "--gpus", "16", "--gpu", "H100-SXM",
        "--framework", "fsdp2", "--dp", "4", "--pp", "4", "--schedule", "zb-v",
        "--virtual-stages", "2", "--recompute", "selective", "--global-batch", "64",
        "--seq-len", "4096",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "selective with schedule zb-v under framework fsdp2" in done.stderr
