"""Recipe keys read only by some frameworks, ZeRO stages or pipelines: refused where nothing reads
them (model.key_rules), per framework so a search keeps the frameworks that can take them."""

from __future__ import annotations

import pytest

from tests.cli_runs import refusal, run_many, trainplan
from trainplan.model.errors import LayoutError
from trainplan.model.key_rules import (
    check_memory_efficient_norm,
    check_option_keys,
    check_p2p_options,
    check_stage_keys,
    options_given,
)
from trainplan.model.specs import TrainingSpec
from trainplan.model.timing import CostOptions


def _t(**kw) -> TrainingSpec:
    return TrainingSpec(seq_len=8, global_batch_size=8, **kw)


def test_stage_keys_are_read_at_their_stage_only():
    check_stage_keys("megatron", 3, _t(fsdp_double_buffer=True))
    for fw, z in (("megatron", 1), ("fsdp2", 3), ("deepspeed", 3)):
        with pytest.raises(
            LayoutError, match=f"^fsdp_double_buffer: true .* not {fw} zero_stage {z}"
        ):
            check_stage_keys(fw, z, _t(fsdp_double_buffer=True))
    check_stage_keys("deepspeed", 1, _t(deepspeed_overlap_comm=True))
    check_stage_keys("deepspeed", 2, _t(deepspeed_overlap_comm=True))
    for fw, z in (("deepspeed", 3), ("megatron", 1)):
        with pytest.raises(LayoutError, match="^deepspeed_overlap_comm: true"):
            check_stage_keys(fw, z, _t(deepspeed_overlap_comm=True))
    # DeepSpeed's seq_parallel_communication_data_type: bf16 refused outside deepspeed
    check_stage_keys("deepspeed", 3, _t(seq_parallel_communication_data_type="bf16"))
    check_stage_keys("megatron", 1, _t(seq_parallel_communication_data_type="fp32"))
    for fw in ("megatron", "fsdp2"):
        with pytest.raises(
            LayoutError, match=f"^seq_parallel_communication_data_type: bf16 .* not {fw}'s"
        ):
            check_stage_keys(fw, 1, _t(seq_parallel_communication_data_type="bf16"))


def test_p2p_options():
    assert options_given(CostOptions()) == ()
    given = options_given(
        CostOptions(p2p_overlap=False, p2p_warmup_flush=True, p2p_forward_send_wait=False)
    )
    assert given == (
        ("p2p_overlap", False),
        ("p2p_warmup_flush", True),
        ("p2p_forward_send_wait", False),
    )
    off = (("p2p_overlap", False),)
    # Megatron-LM validate_args: interleaving without overlap_p2p_comm asserts pp > 2
    check_p2p_options(off, "megatron", 3, 2)
    check_p2p_options(off, "megatron", 2, 1)  # no virtual stages: batched blocking sends, legal
    with pytest.raises(
        LayoutError, match=r"^p2p_overlap: false with virtual stages \(v 2\) needs pp > 2, not pp 2"
    ):
        check_p2p_options(off, "megatron", 2, 2)
    for key, value in given:
        with pytest.raises(
            LayoutError, match=f"^{key}: {str(value).lower()} is read by Megatron-Core"
        ):
            check_p2p_options(((key, value),), "deepspeed", 4, 1)


def test_option_keys_are_refused_where_nothing_reads_them():
    """grad_reduce_overlap false:
    model.comm.grad_reduce_overlaps keeps DeepSpeed's once-per-step traffic exposed whatever it
    says (pipeline engine: after the flush; ZeRO-1/2: the blocking all-gather in step()), its
    ZeRO-3 has none, and the textbook profile's single time model never reads it."""
    given = options_given(CostOptions(grad_reduce_overlap=False))
    assert given == (("grad_reduce_overlap", False),)
    check_option_keys((("grad_reduce_overlap", False),), "megatron")
    check_option_keys((("grad_reduce_overlap", False),), "fsdp2")
    for fw in ("deepspeed", "textbook"):
        with pytest.raises(LayoutError, match=f"^grad_reduce_overlap: false .* not {fw}, whose"):
            check_option_keys((("grad_reduce_overlap", False),), fw)


def test_memory_efficient_norm_needs_a_norm_the_framework_runs_so():
    """Megatron-Core FusedLayerNorm (Apex memory_efficient) asserts LayerNorm; WrappedTorchNorm
    asserts the flag off; TENorm never reads it. Megatron-DeepSpeed's RMSNorm is eager."""
    from dataclasses import replace

    from trainplan.model.specs import Architecture, Norm

    ln = Architecture(num_layers=1, hidden_size=64, num_attention_heads=8, ffn_hidden_size=128,
                      vocab_size=16, norm=Norm.LAYERNORM)  # fmt: skip
    rms = replace(ln, norm=Norm.RMSNORM)
    for fw in ("megatron", "deepspeed", "fsdp2", "textbook"):
        check_memory_efficient_norm(fw, True, ln)
        check_memory_efficient_norm(fw, False, rms)
    for fw in ("fsdp2", "textbook"):
        check_memory_efficient_norm(fw, True, rms)
    for fw in ("megatron", "deepspeed"):
        with pytest.raises(LayoutError, match=f"^memory_efficient_norm: true .* which {fw} runs"):
            check_memory_efficient_norm(fw, True, rms)
    check_memory_efficient_norm("megatron", True, None)  # a size only: no norm to check


