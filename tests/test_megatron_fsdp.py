"""Megatron-FSDP (``--framework megatron --zero 3``) and whole-layer CPU activation offload
(``cpu_offloading_num_layers``), hand-derived from Megatron-LM's and Transformer Engine's code.

Megatron-FSDP's optim_grads_params (megatron/core/distributed/fsdp/src/megatron_fsdp/
param_and_grad_buffer.py): per parameter, ÷ D, the model weight shard (2 B), the FP32 main
weight (4 B), the main gradient (here BF16, 2 B) and the two FP32 Adam moments (8 B); two units
gathered (FixedPoolAllocator size UB_BUFFER_NUM = 2) and two units' unsharded gradients (2 × 2 B);
per micro-batch two all-gathers (2 × 2 B) and one reduce-scatter (2 B) per parameter.

Transformer Engine's offload of the first N of L layers leaves L − N layers' saved tensors on the
GPU at the end of the forward (cpu_offload_v1.py layer_window_map; cpu_offload.py
DefaultOffloadSynchronizer: "(num_layers - num_offloaded_layers) * T").
"""

from fractions import Fraction

import pytest

from trainplan.interface.inputs import build_case
from trainplan.model.errors import LayoutError, PlannerError
from trainplan.model.frameworks import Framework, check_framework
from trainplan.model.layout import Layout
from trainplan.model.mechanisms import mechanism
from trainplan.optimizer.case import Case

GB200_70B = {"model": "llama3-70b", "gpu": "GB200", "framework": "megatron", "zero_stage": 3,
             "dp": 64, "micro_batch_size": 2, "global_batch_size": 256, "seq_len": 8192,
             "precision": "fp8", "fp8_recipe": "tensorwise", "gradient_dtype": "bf16"}  # fmt: skip


def test_megatron_fsdp_bytes_per_parameter():
    m = mechanism("megatron", 3, gradient_bytes=2)
    assert (m.weights_full, m.grads_full, m.optimizer_full) == (0, 0, 0)
    assert (m.weights_sharded, m.grads_sharded, m.optimizer_sharded) == (2 + 4, 2, 8)
    assert (m.gathered_units, m.unit_grad_bytes, m.step_sharded) == (2, 2 * 2, 4)
    assert m.traffic_terms() == (0, 2 * 2 + 2)
    with pytest.raises(LayoutError, match="Megatron-FSDP"):
        check_framework(Framework.MEGATRON, 3, 2)


def test_whole_layer_offload_halves_the_layers_and_fills_the_host():
    base = build_case(GB200_70B).evaluate().stages[0].activations
    off = build_case({**GB200_70B, "cpu_offloading_num_layers": 40}).evaluate()
    acts = off.stages[0].activations
    assert acts.layers_bytes == base.layers_bytes * 40 / 80
    assert acts.offload_host_bytes == base.layers_bytes * 40 / 80
    assert off.stages[0].total_bytes < build_case(GB200_70B).evaluate().stages[0].total_bytes


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"framework": "fsdp2"}, "not fsdp2's"),
        ({"recompute": "full"}, "recompute none"),
        ({"cpu_offloading_num_layers": 80}, "below the model's 80 layers"),
    ],
)
def test_whole_layer_offload_refusals(change, rule):
    case = {**GB200_70B, "cpu_offloading_num_layers": 40} | change
    with pytest.raises(PlannerError, match=rule):
        build_case(case).evaluate()


