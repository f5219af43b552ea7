"""The command-line and interface parts of tests/model/test_activation_offload.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

import pytest

from tests.model.test_activation_offload import BASE
from tests.test_cli_planner import run_main
from trainplan.interface.inputs import build_case
from trainplan.interface.render.report_dict import estimate_to_dict


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--framework", "deepspeed"), "offload_activations: deepspeed has no fine-grained"),
        (("--framework", "textbook"), "offload_activations: textbook has no fine-grained"),
        (("--recompute", "full"), "offload_activations: recompute full keeps only"),
        (("--recompute", "sqrt"), "offload_activations: recompute sqrt keeps only"),
    ],
)
def test_refusals_are_one_line_exit_2(monkeypatch, capsys, args, message):
    code, out, err = run_main(
        monkeypatch,
        capsys,
        "--model",
        "llama3-8b",
        "--dp",
        "8",
        "--set",
        "offload_activations=core_attn",
        *args,
    )
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize(
    ("modules", "message"),
    [
        ("attn_proj", "attn_proj needs core_attn"),
        ("expert_fc1", "this model has no MoE layers"),
        ("attn_norm", "attn_norm offloads nothing on this model"),
        ("core_attn,mlp_norm", "mlp_norm offloads nothing on this model"),
        ("core_attn,qkv", "offload_activations: 'qkv' is not one of attn_norm"),
    ],
)
def test_module_rules_refused(monkeypatch, capsys, modules, message):
    code, out, err = run_main(
        monkeypatch,
        capsys,
        "--model",
        "llama3-8b",
        "--dp",
        "8",
        "--set",
        f"offload_activations={modules}",
    )
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_scenario_key_reaches_the_search_space():
    """``[cluster] offload_activations`` in a scenario: a list of module names, checked."""
    from trainplan.interface.scenario import build_problem

    values = {
        "model": "llama3-8b",
        "gpus": 8,
        "global_batch": 16,
        "seq_len": 2048,
        "cluster": {"offload_activations": ["attn_proj", "core_attn"]},
    }
    problem = build_problem({}, values)
    assert problem.jobs[0].case.training.offload.activations == ("core_attn", "attn_proj")


def test_the_json_form_reports_the_offload():
    """``--json``'s fields for Llama 3 8B's core_attn and attn_proj offload (the figures of
    tests/model/test_activation_offload.py's hand derivation)."""
    off = build_case({**BASE, "offload_activations": "core_attn,attn_proj"})
    d = estimate_to_dict(off.evaluate())
    assert d["layout"]["offload_activations"] == ["core_attn", "attn_proj"]
    assert d["memory"]["activation_offload_buffer_bytes"] == 167_772_160
    assert d["memory"]["activation_offload_host_bytes"] == 5_200_936_960
    assert d["memory"]["host_bytes_per_node"] == 8 * 5_200_936_960
    assert d["time"]["activation_offload_s"] == 0.0
