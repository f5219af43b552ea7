"""``grad_clip_scaling`` as a user meets it: ``python -m trainplan`` in its own process, the
value read under ``megatron`` and shown in the JSON, a bad value and a layout that does not read
it refused (exit 2, one line on stderr naming the key, the value and the rule, nothing on
stdout, no traceback).

Megatron-LM's clip before 3d87bfc1b7 (2026-04-03) scales the gradients only when their norm
exceeds ``--clip-grad`` (``clip_grad_norm_fp32`` at 0fa7175f09: ``total_norm.item()``, then
``if clip_coeff < 1.0``); since then, under Transformer Engine, every step
(``clip_grad_by_total_norm_fp32``: ``clip_coeff.clamp_max_(1.0)``). PyTorch's and DeepSpeed's
clips are their own code (:func:`model.step_setting_rules.check_megatron_step_settings`)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests import cli_runs

TRIAD = 2.97e12
"""H100 SXM's optimizer-step rate, bytes per second (BabelStream's triad)."""

READ_BY = (
    "Error: --set grad_clip_scaling: 'above_limit' is read by megatron only (Megatron-LM's clip "
    "before 3d87bfc1b7 of 2026-04, which scaled the gradients only above --clip-grad), not "
)


def trainplan(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_runs.trainplan(*args, timeout=300)


def assert_refused(p: subprocess.CompletedProcess[str], line: str) -> None:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and not p.stdout and len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr and lines[0] == line, p.stderr


BASE = ("evaluate", "--model", "llama3-8b", "--gpus", "8")


def test_above_limit_drops_the_scaling_pass_under_megatron():
    """Megatron ZeRO-1 (the distributed optimizer), dp 8, llama3-8b: each rank steps P/8 elements;
    ``above_limit`` drops the scaling's read and write, 8 B each, from the optimizer step:
    8 × P/8 = P bytes at the triad's 2.97 TB/s, P the stage's 8,030,261,248 parameters."""
    runs = [
        json.loads(p.stdout)
        for p in (
            trainplan(*BASE, "--framework", "megatron", "--zero", "1", "--json"),
            trainplan(*BASE, "--framework", "megatron", "--zero", "1", "--json",
                      "--set", "grad_clip_scaling=above_limit"),
        )
    ]  # fmt: skip
    every, above = (r["time"] for r in runs)
    assert (
        every["grad_clip_scaling"] == "every_step" and above["grad_clip_scaling"] == "above_limit"
    )
    P = 8_030_261_248
    assert every["optimizer_s"] - above["optimizer_s"] == pytest.approx(8 * P / 8 / TRIAD, rel=1e-6)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_value_not_in_the_list_is_refused(as_json):
    p = trainplan(*BASE, "--set", "grad_clip_scaling=sometimes", *(["--json"] if as_json else []))
    assert_refused(
        p, "Error: --set grad_clip_scaling: 'sometimes' is not one of every_step, above_limit"
    )


@pytest.mark.parametrize("framework", ["fsdp2", "deepspeed"])
def test_above_limit_is_refused_where_the_clip_is_not_megatron_s(framework):
    p = trainplan(*BASE, "--framework", framework, "--set", "grad_clip_scaling=above_limit")
    assert_refused(p, READ_BY + framework)


@pytest.mark.parametrize("framework", ["fsdp2", "deepspeed"])
def test_loss_scaling_is_refused_outside_megatron(framework):
    """``loss_scaling`` is Megatron's FP16 optimizer's unscaling; DeepSpeed's and PyTorch's FP16
    paths are their own code."""
    p = trainplan(*BASE, "--framework", framework, "--set", "loss_scaling=true")
    assert_refused(
        p,
        "Error: --set loss_scaling: true is read by megatron only (its FP16 optimizer's "
        f"_unscale_main_grads_and_check_for_nan every step), not {framework}",
    )


def test_a_search_without_megatron_refuses_it():
    p = trainplan("search", "--model", "llama3-8b", "--gpus", "8", "--framework", "fsdp2",
                  "--set", "grad_clip_scaling=above_limit")  # fmt: skip
    assert_refused(p, READ_BY + "the frameworks searched (fsdp2)")


def test_the_page_refuses_what_the_command_line_refuses():
    """``GET /api/evaluate``: HTTP 422 with the same line, the value named; the key's value read
    under ``megatron`` comes back in the result's ``time``."""
    import warnings

    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    warnings.filterwarnings("ignore", message=".*httpx2.*")
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    client = TestClient(create_app(("testserver",)))
    query = {"model": "llama3-8b", "gpus": 8, "framework": "fsdp2"}
    got = client.get("/api/evaluate", params=query | {"set": "grad_clip_scaling=above_limit"})
    assert got.status_code == 422, got.text
    assert got.json()["error"].startswith("grad_clip_scaling: 'above_limit' is read by megatron")
    got = client.get("/api/evaluate", params=query | {"set": "grad_clip_scaling=never"})
    assert got.status_code == 422, got.text
    assert (
        got.json()["error"]
        == "set: grad_clip_scaling: 'never' is not one of every_step, above_limit"
    )
    query = {"model": "llama3-8b", "gpus": 8, "set": "grad_clip_scaling=above_limit"}
    got = client.get("/api/evaluate", params=query)
    assert got.status_code == 200, got.text
    assert got.json()["time"]["grad_clip_scaling"] == "above_limit"