def test_megatron_fsdp_keeps_the_embedding_and_output_layer_gathered():
    """Megatron-FSDP releases only its units' parameters (megatron_fsdp.py
    _register_fsdp_hooks: _post_forward and _post_backward_release_module on fsdp_unit_modules,
    the transformer layers; _root_pre_backward marks only unit buckets releasable), so the
    embedding, the final norm and the output layer stay gathered beside the layer units. Llama 3
    8B on dp 8: a layer 4096·(4096 + 2·1024 + 4096) + 3·4096·14,336 + 2·4096 = 218,112,000, the
    embedding and the untied output layer 128,256·4096 = 525,336,576 each, the final norm 4096. The layer units held: the one
    computed and those prefetched until 5e8 elements (suggested_AG_prefetch_size, half the
    1e9-element floor of suggested_communication_unit_size: megatron_fsdp.py
    MegatronFSDP.__init__; AllGatherPipeline.all_gather_params adds buckets while the prefetched
    size is below it): 218 M, 436 M, 654 M, so 3 prefetched, 4 held. Beyond the 1/8 shard,
    2 B each, whole beside the shard: (4·218,112,000 + 2·525,336,576 + 4096)·2 = 3,846,250,496 B
    (FSDP2 holds 2 units of the largest, the embedding: 2,101,346,304, as torchtitan wraps
    embedding and output as units). The FP32 gradient buckets the reduce-scatter queue holds
    (capacity max(1e9, 2·218,112,000) = 1e9 elements), each layer's allocated at 218,136,576
    (padded to 951 × 8 × 28,672: test_bucket_padding_as_megatron_fsdp_lays_it_out). Outside the
    layers (_get_parameter_groups step 2, bucket max(4e7, 1e6·8) = 4e7): the embedding closes a
    bucket alone (it fills last: not counted); the final norm and the output layer are the next,
    128,257 chunks of 4096 padded to 16,033 × 8 × 4096 = 525,369,344, reduced first. It waits
    beside (1e9 − 525,369,344) // 218,136,576 + 1 = 3 layers and is popped when the fourth is
    queued, so while that fourth fills: 525,369,344 + 4·218,136,576 = 1,397,915,648 elements
    (the steady queue afterwards: 1e9 // 218,136,576 = 4 queued + 2)."""

    def state(framework):
        lay = Layout.of(dp=8, framework=framework, zero_stage=3)
        return Case.of("llama3-8b", "H100-SXM", lay).evaluate().stages[0].state

    megatron, fsdp2 = state("megatron"), state("fsdp2")
    assert megatron.gathered_bytes == (4 * 218_112_000 + 2 * 525_336_576 + 4096) * 2
    assert megatron.gathered_bytes == 3_846_250_496
    assert fsdp2.gathered_bytes == 2 * 2 * 525_336_576 == 2_101_346_304
    assert megatron.buffers_bytes == 4 * (16_033 * 8 * 4096 + 4 * 218_136_576) == 5_591_662_592


def test_megatron_fsdp_holds_fp8_primary_weights_in_one_byte():
    """FP8 primary weights under Megatron-FSDP (fp8_param_gather, the 25.11 GB200 recipe):
    ParamAndGradBuffer._init_each_parameter_group_buffers (param_and_grad_buffer.py, Megatron-LM
    92c8482e6d) gives a group of FP8 parameters a torch.uint8 model_weight_buffer, sharded and
    all-gathered as such, and a BF16 gradient buffer. Llama 3 70B on dp 64: a layer's linear
    weights 8192·(8192 + 2·1024) + 8192·8192 + 3·8192·28,672 = 855,638,016 elements (its unit
    855,654,400 with the two norms), 80 layers, P = 70,553,706,496. The shard: 6 B per
    parameter (model weight 2 + FP32 main 4) less 1 B per linear element, ÷ 64. Gathered: two
    layer units in 2 B less 1 B per linear element, and the embedding, output layer
    (128,256·8192 each, BF16: not Transformer Engine layers) and final norm (8192), each whole
    beside its shard (``allocate_bucket_storage``).
    On GB200 per-tensor FP8 keeps no transpose, so no weight cache."""
    st = build_case({**GB200_70B, "fp8_param_gather": True}).evaluate().stages[0].state
    unit, linear, vocab_rows = 855_654_400, 855_638_016, 128_256 * 8192
    p = 70_553_706_496
    assert st.weights_bytes == (6 * p - 80 * linear) / 64 == 5_544_862_464
    layers = 2 * 2 * unit - 2 * 1 * linear
    assert st.gathered_bytes == layers + 2 * (2 * vocab_rows + 8192) == 5_914_050_560
    assert st.weight_cache_bytes == 0


