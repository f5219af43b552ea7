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

from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.fsdp2_replay import _windows, expand_runs, order_runs
from trainplan.model.schedule import stage_order
from trainplan.model.terms.fields import INSIDE_DOMAIN, Context, LayoutFields
from trainplan.model.terms.runtime_unshard import gather_output_bytes
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
    2,101,346,304 + 1,050,673,152 / 16 = 2,167,013,376 B) is another matter. At v 2 (each
    chunk's one copy-out comes before the rank's first backward, under the peak:
    :func:`test_copy_out_before_the_first_backward`), under Meta's runtime
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


def _copy_outs(case: Case) -> list[tuple[Any, Any, Any]]:
    """Per stage of ``case`` (``fsdp2``, ``interleaved``, v ≤ 3): (the most its GPU can hold
    allocated at a chunk's copy-out, the peak the model reports, the stage's gradient bytes).

    Each chunk is waited for once, before its first pass; that pass is a forward and comes before
    the rank's first backward (asserted on :func:`model.schedule.stage_order`, Megatron-Core's
    order, which is ``ScheduleInterleaved1F1B``'s). So no gradient exists yet: the unsharded
    gradients are made by the step's first backward and handed to the reduce-scatter (the
    reference dropped) by ``FSDPParamGroup.post_backward`` after the last (pytorch/pytorch
    002a76fb ``_fsdp_param_group.py``); the state is the forward/backward state less its
    gradients and its buffers (one unit's unsharded gradient). Beside it: the window's weights
    (every chunk's, in the state), one all-gather output (:func:`gather_output_bytes`, the
    term's own figure) and the activations of the forwards run so far — among those in flight at
    the first backward, so at most the activation term's kept lines (the layers', the
    embedding's and output layer's, the stage outputs and receive buffers, activation offload's
    buffer), without its transients; and the persistent buffers."""
    c = Context(case.model, case.training, case.device, case.options, case.vocab_multiple)
    fields = LayoutFields(case.layout, case.training.global_batch_size, 0, INSIDE_DOMAIN)
    pp, v = case.layout.pp, case.layout.virtual_stages
    out = []
    for stage in case.evaluate().stages:
        order = stage_order(pp, fields.m, "interleaved", v, stage.stage)
        first_backward = next(i for i, (kind, _, _) in enumerate(order) if kind == "B")
        firsts = {chunk: (i, kind) for i, (kind, _, chunk) in reversed(list(enumerate(order)))}
        assert all(kind == "F" and i < first_backward for i, kind in firsts.values())
        s, a = stage.state, stage.activations
        kept = a.layers_bytes + a.embedding_bytes + a.pipeline_output_bytes + a.offload_buffer_bytes
        before = s.backward_bytes - s.gradients_bytes - s.buffers_bytes
        output = gather_output_bytes(c, fields.at(stage.stage))
        instant = before + output + kept + stage.persistent_buffers_bytes
        out.append((instant, stage.allocated_bytes, s.gradients_bytes))
    return out


def test_copy_out_before_the_first_backward():
    """Llama 3 8B at dp 8 × pp 2, v 2, m 4, ZeRO-2, full recompute, 1,024 tokens, micro-batch 1:
    rank 0 holds P = 525,336,576 (the embedding) + 16 × 218,112,000 = 4,015,128,576 parameters,
    two chunks of 8 layers. Its order is F0 F0 F1 F1 F0 B1 …: chunk 1's copy-out comes after
    two forwards, before the first backward. There at most (:func:`_copy_outs`):

    * the whole BF16 weights and the FP32 shard, 2P + 4P/8 = 10,037,821,440, and the moments'
      shards, 8P/8 = 4,015,128,576: 3.5P = 14,052,950,016;
    * one all-gather output, the embedding's, 2 × 525,336,576 = 1,050,673,152;
    * the five forwards in flight at the first backward (warm-up 2·(pp − 1) + (v − 1)·pp = 4,
      and one), 8 layers' checkpoints each, 5 × 8 × 1,024 × 4,096 × 2 = 5 × 8 × 8,388,608 =
      335,544,320, their five outputs and m·(2v − 1) = 12 receive buffers, 17 × 8,388,608 =
      142,606,336:

    15,581,773,824 B. The peak is the optimizer step's: the state with the FP32 gradients 4P and
    their FP32 shard 4P/8, 8P = 32,121,028,608 (forward/backward: 7.5P + the buffers' unit
    1,050,673,152 + activations 763,502,592 = 31,927,640,064). Under it by 16,539,254,784, more
    than the gradients the copy-out comes before, 4P = 16,060,514,304."""
    P = 525_336_576 + 16 * 218_112_000
    assert P == 4_015_128_576
    state = Fraction(7, 2) * P
    assert state == 14_052_950_016
    output, kept = 2 * 525_336_576, 5 * 8 * 8_388_608 + 17 * 8_388_608
    assert (output, kept) == (1_050_673_152, 478_150_656)
    instant = state + output + kept
    assert instant == 15_581_773_824
    case = Case.of("llama3-8b", "H100-SXM", framework="fsdp2", dp=8, pp=2, zero_stage=2,
                   seq_len=1024, global_batch_size=32, micro_batch_size=1, recompute="full",
                   schedule="interleaved", virtual_stages=2)  # fmt: skip
    rank0 = _copy_outs(case)[0]
    assert rank0 == (instant, 8 * P, 4 * P) == (15_581_773_824, 32_121_028_608, 16_060_514_304)
    assert 8 * P - instant == 16_539_254_784 > 4 * P


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(["llama3-8b", "llama3-70b"]),
    seq=st.sampled_from([256, 512, 1024, 2048]),
    pp=st.integers(2, 4),
    v=st.integers(2, 3),
    dp=st.sampled_from([2, 4, 8, 16, 64]),
    tp=st.sampled_from([1, 2, 8]),
    rounds=st.integers(1, 4),
    zero=st.sampled_from([2, 3]),
    fp8=st.booleans(),
)
def test_copy_out_stays_under_the_peak(model, seq, pp, v, dp, tp, rounds, zero, fp8):
    """Where the copy-out could bind at v ≤ 3 (the activations small beside a unit: full
    recompute, short sequences, micro-batch 1; small dp, where the window's weights weigh most
    against the shards), the most a GPU holds at a chunk's copy-out (:func:`_copy_outs`) is
    under the model's peak by at least the stage's gradients: the peak counts them, ``g`` B a
    parameter, and the buffers' unit, ``w·U``, which alone covers the output (less under
    torchao's FP8 all-gather), and neither exists before the first backward. So
    :func:`model.terms.runtime_unshard.runtime_unshard_term` adds nothing there."""
    fp8_args = {"precision": "fp8", "fp8_param_gather": True} if fp8 else {}
    case = Case.of(model, "H100-SXM", framework="fsdp2", dp=dp, tp=tp, pp=pp, zero_stage=zero,
                   seq_len=seq, global_batch_size=dp * rounds * pp, micro_batch_size=1,
                   recompute="full", schedule="interleaved", virtual_stages=v,
                   **fp8_args)  # fmt: skip
    for instant, peak, gradients in _copy_outs(case):
        assert instant + gradients <= peak


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