def test_cli_refusals_and_search():
    base = ["--model", "megatron-1.7b", "--gpus", "8"]
    done = run_many(
        {
            "g7": ["evaluate", "--model", "llama3-8b", "--gpus", "2", "--pp", "2", "--schedule", "interleaved",
                   "--virtual-stages", "2", "--set", "p2p_overlap=false"],
            "g7_pp4": ["evaluate", "--model", "llama3-8b", "--gpus", "4", "--pp", "4", "--schedule",
                       "interleaved", "--virtual-stages", "2", "--set", "p2p_overlap=false"],
            "double": ["evaluate", *base, "--dp", "8", "--zero", "1", "--set", "fsdp_double_buffer=true"],
            "ds": ["evaluate", *base, "--dp", "8", "--set", "deepspeed_overlap_comm=true"],
            "flush": ["evaluate", *base, "--dp", "8", "--framework", "fsdp2", "--set", "p2p_warmup_flush=true"],
            "search": ["search", *base, "--framework", "megatron", "--framework", "deepspeed",
                       "--set", "deepspeed_overlap_comm=true", "--top", "1"],
            "search_none": ["search", *base, "--framework", "megatron", "--set", "deepspeed_overlap_comm=true"],
            "mi300x": ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--gpu", "MI300X"],
            "h20": ["evaluate", "--model", "llama3-8b", "--gpus", "16", "--gpu", "H20"],
            "mi300x_16": ["evaluate", "--model", "llama3-8b", "--gpus", "16", "--gpu", "MI300X"],
            "mi300x_set": ["evaluate", "--model", "llama3-8b", "--gpus", "16", "--gpu", "MI300X",
                           "--set", "scaleout_gbps=50"],
        }
    )  # fmt: skip
    assert refusal(done["g7"]).startswith(
        "--set p2p_overlap: false with virtual stages (v 2) needs pp > 2"
    )
    assert done["g7_pp4"].returncode == 0, done["g7_pp4"].stderr
    assert refusal(done["double"]).startswith(
        "--set fsdp_double_buffer: true is read by Megatron-FSDP only"
    )
    assert refusal(done["ds"]).startswith(
        "--set deepspeed_overlap_comm: true is read by DeepSpeed ZeRO-1/2 only"
    )
    assert refusal(done["flush"]).startswith(
        "--set p2p_warmup_flush: true is read by Megatron-Core"
    )
    assert done["search"].returncode == 0, done["search"].stderr
    assert "deepspeed ZeRO-" in done["search"].stdout  # megatron's rows refused, deepspeed's kept
    assert refusal(done["search_none"]).startswith("--set deepspeed_overlap_comm: true")
    # the table has no scale-out figure: one 8-GPU domain needs none; two domains are refused
    # with the key to set
    assert done["mi300x"].returncode == 0, done["mi300x"].stderr
    assert "verdict: fits" in done["mi300x"].stdout
    for key, gpu in (("mi300x_16", "MI300X"), ("h20", "H20")):
        assert refusal(done[key]) == (
            f"--gpu {gpu}: the accelerator table has no scaleout_gbps; give --set "
            "scaleout_gbps=50 (GB/s per GPU per direction, one 400 Gb/s NIC per GPU)"
        )
    assert done["mi300x_set"].returncode == 0, done["mi300x_set"].stderr


def test_megatron_fsdp_mxfp8_primary_weights_hold_the_transpose_shard():
    """Megatron-LM ``_init_each_parameter_group_buffers``: an MXFP8 FP8 parameter group gets a
    uint8 ``transpose_weight_buffer`` sharded like its ``model_weight_buffer``: +1 B per linear
    element ÷ dp. Llama 3 70B's linear elements per layer: q 8192², k+v 2·8192·1024, o 8192²,
    MLP 3·8192·28672 = 855,638,016; 80 layers; dp 64."""
    from fractions import Fraction

    from trainplan.model.layout import Layout
    from trainplan.optimizer.case import Case

    def weights(recipe: str) -> Fraction:
        lay = Layout(dp=64, zero_stage=3, recompute="full")
        case = Case.of(
            "llama3-70b", "B200", lay, precision="fp8", fp8_recipe=recipe, fp8_param_gather=True
        )
        return Fraction(case.evaluate().stages[0].state.weights_bytes)

    linear = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
    assert weights("mxfp8") - weights("tensorwise") == Fraction(linear, 64)