def test_megatron_fsdp_prefetch_holds_units_by_size():
    """How many layer units Megatron-FSDP holds gathered at once (module docstring of
    model.mechanisms._megatron_fsdp): the unit computed and max(1, ⌈5e8 / unit⌉) prefetched:
    Llama 3 8B's 218,112,000-element layer 1 + ⌈2.29⌉ = 4, Llama 3 70B's 855,654,400 1 + 1 = 2,
    the same as the two-unit pool fsdp_double_buffer would cap it at. Other frameworks: 2."""
    m = mechanism("megatron", 3)
    assert (m.units_held(218_112_000), m.units_held(855_654_400)) == (4, 2)
    assert m.units_held(Fraction(250_000_000)) == 3  # 2 prefetched reach 5e8 exactly
    assert mechanism("fsdp2", 3).units_held(218_112_000) == 2
    assert mechanism("deepspeed", 3).units_held(218_112_000) == 2


def test_megatron_fsdp_reduce_scatter_queue_llama3_405b():
    """The default answer of `trainplan search --model llama3-405b --gpus 256`: dp 128
    tp 2, recompute sqrt, b 1, Megatron-FSDP with FP32 main gradients. A layer on one GPU:
    (16384·(16384 + 2·1024) + 16384·16384 + 3·16384·53,248)/2 + 2·16384 = 1,593,868,288
    elements (the norms whole). GradReducePipeline (param_and_grad_buffer.py, Megatron-LM
    92c8482e6d / d98e8a64dd): suggested_RS_queue_capacity = max(1e9, 2·mean unit) =
    3,187,736,576 (MegatronFSDP.__init__ sums the parameters' numel); wait_for_previous_grad_
    reduce pops while the queued buckets' allocated sizes exceed it. A layer's bucket is
    allocated at u' = 1,608,515,584: chunk lcm(26,624, 16,384) = 212,992, padded to a multiple
    of 128 × 212,992 = 27,262,976, 59 of them. So one layer stays queued (2·u' > C), the
    next is queued and a third fills: 3·u'. Outside the layers (bucket max(4e7, 1e6·128) =
    1.28e8): the embedding (128,256·16384/2 = 1,050,673,152) alone, filled last; the final norm
    and the output layer, 64,129 chunks of 16,384 padded to o = 502 × 128 × 16,384 =
    1,052,770,304, wait beside (C − o) // u' + 1 = 2 layers and go when the third is queued:
    o + 3·u' = 5,878,317,056 elements, 4 B each = 23,513,268,224 B, the peak (four layers,
    25,501,892,608 B, counted before). The layout's peak, 90.11 GB with the communicators (and
    one layer's backward working set, the output layer's tensors released before it, its
    all-gather buffer), 90.32 GB with the recomputed segment's fused attention softmax
    statistics (FP32, 4·128/2 heads·8,192 = 2,097,152 B a layer), does not fit an H100's 83.21
    GB. The communicators with their channels' set-up (model/terms/comm_memory.py): the tp ring
    in a node, 24 channels, 288 + 196 = 484 MiB; the dp ring over 256 ranks, 4 a node on 32
    nodes, 16 channels, 192 + 100 = 292 MiB; the gradient-statistics and world rings over the
    256 GPUs, 292 MiB each: 1,360 MiB (was 4 × 384 = 1,536 MiB at 32 channels and no set-up,
    184,549,376 B more): 90,317,022,464 → 90,132,473,088 B, 90.13 GB. And the model-parallel
    group (tp·pp = 2 ranks in a node) that Megatron-LM's train_step all-reduces over after every
    optimizer step, at every ZeRO stage (training.py ``train_step``, d98e8a64dd): one more
    ring of 484 MiB, 1,844 MiB: 90,132,473,088 + 507,510,784 = 90,639,983,872 B, 90.64 GB.
    NVLink SHARP (model/terms/nvls_memory.py, NCCL src/transport/nvls.cc): the tp ring of 2 in
    the node 2 MiB of credits (NCCL's tuner runs a 2-GPU all-reduce of an H100 node as a ring,
    model/nccl_search.py, so its buffers are never set up; 64 MiB more were counted before); the
    model-parallel ring in the node (one-float all-reduces, which NCCL runs as rings, so its
    buffers are never set up: src/graph/tuning.cc, src/group.cc ncclCollPreconnect) and the dp,
    gradient-statistics and world rings across nodes with ≥ 2 ranks a node 2 MiB each: 10 MiB,
    90,650,469,632 B. Transformer Engine's placeholder weight gradients (model/terms/
    dummy_wgrads.py; Megatron-FSDP marks grad_added_to_main_grad too), one BF16 tensor per
    distinct weight shape at tp 2: QKV [9,216, 16,384], proj [16,384, 8,192], FC1 [53,248,
    16,384], FC2 [16,384, 26,624] and the output layer [64,128, 16,384]: 5,289,017,344 B more,
    95,939,486,976 B."""
    lay = Layout.of(dp=128, tp=2, framework="megatron", zero_stage=3, recompute="sqrt")
    est = Case.of("llama3-405b", "H100-SXM", lay).evaluate()
    unit, padded, output = 1_593_868_288, 59 * 128 * 212_992, 502 * 128 * 16384
    assert padded == 1_608_515_584 and 2 * padded > 2 * unit >= padded
    assert est.stages[0].state.buffers_bytes == 4 * (output + 3 * padded) == 23_513_268_224
    nvls = 2 + 4 * 2
    assert est.stages[0].communicator_bytes == (484 + 292 + 292 + 292 + 484 + nvls) * 2**20
    dummies = 2 * (9216 * 16384 + 16384 * 8192 + 53248 * 16384 + 16384 * 26624)
    dummies += 2 * 64128 * 16384
    assert dummies == 3_187_671_040 + 2_101_346_304 == 5_289_017_344
    total = 90_317_022_464 - 176 * 2**20 + (484 + nvls) * 2**20
    assert total == 90_639_983_872 + nvls * 2**20 == 90_650_469_632
    assert est.stages[0].total_bytes == total + dummies == 95_939_486_976
    assert round(float(est.stages[0].total_bytes) / 1e9, 2) == 95.94
    assert not est.fits


