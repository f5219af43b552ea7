"""Offload (issue 11 item 2): optimizer state and parameters on the host, their host bytes per
GPU and per node, and the host-link transfers and CPU optimizer step in the step time. Sources
in :mod:`trainplan.model.offload`; host figures from the accelerator table (DGX H100: 2 TB and
614.4 GB/s over 8 GPUs; PCIe Gen5 x16, 64 GB/s per direction)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from trainplan.model.offload import Offload
from trainplan.optimizer.case import Case
from trainplan.topology.accelerators import get_accelerator

BASE = {"model": "llama3-70b", "tp": 8, "dp": 8, "seq_len": 8192, "global_batch_size": 64}

PER_CORE = 10e9 * 28 / (2.57 * 48)
"""ZeRO-Offload's Adam latency table: DeepSpeed CPU-Adam updates 10e9 FP32 parameters in 2.57 s
on a DGX-2's 48 cores, 28 B an element (reads p, g, m, v; writes p, m, v): 2.2698e9 B/s a core."""
HOST_STEP = 112 / 8 * PER_CORE
"""DGX H100 (and DGX B200): 112 cores over 8 GPUs = 14 threads a rank × 2.2698e9 = 31.78e9 B/s,
under the host memory's 76.8 (89.6) GB/s peak per GPU: the CPU Adam step's rate."""


def test_megatron_optimizer_offload_moves_the_state_and_adds_its_step():
    """Megatron-Core distributed optimizer (ZeRO-1), dp 8, --offload-optimizer 1. With P dense
    parameters on the GPU (after tp), the optimizer shard has P/8 elements: its 12 B/param leave
    the GPU; the host holds 12 + 4 (FP32 gradients) = 16 B × P/8 = 2P. Per step, once: FP32
    main_grad D2H 4 B × P/8, bf16 weights H2D 2 B × P/8, over 64 GB/s; the CPU Adam streams
    2·12 + 4 + 2 = 30 B × P/8 at 14 cores × 2.27 GB/s (:data:`HOST_STEP`)."""
    plain = Case.of(**BASE).evaluate()
    off = Case.of(**{**BASE, "offload": Offload(optimizer=1)}).evaluate()
    P = plain.stages[0].dense_params
    assert plain.stages[0].state.optimizer_bytes == 12 * P / 8
    assert off.stages[0].state.optimizer_bytes == 0
    assert off.host_bytes == 2 * P
    assert off.peak.total_bytes == plain.peak.total_bytes - 12 * P / 8
    elements = float(P / 8)
    expected = (4 + 2) * elements / 64e9 + 30 * elements / HOST_STEP
    assert off.time_terms.offload_s == pytest.approx(expected, rel=1e-12)
    # the GPU's own Adam step (50 B × P/8 through HBM at BabelStream's triad on H100 SXM,
    # 2.97 TB/s: the roofline clock: the 38 B count, the clip's scaling of the FP32 gradient 8 B
    # and the second read of the FP32 master, 4 B, by _copy_main_params_to_model_params,
    # model.step_passes) moves to the host; zeroing the FP32 main_grad buffer stays
    # on the GPU and covers all P elements, not the shard (Megatron-LM train_step →
    # zero_grad_buffer → _ParamAndGradBuffer.reset: grad_data.zero_()): 4 B × (P − P/8) beyond
    # the 4 B × P/8 the 38 B count, and 4 B × P once the step is on the host
    zeroing = 4 * float(P) / 2.97e12
    gpu_step = ((38 + 8 + 4) * elements + 4 * (float(P) - elements)) / 2.97e12
    assert plain.time_terms.optimizer_s == pytest.approx(gpu_step, rel=1e-9)
    assert off.time_terms.optimizer_s == pytest.approx(zeroing, rel=1e-9)
    assert off.step_s == pytest.approx(plain.step_s + expected - gpu_step + zeroing, rel=1e-9)
    assert off.host_bytes * off.device.gpus_per_node == 8 * 2 * P  # per node
    assert off.device.host_memory_bytes == 256 * 10**9 and off.host_fits is True


