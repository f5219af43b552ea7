"""``trainplan evaluate``'s memory lines as a user reads them (each command its own process, the
text and ``--json``): the backward working set, the output layer's all-gather buffer, NCCL's
communicators, the MoE forward working set and the fit figure, with their values derived here.

Dense: Llama 3 8B on 8 H100s, dp 4 × tp 2 (Megatron-Core, ZeRO-1, sequence parallelism, s 8192,
b 1, BF16: β = 2, S = 8,192 tokens, h 4,096, SwiGLU f 14,336, V 128,256). MoE: Mixtral 8x7B on 8
H100s, dp 8 × ep 8, full recomputation (s 32,768, b 1, h 4,096, 8 experts, top-2, V 32,000, 32
layers; Megatron-Core's ``alltoall`` dispatcher)."""

from __future__ import annotations

import json
import re

from tests.cli_runs import run_many

DENSE = ("evaluate", "--model", "llama3-8b", "--gpus", "8", "--dp", "4", "--tp", "2")
MOE = ("evaluate", "--model", "mixtral-8x7b", "--gpus", "8", "--dp", "8", "--ep", "8",
       "--recompute", "full")  # fmt: skip
COMM = 24 * 12 * 2**20 + (32 * 3 + 2) * 2 * 2**20
"""One NCCL ring inside an 8-GPU H100 node: 24 collective channels × 12 MiB and the set-up of 32
channels, (32 × 3 + 2) × 2 MiB (model/terms/comm_memory.py group_channels, setup_channels):
484 MiB, 507,510,784 B (was 32 channels × 12 MiB, 402,653,184 B, no set-up)."""


def _line(text: str, label: str) -> str:
    """The figure printed after ``label`` in the memory lines (``0.27 GB``)."""
    m = re.search(rf"^  {re.escape(label)}\s+(-?[\d,.]+ GB)$", text, re.M)
    assert m, f"no line {label!r} in:\n{text}"
    return m.group(1)


def _gb(x: int) -> str:
    return f"{x / 1e9:,.2f} GB"


def _lines_sum(m: dict) -> int:
    """The memory lines as printed, summed (they add up to the total)."""
    return (
        m["model_state_bytes"] + m["activations_bytes"] + m["embedding_activations_bytes"]
        + m["recompute_transient_bytes"] + m["backward_working_bytes"]
        - m["output_layer_freed_bytes"] + m["loss_transient_bytes"]
        + m["moe_forward_transient_bytes"] + m["batch_load_transient_bytes"]
        + m["persistent_buffers_bytes"] + m["communicator_bytes"]
    )  # fmt: skip


def test_memory_lines_in_a_fresh_process():
    runs = run_many(
        {"dense": DENSE, "dense_json": (*DENSE, "--json"), "moe": MOE, "moe_json": (*MOE, "--json")}
    )
    for name, done in runs.items():
        assert done.returncode == 0, (name, done.stderr[-2000:])
    _dense(runs["dense"].stdout, json.loads(runs["dense_json"].stdout)["memory"])
    _moe(runs["moe"].stdout, json.loads(runs["moe_json"].stdout)["memory"])


def _dense(text: str, m: dict) -> None:
    """Llama 3 8B, dp 4 × tp 2.

    * Backward working set (``model/backward_working.py``, Megatron-Core with Transformer
      Engine): the largest step is the MLP activation's backward — the layer's output gradient
      n = β·S·h/tp and the gate and up input gradients u·β·S·f/tp (u = 2, ``swiglu_back``'s one
      ``[S, 2f/tp]`` tensor) beside the activation's own output gradient β·S·f/tp, less the down
      projection's input (β·S·f/tp) released: n + 2·β·S·f/tp = 33,554,432 + 234,881,024.
    * The output layer's all-gather buffer: the sequence-parallel final norm output gathered
      over tp for the output projection, β·S·h = 67,108,864 B, held the whole run; beside it,
      held as long, Transformer Engine's placeholder weight gradients (``model/terms/
      dummy_wgrads.py``), one BF16 tensor per distinct weight shape at tp 2: QKV [3,072,
      4,096], proj [4,096, 2,048], FC1 [14,336, 4,096], FC2 [4,096, 7,168] and the output layer
      [64,128, 4,096] (V 128,256 a multiple of 128·2): 218,103,808 + 525,336,576 B.
    * Communicators: the tp ring, the dp ring, the distributed optimizer's gradient-statistics
      ring over all 8 GPUs, the world group's ring and the model-parallel group's (tp·pp = the
      tp pair, but a ``create_group`` of its own that Megatron-LM's ``train_step`` all-reduces
      over at every ZeRO stage, ``model/terms/comm_groups.py`` ``megatron_rings``): 5 ×
      :data:`COMM` (4 before it was counted); and NVLink SHARP's (:mod:`model.terms.nvls_memory`):
      the tp ring of 2 and the dp ring of 4 in the node hold 2 MiB of credits each and no
      buffers — NCCL's tuner runs an all-reduce of 2 or 4 GPUs of an H100 node as a ring
      (``model/nccl_search.py``; 2 + 32 · 2 = 66 and 2 + 32 · 4 = 130 MiB were counted
      before); the gradient-statistics, world and model-parallel rings run small all-reduces
      only, 2 MiB of credits each: 10 MiB, 10,485,760 B.
    * The fit figure: the allocated peak with the communicators (no side-stream pool under
      Megatron-Core) — the total."""
    beta, S, h, f, tp = 2, 8192, 4096, 14336, 2
    work = beta * S * h // tp + 2 * beta * S * f // tp
    assert work == 268_435_456
    gather = beta * S * h
    dummies = 2 * 4096 * (3072 + 2048 + 14336 + 7168) + 2 * 64128 * 4096
    assert dummies == 218_103_808 + 525_336_576 == 743_440_384
    held = gather + dummies
    assert (m["backward_working_bytes"], m["persistent_buffers_bytes"]) == (work, held)
    assert COMM == 507_510_784
    nvls = (2 + 2 + 3 * 2) * 2**20
    assert nvls == 10_485_760
    assert m["communicator_bytes"] == 5 * COMM + nvls == 2_537_553_920 + nvls == 2_548_039_680
    assert m["stream_pool_bytes"] == m["moe_forward_transient_bytes"] == 0
    assert m["fit_bytes"] == m["allocated_bytes"] + m["communicator_bytes"] == m["total_bytes"]
    assert _lines_sum(m) == m["total_bytes"]
    assert _line(text, "backward working set (one layer)") == _gb(work) == "0.27 GB"
    assert _line(text, "persistent buffers (whole run)") == _gb(held) == "0.81 GB"
    assert _line(text, "NCCL communicator buffers (whole run)") == _gb(5 * COMM + nvls) == "2.55 GB"
    assert _line(text, "= total (peak: forward-backward)") == _gb(m["fit_bytes"])
    assert "MoE forward working set" not in text


