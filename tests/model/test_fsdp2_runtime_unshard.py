"""The all-gather output PyTorch's multi-stage pipeline runtime holds on the compute stream beside
the unsharded parameters it is copied into (model/terms/runtime_unshard.py).

Read from pytorch/pytorch 002a76fb ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``:
``FSDPCommContext.get_all_gather_streams`` returns ``(current_stream, current_stream)`` for an
``async_op`` unshard (the side streams only for FSDP's own hooks, ``not async_op`` in
``FORWARD``/``PRE_BACKWARD``), so ``foreach_all_gather`` (``_fsdp_collectives.py`` 010ae4a8)
allocates the copy-in buffer and the all-gather output from the compute stream's pool;
``wait_for_unshard`` copies the output out into newly allocated unsharded parameters and, for an
``async_op`` gather, drops it right after (``self._all_gather_result = None``). The runtime's
``UNSHARD`` (PyTorch 2.13.0 ``schedules.py`` ``_PipelineScheduleRuntime._step_microbatches``) is
``unshard(async_op=True)``.
"""

from __future__ import annotations

from trainplan.model.fsdp2_replay import _windows, expand_runs, order_runs
from trainplan.optimizer.case import Case


def _stages(v: int, dp: int = 16, **training: object) -> list[tuple[int, int]]:
    case = Case.of("llama3-8b", "A100-80GB", framework="fsdp2", dp=dp, pp=2, zero_stage=2,
                   seq_len=512, global_batch_size=256, schedule="interleaved",
                   virtual_stages=v, **training)  # fmt: skip
    return [(s.state.gathered_bytes, s.stream_pool_bytes) for s in case.evaluate().stages]


def test_llama3_8b_one_output_beside_the_window():
    """Llama 3 8B at dp 16 × pp 2, v 4, ZeRO-2 (torchtitan's split: rank 0's first chunk holds
    the embedding, 128,256 × 4,096 = 525,336,576 elements, rank 1's last the output layer, as
    many; a layer 218,112,000): the largest unit on either rank is 525,336,576 elements, so the
    runtime's copy-out holds 2 B × 525,336,576 = 1,050,673,152 B beyond the window's three whole
    chunks on each. The side stream's pool (FSDP's hooks' two outputs and a copy-in buffer,
    2,101,346,304 + 1,050,673,152 / 16 = 2,167,013,376 B) is another matter. At v 2 (every
    chunk enters once, at the step's start, and is waited for in the warm-up), under Meta's runtime
    (``pipeline_frees_stage_tensors``) and without sharding (dp 1:
    ``world_size == 1`` copies the shard without an output): nothing."""
    emb = 128_256 * 4_096
    assert emb == 525_336_576
    pool = 4 * emb + 2 * emb // 16
    assert _stages(4) == [(2 * emb, pool)] * 2 == [(1_050_673_152, 2_167_013_376)] * 2
    assert _stages(2) == [(0, pool)] * 2
    assert _stages(4, pipeline_frees_stage_tensors=True) == [(0, pool)] * 2
    assert _stages(4, dp=1) == [(0, 0)] * 2


