"""Under FP8's ``delayed`` recipe Megatron-Core cannot recompute the modules that make a
Transformer Engine linear save its original input: TE raises "DelayedScaling recipe is not
supported with save_original_input" (``grouped_linear.py``, ``linear.py``). ``moe_act`` sets it
on the experts' fc2 (``TEGroupedMLP.__init__``); ``layernorm`` on MLA's two down-projections
(``set_for_recompute_input_layernorm``) and on the shared experts' fc1
(``MoELayer.set_for_recompute_pre_mlp_layernorm``). Refused in one line, exit 2; the other recipes
run them."""

import pytest

from tests.cli_runs import refusal, trainplan

BASE = ("evaluate", "--model", "deepseek-v3", "--gpu", "H200", "--dp", "16", "--pp", "16",
        "--ep", "8", "--precision", "fp8", "--recompute", "selective", "--micro-batch", "1",
        "--global-batch", "2048")  # fmt: skip


@pytest.mark.parametrize("modules", ['["moe_act"]', '["layernorm"]', '["core_attn","moe_act"]'])
def test_refused_under_delayed(modules):
    line = refusal(trainplan(*BASE, "--set", f"recompute_modules={modules}"))
    assert "which TE refuses under fp8_recipe delayed" in line
    assert line.startswith("--set recompute_modules: ")


def test_runs_under_tensorwise_and_mla_up_proj_under_delayed():
    done = trainplan(*BASE, "--fp8-recipe", "tensorwise", "--set",
                     'recompute_modules=["moe_act","layernorm"]')  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = trainplan(*BASE, "--set", 'recompute_modules=["mla_up_proj"]')
    assert done.returncode == 0, done.stderr
