"""Megatron-FSDP's gradient reduce-scatter queue on MoE layers, hand-derived from Megatron-LM's
code (megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py, d98e8a64dd).

``_get_parameter_groups`` keys the buckets by (dtype, is_expert_param, requires_grad,
fsdp_unit_id), ``".experts."`` in the name marking the routed experts, and its step 4 makes each
(fsdp_unit_id, is_expert_param) pair one bucket group. ``GradReducePipeline.reduce_gradients``
reduces a group once every parameter's gradient is in: ``wait_for_previous_grad_reduce`` first
pops the oldest queued bucket while the queued buckets exceed ``suggested_RS_queue_capacity``,
then ``_bucket_group_gradient_reduce`` queues the group's buckets, each freed when popped.

``_simulate`` replays that for a stage whose layers each fill their expert group (the dense one
allocated beside it) and then their dense group; the closed form must equal it where each group
and the head are one bucket, and bound it however they split.
"""

import itertools

from trainplan.model.layout import Layout
from trainplan.model.mechanism_record import moe_queue_elements
from trainplan.model.mechanisms import mechanism
from trainplan.optimizer.case import Case


def _simulate(
    expert: list[int], dense: list[int], heads: list[int], layers: int, capacity: int
) -> int:
    """The most gradient elements alive at once: the queue plus the buckets being filled
    (``expert`` and ``dense``: one layer's buckets of each group; ``heads``: the buckets of the
    parameters outside the layers, reduced first, one group each)."""
    queue: list[int] = []
    peak = 0

    def reduce(group: list[int], filling: int) -> None:
        nonlocal peak
        peak = max(peak, sum(queue) + filling)
        while sum(queue) > capacity:  # wait_for_previous_grad_reduce
            queue.pop(0)
        queue.extend(group)  # _bucket_group_gradient_reduce(async_op=True)

    for head in heads:
        reduce([head], head)
    for _ in range(layers):
        reduce(expert, sum(expert) + sum(dense))
        reduce(dense, sum(dense))
    return peak


def test_the_closed_form_is_the_queue_where_each_group_is_one_bucket():
    for e, d, layers, head in itertools.product(
        (1, 7, 30, 90), (1, 5, 30, 80), (1, 2, 3, 5, 9), (0, 20, 150, 400)
    ):
        unit = e + d
        for capacity in (2 * unit, 2 * unit + 13, 5 * unit + 3, 400):
            if capacity < 2 * unit:
                continue
            heads = [head] if head else []
            assert moe_queue_elements(unit, e, head, layers, capacity) == _simulate(
                [e], [d], heads, layers, capacity
            ), (e, d, layers, head, capacity)


def test_the_bound_holds_however_the_groups_and_head_split():
    for e, d, layers, heads in itertools.product(
        (9, 40, 90), (3, 30, 80), (1, 2, 4, 9), ([], [60, 90], [200, 7, 100])
    ):
        unit = e + d
        for capacity in (2 * unit, 3 * unit + 11, 500):
            if capacity < 2 * unit:
                continue
            split = _simulate([e // 3, e - e // 3], [d - d // 4, d // 4], heads, layers, capacity)
            bound = moe_queue_elements(unit, e, sum(heads), layers, capacity, single=False)
            assert bound >= split, (e, d, layers, heads, capacity)


def test_mixtral_32_dp32_zero3_holds_three_layers_and_a_dense_group():
    """The layout of `trainplan search --model mixtral-8x7b --gpus 32`: dp 32, ZeRO-3
    (Megatron-FSDP, FP32 main gradients), recompute full. A layer on one GPU: the experts
    E = 8 × 3 × 4,096 × 14,336 = 1,409,286,144 elements; the dense group D = QKV 4,096 × (4,096
    + 2·1,024) + proj 4,096² + two norms 2·4,096 + router 8 × 4,096 = 41,984,000; u =
    1,451,270,144 and the queue's capacity C = max(1e9, 2u) = 2u. After the drain before a
    layer's expert group is queued the queue keeps E, D, E, D of the two layers before (2u ≤
    C; one more expert group would pass it) with the previous dense group queued behind: the
    expert group filling, its dense bucket beside it: 3u + D alive, 4 B each. Counted as whole
    units before: four of them (4u = 23.22 GB). The output layer's bucket (32,000 × 4,096 +
    4,096, padded to 1,001 × 32 × 4,096 = 131,203,072) waits beside two layers only."""
    e, d = 8 * 3 * 4096 * 14336, 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 2 * 4096 + 8 * 4096
    unit = e + d
    assert (e, d, unit) == (1_409_286_144, 41_984_000, 1_451_270_144)
    lay = Layout.of(dp=32, framework="megatron", zero_stage=3, recompute="full")
    est = Case.of("mixtral-8x7b", "H100-SXM", lay).evaluate()
    assert est.stages[0].state.buffers_bytes == 4 * (3 * unit + d) == 17_583_177_728
    assert 4 * 4 * unit == 23_220_322_304  # whole units
    assert 131_203_072 + 2 * unit < 3 * unit + d
    assert est.fits


def test_fp8_primary_weights_take_the_bound_which_meets_the_count_at_twice_the_unit():
    """Under FP8 primary weights a group is two buckets (FP8 weights, BF16 norms and router),
    so the drain may stop inside one; what the queue keeps after a drain is at most C = 2u:
    C + D + u = 3u + D, the exact count of one-bucket groups here too."""
    e, d = 1_409_286_144, 41_984_000
    unit = e + d
    exact = moe_queue_elements(unit, e, 131_203_072, 32, 2 * unit)
    assert moe_queue_elements(unit, e, 131_203_072, 32, 2 * unit, single=False) == exact
    assert exact == 3 * unit + d


def test_qwen3_235b_small_layers_fill_the_floor_as_whole_units_did():
    """Qwen3 235B-A22B at tp 2, ep 4, etp 2: 36,184,320 dense and 301,989,888 expert elements
    a layer on a GPU, u = 338,174,208, so C = 1e9 (the floor). The run E, D, E, D, E = 3E + 2D
    = 978,338,304 fits C, so at an expert group's drain that run, the dense group queued after
    it and the layer filling are alive: 3E + 2D + D + u = 4u = 1,352,696,832, what four whole
    units were: this layout does not move."""
    dense, expert = 36_184_320, 301_989_888
    unit = dense + expert
    assert 3 * expert + 2 * dense == 978_338_304 <= 10**9
    m = mechanism("megatron", 3)
    apart = m.reduce_queue_elements(unit, 0, 47, expert=expert)
    assert apart == m.reduce_queue_elements(unit, 0, 47) == 4 * unit == 1_352_696_832
