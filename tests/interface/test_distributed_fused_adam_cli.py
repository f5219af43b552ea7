"""The command-line and interface parts of tests/model/test_distributed_fused_adam.py (moved here so the core tests build
their inputs with the model-level constructors)."""

from __future__ import annotations

from dataclasses import replace

from tests.test_cli_planner import run_main
from trainplan.interface.fidelity.validation import (
    evaluate_run,
    validation_models,
    validation_runs,
)
from trainplan.interface.inputs import build_case


def test_nemo_gpt3_20b_fits_as_its_configs_ran_it():
    """NeMo 24.07's GPT-3 20B on 64 H100 (dp 32 × tp 2, b 2, FP8, no recomputation), with
    distributed_fused_adam and grad_sync_dtype bf16 as the launcher's 20b_fp8_8node.sh runs it:
    BF16 weights 2P, BF16 gradients 2P and the FP32 embeddings' 2 B more (V 50,257 padded to
    50,432 = 197 × 128 · tp: 50,432 · 6,144 ÷ 2 + 2,048 · 6,144 = 167,510,016 elements), the
    optimizer's 10P/32, the FP8 weight and transpose 2 B per linear weight — 102.09 GB counted
    before, 82.38 GB now with the world group's ring and one layer's backward working set beside
    the output layer's released tensors (NCCL's communicators included: 81.52 GB, and one more 384 MiB ring
    for the gradient-statistics group, :func:`model.terms.comm_memory.grad_stats_rings` — a NeMo
    run also all-reduces over the model-parallel group, here the 2 tp ranks, e.g. the parameter
    count in ``megatron_base_model.py``); 82.82 GB with Transformer Engine's userbuffers, which
    the launcher's ``ub_tp_comm_overlap`` turns on (``tp_comm_overlap = full``,
    :func:`model.terms.userbuffers.userbuffers_term`: twelve [2·2,048, 6,144] buffers, the eight
    all-gather ones in FP8, (8·1 + 4·2)·25,165,824 + 12·3,354,880 = 442,911,744 B); 82.92 GB with
    the three cuBLAS workspaces Transformer Engine caches for the userbuffers GEMMs
    (``get_cublas_workspace``, 3 × 33,555,456 = 100,666,368 B); 82.94 GB with the fused
    attention's FP32 softmax statistics (``softmax_lse``, 4 B × 48/2 heads × 2,048 tokens a
    sequence, in each layer's saved tensors); 82.75 GB (82,752,497,152 B) with NCCL's channel
    counts by placement and their set-up (:func:`model.terms.comm_memory.collective_channels`):
    the tp ring in a node 24 channels (288 MiB) + 32 set up (196 MiB), the dp, gradient-statistics
    and world rings across 8 nodes 16 each (192 + 100 MiB): 1,360 MiB where four 32-channel rings
    held 1,536 MiB, 184,549,376 B less (82,937,046,528 → 82,752,497,152); 82.45 GB
    (82,446,312,960 B) with the rows' ``grad_stats_group = "world"``: NeMo's
    ``MegatronDistributedFusedAdam.grad_norm`` all-reduces over the default group, the world
    ring's communicator, so no gradient-statistics ring of its own: 1,360 − 292 = 1,068 MiB,
    306,184,192 B less; 82.95 GB (82,953,823,744 B) with the model-parallel group Megatron's
    ``train_step`` and NeMo's set-up all-reduce over (tp 2 × pp 1, in a node: 24 channels, 288 +
    196 = 484 MiB; :func:`model.terms.comm_groups.megatron_rings`): tp 484 + dp 292 + mp 484 +
    world 292 = 1,552 MiB, 507,510,784 B more. NVLink SHARP holds nothing: the launcher ran with
    it off (``NCCL_NVLS_ENABLE: 0`` in NeMo-Framework-Launcher's launcher_scripts/conf/config.yaml
    env_vars at tag 24.07, 8325688d; PR #127 "for memory saving"), the rows' ``nccl_nvls =
    false``. With it on (:mod:`model.terms.nvls_memory`, lazy buffers) the tp ring of 2 in a node
    would hold 2 MiB of credits and no buffers (NCCL's tuner runs a 2-GPU all-reduce of an H100
    node as a ring, model/nccl_search.py; 64 MiB more were counted before), the model-parallel
    ring (small all-reduces only), the dp and world rings 2 MiB of credits each: 8 MiB,
    82,962,212,352 B (82.96 GB). 82.95 GB is under the 83.21 GB usable by 0.26 GB."""
    run = next(r for r in validation_runs() if r.key == "nemo-24.07-h100/gpt3-20b")
    params = {**run.params, "model_spec": validation_models()["gpt3-20b-nemo"]}
    del params["model"]
    est = build_case(params).evaluate()
    stage = est.stages[0]
    p, st = stage.dense_params, stage.state
    assert st.weights_bytes == 2 * p
    assert st.gradients_bytes == 2 * p + 2 * 167_510_016
    assert st.optimizer_bytes == 10 * p / 32
    memory = evaluate_run(run).value("memory")
    assert memory["userbuffer_bytes"] == 442_911_744
    assert run.params["nccl_nvls"] is False
    assert est.fits and memory["fits"] and round(memory["total_bytes"] / 1e9, 2) == 82.95
    assert 82_752_497_152 - 292 * 2**20 + 484 * 2**20 == 82_953_823_744
    assert memory["total_bytes"] == 82_953_823_744
    assert memory["communicator_bytes"] - 442_911_744 == (484 + 292 + 484 + 292) * 2**20
    on = replace(run, params={**run.params, "nccl_nvls": True})
    nvls = 2 + 2 + 2 + 2
    assert evaluate_run(on).value("memory")["total_bytes"] == 82_953_823_744 + nvls * 2**20
    assert 82_953_823_744 + nvls * 2**20 == 82_962_212_352


def test_grad_stats_group_world_drops_the_own_ring_and_refuses_other_values(monkeypatch, capsys):
    """``grad_stats_group`` (:attr:`model.timing.CostOptions.grad_stats_group`): the NeMo row
    with today's Megatron-Core group (``intra_dist_opt_instance``, a world-sized communicator of
    its own: 16 channels across 8 nodes, 192 + 100 MiB; the rows run with NVLink SHARP off, so no
    2 MiB of its credits) holds 292 MiB more than with ``world`` (the default group's ring,
    counted once). Any other value: exit 2, one line."""
    run = next(r for r in validation_runs() if r.key == "nemo-24.07-h100/gpt3-20b")
    today = replace(run, params={**run.params, "grad_stats_group": "intra_dist_opt_instance"})
    world, own = (evaluate_run(r).value("memory")["total_bytes"] for r in (run, today))
    assert own - world == 292 * 2**20 == 306_184_192
    code, out, err = run_main(
        monkeypatch, capsys, "--model", "llama3-8b", "--set", "grad_stats_group=default"
    )
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert "grad_stats_group: 'default' is not one of intra_dist_opt_instance, world" in err, err


def test_cli_refuses_it_in_one_line(monkeypatch, capsys):
    """As a user types it: exit code 2, one line naming the key, the value and the rule."""
    code, out, err = run_main(
        monkeypatch, capsys, "--model", "llama3-8b", "--framework", "fsdp2",
        "--set", "distributed_optimizer=distributed_fused_adam",
    )  # fmt: skip
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and "distributed_optimizer: " in err, err
    code, out, err = run_main(
        monkeypatch, capsys, "--model", "llama3-8b", "--set", "distributed_optimizer=apex"
    )
    assert code == 2 and "distributed_optimizer" in err and "distributed_fused_adam" in err, err
