"""Whether a Megatron-LM run keeps its kernels in launch order (``CUDA_DEVICE_MAX_CONNECTIONS``),
the one rule the launch line's environment (:func:`interface.launch_parallel.megatron_env`) and
the time model's tensor- and context-parallel overlap (:func:`model.tp_overlap.tp_overlap_for`,
:attr:`model.op_time.Clock.cp_ring_hidden`) both read.

Megatron-Core's async tensor-parallel collectives hide under a GEMM only when they reach the GPU
before it: Megatron-LM d98e8a64dd ``megatron/core/tensor_parallel/layers.py``
``LinearWithGradAccumulationAndAsyncCommunication.backward`` launches the input all-gather and
the input gradient's reduce-scatter (all-reduce without sequence parallelism) with
``async_op=True`` and says at each "Here we rely on CUDA_DEVICE_MAX_CONNECTIONS=1 to ensure that
the ... is scheduled before the ... computation"; the docstring of
``linear_with_grad_accumulation_and_async_allreduce`` adds that the ordering "is necessary for a
speedup but not for correctness", and the function warns when the variable is not ``"1"``. With
one hardware connection the kernels start in the order they are issued; with several (the
driver's default 8) the GEMM issued after the collective may take the SMs first and the
collective then runs after it. ``megatron/training/arguments.py`` ``validate_args`` therefore
asserts ``CUDA_DEVICE_MAX_CONNECTIONS == "1"`` at tp or cp above 1 on a device of compute
capability below 10 ("Using tensor model parallelism or context parallelism require setting the
environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1"), except:

* under Megatron-FSDP (``--use-megatron-fsdp``), which asserts the opposite ("FSDP requires
  CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset.") and warns that tp or cp with it "require different
  CUDA_MAX_CONNECTIONS settings": the tp/cp overlap is then not guaranteed;
* with ``--overlap-moe-expert-parallel-comm``, where it only warns ("try not to use tensor model
  parallelism or context parallelism with overlap_moe_expert_parallel_comm ... If you want to use
  both, you can set CUDA_DEVICE_MAX_CONNECTIONS to 1 or 32, which depends on which
  parallelization you want to prioritize"): the planner's line prioritises the expert all-to-all
  overlap it times (variable unset), so the tp/cp overlap is not guaranteed either;
* on compute capability 10 and above (Blackwell, :data:`BLACKWELL_PARTS`): "CUDA_DEVICE_MAX_CONNECTIONS
  requirement no longer exists since the Blackwell architecture" (the same function), which the
  planner takes at its word: the overlap is credited there.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.moe_run import EpOverlap
from trainplan.model.part_family import FAMILY, catalogue_part

__all__ = ["BLACKWELL_PARTS", "one_connection", "launch_order_kept"]

BLACKWELL_PARTS = frozenset(part for part, family in FAMILY.items() if family == "blackwell")
"""The catalogue parts of CUDA compute capability 10 or more, the Blackwell family of
:data:`model.part_family.FAMILY` (NVIDIA's "CUDA GPUs - Compute Capability" table: B200 and
GB200 10.0, B300 and GB300 10.3): Megatron-LM's ``get_device_arch_version``
(``megatron/training/utils/common_utils.py``, the device's ``major``) is 10 there; every other
NVIDIA part of the catalogue is 9 or less (H100, H200, H800, H20: 9.0; A100: 8.0; V100: 7.0)."""


def _before_blackwell(part: str | None) -> bool:
    """Whether ``part`` (a catalogue name, a what-if suffix allowed; None: assumed so) is of
    compute capability below 10."""
    return part is None or catalogue_part(str(part)) not in BLACKWELL_PARTS


def one_connection(fsdp: bool, ep_comm_overlap: bool, part: str | None) -> bool:
    """Whether a Megatron-LM run with tp or cp above 1 sets ``CUDA_DEVICE_MAX_CONNECTIONS=1``
    (module docstring): on a part before Blackwell (``part``, a catalogue name; None: assumed
    before), unless it runs Megatron-FSDP (``fsdp``) or ``--overlap-moe-expert-parallel-comm``
    (``ep_comm_overlap``).

    >>> one_connection(False, False, "H100-SXM"), one_connection(True, False, "H100-SXM")
    (True, False)
    >>> one_connection(False, True, "H100-SXM"), one_connection(False, False, "B200")
    (False, False)
    """
    return _before_blackwell(part) and not fsdp and not ep_comm_overlap


def launch_order_kept(part: str | None, ep: Any, framework: Any, zero_stage: Any) -> bool:
    """Whether the framework's async tensor- and context-parallel collectives are sure to start
    before the GEMM or attention core they hide under (module docstring): always outside
    ``megatron`` (the other profiles' overlaps are not Megatron-Core's) and on Blackwell; under
    ``megatron`` before Blackwell only where :func:`one_connection` holds — not at
    ``zero_stage`` 3 (Megatron-FSDP) nor with the recipe's expert overlap ``ep``
    (:class:`model.moe_run.EpOverlap`) ``overlap_moe_expert_parallel_comm``.

    >>> launch_order_kept("H100-SXM", "none", "megatron", 3), launch_order_kept("H100-SXM", "none", "megatron", 1)
    (False, True)
    >>> launch_order_kept("GB200", "none", "megatron", 3), launch_order_kept("H100-SXM", "none", "fsdp2", 3)
    (True, True)
    >>> launch_order_kept("H100-SXM", "overlap_moe_expert_parallel_comm", "megatron", 1)
    False
    """
    if str(framework) != "megatron" or not _before_blackwell(part):
        return True
    return one_connection(int(zero_stage) == 3, EpOverlap(str(ep)) is EpOverlap.COMBINED_1F1B, part)