def test_fsdp_double_buffer_pools():
    """fsdp_double_buffer (FixedPoolAllocator(size=UB_BUFFER_NUM = 2) for fsdp_params and
    fsdp_grads, param_and_grad_buffer.py): two layer units of gathered weights and two of
    gradient buckets, persistent; _enforce_double_buffer_limit keeps at most one other unit
    (the output layer's bucket counts as one) beside the unit filling; the output layer's
    bucket comes from the fallback allocator. Llama 3 8B dp 8: gathered 2 units (not 4),
    gradients 4 B·(2·218,136,576 + 525,369,344), the layers' buckets at their allocated size
    (218,112,000 padded to 951 × 8 × 28,672), the final norm's and output layer's at 16,033 × 8
    × 4096 (test_megatron_fsdp_keeps_the_embedding_and_output_layer_gathered); in the
    optimizer step the pools stay:
    2·(2 B weights + 4 B gradients)·218,112,000. The launch line says --fsdp-double-buffer."""
    from trainplan.interface.launch import megatron_flags

    lay = Layout.of(dp=8, framework="megatron", zero_stage=3)
    est = build_case(
        {"model": "llama3-8b", "gpu": "H100-SXM", "num_gpus": 8, "dp": 8, "zero_stage": 3,
         "framework": "megatron", "fsdp_double_buffer": True}
    ).evaluate()  # fmt: skip
    st = est.stages[0].state
    unit, rows = 218_112_000, 525_336_576
    assert st.gathered_bytes == (2 * unit + 2 * rows + 4096) * 2  # whole beside the shard
    assert st.buffers_bytes == 4 * (2 * 218_136_576 + 525_369_344) == 3_846_569_984
    plain = Case.of("llama3-8b", "H100-SXM", lay).evaluate().stages[0].state
    assert st.step_bytes - plain.step_bytes == 2 * (2 + 4) * unit
    from trainplan.scenarios.catalogue import get_model

    arch = get_model("llama3-8b").model.arch
    training = est.training
    assert "--fsdp-double-buffer" in megatron_flags(arch, lay, 128, training).flags
    plain_flags = megatron_flags(arch, lay, 128, None).flags
    assert "--fsdp-double-buffer" not in plain_flags
    # the overlap the plan times, and the DDP bucket size the buckets outside the layers are
    # cut at (Megatron-LM training.py resolve_ddp_bucket_size)
    assert {"--overlap-grad-reduce", "--overlap-param-gather"} <= set(plain_flags)


