"""FSDP2's copies around its collectives on the compute stream, derived by hand from PyTorch's
``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py`` (002a76fb: ``wait_for_unshard``,
``post_backward``), ``_fsdp_collectives.py`` and ``_fsdp_param.py`` (010ae4a8:
``foreach_all_gather_copy_out``, ``foreach_reduce``, ``to_accumulated_grad_if_needed``,
``accumulate_unsharded_grad_if_needed``): model/fsdp2_copies.py and model/terms/dp_time.py
``grad_accumulation_term``.

Before this term the ``fsdp2`` profile charged none of them: a search under ``fsdp2`` found
ZeRO-3 with many micro-batches (llama3-70b on 256 H100s: dp 128, tp 2, b 1, m 16) 2.66 s a
step (3.4 %) faster than FSDP2 runs it."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import refusal, run_many
from trainplan.model.errors import LayoutError
from trainplan.model.fsdp2_copies import fsdp2_copy_bytes
from trainplan.model.key_rules import check_flat_parameters
from trainplan.model.mechanisms import mechanism
from trainplan.model.op_rates import stream_triad_fraction
from trainplan.model.specs import TrainingSpec
from trainplan.optimizer.case import Case

LLAMA3_8B = 8_030_261_248
"""Every parameter of Llama 3 8B (``trainplan models``)."""

STAGE_1_OF_2 = 16 * 218_112_000 + 4_096 + 128_256 * 4_096
"""Llama 3 8B's second of two pipeline stages, its busiest: 16 layers of
4096·(4096 + 1024 + 1024 + 4096) + 3·4096·14336 + 2·4096 = 218,112,000 parameters, the final
norm (4,096) and the output layer (128,256 × 4,096): 4,015,132,672."""


def test_bytes_per_element_by_hand() -> None:
    """Per unsharded element, bf16 weights (w 2) and FP32 reduction (g 4), torchtitan's policy:

    * every all-gather's copy-out (``split_with_sizes_copy`` from the flat output into the
      parameters, in ``wait_for_unshard`` on the compute stream): read 2, write 2 = 4;
    * every reduce-scatter's copy-in (``torch._chunk_cat`` of the bf16 gradients into the FP32
      reduce-scatter input, the cast in the same kernel): read 2, write 4 = 6;
    * without a pipeline: ZeRO-3 gathers twice a micro-batch, ZeRO-2 once; one reduce-scatter
      each: 4·2 + 6 = 14 and 4 + 6 = 10, every micro-batch;
    * under a pipeline schedule no reduce-scatter until the step's last backward: the first
      backward upcasts its gradient (``.to(float32)``: read 2, write 4 = 6), each later one adds
      into it (read 4 + 2, write 4 = 10), and the one reduce-scatter copies the FP32 sum
      (read 4, write 4 = 8); the once-a-step gather's copy-out goes with the first micro-batch.
      ZeRO-2: 4 + 6 + 8 = 18, then 10; ZeRO-3 (a re-gather a micro-batch too): 22, then 14.
    * BF16 reduction under a pipeline: no upcast, autograd adds in place (read 2 + 2, write 2 =
      6 from the second backward), the reduce-scatter copies 2 + 2: 4 + 0 + 4 = 8, then 6."""
    assert fsdp2_copy_bytes(2, 4, 0, 2, True) == (2 * 4 + 6, 2 * 4 + 6)
    assert fsdp2_copy_bytes(2, 4, 0, 1, True) == (4 + 6, 4 + 6)
    assert fsdp2_copy_bytes(2, 4, 1, 0, False) == (4 + 6 + 8, 10)
    assert fsdp2_copy_bytes(2, 4, 1, 1, False) == (4 + 4 + 6 + 8, 4 + 10)
    assert fsdp2_copy_bytes(2, 2, 1, 0, False) == (4 + 0 + 4, 6)
    for zero, pipelined, want in (
        (3, False, (14, 14)), (2, False, (10, 10)), (2, True, (18, 10)), (3, True, (22, 14)),
    ):  # fmt: skip
        m = mechanism("fsdp2", zero, 2, 4, pipelined=pipelined)
        assert (m.accumulate_first_bytes, m.accumulate_bytes) == want, (zero, pipelined)


_BASE = dict(model="llama3-8b", device="H100-SXM", tp=1, seq_len=4096, framework="fsdp2")


def _copies_s(**layout: object) -> float:
    terms = Case.of(**_BASE, **layout).evaluate().time_terms  # type: ignore[arg-type]
    assert terms is not None
    return terms.grad_accumulation_s


def test_step_seconds_by_hand() -> None:
    """Llama 3 8B on H100s at the triad's share of 3.35 TB/s (the streaming copies').

    * pp 1, dp 8, b 1, B 64: m 8, every GPU holds all 8,030,261,248 elements unsharded at a
      unit's turn: ZeRO-3 8 × 14 B, ZeRO-2 8 × 10 B an element.
    * pp 2, dp 4, b 1, B 32: m 8, ``m + pp − 1`` = 9 backwards on the 1F1B critical path, the
      busiest stage's 4,015,132,672 elements: ZeRO-2 18 + 8 × 10 = 98 B, ZeRO-3 22 + 8 × 14 =
      134 B an element."""
    h100 = 3.35e12 * stream_triad_fraction("H100-SXM")  # type: ignore[operator]
    for zero, moved in ((3, 8 * 14), (2, 8 * 10)):
        got = _copies_s(num_gpus=8, dp=8, pp=1, global_batch_size=64, zero_stage=zero)
        assert got == pytest.approx(moved * LLAMA3_8B / h100), zero
    for zero, moved in ((2, 18 + 8 * 10), (3, 22 + 8 * 14)):
        got = _copies_s(num_gpus=8, dp=4, pp=2, global_batch_size=32, zero_stage=zero)
        assert got == pytest.approx(moved * STAGE_1_OF_2 / h100), zero
    # 8 × 14 B of 8.03e9 elements at 2.97 TB/s: 0.30 s a step
    assert _copies_s(num_gpus=8, dp=8, pp=1, global_batch_size=64, zero_stage=3) == pytest.approx(
        0.3028, abs=5e-4
    )


def test_the_step_and_the_search_charge_them() -> None:
    """The copies are in the step time the search minimises, and a larger micro-batch (fewer
    micro-batches a step) pays them fewer times: b 2 half of b 1's."""
    one = Case.of(**_BASE, num_gpus=8, dp=8, pp=1, global_batch_size=64, zero_stage=3)
    two = Case.of(
        **_BASE, num_gpus=8, dp=8, pp=1, global_batch_size=64, zero_stage=3, micro_batch_size=2
    )
    e1, e2 = one.evaluate(), two.evaluate()
    assert e1.time_terms is not None and e2.time_terms is not None
    assert e2.time_terms.grad_accumulation_s == pytest.approx(e1.time_terms.grad_accumulation_s / 2)
    assert e1.step_s == pytest.approx(
        e1.time_terms.compute_and_pipeline_s
        + e1.time_terms.exposed_dp_s
        + e1.time_terms.optimizer_s
        + e1.time_terms.offload_s
        + e1.time_terms.grad_accumulation_s
    )


