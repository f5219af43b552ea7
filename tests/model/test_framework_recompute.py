"""Recompute ``sqrt`` (multi-layer checkpoint segments) under ``fsdp2`` is refused by the one
legality rule set (:func:`model.frameworks.check_framework_recompute`): torchtitan's activation
checkpointing wraps each transformer block by itself (``torchtitan/distributed/
activation_checkpoint.py`` ``ActivationCheckpointing.apply``: full, per-op selective, or, in its
earlier config, every N-th block), so no multi-block segment can be launched. ``evaluate``
refuses it; the search's tables mark it illegal per (shape, ZeRO stage, recompute mode)."""

from __future__ import annotations

import numpy as np
import pytest

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import check_framework_recompute
from trainplan.model.layout import Layout, Recompute
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import build_tables

LINE = "recompute: sqrt with `framework` fsdp2 is not a torchtitan mechanism"


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "textbook"])
def test_sqrt_stays_legal_where_the_framework_has_segments(framework) -> None:
    check_framework_recompute(framework, "sqrt")


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_fsdp2_runs_its_block_wise_modes(mode) -> None:
    check_framework_recompute("fsdp2", mode)


def test_evaluate_refuses_sqrt_under_fsdp2() -> None:
    case = Case.of("llama3-8b", "H100-SXM", global_batch_size=64, seq_len=8192)
    with pytest.raises(LayoutError) as refused:
        case.evaluate(Layout(dp=8, zero_stage=3, framework="fsdp2", recompute="sqrt"))
    assert str(refused.value).startswith(LINE)


def test_search_tables_never_offer_sqrt_under_fsdp2() -> None:
    """Megatron and fsdp2 in one space: sqrt stays a candidate for Megatron's shapes and is
    illegal (so never fits, never chosen) for every fsdp2 shape at every ZeRO stage."""
    case = Case.of("llama3-8b", "H100-SXM", global_batch_size=64, seq_len=8192)
    space = SearchSpace(
        num_gpus=8, tp=(1, 2), pp=(1,), micro_batch_size=(1,), frameworks=("megatron", "fsdp2"),
        recomputes=(Recompute.SQRT, Recompute.FULL),
    )  # fmt: skip
    tables = build_tables(Problem(jobs=(Job(case, 8, "8"),), space=space))
    fsdp2 = np.array([str(s.framework) == "fsdp2" for s in tables.shapes])
    sqrt, full = (tables.recomputes.index(r) for r in (Recompute.SQRT, Recompute.FULL))
    assert fsdp2.any() and (~fsdp2).any()
    assert not tables.legal[fsdp2, :, sqrt].any() and not tables.fits[fsdp2, :, sqrt].any()
    assert tables.legal[fsdp2, :, full].any() and tables.fits[fsdp2, :, full].any()
    assert tables.fits[~fsdp2, :, sqrt].any()


def _deepspeed_figures(*args: str) -> tuple[int, float]:
    """(activation bytes, step seconds) of ``trainplan evaluate --framework deepspeed … --json``
    in a fresh process."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "trainplan", "evaluate", "--model", "llama3-8b", "--gpus", "8"]
    res = subprocess.run(
        [*cmd, "--framework", "deepspeed", "--global-batch", "8", *args, "--json"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    return out["memory"]["activations_bytes"], out["time"]["step_s"]


def test_deepspeed_selective_recomputes_nothing_with_flash_attention_or_ulysses():
    """Megatron-DeepSpeed checkpoints the core attention only in the branch of
    ``ParallelAttention.__init__`` without flash attention and without DeepSpeed's sequence
    parallelism (megatron/model/transformer.py, 4efb479d): with flash attention (the default),
    or at cp > 1 (``DistributedAttention``), ``recompute = selective`` keeps every tensor
    ``none`` keeps (model.recompute_modules.profile_recompute_modules); without flash attention
    at cp 1 it drops the attention scores."""
    long = ("--seq-len", "32768")
    for extra in ((), ("--cp", "4"), ("--cp", "4", "--set", "flash_attention=false")):
        none = _deepspeed_figures(*long, *extra, "--recompute", "none")
        selective = _deepspeed_figures(*long, *extra, "--recompute", "selective")
        assert selective[0] == none[0], extra
        if "flash_attention=false" not in extra:  # nothing re-run: the same step time
            assert selective[1] == none[1], extra
    eager = ("--seq-len", "4096", "--set", "flash_attention=false")
    none = _deepspeed_figures(*eager, "--recompute", "none")
    selective = _deepspeed_figures(*eager, "--recompute", "selective")
    assert selective[0] < none[0] and selective[1] > none[1]


def test_deepspeed_fp8_selective_recomputes_the_core_like_megatron():
    """Under FP8 Megatron-DeepSpeed's layer is Transformer Engine's ``TransformerLayer``
    (``transformer_impl = transformer_engine``, its only FP8 path): ``ParallelTransformer.
    __init__`` sets ``checkpoint_core_attention = recompute_granularity == 'selective'`` with no
    flash-attention condition and ``forward`` passes it to every layer, whose
    ``DotProductAttention`` re-runs the core in backward. With flash attention the core's saved
    tensor is the BF16 attention output the kernel keeps, ``2·8,192·4,096`` B per layer, and its
    FP32 softmax statistics ``4·32·8,192`` = 1,048,576 B: over Llama 3 8B's 32 layers selective
    keeps 32·68,157,440 = 2,181,038,080 B fewer than none (the figure Megatron-Core's
    ``core_attn`` gives), and the step re-runs the cores."""
    fp8 = ("--precision", "fp8")
    none = _deepspeed_figures(*fp8, "--recompute", "none")
    selective = _deepspeed_figures(*fp8, "--recompute", "selective")
    assert none[0] - selective[0] == 32 * (2 * 8192 * 4096 + 4 * 32 * 8192) == 2_181_038_080
    assert selective[1] > none[1]