def test_gb200_row_runs_with_the_double_buffer():
    """megatron-bridge-25.11/gb200-llama3-70b-fsdp: llama3_70b_pretrain_config_gb200 (Megatron
    Bridge 97ad8cc6f scripts/performance/configs/llama/llama3_llm_pretrain.py) sets
    ddp.fsdp_double_buffer and suggested_communication_unit_size 8e8 (below one layer, so one
    queued: the pool's two units). BF16 buckets, each layer's at its allocated 858,800,128
    elements (test_bucket_padding_as_megatron_fsdp_lays_it_out), the final norm's and output
    layer's (128,257 chunks of 8192, the embedding's bucket apart at dp 64) padded to 2,005 × 64
    × 8192 = 1,051,197,440: 2 B·(2·858,800,128 + 1,051,197,440) = 5,537,595,392 B at the
    output layer's backward."""
    from trainplan.interface.fidelity.validation import validation_runs

    run = next(r for r in validation_runs() if r.key.endswith("gb200-llama3-70b-fsdp"))
    assert run.params["fsdp_double_buffer"] is True
    st = build_case(dict(run.params)).evaluate().stages[0].state
    assert st.buffers_bytes == 2 * (2 * 858_800_128 + 2005 * 64 * 8192) == 5_537_595_392


def test_megatron_fsdp_prefetch_counts_the_whole_moe_layer():
    """AllGatherPipeline.all_gather_params sums the buckets it adds (a MoE layer's dense and
    expert parameter groups are buckets of the same unit) until the prefetched elements reach
    5e8: Qwen3 235B-A22B at tp 2, ep 4, etp 2 holds 36,184,320 dense and 301,989,888 expert
    elements per layer on a GPU, 338,174,208 in all, so 1 + ⌈5e8 / 338,174,208⌉ = 3 layers
    are gathered, of both classes (not 1 + ⌈5e8 / 36,184,320⌉ = 15 of the dense part)."""
    m = mechanism("megatron", 3)
    dense, expert = 36_184_320, 301_989_888
    assert m.units_held(dense + expert) == 3
    gathered = m.memory_terms(Fraction(10**9), 32, Fraction(dense), dense + expert)[3]
    assert gathered == 3 * 2 * dense  # whole beside the 1/32 shard