def test_fsdp1_bytes_per_element_by_hand() -> None:
    """FSDP1 (``flat_parameters``), read from PyTorch 2.1.0 (7bcf7da3a, the runs' image
    mosaicml/pytorch:2.1.0_cu121), per unsharded element, BF16 parameters (w 2):

    * all-gather: ``FlatParamHandle.unshard`` gathers (``all_gather_into_tensor``) straight into
      the padded unsharded flat parameter, and ``_use_unsharded_views`` makes the parameters
      views of it (``torch.split`` + ``.view``): no copy-out, 0 per gather;
    * backward: the views' gradients reach ``flat_param.grad`` through ``split_with_sizes``'s
      backward, one ``aten::cat`` on the compute stream: read 2, write 2 = 4; ``AccumulateGrad``
      takes it without a copy (``.grad`` is None: ``_reduce_grad`` sets it so);
    * ``_post_backward_hook``: the cast to ``reduce_dtype`` (read 2, write 4) and the
      reduce-scatter run on the post-backward stream, beside the next unit's backward: not on
      the compute stream, 0 here.

    So 4 B every micro-batch, ZeRO-3 (FULL_SHARD, two gathers) or ZeRO-2 (SHARD_GRAD_OP, one),
    FP32 (Composer's amp_bf16 DEFAULT) or BF16 reduction (PURE) alike: against FSDP2's
    2·4 + 6 = 14, 4 + 6 = 10 and 2·4 + 4 = 12. Unsynchronised (``no_sync``), each later backward
    also adds the new flat gradient into ``.grad`` in place: read 2 + 2, write 2 = 6 more."""
    for g, gathers in ((4, 2), (4, 1), (2, 2), (2, 1)):
        assert fsdp2_copy_bytes(2, g, 0, gathers, True, flat_parameters=True) == (4, 4)
    assert fsdp2_copy_bytes(2, 4, 1, 1, False, flat_parameters=True) == (4, 4 + 6)
    assert fsdp2_copy_bytes(2, 2, 0, 2, True) == (2 * 4 + 2 + 2, 12)
    for zero, strategy in ((3, "FULL_SHARD"), (2, "SHARD_GRAD_OP")):
        fsdp2 = mechanism("fsdp2", zero, 2, 4)
        fsdp1 = mechanism("fsdp2", zero, 2, 4, flat_parameters=True)
        assert (fsdp1.accumulate_first_bytes, fsdp1.accumulate_bytes) == (4, 4)
        assert fsdp1.name.startswith(
            f"FSDP1 FullyShardedDataParallel(sharding_strategy={strategy})"
        )
        assert "7bcf7da3a" in fsdp1.source
        # the state, gathers and reductions stay FSDP2's
        for field in ("weights_full", "weights_sharded", "grads_sharded", "optimizer_sharded",
                      "gathered_units", "unit_grad_bytes", "reduce_bytes",
                      "gathers_per_microbatch", "reduce_per_microbatch"):  # fmt: skip
            assert getattr(fsdp1, field) == getattr(fsdp2, field), field


