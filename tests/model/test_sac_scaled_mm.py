"""``sac_saves_scaled_mm``: torchtitan's op-level selective checkpointing under FP8 with the save
list before torchtitan 114151ad4 (9dec370 ``torchtitan/parallelisms/parallelize_llama.py``
``_save_list``: ``aten.mm`` and the SDPA kernels, not ``aten._scaled_mm``), against today's list
(``torchtitan/distributed/activation_checkpoint.py`` ``_get_default_save_ops``: PyTorch's
``compute_intensive_ops``, which holds ``aten._scaled_mm``)."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from tests.cli_runs import refusal, run_many
from trainplan.model.errors import LayoutError
from trainplan.model.key_rules import check_sac_scaled_mm
from trainplan.model.layout import Recompute
from trainplan.model.op_checkpoint import op_selective_bytes, op_selective_rows
from trainplan.model.ops import LayerShape, OpKind
from trainplan.model.recompute_ops import (
    OP_LEVEL_FP8,
    OP_LEVEL_FP8_UNSAVED,
    recompute_plan,
    recomputed_forward_flops,
    recomputed_ops,
)
from trainplan.model.specs import Architecture, TrainingSpec

LLAMA3_8B = Architecture(num_layers=32, hidden_size=4096, num_attention_heads=32,
                         num_kv_heads=8, ffn_hidden_size=14336, vocab_size=128256,
                         mlp="swiglu")  # fmt: skip


def test_bytes_per_layer_saved_and_not():
    """Llama 3 8B, micro-batch 2 × 8,192 tokens (S = 16,384), tp 1, bf16 outputs (β = 2).

    Today's list keeps the block input, the seven FP8 GEMM outputs (wq h, wk g·d = 1,024, wv
    1,024, wo h, w1 f, w3 f, w2 h), the attention output (h) and its fp32 log-sum-exp
    (4·a·S): β·S·(4·4096 + 2·1024 + 2·14336 + 4096) + 4·32·S. The older list keeps no GEMM
    output: β·S·(4096 + 4096) + 4·32·S. The difference, β·S·(3·4096 + 2·1024 + 2·14336) =
    2·16384·43008 = 1,409,286,144 B per layer, is what backward recomputes."""
    S = Fraction(16384)
    today = op_selective_bytes(LLAMA3_8B, S, 1, 2, fp8_gemms=True)
    older = op_selective_bytes(LLAMA3_8B, S, 1, 2, fp8_gemms=True, saves_scaled_mm=False)
    assert today == 2 * S * (4 * 4096 + 2 * 1024 + 2 * 14336 + 4096) + 4 * 32 * S
    assert older == 2 * S * (4096 + 4096) + 4 * 32 * S
    assert today - older == 1_409_286_144
    rows = dict(op_selective_rows(LLAMA3_8B, S, 1, 2, True, saves_scaled_mm=False) or ())
    assert sorted(rows) == ["attention log-sum-exp (fp32)", "attention output", "block input"]
    # BF16 GEMMs (aten.mm, every other one kept) do not read it
    assert op_selective_bytes(LLAMA3_8B, S, 1, 2, saves_scaled_mm=False) == op_selective_bytes(
        LLAMA3_8B, S, 1, 2
    )


def test_recomputed_gemms_and_flops():
    """The older list re-runs every GEMM up to w2's input: the QKV projection 2·S·h·(a+2g)·d,
    the output projection 2·S·h·h and the gate+up projection 2·S·h·2f (the down projection's
    output feeds only the residual add); today's re-runs none."""
    S = 16384
    x = LayerShape(LLAMA3_8B, False, 8192, 2, 1)
    assert recompute_plan(Recompute.SELECTIVE, True, ("core_attn",), True, False) == (
        OP_LEVEL_FP8_UNSAVED,
    )
    gemms = [o.name for o in recomputed_ops(x, (OP_LEVEL_FP8_UNSAVED,)) if o.kind is OpKind.GEMM]
    assert gemms == ["QKV projection", "output projection", "MLP gate+up projection"]
    assert recomputed_forward_flops(x, (OP_LEVEL_FP8,), False) == 0
    h, qkv, f = 4096, (32 + 2 * 8) * 128, 14336
    assert recomputed_forward_flops(x, (OP_LEVEL_FP8_UNSAVED,), False) == pytest.approx(
        2 * S * h * (qkv + h + 2 * f)
    )


