"""The command-line and interface parts of tests/model/test_properties.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

import math

from hypothesis import given

from tests.model.test_properties import SETTINGS, _evaluate, layouts
from trainplan.interface.render.report_dict import estimate_to_dict


@SETTINGS
@given(layouts())
def test_traffic_zero_on_an_axis_of_degree_one(params):
    out = estimate_to_dict(_evaluate(params))
    lay = out["layout"]
    degree = {
        "dp": lay["dp"] * lay["cp"],
        "tp": lay["tp"],
        "pp": lay["pp"],
        "cp": lay["cp"],
        "ep": lay["ep"],
    }
    rows = {r["axis"]: r for r in out["traffic"]}
    if "edp" in rows:  # a MoE model: the expert data-parallel group, D_e = tp·dp·cp/(etp·ep)
        # (DeepSpeed's dp·cp/ep: its expert groups are carved out of each tp rank's dp group)
        expert = lay["dp"] * lay["cp"] * lay["tp"] // (lay["etp"] * lay["ep"])
        deepspeed = lay["dp"] * lay["cp"] // lay["ep"]
        degree["edp"] = deepspeed if lay["framework"] == "deepspeed" else expert
    assert set(rows) == set(degree)
    for axis, row in rows.items():
        assert row["group_size"] == degree[axis]
        if degree[axis] == 1:
            assert (
                row["bytes_per_step"] == 0 and row["seconds"] == 0 and row["exposed_seconds"] == 0
            ), axis
            assert row["link"] == "none"
        else:
            assert row["bytes_per_step"] > 0 and row["seconds"] > 0, axis
            assert row["link"] in ("nvlink", "scale-out")


@SETTINGS
@given(layouts())
def test_total_is_the_sum_of_its_parts(params):
    est = _evaluate(params)
    for s in est.stages:
        state, acts = s.state, s.activations
        assert (
            state.total_bytes == state.weights_bytes + state.gradients_bytes + state.optimizer_bytes
        )
        # the loss's working set coincides neither with the recompute transient, the CP buffers
        # nor the backward working set (all held while one layer runs backward, after the output
        # layer's tensors were released), nor with a MoE layer's forward working set (which holds
        # the recompute transient where backward replays the forward): the largest of the three
        layer = acts.recompute_transient_bytes + acts.cp_transient_bytes
        layer += acts.backward_working_bytes - acts.output_layer_freed_bytes
        assert acts.total_bytes == (
            acts.layers_bytes
            + acts.embedding_bytes
            + max(layer, acts.loss_transient_bytes, acts.moe_forward_bytes)
            + acts.pipeline_output_bytes
        )
        backward = state.total_bytes + state.gathered_bytes + state.buffers_bytes + acts.total_bytes
        comm = s.communicator_bytes  # NCCL's buffers, held in both phases
        held = s.persistent_buffers_bytes  # the output layer's all-gather buffer, in both phases
        assert s.allocated_bytes == max(backward, state.total_bytes + state.step_bytes) + held
        assert s.total_bytes == s.allocated_bytes + comm
        assert s.steady_bytes == state.total_bytes + state.gathered_bytes + acts.total_bytes
    assert est.total_bytes == max(s.total_bytes for s in est.stages)
    mem = estimate_to_dict(est)["memory"]
    parts = [
        mem[k]
        for k in (
            "weights_bytes",
            "gradients_bytes",
            "optimizer_bytes",
            "activations_bytes",
            "embedding_activations_bytes",
            "recompute_transient_bytes",
            "loss_transient_bytes",
            "backward_working_bytes",
            "moe_forward_transient_bytes",
            "batch_load_transient_bytes",
            "pipeline_output_bytes",
            "cp_transient_bytes",
            "zero3_gathered_bytes",
            "buffers_bytes",
        )
    ]
    parts.append(-mem["output_layer_freed_bytes"])
    step = sum(parts[:3]) + mem["optimizer_step_bytes"]
    held = mem["persistent_buffers_bytes"]
    assert math.isclose(max(sum(parts), step) + held, mem["allocated_bytes"], rel_tol=1e-12)
    total = max(sum(parts), step) + held + mem["communicator_bytes"]
    assert math.isclose(total, mem["total_bytes"], rel_tol=1e-12)
    assert mem["peak_phase"] == ("optimizer-step" if step > sum(parts) else "forward-backward")
    assert math.isclose(sum(parts[:3]), mem["model_state_bytes"], rel_tol=1e-12)
    assert mem["fits"] == (mem["total_bytes"] <= mem["capacity_bytes"])
    assert math.isclose(
        mem["overflow_bytes"],
        max(0, mem["total_bytes"] - mem["capacity_bytes"]),
        rel_tol=1e-12,
        abs_tol=1e-3,
    )


@SETTINGS
@given(layouts())
def test_evaluate_is_deterministic(params):
    a, b = _evaluate(params), _evaluate(params)
    assert estimate_to_dict(a) == estimate_to_dict(b)
    assert a.total_bytes == b.total_bytes and a.step_s == b.step_s and a.zero_table == b.zero_table
