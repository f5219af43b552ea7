"""A search with the user's own choices set (``--set moe_ep_overlap=…``, ``--precision fp8`` …)
also searches without them and says what they cost (:mod:`interface.setting_cost`).

The case: Mixtral 8x7B on 64 H100s (its catalogue batch, B 128 of 32,768 tokens). Forcing
Megatron-Core's ``overlap_moe_expert_parallel_comm`` hides the expert all-to-all of one
micro-batch under another's compute, but Megatron-Core asserts it never runs with full
recomputation (``megatron/core/transformer/transformer_config.py``, ``__post_init__``;
:mod:`model.moe_rules`), and the fastest layout without the overlap recomputes fully:

* without it (Megatron-Core's default, none): dp 64 × ep 8, ZeRO-3, recompute full, b 2:
  compute 17.100 s + exposed comm 0.587 s + optimizer step 0.012 s = 17.700 s (17.697 s before
  Megatron-Core's own optimizer-step passes, 38 → 50 B an element: the clip's scaling +8 and
  the master's re-read for the 16-bit copy +4, model.step_passes.step_pass_bytes; +12 B ×
  730 M owned elements / (3.35 TB/s × 0.887) = +2.9 ms; 17.692 s before
  each micro-batch's last reduce-scatter bucket, run after the backward's computation, waited
  whole: model.dp_exposure.microbatch_exposed_seconds);
* with it: dp 8 × tp 8 × ep 8, ZeRO-1, recompute none, b 1, m 16: compute 13.398 s + exposed
  comm 5.100 s + optimizer step 0.013 s = 18.511 s (18.508 s before the same +12 B: × 730 M
  owned elements / (3.35 TB/s × 0.887) = +2.9 ms) — the tp 8 collectives wait whole, 4.749 s:
  with ``--overlap-moe-expert-parallel-comm`` before Blackwell the launch line sets no
  ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (validate_args only warns; the larger default serves the
  all-to-all overlap), so no async tp overlap is credited (model.launch_order; 18.059 s when it
  was) — (the same layout without the overlap exposes 6.916 s of communication, 20.327 s: the
  overlap helps its own layout and loses the search);

so the setting costs 18.511 / 17.700 − 1 = 4.58 %, above the 1 % threshold: a note. Each step
time is ``trainplan evaluate``'s for that layout (asserted below, not copied).
"""

from __future__ import annotations

import re

import pytest

from trainplan.interface.commands import evaluate_json, search_json
from trainplan.interface.scenario_file import CLUSTER_KEYS
from trainplan.interface.setting_cost import CHOICE_KEYS, FACT_KEYS, THRESHOLD
from trainplan.model.errors import InfeasibleError

MIXTRAL = {"model": "mixtral-8x7b", "gpu": "H100-SXM"}
OVERLAP = {"moe_ep_overlap": "overlap_moe_expert_parallel_comm"}
WITHOUT = {"dp": 64, "ep": 8, "zero_stage": 3, "recompute": "full", "micro_batch_size": 2}
WITH = {"dp": 8, "tp": 8, "ep": 8, "zero_stage": 1, "recompute": "none", "micro_batch_size": 1}


def _evaluated(layout: dict, **recipe: str) -> float:
    return evaluate_json({**MIXTRAL, **layout, "schedule": "1f1b", **recipe})["time"]["step_s"]


def test_every_cluster_key_is_a_choice_or_a_fact():
    assert not set(CHOICE_KEYS) & set(FACT_KEYS)
    assert set(CHOICE_KEYS) | set(FACT_KEYS) == set(CLUSTER_KEYS)
    # the brief's examples: mechanisms are choices; a fabric without NVLS, a calibration are not
    assert {"moe_ep_overlap", "tp_comm_overlap", "fp8_recipe", "recompute_modules"} <= set(
        CHOICE_KEYS
    )
    assert {"nccl_nvls", "calibration", "gemm_efficiency", "nvlink_gbps"} <= set(FACT_KEYS)


def test_forced_ep_overlap_costs_two_percent_on_mixtral():
    with_s, without_s = _evaluated(WITH, **OVERLAP), _evaluated(WITHOUT)
    assert round(with_s, 3) == 18.511 and round(without_s, 3) == 17.700
    d = search_json({**MIXTRAL, "gpus": "64", "set": OVERLAP}).json
    assert d["time"]["step_s"] == pytest.approx(with_s, abs=1e-9)
    assert {k: d["layout"][k] for k in ("dp", "tp", "ep", "zero_stage", "recompute")} == {
        "dp": 8,
        "tp": 8,
        "ep": 8,
        "zero_stage": 1,
        "recompute": "none",
    }
    cost = d["settings_cost"]
    assert cost["settings"] == OVERLAP and cost["status"] == "optimal"
    assert cost["with_settings"] == pytest.approx(with_s, abs=1e-9)  # ns resolution
    assert cost["without_settings"] == pytest.approx(without_s, abs=1e-9)
    assert cost["step_s"] == pytest.approx(without_s, abs=1e-9)
    assert cost["cost"] == pytest.approx(18.511 / 17.700 - 1, abs=1e-4)  # 4.58 %
    assert cost["threshold"] == THRESHOLD == 0.01
    lay = cost["layout"]
    assert (lay["dp"], lay["tp"], lay["ep"], lay["zero_stage"]) == (64, 1, 8, 3)
    assert (lay["recompute"], lay["micro_batch_size"], lay["moe"]["moe_ep_overlap"]) == (
        "full",
        2,
        "none",
    )
    assert cost["note"] == (
        "your setting --set moe_ep_overlap=overlap_moe_expert_parallel_comm costs 4.6%: without "
        "it (the frameworks' defaults) the best layout is dp 64 × tp 1 × pp 1 × cp 1 (ep 8), "
        "megatron ZeRO-3, recompute full, 1f1b, b 2, B 128, m 1, s 32,768, rank order "
        "tp-cp-ep-dp-pp (17.700 s per step against 18.511 s per step with it)"
    )
    web = search_json({**MIXTRAL, "gpus": "64", "set": OVERLAP}, web=True).json
    assert web["settings_cost"]["note"].startswith(
        "your setting moe-ep-overlap=overlap_moe_expert_parallel_comm costs 4.6%"
    )


