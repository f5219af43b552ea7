"""Scope honesty: a term of the cost model (:data:`model.terms.TERMS`) reads only the layout
fields its ``scope`` declares. The search's tables rely on it — ``state`` is tabulated once per
(shape, ZeRO stage), ``activations`` and ``t1`` once per (shape, recompute mode), ``t2`` once per
(shape, ZeRO stage) — so a term that read a field outside its scope would be wrong in the
tables and right in ``evaluate()``.

For each term, hypothesis draws a legal layout of a small dense (GQA) or MoE model, a field
outside the term's scope and another legal value of it, and checks the term's figures on every
pipeline stage are the same exact numbers for both layouts.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from trainplan.model.errors import PlannerError
from trainplan.model.estimate import evaluation_context
from trainplan.model.hardware import ClusterLinks
from trainplan.model.layout import LAYOUT_FIELDS, Layout, validate
from trainplan.model.model_spec import ModelSpec
from trainplan.model.op_time import TpOverlap
from trainplan.model.specs import Architecture, MoESpec, TrainingSpec
from trainplan.model.terms import TERMS, Term
from trainplan.model.terms.fields import LayoutFields
from trainplan.model.timing import CostOptions
from trainplan.optimizer.case import links_for
from trainplan.topology.accelerators import get_accelerator

DENSE = Architecture(
    num_layers=6, hidden_size=256, num_attention_heads=8, num_kv_heads=4,
    ffn_hidden_size=512, vocab_size=1000, mlp="swiglu", norm="rmsnorm",
)  # fmt: skip
MOE = replace(
    DENSE,
    moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=256),
)
TRAINING = TrainingSpec(seq_len=512, global_batch_size=16)
DEVICE = get_accelerator("H100-SXM")
CLUSTER = ClusterLinks(nvlink_domain=4, nvlink_bytes_per_s=450e9, scaleout_bytes_per_s=50e9)
"""Four GPUs per NVLink domain, so that small layouts have axes on both tiers."""

DOMAINS: dict[str, list] = {
    "dp": [1, 2, 4],
    "tp": [1, 2, 4],
    "pp": [1, 2, 3],
    "cp": [1, 2],
    "cp_kind": ["ring", "all-gather", "ulysses", "ulysses-kv-repeat"],
    "cp_a2a": [None],
    "ep": [1, 2],
    "etp": [None, 1],
    "zero_stage": [0, 1, 2, 3],
    "framework": ["megatron", "deepspeed", "fsdp2", "textbook"],
    "optimizer": ["adam", "muon", "lion", "adam-8bit", "soap"],
    "recompute": ["none", "selective", "full", "sqrt"],
    "micro_batch_size": [1, 2],
    "schedule": ["1f1b", "gpipe", "interleaved"],
    "virtual_stages": [1, 2],
    "sequence_parallel": [None, False],
    "rank_order": [("tp", "cp", "ep", "dp", "pp"), ("tp", "pp", "cp", "ep", "dp")],
    "uneven_stages": [True, False],
    "stage_layers": [None],
    "recompute_layers": [None],
    "deallocate_pipeline_outputs": [True, False],
    "pipeline_scatter_gather": [False, True],
}
"""Values each field takes in the draws (``recompute_layers`` and ``stage_layers`` at their
defaults: their legal values depend on pp; the tests of model/ cover them)."""
assert set(DOMAINS) == set(LAYOUT_FIELDS)

ARCHES = st.sampled_from([DENSE, MOE])
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def _legal(layout: Layout, model: ModelSpec) -> bool:
    try:
        validate(layout, model, TRAINING)
    except PlannerError:
        return False
    return True


VALUES = {name: st.sampled_from(choices) for name, choices in DOMAINS.items()}
"""One strategy per field, built once: hypothesis validates a strategy object the first time it
draws from it, so strategies made afresh in every draw cost more than the terms they test."""
LAYOUT_VALUES = {
    DENSE: st.fixed_dictionaries({**VALUES, "ep": st.just(1), "etp": st.just(None)}),
    MOE: st.fixed_dictionaries(VALUES),
}
FIXED = {"pipeline_time": {"zero_stage"}}
"""Fields a term reads outside its scope, which the search's tables set for every row instead:
the pipeline term reads the ZeRO stage only through :func:`model.launch_order.launch_order_kept`
(Megatron-FSDP before Blackwell keeps no async tp overlap), tabulated twice by
:mod:`optimizer.launch_tables` (``fixed`` in :func:`optimizer.columns.tabulate`)."""
OUTSIDE = {
    term.name: st.sampled_from(
        sorted(set(LAYOUT_FIELDS) - term.scope - FIXED.get(term.name, set()))
    )
    for term in TERMS
}


@st.composite
def _layout(draw: st.DrawFn, arch: Architecture) -> Layout:
    try:
        return Layout(**draw(LAYOUT_VALUES[arch]))
    except PlannerError:
        assume(False)
        raise


OPTIONS = {"userbuffers": CostOptions(tp_comm_overlap=TpOverlap.FULL)}
"""The options under which a term is not 0 everywhere (Transformer Engine's userbuffers exist
only under ``tp_comm_overlap = full``)."""


def _figures(term: Term, model: ModelSpec, layout: Layout) -> list:
    c = evaluation_context(model, TRAINING, DEVICE, OPTIONS.get(term.name))
    links = links_for(layout, CLUSTER)
    base = LayoutFields(layout, TRAINING.global_batch_size, 0, links)
    stages = range(layout.pp) if term.per_stage else range(1)
    return [term.fn(c, base.at(i)) for i in stages]


@pytest.mark.parametrize("term", TERMS, ids=[t.name for t in TERMS])
@SETTINGS
@given(data=st.data())
def test_a_field_outside_the_scope_never_moves_the_term(term, data):
    arch = data.draw(ARCHES)
    model = ModelSpec(name="moe" if arch.moe else "dense", arch=arch)
    layout = data.draw(_layout(arch))
    assume(_legal(layout, model))
    name = data.draw(OUTSIDE[term.name])
    value = data.draw(VALUES[name])
    try:
        other = layout.with_(**{name: value})
    except PlannerError:
        assume(False)
    assume(other != layout and _legal(other, model))
    try:
        before, after = _figures(term, model, layout), _figures(term, model, other)
    except PlannerError:  # a placement the topology refuses, a figure a model cannot time
        assume(False)
    assert after == before, (term.name, name, layout, value)
