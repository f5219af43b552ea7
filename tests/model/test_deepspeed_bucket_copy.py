"""DeepSpeed's transient gradient copies, derived by hand from DeepSpeed edaa7221
(model/deepspeed_mechanisms.py ``_deepspeed``):

* ZeRO-1/2's reduction, ``stage_1_and_2.py`` ``allreduce_bucket``: ``tensor =
  self.flatten(bucket)`` concatenates the IPG bucket's slices into a new tensor of up to
  ``reduce_bucket_size`` = 5e8 elements in the parameters' dtype (``communication_data_type`` is
  theirs by default), all-reduced and copied back (``allreduce_and_copy_with_multiple_ranks``),
  one at a time on one stream: 5e8 × 2 B = 1e9 B beside the IPG bucket wherever the reduction
  runs inside the backward — ZeRO-2 always, ZeRO-1 under ``overlap_comm`` (without it ZeRO-1
  reduces after the backward, ``engine.allreduce_gradients`` → ``reduce_gradients``, the
  activations freed: not counted);
* ZeRO-3's step, ``stage3.py`` ``_prepare_fp32_grad_for_sub_group``:
  ``self.flatten(self.averaged_gradients[i]).to(fp32)``, the BF16 flattened copy alive while the
  FP32 one is made: 2 + 4 B a sub-group element (was 4), at most ``sub_group_size`` = 1e9.
"""

from __future__ import annotations

import trainplan
from trainplan.model.mechanisms import mechanism

P = 8_030_261_248


def _state(zero: int, **more: object):
    e = trainplan.evaluate(
        model="llama3-8b", num_gpus=32, gpu="H100-SXM", framework="deepspeed", dp=32,
        zero_stage=zero, micro_batch_size=1, global_batch_size=256, **more,
    )  # fmt: skip
    return e.stages[0].state


def test_zero2_counts_the_flattened_bucket_beside_the_ipg_bucket():
    """ZeRO-2: IPG bucket 5e8 × 2 B + its flattened copy 5e8 × 2 B = 2e9 B in backward (was
    1e9); with ``overlap_comm`` the two IPG buffers and the copy, 3e9 B."""
    assert _state(2).buffers_bytes == 2 * 10**9
    assert _state(2, deepspeed_overlap_comm=True).buffers_bytes == 3 * 10**9


def test_zero1_counts_it_only_under_overlap_comm():
    """ZeRO-1 reduces inside the backward only with ``overlap_comm`` (the hooks, at the
    boundary): 2 × 1e9 + 1e9 = 3e9 B; without it the reduction follows the backward: 1e9 B."""
    assert mechanism("deepspeed", 1).bucket_bytes == 10**9
    assert mechanism("deepspeed", 1, overlap_comm=True).bucket_bytes == 3 * 10**9


def test_zero3_step_holds_the_bf16_flat_copy_and_its_fp32_cast():
    """ZeRO-3 on 32 GPUs: shard 8,030,261,248 / 32 = 250,945,664 elements (under the 1e9
    sub-group): (2 + 4) × 250,945,664 = 1,505,673,984 B, plus the persistent 1e9 B IPG bucket:
    2,505,673,984 B at the step (was 4 × shard + 1e9 = 2,003,782,656)."""
    shard = P // 32
    assert shard == 250_945_664
    assert _state(3).step_bytes == 6 * shard + 10**9 == 2_505_673_984