def test_partial_offload_is_a_fraction_of_each():
    """--offload-optimizer 0.25 (Megatron-Core --optimizer-offload-fraction): a quarter of the
    12 B × P/8 moves, with a quarter of the FP32 gradients: host 0.25 × 16 × P/8 = P/2."""
    plain = Case.of(**BASE).evaluate().stages[0]
    quarter = Case.of(**{**BASE, "offload": Offload(optimizer=0.25)}).evaluate()
    P = plain.dense_params
    assert quarter.stages[0].state.optimizer_bytes == Fraction(3, 4) * 12 * P / 8
    assert quarter.host_bytes == P / 2


def test_deepspeed_zero3_parameter_offload():
    """DeepSpeed ZeRO-3 with offload_param: the bf16 parameter shard (2 B × P/8), the optimizer
    (12 B × P/8), FP32 gradients (4 B × P/8) and the BF16 ``grad_partitions_flat_buffer``
    (2 B × P/8: ``stage3.py`` allocates it on ``self.device``, the CPU under
    ``offload_optimizer``) on the host = 20 B × P/8 (was 18); the GPU keeps no shard,
    only the gathered layers and buffers — whole: with its shard on the host, each gathered unit
    holds all 8 ranks' shares (``stage3.py`` fetches the CPU partition into the full-size
    buffer). Their peak (model/deepspeed_gathered.py, the walk of the coordinator) is whole
    with or without offload: at tp 8 the turn's, the output weight 131,334,144, layer 79's QKV,
    projection and gate-up, layers 72 to 78 and layer 71's gate-up and down, 1,045,692,416
    elements (tests/model/test_deepspeed_gathered.py), above two whole units (2 × 2 B ×
    131,334,144); it was the turn bound's 1e9 + FC1 = 1,058,720,256. The term reads the layout's
    own walk (recompute none here): 2·1,045,692,416 = 2,091,384,832 bytes (it took the most of the
    three walks before, √n recomputation's 2·1,128,792,064 − 8·16,777,216 = 2,123,366,400). Every
    micro-batch fetches the shard twice (forward and backward, 2 × 2 B × P/8) and sends its bf16
    gradients back (2 B × P/8)."""
    base = {**BASE, "framework": "deepspeed", "zero_stage": 3}
    plain = Case.of(**base).evaluate()
    off = Case.of(**{**base, "offload": Offload(params=True)}).evaluate()
    P = plain.stages[0].dense_params
    st = off.stages[0].state
    assert (st.weights_bytes, st.gradients_bytes, st.optimizer_bytes) == (0, 0, 0)
    assert off.host_bytes == 20 * P / 8
    turn = 2 * 1_045_692_416  # the turn: the walk without recomputation
    assert st.gathered_bytes == plain.stages[0].state.gathered_bytes == turn == 2_091_384_832
    assert turn > 2 * 2 * 131_334_144
    m = off.num_microbatches
    elements = float(P / 8)
    transfers = (m * 2 * elements) + (2 * elements + 2 * m * 2 * elements)
    cpu = 30 * elements / HOST_STEP
    assert off.time_terms.offload_s == pytest.approx(transfers / 64e9 + cpu, rel=1e-12)


def test_host_memory_that_does_not_fit_is_a_verdict():
    """A 405B model's optimizer on the host of 8 H100s: 16 B × 405e9 / 8 GPUs ≈ 812 GB per GPU
    over the DGX H100's 256 GB per GPU: the verdict says so."""
    est = Case.of(**
        {"model": "llama3-405b", "tp": 8, "dp": 1, "pp": 1, "offload": Offload(optimizer=1),
         "global_batch_size": 8, "seq_len": 8192}
    ).evaluate()  # fmt: skip
    assert est.host_bytes > 256 * 10**9
    assert est.host_fits is False and est.fits is False


def test_host_link_override_reaches_the_step():
    """--host-link-gbps 32 (PCIe Gen4) on a B200 with its table's host: the transfer term
    doubles against 64; the CPU step at 14 cores × 2.27 GB/s (:data:`HOST_STEP`, under 89.6)."""
    base = {"model": "llama3-8b", "dp": 8, "offload": Offload(optimizer=1)}
    b200 = get_accelerator("B200")
    gen5, gen4 = (replace(b200, host_link_bytes_per_s=gbps * 1e9) for gbps in (64, 32))
    fast = Case.of(**base, device=gen5).evaluate().time_terms.offload_s
    slow = Case.of(**base, device=gen4).evaluate().time_terms.offload_s
    est = Case.of(**base, device=gen5).evaluate()
    elements = float(est.stages[0].dense_params / 8)
    cpu = 30 * elements / HOST_STEP
    assert fast == pytest.approx(6 * elements / 64e9 + cpu)
    assert slow - cpu == pytest.approx(2 * (fast - cpu))


