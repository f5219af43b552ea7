"""DeepSpeed + FP8 on a MoE model is refused at any tp and pp (the legality rule
``deepspeed_fp8``, :func:`trainplan.model.deepspeed_fp8.check_deepspeed_fp8`): DeepSpeed has no FP8
path of its own (deepspeedai/DeepSpeed edaa72212: nothing under ``deepspeed/`` reads Transformer
Engine; ``deepspeed/moe/experts.py`` ``Experts.forward`` loops over the user's expert module) and
Megatron-DeepSpeed's Transformer Engine path builds a dense ``TransformerLayer`` whatever the
layer's expert count (``megatron/model/transformer.py`` ``ParallelTransformer.build_layer``,
f4157bea)."""

from __future__ import annotations

import json
import warnings

import pytest

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


def test_deepspeed_fp8_recipe_other_than_delayed_refused_at_tp_1():
    """Megatron-DeepSpeed builds its FP8 recipe in ``ParallelTransformer.__init__``
    (microsoft/Megatron-DeepSpeed f4157bea ``megatron/model/transformer.py``):
    ``transformer_engine.common.recipe.DelayedScaling(margin, interval, fp8_format, ...)``
    whenever ``--fp8-e4m3`` or ``--fp8-hybrid`` is set, reading no parallel size, and
    ``forward`` passes it as ``fp8_autocast(fp8_recipe=self.fp8_recipe)``. So MXFP8 (or
    blockwise, tensorwise) is refused under deepspeed at tp 1 too, each command its own process,
    one line naming the flag, the value and the rule, exit 2; before, tp 1 evaluated Llama 3 8B
    on 8 B200 in MXFP8 (3.511 s a step). A search over deepspeed alone says the same line; one
    over deepspeed and megatron answers under megatron."""
    line = refusal(
        trainplan("evaluate", "--model", "llama3-8b", "--gpus", "8", "--gpu", "B200",
                  "--precision", "fp8", "--framework", "deepspeed", "--dp", "8",
                  "--fp8-recipe", "mxfp8")
    )  # fmt: skip
    assert line.startswith("--fp8-recipe: mxfp8 with --framework deepspeed: ")
    assert "DelayedScaling only, at every tp" in line
    line = refusal(
        trainplan("search", "--model", "llama3-8b", "--gpus", "8", "--precision", "fp8",
                  "--framework", "deepspeed", "--fp8-recipe", "tensorwise")
    )  # fmt: skip
    assert line.startswith("--fp8-recipe: tensorwise with --framework deepspeed: ")
    done = trainplan("search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "B200",
                     "--precision", "fp8", "--framework", "deepspeed", "--framework",
                     "megatron", "--fp8-recipe", "mxfp8", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["layout"]["framework"] == "megatron"
    delayed = trainplan("evaluate", "--model", "llama3-8b", "--gpus", "8", "--precision", "fp8",
                        "--framework", "deepspeed", "--dp", "8", "--fp8-recipe", "delayed")  # fmt: skip
    assert delayed.returncode == 0, delayed.stderr[-2000:]


def test_web_api_refuses_deepspeed_mxfp8_with_422():
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    warnings.filterwarnings("ignore", message=".*httpx2.*")
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    got = TestClient(create_app(("testserver",))).get(
        "/api/evaluate?model=llama3-8b&gpu=B200&gpus=8&dp=8&framework=deepspeed&precision=fp8"
        "&fp8-recipe=mxfp8"
    )
    assert got.status_code == 422, got.text
    assert got.json()["error"].startswith("fp8-recipe: mxfp8 with framework deepspeed: "), got.text
