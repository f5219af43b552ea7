"""Offload of optimizer state and parameters to the host (CPU) memory.

Two mechanisms, as frameworks run them:

* **Optimizer offload** (a fraction ``f`` of the optimizer state): Megatron-Core's
  ``--optimizer-cpu-offload`` with ``--optimizer-offload-fraction`` (``HybridDeviceOptimizer``),
  DeepSpeed's ``offload_optimizer: {device: cpu}`` (ZeRO-Offload, Ren et al. 2021, arXiv
  2101.06840; under ZeRO-3 a partial ``ratio``). The offloaded share of the optimizer state (FP32
  master and moments) and of the optimizer-step extras leaves the GPU; the host holds it and an
  FP32 copy of the matching gradients; each step the reduced gradients go to the host (once per
  step in Megatron-Core; every micro-batch where the framework reduces per micro-batch, as
  DeepSpeed ZeRO-2/3 accumulates into the host buffer), the CPU runs Adam, and the updated
  weights come back.
* **Parameter offload** (ZeRO-3 only): DeepSpeed ZeRO-Infinity's ``offload_param`` (Rajbhandari
  et al. 2021, arXiv 2104.07857) and FSDP2's ``CPUOffloadPolicy``: the parameter shards, their
  gradients and the whole optimizer live on the host; every micro-batch fetches the shard to the
  GPU for the forward and again for the backward gathers, and sends its reduced gradients back.

Time (:func:`offload_seconds`): host-link transfers at ``DeviceSpec.host_link_bytes_per_s``
(PCIe or NVLink-C2C, per direction) plus the CPU Adam step, which streams master, moments,
gradient and the written-back weight through host memory at :func:`host_step_bytes_per_s`: the
host's cores per GPU at ZeRO-Offload's measured CPU-Adam rate per core
(:data:`CPU_ADAM_BYTES_PER_CORE_S`), no faster than the host memory's peak per GPU. Everything is
counted exposed: no delayed parameter update (ZeRO-Offload §4.3), no overlap of the copies with
backward.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainplan.model.activation_offload import check_activation_offload, parse_modules
from trainplan.model.errors import InputError, LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.hardware import DeviceSpec
from trainplan.model.mechanisms import Mechanism
from trainplan.model.quantities import FRACTION_RULE
from trainplan.model.units import shown_number
from trainplan.model.xp import is_array, where

__all__ = [
    "Offload",
    "NO_OFFLOAD",
    "HOST_GRADIENT_BYTES",
    "check_offload",
    "offload_memory",
    "offload_staging_bytes",
    "offload_seconds",
    "offload_transfers",
    "cpu_adam_bytes",
    "adam_step_bytes",
    "host_rates",
    "host_step_bytes_per_s",
    "host_threads_per_rank",
    "CPU_ADAM_BYTES_PER_CORE_S",
]

HOST_GRADIENT_BYTES = 4
"""Bytes per offloaded element of the FP32 gradient buffer the host keeps for the CPU step
(DeepSpeed's pinned FP32 gradient partition; Megatron-Core's ``HybridDeviceOptimizer`` copies
``main_grad`` to the host)."""


@dataclass(frozen=True, slots=True)
class Offload:
    """What lives on the host instead of the GPU."""

    optimizer: Fraction = Fraction(0)
    """Fraction of the optimizer state (and its step) on the host, 0–1 (Megatron-Core
    ``--optimizer-offload-fraction``; DeepSpeed ``offload_optimizer`` = 1)."""
    params: bool = False
    """Parameter shards (and their gradients and the whole optimizer) on the host: ZeRO-3 only
    (DeepSpeed ``offload_param``, FSDP2 ``CPUOffloadPolicy``). Implies ``optimizer`` = 1."""
    activations: tuple[str, ...] = ()
    """Megatron-Core modules whose saved activations go to the host between forward and
    backward (``--offload-modules``; :mod:`model.activation_offload`), in
    :data:`~model.activation_offload.OFFLOAD_MODULES` order; ``()`` for none. Not part of
    :attr:`active` (which is the optimizer and parameter offload)."""

    def __post_init__(self) -> None:
        try:
            f = Fraction(str(self.optimizer))
        except (TypeError, ValueError):
            raise LayoutError(
                f"offload_optimizer: {self.optimizer!r} must be {FRACTION_RULE}"
            ) from None
        if not 0 <= f <= 1:
            raise LayoutError(
                f"offload_optimizer: {shown_number(self.optimizer)} must be {FRACTION_RULE}"
            )
        if self.params and f not in (0, 1):
            raise LayoutError(
                f"offload_optimizer: {self.optimizer!r} with offload_params: the whole optimizer "
                "moves with the parameters (1)"
            )
        object.__setattr__(self, "optimizer", Fraction(1) if self.params else f)
        object.__setattr__(self, "activations", parse_modules(self.activations))

    @property
    def active(self) -> bool:
        """Whether the optimizer state or the parameters are offloaded (not activations)."""
        return bool(self.optimizer) or self.params


NO_OFFLOAD = Offload()


def check_offload(framework: Framework, zero_stage: int, offload: Offload) -> None:
    """Check that ``framework`` runs ``offload`` at ``zero_stage``.

    Raises
    ------
    LayoutError
        textbook (no mechanism); parameter offload below ZeRO-3 or under Megatron-Core;
        DeepSpeed ZeRO-1/2 with a partial fraction (``ratio`` is ZeRO-3's); FSDP2 anything but
        ``CPUOffloadPolicy`` (parameters, gradients and optimizer together, ZeRO-3); activation
        offload under a profile other than Megatron-Core, or ``attn_proj`` without ``core_attn``
        (:func:`model.activation_offload.check_activation_offload`).

    Examples
    --------
    >>> check_offload(Framework.MEGATRON, 1, Offload(optimizer=Fraction(1, 2)))
    >>> try:
    ...     check_offload(Framework.MEGATRON, 1, Offload(params=True))
    ... except LayoutError as err:
    ...     print(err)
    offload_params: Megatron-Core offloads the optimizer only (--optimizer-cpu-offload), not parameters
    """
    if offload.activations:  # the recompute and MoE rules: model.layout.validate
        check_activation_offload(Framework(framework), "none", offload.activations)
    if not offload.active:
        return
    fw = Framework(framework)
    if fw is Framework.TEXTBOOK:
        raise LayoutError(
            "offload: the textbook profile has no offload mechanism; use `framework` megatron, "
            "deepspeed or fsdp2"
        )
    if offload.params and fw is Framework.MEGATRON:
        raise LayoutError(
            "offload_params: Megatron-Core offloads the optimizer only (--optimizer-cpu-offload), "
            "not parameters"
        )
    if offload.params and zero_stage != 3:
        raise LayoutError(
            f"offload_params: parameter offload needs ZeRO-3 (sharded parameters), not ZeRO-"
            f"{zero_stage}"
        )
    if fw is Framework.MEGATRON and zero_stage == 3 and offload.optimizer:
        raise LayoutError(
            f"offload_optimizer: {shown_number(offload.optimizer)} — Megatron-FSDP (`framework` megatron, "
            "ZeRO-3) is modelled without optimizer offload"
        )
    if fw is Framework.DEEPSPEED and zero_stage < 3 and offload.optimizer != 1:
        raise LayoutError(
            f"offload_optimizer: {shown_number(offload.optimizer)} — DeepSpeed ZeRO-{zero_stage} offloads the "
            "whole optimizer (1); a partial ratio is ZeRO-3's"
        )
    if fw is Framework.FSDP2 and not (offload.params and zero_stage == 3):
        raise LayoutError(
            "offload_optimizer: FSDP2's CPUOffloadPolicy moves parameters, gradients and the "
            "optimizer together under ZeRO-3: give `offload_params` with `zero_stage` 3"
        )


def offload_memory(
    mech: Mechanism,
    offload: Offload,
    weights: Any,
    grads: Any,
    optimizer: Any,
    step: Any,
    elements: Any,
    accumulating: Any = False,
) -> tuple[Any, Any, Any, Any, Any]:
    """(weights, gradients, optimizer, step extra) left on the GPU and the bytes on the host,
    from the mechanism's terms: the offloaded share ``f`` of the optimizer state and of the step
    extras moves, with an FP32 gradient buffer (:data:`HOST_GRADIENT_BYTES` per offloaded
    element) and, when ``accumulating`` (more than one micro-batch per step), the mechanism's
    host accumulation buffers (:attr:`model.mechanisms.Mechanism.host_accumulation_bytes`);
    DeepSpeed ZeRO-2/3's gradient partition leaves the GPU (:func:`_host_grads`; its IPG
    buckets and staging buffers stay, counted apart); with parameters the weight and gradient
    shards move too. ``elements``: the optimizer's
    elements on this GPU (its shard). Exact for Fractions; element-wise for arrays.

    Examples
    --------
    Megatron distributed optimizer, 1e9 elements on dp 8 with half the optimizer offloaded:
    12 B × 1.25e8 × 1/2 = 7.5e8 B of state and 4 B × 1.25e8 × 1/2 = 2.5e8 B of FP32 gradients
    on the host.

    >>> from trainplan.model.mechanisms import mechanism
    >>> m = mechanism("megatron", 1)
    >>> _, _, o, _, host = offload_memory(m, Offload(Fraction(1, 2)), 2e9, 4e9, 1.5e9, 0, 1.25e8)
    >>> o, host
    (750000000.0, 1000000000.0)
    """
    f: Any = offload.optimizer
    if not f:
        return weights, grads, optimizer, step, 0
    if any(map(is_array, (weights, grads, optimizer, step, elements))):
        f = float(f)
    host = f * optimizer + f * HOST_GRADIENT_BYTES * elements
    if mech.host_accumulation_bytes:
        host = host + where(accumulating, f * mech.host_accumulation_bytes * elements, 0)
    optimizer, step = optimizer - f * optimizer, step - f * step
    moved = _host_grads(mech)
    if offload.params:
        host = host + weights
        weights = 0 * weights
    if offload.params or moved:
        host = host + (grads if moved == 2 else 0 * grads)
        grads = 0 * grads
    return weights, grads, optimizer, step, host


def _host_grads(mech: Mechanism) -> int:
    """Where the mechanism keeps its gradient partition under optimizer offload: 0 on the GPU;
    1 nowhere beyond the host FP32 buffer (:data:`HOST_GRADIENT_BYTES`); 2 on the host in its
    own dtype, beside that buffer.

    DeepSpeed edaa7221. ZeRO-2 (1): ``stage_1_and_2.py`` ``copy_grads_in_partition`` returns
    under ``cpu_offload`` before it allocates ``grads_in_partition``; each reduced gradient goes
    from the IPG bucket to ``single_partition_of_fp32_groups[i].grad``, the pinned host FP32
    partition (``async_inplace_copy_grad_to_fp32_buffer_from_gpu``), and across micro-batches
    into ``accumulated_grads_in_cpu`` (:attr:`~model.mechanisms.Mechanism.host_accumulation_bytes`).
    ZeRO-3 (2): ``stage3.py`` sets ``self.device`` to the CPU under ``offload_optimizer`` and
    allocates ``grad_partitions_flat_buffer`` there (``gradient_accumulation_dtype``, the
    partition's every element whatever ``ratio``), beside the host FP32 sub-group gradients
    (``subgroup_gradient_buffer``). ZeRO-1 keeps its whole ``.grad``s on the GPU (0), as do
    the other frameworks (FSDP2's ``CPUOffloadPolicy`` gradient is the host FP32 buffer: 0,
    moved with the parameters).

    >>> from trainplan.model.mechanisms import mechanism
    >>> [_host_grads(mechanism("deepspeed", z)) for z in (1, 2, 3)], _host_grads(mechanism("fsdp2", 3))
    ([0, 1, 2], 0)
    """
    if mech.framework is not Framework.DEEPSPEED or mech.zero_stage < 2:
        return 0
    return 1 if mech.zero_stage == 2 else 2


def offload_staging_bytes(mech: Mechanism, offload: Offload, largest: Any) -> tuple[Any, Any]:
    """(GPU bytes, host bytes) of the gradient staging buffers a mechanism keeps for the whole
    run under optimizer offload: :attr:`model.mechanisms.Mechanism.offload_staging_bytes` per
    element of ``largest``, the elements on this GPU of the stage's largest parameter tensor
    (:func:`model.terms.tensors.stage_largest_tensors`), once on the GPU and once on the
    host. (0, 0) without optimizer offload or for a mechanism that keeps none.

    DeepSpeed ZeRO-1/2 (deepspeedai/DeepSpeed edaa72212, ``deepspeed/runtime/zero/
    stage_1_and_2.py``): ``DeepSpeedZeroOptimizer.__init__`` finds ``largest_param_numel`` over
    every parameter of the rank's ``bit16_groups`` (the stage's whole parameters, after tensor
    parallelism) and, with ``cpu_offload``, allocates ``temp_grad_buffer_for_gpu_offload`` of
    that many elements on the GPU and ``temp_grad_buffer_for_cpu_offload`` on the host (pinned
    with ``pin_memory``), both in ``self.dtype``, the parameters' dtype; neither is freed before
    the run ends (``async_accumulate_grad_in_cpu_via_gpu`` and
    ``_restore_cpu_offload_grad_to_gpu`` stage each gradient through the GPU one). Exact for
    numbers; element-wise for arrays.

    Examples
    --------
    Llama 3 8B on one tp rank: the embedding, 128,256 × 4,096 elements, in BF16 —
    1,050,673,152 B on the GPU and as many on the host.

    >>> from trainplan.model.mechanisms import mechanism
    >>> offload_staging_bytes(mechanism("deepspeed", 1), Offload(Fraction(1)), 128256 * 4096)
    (1050673152, 1050673152)
    >>> offload_staging_bytes(mechanism("deepspeed", 1), NO_OFFLOAD, 128256 * 4096)
    (0, 0)
    """
    if not offload.optimizer or not mech.offload_staging_bytes:
        return 0, 0
    staging = mech.offload_staging_bytes * largest
    return staging, staging


def adam_step_bytes(optimizer_bytes: int, weight_bytes: int, clip_and_zero: bool = True) -> int:
    """Bytes one Adam step moves per element it updates: reads and writes the master weight and
    both moments (2 × ``optimizer_bytes``), reads the FP32 gradient (4), writes the working
    weight (``weight_bytes``); on the GPU the gradient-norm clip reads the gradient once more
    (4) and zeroing the gradient buffer writes it (4) — Apex/Megatron ``FusedAdam`` over FP32
    state. The optimizer step is memory-bound: what it takes is these bytes over the memory's
    bandwidth (HBM on the GPU, :mod:`model.step_time`; host memory for CPU Adam,
    :func:`offload_seconds`).

    >>> adam_step_bytes(12, 2), adam_step_bytes(12, 2, clip_and_zero=False), adam_step_bytes(8, 2)
    (38, 30, 30)
    """
    clip = 2 * HOST_GRADIENT_BYTES if clip_and_zero else 0
    return 2 * optimizer_bytes + HOST_GRADIENT_BYTES + weight_bytes + clip


def cpu_adam_bytes(optimizer_bytes: int, weight_bytes: int) -> int:
    """Host-memory bytes the CPU Adam step streams per element (:func:`adam_step_bytes`
    without the GPU's clip and zeroing, which stay on the GPU).

    >>> cpu_adam_bytes(12, 2)
    30
    """
    return adam_step_bytes(optimizer_bytes, weight_bytes, clip_and_zero=False)


def offload_transfers(
    mech: Mechanism, offload: Offload, elements: Any, microbatches: Any
) -> tuple[Any, Any]:
    """(device→host, host→device) bytes per step over the host link: the offloaded gradients
    (once per step, or per micro-batch where the framework reduces per micro-batch), the
    updated weights back once per step; with parameters, the shard fetched for the forward and
    for the backward of every micro-batch; under DeepSpeed ZeRO-2 the host-accumulated
    gradients brought back to the GPU for every micro-batch after the first (DeepSpeed edaa7221
    ``stage_1_and_2.py`` ``copy_grads_in_partition`` → ``async_accumulate_grad_in_cpu_via_gpu``:
    ``dest_buffer.copy_(accumulated_grads_in_cpu[...])``, on the compute stream with
    ``overlap_comm`` off, ZeRO-2's default). Exact for numbers; element-wise for arrays."""
    f: Any = float(offload.optimizer) if is_array(elements) else offload.optimizer
    grads = f * elements * mech.reduce_bytes
    d2h = grads * microbatches if mech.reduce_per_microbatch else grads
    h2d = f * elements * mech.weight_bytes
    if offload.params:
        h2d = h2d + 2 * microbatches * elements * mech.weight_bytes
    if mech.framework is Framework.DEEPSPEED and mech.zero_stage == 2:
        # stage_1_and_2.py async_accumulate_grad_in_cpu_via_gpu: from the second micro-batch on,
        # the host-accumulated gradients come back to the GPU, are added there and go out again
        h2d = h2d + (microbatches - 1) * f * elements * mech.weight_bytes
    return d2h, h2d


CPU_ADAM_BYTES_PER_CORE_S = 10e9 * 28 / (2.57 * 48)
"""Host-memory bytes one CPU core streams per second in the CPU Adam step: 2.27e9 B/s.

ZeRO-Offload (Ren et al., USENIX ATC 2021, arXiv 2101.06840), the Adam latency table of §6
(CPU-Adam, PyTorch CPU Adam and PyTorch GPU Adam for 1B to 10B parameters): DeepSpeed's CPU-Adam
updates 10e9 FP32 parameters in 2.57 s (PyTorch's CPU Adam 14.76 s) on the paper's host, one
DGX-2: two 24-core Xeon Platinum 8168, 48 cores (NVIDIA DGX-2 datasheet), the kernel's
``#pragma omp parallel for`` over all of them. Its FP32 step reads parameter, gradient and both
moments and writes parameter and moments, 28 B per element; 10e9 × 28 B / 2.57 s = 109 GB/s,
below that host's six DDR4-2666 channels per socket (256 GB/s), so the rate is the cores', taken
per core (÷ 48). The same rate is taken for PyTorch's fused CPU AdamW (``fused=True``, what
Megatron-Core's ``HybridDeviceOptimizer`` and torchtitan run): PyTorch PR #123074, which added
it, reports 5.1× the unfused step on a 56-core Sapphire Rapids, as CPU-Adam is 5.7× PyTorch's
unfused CPU Adam in the table above (14.76 / 2.57). A per-core rate of the paper's 2.7 GHz
Skylake core, for every host: no per-core figure for a newer core has been found."""


def host_threads_per_rank(device: DeviceSpec) -> float | None:
    """CPU threads each rank's optimizer step runs on: the node's cores shared evenly by its GPUs'
    ranks (None where the table has no core count). DeepSpeed ``launch.py`` at edaa7221 sets
    ``OMP_NUM_THREADS`` to the cores per rank under ``--bind_cores_to_rank``
    (``get_numactl_cmd``); without it OpenMP's default spreads each rank over every core, which
    the eight ranks then share. Under ``torchrun`` (Megatron-LM's examples, torchtitan's
    ``run_train.sh``) ``torch/distributed/run.py`` sets ``OMP_NUM_THREADS=1`` when it is unset:
    the plan assumes ``OMP_NUM_THREADS`` exported at the cores per rank, and says so.

    >>> from trainplan.topology.accelerators import get_accelerator
    >>> host_threads_per_rank(get_accelerator("H100-SXM"))
    14.0
    """
    if device.host_cores is None:
        return None
    return device.host_cores / device.gpus_per_node


def host_step_bytes_per_s(device: DeviceSpec) -> float | None:
    """Host-memory bytes per second a GPU's CPU optimizer step streams: its threads
    (:func:`host_threads_per_rank`) at :data:`CPU_ADAM_BYTES_PER_CORE_S`, capped at the host
    memory's peak per GPU; that peak alone where the core count is unknown, None where the peak
    is. DGX H100: 112 cores / 8 = 14 × 2.27e9 = 31.8e9 B/s, below 76.8e9.

    >>> from trainplan.topology.accelerators import get_accelerator
    >>> round(host_step_bytes_per_s(get_accelerator("H100-SXM")) / 1e9, 2)
    31.78
    """
    memory, threads = device.host_memory_bytes_per_s, host_threads_per_rank(device)
    if memory is None or threads is None:
        return memory
    return min(memory, threads * CPU_ADAM_BYTES_PER_CORE_S)


FSDP2_HOST_ACCUMULATE_BYTES = 12
"""Host-memory bytes per element of FSDP2's gradient accumulation on the CPU under
``CPUOffloadPolicy`` (torchtitan ``training.enable_cpu_offload``): from the second micro-batch
on, ``foreach_reduce`` (PyTorch ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py`` at
010ae4a8) copies the new FP32 gradient shard to the host without overlap ("the CPU add kernel
depends on the copy result") and adds it into the held one on the CPU,
``sharded_param.grad._local_tensor += new_sharded_grad``: two FP32 reads and one FP32 write."""


def offload_seconds(
    mech: Mechanism,
    offload: Offload,
    elements: Any,
    microbatches: Any,
    optimizer_bytes: int,
    host_link_bytes_per_s: float,
    host_memory_bytes_per_s: float,
) -> Any:
    """Seconds per step the offload adds, all exposed: the host-link transfers
    (:func:`offload_transfers`) at ``host_link_bytes_per_s`` per direction, one after the
    other, plus the CPU Adam step over the offloaded elements at ``host_memory_bytes_per_s``
    (:func:`cpu_adam_bytes`) and, under ``fsdp2`` with the parameters offloaded, the CPU's
    gradient accumulation of every micro-batch after the first
    (:data:`FSDP2_HOST_ACCUMULATE_BYTES`). Exact for numbers; element-wise for arrays.

    Examples
    --------
    ZeRO-Offload on one H100 (PCIe Gen5 64 GB/s; a host step at 76.8 GB/s per GPU), 1e9
    elements, bf16 gradients once per step: (2e9 + 2e9)/64e9 + 30e9/76.8e9 = 0.0625 + 0.390625.

    >>> from trainplan.model.mechanisms import mechanism
    >>> m = mechanism("megatron", 1, gradient_bytes=2)
    >>> offload_seconds(m, Offload(Fraction(1)), 1e9, 8, 12, 64e9, 76.8e9)
    0.453125

    FSDP2 with the parameters offloaded adds (8 − 1) × 1e9 × 12 B / 76.8e9 = 1.09375 s of CPU
    gradient accumulation to whatever its transfers and step take.

    >>> f = mechanism("fsdp2", 3)
    >>> on = Offload(Fraction(1), params=True)
    >>> off = offload_seconds(f, on, 1e9, 8, 12, 64e9, 76.8e9)
    >>> one = offload_seconds(f, on, 1e9, 1, 12, 64e9, 76.8e9)
    >>> round(off - one - (8 - 1) * 2 * 1e9 * f.weight_bytes / 64e9
    ...       - (8 - 1) * 1e9 * f.reduce_bytes / 64e9, 6)
    1.09375
    """
    if not offload.active:
        return 0.0 * elements
    d2h, h2d = offload_transfers(mech, offload, elements, microbatches)
    f = float(offload.optimizer)
    cpu = f * elements * cpu_adam_bytes(optimizer_bytes, mech.weight_bytes)
    if offload.params and mech.framework is Framework.FSDP2:
        cpu = cpu + (microbatches - 1) * elements * FSDP2_HOST_ACCUMULATE_BYTES
    return (d2h + h2d) / host_link_bytes_per_s + cpu / host_memory_bytes_per_s


def host_rates(device: DeviceSpec, need_memory: bool = True) -> tuple[float, float]:
    """(host-link bytes/s per direction, host-step bytes/s per GPU, :func:`host_step_bytes_per_s`)
    of ``device``; with ``need_memory`` False an unknown host-memory rate is returned as 0
    (activation offload only crosses the link).

    Raises
    ------
    InputError
        Either is unknown (not in the accelerator table and not given).
    """
    link, memory = device.host_link_bytes_per_s, host_step_bytes_per_s(device)
    if link is not None and memory is None and not need_memory:
        return link, 0.0
    if link is None or memory is None:
        missing = "`host_link_gbps`" if link is None else "`host_memory_gbps`"
        raise InputError(
            f"offload: the {device.name} has no {'host link' if link is None else 'host memory'}"
            f" bandwidth in {device.figures_from if device.origin else 'the table (trainplan gpus)'}"
            f"; give {missing}"
        )
    return link, memory
