"""What Transformer Engine's userbuffers (``tp_comm_overlap = full``) do to the GEMMs they overlap:
the SMs a GEMM is launched without, and the chunks it is cut into.

Transformer Engine (NVIDIA/TransformerEngine d0067d0da, 2.20.0.dev0) overlaps each of a layer's
tensor-parallel collectives with one GEMM, by the method of its communicator
(``transformer_engine/pytorch/module/base.py`` ``initialize_ub``, ``get_default_config``):

* ``ring_exchange`` (defaults ``qkv_fprop``, ``fc1_fprop``, ``proj_dgrad``, ``fc2_dgrad``): the
  all-gathered operand moves round the tp ring by point-to-point copies on the copy engine
  (``use_ce`` True; ``num_sm`` 1, ``set_sm_margin`` False) while the GEMM runs one chunk of
  ``s·b/(cp·tp)`` rows at a time (``comm_gemm_overlap.cpp`` ``CommOverlapP2PBase::
  split_overlap_ag``: ``n_chunk = _ubufs[0].size(0)``, ``tp`` calls of ``nvte_cublas_gemm``;
  ``aggregate`` pairs two chunks a call, ``2 * n_chunk``). A reduce-scatter by ring exchange
  (``CommOverlapP2PBase::split_overlap_rs``, Megatron Bridge's FP8 recipes for ``proj_fprop``
  and ``fc2_fprop``) runs the GEMM in the same ``tp`` row chunks and ends with ``reduce_bf16``
  over the ``tp`` partial chunks on the main stream (:func:`partials_sum_seconds`).
* ``pipeline`` (``proj_fprop``, ``fc2_fprop``): a reduce-scatter after the GEMM; the GEMM is cut
  into ``num_splits`` (default 4) chunks of its output features (``CommOverlapBase::
  split_overlap_rs``: ``m_chunk = m / _num_splits`` of the weight's rows, the output's columns,
  each chunk reduce-scattered by the userbuffers kernel on ``num_sm`` SMs while the next runs).
* ``bulk`` (``qkv_dgrad``, ``fc1_dgrad``: the input's all-gather; ``qkv_wgrad``, ``fc1_wgrad``:
  the input gradient's reduce-scatter): one GEMM beside one userbuffers kernel on ``num_sm`` SMs
  (``CommOverlapBase::bulk_overlap``).
* ``external`` (``proj_wgrad``, ``fc2_wgrad``): the plain GEMM on the ring exchange's gathered
  copy; nothing changes.

Every overlapped GEMM is launched with ``_math_sms`` SMs: ``CommOverlapCore::initialize`` sets
``_math_sms = set_sm_margin ? sm_count − num_comm_sm : sm_count`` (less ``NVTE_EXT_MARGIN_SM``,
default 0) and passes it to each chunk's ``nvte_cublas_gemm``. ``get_default_config`` gives
``pipeline`` and ``bulk`` ``num_sm`` 16 with ``set_sm_margin`` True since Transformer Engine 2.0
(544dd14b4); before it (1.8.0.dev0 at 7d576ed2, NeMo 24.07's pin) ``add_ub`` defaulted
``set_sm_margin`` to 0. The pipelined and ring-exchanged chunks go to
``min(_NUM_MAX_UB_STREAMS = 3, num_splits)`` compute streams (``cpp_extensions/gemm.py``;
``CommOverlapCore::initialize``), so one chunk's last wave can share the SMs with the next
chunk's first: the wave rule takes the chunks as one batch of chunk-shaped GEMMs.

What a run passes (:data:`UB_CONFIGS`, the key ``tp_comm_overlap_cfg``):

* Megatron-LM (d98e8a64dd ``megatron/training/initialize.py`` ``_initialize_tp_communicators``)
  passes ``ub_cfgs = {}`` unless ``--tp-comm-overlap-cfg`` names a YAML file: Transformer
  Engine's defaults, ``te`` (≥ 2.0) or ``te-1`` (before 2.0). Megatron-Core turns on every
  overlap but the dgrad reduce-scatter (``model_parallel_config.py``: ``tp_comm_overlap_ag``,
  ``_rs``, ``tp_comm_bulk_dgrad``, ``_wgrad`` True, ``tp_comm_overlap_rs_dgrad`` False) and
  none for the experts (``extensions/transformer_engine.py``: "Disable ub overlap for
  experts").
* Megatron Bridge (NVIDIA-NeMo/Megatron-Bridge 97ad8cc6f, ``src/megatron/bridge/training/
  comm_overlap.py``) passes a named ``TransformerLayerTPOverlapCfg`` per recipe
  (``scripts/performance/configs/llama/llama3_llm_pretrain.py``, ``llama31_llm_pretrain.py``:
  ``cfg.comm_overlap.tp_comm_overlap_cfg``), given here by its Python name.
* The NeMo launcher (NVIDIA/NeMo-Framework-Launcher 24.07, 8325688d) names a YAML file per model
  (``launcher_scripts/conf/training/tp_overlap/``), given here by its file name.

A ``bulk`` or ``pipeline`` communicator without ``set_sm_margin`` (``te-1``, and the bulk overlaps
of Megatron Bridge's and the NeMo launcher's configurations) launches the GEMM on every SM while
its kernel holds ``num_sm`` of them: ``CommOverlapBase`` always runs these on SMs (its constructor
passes ``use_ce`` false to ``CommOverlapCore``), and ``bulk_overlap`` / ``split_overlap_rs`` set
``_ub_comm->sms = _num_comm_sm`` before ``allgather2_userbuff_inplace`` /
``reducescatter2_userbuff_inplace`` / ``reducescatter2_userbuff_stridedoutput``
(``userbuffers.cu``: a cooperative launch of ``sms`` blocks of ``comm->threads`` threads, 1,024
by ``userbuffers-host.cpp``, in clusters of ``cga_size`` 2, each kernel
``__launch_bounds__(MAX_THREADS = 1024)``; the communication stream at the highest priority, the
GEMM launched after the communication kernel's launch event). A block of 1,024 threads holds
half the SM's threads and up to all its registers, so the GEMM's CTAs (a Hopper cuBLAS tile of
384 threads holds most of the register file) do not run beside it: the GEMM loses those SMs while
the communication runs, as it loses an NCCL collective's. It is charged the same measured ``φ``
(:func:`model.comm_sms.held_sm_share` of ``num_sm`` blocks, :func:`ub_sm_share`) in
:mod:`model.layer_time`: the collective of ``a`` seconds beside its GEMM of ``c`` waits
``max(φ·a, a − c)``. The measurement's blocks held 512 threads, these 1,024: a floor, as for
NCCL's 640. The ring exchanges move their chunks on the copy engine (``use_ce`` True) and hold
no SM (one signal block of the ``userbuffers_send`` copy aside), so they are not charged; with
``set_sm_margin`` the GEMM runs on the SMs it is launched with (``taken``) and the kernel beside
it takes none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from trainplan.model.comm_sms import held_sm_share
from trainplan.model.errors import InputError
from trainplan.model.roofline import RooflineParams, memory_seconds

__all__ = [
    "UbMethod",
    "UbGemm",
    "Userbuffers",
    "UB_CONFIGS",
    "UB_STREAMS",
    "DEFAULT_UB_CONFIG",
    "ROLE_LAYERS",
    "check_ub_config",
    "userbuffers_for",
    "partials_sum_seconds",
    "ub_sm_share",
]


@dataclass(frozen=True, slots=True)
class UbMethod:
    """One communicator's settings, as Transformer Engine's ``add_ub`` takes them."""

    method: str
    """``ring_exchange``, ``pipeline`` or ``bulk``."""
    num_sm: int = 0
    """SMs of the userbuffers kernel (count); what ``set_sm_margin`` takes from the GEMM."""
    set_sm_margin: bool = False
    """The GEMM is launched on ``sm_count − num_sm`` SMs."""
    num_splits: int = 4
    """Chunks of a ``pipeline`` GEMM (count); a ring exchange cuts ``tp``."""
    aggregate: bool = False
    """A ring exchange runs two chunks a GEMM call."""


_RING = UbMethod("ring_exchange", 1)
_TE_DEFAULT = {
    **{n: _RING for n in ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad")},
    **{n: UbMethod("pipeline", 16, True) for n in ("proj_fprop", "fc2_fprop")},
    **{n: UbMethod("bulk", 16, True) for n in ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")},
}


def _bulk(dgrad_qkv: int, wgrad_qkv: int, dgrad_fc1: int, wgrad_fc1: int) -> dict[str, UbMethod]:
    """The four bulk overlaps without SM margin (every recipe below) and the four ring exchanges
    of Transformer Engine's defaults (``RingExchangeOverlapCfg(aggregate=False)``)."""
    sms = {"qkv_dgrad": dgrad_qkv, "qkv_wgrad": wgrad_qkv}
    sms |= {"fc1_dgrad": dgrad_fc1, "fc1_wgrad": wgrad_fc1}
    rings = {n: _RING for n in ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad")}
    return {n: UbMethod("bulk", s) for n, s in sms.items()} | rings


def _fprops(proj: int, fc2: int) -> dict[str, UbMethod]:
    """``proj_fprop`` and ``fc2_fprop`` pipelined in 4 splits on ``proj`` and ``fc2`` SMs, with
    the SM margin; 0 SMs: a ring exchange on 1 SM with the margin
    (``RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True)``)."""
    return {
        n: UbMethod("pipeline", s, True) if s else UbMethod("ring_exchange", 1, True)
        for n, s in (("proj_fprop", proj), ("fc2_fprop", fc2))
    }


UB_CONFIGS: MappingProxyType[str, MappingProxyType[str, UbMethod]] = MappingProxyType(
    {
        name: MappingProxyType(cfg)
        for name, cfg in {
            "te": _TE_DEFAULT,
            "te-1": {n: UbMethod(m.method, m.num_sm) for n, m in _TE_DEFAULT.items()},
            "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192": _bulk(4, 24, 2, 4) | _fprops(24, 16),
            "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192": _bulk(4, 24, 2, 4) | _fprops(0, 0),
            "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192": _bulk(2, 24, 2, 2)
            | _fprops(24, 8),
            "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192": _bulk(2, 24, 2, 2)
            | _fprops(0, 0),
            "userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192": _bulk(8, 24, 2, 2)
            | _fprops(32, 8),
            "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192": _bulk(8, 32, 2, 8)
            | _fprops(0, 0),
            "ub_cfg_h100_h6144_tp2_mbs2_seqlen2048": _bulk(8, 16, 4, 16) | _fprops(16, 24),
            "ub_cfg_h100_h8192_tp4_mbs1_seqlen4096": _bulk(8, 16, 2, 4)
            | _fprops(24, 16)
            | {"fc2_dgrad": UbMethod("ring_exchange", 1, aggregate=True)},
            "ub_cfg_h100_h8192_tp4_mbs1_seqlen8192": _bulk(4, 24, 2, 4) | _fprops(24, 16),
            "ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192": _bulk(4, 24, 2, 4) | _fprops(24, 16),
        }.items()
    }
)
"""Userbuffers configurations by name: each overlapped GEMM's communicator (the ``external``
weight gradients of ``proj`` and ``fc2`` change nothing and are left out).

* ``te``: Transformer Engine's ``get_default_config`` (d0067d0da; since 2.0): ring exchanges on
  1 SM without margin, ``pipeline`` and ``bulk`` on 16 SMs with it, 4 splits.
* ``te-1``: Transformer Engine before 2.0 (1.8.0.dev0, 7d576ed2 ``add_ub``): the same methods
  and SM counts, no margin.
* ``userbuffers_*``: Megatron Bridge 97ad8cc6f ``src/megatron/bridge/training/comm_overlap.py``
  (the Llama 3 70B and Llama 3.1 405B recipes' configurations on H100 and B200/GB200/GB300, BF16
  and FP8): ``BulkOverlapCfg(num_sm=…, set_sm_margin=False)``; ``PipelineOverlapCfg(num_sm=…,
  num_splits=4, set_sm_margin=True)`` or, in the FP8 ones, ``RingExchangeOverlapCfg(num_sm=1,
  set_sm_margin=True)`` for ``proj_fprop`` and ``fc2_fprop``.
* ``ub_cfg_*``: NeMo-Framework-Launcher 24.07 (8325688d) ``launcher_scripts/conf/training/
  tp_overlap/<name>.yaml`` (GPT-3 20B, Llama 2 70B, Llama 3 70B BF16 and FP8): bulk with
  ``set_sm_margin: 0``, pipelined ``proj_fprop`` / ``fc2_fprop`` with ``set_sm_margin: 1``; the
  Llama 2 70B file's ``fc2_dgrad`` has ``aggregate: 1``. Under the Transformer Engine of that
  container (1.8), whose ``add_ub`` reads exactly these keys."""

DEFAULT_UB_CONFIG = "te"
"""What Megatron-LM runs without ``--tp-comm-overlap-cfg``: Transformer Engine's defaults."""

ROLE_LAYERS: MappingProxyType[str, str] = MappingProxyType(
    {"attn_in": "qkv", "attn_out": "proj", "mlp_in": "fc1", "mlp_out": "fc2"}
)
"""The communicator name (Megatron-Core's ``tp_comm_buffer_name``: ``attention.py``,
``mlp.py``) of each GEMM role next to a tensor-parallel collective (:attr:`model.ops.Op.role`)."""

UB_STREAMS = 3
"""Compute streams a userbuffers overlap spreads its GEMM chunks over: Transformer Engine's
``_NUM_MAX_UB_STREAMS`` (``transformer_engine/pytorch/cpp_extensions/gemm.py``, d0067d0da), at
most ``num_splits`` of them (``CommOverlapCore::initialize``)."""

_PASSES = ("fprop", "dgrad", "wgrad")
_REDUCE_SCATTERS = frozenset({"proj_fprop", "fc2_fprop"})
"""The default reduce-scatter overlaps among the GEMMs whose method the configurations set
(``layers_reduce_scatter_overlap``; the bulk ``*_wgrad`` ones are bulk whatever they say)."""


@dataclass(frozen=True, slots=True)
class UbGemm:
    """How one overlapped GEMM runs."""

    chunks: int
    """GEMM calls it is cut into (count)."""
    split: str
    """``rows`` (a ring exchange: the tokens), ``cols`` (a pipeline: the output features) or
    ``""`` (whole)."""
    taken: int
    """SMs it is launched without (``num_sm`` under ``set_sm_margin``, else 0)."""
    reduce: bool
    """A ring-exchange reduce-scatter: :func:`partials_sum_seconds` over its ``chunks`` (= tp)
    partial products after them."""
    held: int = 0
    """SMs its communicator's kernel holds beside it while the collective runs, the GEMM launched
    on every SM (``num_sm`` of a ``bulk`` or ``pipeline`` communicator without
    ``set_sm_margin``; 0 for a ring exchange or under the margin): :func:`ub_sm_share`."""

    def chunk(self, m: float, n: float) -> tuple[float, float]:
        """The output ``[rows, cols]`` of one chunk of a GEMM with output ``[m, n]``.

        >>> UbGemm(4, "rows", 0, False).chunk(8192, 2560), UbGemm(4, "cols", 16, False).chunk(8192, 8192)
        ((2048.0, 2560), (8192, 2048.0))
        """
        if self.split == "rows":
            return m / self.chunks, n
        if self.split == "cols":
            return m, n / self.chunks
        return m, n


@dataclass(frozen=True, slots=True)
class Userbuffers:
    """A configuration resolved for a tensor-parallel degree: the :class:`UbGemm` of each GEMM
    role and pass it changes (what :attr:`model.op_time.Clock.userbuffers` carries)."""

    config: str
    tp: int
    gemms: tuple[tuple[str, int, UbGemm], ...]
    """(role, pass — 0 forward, 1 input gradient, 2 weight gradient — , how it runs)."""

    def gemm(self, role: str, which: int) -> UbGemm | None:
        """The :class:`UbGemm` of ``role``'s pass ``which``; None when nothing changes."""
        for r, w, g in self.gemms:
            if (r, w) == (role, which):
                return g
        return None


def check_ub_config(name: str) -> str:
    """``name`` when it is one of :data:`UB_CONFIGS`.

    Raises
    ------
    InputError
        Another name, one line naming the ones there are.

    >>> check_ub_config("te")
    'te'
    """
    if name not in UB_CONFIGS:
        raise InputError(
            f"tp_comm_overlap_cfg: {name!r} is not one of {', '.join(UB_CONFIGS)} (Transformer "
            "Engine's defaults, Megatron Bridge's and the NeMo launcher's userbuffers configs)"
        )
    return name


@lru_cache(maxsize=64)
def userbuffers_for(config: str, tp: int) -> Userbuffers:
    """The configuration ``config`` at tensor-parallel degree ``tp``: a ring exchange in ``tp``
    row chunks (``tp/2`` with ``aggregate``), its reduce-scatters summed after; a pipeline in
    ``num_splits`` column chunks; a bulk overlap whole; each launched without ``num_sm`` SMs
    where ``set_sm_margin``, else (pipeline and bulk) beside a kernel that holds them.

    Examples
    --------
    Transformer Engine's defaults at tp 4: the QKV forward in 4 row chunks on every SM, the
    output projection's forward in 4 column chunks and the QKV weight gradient whole, both
    without 16 SMs:

    >>> ub = userbuffers_for("te", 4)
    >>> ub.gemm("attn_in", 0), ub.gemm("attn_out", 0).split, ub.gemm("attn_in", 2).taken
    (UbGemm(chunks=4, split='rows', taken=0, reduce=False, held=0), 'cols', 16)
    >>> ub.gemm("attn_out", 2) is None  # proj_wgrad: external, unchanged
    True
    >>> userbuffers_for("te-1", 4).gemm("attn_in", 2)  # before 2.0: every SM, 16 held beside
    UbGemm(chunks=1, split='', taken=0, reduce=False, held=16)
    """
    cfg = UB_CONFIGS[check_ub_config(config)]
    gemms = []
    for role, layer in ROLE_LAYERS.items():
        for which, name in enumerate(_PASSES):
            m = cfg.get(f"{layer}_{name}")
            if m is None:
                continue
            taken = m.num_sm if m.set_sm_margin else 0
            held = 0 if m.set_sm_margin else m.num_sm
            if m.method == "ring_exchange":  # split_overlap_rs takes no aggregate
                rs = f"{layer}_{name}" in _REDUCE_SCATTERS
                pairs = m.aggregate and not rs and tp % 2 == 0
                g = UbGemm(tp // 2 if pairs else tp, "rows", taken, rs)
            elif m.method == "pipeline":
                g = UbGemm(m.num_splits, "cols", taken, False, held)
            else:
                g = UbGemm(1, "", taken, False, held)
            gemms.append((role, which, g))
    return Userbuffers(config, tp, tuple(gemms))


def partials_sum_seconds(
    elements: Any, tp: int, beta: float, hbm_bytes_per_s: float, p: RooflineParams
) -> Any:
    """Seconds of the sum of ``tp`` partial products into one rank's shard after a GEMM whose
    output has ``elements`` elements (``β`` bytes each): ``β·elements`` read, ``β·elements/tp``
    written, one memory-bound kernel (:func:`model.roofline.memory_seconds`). Transformer
    Engine's ring-exchange reduce-scatter ends with it (``reduce_bf16`` over the ``tp`` chunks
    of ``CommOverlapP2PBase::split_overlap_rs``), as PyTorch's fused matmul-reduce-scatter does
    (:func:`model.async_tp.partials_reduction_seconds`).

    >>> p = RooflineParams(gemm_efficiency=0.7)
    >>> round(partials_sum_seconds(8192 * 8192, 8, 2, 3.35e12, p) * 1e6, 1)  # 2·8192²·9/8 / (0.9·3.35e12) + 3 µs
    53.1
    """
    return memory_seconds(beta * elements * (1 + 1 / tp), hbm_bytes_per_s, p)


def ub_sm_share(ub: Userbuffers | None, role: str, which: int, device_name: str) -> float:
    """``φ`` the GEMM of ``role``'s pass ``which`` loses while the userbuffers collective beside
    it runs: :func:`model.comm_sms.held_sm_share` of its :attr:`UbGemm.held` SMs on the part
    (module docstring); 0 for a GEMM without a userbuffers overlap, a ring exchange, under the
    SM margin, or on a part without a sourced SM count.

    Examples
    --------
    Transformer Engine 1.8's bulk QKV weight gradient on an H100 (16 of 132 SMs, the measured
    1 − 1/1.314); under 2.0's margin the GEMM runs on 116 SMs instead and nothing is held:

    >>> round(ub_sm_share(userbuffers_for("te-1", 4), "attn_in", 2, "H100-SXM"), 4)
    0.239
    >>> ub_sm_share(userbuffers_for("te", 4), "attn_in", 2, "H100-SXM")
    0.0
    """
    g = None if ub is None else ub.gemm(role, which)
    return 0.0 if g is None else held_sm_share(g.held, device_name)
