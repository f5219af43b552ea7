"""DeepSpeed + FP8 on a MoE model is refused at any tp and pp (the legality rule
``deepspeed_fp8``, :func:`trainplan.model.precision.check_deepspeed_fp8`): DeepSpeed has no FP8
path of its own (deepspeedai/DeepSpeed edaa72212: nothing under ``deepspeed/`` reads Transformer
Engine; ``deepspeed/moe/experts.py`` ``Experts.forward`` loops over the user's expert module) and
Megatron-DeepSpeed's Transformer Engine path builds a dense ``TransformerLayer`` whatever the
layer's expert count (``megatron/model/transformer.py`` ``ParallelTransformer.build_layer``,
f4157bea)."""

from __future__ import annotations

from tests.cli_runs import refusal, trainplan


def test_deepspeed_fp8_on_moe_refused_at_tp_pp_1():
    done = trainplan(
        "evaluate", "--model", "mixtral-8x7b", "--gpus", "8", "--precision", "fp8",
        "--framework", "deepspeed", "--dp", "8", "--ep", "8",
    )  # fmt: skip
    line = refusal(done)
    assert "--precision: fp8 with --framework deepspeed on a model with routed experts" in line


def test_deepspeed_bf16_on_moe_and_fp8_dense_still_evaluate():
    moe = trainplan(
        "evaluate", "--model", "mixtral-8x7b", "--gpus", "8", "--framework", "deepspeed",
        "--dp", "8", "--ep", "8",
    )  # fmt: skip
    dense = trainplan(
        "evaluate", "--model", "llama3-8b", "--gpus", "8", "--precision", "fp8",
        "--framework", "deepspeed", "--dp", "8",
    )  # fmt: skip
    assert moe.returncode == 0 and dense.returncode == 0, (moe.stderr, dense.stderr)