def test_fsdp1_step_seconds_by_hand() -> None:
    """Llama 3 8B on 8 H100s, dp 8, b 1, B 64 (m 8): every GPU holds all 8,030,261,248
    elements unsharded at a unit's turn; FSDP1 moves 8 × 4 B an element on the compute stream,
    4/14 of FSDP2's ZeRO-3 (0.3028 s) and 4/10 of its ZeRO-2: 0.0865 s a step."""
    h100 = 3.35e12 * stream_triad_fraction("H100-SXM")  # type: ignore[operator]
    for zero, fsdp2_moved in ((3, 8 * 14), (2, 8 * 10)):
        lay = dict(num_gpus=8, dp=8, pp=1, global_batch_size=64, zero_stage=zero)
        flat = _copies_s(**lay, flat_parameters=True)
        assert flat == pytest.approx(8 * 4 * LLAMA3_8B / h100), zero
        assert flat == pytest.approx(_copies_s(**lay) * 8 * 4 / fsdp2_moved), zero
    assert _copies_s(
        num_gpus=8, dp=8, pp=1, global_batch_size=64, zero_stage=3, flat_parameters=True
    ) == pytest.approx(0.0865, abs=5e-4)


def test_flat_parameters_refused_where_nothing_reads_it() -> None:
    """Outside fsdp2 (no FSDP1 there) and with pp > 1 (PyTorch's pipeline schedules run
    FSDP2's ``fully_shard``): one line naming the key, its value and the rule."""
    on = TrainingSpec(seq_len=8, global_batch_size=8, flat_parameters=True)
    check_flat_parameters("fsdp2", on, 1)
    check_flat_parameters("megatron", TrainingSpec(seq_len=8, global_batch_size=8), 2)
    with pytest.raises(
        LayoutError, match=r"^flat_parameters: true is read by fsdp2 only .* not megatron$"
    ):
        check_flat_parameters("megatron", on, 1)
    with pytest.raises(LayoutError, match=r"^flat_parameters: true needs pp 1 .* not pp 2$"):
        check_flat_parameters("fsdp2", on, 2)
    with pytest.raises(LayoutError, match=r"flat_parameters: true needs pp 1"):
        Case.of(
            **_BASE, num_gpus=8, dp=4, pp=2, global_batch_size=32, flat_parameters=True
        ).evaluate()  # type: ignore[arg-type]