def test_deepspeed_zero1_offload_keeps_the_largest_parameter_as_a_gpu_buffer():
    """DeepSpeed ZeRO-1/2 with offload_optimizer (deepspeedai/DeepSpeed edaa72212,
    ``stage_1_and_2.py`` ``DeepSpeedZeroOptimizer.__init__``): ``largest_param_numel`` is the
    largest parameter of the rank's ``bit16_groups`` and, with ``cpu_offload``, the GPU keeps
    ``temp_grad_buffer_for_gpu_offload`` of that many elements in the parameters' dtype for the
    run, the host ``temp_grad_buffer_for_cpu_offload`` as its twin.

    Llama 3 70B (h 8,192, V 128,256, f 28,672, 64 heads of 128, 8 KV heads), tp 4, pp 2:
    stage 0 holds the input embedding, 128,256 ÷ 4 = 32,064 rows × 8,192 = 262,668,288
    elements (more than fc1's 2·28,672·8,192 ÷ 4 = 117,440,512); stage 1 the output layer, as
    large. 2 B each: 525,336,576 B more gradients on the GPU and on the host, on both stages;
    nothing else moves. Without offload no buffer; ZeRO-3 keeps none (``stage3.py`` only
    prints its largest partitioned parameter)."""
    base = {"model": "llama3-70b", "tp": 4, "pp": 2, "dp": 2, "framework": "deepspeed",
            "zero_stage": 1, "seq_len": 8192, "global_batch_size": 64}  # fmt: skip
    off = Case.of(**{**base, "offload": Offload(optimizer=1)}).evaluate()
    largest = 128_256 // 4 * 8_192
    assert largest == 262_668_288 > 2 * 28_672 * 8_192 // 4
    from trainplan.model.mechanisms import mechanism
    from trainplan.model.offload import offload_memory

    for stage in off.stages:
        st = stage.state
        # the rest of the model state as offload_memory leaves it: bf16 gradients whole
        P = stage.dense_params
        mech, everything = mechanism("deepspeed", 1), Offload(optimizer=1)
        _, g, _, _, host = offload_memory(mech, everything, 2 * P, 2 * P, 6 * P, 0, P / 2, True)
        assert st.gradients_bytes == g + 2 * largest
        assert st.host_bytes == host + 2 * largest
    assert off.stages[0].state.gradients_bytes - 2 * off.stages[0].dense_params == 525_336_576
    plain = Case.of(**base).evaluate()
    assert plain.stages[0].state.gradients_bytes == 2 * plain.stages[0].dense_params


def test_fsdp2_parameter_offload_accumulates_gradients_on_the_cpu():
    """torchtitan's CPU offload (FSDP2 ``CPUOffloadPolicy``): from the second micro-batch on,
    ``foreach_reduce`` copies the FP32 gradient shard to the host and adds it on the CPU, 12 B
    an element (two reads, one write) at the host memory bandwidth. Llama 3 70B on 8 H100s,
    dp 8, b 2, B 2,048 (m 128): the shard is 70,553,706,496 / 8 = 8,819,213,312 elements, 127 ×
    8,819,213,312 × 12 B / 76.8 GB/s = 175.0 s more than the transfers and the CPU Adam step
    (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py`` ``foreach_reduce``)."""
    from trainplan.model.mechanisms import mechanism
    from trainplan.model.offload import FSDP2_HOST_ACCUMULATE_BYTES, offload_seconds

    shard = 70_553_706_496 // 8
    assert shard == 8_819_213_312
    fsdp2 = mechanism("fsdp2", 3)
    on = Offload(Fraction(1), params=True)
    with_m = offload_seconds(fsdp2, on, shard, 128, 12, 64e9, 76.8e9)
    without = offload_seconds(
        replace(fsdp2, framework="deepspeed"), on, shard, 128, 12, 64e9, 76.8e9
    )
    assert FSDP2_HOST_ACCUMULATE_BYTES == 12
    assert with_m - without == pytest.approx(127 * shard * 12 / 76.8e9, rel=1e-12)
    assert 127 * shard * 12 / 76.8e9 == pytest.approx(175.0, abs=0.05)


