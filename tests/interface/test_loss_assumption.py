"""The printed loss sentence says which loss the figures count and its bytes per local logit,
from the same functions as the memory terms (a user's process, as they run it)."""

from __future__ import annotations

from tests.cli_runs import trainplan


def _loss_line(*args: str) -> str:
    done = trainplan("evaluate", "--model", "llama3-8b", "--gpus", "8", *args)
    assert done.returncode == 0, done.stderr
    return next(x for x in done.stdout.splitlines() if x.startswith("  - loss:"))


def test_the_loss_sentence_names_the_loss_and_its_bytes():
    """Megatron-LM's unfused loss keeps the FP32 softmax (4 B) and peaks at 6 B per logit;
    Transformer Engine's fused loss (2.2–2.17) keeps the BF16 logits it wrote the gradient
    into, 2 B, and says where that stops holding; torchtitan's PyTorch loss peaks at 12 B at
    tp 1."""
    assert _loss_line().endswith(
        "Megatron-Core's unfused vocab-parallel cross entropy; backward keeps 4 B per local "
        "logit, the loss holds 6 B at its peak"
    )
    te = _loss_line("--set", "cross_entropy_fusion_impl=te")
    assert "from 2.18 it keeps an FP32 gradient" in te
    assert te.endswith("backward keeps 2 B per local logit, the loss holds 2 B at its peak")
    assert _loss_line("--framework", "fsdp2", "--zero", "3").endswith(
        "as torchtitan calls it; backward keeps 4 B per local logit, the loss holds 12 B at its "
        "peak"
    )