def _moe(text: str, m: dict) -> None:
    """Mixtral 8x7B, dp 8 × ep 8, full recomputation.

    * The MoE forward working set (``model/moe_working_set.py``, Megatron-Core's ``alltoall``
      dispatcher, one local expert a rank): U = β·k·S·h = 2 × 2 × 32,768 × 4,096 = 536,870,912
      B; the permuted tokens (U) are held while the experts read the all-to-all's output (saved
      for backward), and the experts' output (U) and the combine's all-to-all output (U) are
      made beside them: 3U. Full recomputation replays the forward in backward, so the working
      set sits on the recompute transient; the line is what that adds beyond the layers'
      backward phase (the transient, one layer's backward working set, less the output layer's
      tensors released before it): 3U − working set + output layer.
    * The output layer's tensors: its FP32 logits 4·s·V and the final norm's and projection's
      inputs 2 × β·s·h: 4,194,304,000 + 536,870,912 = 4,731,174,912 B.
    * The layers kept: each layer's 2·s·h input under full recomputation, 32 layers, one
      micro-batch in flight (pp 1): 8,589,934,592 B.
    * No tensor parallelism: no output-layer gather; the whole-run buffers are Transformer Engine's
      four extra cuBLAS workspaces, one per GroupedLinear stream (``get_cublas_workspace``,
      33,555,456 B each on Hopper): 134,221,824 B; and Transformer Engine's placeholder weight
      gradients (``model/terms/dummy_wgrads.py``) at tp = etp 1: QKV [6,144, 4,096], proj
      [4,096, 4,096], the experts' FC1 [28,672, 4,096] and FC2 [4,096, 14,336] and the output
      layer [32,000, 4,096]: 436,207,616 + 262,144,000 = 698,351,616 B."""
    beta, k, s, h, V, layers = 2, 2, 32768, 4096, 32000, 32
    U = beta * k * s * h
    assert U == 536_870_912
    output = 4 * s * V + 2 * beta * s * h
    assert output == 4_731_174_912
    assert m["embedding_activations_bytes"] == m["output_layer_freed_bytes"] == output
    assert m["activations_bytes"] == layers * beta * s * h == 8_589_934_592
    moe = 3 * U - m["backward_working_bytes"] + output
    assert m["moe_forward_transient_bytes"] == moe == 2_315_255_808
    dummies = 2 * 4096 * (6144 + 4096 + 28672 + 14336) + 2 * 32000 * 4096
    assert dummies == 698_351_616
    assert m["persistent_buffers_bytes"] == 4 * 33_555_456 + dummies == 832_573_440
    assert m["fit_bytes"] == m["allocated_bytes"] + m["communicator_bytes"] == m["total_bytes"]
    assert _lines_sum(m) == m["total_bytes"]
    assert _line(text, "MoE forward working set (one layer)") == _gb(moe) == "2.32 GB"
    assert _line(text, "backward working set (one layer)") == _gb(m["backward_working_bytes"])
    assert _line(text, "less: output layer, freed before the backward") == _gb(output) == "4.73 GB"
    assert _line(text, "= total (peak: forward-backward)") == _gb(m["fit_bytes"])
    assert "all-gather buffer" not in text