def test_flat_parameters_on_the_command_line() -> None:
    """``--set flat_parameters=true`` as a user types it, each call its own process: the step
    time loses FSDP2's copies for FSDP1's (0.3028 → 0.0865 s on Llama 3 8B, dp 8, ZeRO-3), the
    JSON says the key, and the refusals exit 2 with one line."""
    base = ["evaluate", "--model", "llama3-8b", "--gpu", "H100-SXM", "--gpus", "8",
            "--seq-len", "4096", "--global-batch", "64", "--framework", "fsdp2", "--zero", "3"]  # fmt: skip
    flat = ("--set", "flat_parameters=true")
    done = run_many({
        "fsdp2": [*base, "--dp", "8", "--json"],
        "fsdp1": [*base, "--dp", "8", *flat, "--json"],
        "pp 2": [*base, "--dp", "4", "--pp", "2", *flat],
        "megatron": [*base[:-4], "--framework", "megatron", "--dp", "8", *flat],
    })  # fmt: skip
    two, one = (json.loads(done[k].stdout) for k in ("fsdp2", "fsdp1"))
    assert two["time"]["grad_accumulation_s"] == pytest.approx(0.3028, abs=5e-4)
    assert one["time"]["grad_accumulation_s"] == pytest.approx(0.0865, abs=5e-4)
    assert (two["layout"]["flat_parameters"], one["layout"]["flat_parameters"]) == (False, True)
    assert refusal(done["pp 2"]) == (
        "--set flat_parameters: true needs pp 1 (PyTorch's pipeline schedules run FSDP2's "
        "fully_shard, not FSDP1), not pp 2"
    )
    assert refusal(done["megatron"]).startswith("--set flat_parameters: true is read by fsdp2 only")


def test_runtime_regathers_copy_out_by_hand() -> None:
    """``ScheduleInterleaved1F1B`` at v 4 on PyTorch's multi-stage runtime (PyTorch 2.13.0
    ``schedules.py`` ``_add_unshard_reshard``, ``max_active_stages=3``): the ``UNSHARD`` of a
    chunk its ``RESHARD`` freed is waited for by ``_assert_unsharded`` → ``_UnshardHandleImpl.
    wait`` → ``wait_for_unshard``, which copies the gather out on the compute stream as every
    gather: 2 + 2 B an element (``foreach_all_gather_copy_out``). The ``UNSHARD`` itself is
    ``unshard(async_op=True)``, whose copy-in ``get_all_gather_streams`` puts on the compute
    stream too: the FP32 shard cast into a BF16 buffer (4 + 2 B) and copied into the output
    (2 + 2 B), 10 B a shard element, 10/4 an unsharded one at dp 4, once per chunk entering the
    runtime's window (:func:`model.fsdp2_pipeline.runtime_unshards`).

    Llama 3 8B on 8 H100s, dp 4 × pp 2, B 32 (m 8), v 4: rank 1 holds stages 1, 3, 5, 7 (16
    blocks, the final norm and the output layer: 4,015,132,672 elements, the busiest).

    * ZeRO-2: the busiest rank gathers a chunk ``2(v − 3)·n + 7`` = 2·1·4 + 7 = 15 times a step
      (n = m/pp = 4 rounds, :func:`model.fsdp2_pipeline.chunk_gathers`) where the mechanism
      counts v·1 = 4: 11/4 of the stage's weights again, 4 · 11/4 = 11 B an element on the step's
      first micro-batch: 18 + 11 + 8 × 10 = 109 B, against 98 at v 3 (no re-gathers, the rule's
      figure before it) and 98 with the rule off. Each of the 15 is an ``UNSHARD``: 15/4 ·
      10/4 = 9.375 B of copy-in, 118.375 B; at v 3 one a chunk, 2.5 B: 100.5 B.
    * ZeRO-3: 43 gathers of a chunk where v·(m + 1) = 36 were counted: 7/4 again, 7 B:
      22 + 7 + 8 × 14 = 141 B, against 134. Its ``UNSHARD`` gathers are the window's entries,
      ZeRO-2's 15 (the 28 others are FSDP's hooks', their copy-in on the side stream): 9.375
      B, 150.375 B; at v 3 2.5 B, 136.5 B.
    * Meta's runtime (``pipeline_frees_stage_tensors``): no PyTorch copies at all, 0."""
    h100 = 3.35e12 * stream_triad_fraction("H100-SXM")  # type: ignore[operator]
    lay = dict(num_gpus=8, dp=4, pp=2, global_batch_size=32, schedule="interleaved")
    copy_in_v3, copy_in_v4 = 10 / 4, 15 / 4 * 10 / 4
    cases = ((2, 18 + 8 * 10, 18 + 11 + 8 * 10), (3, 22 + 8 * 14, 22 + 7 + 8 * 14))
    for zero, v3, v4 in cases:
        for v, moved in ((3, v3 + copy_in_v3), (4, v4 + copy_in_v4)):
            got = _copies_s(**lay, zero_stage=zero, virtual_stages=v)
            assert got == pytest.approx(moved * STAGE_1_OF_2 / h100), (zero, v)
    meta = _copies_s(**lay, zero_stage=2, virtual_stages=4, pipeline_frees_stage_tensors=True)
    assert meta == 0.0
    # ZeRO-2 at v 4: 118.375 B of 4.015e9 elements at 2.97 TB/s
    assert _copies_s(**lay, zero_stage=2, virtual_stages=4) == pytest.approx(0.1600, abs=5e-4)


