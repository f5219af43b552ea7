"""Activation offload (issue 11 item 2): Megatron-Core's fine-grained activation offloading
(``--fine-grained-activation-offloading --offload-modules …``), sources in
:mod:`trainplan.model.activation_offload` (Megatron-LM
``docs/source/api-guide/fine_grained_activation_offloading.md`` and
``megatron/core/pipeline_parallel/fine_grained_activation_offload.py``). Per-layer tensors from
Korthikanti et al. 2022 (arXiv 2205.05198) §4 as :mod:`trainplan.model.activations` derives them;
PCIe Gen5 x16 at 64 GB/s per direction (the accelerator table's H100 SXM host link)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.model.test_properties import SETTINGS, layouts
from trainplan.model.activation_offload import activation_offload_seconds
from trainplan.model.errors import LayoutError
from trainplan.model.offload import Offload
from trainplan.optimizer.case import DEFAULT_GPU, Case
from trainplan.topology.accelerators import get_accelerator

# Llama 3 8B: h 4096, a 32 heads, g 8 KV heads, d 128, 32 layers; s 8192, b 1, tp 1, pp 1,
# dp 8, B 64 → m 8; selective recomputation; FlashAttention (no score tensors)
BASE = {
    "model": "llama3-8b",
    "dp": 8,
    "seq_len": 8192,
    "global_batch_size": 64,
    "recompute": "selective",
}
S, H = 8192, 4096  # tokens per micro-batch on a GPU (s/cp · b), hidden size


def test_llama3_8b_attention_core_and_projection_offloaded_by_hand():
    """--offload-activations core_attn,attn_proj on Llama 3 8B (the tensors of one layer, per
    micro-batch, β = 2 B, S = 8192 tokens, h = 4096, tp 1):

    * core_attn saves Q [S, a·d] = [S, 4096]:     2·S·h           = 67,108,864 B
      and K, V [S, g·d] = [S, 1024] each:         2 × 2·S·h/4     = 33,554,432 B
      (FlashAttention: no [b, a, s, s] score tensor; the logsumexp is the pytorch convention's)
    * attn_proj saves its input [S, a·d]:         2·S·h           = 67,108,864 B
    * per layer: 5·S·h = 167,772,160 B (0.168 GB).

    pp 1: one micro-batch in flight, 32 layers held → 32 × 167,772,160 = 5,368,709,120 B leave
    the per-layer stack; the GPU keeps one layer's worth (the group of each module name that
    Megatron-Core's post_warmup_callback never offloads), 167,772,160 B; the host holds 31
    layers, 5,200,936,960 B; the peak falls by 31 layers' bytes, as Megatron-LM's unit test
    measures it (the peak lowered by offload_summary_bytes, every group but the kept one).
    Copies: 167,772,160 B / 64e9 B/s = 2.62144 ms per layer each way, 8 micro-batches × 32
    layers × 2 directions = 1.342 s of link time per step, all hidden when a layer's forward
    (a third of its share of the micro-batch) takes longer than 2.62 ms."""
    plain = Case.of(**BASE).evaluate()
    off = Case.of(**{**BASE, "offload": Offload(activations="core_attn,attn_proj")}).evaluate()
    per_layer = 5 * S * H
    assert per_layer == 167_772_160
    a0, a1 = plain.peak.activations, off.peak.activations
    assert a0.layers_bytes - a1.layers_bytes == 32 * per_layer == 5_368_709_120
    assert a1.offload_buffer_bytes == per_layer == 167_772_160
    assert a1.offload_host_bytes == 31 * per_layer == 5_200_936_960
    assert off.host_bytes == 5_200_936_960
    assert plain.total_bytes - off.total_bytes == 31 * per_layer
    copy = per_layer / 64e9
    assert copy == pytest.approx(2.62144e-3, rel=1e-12)
    # the roofline model's slowest micro-batch over 32 layers: a layer's forward outlasts the copy
    m = off.num_microbatches
    t_layer = (off.compute_s / m) / 32
    assert t_layer / 3 > copy
    assert off.time_terms.activation_offload_s == 0.0
    assert off.step_s == pytest.approx(plain.step_s, rel=1e-12)
    assert off.training.offload.activations == ("core_attn", "attn_proj")


def test_slow_link_exposes_what_a_layer_cannot_hide():
    """The same layout under the single time model with an 8 GB/s host link: a copy takes
    167,772,160 / 8e9 = 20.97 ms per layer; with t the layer's share of the micro-batch (t_mb/32),
    the forward hides t/3 and the backward 2t/3 of it; exposed per step =
    m · 32 · (max(0, 20.97 ms − t/3) + max(0, 20.97 ms − 2t/3)), in the compute term."""
    slow_host = replace(get_accelerator(DEFAULT_GPU), host_link_bytes_per_s=8e9)
    params = {**BASE, "time_model": "single", "device": slow_host}
    plain = Case.of(**params).evaluate()
    off = Case.of(**{**params, "offload": Offload(activations="core_attn,attn_proj")}).evaluate()
    m = off.num_microbatches
    t = off.compute_s / m / 32
    copy = 5 * S * H / 8e9
    assert copy == pytest.approx(20.97152e-3, rel=1e-12)
    expected = m * 32 * (max(0, copy - t / 3) + max(0, copy - 2 * t / 3))
    assert expected > 0
    assert off.time_terms.activation_offload_s == pytest.approx(expected, rel=1e-12)
    assert off.step_s == pytest.approx(plain.step_s + expected, rel=1e-12)
    assert off.time_terms.compute_and_pipeline_s == pytest.approx(
        plain.time_terms.compute_and_pipeline_s + expected, rel=1e-12
    )


def test_exposed_seconds_by_hand():
    """64 MB per layer at 64 GB/s = 1 ms each way; a 12-layer stage whose micro-batch takes
    24 ms gives t = 2 ms per layer: forward 0.667 ms hides 0.667 of the copy out, backward
    1.333 ms hides all of the reload: 0.333 ms × 12 layers × 4 micro-batches = 16 ms. Halving
    the link to 32 GB/s: (2 − 0.667) + (2 − 1.333) = 2 ms per layer → 96 ms."""
    assert activation_offload_seconds(64e6, 0, 12, 0, 24e-3, 4, 64e9) == pytest.approx(16e-3)
    assert activation_offload_seconds(64e6, 0, 12, 0, 24e-3, 4, 32e9) == pytest.approx(96e-3)
    assert activation_offload_seconds(64e6, 0, 12, 0, 0.5, 4, 64e9) == 0


def test_mixtral_expert_modules_offload_routed_copies():
    """Mixtral 8×7B (top-2 of 8 experts, f_e 14336), --offload-activations expert_fc1,moe_act,
    tp 1, ep 1: per MoE layer expert_fc1's input is the k = 2 routed copies [2S, h] (2·2·S·h B)
    and moe_act's input the gate and up projections [2S, 2·f_e] (2·2·2·S·f_e B)."""
    base = {"model": "mixtral-8x7b", "dp": 8, "seq_len": 4096, "global_batch_size": 64}
    base["recompute"] = "selective"
    plain = Case.of(**base).evaluate()
    off = Case.of(**{**base, "offload": Offload(activations="expert_fc1,moe_act")}).evaluate()
    s, h, f = 4096, 4096, 14336
    per_layer = 2 * 2 * s * h + 2 * 2 * 2 * s * f
    a0, a1 = plain.peak.activations, off.peak.activations
    assert a0.layers_bytes - a1.layers_bytes == 32 * per_layer
    # on the GPU: the one layer never offloaded, and the copies still queued when the forward
    # ends (offload_backlog_bytes). One stage, so the last layer is kept (31 offloaded) and
    # nothing is pre-reloaded; each layer's 0.537 GB copy at 64 GB/s (8.4 ms) outlasts the
    # next layer's forward, t_f = t_mb / 32 layers / 3 (tp = cp = ep = 1: t_mb is the
    # compute, no exposed collective), by x − t_f·B, 31 times.
    t_f = off.time_terms.compute_s / off.num_microbatches / 32 / 3
    excess = per_layer - t_f * 64e9
    assert 0 < excess < per_layer
    assert float(a1.offload_buffer_bytes) == pytest.approx(per_layer + 31 * excess, rel=1e-9)
    # the queue's bytes come of a time and a rate: whole bytes, rounded up (a copy still queued
    # holds its storage), so the buffer is an integer within one byte of the figure above
    assert a1.offload_buffer_bytes.denominator == 1
    assert 0 <= a1.offload_buffer_bytes - (per_layer + 31 * excess) < 1 + 1e-6 * per_layer


def test_offload_value_normalises_and_refuses():
    assert Offload(activations=["core_attn", "attn_norm", "core_attn"]).activations == (
        "attn_norm",
        "core_attn",
    )
    assert not Offload(activations="core_attn").active  # the optimizer/parameter offload flag
    with pytest.raises(LayoutError, match="offload_activations: mlp is not one of"):
        Offload(activations="mlp")


def _modules(name: str) -> st.SearchStrategy[list[str]]:
    # the dense layers' norms are fused into linear_qkv / linear_fc1 (nothing to offload)
    pool = ["core_attn"] + (["mlp_norm", "expert_fc1", "moe_act"] if "mixtral" in name else [])
    return st.lists(st.sampled_from(pool), min_size=1, unique=True)


@SETTINGS
@given(layouts(), st.data())
def test_offload_never_raises_the_gpu_peak_nor_lowers_the_step(params, data):
    """Over legal Megatron-Core layouts (recompute none or selective): the GPU's peak with the
    offload is at most the peak without, the host holds what left it, and the step is no faster."""
    params = {**params, "framework": "megatron", "zero_stage": 1}
    params["recompute"] = data.draw(st.sampled_from(["none", "selective"]))
    mods = data.draw(_modules(params["model"]))
    if "core_attn" in mods and data.draw(st.booleans()):
        mods.append("attn_proj")
    try:
        plain = Case.of(**params).evaluate()
    except LayoutError:
        assume(False)
    off = Case.of(**{**params, "offload": Offload(activations=",".join(mods))}).evaluate()
    assert off.total_bytes <= plain.total_bytes
    for a, b in zip(plain.stages, off.stages, strict=True):
        assert b.total_bytes <= a.total_bytes
        assert b.activations.offload_host_bytes >= 0
        assert b.activations.offload_buffer_bytes >= 0
    assert off.host_bytes >= plain.host_bytes
    if plain.step_s is not None:
        assert off.step_s >= plain.step_s
        assert off.time_terms.activation_offload_s >= 0
    assert isinstance(off.peak.activations.offload_host_bytes, Fraction)


def test_search_tables_exclude_a_host_that_overflows():
    """1F1B's first stage holds pp micro-batches of L/pp layers: Llama 3 8B at s 262,144 on 8
    A100-40GB offloading 5·S·h per layer (core_attn 2 + 0.5 + 0.5, attn_proj 2 S·h ÷ tp), at
    tp 1 pp 2 2 × 16 × 5.4 GB ≈ 172 GB on a GPU's 128 GB share of the host: the tables' fit
    verdicts, host included, equal the exact evaluation's on every candidate, and only
    recompute none and selective are candidates. (Megatron-Core, the one profile that offloads
    activations, runs no GPipe.)"""
    from trainplan.optimizer.problem import Job, Problem
    from trainplan.optimizer.space import SearchSpace
    from trainplan.optimizer.tables import build_tables

    case = Case.of("llama3-8b", "A100-40GB", global_batch_size=16, seq_len=262144,
                   offload=Offload(activations=("core_attn", "attn_proj")))  # fmt: skip
    space = SearchSpace(num_gpus=8, tp=(1, 2), pp=(2, 4), schedules=("1f1b",),
                        max_micro_batch_size=1, frameworks=("megatron",))  # fmt: skip
    problem = Problem(jobs=(Job(case, 8, "8 × A100-40GB"),), space=space)
    tables = build_tables(problem)
    assert [str(r) for r in tables.recomputes] == ["none", "selective"]
    overflows = 0
    for s, shape in enumerate(tables.shapes):
        for z, zero in enumerate(tables.zero_stages):
            for r, mode in enumerate(tables.recomputes):
                if not tables.legal[s, z, r]:
                    continue
                est = problem.jobs[0].case.evaluate(shape.layout(zero, mode))
                assert bool(tables.fits[s, z, r]) == est.fits, shape
                overflows += est.host_fits is False
    assert overflows > 0


def test_norm_modules_offload_only_unfused_norms():
    """Megatron-Core's Transformer Engine spec fuses a norm into the next linear layer
    (``TELayerNormColumnParallelLinear``) except MLA's attention norm and a MoE layer's MLP norm
    (``gpt_layer_specs.py``; ``transformer_layer.py`` ``_set_offload_modules``): on DeepSeek-V3
    (MLA, 3 dense layers then MoE) ``attn_norm`` offloads every layer's norm input and
    ``mlp_norm`` the MoE layers' only, 2·S·h each (tp 1, S = 4096)."""
    from trainplan.model.activations import ActivationContext
    from trainplan.model.stage_bytes import offload_quantities
    from trainplan.scenarios.catalogue import get_model

    arch = get_model("deepseek-v3").model.arch
    S, h = 4096, arch.hidden_size
    ctx = ActivationContext(seq_len=S, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
                            flash_attention=True, offload_modules=("attn_norm", "mlp_norm"))  # fmt: skip
    q = offload_quantities(arch, ctx)
    assert q[0] == 2 * S * h  # dense layer: the attention norm's input only
    assert q[4] == 2 * 2 * S * h  # MoE layer: both norms' inputs


def test_pipeline_stage_holds_its_copy_backlog_and_a_prereloaded_layer():
    """Mixtral 8×7B, pp 2 (16 layers a stage), 1F1B, 8 micro-batches, expert_fc1 and moe_act
    offloaded (x = 2·2·S·h + 2·2·2·S·f_e a layer). Megatron-LM d98e8a64dd
    ``fine_grained_activation_offload.py``: stage 0 offloads every layer of a forward
    (the next backward is an older micro-batch's), so when its forward ends the copy queue
    holds the last layer's x and the backlog of the 15 before, 15 × (x − t_f·B)
    (``offload_backlog_bytes``); and its backward, having reloaded its own groups, pre-reloads
    the last layer of the next micro-batch (``bulk_reload`` → ``pre_reload_last_layer``), held
    through the next forward: x. The last stage keeps its last layer (``should_bulk_offload``)
    and pre-reloads nothing: 15 × (x − t_f·B). Both beside the one layer never offloaded."""
    base = {"model": "mixtral-8x7b", "dp": 4, "pp": 2, "seq_len": 4096, "global_batch_size": 32}
    base.update(recompute="selective", schedule="1f1b")
    off = Case.of(**{**base, "offload": Offload(activations="expert_fc1,moe_act")}).evaluate()
    s, h, f = 4096, 4096, 14336
    x = 2 * 2 * s * h + 2 * 2 * 2 * s * f
    assert off.num_microbatches == 8
    t_f = off.time_terms.compute_s / off.num_microbatches / 16 / 3
    excess = x - t_f * 64e9
    assert 0 < excess < x
    first, last = (float(st.activations.offload_buffer_bytes) for st in off.stages)
    assert first == pytest.approx(x + (x + 15 * excess) + x, rel=1e-9)
    assert last == pytest.approx(x + 15 * excess, rel=1e-9)


def test_expert_fc1_offload_under_fp8_moves_the_bf16_input():
    """Megatron-LM d98e8a64dd ``moe/experts.py`` ``TEGroupedMLP.__init__`` (l. 280–284): with
    the ``expert_fc1`` offload under an FP8 recipe other than MXFP8 the experts' FC1 saves its
    original BF16 input (``set_save_original_input``), not its FP8 copy. Mixtral 8×7B, tp 1,
    ep 1, S = 4,096 tokens, h 4,096, k 2, one stage (32 MoE layers, the last kept):

    * tensorwise: without the offload the layer keeps the FP8 copy, 1 B × 2·S·h = 33,554,432 B
      (32 layers: 1,073,741,824 B), which leaves the GPU's layer stack; what moves is the BF16
      input, 2 B × 2·S·h = 67,108,864 B a layer: 31 layers on the host, 2,080,374,784 B, and
      the kept layer's 67,108,864 B on the GPU (the copy hides under the next layer's forward);
    * MXFP8 (GB200) saves the FP8 copy, 1 + 1/32 B an element: 34,603,008 B a layer, 31 on the
      host 1,072,693,248 B;
    * ``delayed``: Transformer Engine's ``_GroupedLinear.forward`` refuses save_original_input
      with a ``Float8Quantizer``, so the plan is refused."""
    base = {"model": "mixtral-8x7b", "dp": 8, "seq_len": 4096, "global_batch_size": 64}
    base |= {"recompute": "selective", "precision": "fp8", "fp8_recipe": "tensorwise"}
    off = Offload(activations="expert_fc1")
    plain = Case.of(**base).evaluate()
    moved = Case.of(**base, offload=off).evaluate()
    a0, a1 = plain.peak.activations, moved.peak.activations
    assert a0.layers_bytes - a1.layers_bytes == 32 * 33_554_432 == 1_073_741_824
    assert a1.offload_host_bytes == moved.host_bytes == 31 * 67_108_864 == 2_080_374_784
    assert a1.offload_buffer_bytes == 67_108_864
    mx = {**base, "fp8_recipe": "mxfp8", "device": "GB200"}
    mx_moved = Case.of(**mx, offload=off).evaluate()
    assert mx_moved.peak.activations.offload_host_bytes == 31 * 34_603_008 == 1_072_693_248
    with pytest.raises(LayoutError) as err:
        Case.of(**{**base, "fp8_recipe": "delayed"}, offload=off).evaluate()
    assert str(err.value).startswith(
        "offload_activations: expert_fc1 makes the experts' FC1 save its original input"
    )
    assert "DelayedScaling recipe is not supported with save_original_input" in str(err.value)


def test_expert_fc1_offload_under_fp8_requantises_the_reloaded_input_for_wgrad():
    """Transformer Engine d0067d0da ``module/grouped_linear.py`` ``_GroupedLinear.backward``
    (Megatron-Core's default ``moe_use_grouped_tensor = False`` path): where FC1 saved its BF16
    input (``save_original_input``, set by the ``expert_fc1`` offload under tensorwise), the
    weight gradient quantises the reloaded input again after the dgrad GEMM,
    ``_split_quantize`` with ``Float8CurrentScalingQuantizer.set_usage(rowwise=True,
    columnwise=True)``: on H100 the row-wise FP8 data and its transpose, 2 B per element of
    ``[R, h]``, live until ``clear_tensor_data(*inputmats)`` after the wgrad GEMM.

    Qwen3-235B-A22B (h 4,096, k 8 of 128 experts, f_e 1,536, SwiGLU), tp 1, s 8,192, b 1, pp 4
    (stage 0: no output layer), recompute none, β 2: S = 8,192; n = 2·S·h = 67,108,864 B;
    R·h = 8·S·h = 268,435,456 elements, rh = 2·R·h = 536,870,912 B; rf = 2·8·S·1,536 =
    201,326,592 B. The routed experts' steps (model.backward_working._routed_experts):

    * down projection: n + rh + rf + 1·rh (its grad_output quantised, 2 B ÷ β per element)
      = 1,342,177,280 B;
    * up projection: n + 2·rf (the SwiGLU's input gradient) + rh (the dgrad) − the released
      down projection's FP8 input (rf/2) and SwiGLU input (2·rf) + 2·rf (grad_output in FP8)
      = 905,969,664 B, and with the requantised input, + 2·R·h = 536,870,912 B:
      1,442,840,576 B, now the layer's largest step (+100,663,296 B).

    Without the offload FC1 saved its FP8 column-wise copy and quantises nothing again."""
    base = {"model": "qwen3-235b-a22b", "dp": 8, "pp": 4, "seq_len": 8192}
    base |= {"global_batch_size": 64, "precision": "fp8", "fp8_recipe": "tensorwise"}
    n, rh, rf, elements = 67_108_864, 536_870_912, 201_326_592, 268_435_456
    down_step = n + rh + rf + rh
    up_step = n + 2 * rf + rh - (rf // 2 + 2 * rf) + 2 * rf
    assert (down_step, up_step) == (1_342_177_280, 905_969_664)
    plain = Case.of(**base).evaluate().stages[0].activations
    moved = Case.of(**base, offload=Offload(activations="expert_fc1")).evaluate()
    assert plain.backward_working_bytes == down_step
    assert moved.stages[0].activations.backward_working_bytes == up_step + 2 * elements
    assert up_step + 2 * elements == 1_442_840_576


def test_qkv_linear_offloads_what_the_qkv_projection_saves():
    """Megatron-Core d98e8a64dd ``--offload-modules qkv_linear``: ``Attention.forward`` runs
    ``get_query_key_value_tensors`` inside ``off_interface(self.offload_qkv_linear,
    hidden_states, "qkv_linear")`` (``MultiLatentAttention.forward`` the same), so every tensor
    saved there leaves the GPU. S = 4,096 tokens, tp 1, β = 2:

    * Llama 3 8B: ``linear_qkv`` is a ``TELayerNormColumnParallelLinear`` (the norm fused),
      which saves the norm's input and its output: 2 × 2·S·h = 67,108,864 B (h = 4,096);
    * DeepSeek-V3 (MLA; its attention norm is a module of its own, ``attn_norm``): the norm's
      output both down-projections read (h = 7,168), the query latent and its norm output
      (1,536 each), the K/V latent with the RoPE key (512 + 64) and the latent's norm output
      (512): 2·S·(7,168 + 2·1,536 + 576 + 512) = 92,798,976 B."""
    from trainplan.model.activations import ActivationContext
    from trainplan.model.stage_bytes import offload_quantities
    from trainplan.scenarios.catalogue import get_model

    S = 4096
    ctx = ActivationContext(seq_len=S, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
                            flash_attention=True, offload_modules=("qkv_linear",))  # fmt: skip
    llama = get_model("llama3-8b").model.arch
    assert offload_quantities(llama, ctx)[0] == 2 * 2 * S * 4096 == 67_108_864
    dsv3 = get_model("deepseek-v3").model.arch
    assert offload_quantities(dsv3, ctx)[0] == 2 * S * (7168 + 2 * 1536 + 576 + 512) == 92_798_976
    # the CLI takes the name, in forward order
    off = Case.of(**{**BASE, "offload": Offload(activations="core_attn,qkv_linear")}).evaluate()
    assert off.training.offload.activations == ("qkv_linear", "core_attn")
