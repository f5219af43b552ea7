"""The weight pass of torch.distributed.pipelining's split schedules (``fsdp2``'s ZB-V and
DualPipeV) re-runs the checkpointed blocks' forward: ``stage_backward_input`` is one
``torch.autograd.grad`` call and ``stage_backward_weight`` one more per parameter group, and a
non-reentrant checkpoint recomputes once per call (pytorch/pytorch 0008d77
``torch/utils/checkpoint.py`` ``_checkpoint_hook.unpack_hook``; pytorch/pytorch#166536: "AC
will always retrigger recompute upon every distinct backward"). torchtitan's op-level selective
recomputation raises on the second pass ("Trying to backward an extra time"); full
recomputation runs each block once more per weight tensor in ``W`` and keeps those tensors to
the pass's end. Neither is modelled, so both are refused there.

The search once picked ZB-V with full recomputation for gpt-oss-120b on 64 H100s under fsdp2
(10.435 s a step, the recomputation counted once, in ``I``)."""

from __future__ import annotations

import functools

import pytest

from tests.cli_runs import trainplan
from trainplan.model.errors import LayoutError
from trainplan.model.schedule_support import split_recompute_rule, weight_pass_recomputes
from trainplan.optimizer.case import Case

BASE = dict(model="llama3-8b", num_gpus=16, dp=4, pp=4, global_batch_size=64, seq_len=4096)


def _est(**extra: object):  # type: ignore[no-untyped-def]
    return Case.of(**{**BASE, "framework": "fsdp2", **extra}).evaluate()


def test_which_framework_and_schedule_rerun() -> None:
    """Only PyTorch's pipelining (fsdp2) with ZB-V or DualPipeV; the papers' schedules
    (textbook) recompute once, in B; 1F1B and interleaved have no weight pass."""
    assert weight_pass_recomputes("fsdp2", "zb-v") and weight_pass_recomputes("fsdp2", "dualpipev")
    assert not weight_pass_recomputes("textbook", "zb-v")
    assert not weight_pass_recomputes("textbook", "dualpipev")
    assert not weight_pass_recomputes("fsdp2", "1f1b")
    assert not weight_pass_recomputes("fsdp2", "interleaved")


def test_torch_recomputes_each_block_once_per_weight_in_the_weight_pass() -> None:
    """The mechanism itself, on PyTorch (CPU; skipped without torch): two blocks of six weight
    tensors (a norm weight and five projections) under ``checkpoint(use_reentrant=False,
    early_stop=False)`` (torchtitan's FullAC): the input pass runs each block's forward once
    (2 calls), the weight pass once per parameter group (12 groups: 12 calls); with a
    selective policy (torchtitan's SelectiveAC) the weight pass raises."""
    torch = pytest.importorskip("torch")
    backward = pytest.importorskip("torch.distributed.pipelining._backward")
    from torch.utils.checkpoint import (
        CheckpointPolicy,
        checkpoint,
        create_selective_checkpoint_contexts,
    )

    calls = [0]
    nn = torch.nn

    class Block(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.RMSNorm(16)
            self.wq, self.wk, self.wo = (nn.Linear(16, 16, bias=False) for _ in range(3))
            self.w1, self.w2 = nn.Linear(16, 64, bias=False), nn.Linear(64, 16, bias=False)

        def forward(self, x):  # type: ignore[no-untyped-def]
            calls[0] += 1
            y = self.norm(x)
            a = torch.softmax(self.wq(y) @ self.wk(y).transpose(-1, -2), -1) @ y
            x = x + self.wo(a)
            return x + self.w2(torch.nn.functional.silu(self.w1(x)))

    def policy(ctx, op, *args, **kwargs):  # type: ignore[no-untyped-def]
        return (
            CheckpointPolicy.MUST_SAVE
            if op == torch.ops.aten.mm.default
            else (CheckpointPolicy.PREFER_RECOMPUTE)
        )

    def run(selective: bool) -> tuple[int, int, int]:
        torch.manual_seed(0)
        blocks = nn.ModuleList(Block() for _ in range(2))
        x = torch.randn(4, 8, 16, requires_grad=True)
        h = x
        extra = {}
        if selective:
            extra["context_fn"] = functools.partial(create_selective_checkpoint_contexts, policy)
        for block in blocks:
            h = checkpoint(block, h, use_reentrant=False, early_stop=False, **extra)
        calls[0] = 0
        params = list(blocks.parameters())
        _, groups = backward.stage_backward_input([h.sum()], None, [x], iter(params))
        in_i = calls[0]
        backward.stage_backward_weight(iter(params), groups)
        return len(groups), in_i, calls[0] - in_i

    assert run(False) == (12, 2, 12)
    with pytest.raises(RuntimeError, match="Trying to backward an extra time"):
        run(True)


def test_recomputation_with_a_split_schedule_is_refused() -> None:
    """Under fsdp2, zb-v and dualpipev take recompute none only; 1F1B and interleaved take
    every mode; the textbook profile (the papers' schedules) is not torch's."""
    for schedule in ("zb-v", "dualpipev"):
        for mode, why in (("selective", "backward an extra time"), ("full", "per weight tensor")):
            with pytest.raises(LayoutError, match=f"recompute: {mode} with schedule {schedule}"):
                split_recompute_rule(None, "fsdp2", mode, schedule, 4)
            with pytest.raises(LayoutError, match=why):
                _est(schedule=schedule, virtual_stages=2, recompute=mode)
            split_recompute_rule(None, "textbook", mode, schedule, 4)
        split_recompute_rule(None, "fsdp2", "none", schedule, 4)
        assert _est(schedule=schedule, virtual_stages=2, recompute="none").step_s
    for schedule in ("1f1b", "interleaved"):
        for mode in ("selective", "full"):
            split_recompute_rule(None, "fsdp2", mode, schedule, 4)


def test_the_refusal_says_it_is_not_modelled_and_why_in_one_line() -> None:
    """The refusal names the combination, says it is not modelled, and why: torch's pipelining
    takes each weight's gradient in an autograd call of its own (the 12 calls measured above)."""
    with pytest.raises(LayoutError) as err:
        split_recompute_rule(None, "fsdp2", "selective", "zb-v", 4)
    assert str(err.value) == (
        "recompute: selective with schedule zb-v under framework fsdp2 is not modelled: "
        "PyTorch's pipelining takes each weight's gradient in its own autograd call, so a "
        "checkpoint recomputes once per call, and torchtitan's selective checkpoint raises "
        '"Trying to backward an extra time" on the second recomputation '
        "(torch/utils/checkpoint.py); use recompute none, or schedule 1f1b or interleaved"
    )
    with pytest.raises(LayoutError) as err:
        split_recompute_rule(None, "fsdp2", "full", "dualpipev", 4)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(
        "recompute: full with schedule dualpipev under framework fsdp2 is not modelled: "
        "PyTorch's pipelining takes each weight's gradient in its own autograd call"
    )
    assert "re-runs each block once per weight tensor" in str(err.value)


def test_cli_refuses_it_in_one_line() -> None:
    """``trainplan evaluate`` with the combination: exit code 2, one line naming it."""
    done = trainplan(
        "evaluate", "--model", "llama3-8b", "--gpus", "16", "--gpu", "H100-SXM",
        "--framework", "fsdp2", "--dp", "4", "--pp", "4", "--schedule", "zb-v",
        "--virtual-stages", "2", "--recompute", "full", "--global-batch", "64",
        "--seq-len", "4096",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "full with schedule zb-v under framework fsdp2 is not modelled" in done.stderr