def test_runtime_regathers_switched_off_gives_the_old_figure(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With the re-gathers' copy-outs and the runtime's copy-ins counted as 0 the v 4 figure is
    the 98 B an element the term charged before them (the attribution of the moved pins); with
    the copy-ins alone back, 98 + 9.375 B."""
    import trainplan.model.terms.dp_time as dp_time

    h100 = 3.35e12 * stream_triad_fraction("H100-SXM")  # type: ignore[operator]
    monkeypatch.setattr(dp_time, "regather_copy_bytes", lambda w, gathers: 0 * gathers)
    got = _copies_s(
        num_gpus=8, dp=4, pp=2, global_batch_size=32, schedule="interleaved",
        zero_stage=2, virtual_stages=4,
    )  # fmt: skip
    assert got == pytest.approx((98 + 15 / 4 * 10 / 4) * STAGE_1_OF_2 / h100)
    monkeypatch.setattr(dp_time, "runtime_unshards", lambda *args: 0)
    got = _copies_s(
        num_gpus=8, dp=4, pp=2, global_batch_size=32, schedule="interleaved",
        zero_stage=2, virtual_stages=4,
    )  # fmt: skip
    assert got == pytest.approx(98 * STAGE_1_OF_2 / h100)


def test_runtime_copy_in_of_a_moe_stage_by_hand(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Mixtral 8x7B on 8 H100s, dp 4 × pp 2, ep 2, interleaved v 2, ZeRO-2: each chunk's one
    ``UNSHARD`` a step copies in 10 B a shard element on the compute stream (FP32 → BF16 cast
    4 + 2, the copy into the output 2 + 2), the dense parameters sharded over dp 4, the routed
    experts over torchtitan's efsdp = dp·tp/ep = 2. The busiest stage (the second, by the final
    norm's 4,096): 16 layers of 41,943,040 attention + 8,192 norm + 32,768 router elements and the
    output layer 32,000 · 4,096 + 4,096 = 802,820,096 dense; 16 · 4 experts · 3 · 4,096 · 14,336
    = 11,274,289,152 experts on the GPU: 10 · (802,820,096/4 + 11,274,289,152/2) =
    58,378,496,000 B at 2.97 TB/s, 19.66 ms, against the term with no copy-in."""
    import trainplan.model.terms.dp_time as dp_time

    lay = dict(model="mixtral-8x7b", device="H100-SXM", framework="fsdp2", num_gpus=8, dp=4, pp=2,
               ep=2, global_batch_size=32, micro_batch_size=1, seq_len=4096,
               schedule="interleaved", virtual_stages=2, zero_stage=2)  # fmt: skip
    dense = 16 * (41_943_040 + 8_192 + 32_768) + 32_000 * 4_096 + 4_096
    experts = 16 * 4 * 3 * 4_096 * 14_336
    assert (dense, experts) == (802_820_096, 11_274_289_152)
    moved = 10 * (dense // 4 + experts // 2)
    assert moved == 58_378_496_000
    h100 = 3.35e12 * stream_triad_fraction("H100-SXM")  # type: ignore[operator]
    on = Case.of(**lay).evaluate().time_terms  # type: ignore[arg-type]
    monkeypatch.setattr(dp_time, "runtime_unshards", lambda *args: 0)
    off = Case.of(**lay).evaluate().time_terms  # type: ignore[arg-type]
    assert on is not None and off is not None
    assert on.grad_accumulation_s - off.grad_accumulation_s == pytest.approx(moved / h100)
