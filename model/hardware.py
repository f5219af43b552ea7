"""The cost model's view of hardware: plain numbers, no graphs, no file reading.

:class:`DeviceSpec` is one accelerator (memory capacity, dense BF16 peak, link bandwidths). The table
of accelerators, each row with its source, lives in ``topology/accelerators.toml`` and is read by
:mod:`topology.accelerators`; :class:`ClusterLinks` is what a cluster tells the cost model about
its two link tiers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainplan.model.errors import InputError
from trainplan.model.frameworks import DEFAULT_RUNTIME_RESERVE_BYTES, DRIVER_RESERVED_BYTES
from trainplan.model.part_family import catalogue_part
from trainplan.model.rank_groups import nccl_node_size

__all__ = ["DeviceSpec", "ClusterLinks", "runtime_reserve_for", "link_example"]


def runtime_reserve_for(driver_reserved_bytes: int) -> int:
    """The default runtime reserve of a part whose driver keeps ``driver_reserved_bytes`` of its
    memory from every process: :data:`model.frameworks.DEFAULT_RUNTIME_RESERVE_BYTES` with the
    driver's part (an H100's 841 MiB, :data:`model.frameworks.DRIVER_RESERVED_BYTES`) replaced
    by the part's own; the CUDA context, the cuBLAS workspaces and the fragmentation allowance
    are the same on every part. Bytes.

    >>> runtime_reserve_for(DRIVER_RESERVED_BYTES) == DEFAULT_RUNTIME_RESERVE_BYTES
    True
    >>> runtime_reserve_for(742 * 2**20) - DEFAULT_RUNTIME_RESERVE_BYTES == (742 - 841) * 2**20
    True
    """
    return DEFAULT_RUNTIME_RESERVE_BYTES - DRIVER_RESERVED_BYTES + driver_reserved_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSpec:
    """One accelerator as the cost model sees it.

    Every figure comes from the row's ``source`` (vendor datasheet or a named secondary copy).
    """

    name: str
    """Catalogue name, e.g. ``"H100-SXM"``."""
    memory_bytes: int
    """Device memory capacity in bytes (GB = 10^9 or GiB = 2^30 as the vendor states it)."""
    memory_unit: str
    """``"GB"`` or ``"GiB"``: the unit the vendor states the capacity in."""
    hbm_bytes: int | None = None
    """The device's memory in bytes: where a public capture of the driver's report is known,
    the total the driver reports (nvidia-smi's FB memory Total: an H100 reports 81,559 MiB, a
    GB200 189,471 MiB); else the HBM where the vendor's "GB" counts power-of-two stacks (an
    "80 GB" H800 has 80 GiB); None = ``memory_bytes`` as stated."""
    driver_reserved_bytes: int = DRIVER_RESERVED_BYTES
    """Bytes of :attr:`physical_bytes` the driver keeps from every process: where a capture is
    known, its Reserved (CUDA's total memory is Total less Reserved; 480 MiB on an H100 under
    driver 580.105.08, 742 MiB on a GB200 under 580.173.02); else what an H100's driver keeps of
    its 80 GiB, 841 MiB (:data:`model.frameworks.DRIVER_RESERVED_BYTES`)."""
    driver_source: str = ""
    """The capture :attr:`hbm_bytes` and :attr:`driver_reserved_bytes` come from, where one
    does."""
    runtime_reserve_bytes: int = DEFAULT_RUNTIME_RESERVE_BYTES
    """Bytes a physical profile keeps free for the driver, CUDA context, cuBLAS workspaces and
    allocator fragmentation (:func:`runtime_reserve_for` of :attr:`driver_reserved_bytes`;
    ``memory_reserve_gib`` overrides)."""
    peak_flops_per_s: float
    """Dense BF16 peak in FLOP/s (no 2:4 sparsity); FP16 tensor peak where there is no BF16."""
    fp8_flops_per_s: float | None = None
    """Dense FP8 tensor peak in FLOP/s (no sparsity); None on parts without FP8 tensor cores
    (V100, A100, TPUs): ``precision = fp8`` is refused there (:mod:`model.precision`)."""
    fp8_source: str = ""
    """Where :attr:`fp8_flops_per_s` comes from, where :attr:`source` does not say it."""
    nvlink_bytes_per_s: float | None = None
    """Scale-up (NVLink, Infinity Fabric, ICI) bandwidth per GPU per direction, bytes/s; None if unknown."""
    nvlink_domain: int | None = None
    """GPUs per scale-up domain (8 for an HGX node, 72 for NVL72); None if unknown."""
    segment_gpus: int | None = None
    """GPUs of one Slurm segment (``sbatch --segment`` × :attr:`gpus_per_node`) the job's ranks
    fill in order, each segment in one NVLink domain, as the user set it (``--set
    segment_gpus``); 0: none, the ranks fill whole domains (``--set nvlink_domain`` alone says
    so); None: as NVIDIA's benchmark launcher sets it on a multi-node domain
    (:func:`model.segments.placed_for`)."""
    placement_segment: int = 0
    """GPUs of the segment the job's placement uses (:func:`model.segments.placed_for` of
    :attr:`segment_gpus` and the job's size); 0: none."""
    scaleout_bytes_per_s: float | None = None
    """Scale-out (InfiniBand/RoCE NIC) bandwidth per GPU per direction, bytes/s; None if unknown."""
    hbm_bytes_per_s: float | None = None
    """HBM bandwidth per GPU, bytes/s (the vendor's peak); what decode reads the weights and the
    KV cache at (:mod:`model.rollout`). None if unknown."""
    host_link_bytes_per_s: float | None = None
    """GPU ↔ host link (PCIe, or NVLink-C2C on Grace parts) per GPU per direction, bytes/s; what
    optimizer offload moves gradients and weights over (:mod:`model.rlhf.roles`). None if
    unknown."""
    bandwidth_source: str = ""
    """Where ``hbm_bytes_per_s`` and ``host_link_bytes_per_s`` come from."""
    host_memory_bytes: int | None = None
    """Host (CPU) memory per GPU of the vendor's reference node, bytes: what offloaded optimizer
    state and parameters live in (:mod:`model.offload`). None if unknown."""
    host_memory_bytes_per_s: float | None = None
    """Host memory bandwidth per GPU, bytes/s: what a CPU optimizer step streams at
    (:mod:`model.offload`). None if unknown."""
    host_cores: int | None = None
    """Physical CPU cores per host node of the reference system, every socket: what the ranks'
    CPU optimizer threads share (:func:`model.offload.host_step_bytes_per_s`). None if unknown."""
    host_source: str = ""
    """Where ``host_memory_bytes``, ``host_memory_bytes_per_s`` and ``host_cores`` come from."""
    gpus_per_node: int = 8
    """GPUs per host node of the reference system (8 for HGX/DGX; 4 per GB200/GB300 compute
    tray): what host bytes per node multiply by."""
    source: str = ""
    """Where the figures come from: the dense BF16 peak first (quoted as the peak's source),
    the FP8 peak in :attr:`fp8_source` where that is apart."""
    status: str = "secondary"
    """``vendor`` (read in the vendor's document), ``secondary`` (a copy of it) or ``derived``."""
    like: str = ""
    """The catalogue part whose per-part tables stand for this one (:attr:`part`): a part
    described in a file (``--gpu PATH.toml``, :mod:`topology.accelerator_file`) names it with
    ``like`` or ``base``; empty for the catalogue's own rows and their what-ifs, whose name says
    it."""
    origin: str = ""
    """Where this part's figures were read: the file of ``--gpu PATH.toml`` as the user gave
    it, or the web API's inline object (``the request's accelerator object``); empty for the
    accelerator table's parts."""

    def __post_init__(self) -> None:
        if self.memory_bytes <= 0 or self.peak_flops_per_s <= 0:
            raise InputError(f"gpu {self.name}: memory and peak must be positive")
        if not 0 <= self.runtime_reserve_bytes < self.physical_bytes:
            raise InputError(
                f"memory_reserve: {self.runtime_reserve_bytes / 2**30:.2f} GiB must be at least 0 "
                f"and below the {self.name}'s {int(self.physical_bytes * 100 / 2**30) / 100:.2f} GiB"
            )

    @property
    def part(self) -> str:
        """The catalogue name every per-part table is keyed by (the generation's calibrated
        efficiencies, :func:`model.roofline.generation_of`; the SM count; the published kernel
        and collective curves, :mod:`model.part_family`): :attr:`like` where a file names it,
        else the name without a what-if suffix (:func:`model.part_family.catalogue_part`).

        >>> spec = dict(memory_bytes=80 * 10**9, memory_unit="GB", peak_flops_per_s=989.4e12)
        >>> DeviceSpec(name="H100-SXM[hbm×1.5]", **spec).part
        'H100-SXM'
        >>> DeviceSpec(name="H100-A3-High", like="H100-SXM", **spec).part
        'H100-SXM'
        """
        return self.like or catalogue_part(self.name)

    @property
    def placement_domain(self) -> int | None:
        """GPUs of consecutive ranks that lie in one NVLink domain: the placement's segment
        (:attr:`placement_segment`, :mod:`model.segments`) where one is set, else
        :attr:`nvlink_domain`. What every rule on where a group lies reads
        (:func:`model.rank_groups.in_one_domain` through :class:`ClusterLinks`). Units: GPUs."""
        return self.placement_segment or self.nvlink_domain

    @property
    def figures_from(self) -> str:
        """Where the part's figures were read, as a refusal of a missing one names it: ``the
        accelerator table``, ``the file PATH`` or the web API's object (:attr:`origin`)."""
        if not self.origin:
            return "the accelerator table"
        return f"the file {self.origin}" if self.origin.endswith(".toml") else self.origin

    @property
    def physical_bytes(self) -> int:
        """The bytes the device has: ``hbm_bytes`` where known, else ``memory_bytes``."""
        return self.hbm_bytes or self.memory_bytes

    @property
    def cuda_total_bytes(self) -> int:
        """The device's bytes as CUDA reports them to a process (``cudaMemGetInfo``'s total,
        ``torch.cuda.mem_get_info``): :attr:`physical_bytes` less :attr:`driver_reserved_bytes`
        (an H100: 81,559 − 480 = 81,079 MiB). What vLLM multiplies ``gpu_memory_utilization``
        by (``vllm/utils/mem_utils.py`` ``MemorySnapshot.measure``,
        ``vllm/v1/worker/gpu_worker.py`` ``Worker.init_device``: ``requested_memory``)."""
        return self.physical_bytes - self.driver_reserved_bytes

    def usable_bytes(self, physical: bool = True) -> int:
        """Bytes a layout may use: the device's bytes less the runtime reserve under a physical
        profile; the vendor's stated capacity under ``textbook`` (an "80 GB" GPU holds 80·10⁹ B).

        Examples
        --------
        >>> h100 = DeviceSpec(name="H100", memory_bytes=80 * 10**9, memory_unit="GB",
        ...                   hbm_bytes=80 * 2**30, peak_flops_per_s=989e12)
        >>> h100.usable_bytes(False), h100.usable_bytes(True) == 80 * 2**30 - 2_689_336_320
        (80000000000, True)
        """
        if not physical:
            return self.memory_bytes
        return self.physical_bytes - self.runtime_reserve_bytes

    def with_links(
        self,
        *,
        nvlink_domain: int | None = None,
        nvlink_bytes_per_s: float | None = None,
        scaleout_bytes_per_s: float | None = None,
        segment_gpus: int | None = None,
    ) -> DeviceSpec:
        """This device with the given link figures overriding the table's (None keeps them). A
        domain given without ``segment_gpus`` is one the job owns whole: no segments
        (:attr:`segment_gpus` 0; :mod:`model.segments`)."""
        if segment_gpus is None and nvlink_domain is not None:
            segment_gpus = 0
        for name, value in (
            ("nvlink_domain", nvlink_domain),
            ("segment_gpus", segment_gpus or None),
            ("nvlink_gbps", nvlink_bytes_per_s),
            ("scaleout_gbps", scaleout_bytes_per_s),
        ):
            if value is not None and value <= 0:
                raise InputError(f"{name}: {value} must be positive")
        return replace(
            self,
            nvlink_domain=nvlink_domain if nvlink_domain is not None else self.nvlink_domain,
            nvlink_bytes_per_s=nvlink_bytes_per_s or self.nvlink_bytes_per_s,
            scaleout_bytes_per_s=scaleout_bytes_per_s or self.scaleout_bytes_per_s,
            segment_gpus=self.segment_gpus if segment_gpus is None else segment_gpus,
        )