SEARCH = ("--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM", "--global-batch", "16",
          "--framework", "megatron", "--framework", "fsdp2", "--headroom", "0.756")  # fmt: skip
"""A search whose optimum, at the defaults, is an fsdp2 layout: 4.108280719 s per step."""


@pytest.mark.parametrize("setting", ["loss_scaling=true", "grad_clip_scaling=above_limit"])
def test_a_search_with_megatron_keeps_the_other_frameworks(setting):
    """Megatron's step settings (:data:`model.step_setting_rules.MEGATRON_STEP_SETTINGS`) describe the
    code a megatron run uses; the fsdp2 layouts, which do not read them, stay candidates with
    their figures unchanged: the optimum is the fsdp2 layout of the search without the setting
    (4.108280719 s), and its evaluate line leaves the setting off (evaluate refuses it under
    fsdp2)."""
    p = trainplan("search", *SEARCH, "--set", setting, "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["status"] == "optimal" and d["layout"]["framework"] == "fsdp2"
    assert d["objective_s"] == pytest.approx(4.108280719, abs=1e-9)
    assert setting.partition("=")[0] not in d["evaluate_command"]
    again = trainplan(*d["evaluate_command"].split()[1:], "--json")
    assert again.returncode == 0, again.stderr


def test_the_frontier_keeps_the_fsdp2_point_under_loss_scaling():
    """The frontier over megatron and fsdp2 with ``loss_scaling`` has the points it has without
    it (the fsdp2 optimum among them), each at the same step time."""
    runs = [
        json.loads(trainplan("frontier", *SEARCH, *extra, "--json").stdout)["points"]
        for extra in ((), ("--set", "loss_scaling=true"))
    ]
    plain, scaled = ([(q["framework"], q["step_s"]) for q in pts] for pts in runs)
    assert ("fsdp2", pytest.approx(4.108280719, abs=1e-9)) in scaled
    assert [f for f, _ in scaled] == [f for f, _ in plain]
    assert [s for _, s in scaled] == pytest.approx([s for _, s in plain], rel=1e-12)


def test_a_search_without_megatron_refuses_loss_scaling():
    p = trainplan("search", "--model", "llama3-8b", "--gpus", "8", "--framework", "fsdp2",
                  "--set", "loss_scaling=true")  # fmt: skip
    assert_refused(
        p,
        "Error: --set loss_scaling: true is read by megatron only (its FP16 optimizer's "
        "_unscale_main_grads_and_check_for_nan every step), not the frameworks searched (fsdp2)",
    )


APEX_LINE = (
    " is not read under distributed_optimizer distributed_fused_adam (Apex's DistributedFusedAdam "
    "folds the clip coefficient and the loss scale into its step kernel's _grad_scale: no pass "
    "of its own); drop the setting"
)


@pytest.mark.parametrize(
    "setting, shown",
    [("loss_scaling=true", "true"), ("grad_clip_scaling=above_limit", "'above_limit'")],
)
@pytest.mark.parametrize("command", ["evaluate", "search"])
def test_apex_distributed_fused_adam_refuses_the_step_settings(command, setting, shown):
    """Apex's ``DistributedFusedAdam`` has no clip pass and no unscaling pass of its own (the
    coefficient and the inverse loss scale ride in its kernel's ``_grad_scale``), so neither
    setting changes a figure: refused rather than silently dropped, in ``evaluate`` and in a
    search (where the optimizer is legal at megatron ZeRO-1 alone)."""
    extra = ("--zero", "1") if command == "evaluate" else ()
    p = trainplan(command, "--model", "llama3-8b", "--gpus", "8", "--framework", "megatron",
                  *extra, "--set", "distributed_optimizer=distributed_fused_adam",
                  "--set", setting)  # fmt: skip
    key = setting.partition("=")[0]
    assert_refused(p, f"Error: --set {key}: {shown}" + APEX_LINE)


def test_the_page_refuses_the_step_settings_under_apex_and_notes_the_clip():
    """``GET /api/evaluate``: the Apex refusal as HTTP 422 with the command line's line, and the
    ``above_limit`` note in the result's ``notes``."""
    import warnings

    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    warnings.filterwarnings("ignore", message=".*httpx2.*")
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    client = TestClient(create_app(("testserver",)))
    query = {"model": "llama3-8b", "gpus": 8, "framework": "megatron", "zero": 1}
    apex = "distributed_optimizer=distributed_fused_adam"
    got = client.get("/api/evaluate", params=query | {"set": [apex, "loss_scaling=true"]})
    assert got.status_code == 422, got.text
    assert got.json()["error"] == "loss_scaling: true" + APEX_LINE
    got = client.get("/api/evaluate", params=query | {"set": "grad_clip_scaling=above_limit"})
    assert got.status_code == 200, got.text
    assert any(n.startswith("grad_clip_scaling above_limit: the optimizer step is charged without")
               for n in got.json()["notes"])  # fmt: skip