def test_deepspeed_zero2_offload_brings_accumulated_gradients_back_every_microbatch():
    """DeepSpeed ZeRO-2 with the optimizer offloaded: from the second micro-batch on,
    ``async_accumulate_grad_in_cpu_via_gpu`` copies the host-accumulated BF16 gradients back to
    the GPU (on the compute stream: ``overlap_comm`` is off by default at ZeRO-2). Llama 3 8B on
    8 H100s, b 1, B 2,048 (m 256): 8,030,261,248 / 8 = 1,003,782,656 elements a GPU, 255 ×
    1,003,782,656 × 2 B / 64 GB/s = 8.00 s more host→device time."""
    from trainplan.model.mechanisms import mechanism
    from trainplan.model.offload import offload_transfers

    shard = 8_030_261_248 // 8
    zero2, zero1 = mechanism("deepspeed", 2), mechanism("deepspeed", 1)
    on = Offload(Fraction(1))
    _, h2d = offload_transfers(zero2, on, shard, 256)
    _, once = offload_transfers(zero2, on, shard, 1)
    assert h2d - once == 255 * shard * 2
    assert (h2d - once) / 64e9 == pytest.approx(8.0, abs=0.005)
    _, z1 = offload_transfers(zero1, on, shard, 256)  # ZeRO-1 accumulates on the GPU
    assert z1 == shard * zero1.weight_bytes


def test_cpu_adam_runs_at_the_hosts_cores_per_gpu_capped_at_its_memory():
    """The CPU Adam step's rate (``model/offload.py`` ``host_step_bytes_per_s``): the node's cores
    shared by its GPUs' ranks, each at ZeRO-Offload's CPU-Adam rate per core (:data:`PER_CORE`),
    no faster than the host memory's peak per GPU.

    - DGX-1 (V100): 40 cores / 8 = 5 × 2.2698 = 11.35 GB/s (peak 19.2).
    - DGX H100: 14 × 2.2698 = 31.78 GB/s (peak 76.8).
    - GB200 NVL72 tray: 144 cores / 4 GPUs = 36 × 2.2698 = 81.71 GB/s (peak 256).
    - --set host_memory_gbps=20 on the H100: 20 GB/s, under 31.78, is the cap.
    - No core count (a device built without one): the memory's peak, as before.

    llama3-8b on 8 H100s, dp 4 × tp 2, ZeRO-1, b 2, B 64, s 8192 (review-j MED-1's layout):
    4,015,263,744 parameters on each tp rank (half of 8,030,261,248, the norms whole) / dp 4 =
    1,003,815,936 elements a GPU; transfers (4 + 2) B × 1,003,815,936 / 64e9 = 0.0941 s; the CPU
    step 30 B × 1,003,815,936 / 31.78e9 = 0.9476 s (0.3921 s at 76.8 GB/s): offload 1.0418 s,
    was 0.4862."""
    from trainplan.model.offload import host_step_bytes_per_s, host_threads_per_rank

    v100, h100, gb200 = (get_accelerator(n) for n in ("V100-SXM2-32GB", "H100-SXM", "GB200"))
    assert host_threads_per_rank(v100) == 5 and host_threads_per_rank(gb200) == 36
    assert (
        host_step_bytes_per_s(v100) == pytest.approx(5 * PER_CORE) == pytest.approx(11.35e9, 1e-3)
    )
    assert host_step_bytes_per_s(h100) == HOST_STEP == pytest.approx(31.78e9, rel=1e-3)
    assert host_step_bytes_per_s(gb200) == pytest.approx(81.71e9, rel=1e-3)
    assert host_step_bytes_per_s(replace(h100, host_memory_bytes_per_s=20e9)) == 20e9
    assert host_step_bytes_per_s(replace(h100, host_cores=None)) == 76.8e9
    est = Case.of(
        model="llama3-8b",
        tp=2,
        dp=4,
        micro_batch_size=2,
        global_batch_size=64,
        seq_len=8192,
        offload=Offload(optimizer=1),
    ).evaluate()
    assert est.stages[0].dense_params == 4_015_263_744
    shard = 4_015_263_744 / 4
    assert est.time_terms.offload_s == pytest.approx(6 * shard / 64e9 + 30 * shard / HOST_STEP)
    assert est.time_terms.offload_s == pytest.approx(1.0418, abs=5e-5)
    assert 30 * shard / 76.8e9 + 6 * shard / 64e9 == pytest.approx(0.4862, abs=5e-5)
