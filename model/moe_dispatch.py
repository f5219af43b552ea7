"""How much one expert dispatch (and its combine, which moves as much back) sends, by the
run's token dispatcher (:class:`model.moe_run.Dispatcher`): per token a rank dispatches, the
token-rows it sends over any link and the same at the scale the all-to-all link rule times
(:func:`dispatch_copies`); from them the bytes of one dispatch on the busiest rank that the
layer clock times (:func:`all_to_all_sent`), and the two ratios the traffic table and the
single time model read (:func:`dispatch_traffic_share`, :func:`dispatch_time_share`).

* ``alltoall`` sends one row per (token, expert) pair: Megatron-LM d98e8a64dd
  ``megatron/core/transformer/moe/token_dispatcher.py`` ``MoEAlltoAllTokenDispatcher.preprocess``
  sizes the all-to-all's ``input_splits`` as the routing map's tokens per expert summed over each
  rank's experts (``num_out_tokens = T·k`` dropless), so a token with two experts on one rank
  goes there twice.
* ``deepep`` and ``hybridep`` send a token to each destination rank once, whatever the number of
  that rank's experts it picked, and the receiver expands it to its local experts (Megatron-Core's
  flex dispatcher permutes after the dispatch); the combine reduces on each rank before sending
  back. DeepEP (deepseek-ai/DeepEP dd758ca): ``csrc/kernels/legacy/layout.cu``
  ``get_dispatch_layout`` sets ``is_token_in_rank[token, rank]`` when any of the token's experts
  lies on the rank, the intranode ``dispatch`` (``csrc/kernels/legacy/intranode.cu``) copies a
  token into a rank's channel buffer only where that flag is set; across nodes the internode
  ``dispatch`` (``internode.cu``) writes a token once per node over RDMA (``kRDMASender``, the
  flags of the node's 8 ranks as one word) and the node's ``kRDMAAndNVLForwarder`` forwards it
  over NVLink once per destination rank of the node (``SourceMeta::is_token_in_nvl_rank``).
  HybridEP (``hybrid-ep`` 94a9f8f6b1, ``csrc/hybrid_ep/backend/hybrid_ep_backend.cuh``): the
  metadata kernel ``scan`` sets ``token_needed_by_this_rank`` when any of the rank's experts
  takes the token, and the dispatch's ``S2G_warp_group_device_function`` unicasts the token
  once to every rank of the domain whose ``sparse_to_dense_map`` entry is set; across domains
  the RDMA stage before it sends once per domain (:func:`model.moe.expected_remote_nodes`).

Under uniform routing (``k`` different experts of ``E``, ``E/ep`` a rank) a token reaches
``R = ep·(1 − C(E − E/ep, k)/C(E, k))`` distinct ranks: :func:`model.moe.expected_distinct_nodes`
with the ranks as the groups (the one rule that also counts nodes). Units: token-rows per token
(exact), bytes.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

from trainplan.model.moe import (
    DEEPEP_SOURCE_META_BYTES,
    DEEPEP_TOPK_IDX_BYTES,
    expected_distinct_nodes,
    expected_remote_nodes,
)
from trainplan.model.moe_rows import routed_rows
from trainplan.model.moe_run import Dispatcher, MoERun

__all__ = [
    "PROB_BYTES",
    "SCALE_BLOCK",
    "TRANSFERS",
    "side_bytes",
    "transfer_side_bytes",
    "group_domain_ranks",
    "kernel_members",
    "dispatch_copies",
    "all_to_all_sent",
    "dispatch_traffic_share",
    "dispatch_time_share",
]


PROB_BYTES = 4
"""Bytes of one routing probability as the flex dispatchers send it: float32 only (DeepEP's
``topk_weights``, HybridEP's ``probs``; Megatron-LM d98e8a64dd ``moe/token_dispatcher.py``
``_DeepepManager.dispatch`` and ``_HybridEPManager.dispatch`` cast to float32: "only supports
float32 probs")."""

SCALE_BLOCK = 128
"""Hidden elements per FP8 scaling factor, one float32 each (``h/128`` a token): DeepEP's
``x_scales`` (``csrc/kernels/legacy/intranode.cu`` ``dispatch``, ``num_scales``), HybridEP's
``scaling_factor`` (``hybrid_ep_backend.cuh``: ``HIDDEN_DIM / 128`` floats a token)."""

TRANSFERS = ("forward dispatch", "forward combine", "backward combine", "backward dispatch")
"""A MoE layer's four expert transfers a micro-batch, in the order :func:`side_bytes` gives
them: the backward's are the transposes (the dispatch's gradient is a combine, the combine's a
dispatch: Megatron-LM d98e8a64dd ``moe/fused_a2a.py`` ``FusedDispatch.backward``,
``HybridEPDispatch.backward``)."""

_ALIGN_ROW = 16  # internode rows: get_num_bytes_per_token aligns up to sizeof(int4)


def side_bytes(
    run: MoERun,
    hidden_bytes: int,
    top_k: int,
    domain_experts: int,
    across: bool,
    fp8: bool = False,
) -> tuple[int, int, int, int]:
    """Bytes one token-row carries beside its ``hidden_bytes`` in each of :data:`TRANSFERS`
    (the 4-byte source index DeepEP's intranode rows carry in every transfer, its benchmark's
    too, left out; FP8 scaling factors, ``4·h/128``, in the forward dispatch when ``fp8``,
    ``h = hidden_bytes``, 1 a byte — no dispatcher the frameworks run sends FP8 rows: Megatron-Core
    dispatches BF16 through both flex backends, ``fused_a2a.py`` asserts ``not fp8_dispatch``
    for HybridEP and hands DeepEP its BF16 input).

    * ``alltoall``: none (Megatron-Core's probabilities ride an all-to-all of their own,
      :func:`model.moe_kernels.dispatch_metadata`);
    * ``deepep`` (deepseek-ai/DeepEP dd758ca; Megatron-Core ``FusedDispatch`` passes
      ``topk_idx`` and float32 ``topk_weights``, ``FusedCombine.backward`` dispatches with the
      handle, ``FusedDispatch.backward`` combines with the probabilities' gradient): inside a
      run of 8 (the intranode kernels, ``intranode.cu``) the forward dispatch's ``k`` int64
      indices (``topk_idx_t``) and ``k`` float32 weights, ``12·k``, the backward combine's
      weights ``4·k``; across runs (``across``, the RDMA row, ``internode.cu``
      ``get_num_bytes_per_token``: hidden + the 8-byte ``SourceMeta`` + scales + ``k`` int32
      indices + ``k`` weights, aligned to 16 bytes) ``align16(h + 8 + 8·k) − h`` forward,
      ``align16(h + 8 + 4·k) − h`` in the backward combine, ``align16(h + 8) − h`` else;
    * ``hybridep`` (``hybrid-ep`` 94a9f8f6b1 ``csrc/hybrid_ep/backend/hybrid_ep_backend.cuh``:
      the forward dispatch writes each token's probability row, ``NUM_OF_EXPERTS_PER_RANK ×
      NUM_OF_RANKS_PER_NODE`` floats, beside it over NVLink and over RDMA, the backward combine
      sends that row's gradient back, ``backward_combine_api``): ``4·L·R`` =
      ``4·domain_experts`` in the forward dispatch and the backward combine, whatever the hop.

    Examples
    --------
    DeepSeek-V3 (h 7,168 BF16, k 8): DeepEP intranode 96 and 32 bytes beside 14,336; across runs
    14,408 → 14,416 and 14,376 → 14,384 bytes a row; HybridEP at EP 64 in one GB200 domain, 4
    experts a rank: 4 × 4 × 64 = 1,024 bytes:

    >>> deepep, hybrid = MoERun(dispatcher="deepep"), MoERun(dispatcher="hybridep")
    >>> side_bytes(deepep, 14336, 8, 0, False), side_bytes(deepep, 14336, 8, 0, True)
    ((96, 0, 32, 0), (80, 16, 48, 16))
    >>> side_bytes(hybrid, 14336, 8, 256, False), side_bytes(MoERun(), 14336, 8, 256, True)
    ((1024, 0, 1024, 0), (0, 0, 0, 0))
    >>> side_bytes(hybrid, 7168, 8, 256, False, fp8=True)[0]  # + 56 float32 scales
    1248
    """
    scales = PROB_BYTES * (hidden_bytes // SCALE_BLOCK) if fp8 else 0
    if run.dispatcher is Dispatcher.HYBRIDEP:
        probs = PROB_BYTES * domain_experts
        return probs + scales, 0, probs, 0
    if run.dispatcher is not Dispatcher.DEEPEP:
        return 0, 0, 0, 0
    return _deepep_side(hidden_bytes, top_k, across, scales)


def _deepep_side(
    hidden_bytes: int, top_k: int, across: bool, scales: int
) -> tuple[int, int, int, int]:
    """:func:`side_bytes` of DeepEP's rows: intranode, across runs of 8 (the RDMA row)."""
    if not across:
        return (DEEPEP_TOPK_IDX_BYTES + PROB_BYTES) * top_k + scales, 0, PROB_BYTES * top_k, 0

    def row(extra: int) -> int:
        meta = hidden_bytes + DEEPEP_SOURCE_META_BYTES + extra
        return -(-meta // _ALIGN_ROW) * _ALIGN_ROW - hidden_bytes

    plain = row(0)
    return row(scales + 8 * top_k), plain, row(PROB_BYTES * top_k), plain


def transfer_side_bytes(
    run: MoERun,
    hidden_bytes: int,
    experts: int,
    top_k: int,
    ep: int,
    expert_tp: int,
    per_domain: int,
) -> tuple[int, int, int, int]:
    """:func:`side_bytes` of a layout: ``per_domain`` = ``g``, the ep members that share the
    dispatcher's NVLink group (:func:`kernel_members`; 0 = the whole group); DeepEP's rows cross
    runs of 8 where ``g < ep``; HybridEP (Megatron-Core only) spans the etp·ep ranks of
    ``tp_ep_group``, ``etp·g`` of them in a domain, ``E/ep`` experts each: its probability row
    holds ``L·R`` = ``(E/ep)·min(etp·ep, etp·g)`` values (as its buffers,
    :func:`model.dispatch_buffers.hybridep_buffer_bytes`).

    >>> transfer_side_bytes(MoERun(dispatcher="hybridep"), 4096, 128, 8, 8, 1, 8)  # 16 × 8
    (512, 0, 512, 0)
    """
    g = int(per_domain) or ep  # the search's tables hand it as a float
    domain_experts = (experts // ep) * group_domain_ranks(expert_tp * ep, ep, g) if ep > 1 else 0
    return side_bytes(run, hidden_bytes, top_k, domain_experts, g < ep)


def group_domain_ranks(group_ranks: int, ep: int, per_domain: int) -> int:
    """Ranks of a flex dispatcher's group of ``group_ranks`` (etp·ep under Megatron-Core,
    :func:`model.dispatch_buffers.deepep_group_ranks`) in one NVLink domain, where ``per_domain``
    of the ep group's ``ep`` members share it: ``min(group_ranks, per_domain·group_ranks/ep)``
    (0 when unknown) — HybridEP's ``num_of_ranks_per_node``, which sizes its probability rows
    (:func:`transfer_side_bytes`) and its buffers (:mod:`model.terms.dispatch_buffers`).

    >>> group_domain_ranks(128, 64, 64), group_domain_ranks(16, 16, 8), group_domain_ranks(8, 8, 0)
    (128, 8, 0)
    """
    return min(group_ranks, per_domain * group_ranks // ep)


def kernel_members(run: MoERun, per_domain: int, ep: int, group_ranks: int) -> int:
    """Members of the expert-parallel group in each of the groups the dispatcher's kernels join
    over NVLink (``g`` of :func:`dispatch_copies` and the link rule): the members per NVLink
    domain ``per_domain`` (0 = unknown, the whole group), except where the kernels reach fewer
    ranks (:attr:`model.moe_run.Dispatcher.nvlink_ranks`): DeepEP's group of ``group_ranks`` >
    8 ranks (:func:`model.dispatch_buffers.deepep_group_ranks`, etp·ep under Megatron-Core)
    forwards over NVLink inside runs of 8 of them only, ``8·ep/group_ranks`` members of the ep
    group, and crosses between runs over RDMA, inside one NVLink domain as across two.

    Examples
    --------
    DeepSeek-V3's EP 64 in one GB200 NVL72 domain: HybridEP's 64, DeepEP's runs of 8 (and of 4
    ep members at expert tp 2 under Megatron-Core, whose group is etp·ep = 128 ranks):

    >>> hybrid, deepep = MoERun(dispatcher="hybridep"), MoERun(dispatcher="deepep")
    >>> kernel_members(hybrid, 64, 64, 64), kernel_members(deepep, 64, 64, 64)
    (64, 8)
    >>> kernel_members(deepep, 64, 64, 128), kernel_members(deepep, 8, 8, 8)
    (4, 8)
    """
    reach = run.dispatcher.nvlink_ranks
    if reach is None or group_ranks <= reach:
        return int(per_domain)
    return min(int(per_domain) or ep, max(1, reach * int(ep) // int(group_ranks)))


@lru_cache(maxsize=1024)
def dispatch_copies(
    run: MoERun, experts: int, top_k: int, ep: int, per_domain: int
) -> tuple[Fraction, Fraction]:
    """(token-rows sent over any link, token-rows at the link rule's scale) per token one rank
    dispatches, uniform routing, before imbalance and capacity; ``per_domain`` = ``g``, the
    group's members in each NVLink domain (:func:`model.moe_run.members_per_domain`; 0 =
    unknown, taken as one domain). The link rule (:func:`model.step_time.all_to_all_bandwidth`)
    times a message of ``B`` bytes as ``B·(ep − g)/(ep − 1)`` on the NIC beside the rest on
    NVLink, so bytes that all leave the domain are handed to it scaled by ``(ep − 1)/(ep − g)``.

    * ``alltoall``: every routed copy to another rank, ``k·(ep − 1)/ep`` both;
    * ``deepep``, ``hybridep`` in one domain: once per distinct destination rank other than its
      own, ``R·(ep − 1)/ep`` both (``R``: the module docstring);
    * across ``N = ep/g`` domains: once per remote domain over the scale-out network,
      ``D_r`` = :func:`model.moe.expected_remote_nodes` (capped by ``node_limit``), then once
      per destination rank over NVLink from the rank that received it there (or from the
      sender inside its own domain), which is the receiving rank itself for the ``1/g`` of the
      reached ranks at the sender's local index: sent ``D_r + R·(g − 1)/g``; timed, the
      scale-out share, ``D_r·(ep − 1)/(ep − g)`` (the NVLink forward rides beside it, as the
      rule has NVLink carry the in-domain share of an all-to-all). ``R`` is uniform routing's
      under a node limit too (the limit, which gathers a token's experts on fewer nodes and so
      on fewer ranks, is not applied to it: an upper bound on the forward).

    A group whose experts do not split evenly over its ranks is counted as ``alltoall``.

    Examples
    --------
    k 8 of 256 experts over ep 8 in one domain: ``R = 8·(1 − C(224, 8)/C(256, 8))`` ≈ 5.295
    ranks, 7/8 of them remote, against 8·7/8 = 7 copies:

    >>> sent, timed = dispatch_copies(MoERun(dispatcher="deepep"), 256, 8, 8, 8)
    >>> sent == timed, round(float(sent), 4), dispatch_copies(MoERun(), 256, 8, 8, 8)[0]
    (True, 4.6328, Fraction(7, 1))
    """
    if ep == 1:
        return Fraction(0), Fraction(0)
    per_domain = int(per_domain)  # the search's tables hand it as a float
    plain = Fraction(top_k * (ep - 1), ep)
    if not run.dispatcher.deduplicates or experts % ep:
        return plain, plain
    ranks = expected_distinct_nodes(experts, ep, top_k)
    nodes = ep // per_domain if per_domain and ep % per_domain == 0 else 1
    if nodes <= 1:
        one = ranks * Fraction(ep - 1, ep)
        return one, one
    remote = expected_remote_nodes(experts, nodes, top_k, run.node_limit)
    g = per_domain
    return remote + ranks * Fraction(g - 1, g), remote * Fraction(ep - 1, ep - g)


def all_to_all_sent(
    run: MoERun,
    tokens: float,
    experts: int,
    top_k: int,
    ep: int,
    per_domain: int,
    row_bytes: float,
    padded: bool = False,
) -> float:
    """Bytes of one dispatch (the combine moves as many back) on the busiest rank, as the
    bytes the all-to-all link rule times (:func:`model.step_time.all_to_all_bandwidth`: the
    share ``(ep − g)/(ep − 1)`` of them that leaves the NVLink domain rides the GPU's NIC,
    ``g = per_domain`` members of the group per domain):

    * ``alltoall`` — every routed copy to another rank: ``rows·row_bytes·(ep − 1)/ep``
      (:func:`model.moe.all_to_all_bytes`), ``rows`` = :func:`model.moe_rows.routed_rows`'
      received rows: the busiest rank receives ``imbalance`` times the mean in the dispatch and
      sends as many back in the combine, and the all-to-all ends when its link has moved them
      (each rank sends only its own ``T·k``, so the receiving side binds); 0 at ep = 1, where
      nothing is exchanged (Megatron-LM d98e8a64dd ``token_dispatcher.py``
      ``MoEAlltoAllTokenDispatcher.token_dispatch``: ``all_to_all`` over the ep group of
      ``output_splits`` rows, the rows received); ``padded``: DeepSpeed's ``E·C`` rows each
      way (:func:`model.moe_rows.row_factors`);
    * ``deepep`` and ``hybridep`` (:attr:`model.moe_run.Dispatcher.deduplicates`) — the timed
      token-rows of :func:`dispatch_copies` per token, times the rank's imbalance
      (``rows / (T·k)``): in one domain a row per distinct remote rank, across domains a row
      per remote domain at the rule's scale.

    Examples
    --------
    DeepSeek-V3's EP 64 on 8-GPU nodes, 4,096 tokens, 7,168 × 2 bytes a row: ``alltoall`` sends
    32,768 × 14,336 × 63/64 bytes; ``deepep`` with M = 4 sends ``E[min(D, 4)]·7/8`` ≈ 3.48 remote
    nodes per token in place of 8·56/64 = 7 copies; at the rule's scale the ratio is
    ``E[min(D, 4)]·(7/8)·(63/56) / (8·63/64) = E[min(D, 4)]/8``, E[min(D, 4)] ≈ 3.983:

    >>> a = all_to_all_sent(MoERun(), 4096, 256, 8, 64, 8, 14336)
    >>> d = all_to_all_sent(MoERun(dispatcher="deepep", node_limit=4), 4096, 256, 8, 64, 8, 14336)
    >>> round(a / 2**20, 1), round(d / a, 4)
    (441.0, 0.4979)
    >>> d == all_to_all_sent(MoERun(dispatcher="hybridep", node_limit=4), 4096, 256, 8, 64, 8, 14336)
    True
    """
    if ep == 1:
        return 0.0
    _, rows = routed_rows(run, tokens, experts, top_k, ep, padded)
    if rows == 0:
        return 0.0
    if not run.dispatcher.deduplicates:
        return rows * row_bytes * (ep - 1) / ep
    _, timed = dispatch_copies(run, experts, top_k, ep, per_domain)
    busiest = rows / (tokens * top_k)
    return busiest * tokens * float(timed) * row_bytes


def dispatch_traffic_share(
    run: MoERun, experts: int, top_k: int, ep: int, per_domain: int
) -> Fraction:
    """Bytes the run's dispatch sends over any link ÷ those of the plain ``alltoall``
    (:func:`dispatch_copies`' first figures; 1 for ``alltoall`` and at ep = 1): what the
    traffic table (:func:`model.comm_layers.ep_bytes`) scales every routed copy's bytes by.

    Examples
    --------
    ep 8 in one domain, k 8 of 256: ``R/k`` ≈ 0.662; DeepSeek-V3's EP 64 over 8 nodes:
    (4.63 remote nodes + 7.68·7/8 forwarded ranks) / 7.875 copies, more than 1 (each forwarded
    row crosses two links):

    >>> deepep = MoERun(dispatcher="deepep")
    >>> round(float(dispatch_traffic_share(deepep, 256, 8, 8, 8)), 4)
    0.6618
    >>> round(float(dispatch_traffic_share(deepep, 256, 8, 64, 8)), 4)
    1.4412
    """
    sent, _ = dispatch_copies(run, experts, top_k, ep, per_domain)
    plain, _ = dispatch_copies(MoERun(), experts, top_k, ep, per_domain)
    return sent / plain if plain else Fraction(1)


def dispatch_time_share(
    run: MoERun, experts: int, top_k: int, ep: int, per_domain: int
) -> Fraction:
    """Bytes the link rule times ÷ bytes the dispatch sends (:func:`dispatch_copies`; 1 for
    ``alltoall`` and within one domain): what the single time model, which times the traffic
    table's bytes (:func:`dispatch_traffic_share` in them) on the group's link, scales its
    expert-parallel bytes by. Imbalance and capacity scale both alike.

    Examples
    --------
    DeepSeek-V3's EP 64 over 8-GPU nodes with M = 4: with the traffic share, E[min(D, 4)]/8
    (:func:`all_to_all_sent`).

    >>> run = MoERun(dispatcher="deepep", node_limit=4)
    >>> share = dispatch_traffic_share(run, 256, 8, 64, 8) * dispatch_time_share(run, 256, 8, 64, 8)
    >>> round(float(share), 4)
    0.4979
    """
    sent, timed = dispatch_copies(run, experts, top_k, ep, per_domain)
    return timed / sent if sent else Fraction(1)
