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

from trainplan.model.moe import expected_distinct_nodes, expected_remote_nodes
from trainplan.model.moe_run import MoERun, routed_rows

__all__ = [
    "kernel_members",
    "dispatch_copies",
    "all_to_all_sent",
    "dispatch_traffic_share",
    "dispatch_time_share",
]


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
        return per_domain
    return min(per_domain or ep, max(1, reach * ep // group_ranks))


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
) -> float:
    """Bytes of one dispatch (the combine moves as many back) on the busiest rank, as the
    bytes the all-to-all link rule times (:func:`model.step_time.all_to_all_bandwidth`: the
    share ``(ep − g)/(ep − 1)`` of them that leaves the NVLink domain rides the GPU's NIC,
    ``g = per_domain`` members of the group per domain):

    * ``alltoall`` — every routed copy to another rank: ``rows·row_bytes·(ep − 1)/ep``
      (:func:`model.moe.all_to_all_bytes`), ``rows`` = :func:`model.moe_run.routed_rows`;
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
    rows = routed_rows(run, tokens, experts, top_k)
    if rows == 0 or ep == 1:
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
