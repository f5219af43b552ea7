"""ZeRO-3/FSDP per-micro-batch traffic against the forward and the backward separately
(model/dp_exposure.py ``dp_exposed_seconds``, ``phase_gathers``).

Each framework frees a unit after its forward and gathers it again before its backward (torch
``FSDPParamGroup.post_forward`` → ``reshard``, ``pre_backward`` → ``unshard``; Megatron-FSDP
``_post_forward`` → ``release_module_parameters``, ``_pre_backward_param_unshard``; DeepSpeed
``post_sub_module_forward_function`` → ``release_sub_module``,
``pre_sub_module_backward_function`` → ``fetch_sub_module``), so only the forward's gathers can
hide under the forward; and each waits for its reductions at the end of every backward (torch
``_root_post_backward_final_callback``; Megatron-FSDP ``_root_post_backward`` →
``grad_reduce_pipeline.reset()``; DeepSpeed ``independent_gradient_partition_epilogue`` →
``reduce_and_partition_stream.synchronize()``), so a backward's surplus waits whole in every
micro-batch, at least its last bucket's reduction. The windows: the forward a third of the
micro-batch, the backward two thirds (:func:`model.schedule_cost.pass_times`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.model._shared import NO_STEP_MECHANISMS
from trainplan.model.dp_exposure import dp_exposed_seconds, phase_gathers
from trainplan.model.mechanisms import mechanism
from trainplan.optimizer.case import Case

GPT3 = dict(dp=256, tp=4, zero_stage=3, micro_batch_size=3, global_batch_size=1536)
"""``trainplan search --model gpt3-175b --gpus 1024 --gpu A100-80GB --global-batch 1536``'s
answer before the phases were split: dp 256 × tp 4, Megatron-FSDP (ZeRO-3), b 3, m 2."""


def test_phase_gathers_as_each_framework_runs_them():
    """ZeRO-3 gathers each unit for its forward and again for its backward (Megatron-FSDP,
    FSDP2 ``reshard_after_forward=True``, DeepSpeed ZeRO-3, the textbook's re-gather); FSDP2's
    ZeRO-2 (``reshard_after_forward=False``) gathers in the forward only and keeps the unit for
    the backward; a mechanism that gathers once a step gathers nothing per micro-batch."""
    assert phase_gathers(mechanism("megatron", 3)) == (1, 1)
    assert phase_gathers(mechanism("fsdp2", 3)) == (1, 1)
    assert phase_gathers(mechanism("deepspeed", 3)) == (1, 1)
    assert phase_gathers(mechanism("fsdp2", 2)) == (1, 0)
    assert phase_gathers(mechanism("megatron", 1)) == phase_gathers(mechanism("deepspeed", 2))
    assert phase_gathers(mechanism("megatron", 1)) == (0, 0)


def test_gpt3_175b_megatron_fsdp_by_hand():
    """GPT-3 175B on 1024 A100-80GB, dp 256 × tp 4, Megatron-FSDP, b 3, m 2. Per parameter 2 B
    gathered for the forward, 2 B again for the backward and 4 B of FP32 gradients
    reduce-scattered, 7.2510 s of bytes a micro-batch at the link's rate. The reduce-scatter
    runs in 171 bucket calls, and each pass's all-gather in its own 171 (Megatron-FSDP gathers
    every bucket before the forward and again before the backward), 342 a micro-batch. The dp
    group's 256 ranks lie 2 on each of 128 nodes, so NCCL's ring crosses the network in 127
    of its 255 steps (``nInterSteps = nNodes − 1``) and NVLink in the other 128: a call's
    latency 8.4 + 127 × 14 + 128 × 3.4 = 2221.6 µs (3578.4 µs when every step was charged
    the network's 14 µs and the two passes' gathers shared 171 calls: 8.4748 s a
    micro-batch). One micro-batch: 7.2510 + 513 × 2.2216 ms = 8.3907 s; the forward's
    gathers a quarter of the bytes and 171 calls, 1.8127 + 0.3799 = 2.1926 s, the backward
    carries 6.1980 s. The micro-batch's compute with its exposed tp collectives, without
    recomputation, is t = (15.813 + 0.880)/2 = 8.3465 s (the tp 4 group's asynchronous
    all-gathers and reduce-scatters charged NCCL's 24 ring blocks of the A100's 108 SMs,
    φ_tp = 0.32075: 0.725 s uncharged + 0.32075 × 0.483 s): the forward's window
    t/3 = 2.7822 s, the backward's 2t/3 = 5.5643 s. The dp group runs as rings on 4 blocks
    (2 search channels at 24 GB/s on 200 Gb/s NICs, no DupChannels under 25 GB/s, Postset
    ×2), 4·132/108 = 4.889 H200 blocks, φ_dp = 0.15038 × 4.889/8 = 0.09190
    (tests/model/test_nccl_blocks.py).

    The forward's gathers fit its window but hold φ_dp of the SMs: 0.09190 × 2.1926 =
    0.2015 s; the backward leaves 6.1980 − 5.5643 = 0.6337 s (more than φ_dp × 6.1980 =
    0.5696 s and its last bucket's reduce-scatter), in each of the two micro-batches:
    2 × 0.8352 = 1.6705 s exposed (1.973 s before). The step 18.367 s (18.670 s before);
    18.368 s with Megatron-FSDP's own optimizer-step passes (model.step_passes: 12 B more an
    element stepped, 43.75e9 / 256 at A100's 2.039 TB/s × 0.83: 1.2 ms).

    The async tp overlap is asked for here (``tp_comm_overlap = "async"``): by default
    Megatron-FSDP before Blackwell runs without ``CUDA_DEVICE_MAX_CONNECTIONS=1`` and is
    credited none (model/launch_order.py), which changes t and every figure after it."""
    est = Case.of("gpt3-175b", "A100-80GB", **GPT3, tp_comm_overlap="async").evaluate()
    dp = next(r for r in est.traffic if r.traffic.axis == "dp")
    latency = (8.4 + 127 * 14 + 128 * 3.4) * 1e-6
    assert latency == pytest.approx(2221.6e-6)
    old_latency = (8.4 + 255 * 14) * 1e-6
    wire = 8.4748 - 2 * 171 * old_latency  # the bytes, as before
    assert wire == pytest.approx(7.2510, abs=1e-4)
    microbatch = wire + (171 + 2 * 171) * latency
    assert microbatch == pytest.approx(8.3907, abs=1e-4)
    assert dp.seconds == pytest.approx(2 * microbatch, abs=5e-4)
    phi = (1 - 1 / 1.177) * (4 * 132 / 108) / 8
    assert dict(est.time_terms.sm_shares)["dp"] == pytest.approx(phi)
    assert phi == pytest.approx(0.09190, abs=1e-5)
    t = 8.3465
    gathers_forward = wire / 4 + 171 * latency
    backward = microbatch - gathers_forward - 2 * t / 3
    assert backward == pytest.approx(0.6337, abs=1e-4)
    assert gathers_forward < t / 3 and phi * (microbatch - gathers_forward) < backward
    forward = phi * gathers_forward
    assert dp.exposed_seconds == pytest.approx(2 * (forward + backward), abs=5e-4)
    assert est.step_s == pytest.approx(18.367 + 12 * 43.75e9 / 256 / (2.039e12 * 0.83), abs=5e-4)


def test_gpt3_175b_search_answer_moves_to_tp_8():
    """The search's answer with the phases apart: dp 128 × tp 8, still Megatron-FSDP, b 6, m 2,
    18.327 s, ahead of dp 256 × tp 4's 18.368 s (18.325 and 18.367 s before Megatron-FSDP's own
    optimizer-step passes, model.step_passes); the search's tables give the evaluator's
    figure. Its dp group has one rank on each of 128 nodes: every ring step crosses the
    network, 8.4 + 127 × 14 = 1786.4 µs a call, in 171 calls for the reduce-scatter and 171
    for each pass's all-gather: 7.2282 s of bytes + 513 × 1.7864 ms = 8.1446 s a micro-batch
    (7.8391 s when the two passes' gathers shared 171 calls), the forward's gathers
    7.2282/4 + 171 × 1.7864 ms = 2.1125 s. 2 ring blocks (1 search channel at 24 GB/s,
    Postset ×2), 2·132/108 = 2.444 H200 blocks, φ = 0.15038 × 2.444/8 = 0.04595. The
    micro-batch's window t = 8.7647 s. The backward's last reduce-scatter bucket, 1/171 of
    7.2282/2 + 171 × 1.7864 ms = 3.9196 s, 22.92 ms, runs after the backward's computation and
    waits whole (model.dp_exposure.microbatch_exposed_seconds); the rest of its 6.0321 s,
    6.0092 s, exceeds 2t/3 = 5.8431 s by 0.1661 s, less than the φ · 6.0092 = 0.2761 s its
    blocks cost; the forward's gathers fit t/3 and cost φ · 2.1125 = 0.0971 s: each
    micro-batch 0.0971 + 0.2761 + 0.0229 = 0.3961 s, 0.792 s of dp exposed (0.748 s when the
    last bucket was charged φ like the rest).

    With the async tp overlap asked for (as the derivation above takes it). By default
    Megatron-FSDP before Blackwell gets no async tp credit (model/launch_order.py: it runs
    without ``CUDA_DEVICE_MAX_CONNECTIONS=1``), and the answer leaves ZeRO-3: dp 32 × tp 4 ×
    pp 8 interleaved v 12, ZeRO-1, b 2, 18.411 s (18.408 s under the closed form: its 96 layers
    make chunks of one, and the last, with the output layer, 26.4 + 52.9 ms against a layer's
    19.6 + 39.3, holds the last rank back in Megatron-Core's order, model.pipeline_uneven: a
    bubble of 426.7 ms where the closed form's 7/(12·24) of the busy 17,455 ms gave 424.3)."""
    import trainplan

    default = trainplan.search(model="gpt3-175b", gpus=1024, gpu="A100-80GB", global_batch=1536)
    lay = default.best.estimate.layout
    assert (lay.dp, lay.tp, lay.pp, lay.virtual_stages, lay.zero_stage) == (32, 4, 8, 12, 1)
    # 18.411 s before the whole gradient buffer was zeroed at the step
    # (model.terms.optimizer_time.whole_buffer_zeroing_bytes), 18.423 s before Megatron-Core's
    # own optimizer-step passes (model.step_passes: 12 B more an element stepped, 1.7 ms)
    assert default.best.estimate.step_s == pytest.approx(18.425, abs=5e-4)
    r = trainplan.search(
        model="gpt3-175b", gpus=1024, gpu="A100-80GB", global_batch=1536, tp_comm_overlap="async"
    )
    lay = r.best.estimate.layout
    assert (lay.dp, lay.tp, lay.pp, lay.zero_stage, lay.micro_batch_size) == (128, 8, 1, 3, 6)
    dp = next(t for t in r.best.estimate.traffic if t.traffic.axis == "dp")
    phi = (1 - 1 / 1.177) * (2 * 132 / 108) / 8
    microbatch = 7.8391 - 2 * 171 * 1786.4e-6 + 513 * 1786.4e-6
    assert microbatch == pytest.approx(8.1446, abs=1e-4)
    assert dp.seconds == pytest.approx(2 * microbatch, abs=5e-4)
    last = (7.2282 / 2 + 171 * 1786.4e-6) / 171
    assert dp.exposed_seconds == pytest.approx(2 * (phi * (microbatch - last) + last), abs=5e-4)
    assert dp.exposed_seconds == pytest.approx(0.792, abs=5e-4)
    assert r.best.estimate.step_s == pytest.approx(18.327, abs=5e-4)
    evaluated = Case.of("gpt3-175b", "A100-80GB", **GPT3, tp_comm_overlap="async").evaluate()
    assert evaluated.step_s > r.best.estimate.step_s


_SECONDS = st.floats(0.0, 10.0, allow_nan=False)


@given(
    mb=_SECONDS,
    fwd_share=st.floats(0.0, 1.0),
    reduce_share=st.floats(0.0, 1.0),
    grow=st.floats(1.0, 4.0),
    window=st.floats(0.01, 10.0),
    m=st.integers(1, 64),
    tail=st.floats(0.0, 1.0),
    share=st.floats(0.0, 0.6),
)
def test_exposure_never_decreases_as_per_micro_batch_traffic_grows(
    mb, fwd_share, reduce_share, grow, window, m, tail, share
):
    """More per-micro-batch traffic — the forward's gathers, the backward's, the reduction, or
    all of it — never waits less; and what waits is never more than all of it nor less than
    nothing."""
    fwd = mb * fwd_share
    red = (mb - fwd) * reduce_share
    more = grow - 1

    def exposed(total: float, forward: float, reduce: float) -> float:
        return dp_exposed_seconds(
            0.0, total, m, window, True, tail, True, share, 0.0,
            **{**NO_STEP_MECHANISMS, "forward_s": forward, "reduce_s": reduce},
        )  # fmt: skip

    base = exposed(mb, fwd, red)
    assert -1e-12 <= base <= m * mb + 1e-9
    assert exposed(mb * grow, fwd * grow, red * grow) >= base - 1e-12  # all of it
    assert exposed(mb + more, fwd + more, red) >= base - 1e-12  # the forward's gathers
    assert exposed(mb + more, fwd, red) >= base - 1e-12  # the backward's gathers
    assert exposed(mb + more, fwd, red + more) >= base - 1e-12  # the reduction


def test_arrays_give_the_floats():
    """The search's columns: element-wise, the same floats as one layout at a time."""
    mb, fwd = np.array([8.4748, 1.5712, 0.5, 0.0]), np.array([2.1187, 0.3928, 0.3, 0.0])
    window, m, tail = np.array([8.2688, 1.9453, 0.6, 1.0]), np.array([2, 128, 4, 8]), 0.01
    share = 0.23896
    red = np.array([4.2374, 0.7856, 0.1, 0.0])
    got = dp_exposed_seconds(0.0, mb, m, window, True, tail, True, share, 0.0,
                             **{**NO_STEP_MECHANISMS, "forward_s": fwd, "reduce_s": red})  # fmt: skip
    one = [
        dp_exposed_seconds(0.0, float(a), int(k), float(w), True, tail, True, share, 0.0,
                           **{**NO_STEP_MECHANISMS, "forward_s": float(f), "reduce_s": float(r)})
        for a, k, w, f, r in zip(mb, m, window, fwd, red, strict=True)
    ]  # fmt: skip
    assert got.tolist() == one