def test_llama31_405b_fp8_gather_output():
    """Llama 3.1 405B, dp 8 × tp 8 × pp 8, v 8, FP8 with torchao's FP8 all-gather
    (``fp8_param_gather``): a layer's linear weights on one GPU are (2 × 16,384² + 2 × 16,384 ×
    1,024 + 3 × 16,384 × 53,248)/8 = 3,187,671,040/8 = 398,458,880 elements of the layer's
    398,491,648 (its two norms, 32,768, whole on every tp rank). ``foreach_all_gather`` views
    every input as ``uint8`` once one is, so the output holds the linears at 1 B and the norms
    at 2: 398,458,880 + 2 × 32,768 = 2 × 398,491,648 − 398,458,880 = 398,524,416 B, counted
    once at the peak (the side stream's pool 2 + 1/8 times, 846,864,384 B)."""
    linear = (2 * 16_384**2 + 2 * 16_384 * 1_024 + 3 * 16_384 * 53_248) // 8
    assert linear == 398_458_880
    output = linear + 2 * 32_768
    assert output == 2 * 398_491_648 - linear == 398_524_416
    case = Case.of("llama3-405b", "H100-SXM", seq_len=8192, global_batch_size=256,
                   framework="fsdp2", dp=8, tp=8, pp=8, zero_stage=2, schedule="interleaved",
                   virtual_stages=8, precision="fp8", fp8_param_gather=True, recompute="full",
                   micro_batch_size=1)  # fmt: skip
    stage = case.evaluate().stages[1]
    pool = 2 * output + output // 8
    assert (stage.state.gathered_bytes, stage.stream_pool_bytes) == (output, pool)
    assert pool == 846_864_384


def test_a_regathered_chunk_is_waited_for_before_a_backward():
    """Where the term meets the peak: at v ≥ 4 a chunk that re-enters the runtime's window
    (``_add_unshard_reshard``, three stages kept) has, on every rank, some first pass after its
    ``UNSHARD`` that is a backward (``_assert_unsharded`` waits, and the copy-out runs, with the
    steady phase's activations all live). Replayed from the windows: pp 2, v 4, m 4 rank 0
    enters a chunk 11 times, 5 of them before a backward (``4UNSHARD`` after ``0RESHARD``, then
    ``6B1 2F2 4B0``: chunk 2 of :data:`tests.model.test_fsdp2_runtime_gathers.RANK0`)."""

    def entries(pp: int, v: int, m: int, rank: int) -> dict[str, int]:
        passes = expand_runs(order_runs(pp, m, v, rank))
        held: frozenset[int] = frozenset()
        waiting: set[int] = set()
        kinds: dict[str, int] = {}
        for (kind, chunk), window in zip(passes, _windows(passes), strict=True):
            waiting |= window - held
            held = window
            if chunk in waiting:
                waiting.discard(chunk)
                kinds[kind] = kinds.get(kind, 0) + 1
        return kinds

    assert entries(2, 4, 4, 0) == {"F": 6, "B": 5}
    for pp, v, m in ((2, 4, 2), (4, 4, 16), (4, 6, 8), (8, 8, 32)):
        for rank in range(pp):
            assert entries(pp, v, m, rank).get("B", 0) > 0, (pp, v, m, rank)


def test_side_pool_holds_the_next_copy_in_buffer():
    """FSDP's own hooks gather on ``all_gather_copy_in_stream`` (``get_all_gather_streams``, not
    ``async_op`` in ``FORWARD``): in forward the previous unit's output stays in
    ``comm_ctx.all_gather_state`` while ``foreach_all_gather`` casts the next unit's shard into
    its flat buffer (``_get_param_all_gather_inputs``), allocates the next output and copies the
    buffer in; the buffer's split views live to the function's return. Llama 3 8B, dp 8, ZeRO-3
    (the embedding, 525,336,576 elements, the largest unit): 2 × 2 × 525,336,576 +
    2 × 525,336,576 / 8 = 2,101,346,304 + 131,334,144 = 2,232,680,448 B, where the two outputs
    alone were 2,101,346,304."""
    emb = 525_336_576
    case = Case.of("llama3-8b", "H100-SXM", framework="fsdp2", dp=8, zero_stage=3,
                   seq_len=2048, global_batch_size=64)  # fmt: skip
    stage = case.evaluate().stages[0]
    assert stage.stream_pool_bytes == 2 * 2 * emb + 2 * emb // 8 == 2_232_680_448