@pytest.mark.slow
def test_default_search_llama3_405b_256_answers_a_layout_that_fits():
    """`trainplan search --model llama3-405b --gpus 256` used to answer Megatron-FSDP dp 128
    tp 2, recompute sqrt, at 80.14 GB counted with two gradient buckets; with the queue as
    Megatron-FSDP keeps it (three padded layer buckets and the output layer's) that layout
    holds 91.31 GB (test above) and is not the answer: dp 64 tp 4, recompute full, b 2 is, at
    68.00 GB. Whatever the answer, its count fits an H100's 83.21 GB."""
    import json

    from click.testing import CliRunner

    from trainplan.interface.cli import cli, register_commands

    register_commands()
    res = CliRunner().invoke(cli, ["search", "--model", "llama3-405b", "--gpus", "256", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    lay = out["layout"]
    assert out["memory"]["fits"] is True
    assert out["memory"]["total_bytes"] <= out["memory"]["capacity_bytes"]
    assert not (lay["zero_stage"] == 3 and lay["dp"] == 128 and lay["tp"] == 2)


def test_bucket_padding_as_megatron_fsdp_lays_it_out():
    """Megatron-FSDP's gradient buckets at their allocated size (param_and_grad_buffer.py,
    Megatron-LM 92c8482e6d / d98e8a64dd: _get_parameter_groups groups a unit's parameters by
    dtype and sets the chunk size, build_data_parallel_buffer_index lays them out and pads to
    dp × chunk). Llama 3 70B, tp 1, dp 64, FP8 primary weights (the GB200 row): the FP8 group
    holds fc2 [8192, 28,672], QKV [10,240, 8192], proj [8192, 8192], fc1 [57,344, 8192], widest
    row first; chunk = lcm(28,672, 8192) = 57,344. fc2 is 4,096 chunks; QKV 1,462 and 49,152
    over, so it takes 1,463 and proj's remainder (16,384) does not fit the 8,192 left; proj 1,171
    chunks (1,170 and 16,384 over); fc1 8,192: 14,922 chunks = 855,687,168, padded to
    234 × 64 × 57,344 = 858,783,744. The two norms (BF16, 8,192 each, chunk 1): 16,384, a
    multiple of 64 already. In BF16 the norms fill QKV's gap: the same 858,783,744 for
    855,654,400 parameters. Llama 3 8B, tp 1, dp 8: chunk lcm(14,336, 4,096) = 28,672, QKV's
    remainder 20,480 shares its last chunk with proj's 4,096 and one norm, the other norm at
    the end: no gap, 218,112,000, padded to 951 × 8 × 28,672 = 218,136,576."""
    import math

    from trainplan.model.megatron_fsdp_buckets import (
        bucket_elements,
        chunk_size,
        dense_layer_shapes,
        padded_layer_unit,
    )
    from trainplan.scenarios.catalogue import get_model

    arch70 = get_model("llama3-70b").model.arch
    shapes = dense_layer_shapes(arch70, 1)
    fp8 = [s for s, linear in shapes if linear]
    assert chunk_size(fp8) == 57_344
    assert bucket_elements(fp8, 64) == 234 * 64 * 57_344 == 858_783_744
    assert bucket_elements([s for s, linear in shapes if not linear], 64) == 16_384
    assert padded_layer_unit(arch70, True, 1, 64) == 858_800_128
    assert padded_layer_unit(arch70, False, 1, 64) == 858_783_744
    assert sum(math.prod(s) for s, _ in shapes) == 855_654_400
    arch8 = get_model("llama3-8b").model.arch
    assert padded_layer_unit(arch8, False, 1, 8) == 951 * 8 * 28_672 == 218_136_576
    assert 7_607 * 28_672 + 4_096 == 218_112_000  # no gap: 7,608 chunks even at dp 1
    assert bucket_elements([s for s, _ in dense_layer_shapes(arch8, 1)], 1) == 7_608 * 28_672
    # layers whose shapes are not laid out here count their parameters (0 = none known)
    assert padded_layer_unit(get_model("qwen3-235b-a22b").model.arch, False, 1, 8) == 0


def test_non_unit_buckets_deepseek_v3_dp1024():
    """The parameters outside the layers as Megatron-FSDP buckets them (param_and_grad_buffer.py
    _get_parameter_groups, Megatron-LM d98e8a64dd): one dtype group in GPTModel.named_parameters
    order (embedding, decoder.final_layernorm, mtp.layers.0.enorm / hnorm / eh_proj /
    final_layernorm, output_layer), cut once a bucket holds ≥ bucket_size = max(4e7, 1e6·dp·cp)
    (training.py resolve_ddp_bucket_size) = 1.024e9 elements at dp 1024. DeepSeek-V3 at tp 1:
    the embedding 129,280·7168 = 926,679,040, three norms of 7168 and eh_proj 7168·14,336 =
    102,760,448 sum to 1,029,460,992 ≥ 1.024e9: bucket 1, chunk 14,336, padded to 71·1024·14,336
    = 1,042,284,544. main_grad_getter allocates it at eh_proj's gradient (MTP backward, before the
    61 layers'); GradReducePipeline reduces it only when the embedding's gradient is in, at the
    end: alive through the whole backward. Bucket 2, the MTP final norm and the output layer
    (926,686,208, chunk 7168), padded to 127·1024·7168 = 932,184,064, is reduced first.

    The layout `search --model deepseek-v3 --gpus 1024` answered before (dp 1024 ep 8, ZeRO-3,
    recompute full, b 3) then holds, in FP32 gradient buckets, four MoE-layer buckets (the
    queue's steady state: capacity 2·u, u > the output bucket) and bucket 1: 4 B·(4·u +
    1,042,284,544); and gathered whole beside its 1/1024 shard, eh_proj and the four norms
    more than the embedding and output layer: 2 B·(102,760,448 + 4·7168). The peak,
    87.82 GB with the communicators at 32 channels a ring and no set-up (87.75 GB when the gathered units were counted beyond the
    shard), Transformer Engine's four GroupedLinear cuBLAS workspaces
    (4 × 33,555,456 B) and the router's 9 B per [S, E] element in the recomputed layer
    (model.moe_working_set.MEGATRON_ROUTER_SCORE_BYTES: 87.73 GB with one FP32 copy, + 5·S·E =
    5·12,288·256 = 15,728,640 B; 87.83 GB with its fused attention's FP32 softmax statistics,
    4·128·12,288 = 6,291,456 B) before the MoE forward working set was counted, does not fit
    an H100's 83.21 GB; with it, 93.46 GB: when backward replays a MoE layer's forward (recompute
    full) Megatron's alltoall dispatcher holds 4U beside the recompute transient, U = β·k·S·h =
    2·8·(3·4096)·7168 = 1,409,286,144 B (the permuted tokens, the all-to-all output, the experts'
    output and its un-sorted copy; model/moe_working_set.py), and that phase is now the stage's
    largest: + 4U = 5,637,144,576 B. With the communicators' placed channels and their set-up
    (model/terms/comm_memory.py): the dp ring over 128 nodes (16 channels, 192 + 100 = 292 MiB),
    the all-to-all's 7 NVLink peers × 32 channels × 12 MiB = 2,688 MiB and the ep
    communicator's set-up of 32 channels, 196 MiB, the expert dp ring (on the dp placement,
    292), the gradient-statistics and world rings (292 each): 4,052 MiB, against 384 + 2,688 +
    3 × 384 = 4,224 MiB before, 180,355,072 B fewer: 87.65 and 93.28 GB. With Megatron-Core's
    MoE groups placed as they lie (model/terms/comm_groups.py megatron_rings,
    expert_dp_stride): the expert dp ring's 128 ranks at stride ep = 8 are one a node on 128
    nodes (4 channels, 48 + 28 = 76 MiB, not 292); the expert tp·ep group of the token counts'
    all-gather, the 8 ep ranks in a node (484 MiB); the tp·dp·cp group of the expert bias's
    token counts, the 1,024 ranks 8 a node (292 MiB): 4,052 − 216 + 484 + 292 = 4,612 MiB,
    587,202,560 B more: 88.23 and 93.87 GB; and NVLink SHARP's 2 MiB of credits on five rings
    with ≥ 2 ranks a node (model/terms/nvls_memory.py; none runs a large collective inside one
    NVLink domain, so no buffers): 10,485,760 B more, 88.24 and 93.88 GB. Under full
    recomputation the MTP module is checkpointed whole (MultiTokenPredictionLayer.
    _checkpointed_forward): it keeps neither its shifted embedding's norm input, its projection's
    input [S, 2h] nor its final norm's input (4·β·S·h = 4·2·3·4,096·7,168 = 704,643,072 B fewer
    for the one micro-batch held), and has its projection and final-norm inputs back while it
    recomputes (3·β·S·h = 528,482,304 B more on the transient); its checkpoint keeps the hidden
    state, the decoder's final-norm output, apart from the heads' torch.cat copy (β·S·h =
    176,160,768 B): 0 B in all, 88.24 and 93.88 GB. Transformer Engine's placeholder weight
    gradients (model/terms/dummy_wgrads.py), one BF16 tensor per distinct weight shape at tp 1:
    MLA's five [1,536, 7,168], [24,576, 1,536], [576, 7,168], [32,768, 512], [7,168, 16,384],
    the dense MLP's [36,864, 7,168] and [7,168, 18,432], the experts' (and shared expert's)
    [4,096, 7,168] and [7,168, 2,048], MTP's eh_proj [7,168, 14,336] and the output layer
    [129,280, 7,168]: 3,313,893,376 B more, 91.56 and 97.19 GB."""
    from trainplan.model.megatron_fsdp_buckets import non_unit_buckets
    from trainplan.model.terms.split_key import SplitKey
    from trainplan.model.terms.stage_params import layer_units, non_unit_params
    from trainplan.scenarios.catalogue import get_model

    m = get_model("deepseek-v3").model
    assert non_unit_buckets(m.arch, 1, 129_280, 1, 1, 0, 0, 1024, False) == (
        127 * 1024 * 7168,
        71 * 1024 * 14_336,
    )
    lay = Layout.of(dp=1024, ep=8, framework="megatron", zero_stage=3, recompute="full")
    case = build_case(
        {"model": "deepseek-v3", "gpu": "H100-SXM", "num_gpus": 1024, "dp": 1024, "ep": 8,
         "zero_stage": 3, "framework": "megatron", "recompute": "full", "micro_batch_size": 3,
         "global_batch_size": 15360}
    )  # fmt: skip
    est = case.evaluate()
    st = est.stages[0].state
    key = SplitKey.of(m, None, 1, 1, 1, 8, lay.uneven_stages, 1, "megatron", None, lay.schedule)
    u = sum(layer_units(key)[0])
    assert st.buffers_bytes == 4 * (4 * u + 1_042_284_544)
    whole = non_unit_params(key)[0]
    assert whole == 2 * 926_679_040 + 102_760_448 + 4 * 7168
    U = 2 * 8 * 3 * 4096 * 7168
    a = est.stages[0].activations
    assert a.moe_forward_bytes - a.recompute_transient_bytes == 4 * U == 5_637_144_576
    # NVLS's 2 MiB of credits (model/terms/nvls_memory.py) on the dp, tp·ep (the token counts'
    # all-gather, run as a ring: no buffers), gradient-statistics, world and tp·dp·cp rings
    nvls = 5 * 2
    assert est.stages[0].communicator_bytes == (
        292 + 2688 + 196 + 76 + 2 * 292 + 484 + 292 + nvls
    ) * 2**20  # fmt: skip
    shapes = [(1536, 7168), (24576, 1536), (576, 7168), (32768, 512), (7168, 16384),
              (36864, 7168), (7168, 18432), (4096, 7168), (7168, 2048), (7168, 14336),
              (129280, 7168)]  # fmt: skip
    dummies = 2 * sum(r * c for r, c in shapes)
    assert dummies == 3_313_893_376
    # beside TE's four grouped-GEMM cuBLAS workspaces, 4 × 33,555,456 B (tp 1: no "mpu" buffer)
    assert int(est.stages[0].persistent_buffers_bytes) == dummies + 4 * 33_555_456
    assert round((float(est.stages[0].total_bytes) - 4 * U - dummies) / 1e9, 2) == 88.24
    assert round((float(est.stages[0].total_bytes) - 4 * U) / 1e9, 2) == 91.56
    assert round(float(est.stages[0].total_bytes) / 1e9, 2) == 97.19
    assert not est.fits


def test_non_unit_bucket_held_where_the_embedding_shares_it():
    """Llama 3 8B at pp 1 over dp 528: bucket_size = max(4e7, 5.28e8) = 5.28e8 is more than
    the embedding's 525,336,576, so the embedding, the final norm and the output layer are one
    bucket (1,050,677,248 elements, 256,513 chunks of 4096, padded to 486·528·4096 =
    1,051,066,368), allocated at the output layer's backward and reduced after the embedding's
    at the end: held beside the layers' queue, whose head bucket is then empty
    (first = 0: the steady queue, ⌊1e9 / p⌋ + 2 layer buckets of p elements). At dp 8 (bucket
    4e7) the embedding is a bucket alone and nothing is held."""
    from trainplan.model.megatron_fsdp_buckets import non_unit_buckets, padded_layer_unit
    from trainplan.scenarios.catalogue import get_model

    arch = get_model("llama3-8b").model.arch
    assert non_unit_buckets(arch, 1, 128_256, 1, 1, 0, 0, 528, False) == (0, 1_051_066_368)
    assert non_unit_buckets(arch, 1, 128_256, 1, 1, 0, 0, 8, False) == (16_033 * 8 * 4096, 0)
    st = build_case(
        {"model": "llama3-8b", "gpu": "H100-SXM", "num_gpus": 528, "dp": 528, "zero_stage": 3,
         "framework": "megatron", "global_batch_size": 1056}
    ).evaluate().stages[0].state  # fmt: skip
    p = padded_layer_unit(arch, False, 1, 528)
    assert st.buffers_bytes == 4 * ((10**9 // p + 2) * p + 1_051_066_368)
