"""DeepSpeed ZeRO-2/3 with ``offload_optimizer``: the gradient partition lives on the host, not
the GPU (model/offload.py ``offload_memory`` / ``_host_grads``), derived by hand from DeepSpeed
edaa7221:

* ZeRO-2, ``deepspeed/runtime/zero/stage_1_and_2.py`` ``copy_grads_in_partition``: under
  ``cpu_offload`` it accumulates through the host (``async_accumulate_grad_in_cpu_via_gpu``) and
  copies into ``single_partition_of_fp32_groups[i].grad`` (pinned host FP32), then ``return``s
  before ``self.grads_in_partition = torch.empty(...)`` on the GPU;
* ZeRO-3, ``deepspeed/runtime/zero/stage3.py``: ``self.device`` is the CPU under
  ``offload_optimizer`` and ``grad_partitions_flat_buffer`` (``gradient_accumulation_dtype``,
  BF16 here) is allocated on it, beside the FP32 sub-group gradients
  (``subgroup_gradient_buffer``, on ``subgroup_to_device[i]`` = the CPU).
"""

from __future__ import annotations

import trainplan

P70 = 70_553_706_496
P8 = 8_030_261_248


def _evaluate(model: str, zero: int, **more: object) -> trainplan.Estimate:
    return trainplan.evaluate(
        model=model, num_gpus=8, gpu="H100-SXM", framework="deepspeed", dp=8, zero_stage=zero,
        micro_batch_size=1, global_batch_size=2048, offload_optimizer=1, **more,
    )  # fmt: skip


def test_llama3_70b_zero3_offload_by_hand():
    """Llama 3 70B, dp 8, ZeRO-3, full recompute, b 1 (the search's answer before this fix):
    shard 70,553,706,496 / 8 = 8,819,213,312 elements. GPU gradients 0 (were 2 B × shard =
    17,638,426,624 B); host (12 B optimizer + 4 B FP32 gradients + 2 B BF16 flat gradient
    buffer) × shard = 158,745,839,616 B (was 141,107,412,992); the peak 63.45 → 45.81 GB,
    45,808,497,408 B. NCCL's communicators by placement with their channels' set-up
    (model/terms/comm_memory.py): the dp ring and ZeRO-3's world barrier, both in one H100
    node, 24 × 12 + (32 × 3 + 2) × 2 = 484 MiB each, against 32 × 12 = 384 before: + 200 MiB,
    46,018,212,608 B; and NVLink SHARP's (model/terms/nvls_memory.py), 2 MiB of credits on each
    and, on the dp ring, whose gathers and reduce-scatters NCCL runs as NVLS, 16 × 2 × (128 KiB
    × 8) × 8 = 256 MiB of buffers (the barrier's one-float all-reduce runs as a ring, so its
    buffers are never set up): + 260 MiB, 46,290,842,368 B. DeepSpeed ZeRO-3's gathered weights
    from the walk of its coordinator (model/deepspeed_gathered.py): at tp 1 the output weight,
    128,256 · 8,192 = 1,050,673,152 elements, alone holds n_available past 1e9, so nothing is
    prefetched, and the root module's 1.05e9 in the trace puts every layer's backward beyond
    the reuse distance: at the turn the output weight and the gate-up being computed, 2 ·
    28,672 · 8,192 = 469,762,048: 1,520,435,200 elements, against the turn bound's layer kept
    (855,654,400) + 5e7 bucket beside them: 2 · 905,654,400 = 1,811,308,800 B less,
    44,479,533,568 B. Under full recomputation the walk has the recomputed forward
    (model/deepspeed_trace.py): layer 79's recomputed gate-up and down are released within the
    reuse distance of their backward (down's 234,881,024 between gate-up's recomputation and
    its backward, nothing between down's), so both are kept and the turn holds the output
    weight, the gate-up and the down, 28,672 · 8,192 = 234,881,024: 1,755,316,224 elements,
    2 · 234,881,024 = 469,762,048 B more, 44,949,295,616 B."""
    shard = P70 // 8
    assert shard == 8_819_213_312
    e = _evaluate("llama3-70b", 3, recompute="full")
    state = e.stages[0].state
    assert state.gradients_bytes == 0
    assert state.host_bytes == (12 + 4 + 2) * shard == 158_745_839_616
    assert 45_808_497_408 == 63_446_924_032 - 2 * shard
    ring = 24 * 12 + (32 * 3 + 2) * 2
    assert e.peak.communicator_bytes == (2 * ring + 2 + 256 + 2) * 2**20 == 1228 * 2**20
    before = 45_808_497_408 + (2 * (484 - 384) + 260) * 2**20
    assert before == 46_290_842_368
    assert 2 * (1_050_673_152 + 469_762_048) == 3_040_870_400
    assert state.gathered_bytes == 3_040_870_400 + 2 * 234_881_024 == 3_510_632_448
    assert before - 2 * 905_654_400 == 44_479_533_568
    assert e.total_bytes == 44_479_533_568 + 2 * 234_881_024 == 44_949_295_616


def test_llama3_8b_zero2_offload_by_hand():
    """Llama 3 8B, dp 8, ZeRO-2, m 256: shard 1,003,782,656. GPU gradients: only the staging
    buffer ``temp_grad_buffer_for_gpu_offload`` of the largest tensor, the embedding, 128,256 ×
    4,096 × 2 B = 1,050,673,152 (was + 2 B × shard = 3,058,238,464 B). Host unchanged:
    (12 + 4 FP32 gradients + 2 ``accumulated_grads_in_cpu``) × shard + the host staging twin =
    19,118,760,960 B."""
    shard = P8 // 8
    staging = 128_256 * 4_096 * 2
    e = _evaluate("llama3-8b", 2)
    state = e.stages[0].state
    assert state.gradients_bytes == staging == 1_050_673_152
    assert state.host_bytes == 18 * shard + staging == 19_118_760_960


def test_zero3_with_parameters_offloaded_keeps_the_bf16_buffer_on_the_host():
    """With ``offload_param`` too the weights move as before, and the BF16 gradient buffer is
    counted on the host: (2 weights + 12 + 4 + 2) × shard = 176,384,266,240 B (was 158.75 GB)."""
    shard = P70 // 8
    e = _evaluate("llama3-70b", 3, offload_params=True)
    assert e.stages[0].state.gradients_bytes == 0
    assert e.stages[0].state.host_bytes == 20 * shard == 176_384_266_240


def test_zero1_keeps_its_whole_gradients_on_the_gpu():
    """ZeRO-1 under offload accumulates whole ``.grad``s on the GPU between boundaries (only
    its reduction differs): 2 B × P8 stays, beside the staging buffer."""
    e = _evaluate("llama3-8b", 1)
    assert e.stages[0].state.gradients_bytes == 2 * P8 + 128_256 * 4_096 * 2
