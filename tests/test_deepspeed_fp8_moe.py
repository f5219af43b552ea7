"""DeepSpeed + FP8 on a MoE model is refused at any tp and pp (the legality rule
``deepspeed_fp8``, :func:`trainplan.model.deepspeed_fp8.check_deepspeed_fp8`): DeepSpeed has no FP8
path of its own (deepspeedai/DeepSpeed edaa72212: nothing under ``deepspeed/`` reads Transformer
Engine; ``deepspeed/moe/experts.py`` ``Experts.forward`` loops over the user's expert module) and
Megatron-DeepSpeed's Transformer Engine path builds a dense ``TransformerLayer`` whatever the
layer's expert count (``megatron/model/transformer.py`` ``ParallelTransformer.build_layer``,
f4157bea)."""

from __future__ import annotations

import json

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


def test_deepspeed_fp8_refused_at_pp_above_1_and_search_answers_pp_1():
    """Megatron-DeepSpeed's Transformer Engine path runs in ``GPTModel`` only
    (deepspeedai/Megatron-DeepSpeed 4efb479d ``megatron/training.py`` ``get_model``: "Transformer
    Engine is only approved for GPT models"); under DeepSpeed ``pretrain_gpt.py``
    ``model_provider`` builds ``GPTModel`` only with ``--no-pipeline-parallel``, which
    ``megatron/arguments.py`` ``parse_args`` allows at ``pipeline_model_parallel_size == 1``.
    So even GPT-3 175B (no GQA, LayerNorm, GELU: what the TE layer builds) is refused at pp 8,
    and a search answers at pp 1 (before: dp1 tp4 pp16 ZeRO-1, a layout that cannot run)."""
    line = refusal(
        trainplan("evaluate", "--model", "gpt3-175b", "--gpus", "64", "--framework",
                  "deepspeed", "--precision", "fp8", "--tp", "8", "--pp", "8")
    )  # fmt: skip
    assert line.startswith("--precision: fp8 with --framework deepspeed at pp 8: ")
    assert "--no-pipeline-parallel" in line
    done = trainplan("search", "--model", "gpt3-175b", "--gpus", "64", "--framework",
                     "deepspeed", "--precision", "fp8", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["layout"]["pp"] == 1


def test_deepspeed_fp8_refused_at_cp_above_1():
    """DeepSpeed-Ulysses (``DistributedAttention``), the profile's only context parallelism, is
    wired into Megatron-DeepSpeed's own ``ParallelAttention.__init__`` only
    (``enable_ds_sequence_parallel``, 4efb479d ``megatron/model/transformer.py``); the
    Transformer Engine layer it trains FP8 with gets no sequence-parallel group."""
    line = refusal(
        trainplan("evaluate", "--model", "gpt3-175b", "--gpus", "64", "--framework",
                  "deepspeed", "--precision", "fp8", "--tp", "8", "--cp", "2", "--zero", "3")
    )  # fmt: skip
    assert line.startswith("--precision: fp8 with --framework deepspeed at cp 2: ")
