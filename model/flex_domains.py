"""Whether DeepEP's and HybridEP's buffers can be built over an expert-parallel group as the
rank order lays it over NVLink domains (the legality rule ``flex_domains``,
:func:`flex_domains_rule`). Both libraries number their group's ranks into NVLink groups of a
size of their own, by rank, not by where the GPUs are; a group laid over the domains otherwise
cannot be built, and the model refuses it rather than time it (it was timed as ``ep/g`` domains
of its fewest ``g`` members in one, :func:`model.moe_dispatch.dispatch_copies`, which no run
has).

* **DeepEP** (deepseek-ai/DeepEP dd758ca, the legacy normal kernels Megatron-Core's flex
  dispatcher and torchtitan call): ``csrc/legacy/buffer.hpp`` ``Buffer::Buffer`` sets
  ``rdma_rank = rank / 8``, ``nvl_rank = rank % 8`` (``LEGACY_NUM_MAX_NVL_PEERS``,
  :data:`model.moe.DEEPEP_NVL_PEERS`) and ``num_nvl_ranks = min(num_ranks, 8)`` from the
  group's own numbering, and ``Buffer::sync`` opens the memory handle of each NVL peer
  ``rdma_rank·num_nvl_ranks + i`` (``shared_memory_allocator.open_mem_handle``: a CUDA IPC
  handle, which maps within one host, or with ``allow_mnnvl`` a fabric handle, within one
  NVLink domain). So each run of 8 consecutive ranks of its group (the whole group below 8)
  must lie in one NVLink domain; the runs reach each other over NVSHMEM whichever domains they
  are in. Where every run does, the time already reads this layout: runs of ``8·ep/G`` ep
  members (:func:`model.moe_dispatch.kernel_members`).
* **HybridEP** (DeepEP branch ``hybrid-ep`` 94a9f8f6b1, Megatron-Core's other flex backend):
  ``deep_ep/hybrid_ep_buffer.py`` ``HybridEPBuffer.__init__`` has each rank count the ranks of
  its group whose memory it can map, ``R`` (``csrc/hybrid_ep/allocator/allocator.cu``
  ``ExtendedMemoryAllocator::detect_accessible_ranks``: itself and each rank whose test
  handle ``is_accessible``, the ranks of its NVLink domain), asserts ``group_size % R == 0``
  and lays the group out as ``group_size / R`` domains of ``R`` consecutive ranks
  (``local_rank = rank % R``, ``node_rank = rank // R``, handed to its ``Configurer``). A group
  whose parts in the domains it touches differ in size fails that assert on some rank (64
  ranks lying 8 + 56: 64 % 56) or has its ranks configure different layouts; equal parts of
  ``R`` run as the ``ep/R`` domains of ``R`` the time reads (the fewest in a domain is ``R``).

Megatron-Core builds both over the etp·ep ``tp_ep_group`` (:func:`model.dispatch_buffers.
deepep_group_ranks`), whose members are the ep groups' with their expert-tp block; the rule
reads the ep groups (every tp offset) as :func:`model.rank_groups.stride_size` places them.
Units: ranks.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.dispatch_buffers import deepep_group_ranks
from trainplan.model.errors import LayoutError
from trainplan.model.expert_groups import expert_placement_tp_of, expert_tp_of
from trainplan.model.moe import DEEPEP_NVL_PEERS
from trainplan.model.moe_run import Dispatcher
from trainplan.model.rank_groups import domain_counts, group_members, stride_size

__all__ = ["FLEX_DOMAINS_SCOPE", "flex_domain_refusal", "flex_domains_rule"]


def _ranks(members: tuple[int, ...]) -> str:
    """``members`` as a line names them: ``a–b`` when consecutive, else ``a, a + s, …, b``."""
    if len(members) < 3 or members[-1] - members[0] == len(members) - 1:
        return f"ranks {members[0]}–{members[-1]}"
    return f"ranks {members[0]}, {members[1]}, …, {members[-1]}"


def flex_domain_refusal(
    dispatcher: str, stride: int, size: int, total: int, domain: int, group_ranks: int
) -> str:
    """The one line that refuses ``dispatcher`` over expert-parallel groups of ``size`` ranks
    at ``stride`` (the layout's ``total`` ranks, NVLink domains of ``domain`` consecutive
    ranks; ``group_ranks``: the ranks of the dispatcher's group, etp·ep under Megatron-Core),
    or "" (module docstring): under ``deepep`` a run of ``min(ep, 8·ep/G)`` consecutive ep
    members across a domain's edge, under ``hybridep`` a group whose parts in its domains
    differ in size.

    Examples
    --------
    ep 8 at stride 3 (tp 3) on 8-GPU nodes: {0, 3, 6, 9, …, 21} lies 3 + 3 + 2 on nodes 0–2;
    DeepEP's one run of 8 crosses, HybridEP's parts differ. ep 16 at stride 1 on 72-GPU
    domains (world 144): 64–79 lies 8 + 8, DeepEP's runs 64–71 and 72–79 each in one, and
    HybridEP's equal parts run as 2 domains of 8; ep 64 (world 576): 64–127 lies 8 + 56.

    >>> flex_domain_refusal("deepep", 3, 8, 24, 8, 8)[:47]
    'moe_dispatcher: deepep with ep 8 at stride 3 on'
    >>> flex_domain_refusal("hybridep", 3, 8, 24, 8, 8)[:60]
    'moe_dispatcher: hybridep with ep 8 at stride 3 on NVLink dom'
    >>> flex_domain_refusal("deepep", 1, 16, 144, 72, 16), flex_domain_refusal("hybridep", 1, 16, 144, 72, 16)
    ('', '')
    >>> "8 + 56" in flex_domain_refusal("hybridep", 1, 64, 576, 72, 64)
    True
    >>> flex_domain_refusal("deepep", 1, 64, 576, 72, 64)
    ''
    """
    if dispatcher not in (Dispatcher.DEEPEP, Dispatcher.HYBRIDEP) or size <= 1 or not domain:
        return ""
    where = f"{dispatcher} with ep {size} at stride {stride} on NVLink domains of {domain} GPUs"
    for members in group_members(stride, size, total, domain):
        if dispatcher == Dispatcher.DEEPEP:
            run = (
                size
                if group_ranks <= DEEPEP_NVL_PEERS
                else max(1, DEEPEP_NVL_PEERS * size // group_ranks)
            )
            for j in range(0, size, run):
                cut = members[j : j + run]
                if cut[0] // domain != cut[-1] // domain:
                    return (
                        f"moe_dispatcher: {where}: DeepEP's Buffer maps the memory of its NVLink "
                        f"peers, each run of {min(group_ranks, DEEPEP_NVL_PEERS)} consecutive "
                        "ranks of its group, within one NVLink domain only (csrc/legacy/buffer.hpp "
                        f"Buffer::sync), and {_ranks(cut)} cross a domain's edge (use a "
                        "rank order or tp that keeps them in one domain, or moe_dispatcher alltoall)"
                    )
        elif len(set(parts := domain_counts(members, domain))) > 1:
            return (
                f"moe_dispatcher: {where}: HybridEPBuffer lays its group out as domains of equal "
                "ranks, as many as each rank reaches (group_size % R asserted, R detected per "
                f"rank), and {_ranks(members)} lie "
                f"{' + '.join(map(str, parts))} (use a rank order, tp or ep whose groups split "
                "the domains evenly, or moe_dispatcher alltoall)"
            )
    return ""


FLEX_DOMAINS_SCOPE = ("ep", "tp", "etp", "cp", "dp", "pp", "framework", "rank_order")
"""The fields :func:`flex_domains_rule` reads."""


def flex_domains_rule(
    s: Any, ep: int, tp: int, etp: int | None, cp: int, dp: int, pp: int, framework: Any,
    rank_order: tuple[str, ...],
) -> None:  # fmt: skip
    """The legality rule ``flex_domains`` (``s``: :class:`model.legality.Setting`, whose
    ``nvlink_domain`` says where groups lie; not checked without it): :func:`flex_domain_refusal`
    of the run's dispatcher over the ep groups as the rank order places them.

    Raises
    ------
    LayoutError
        One line naming ``moe_dispatcher``, the groups and the rule.
    """
    dispatcher = s.training.moe_run.dispatcher
    if dispatcher not in (Dispatcher.DEEPEP, Dispatcher.HYBRIDEP) or ep == 1 or not s.nvlink_domain:
        return
    degrees = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp}
    degrees["etp"] = expert_placement_tp_of(tp, etp, framework, ep)
    stride, size = stride_size(degrees, "ep", tuple(rank_order))
    ranks = deepep_group_ranks(str(framework), ep, expert_tp_of(tp, etp, framework, ep))
    total = tp * cp * dp * pp
    problem = flex_domain_refusal(
        str(dispatcher), int(stride), int(size), total, int(s.nvlink_domain), ranks
    )
    if problem:
        raise LayoutError(problem)