def test_web_api_refuses_a_key_nothing_reads_with_422() -> None:
    import warnings

    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    warnings.filterwarnings("ignore", message=".*httpx2.*")
    from fastapi.testclient import TestClient

    from trainplan.interface.web.app import create_app

    client = TestClient(create_app(("testserver",)))
    query = {"model": "llama3-8b", "gpus": 8, "dp": 8, "zero": 1, "set": "fsdp_double_buffer=true"}
    got = client.get("/api/evaluate", params=query)
    assert got.status_code == 422, got.text
    assert got.json()["error"].startswith("fsdp_double_buffer: true is read by Megatron-FSDP only")


def test_cli_refuses_what_the_framework_does_not_run():
    """One line, exit 2, for a key or a flavour the framework has no code for; a search keeps
    what it does run (DeepSpeed's context parallelism: Ulysses only)."""
    m8 = ["--model", "llama3-8b", "--gpus", "8"]
    done = run_many(
        {
            "ds_ring": ["evaluate", *m8, "--dp", "2", "--cp", "4", "--seq-len", "8192",
                        "--framework", "deepspeed", "--cp-kind", "ring"],
            "ds_search": ["search", *m8, "--seq-len", "32768", "--global-batch", "8", "--cp", "4",
                          "--cp", "8", "--framework", "deepspeed", "--top", "1"],
            "norm": ["evaluate", *m8, "--dp", "8", "--set", "memory_efficient_norm=true"],
            "regather": ["evaluate", *m8, "--dp", "8", "--set", "zero3_regather=true"],
            "zb": ["evaluate", *m8, "--dp", "2", "--pp", "4", "--framework", "fsdp2",
                   "--schedule", "zb-h1"],
            "p2p_1f1b": ["evaluate", *m8, "--dp", "2", "--pp", "4", "--set",
                         "p2p_forward_send_wait=false"],
            "p2p_v2": ["evaluate", *m8, "--dp", "2", "--pp", "4", "--schedule", "interleaved",
                       "--virtual-stages", "2", "--set", "p2p_forward_send_wait=false"],
            "gro_z3": ["evaluate", *m8, "--dp", "8", "--framework", "fsdp2", "--zero", "3",
                       "--set", "grad_reduce_overlap=false"],
            "gro_z2": ["evaluate", *m8, "--dp", "8", "--framework", "fsdp2", "--zero", "2",
                       "--set", "grad_reduce_overlap=false"],
            "gro_ds": ["evaluate", *m8, "--dp", "8", "--framework", "deepspeed",
                       "--set", "grad_reduce_overlap=false"],
            "p2p_search": ["search", *m8, "--pp", "1", "--pp", "2", "--set", "p2p_overlap=false",
                           "--top", "1"],
        }
    )  # fmt: skip
    assert "cp-kind: ring does not run under framework deepspeed" in refusal(done["ds_ring"])
    assert done["ds_search"].returncode == 0, done["ds_search"].stderr
    assert "ulysses" in done["ds_search"].stdout
    assert refusal(done["norm"]).startswith("--set memory_efficient_norm: true needs Apex's")
    # the textbook ZeRO-3 gathers per micro-batch as ZeRO-3 runs: the old switch is no key
    assert refusal(done["regather"]).startswith("--set: 'zero3_regather' is not a scenario key")
    assert refusal(done["zb"]).startswith("--schedule: zb-h1 does not run under framework fsdp2")
    # a layout that does not read the key: refused for the layout evaluated
    # (model.key_rules.check_layout_reads_options); a search keeps such layouts
    assert refusal(done["p2p_1f1b"]).startswith(
        "--set p2p_forward_send_wait: false is read by Megatron-Core's interleaved schedule only"
    )
    assert done["p2p_v2"].returncode == 0, done["p2p_v2"].stderr
    assert refusal(done["gro_z3"]).startswith("--set grad_reduce_overlap: false changes nothing")
    assert done["gro_z2"].returncode == 0, done["gro_z2"].stderr
    assert refusal(done["gro_ds"]).startswith(
        "--set grad_reduce_overlap: false is read by megatron"
    )
    assert done["p2p_search"].returncode == 0, done["p2p_search"].stderr


def test_a_roofline_switch_turned_off_is_refused_under_the_single_model():
    """``grad_reduce_overlap=false`` changes nothing under ``time_model=single`` (one kernel
    efficiency and per-axis overlaps): refused like any other roofline key, not read as absent."""
    args = ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--dp", "8"]
    args += ["--set", "time_model=single", "--set", "grad_reduce_overlap=false"]
    err = refusal(trainplan(*args))
    assert err.startswith(
        "--set grad_reduce_overlap: 'false' does not apply: the single time model"
    )