def test_a_setting_that_gains_is_compared_without_a_note():
    # on B200s the forced overlap wins: the figures are there, the note is not
    d = search_json({**MIXTRAL, "gpu": "B200", "gpus": "64", "set": OVERLAP}).json
    cost = d["settings_cost"]
    assert cost["cost"] < 0 and cost["note"] is None
    assert cost["with_settings"] == pytest.approx(d["time"]["step_s"], abs=1e-9)


def test_nothing_is_compared_for_facts_defaults_or_a_sweep():
    small = {**MIXTRAL, "gpus": "64"}
    assert search_json({**small, "set": {"nccl_nvls": False}}).json["settings_cost"] is None
    # a choice at Megatron-Core's own default builds the same case: no second search
    assert search_json({**small, "set": {"moe_ep_overlap": "none"}}).json["settings_cost"] is None
    # the case holds None for tp_comm_overlap ("the framework's own"), which Megatron-Core runs
    # as async (model.tp_overlap.tp_overlap_for): the default, not a choice
    d = search_json({**small, "set": {"tp_comm_overlap": "async"}}).json
    assert d["settings_cost"] is None
    # beside a choice it is not named either
    cost = search_json({**small, "set": {**OVERLAP, "tp_comm_overlap": "async"}}).json
    assert cost["settings_cost"]["settings"] == OVERLAP and cost["settings_cost"]["each"] == []
    assert search_json({**small, "set": OVERLAP}, compare=False).json["settings_cost"] is None


def test_a_spent_time_limit_skips_the_comparison():
    d = search_json({**MIXTRAL, "gpus": "64", "set": OVERLAP, "time_limit": 0.001}).json
    cost = d["settings_cost"]
    assert cost["status"] == "skipped" and cost["without_settings"] is None
    assert cost["reason"] == "the time limit of 0.001 s was spent by the search with them"
    assert cost["note"] is None


def test_a_setting_that_leaves_no_layout_names_the_best_without_it():
    # on 16 H100s no layout fits with the overlap (it refuses full recomputation); without it
    # Megatron-Core's default fits at dp 4 × pp 4 × ep 4, recompute sqrt, interleaved v=8
    with pytest.raises(InfeasibleError) as err:
        search_json({**MIXTRAL, "gpus": "16", "set": OVERLAP})
    last = err.value.explanation[-1]
    assert last.startswith(
        "settings: your setting `moe_ep_overlap`=overlap_moe_expert_parallel_comm leaves no "
        "layout; without it (the frameworks' defaults) the best layout is dp 4 × tp 1 × pp 4 × "
        "cp 1 (ep 4), megatron ZeRO-1, recompute sqrt, interleaved v=8, b 1, B 128, m 32"
    )
    seconds = float(re.search(r"\(([\d.]+) s per step\)$", last).group(1))
    layout = {"dp": 4, "pp": 4, "ep": 4, "zero_stage": 1, "recompute": "sqrt"}
    step = evaluate_json(
        {**MIXTRAL, **layout, "schedule": "interleaved", "virtual_stages": 8, "micro_batch_size": 1}
    )["time"]["step_s"]
    # 74.055 s: the interleaved bubble Megatron-Core's order on the chunks as timed (74.076 s
    # under the closed form); 74.043 s before Megatron-Core's own optimizer-step passes (38 → 50
    # B an element, model.step_passes.step_pass_bytes): +12 B × 2.96 G owned elements at
    # ZeRO-1 dp 4 / (3.35 TB/s × 0.887) = +12.0 ms
    assert seconds == round(step, 3) == 74.055


def test_the_search_page_lists_every_choice_and_every_fact():
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "guides" / "search.md").read_text()
    section = page.split("## Your settings, and what they cost", 1)[1]
    choices, facts = section.split("The facts about your cluster", 1)
    choices = choices.split("The choices (compared when set)", 1)[1]
    listed = lambda text: set(re.findall(r"^- .*", text, flags=re.M))  # noqa: E731
    keys = lambda lines: {k for line in lines for k in re.findall(r"`([a-z0-9_]+)`", line)}  # noqa: E731
    assert keys(listed(choices)) == set(CHOICE_KEYS)
    assert keys(listed(facts)) == set(FACT_KEYS)
