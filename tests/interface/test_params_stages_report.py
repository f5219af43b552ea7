"""The command-line and interface parts of tests/model/test_params_stages.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

from trainplan.interface.render.report_dict import estimate_to_dict
from trainplan.optimizer.case import Case


def test_llama3_405b_evaluate_reports_the_split():
    est = Case.of(
        **{
            "model": "llama3-405b",
            "tp": 8,
            "pp": 16,
            "dp": 128,
            "seq_len": 8192,
            "micro_batch_size": 1,
            "global_batch_size": 2048,
        }
    ).evaluate()
    assert [s.num_layers for s in est.stages] == [7] + [8] * 14 + [7]
    assert estimate_to_dict(est)["layout"]["stage_layers"] == [7] + [8] * 14 + [7]
    assert any("uneven" in line for line in estimate_to_dict(est)["assumptions"])
