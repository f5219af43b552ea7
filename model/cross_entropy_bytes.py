"""The bytes the vocab-parallel cross-entropy moves per logit and the tensor-parallel collectives
it runs, for each ``cross_entropy_fusion_impl`` Megatron-Core offers (:func:`model.ops.output_ops`
times them; :mod:`model.loss_memory` keeps their memory)."""

from __future__ import annotations

__all__ = ["CROSS_ENTROPY_BYTES_PER_LOGIT", "CROSS_ENTROPY_PASSES", "CROSS_ENTROPY_EXCHANGES"]

CROSS_ENTROPY_BYTES_PER_LOGIT = 44
"""Bytes moved per logit by the vocab-parallel cross-entropy in FP32 (Megatron-LM
``tensor_parallel/cross_entropy.py``, unfused): forward casts the bf16 logits to FP32 (2 + 4),
takes the max (4), subtracts it (4 + 4), exponentiates (4 + 4) and sums (4); backward forms
softmax − one-hot (4 + 4) and scales it into the bf16 gradient (4 + 2)."""

CROSS_ENTROPY_PASSES: dict[str, tuple[int, int]] = {
    "none": (30, 14),
    "native": (22, 10),
    "te": (6, 4),
}
"""(forward, backward) HBM bytes per logit of each cross entropy Megatron-Core runs
(``cross_entropy_fusion_impl``, :class:`model.loss_memory.CrossEntropyFusion`):

* ``none``: :data:`CROSS_ENTROPY_BYTES_PER_LOGIT`, split as its derivation (30 + 14).
* ``native`` (``megatron/core/fusions/fused_cross_entropy.py``): each ``jit_fuser`` function is
  one compiled kernel. Forward: ``calculate_logits_max`` reads the bf16 logits and writes their
  fp32 copy, the maximum taken on the way (2 + 4); ``calculate_predicted_logits`` subtracts,
  exponentiates and sums in place (4 + 4); ``calculate_cross_entropy_loss`` normalises in place
  (4 + 4): 22. Backward: ``calculate_gradients`` reads the saved softmax, writes it back updated
  (the in-place ``mul_`` of a saved input) and the bf16 gradient (4 + 4 + 2): 10.
* ``te`` (Transformer Engine ``parallel_cross_entropy``, :mod:`model.loss_memory`): forward's
  ``online_softmax_kernel`` reads the bf16 logits (2) and ``cross_entropy_kernel`` reads them
  again and writes the gradient in their place (2 + 2): 6. Backward's ``element_mul_kernel``
  scales it in place (2 + 2): 4 (Megatron's loss gradient is per token, never the scalar 1.0 for
  which ``cross_entropy_backward`` skips the kernel).

Per-row reads (the target logit, the row statistics) are not counted."""

CROSS_ENTROPY_EXCHANGES: dict[str, tuple[tuple[str, int], ...]] = {
    "none": (("all_reduce", 4),) * 3,
    "native": (("all_reduce", 4), ("all_reduce", 8)),
    "te": (("all_gather", 12),),
}
"""The tensor-parallel collectives of each cross entropy (``cross_entropy_fusion_impl``) in
forward, each as (kind, bytes per token of one rank's tensor), all in fp32: ``none``
(``tensor_parallel/cross_entropy.py``) all-reduces the row maximum, the target logit and the sum
of exponentials one at a time; ``native`` the maximum, then the target logit and sum
concatenated (``predicted_logits_sum_exp_logits``); ``te`` all-gathers each rank's
``m_d_X_y`` (maximum, sum, target logit: ``dist.all_gather_into_tensor`` in
``cross_entropy_forward``)."""