def test_refused_where_nothing_reads_it():
    off = TrainingSpec(seq_len=8, global_batch_size=8, precision="fp8", sac_saves_scaled_mm=False)
    check_sac_scaled_mm("fsdp2", off, "selective")
    check_sac_scaled_mm("fsdp2", TrainingSpec(seq_len=8, global_batch_size=8), "none")
    for fw in ("megatron", "deepspeed", "textbook"):
        with pytest.raises(
            LayoutError, match=f"^sac_saves_scaled_mm: false is read by fsdp2 only.* not {fw}$"
        ):
            check_sac_scaled_mm(fw, off)
    bf16 = TrainingSpec(seq_len=8, global_batch_size=8, sac_saves_scaled_mm=False)
    with pytest.raises(LayoutError, match="^sac_saves_scaled_mm: false needs precision fp8"):
        check_sac_scaled_mm("fsdp2", bf16)
    with pytest.raises(
        LayoutError,
        match="^sac_saves_scaled_mm: false is read by recompute selective only.* not recompute full$",
    ):
        check_sac_scaled_mm("fsdp2", off, "full")


def test_cli_reads_and_refuses_it():
    base = [
        "evaluate",
        "--model",
        "llama3-8b",
        "--gpus",
        "8",
        "--dp",
        "8",
        "--framework",
        "fsdp2",
        "--micro-batch",
        "1",
        "--seq-len",
        "8192",
        "--global-batch",
        "16",
    ]
    fp8 = [*base, "--set", "precision=fp8", "--set", "fp8_recipe=tensorwise"]
    done = run_many(
        {
            "today": [*fp8, "--recompute", "selective", "--json"],
            "older": [*fp8, "--recompute", "selective", "--set", "sac_saves_scaled_mm=false", "--json"],
            "full": [*fp8, "--recompute", "full", "--set", "sac_saves_scaled_mm=false"],
            "bf16": [*base, "--recompute", "selective", "--set", "sac_saves_scaled_mm=false"],
            "search": ["search", "--model", "llama3-8b", "--gpus", "8", "--framework", "fsdp2",
                       "--framework", "megatron", "--set", "precision=fp8",
                       "--set", "sac_saves_scaled_mm=false", "--top", "1"],
            "search_megatron": ["search", "--model", "llama3-8b", "--gpus", "8",
                                "--framework", "megatron", "--set", "precision=fp8",
                                "--set", "sac_saves_scaled_mm=false"],
            "megatron": ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--dp", "8",
                         "--framework", "megatron", "--set", "precision=fp8",
                         "--set", "sac_saves_scaled_mm=false"],
        }
    )  # fmt: skip
    today, older = (json.loads(done[k].stdout) for k in ("today", "older"))
    assert older["layout"]["sac_saves_scaled_mm"] is False
    assert today["layout"]["sac_saves_scaled_mm"] is True
    # 32 layers × (2·8192·43008) B fewer activations at micro-batch 1
    assert (
        today["memory"]["activations_bytes"] - older["memory"]["activations_bytes"]
        == 32 * 2 * 8192 * 43008
    )
    # the recomputed GEMMs are charged: time and hardware FLOPs
    assert older["time"]["step_s"] > today["time"]["step_s"]
    assert today["time"]["hfu"] == today["time"]["mfu"]
    assert older["time"]["hfu"] > older["time"]["mfu"]
    assert refusal(done["full"]).startswith(
        "--set sac_saves_scaled_mm: false is read by recompute selective only"
    )
    assert refusal(done["bf16"]).startswith("--set sac_saves_scaled_mm: false needs precision fp8")
    # a search over several frameworks keeps those that never read it (Megatron-Core's layouts
    # stay candidates: its answer here, as without the key); without fsdp2 it is refused
    assert done["search"].returncode == 0, done["search"].stderr
    assert "megatron ZeRO-3" in done["search"].stdout
    assert refusal(done["search_megatron"]) == (
        "--set sac_saves_scaled_mm: false is read by fsdp2 only (torchtitan's op-level selective "
        "checkpointing), and no framework searched is fsdp2"
    )
    assert refusal(done["megatron"]).startswith(
        "--set sac_saves_scaled_mm: false is read by fsdp2 only"
    )
