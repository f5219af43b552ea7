"""Megatron-FSDP before Blackwell runs without ``CUDA_DEVICE_MAX_CONNECTIONS=1``
(model/launch_order.py): no async tp overlap and no cp ring overlap credited, the launch line
and the time model reading one rule, and the search's answer it moves.

Megatron-LM d98e8a64dd: ``megatron/core/tensor_parallel/layers.py``
``LinearWithGradAccumulationAndAsyncCommunication.backward`` "Here we rely on
CUDA_DEVICE_MAX_CONNECTIONS=1 to ensure that the gather is scheduled before the input gradient
computation" (and the reduce-scatter before the weight gradient's); ``megatron/training/
arguments.py`` ``validate_args``: "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset." and
"CUDA_DEVICE_MAX_CONNECTIONS requirement no longer exists since the Blackwell architecture".
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trainplan.interface.cli import cli
from trainplan.interface.inputs import build_case
from trainplan.interface.launch_parallel import megatron_env
from trainplan.model.launch_order import launch_order_kept, one_connection

LLAMA_70B_128K = {"model": "llama3-70b", "gpu": "H100-SXM", "framework": "megatron",
                  "zero_stage": 3, "num_gpus": 512, "dp": 64, "tp": 8, "micro_batch_size": 1,
                  "global_batch_size": 128, "seq_len": 131072, "recompute": "full"}  # fmt: skip


def _axes(est) -> dict[str, tuple[float, float]]:
    return {t.traffic.axis: (t.seconds, t.exposed_seconds) for t in est.traffic}


def test_the_rule_by_framework_zero_stage_part_and_expert_overlap() -> None:
    """validate_args' three cases: ZeRO-1 (distributed optimizer) before Blackwell exports 1 and
    keeps the order; Megatron-FSDP does not (asserts the opposite); the combined-1F1B expert
    overlap only warns, and the planner's line writes no 1; on Blackwell no variable is needed;
    the other profiles' overlaps are not Megatron-Core's."""
    assert launch_order_kept("H100-SXM", "none", "megatron", 1)
    assert not launch_order_kept("H100-SXM", "none", "megatron", 3)
    assert not launch_order_kept("H800", "overlap_moe_expert_parallel_comm", "megatron", 1)
    assert launch_order_kept("H100-SXM", "moe_shared_expert_overlap", "megatron", 1)
    assert launch_order_kept("GB200", "none", "megatron", 3)
    assert launch_order_kept("B200[flops×2]", "none", "megatron", 3)
    assert launch_order_kept("H100-SXM", "none", "deepspeed", 3)
    assert one_connection(False, False, None) and not one_connection(True, False, None)


def test_launch_line_reads_the_same_rule() -> None:
    """The line's environment is :func:`one_connection`: 1 at tp 8 under the distributed
    optimizer, nothing under Megatron-FSDP, with a note saying the overlap is not credited."""
    tp8 = ("--tensor-model-parallel-size", "8", "--context-parallel-size", "1")
    assert megatron_env(tp8, "H100-SXM", []) == ("CUDA_DEVICE_MAX_CONNECTIONS=1",)
    notes: list[str] = []
    assert megatron_env((*tp8, "--use-megatron-fsdp"), "H100-SXM", notes) == ()
    assert any("credits none" in n for n in notes)
    notes = []
    assert megatron_env((*tp8, "--use-megatron-fsdp"), "GB200", notes) == ()
    assert not any("credits none" in n for n in notes)


def test_megatron_fsdp_tp8_waits_for_every_tp_collective() -> None:
    """Llama 3 70B at 128K on 512 H100s, dp 64 × tp 8, ZeRO-3, full recompute, m = 2, one
    stage. The tp collectives take 11.612 s a step (4,227.86 GB over NVLink). With the order
    kept Megatron-Core's async overlap hides the backward reduce-scatters and the input
    re-gathers under their GEMMs less the SMs NCCL takes (φ tp 0.2593): 9.150 s exposed, a
    step of 75.157 (compute) + 9.150 + 0.280 (exposed dp) + 0.0023 (optimizer) = 84.589 s —
    what ``tp_comm_overlap = async`` still gives when asked. Without it every collective waits:
    exposed = 11.612 s, step = 75.157 + 11.612 + 0.280 + 0.0023 = 87.051 s, the same as
    ``tp_comm_overlap = none``; the 2.462 s between them is the overlap (11.612 − 9.150).
    (The optimizer step was 0.0018 s, steps 84.588 and 87.050, before Megatron-FSDP's own
    passes were charged, model.step_passes: the clip's scaling of every gradient and
    ``copy_main_weights_to_model_weights``' second read of the FP32 master, 38 → 50 B an
    element.)

    The exposed dp was 0.273 s (steps 84.582 and 87.044 s) before NCCL's tuner
    (model/nccl_tuner.py: ``ncclTopoTuneModel``, ``topoGetAlgoInfo``): the dp 64 group holds one
    rank a node, its ring's 63 steps all at the network's tree hop (``ppn == 1``), and each of
    its 552 bf16 parameter all-gathers (138 buckets × 2 gathers a micro-batch × m 2), 125.86 MB
    a rank, runs in LL128: 14 + 63 × 8.5 = 549.5 µs and the bytes at min(0.92 × 48, 2 × 36.7) =
    44.16 GB/s, 3,399.5 µs, against Simple's 8.4 + 63 × 14 = 890.4 µs at 48 GB/s, 3,512.4 µs:
    the dp row 3.6320 → 3.5696 s, 4.7 ms of it exposed. The reduce-scatters (251.7 MB) stay in
    Simple. The exposed dp was 0.2684 s (steps 84.577 and 87.039 s) before each micro-batch's
    last reduce-scatter bucket, run after the backward's computation, waited whole instead of φ
    of it (model.dp_exposure.microbatch_exposed_seconds): 0.2798 s."""
    default = build_case(LLAMA_70B_128K).evaluate()
    asked = build_case({**LLAMA_70B_128K, "tp_comm_overlap": "async"}).evaluate()
    none = build_case({**LLAMA_70B_128K, "tp_comm_overlap": "none"}).evaluate()
    tp, exposed = _axes(default)["tp"]
    assert tp == pytest.approx(11.612, abs=5e-4) and exposed == tp
    assert _axes(asked)["tp"][1] == pytest.approx(9.150, abs=5e-4)
    assert _axes(default)["dp"][1] == pytest.approx(0.2798, abs=5e-5)
    assert default.step_s == pytest.approx(87.051, abs=5e-4) == none.step_s
    assert asked.step_s == pytest.approx(84.589, abs=5e-4)
    t = default.time_terms
    assert t is not None
    hand = t.compute_s + tp + t.exposed_dp_s + t.optimizer_s
    assert default.step_s == pytest.approx(hand, rel=1e-12)
    assert default.step_s - asked.step_s == pytest.approx(tp - _axes(asked)["tp"][1], rel=1e-9)


def test_blackwell_keeps_the_overlap_and_the_ring_waits_before_it() -> None:
    """On GB200 the same layout keeps the async credit (exposed 5.093 of 6.342 s). With cp 2
    (ring) on H100s the ring's K/V sends (0.916 s) hide whole under the attention core at ZeRO-1
    and wait whole under Megatron-FSDP."""
    gb200 = _axes(build_case({**LLAMA_70B_128K, "gpu": "GB200"}).evaluate())["tp"]
    assert gb200[0] == pytest.approx(6.342, abs=5e-4)
    assert gb200[1] == pytest.approx(5.093, abs=5e-4)
    ring = {**LLAMA_70B_128K, "dp": 32, "cp": 2}
    fsdp, zero1 = (_axes(build_case({**ring, "zero_stage": z}).evaluate())["cp"] for z in (3, 1))
    assert fsdp[0] == pytest.approx(0.916, abs=5e-4) and fsdp[1] == fsdp[0]
    assert zero1 == (fsdp[0], 0.0)


def test_search_no_longer_answers_megatron_fsdp_on_the_async_credit() -> None:
    """Before: dp 64 × tp 8 ZeRO-3 at 84.582 s (the async credit); without it that layout is
    87.044 s (87.039 under NCCL's tuner, above) and the best is ZeRO-1, dp 32 × tp 8 × pp 2
    interleaved (v 41) at 86.366 s (its own tp overlap kept: CUDA_DEVICE_MAX_CONNECTIONS=1 on
    its line; 86.360 s before the optimizer step zeroed the distributed optimizer's whole FP32
    gradient buffer, model.terms.optimizer_time.whole_buffer_zeroing_bytes: 4 B × 31/32 of its
    stage's 4,410,974,208 parameters a GPU at 2.97 TB/s, 5.755 ms)."""
    res = CliRunner().invoke(
        cli,
        ["search", "--model", "llama3-70b", "--gpus", "512", "--gpu", "H100-SXM",
         "--seq-len", "131072", "--global-batch", "128", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    lay = d["layout"]
    got = (lay["dp"], lay["tp"], lay["pp"], lay["zero_stage"], lay["schedule"])
    assert got == (32, 8, 2, 1, "interleaved") and lay["virtual_stages"] == 41
    assert d["objective_s"] == pytest.approx(86.366, abs=5e-4)
    assert d["objective_s"] < 87.039