def test_dualpipev_counts_both_stages_of_a_rank():
    """DualPipeV places stages r and 2·pp − 1 − r on rank r: Llama 3 8B at pp 4 under ``fsdp2``
    with torchao's FP8 all-gather, rank 0 holds layers 0–3 and 29–31 and both the embedding and
    the output layer (the V's last stage): 7 × 218,112,000 + 2 × 525,336,576 + 4,096 (the final
    norm) = 2,577,461,248 parameters, every one of the seven layers' 218,103,808 linear elements
    gathered at 1 B: its whole weights 2 × 2,577,461,248 − 7 × 218,103,808 = 3,628,195,840 B
    beside the FP32 shard 4 × 2,577,461,248 / 8 = 1,288,730,624 B; its largest all-gather
    output the embedding's (or the output layer's), 2 × 525,336,576 B, so its side pool is
    2.125 of that, 2,232,680,448 B. Rank 1 (stages 1 and 6, layers only): one layer's output,
    2 × 218,112,000 − 218,103,808 = 218,120,192 B (the linears at 1 B, the norms at 2), pool
    2.125 × 218,120,192 = 463,505,408 B. The rank's units are read over both stages
    (``fp8_gather_units`` of the rank's layers, model/terms/stage_params.py)."""
    case = Case.of("llama3-8b", "H100-SXM", framework="fsdp2", dp=8, pp=4, zero_stage=2,
                   seq_len=2048, global_batch_size=64, schedule="dualpipev", virtual_stages=2,
                   precision="fp8", fp8_param_gather=True)  # fmt: skip
    stages = case.evaluate().stages
    layer, linear, emb = 218_112_000, 218_103_808, 525_336_576
    P = 7 * layer + 2 * emb + 4_096
    assert stages[0].dense_params == P == 2_577_461_248
    whole = 2 * P - 7 * linear
    assert whole == 3_628_195_840
    assert stages[0].state.weights_bytes == whole + 4 * P // 8 == 4_916_926_464
    assert stages[0].stream_pool_bytes == 2 * 2 * emb + 2 * emb // 8 == 2_232_680_448
    output = 2 * layer - linear
    assert output == 218_120_192
    assert stages[1].stream_pool_bytes == 2 * output + output // 8 == 463_505_408


def test_fp8_cast_intermediates_stay_under_the_side_pool():
    """torchao's ``fsdp_pre_all_gather`` (pytorch/ao 36027d82d ``torchao/float8/fsdp_utils.py``)
    casts each FP8 weight's FP32 shard through ``_ToFloat8ConstrFunc.forward``
    (``float8_training_tensor.py``): ``tensor.to(float32) * scale`` (a new FP32 copy; ``.to`` of
    an FP32 shard is the shard) and ``to_fp8_saturated``'s ``clamp`` (a second) live together
    while ``.to(float8)`` writes the 1-B shard: ``8·n/D`` B for a weight of ``n`` elements on the
    GPU, one weight at a time, before the unit's output is allocated; the FP8 shards made so far
    wait for the copy-in. Without ``precompute_float8_dynamic_scale_for_fsdp``,
    ``tensor_to_amax``'s ``torch.abs`` (one FP32 copy) comes and goes first. The side pool at
    that moment (the previous output, the intermediates, the shards so far) against the figure
    counted, ``(2 + 1/D)`` outputs, at D = 2 and the last MLP weight (torchtitan registers
    ``attention`` before ``feed_forward``: wq, wk, wv, wo, w1, w2, w3), for Llama 3 8B, 70B and
    405B layers at tp 1 (the ratios are tp's alike): under it each time."""
    for h, kv, f in ((4_096, 1_024, 14_336), (8_192, 1_024, 28_672), (16_384, 1_024, 53_248)):
        attention, mlp = 2 * h * h + 2 * h * kv, 3 * h * f
        output = attention + mlp + 2 * 2 * h  # the linears at 1 B, the two norms at 2
        n, d = h * f, 2
        before = (attention + 2 * h * f) // d  # the FP8 shards made before w3's
        assert output + 8 * n // d + before < 2 * output + output // d, h
