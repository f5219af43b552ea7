"""Megatron-Core's fused cross entropy (``cross_entropy_fusion_impl``: none | native | te), its
bytes and passes hand-derived from the frameworks' code.

Transformer Engine's ``parallel_cross_entropy`` (transformer_engine/pytorch/cross_entropy.py
``CrossEntropyFunction``; kernels in transformer_engine/common/triton/cross_entropy.py at v2.10,
the NeMo 25.11 container's era): ``cross_entropy_forward`` allocates ``loss_1d`` (4 B per row)
and ``m_d_X_y`` (3 fp32 per row, all-gathered over tp), runs ``online_softmax_kernel`` (reads
the BF16 logits once) and ``cross_entropy_kernel``, which reads them again and stores the
gradient into the same buffer (``tl.store(X_ptr + X_offsets, X_block.to(grad_dtype))``) and
returns ``_input``; ``forward`` saves it (``ctx.save_for_backward(grad_input.detach())``).
Backward's ``element_mul_kernel`` scales it in place. So per element of the local logits
[S, V/tp]: kept 2 B (the logits buffer, now the gradient), peak 2 B, nothing more (the per-row
statistics aside): versus the unfused loss's fp32 softmax kept (4 B) and 6 B peak.

Megatron-Core's native fusion (megatron/core/fusions/fused_cross_entropy.py) runs the unfused
loss's steps (``VocabParallelCrossEntropy.calculate_logits_max`` takes ``.float()``, the rest in
place, ``ctx.save_for_backward(exp_logits, ...)``; backward ``grad_input.to(torch.bfloat16)``):
kept 4 B, peak 2 + 4 = 6 B, the unfused loss's memory.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from click.testing import CliRunner

from trainplan.interface.cli import cli
from trainplan.interface.fidelity.validation import evaluate_run, validation_runs
from trainplan.interface.inputs import build_case
from trainplan.interface.launch import megatron_flags
from trainplan.model.errors import InputError, PlannerError
from trainplan.model.loss_memory import (
    check_cross_entropy_fusion,
    loss_kept_bytes_per_element,
    loss_peak_bytes_per_element,
    loss_transient_bytes,
)
from trainplan.model.ops import CROSS_ENTROPY_BYTES_PER_LOGIT, CROSS_ENTROPY_PASSES
from trainplan.model.specs import TrainingSpec

S, V = 2 * 8192, 128_256  # Llama 3 at b 2, s 8,192: the GB200 Megatron-FSDP row's micro-batch


def test_transformer_engine_loss_keeps_the_bf16_logits_buffer_only():
    bf16 = 2
    kept = bf16  # the logits buffer, overwritten by the gradient and saved for backward
    peak = bf16  # no fp32 copy, no second buffer: grad_input is _input
    assert loss_kept_bytes_per_element("megatron", "te") == kept
    assert loss_peak_bytes_per_element("megatron", 8, "te") == peak
    assert loss_transient_bytes("megatron", S, V, 1, "te") == 0
    # the unfused loss: fp32 softmax kept, BF16 logits + fp32 copy at the peak
    assert (
        loss_kept_bytes_per_element("megatron"),
        loss_peak_bytes_per_element("megatron", 1),
    ) == (
        4,
        2 + 4,
    )
    assert loss_transient_bytes("megatron", S, V, 1) == 2 * S * V


def test_native_fusion_holds_what_the_unfused_loss_holds():
    assert loss_kept_bytes_per_element("megatron", "native") == 4  # saved exp_logits, fp32
    assert loss_peak_bytes_per_element("megatron", 1, "native") == 2 + 4  # .float() beside BF16
    assert loss_transient_bytes("megatron", S, V, 8, "native") == 2 * S * V / 8


def test_passes_per_logit():
    """HBM bytes per logit (model.ops.CROSS_ENTROPY_PASSES). te: online_softmax_kernel reads the
    BF16 logits (2), cross_entropy_kernel reads them and writes the gradient in place (2 + 2);
    backward's element_mul_kernel reads and writes it (2 + 2). native, one compiled kernel per
    jit_fuser function: cast + max (2 + 4), subtract/exp/sum in place (4 + 4), normalise in
    place (4 + 4); backward reads the softmax, writes it back and the BF16 gradient (4 + 4 + 2)."""
    assert CROSS_ENTROPY_PASSES["te"] == (2 + 2 + 2, 2 + 2)
    assert CROSS_ENTROPY_PASSES["native"] == ((2 + 4) + (4 + 4) + (4 + 4), 4 + 4 + 2)
    assert sum(CROSS_ENTROPY_PASSES["none"]) == CROSS_ENTROPY_BYTES_PER_LOGIT


def _row(key: str):
    return next(r for r in validation_runs() if r.key.endswith(key))


def test_gb200_megatron_fsdp_row_counts_the_fused_loss():
    """megatron-bridge-25.11/gb200-llama3-70b-fsdp runs Transformer Engine's loss (Megatron
    Bridge 97ad8cc6f scripts/performance/utils/overrides.py _set_common_perf_overrides:
    cross_entropy_fusion_impl = "te"; GPTModelProvider.cross_entropy_loss_fusion = True). On
    its last (only) stage the loss keeps 2 B per logit instead of 4 and holds nothing beside it
    (6 − 4 = 2 B before): 2·S·V + 2·S·V = 8,405,385,216 B less than the unfused loss."""
    run = _row("gb200-llama3-70b-fsdp")
    assert run.params["cross_entropy_fusion_impl"] == "te"
    fused = build_case(dict(run.params)).evaluate().stages[0]
    unfused = build_case({**run.params, "cross_entropy_fusion_impl": "none"}).evaluate().stages[0]
    assert unfused.activations.embedding_bytes - fused.activations.embedding_bytes == 2 * S * V
    assert (unfused.activations.loss_transient_bytes, fused.activations.loss_transient_bytes) == (
        2 * S * V,
        0,
    )
    assert unfused.total_bytes - fused.total_bytes == 4 * S * V == 8_405_385_216
    memory = evaluate_run(run).value("memory")
    # GB200's usable bytes: (189,471 − 742) MiB as the driver reports them, less the CUDA
    # context, the cuBLAS workspaces and the 1 GiB allowance: 196.09 GB, 11.63 GB above the peak
    # (with the world group's NCCL ring; under MXFP8 the output projection keeps no FP8 copy;
    # each of the 80 layers keeps Transformer Engine's FP32 softmax statistics, 4 B × 64 heads ×
    # 8,192 = 2,097,152 B: 0.17 GB). 11.01 GB with NCCL's channels by placement and their
    # set-up (model/terms/comm_memory.py group_channels): the dp 64 ring, the gradient-statistics
    # ring and the world ring all lie in the NVL72 domain, NVLink 5, 32 channels (18 × 40.1 GB/s:
    # 8 search channels at 90 → dup 16 → Postset 32), each 32 × 12 MiB + (32 × 3 + 2) × 2 MiB =
    # 384 + 196 = 580 MiB: 1,740 MiB where three 384 MiB rings held 1,152, 616,562,688 B more.
    # No NVLink SHARP: the row runs with it off as Megatron Bridge's launcher does
    # (``nccl_nvls = false``: scripts/performance/utils/executors.py PERF_ENV_VARS at 97ad8cc6f,
    # "NCCL_NVLS_ENABLE": "0"). With it on (model/terms/nvls_memory.py) the headroom would be
    # 9.40 GB: the dp ring's 64 ranks in the domain get min(NCCL_MAX_NVLS_ARITY 32, 64) = 32
    # heads, 24 channels × 2 × (128 KiB × 8) × 32 = 1,536 MiB of buffers and 24 × 2 × 64 B × 32
    # = 96 KiB → 2 MiB of credits; the gradient-statistics and world rings run one-float
    # all-reduces (as rings, no buffers set up): 2 MiB of credits each: 1,542 MiB. Transformer
    # Engine's placeholder weight gradients (model/terms/dummy_wgrads.py; Megatron-FSDP marks
    # grad_added_to_main_grad too) at tp 1: QKV [10,240, 8,192], proj [8,192, 8,192], FC1
    # [57,344, 8,192], FC2 [8,192, 28,672] and the output layer [128,256, 8,192] in BF16,
    # 1,711,276,032 + 2,101,346,304 = 3,812,622,336 B: 7.20 GB of headroom (5.58 with NVLS)
    assert memory["capacity_bytes"] == 188_729 * 2**20 - 1_807_483_904 == 196_089_216_000
    headroom = memory["capacity_bytes"] - memory["total_bytes"]
    assert run.params["nccl_nvls"] is False
    assert 11_629_540_352 - (3 * 580 - 3 * 384) * 2**20 == 11_012_977_664
    dummies = 2 * 8192 * (10240 + 8192 + 57344 + 28672) + 2 * 128256 * 8192
    assert dummies == 1_711_276_032 + 2_101_346_304 == 3_812_622_336
    assert headroom == 11_012_977_664 - dummies == 7_200_355_328
    assert (memory["fits"], round(headroom / 1e9, 2)) == (True, 7.20)
    on = evaluate_run(replace(run, params={**run.params, "nccl_nvls": True})).value("memory")
    assert on["capacity_bytes"] - on["total_bytes"] == headroom - (1536 + 3 * 2) * 2**20
    assert headroom - (1536 + 3 * 2) * 2**20 == 5_583_451_136


def test_launch_line_and_its_note():
    from trainplan.model.layout import Layout
    from trainplan.model.specs import Architecture

    arch = Architecture(num_layers=2, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32,
                        vocab_size=16)  # fmt: skip
    base = TrainingSpec(seq_len=8, global_batch_size=8)
    for impl, tail in (
        ("native", ("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "native")),
        ("te", ("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te")),
    ):
        t = TrainingSpec(seq_len=8, global_batch_size=8, cross_entropy_fusion_impl=impl)
        flags = megatron_flags(arch, Layout(), 8, t)
        assert flags.flags[-3:] == tail
    te = megatron_flags(
        arch,
        Layout(),
        8,
        TrainingSpec(seq_len=8, global_batch_size=8, cross_entropy_fusion_impl="te"),
    )
    assert any("168cb15d70" in note for note in te.notes)
    assert "--cross-entropy-loss-fusion" not in megatron_flags(arch, Layout(), 8, base).flags


def test_set_key_web_key_and_refusals():
    """``--set cross_entropy_fusion_impl=te`` (and the web API's parameter of the same name)
    runs; an unknown value and a profile without Megatron-Core's loss are one line, exit 2."""
    args = ["evaluate", "--model", "llama3-8b", "--dp", "8", "--json"]
    done = CliRunner().invoke(cli, [*args, "--set", "cross_entropy_fusion_impl=te"])
    assert done.exit_code == 0, done.output
    assert '"cross_entropy_fusion_impl": "te"' in done.stdout
    done = CliRunner().invoke(cli, [*args, "--set", "cross_entropy_fusion_impl=fused"])
    assert (done.exit_code, done.stderr) == (
        2,
        "Error: --set cross_entropy_fusion_impl: 'fused' is not one of none, native, te\n",
    )
    done = CliRunner().invoke(
        cli, [*args, "--framework", "fsdp2", "--set", "cross_entropy_fusion_impl=te"]
    )
    assert done.exit_code == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("Error: --set cross_entropy_fusion_impl: te is Megatron-Core's")
    params = {"model": "llama3-8b", "dp": 8, "cross_entropy_fusion_impl": "native"}
    assert build_case(params).training.cross_entropy_fusion_impl == "native"
    with pytest.raises(InputError, match="not one of none, native, te"):
        TrainingSpec(seq_len=8, global_batch_size=8, cross_entropy_fusion_impl="liger")
    with pytest.raises(PlannerError, match="runs its own loss"):
        check_cross_entropy_fusion("deepspeed", "native")
