"""How a run executes its MoE layers: routing (dropless or a capacity factor, padded or not),
expert load imbalance, node-limited routing, the token dispatcher (NCCL all-to-all, or DeepEP's
and HybridEP's de-duplicated dispatch, whose volume is :mod:`model.moe_dispatch`'s) and what
the framework overlaps the expert all-to-all with.

:class:`MoERun` is the recipe's choice (:attr:`model.specs.TrainingSpec.moe_run`); the functions
turn it into what the cost model's terms read, per MoE layer, micro-batch and GPU of the busiest
expert-parallel rank:

* :func:`model.moe_rows.routed_rows` — token-rows that rank sends and its local experts
  compute (padding and imbalance in; :func:`model.moe_rows.row_factors`, the rule memory sizes
  them by);
* :func:`model.moe_dispatch.all_to_all_sent` — bytes of one dispatch (and one combine), as the
  bytes the link rule of :func:`model.step_time.all_to_all_bandwidth` times (DeepEP's and
  HybridEP's once-per-rank and once-per-domain sends in; :mod:`model.moe_dispatch`);
* :func:`grouped_rows` — each expert's rows rounded up to the grouped GEMM's M tile;
* :func:`unpaired_fraction` / :func:`exposed_all_to_all` — Megatron-Core's
  ``overlap_moe_expert_parallel_comm`` (combined 1F1B) and ``moe_shared_expert_overlap``;
* the dispatchers' resident buffers are :mod:`model.dispatch_buffers`' (DeepEP's, HybridEP's).

Sources are cited per function; the leaf formulas are :mod:`model.moe`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.comm_sms import contended_wait
from trainplan.model.errors import InputError
from trainplan.model.hash_once import HashOnce
from trainplan.model.moe import DEEPEP_NVL_PEERS
from trainplan.model.rank_groups import members_per_domain_of
from trainplan.model.split import stage_chunks
from trainplan.model.units import shown_number
from trainplan.model.xp import where

__all__ = [
    "Dispatcher",
    "EpOverlap",
    "MoERun",
    "DROPLESS",
    "GROUPED_GEMM_BLOCK_M",
    "members_per_domain",
    "grouped_rows",
    "steady_chunk_pairs",
    "stage_unpaired_fraction",
    "unpaired_fraction",
    "unpaired_share",
    "exposed_all_to_all",
    "combine_output_bytes",
]


class Dispatcher(StrEnum):
    """The token dispatcher of the expert all-to-all.

    * ``alltoall`` — one NCCL all-to-all per dispatch and combine, every routed copy sent by
      itself: Megatron-Core ``--moe-token-dispatcher-type alltoall``
      (``moe/token_dispatcher.py`` ``MoEAlltoAllTokenDispatcher``), torchtitan
      ``AllToAllTokenDispatcher`` (``models/common/token_dispatcher.py``), DeepSpeed
      ``_AllToAll`` (``deepspeed/moe/sharded_moe.py``);
    * ``deepep`` — DeepEP's normal kernels: a token goes once to each rank that holds one of
      its experts (``csrc/kernels/legacy/intranode.cu``); across nodes it crosses the scale-out
      network once per remote node that holds one of its experts and is forwarded over NVLink
      inside it once per destination rank (``csrc/kernels/legacy/internode.cu``;
      :mod:`model.moe_dispatch`), through buffers resident for the whole run:
      Megatron-Core ``--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep``
      (``moe/fused_a2a.py``), torchtitan ``DeepEPTokenDispatcher``;
    * ``hybridep`` — Megatron-Core ``--moe-token-dispatcher-type flex
      --moe-flex-dispatcher-backend hybridep`` (``MoEFlexTokenDispatcher``, Megatron-Core only):
      as DeepEP across NVLink domains, a token crosses the scale-out network once per remote
      domain that holds one of its experts, to the rank of its own local rank there, which
      forwards it over NVLink; the combine reduces inside each domain before sending back
      (deepseek-ai/DeepEP ``hybrid-ep`` 94a9f8f6b1 ``csrc/hybrid_ep/backend/
      hybrid_ep_backend.cuh``: the metadata kernel ``scan`` sets one ``rdma_to_attn_map`` flag
      per token and domain when any of the domain's experts takes it, and the dispatch's RDMA
      warp group, ``N2N_warp_group_device_function``, writes each flagged token once to that
      domain's peer; ``docs/Hybrid-EP_Implementation.md`` §8), and inside a domain once to each
      rank that holds one of its experts (``S2G_warp_group_device_function``'s unicasts by the
      per-rank ``sparse_to_dense_map``; :mod:`model.moe_dispatch`), through buffers resident for
      the whole run (:func:`model.dispatch_buffers.hybridep_buffer_bytes`). The experts receive
      their rows in expert order, so none of the alltoall dispatcher's chunk sorts runs
      (:mod:`model.moe_kernels`).
    """

    ALLTOALL = "alltoall"
    DEEPEP = "deepep"
    HYBRIDEP = "hybridep"

    @property
    def deduplicates(self) -> bool:
        """Sends a token once per destination rank, and across NVLink domains once per remote
        domain holding one of its experts (DeepEP, HybridEP): the rule of
        :func:`model.moe_dispatch.dispatch_copies`."""
        return self is not Dispatcher.ALLTOALL

    @property
    def nvlink_ranks(self) -> int | None:
        """The most ranks of its group one of its kernels reaches over NVLink; None: every rank
        of the NVLink domain. DeepEP's normal kernels reach 8 (:data:`model.moe.DEEPEP_NVL_PEERS`):
        a group of more than 8 ranks runs the internode kernels between runs of 8 consecutive
        ranks (``csrc/legacy/buffer.hpp``: ``rdma_rank = rank / 8``, ``num_rdma_ranks =
        num_ranks / 8``, ``is_internode_available`` = ``num_ranks > 8``), and their hop between
        two runs is an RDMA write through the NIC (``csrc/kernels/legacy/internode.cu``
        ``dispatch``: ``nvshmemi_ibgda_put_nbi_warp``, an InfiniBand work request posted by the
        GPU, even where both runs share an NVLink domain; NVSHMEM's multi-node NVLink transport,
        off unless ``Buffer(allow_mnnvl=True)``, reaches only the low-latency kernels'
        ``nvshmemi_get_p2p_ptr``). HybridEP's and NCCL's reach the whole domain
        (``hybrid_ep_buffer.py`` ``detect_accessible_ranks``; NCCL's NVLink transport).

        >>> Dispatcher("deepep").nvlink_ranks, Dispatcher("hybridep").nvlink_ranks
        (8, None)
        """
        return DEEPEP_NVL_PEERS if self is Dispatcher.DEEPEP else None


class EpOverlap(StrEnum):
    """What the expert all-to-all overlaps (Megatron-Core's flags; ``none`` elsewhere).

    * ``none`` — dispatch and combine wait (they gate the experts): torchtitan's
      ``AllToAllTokenDispatcher`` waits on its ``all_to_all_single`` before the experts,
      DeepSpeed's ``_AllToAll`` is synchronous;
    * ``moe_shared_expert_overlap`` — Megatron-Core ``--moe-shared-expert-overlap``: the shared
      experts' FC1 runs while the forward dispatch is in flight and their FC2 while the forward
      combine is (``token_dispatcher.py``: ``shared_experts.linear_fc1_forward_and_act`` after
      the dispatch all-to-all is issued, ``linear_fc2_forward`` after the combine's); the
      backward all-to-alls wait;
    * ``overlap_moe_expert_parallel_comm`` — Megatron-Core ``--overlap-moe-expert-parallel-comm``
      (``pipeline_parallel/combined_1f1b.py``): one micro-batch's forward runs beside another's
      backward, layer by layer, the all-to-alls of each on a communication stream under the
      other's computation; the micro-batches with no partner (warm-up forwards, cool-down
      backwards) wait (:func:`unpaired_fraction`). Requires interleaving when pp > 1, no full
      recomputation, and excludes ``moe_shared_expert_overlap``
      (``transformer_config.py`` ``__post_init__``).
    """

    NONE = "none"
    SHARED_EXPERT = "moe_shared_expert_overlap"
    COMBINED_1F1B = "overlap_moe_expert_parallel_comm"


@dataclass(frozen=True, slots=True)
class MoERun(HashOnce):
    """How the MoE layers run (defaults: dropless, balanced, NCCL all-to-all, nothing overlapped —
    what the planner assumed before these mechanisms, and Megatron-Core's defaults apart from its
    ``allgather`` dispatcher, which ep > 1 runs do not use)."""

    capacity_factor: Fraction | None = None
    """Tokens an expert takes from a rank, as a multiple of the mean ``T·k/E``; None = dropless.
    Megatron-Core ``--moe-expert-capacity-factor`` (``moe_utils.get_capacity``); DeepSpeed's
    ``MoE(capacity_factor=1.0)`` by default."""
    pad_to_capacity: bool = False
    """Pad every expert's input to its capacity: Megatron-Core
    ``--moe-pad-expert-input-to-capacity``; DeepSpeed's ``drop_tokens=True`` default (its einsum
    dispatch always moves ``E·C`` rows)."""
    imbalance: Fraction = Fraction(1)
    """Routed token-rows the busiest expert-parallel rank receives ÷ the mean (≥ 1; 1 =
    balanced, the aim of DeepSeek-V3's auxiliary-loss-free balancing and Megatron's auxiliary
    loss). An input: measured from a run's router statistics or assumed; it sets the expert GEMMs
    and the all-to-all's receive on the rank everyone waits for (and the traffic table's ep row,
    :func:`model.comm_layers.ep_bytes`), and the memory of the rows its
    experts receive (:func:`model.moe_rows.row_factors`), so that the memory verdict holds on that rank."""
    node_limit: int | None = None
    """Nodes a token's experts may span (DeepSeek-V3 report §2.1.2: M = 4; Megatron-Core
    ``--moe-router-num-groups`` (= nodes) with ``--moe-router-group-topk`` M). Only with a
    de-duplicating dispatcher (``deepep``, ``hybridep``), whose dispatch it bounds."""
    dispatcher: Dispatcher = Dispatcher.ALLTOALL
    ep_overlap: EpOverlap = EpOverlap.NONE

    def __post_init__(self) -> None:
        object.__setattr__(self, "dispatcher", Dispatcher(self.dispatcher))
        object.__setattr__(self, "ep_overlap", EpOverlap(self.ep_overlap))
        object.__setattr__(self, "imbalance", Fraction(self.imbalance))
        if self.imbalance < 1:
            raise InputError(
                f"moe_imbalance: {shown_number(self.imbalance)} must be at least 1 (busiest rank ÷ mean)"
            )
        if self.capacity_factor is not None:
            cf = Fraction(self.capacity_factor)
            if cf <= 0:
                raise InputError(f"moe_capacity_factor: {shown_number(cf)} must be positive")
            object.__setattr__(self, "capacity_factor", cf)
        elif self.pad_to_capacity:
            raise InputError(
                "moe_pad_to_capacity: padding needs moe_capacity_factor (dropless has no capacity)"
            )
        if self.node_limit is not None:
            if self.node_limit < 1:
                raise InputError(f"moe_node_limit: {self.node_limit} must be at least 1")
            if not self.dispatcher.deduplicates:
                raise InputError(
                    "moe_node_limit: node-limited routing is modelled with the deepep or hybridep "
                    "dispatcher (their de-duplicated dispatch); the alltoall dispatcher sends "
                    "every copy"
                )


DROPLESS = MoERun()
"""The default: dropless, balanced, NCCL all-to-all, nothing overlapped."""

GROUPED_GEMM_BLOCK_M = 128
"""Rows of the M tile each expert's block of a grouped GEMM is rounded up to: DeepGEMM's
contiguous grouped layout aligns every expert's rows to 128 (deepseek-ai/DeepGEMM
``deep_gemm/utils.py`` ``get_m_alignment_for_contiguous_layout``; :data:`model.gemm_shapes.
DEEPGEMM_BLOCK_M`); a grouped GEMM tiles each group apart, so a partial tile costs a whole one
(tile quantisation, NVIDIA's Matrix Multiplication Background guide §3.1)."""


def members_per_domain(
    nvlink: Any, span: Any, group_size: Any, domain: int | None, per_domain: Any = 0
) -> Any:
    """Members of an expert-parallel group in each NVLink domain (``g`` of
    :func:`model.step_time.all_to_all_bandwidth`): the whole group when it lies in one domain
    (``nvlink``), else the slowest group's (:func:`model.rank_groups.members_per_domain_of`:
    the placement's ``per_domain``, or ``max(1, min(n, domain·n // span))`` for a group of ``n``
    spread over ``span`` consecutive ranks); 0 when unknown (no domain, no span). Element-wise
    for arrays.

    Examples
    --------
    >>> members_per_domain(False, 64, 64, 8), members_per_domain(False, 512, 64, 8)
    (8, 1)
    >>> members_per_domain(True, 8, 8, 8), members_per_domain(False, 0, 64, None)
    (8, 0)
    """
    if not domain:
        return where(nvlink, group_size, 0)
    known = span > 0
    spread = members_per_domain_of(group_size, where(known, span, 1), domain, per_domain)
    return where(nvlink, group_size, where(known, spread, 0))


def grouped_rows(rows_per_expert: float) -> float:
    """Rows one expert's block of a grouped GEMM computes: its routed rows rounded up to
    :data:`GROUPED_GEMM_BLOCK_M` (0 stays 0).

    Examples
    --------
    >>> grouped_rows(40.0), grouped_rows(128.0), grouped_rows(129.5)
    (128.0, 128.0, 256.0)
    """
    block = GROUPED_GEMM_BLOCK_M
    return float(math.ceil(rows_per_expert / block - 1e-9) * block) if rows_per_expert else 0.0


def steady_chunk_pairs(pp: int, v: int, m: int, stage: int) -> dict[tuple[int, int], int]:
    """How many of pipeline rank ``stage``'s steady combined-1F1B steps pair a forward of model
    chunk ``cf`` with a backward of chunk ``cb``: ``{(cf, cb): count}``, under Megatron-Core's
    interleaved schedule with ``overlap_moe_expert_parallel_comm`` (pp > 1, v ≥ 1 chunks per
    rank, m micro-batches).

    Megatron-LM d98e8a64dd ``megatron/core/pipeline_parallel/schedules.py``
    ``get_pp_rank_microbatches``: ``W + 1`` warm-up forwards (``W = 2·(pp − stage − 1) +
    (v − 1)·pp``; the overlap adds one), at most ``m·v``; steady step ``k`` (``k < m·v − W −
    1``) runs forward ``k + W + 1`` beside backward ``k``; with
    ``microbatch_group_size_per_vp_stage`` = pp, forward ``x`` is of chunk ``⌊x/pp⌋ mod v`` and
    backward ``k`` of chunk ``v − 1 − ⌊k/pp⌋ mod v``. The forwards before and the backwards
    after the steady steps run alone.

    >>> steady_chunk_pairs(2, 2, 4, 0)  # W + 1 = 2 + 2 + 1 = 5 warm-up forwards of 8, 3 steps
    {(0, 1): 1, (1, 1): 1, (1, 0): 1}
    """
    total = m * v
    warm = min(2 * (pp - stage - 1) + (v - 1) * pp + 1, total)
    pairs: dict[tuple[int, int], int] = {}
    for k in range(total - warm):
        key = ((k + warm) // pp % v, v - 1 - k // pp % v)
        pairs[key] = pairs.get(key, 0) + 1
    return pairs


def stage_unpaired_fraction(
    overlap: EpOverlap, pp: int, m: int, stage: int, chunk_layers: tuple[int, ...]
) -> Fraction:
    """Of pipeline rank ``stage``'s layer forwards (and as many backwards) over ``m``
    micro-batches, the share that runs without a partner under Megatron-Core's combined 1F1B
    (``overlap_moe_expert_parallel_comm``); ``chunk_layers``: the rank's model chunks' layer
    counts ``n_c``, in the order it holds them (:func:`model.split.stage_chunks`; v of them).

    * pp = 1 (``combined_1f1b_schedule_for_no_pipelining``): the first forward and the last
      backward run alone — ``1/m``;
    * pp > 1 (interleaved): a steady step pairing forward chunk ``cf`` with backward chunk ``cb``
      (:func:`steady_chunk_pairs`) pairs ``min(n_cf, n_cb)`` layers and runs the other
      ``|n_cf − n_cb|`` alone (Megatron-LM d98e8a64dd ``megatron/core/models/common/
      model_chunk_schedule_plan.py`` ``TransformerModelChunkSchedulePlan.run``: the overlapped
      layers, then the backward chunk's rest, then ``range(overlapped_layers, f_num_layers)``);
      warm-up forwards and cool-down backwards run alone. The share is
      ``1 − Σ_steady min(n_f, n_b) / (m·Σ n_c)``; with chunks of one length, ``(W + 1)/(m·v)``.

    1 for any other overlap (nothing is paired), and on a rank with no layers.

    Raises
    ------
    InputError
        ``overlap_moe_expert_parallel_comm`` with pp > 1 and no interleaving (Megatron-Core
        asserts ``virtual_pipeline_model_parallel_size`` is set).

    Examples
    --------
    Chunks of 8 and 9 layers on rank 0 of pp 2, m 16: 5 warm-up forwards, 27 steady steps, 7 of
    them pairing the two 9-layer chunks, ``1 − (27·8 + 7·1)/(16·17) = 49/272``:

    >>> stage_unpaired_fraction(EpOverlap.COMBINED_1F1B, 2, 16, 0, (8, 9))
    Fraction(49, 272)
    """
    v = len(chunk_layers)
    if overlap is not EpOverlap.COMBINED_1F1B or not sum(chunk_layers):
        return Fraction(1)
    if pp == 1:
        return Fraction(1, m)
    if v < 2:
        raise InputError(
            "moe_ep_overlap: overlap_moe_expert_parallel_comm with pp > 1 needs an interleaved "
            "schedule (virtual_stages > 1; Megatron-Core asserts it)"
        )
    pairs = steady_chunk_pairs(pp, v, m, stage)
    paired = sum(n * min(chunk_layers[f], chunk_layers[b]) for (f, b), n in pairs.items())
    return 1 - Fraction(paired, m * sum(chunk_layers))


def unpaired_fraction(overlap: EpOverlap, pp: int, v: int, m: int) -> Fraction:
    """:func:`stage_unpaired_fraction` of the first pipeline rank, which has the most warm-up
    forwards, with ``v`` chunks of one length: ``1/m`` at pp = 1, else ``(W + 1)/(m·v)`` with
    rank 0's ``W + 1 = 2·(pp − 1) + (v − 1)·pp + 1`` warm-up forwards, capped at 1.

    Raises
    ------
    InputError
        As :func:`stage_unpaired_fraction`.

    Examples
    --------
    >>> unpaired_fraction(EpOverlap.COMBINED_1F1B, 1, 1, 8)
    Fraction(1, 8)
    >>> unpaired_fraction(EpOverlap.COMBINED_1F1B, 4, 2, 32)  # (2·3 + 1·4 + 1) / 64
    Fraction(11, 64)
    """
    return stage_unpaired_fraction(overlap, pp, m, 0, (1,) * v)


@lru_cache(maxsize=256)
def unpaired_share(
    overlap: EpOverlap,
    arch: Any,
    pp: int,
    v: int,
    m: int,
    uneven: Any = True,
    sizes: tuple[int, ...] | None = None,
    schedule: Any = None,
) -> float:
    """The share of MoE layer passes whose all-to-alls have no partner, as the clock charges it:
    :func:`stage_unpaired_fraction` of the slowest pipeline rank — the one holding the most MoE
    layers (``arch``'s, split by :func:`model.split.stage_chunks` from ``uneven``, ``sizes``
    and ``schedule``), the larger share among equals — as a float; 1 (nothing paired) where the
    overlap cannot run (pp > 1 without interleaving; the legality rule
    :func:`model.moe_rules.moe_layout_violation` refuses such a layout, this keeps the search's
    columns of not-yet-masked candidates defined)."""
    pp, v, m = int(pp), int(v), int(m)
    if overlap is not EpOverlap.COMBINED_1F1B:
        return 1.0
    if pp > 1 and v < 2:
        return 1.0
    sizes = None if sizes is None else tuple(int(n) for n in sizes)
    best: tuple[int, Fraction] = (-1, Fraction(1))
    for stage in range(pp):
        chunks = stage_chunks(arch, pp, v, uneven, stage, sizes, schedule)
        moe = sum(1 for chunk in chunks for j in chunk if arch.is_moe_layer(j))
        share = stage_unpaired_fraction(overlap, pp, m, stage, tuple(len(c) for c in chunks))
        best = max(best, (moe, share))
    return float(best[1])


def exposed_all_to_all(
    overlap: EpOverlap,
    forward_s: float,
    backward_s: float,
    split: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0),
    shared: tuple[float, float] = (0.0, 0.0),
    unpaired: float = 1.0,
    share: float = 0.0,
) -> float:
    """Seconds of one MoE layer's all-to-alls, one micro-batch, that wait, from their forward
    (dispatch + combine, half each) and backward seconds (``forward_s``, ``backward_s``);
    ``split`` = the layer's (pre-dispatch forward, pre-dispatch backward, experts forward,
    experts backward) computation, ``shared`` = the shared experts' (FC1 + activation, FC2)
    forward:

    * ``none`` — all of them;
    * ``moe_shared_expert_overlap`` — the forward dispatch less the shared experts' FC1, the
      forward combine less their FC2, at least 0 each; the backward waits;
    * ``overlap_moe_expert_parallel_comm`` — the ``unpaired`` share (:func:`unpaired_fraction`)
      waits whole; a paired step runs one micro-batch's layer forward beside another's
      backward in three phases, each as long as the longer of its two streams
      (``models/common/model_chunk_schedule_plan.py`` ``TransformerLayerSchedulePlan.run``:
      combine backward ∥ pre-dispatch forward, dispatch forward + dispatch backward ∥ experts
      backward + experts forward, combine forward ∥ pre-dispatch backward), so what waits is
      ``max(0, b/2 − pre_f) + max(0, f/2 + b/2 − (exp_b + exp_f)) + max(0, f/2 − pre_b)``.

    ``share``: the SMs the dispatcher's kernels hold (:func:`model.comm_sms.dispatcher_sm_share`,
    DeepEP's 20 or NCCL's all-to-all's, at least the NVLS count); an overlapped phase then
    waits ``max(φ·a, a − c)`` for ``a`` seconds of communication beside ``c`` of computation
    (:func:`model.comm_sms.contended_wait`) — the computation slowed by the SMs it lost — in
    place of ``max(0, a − c)``.

    Examples
    --------
    >>> exposed_all_to_all(EpOverlap.NONE, 2.0, 4.0)
    6.0
    >>> exposed_all_to_all(EpOverlap.SHARED_EXPERT, 2.0, 4.0, shared=(0.5, 2.0))  # 0.5 + 0 + 4
    4.5
    >>> # paired: max(0, 2 − 3) + max(0, 1 + 2 − 2.5) + max(0, 1 − 6) = 0.5; a quarter unpaired
    >>> exposed_all_to_all(EpOverlap.COMBINED_1F1B, 2.0, 4.0, (3.0, 6.0, 1.0, 1.5), unpaired=0.25)
    1.875
    >>> # all paired, DeepEP's SMs at φ = 0.1: max(0.2, −1) + max(0.3, 0.5) + max(0.1, −5) = 0.8
    >>> split = (3.0, 6.0, 1.0, 1.5)
    >>> round(exposed_all_to_all(EpOverlap.COMBINED_1F1B, 2.0, 4.0, split, unpaired=0.0, share=0.1), 6)
    0.8
    """
    if overlap is EpOverlap.SHARED_EXPERT:
        half = forward_s / 2
        waits = contended_wait(half, shared[0], share) + contended_wait(half, shared[1], share)
        return float(waits) + backward_s
    if overlap is EpOverlap.COMBINED_1F1B:
        pre_f, pre_b, exp_f, exp_b = split
        f, b = forward_s / 2, backward_s / 2
        paired = float(
            contended_wait(b, pre_f, share)
            + contended_wait(f + b, exp_b + exp_f, share)
            + contended_wait(f, pre_b, share)
        )
        return unpaired * (forward_s + backward_s) + (1 - unpaired) * paired
    return forward_s + backward_s


def combine_output_bytes(framework: str, run: MoERun, default: int | None) -> int | None:
    """Bytes per element of the routed experts' outputs the weighted combine keeps
    (:attr:`model.activations.ActivationContext.combine_output_bytes`): the profile's own
    ``default`` (:meth:`model.frameworks.Framework.moe_combine_bytes`), except the ``deepep``
    dispatcher under ``textbook`` (DeepSeek's stack under DualPipe): DeepEP sends the routing
    weights with the tokens and combines without them (deepseek-ai/DeepEP README, "Example use
    in model training": ``dispatch_forward`` returns ``recv_topk_weights``, ``combine_forward``
    takes none), so the weights are applied on the experts' side; DeepSeek-V3 recomputes the
    SwiGLU output from its cached input (§3.3.3), so the weights' gradient reads that recomputed
    tensor and the combine keeps none (0; the fp32 weights of the routed copies instead)."""
    if framework == "textbook" and run.dispatcher is Dispatcher.DEEPEP:
        return 0
    return default
