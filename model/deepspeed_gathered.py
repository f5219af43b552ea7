"""What DeepSpeed ZeRO-3 holds gathered at the turn from forward to backward
(:func:`zero3_turn_elements`), the peak of its gathered parameters.

DeepSpeed edaa72212 ``deepspeed/runtime/zero/partitioned_param_coordinator.py``:

* ``PartitionedParameterCoordinator.__params_to_release``: a module's parameters are not freed
  after its forward when they recur within ``max_reuse_distance`` elements of the recorded
  trace (:data:`DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS`, ``stage3_max_reuse_distance`` in
  ``zero/config.py``). The trace runs forward then backward, so the last layers of the forward,
  whose backward comes within that distance, stay gathered into the backward: a layer ``j``
  layers from the end is ``2·(j − 1)`` layers and the output weight away from its own backward.
* ``_fetch_sub_module_impl``: after the module computed, the prefetch gathers the next
  parameters of the trace not already available until it holds
  :data:`model.frameworks.DEEPSPEED_PREFETCH_BUCKET_ELEMENTS` (``stage3_prefetch_bucket_size``),
  the last parameter taken whole, and at most ``max_live_parameters`` less those available
  (:data:`DEEPSPEED_MAX_LIVE_PARAMETERS`). Every module's fetch prefetches again, so the
  look-ahead grows until the parameters available reach that cap: they reach ``max_live_parameters``
  plus the last parameter taken whole wherever the stage holds that many.
* The output weight: Megatron-DeepSpeed ``megatron/model/gpt_model.py``
  ``post_language_model_processing`` reads the (tied) output weight in the root module's
  forward; ``parameter_offload.py`` ``ZeROOrderedDict.__getitem__`` registers it as an external
  parameter of that module, gathered with it for the whole forward and freed at its backward's
  end; an untied output layer is the last module of the forward and the first of the backward.

The gathered buffer is whole (``partition_parameters.py``: the all-gather writes a new full
buffer; the partition ``ds_tensor`` stays), so these are whole elements.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import DEEPSPEED_PREFETCH_BUCKET_ELEMENTS
from trainplan.model.xp import maximum, minimum, where

__all__ = [
    "DEEPSPEED_MAX_LIVE_PARAMETERS",
    "DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS",
    "zero3_turn_elements",
]

DEEPSPEED_MAX_LIVE_PARAMETERS = 1_000_000_000
"""DeepSpeed ``stage3_max_live_parameters`` default, elements (``zero/config.py``,
``DeepSpeedZeroConfig.max_live_parameters``): ``_fetch_sub_module_impl`` prefetches while the
parameters available are below it (``max_params_to_prefetch``), the last one taken whole."""

DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS = 1_000_000_000
"""DeepSpeed ``stage3_max_reuse_distance`` default, elements (``zero/config.py``,
``DeepSpeedZeroConfig.max_reuse_distance``): a released parameter that recurs within this many
elements of the trace stays gathered."""


def zero3_turn_elements(
    layer: Any, layers: Any, head: Any, embedding: Any, tensor: Any, total: Any
) -> Any:
    """Parameter elements on one GPU held gathered (whole) by DeepSpeed ZeRO-3 at the turn from
    forward to backward, an upper bound (see the module docstring for the code):

    * the last ``k`` layers, ``k = ⌈(R − head) ÷ 2·layer⌉`` (at least 1, the layer computed; at
      most ``layers``), ``R`` = :data:`DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS`: layer ``j`` from
      the end is kept when ``2·(j − 1)·layer + head < R``. Whole layers are counted (the first
      kept one may keep only its last modules) and the norms, a recomputation's second forward
      and an untied output's second occurrence are left out of the distance (each would only
      lengthen it): both over-count;
    * ``head``, the output weight (or the tied embedding), held through forward and backward;
    * ``embedding`` (an untied input embedding, else 0) where the whole trace is within ``R``
      (``2·layers·layer + head < R``: every parameter stays gathered);
    * the prefetch, :data:`model.frameworks.DEEPSPEED_PREFETCH_BUCKET_ELEMENTS` plus ``tensor``,
      the largest layer tensor (the last one it takes is whole);

    and at least what the prefetch reaches over many fetches,
    :data:`DEEPSPEED_MAX_LIVE_PARAMETERS` + ``tensor``; at most ``total``, the parameters on the
    GPU. ``layer``: the largest layer's elements;
    ``layers``: the layers on the GPU. Element-wise for arrays.

    GPT-3 175B at tp 16 (tied, 50,272 vocabulary rows; weights only, biases and norms aside): a
    layer is 12·12,288² ÷ 16 = 113,246,208, the output 50,272·12,288 ÷ 16 = 38,608,896; ``k`` =
    ⌈961,391,104 ÷ 226,492,416⌉ = 5 (layers 91 to 95, from 0); fc1 4·12,288² ÷ 16 = 37,748,736:
    566,231,040 + 38,608,896 + 50,000,000 + 37,748,736 = 692,588,672 elements, below the live
    cap's 1e9 + 37,748,736 = 1,037,748,736.

    >>> zero3_turn_elements(113_246_208, 96, 38_608_896, 0, 37_748_736, 10**11)
    1037748736
    >>> zero3_turn_elements(10, 4, 20, 30, 5, 95)  # a small model: all of it
    95
    """
    reuse = DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS
    room = reuse - head
    step = 2 * maximum(layer, 1)
    kept = where(room > 0, -(-room // step), 0)
    kept = minimum(maximum(kept, 1), layers)
    whole = where(2 * layers * layer + head < reuse, embedding, 0)
    held = kept * layer + head + whole + DEEPSPEED_PREFETCH_BUCKET_ELEMENTS + tensor
    return minimum(maximum(held, DEEPSPEED_MAX_LIVE_PARAMETERS + tensor), total)