_LINK_EXAMPLES = {
    "nvlink_domain": ("8", "GPUs per NVLink domain, an HGX board's"),
    "nvlink_gbps": ("450", "GB/s per GPU per direction, an H100 SXM's NVLink 4"),
    "scaleout_gbps": ("50", "GB/s per GPU per direction, one 400 Gb/s NIC per GPU"),
}
"""A value to show for each link figure a part's table row may lack, with its unit: the H100
SXM row's own (``topology/accelerators.toml``: NVLink 900 GB/s bidirectional in an 8-GPU HGX
board, one 400 Gb/s ConnectX-7 per GPU)."""


def link_example(key: str) -> str:
    """``key`` as a refusal asks for it: the parameter set to an example value, with its unit.

    >>> link_example("scaleout_gbps")
    '`scaleout_gbps`=50 (GB/s per GPU per direction, one 400 Gb/s NIC per GPU)'
    """
    value, unit = _LINK_EXAMPLES[key]
    return f"`{key}`={value} ({unit})"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterLinks:
    """The two link tiers one parallel axis can ride (conventions "Layout", "Communication").

    An axis whose ranks all sit in one NVLink domain uses ``nvlink_bytes_per_s``; otherwise its
    ring crosses the scale-out fabric and is bounded by ``scaleout_bytes_per_s``.
    """

    nvlink_domain: int
    """GPUs per NVLink domain (>= 1)."""
    nvlink_bytes_per_s: float
    """Bandwidth per GPU per direction inside a domain, bytes/s."""
    scaleout_bytes_per_s: float | None
    """Bandwidth per GPU per direction across domains, bytes/s; None only for a cluster that is
    one NVLink domain and a part whose table row has no scale-out figure (nothing crosses it:
    :meth:`across_domains` refuses to be asked)."""
    nccl_node: int = 0
    """GPUs of consecutive ranks NCCL counts as one node (:func:`model.rank_groups.
    nccl_node_size`: the host, or the NVLink clique of a multi-node domain), what each group's
    ``comm->nNodes`` counts (:func:`model.rank_groups.nccl_nodes`); 0: the NVLink domain."""

    def across_domains(self) -> float:
        """The scale-out rate, bytes/s per GPU per direction.

        Raises
        ------
        InputError
            When the part has no scale-out figure (a one-domain cluster was built without one).
        """
        if self.scaleout_bytes_per_s is None:
            raise InputError(
                "scaleout_gbps: the accelerator table has no scale-out figure for this part and a "
                f"group spans more than one NVLink domain of {self.nvlink_domain}; give "
                + link_example("scaleout_gbps")
            )
        return self.scaleout_bytes_per_s

    @classmethod
    def from_device(cls, device: DeviceSpec, num_gpus: int | None = None) -> ClusterLinks:
        """The links of a cluster of ``num_gpus`` GPUs of ``device``; errors name the missing
        figure and the flag. The domain is the placement's (:attr:`DeviceSpec.placement_domain`:
        a Slurm segment where one applies, :mod:`model.segments`). A cluster of at most one
        domain needs no scale-out figure (``num_gpus`` given and ≤ the domain: nothing leaves
        it).

        Raises
        ------
        InputError
            When the accelerator table has no figure for a tier the cluster uses and none was
            given (the scale-out tier: when ``num_gpus`` is None or exceeds one domain).
        """
        domain = device.placement_domain
        one_domain = num_gpus is not None and domain is not None and num_gpus <= domain
        missing = [
            flag
            for flag, value in (
                ("nvlink_domain", device.nvlink_domain),
                ("nvlink_gbps", device.nvlink_bytes_per_s),
                ("scaleout_gbps", device.scaleout_bytes_per_s or one_domain or None),
            )
            if value is None
        ]
        if missing:
            raise InputError(
                f"gpu {device.name}: {device.figures_from} has no "
                f"{', '.join(missing)}; give {', '.join(link_example(m) for m in missing)}"
            )
        assert domain and device.nvlink_bytes_per_s
        return cls(
            nvlink_domain=domain,
            nvlink_bytes_per_s=device.nvlink_bytes_per_s,
            scaleout_bytes_per_s=device.scaleout_bytes_per_s,
            nccl_node=nccl_node_size(device.gpus_per_node, domain),
        )
