"""The SMs a token dispatcher's kernels hold while they run beside computation, and what that
costs the computation they hide under.

DeepEP's high-throughput dispatch and combine are persistent kernels on ``num_sms`` SMs for
their whole run (deepseek-ai/DeepEP ``deep_ep/buffers/legacy.py`` ``Buffer.num_sms`` = 20, two
per channel; Megatron-Core ``transformer_config.py`` ``moe_deepep_num_sms`` = 20, set through
``moe/fused_a2a.py`` ``set_deepep_num_sms``). DeepSeek-V3 says what that takes from the
computation it overlaps: "the current communication implementation relies on expensive SMs
(e.g., we allocate 20 out of the 132 SMs available in the H800 GPU for this purpose), which
will limit the computational throughput" (report §3.5.1), without a figure.

So an all-to-all of ``a`` seconds beside ``c`` seconds of SM-bound computation (both as each
takes alone) ends after ``max(c + φ·a, a)``: while the communication runs the computation
proceeds at ``1 − φ`` of its rate, so ``φ·a`` of it is left over when the communication ends
(or the communication paces the block). What waits beyond the computation is
:func:`contended_wait` ``= max(φ·a, a − c)`` in place of the uncontended ``max(0, a − c)``.
Read, for DeepEP's kernels and NCCL's all-to-all alike (:func:`dispatcher_sm_share`), by
:func:`model.moe_run.exposed_all_to_all` (Megatron-Core's overlaps) and
:func:`model.schedule_cost.dualpipe_block` (DualPipe's F&B block).

``φ`` is measured, not the SMs' share (:func:`measured_sm_share`): on one H200 a persistent
kernel of ``k`` blocks of 512 threads beside the validation GEMMs slowed them by the median
:data:`GEMM_SLOWDOWN_BESIDE_BLOCKS` ``s(k)``; under the rule above the computation runs at
``1/s`` while the kernel runs, so ``φ = 1 − 1/s`` — 0.239 at 16 blocks where 16/132 is 0.121,
about twice the share (``docs/time-model-sources.md`` §2). A block count between two measured
ones is read linearly between them (0 blocks: ``φ`` = 0; all 132 SMs: ``φ`` = 1, the
computation stopped, the rule's limit, not measured). On a part of ``S`` SMs, ``k`` blocks are
read at ``k·132/S``: **an assumption**, that the same fraction of the SMs taken costs the same —
the measurement's hold-only kernel (no bytes moved) cost nearly what the copy did, so the SMs
taken, not the bandwidth, carry most of the cost; a Blackwell part's GEMM tiles, waves and HBM
were not measured.

DeepEP's dispatch and combine were not measured beside a GEMM (no public figure exists; §3.5.1
names the cost only). The stand-in is the nearest per-operation figure: it has the shape of
DeepEP's normal-mode kernels — one persistent block per SM held for the whole transfer, 512
threads a block as the internode dispatch launches (deepseek-ai/DeepEP 0e89fa08
``csrc/kernels/legacy/internode.cu`` ``dispatch``: ``(kNumDispatchRDMASenderWarps 7 + 1 +
NUM_MAX_NVL_PEERS 8) × 32``), data moved at its own pace. It differs in what DeepEP's blocks
also do: 128 KiB of TMA shared memory each (``kNumTMABytesPerWarp`` 16,384 × 8; the stand-in
none), NVLink and RDMA traffic with waits on peers (the stand-in copies HBM to HBM on one GPU),
and a combine that reduces as it receives.

The NCCL all-to-all (``alltoall``) is grouped send/recv, one per peer, run on NCCL's
peer-to-peer channels, one block of ``NCCL_MAX_NTHREADS`` = 640 threads each
(``src/include/device.h``): a large one on all ``p2pnChannels`` of them, the ring count rounded
up to a power of two (:func:`model.nccl_channels.collective_blocks`; 32 in an H100 or A100 node),
charged by the same rule through the same option (``nccl_sm_charge``;
:func:`collective_sm_share` of the expert-parallel group). Its blocks hold 640 threads where the
measurement's held 512, so the charge is a floor. A part without a sourced SM count
(``scenarios/kernels/gemm.toml`` ``[[sm_count]]``) is charged nothing.

Megatron-Core's ``hybridep`` (:class:`model.moe_run.Dispatcher`) runs DeepEP's HybridEP kernels,
charged by the same rule at their own SM count (:data:`DISPATCHER_SMS`, whatever
``nccl_sm_charge`` says, as DeepEP's): Megatron-LM d98e8a64dd passes
``moe_flex_dispatcher_num_sms``, default None (``transformer_config.py``; the deprecated
``moe_hybridep_num_sms`` routes to it), as ``num_sms_dispatch_api`` and ``num_sms_combine_api``
(``moe/token_dispatcher.py`` ``_HybridEPManager.dispatch``, ``moe/fused_a2a.py``
``init_hybrid_ep_buffer``: None is not passed on), so DeepEP's defaults hold
(deepseek-ai/DeepEP branch ``hybrid-ep`` at 94a9f8f6, ``csrc/hybrid_ep/config.cuh``
``Configurer``: ``value_or((num_of_nodes == 1) ? 24 : 8)`` each, ``num_of_nodes`` the group's
size over the ranks NVLink reaches, ``deep_ep/hybrid_ep_buffer.py`` ``HybridEPBuffer.__init__``)
— 24 SMs when the expert-parallel group lies in one NVLink domain, 8 across domains (the
defaults were 32 in one domain from the branch's first commit, c9f647d, until a0d27f1 of
2026-03-31). Its dispatch and combine are persistent kernels of one block per SM
(``csrc/hybrid_ep/backend/hybrid_ep_backend.cuh`` ``dispatch``: "Grid size for dispatch
kernel(1:1 block:SM mapping)"), 128 threads a dispatch block and 192 a combine block in one
domain (4 and 6 warps; 4 and 11 across domains) with their tokens staged in shared memory
(``NUM_OF_STAGES_DISPATCH_API`` 10 tokens of ``hidden`` elements): fewer threads than the
measurement's 512, more shared memory — the same stand-in as DeepEP's, with the same caveats.
The group is Megatron-Core's expert tensor- and expert-parallel group (``tp_ep_group``); its
span is read from the expert-parallel group's link (the two agree at expert tp 1).

NCCL's collectives hold SMs the same way: one thread block (CTA) per channel for the whole
collective (NVIDIA/nccl at 5067397c, ``src/enqueue.cc`` ``topoGetAlgoInfo``: ``nc`` channels,
one block each), their count that of the algorithm NCCL's tuner runs the collective as
(:func:`model.nccl_channels.collective_blocks`, NCCL's defaults assumed):

* NVLink SHARP (an all-reduce of a communicator with ≥ 2 GPUs on a node of a part with NVLS:
  NVLS in one NVLink domain, NVLS-tree across): ``src/transport/nvls.cc`` ``ncclNvlsTuning``'s
  fixed default, ``NVLS_NCHANNELS_SM90`` = 16 on Hopper, ``NVLS_NCHANNELS_SM100_NVL`` = 24 on
  Blackwell (:data:`model.nvls.NVLS_CHANNELS`; across Blackwell domains ``NVLS_NCHANNELS_SM100``
  = 32, which ``ncclNvlsTreeSm100Tuning`` sets back to 24 for more than two domains of ≤ 8 GPUs
  on NICs of ≥ 48 GB/s; 32 on two domains or more than 8 GPUs a domain on ≥ 96 GB/s NICs: not
  modelled, 24 read).
* Ring and tree (every reduce-scatter and all-gather, and an all-reduce without NVLS: A100, a
  group with one GPU a node, ``NCCL_NVLS_ENABLE=0``): the communicator's channels,
  ``comm->nChannels`` (:func:`model.nccl_channels.collective_channels`: 24 in an A100 or H100
  node, 32 on NVLink 5; across nodes two per GPU a node on A100's 200 Gb/s NICs, on H100's
  400 Gb/s NICs 4 at one GPU a node, 8 at two, 16 at four or eight).

The measurement's stand-in was sized as an NCCL block (``NCCL_SIMPLE_MAX_NTHREADS`` = 512,
``src/include/device.h``). :func:`collective_sm_share` is the measured ``φ`` at a group's
blocks: the ``φ`` of a data-parallel reduce-scatter, all-gather or all-reduce that the framework
runs beside computation (:func:`model.terms.dp_time.dp_group_times`: gradient reduction,
ZeRO-3/FSDP prefetched gathers, each group at its own placement), of NCCL's expert all-to-all
where it is overlapped (above) and of Megatron-Core's asynchronous tensor-parallel collectives
in backward, in the dense and MoE layers and the output layer alike (the embedding's wait whole:
none is overlapped; :mod:`model.layer_time`, ``tp_comm_overlap = async``, and the output
layer's under ``full`` too: Megatron-Core's output layer is not a Transformer Engine layer, its
collectives are NCCL's; on the clocks of :func:`model.step_time.kind_parts`; PyTorch's
SymmetricMemory runs its own kernels, not NCCL's, and is not charged; Transformer Engine's
userbuffers kernels are charged :func:`held_sm_share` of their own ``num_sm`` where the GEMM
beside them keeps every SM, :func:`model.userbuffers_gemm.ub_sm_share`). A check, not a source:
Lee et al. 2025 (arXiv 2507.03114) measure computation overlapped with a collective on 4 A100s
or H100s 18.9 % slower on average (40 % at most); the H200's GEMMs ran 31 % slower beside 16
blocks (22–91 %). The figures are steady-state: the stand-in held its SMs through a loop of
GEMMs, where a collective holds them only while it runs. :class:`model.timing.CostOptions`
``nccl_sm_charge`` says whether the step time charges it
(on by default since the validation goals improved with it beside the fitted GEMM
efficiency; ``docs/time-model-sources.md`` §2 has the figures and the caveat).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainplan.model.gemm_shapes import sm_count
from trainplan.model.kernels import interpolate_linear
from trainplan.model.moe import DEEPEP_NUM_SMS
from trainplan.model.nccl_channels import group_blocks
from trainplan.model.nccl_search import NvlinkNode
from trainplan.model.op_rates import SM_PART
from trainplan.model.part_family import catalogue_part
from trainplan.model.xp import maximum
from trainplan.scenarios.kernel_data import gemm_data

__all__ = [
    "GEMM_SLOWDOWN_BESIDE_BLOCKS",
    "MEASURED_ON_SMS",
    "measured_sm_share",
    "held_sm_share",
    "DISPATCHER_SMS",
    "HYBRIDEP_NUM_SMS",
    "NCCL_DISPATCHERS",
    "dispatcher_sm_share",
    "collective_sm_share",
    "contended_wait",
]

GEMM_SLOWDOWN_BESIDE_BLOCKS: tuple[tuple[int, float], ...] = (
    (8, 1.177),
    (16, 1.314),
    (24, 1.350),
    (32, 1.542),
    (64, 2.264),
)
"""(blocks, ``s``): a GEMM's time beside a persistent kernel of that many blocks of 512 threads
over its time alone, the median over the 19 validation GEMMs of two runs on one H200 (132 SMs;
``tests/data/device/h200-2026-12-04/contention.json`` and ``contention_run2.json``, section
``gemm_sm_copy``, by ``tests/fidelity/device/measure_contention.py``; 8 blocks: run 1 only).
``tests/fidelity/test_device_h200_contention.py`` derives each median from those files and
checks it against this table."""

MEASURED_ON_SMS = 132
"""SMs of the part :data:`GEMM_SLOWDOWN_BESIDE_BLOCKS` was measured on (the H200's)."""


def measured_sm_share(blocks: float, sms: int) -> float:
    """``φ`` of ``blocks`` persistent blocks beside computation on a part of ``sms`` SMs: the
    measured ``1 − 1/s`` at ``blocks · 132 / sms`` blocks of :data:`GEMM_SLOWDOWN_BESIDE_BLOCKS`,
    linear between measured counts, from ``φ`` = 0 at none to 1 at every SM (module docstring:
    other parts than the 132-SM one measured are read at the same fraction of SMs taken, an
    assumption).

    Examples
    --------
    >>> round(measured_sm_share(16, 132), 4)  # 1 − 1/1.314; the SM share is 16/132 = 0.1212
    0.239
    >>> round(measured_sm_share(20, 132), 4)  # halfway from 16 to 24: (0.2390 + 0.2593) / 2
    0.2491
    >>> round(measured_sm_share(24, 148), 4)  # at 24·132/148 = 21.41 blocks of the H200's
    0.2527
    >>> round(measured_sm_share(4, 132), 4), measured_sm_share(132, 132)  # 0.1504 / 2; all SMs
    (0.0752, 1.0)
    """
    counts = (0, *(k for k, _ in GEMM_SLOWDOWN_BESIDE_BLOCKS), MEASURED_ON_SMS)
    phis = (0.0, *(1 - 1 / s for _, s in GEMM_SLOWDOWN_BESIDE_BLOCKS), 1.0)
    return float(interpolate_linear(counts, phis, blocks * MEASURED_ON_SMS / sms).value)


@lru_cache(maxsize=256)
def held_sm_share(blocks: int, device_name: str) -> float:
    """``φ`` of a kernel holding ``blocks`` SMs (one persistent block each) beside computation on
    the part ``device_name``: :func:`measured_sm_share` on its ``[[sm_count]]``; 0 for a part
    without a sourced count. The one rule every charge reads, the SM count a parameter: NCCL's
    NVLS blocks, DeepEP's and HybridEP's, userbuffers' ``num_sm``.

    Examples
    --------
    >>> round(held_sm_share(24, "GB200"), 4), held_sm_share(24, "MI300X")  # 21.41 H200 blocks
    (0.2527, 0.0)
    """
    part = SM_PART.get(catalogue_part(device_name))
    if part is None or not blocks:
        return 0.0
    return measured_sm_share(blocks, sm_count(gemm_data().sm_counts, part))


HYBRIDEP_NUM_SMS = (24, 8)
"""HybridEP's ``num_sms_dispatch_api`` and ``num_sms_combine_api`` (each) by default, (the
expert-parallel group in one NVLink domain, across domains): deepseek-ai/DeepEP ``hybrid-ep``
94a9f8f6 ``csrc/hybrid_ep/config.cuh`` ``Configurer``, what Megatron-Core leaves in force
(module docstring)."""

DISPATCHER_SMS: dict[str, tuple[int, int]] = {
    "deepep": (DEEPEP_NUM_SMS, DEEPEP_NUM_SMS),
    "hybridep": HYBRIDEP_NUM_SMS,
}
"""SMs a dispatcher's own communication kernels hold while they run, (the expert-parallel group
in one NVLink domain, across domains): DeepEP's ``Buffer.num_sms`` either way, the default both
DeepSeek-V3 (§3.2.2: "20 SMs … partitioned into 10 communication channels") and Megatron-Core
run; HybridEP's :data:`HYBRIDEP_NUM_SMS`. NCCL's all-to-all is charged as NCCL's collectives
are (:func:`collective_sm_share` of its blocks); another dispatcher not listed is charged none
(module docstring)."""

NCCL_DISPATCHERS = frozenset({"alltoall"})
"""Dispatchers whose all-to-all is NCCL's grouped send/recv (:class:`model.moe_run.Dispatcher`
``alltoall``), charged :func:`collective_sm_share` (module docstring)."""


@lru_cache(maxsize=64)
def dispatcher_sm_share(dispatcher: str, device_name: str, one_domain: bool = True) -> float:
    """``φ``: what a dispatcher's own kernels cost the computation beside them while they run:
    :func:`held_sm_share` of its :data:`DISPATCHER_SMS` (DeepEP's 20; HybridEP's 24 when the
    expert-parallel group lies in one NVLink domain, ``one_domain``, else 8), whatever
    ``nccl_sm_charge`` says; 0 for NCCL's all-to-all (:data:`NCCL_DISPATCHERS`, charged
    :func:`collective_sm_share` of its group's blocks), another dispatcher or a part without a
    sourced count. ``dispatcher``: a :class:`model.moe_run.Dispatcher` value.

    Examples
    --------
    DeepEP on an H800 (132 SMs; DeepSeek-V3's 20 SMs, the SM share 20/132 = 0.1515):

    >>> round(dispatcher_sm_share("deepep", "H800"), 4)  # halfway between 16 and 24 blocks
    0.2491
    >>> round(dispatcher_sm_share("deepep", "B200"), 4)  # 20·132/148 = 17.84 blocks
    0.2436
    >>> round(dispatcher_sm_share("deepep", "GB300"), 4)  # 20·132/160 = 16.5 (Blackwell Ultra)
    0.2402
    >>> dispatcher_sm_share("alltoall", "H800"), dispatcher_sm_share("deepep", "MI300X")
    (0.0, 0.0)

    HybridEP on a GB200 (148 SMs): 24 in one NVLink domain (21.41 H200 blocks), 8 across
    (7.14 blocks, 0.1504 · 7.14/8):

    >>> round(dispatcher_sm_share("hybridep", "GB200"), 4)
    0.2527
    >>> round(dispatcher_sm_share("hybridep", "GB200", one_domain=False), 4)
    0.1341
    """
    sms = DISPATCHER_SMS.get(str(dispatcher))
    return 0.0 if sms is None else held_sm_share(sms[0 if one_domain else 1], device_name)


@lru_cache(maxsize=4096)
def collective_sm_share(
    kind: str, device_name: str, charged: bool, nvls_enabled: bool, size: int, span: int,
    gpus_per_node: int, world: int, nvlink: bool, nic: Any, node: NvlinkNode,
) -> float:  # fmt: skip
    """``φ`` of an NCCL collective of ``kind`` (:class:`model.nccl_channels.NcclKernel`) over a
    group of ``size`` ranks spread over ``span`` consecutive ranks of a layout of ``world``
    ranks (``nvlink``: in one NVLink
    domain; else across nodes of ``gpus_per_node`` GPUs on NICs of ``nic`` bytes/s; ``node``:
    the part's NVLinks, :func:`model.nccl_search.nvlink_node`) beside
    computation: :func:`held_sm_share` of the blocks the algorithm NCCL runs it as holds
    (:func:`model.nccl_channels.group_blocks`; ``nvls_enabled``:
    :class:`model.timing.CostOptions` ``nccl_nvls``); 0 for a group of one rank, a part without
    a sourced SM count, or when the charge is off (``charged``: ``nccl_sm_charge``, on by
    default).

    Examples
    --------
    An H100 node's all-reduce on NVLS's 16 blocks, 1 − 1/1.314 (the SM share 16/132 = 0.121);
    its reduce-scatter on the ring's 24, 1 − 1/1.350; an A100 node's on the ring's 24 of 108
    SMs, 29.33 H200 blocks: 0.2593 + (5.33/8)·0.0922:

    >>> from trainplan.model.nccl_search import nvlink_node
    >>> h100, a100 = nvlink_node("H100-SXM", 450e9), nvlink_node("A100-80GB", 300e9)
    >>> node = (8, 8, 8, 8, True, 0.0, h100)
    >>> round(collective_sm_share("all-reduce", "H100-SXM", True, True, *node), 4)
    0.239
    >>> round(collective_sm_share("ring", "H100-SXM", True, True, *node), 4)
    0.2593
    >>> round(collective_sm_share("ring", "A100-80GB", True, True, *node[:-1], a100), 4)
    0.3207

    A dp group of one GPU a node on H100s (400 Gb/s NICs): 4 channels, 0.1504/2; a B200 node's
    all-reduce on 24 of 148 SMs (21.41 blocks); off with the option:

    >>> round(collective_sm_share("ring", "H100-SXM", True, True, 16, 128, 8, 128, False, 50e9, h100), 4)
    0.0752
    >>> b200 = nvlink_node("B200", 900e9)
    >>> round(collective_sm_share("all-reduce", "B200", True, True, *node[:-1], b200), 4)
    0.2527
    >>> collective_sm_share("ring", "H100-SXM", False, True, *node)
    0.0
    """
    if not charged:
        return 0.0
    args = (size, span, gpus_per_node, world, nvlink, nic, node)
    return held_sm_share(group_blocks(kind, device_name, nvls_enabled, *args), device_name)


def contended_wait(comm_s: Any, compute_s: Any, share: float) -> Any:
    """Seconds a block of ``compute_s`` of computation with ``comm_s`` of communication beside
    it lasts beyond its computation, the communication holding ``share`` (``φ``) of the SMs:
    ``max(φ·a, a − c)`` (module docstring). Scalars or arrays.

    Examples
    --------
    >>> contended_wait(2.0, 3.0, 0.0), contended_wait(2.0, 3.0, 0.25)
    (0.0, 0.5)
    >>> contended_wait(4.0, 3.0, 0.25)  # the communication paces: 4 − 3
    1.0
    """
    return maximum(share * comm_s, comm_s - compute_s)
