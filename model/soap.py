"""SOAP's optimizer step: the bytes one matrix's update holds live beyond its resident state.

SOAP (Vyas et al. 2024, arXiv 2409.11321) keeps per matrix Adam's two moments, the Kronecker
factors L, R and their eigenbases Q_L, Q_R (:mod:`model.optimizers`,
:func:`model.optimizers.matrix_extra_bytes`). Its step computes new factors, new eigenbases and
projections of the moments and the gradient, each a fresh tensor: this module sizes the most of
them alive at once for one matrix, in the framework's code. The term that takes the largest over
a stage's matrices is :func:`model.terms.state.optimizer_transient_term`.

Under ``megatron``, for an m × n matrix (E = m·n; FP32 throughout), the code is
Emerging-Optimizers v0.3.0 (the rev Megatron-LM pins)
``emerging_optimizers/soap/soap.py`` ``SOAP.step`` with Megatron-Core's arguments
(``megatron/core/optimizer/emerging_optimizers.py`` ``_default_adam_based_eopt_config_to_kwargs``:
``soap_use_kl_shampoo = True``, ``OptimizerConfig``'s default; ``use_eigh`` False, so the
eigenbases are refreshed by one orthogonal iteration, ``power_iter_steps = 1``). The gradient
is the FP32 main gradient (``Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads``),
so ``p.grad.to(torch.float32)`` copies nothing. The phases, in elements:

* ``update_kronecker_factors_kl_shampoo``: for the L side, ``conjugate(L, Q_L, diag=True)``
  (Q_Lᵀ·L and its product with Q_Lᵀ, 2m²), then ``correction = (Q_L·s)·Q_Lᵀ`` (2m² while
  formed), then ``conjugate(correction, G)`` (Gᵀ·C, E, and its product, n², kept in
  ``updates``); the R side the same with ``updates[0]`` (n²) and the previous ``correction``
  (m², a loop local) alive: m² + 3n² while its correction forms, m² + E + 2n² in its
  conjugate. Peak ``max(2m², m² + 3n², m² + E + 2n²)``.
* ``update_eigenbasis_and_exp_avgs``: ``exp_avg`` projected out (two ``tensordot``, 2E; the
  result E kept), ``sort_eigenbasis_by_approx_eigvals`` (sorted copies of Q_L, Q_R, m² + n²,
  and of ``exp_avg_sq`` by ``index_select``, E; two E alive at its second select):
  3E + m² + n²; ``orthogonal_iteration`` for L: K·Q (m²) and ``torch.linalg.qr``'s Q and R
  (2m²) beside what is held, 2E + 4m² + n²; for R with the new Q_L: 2E + 2m² + 4n²; the
  projection back in: 4E + 2m² + 2n².
* the update: ``project_in(grad)`` (E kept), ``calculate_adam_update`` (the momentum, the
  second moment over its bias correction, its square root and the sum with eps: 5E with the
  projected gradient), ``project_out`` (4E).

So ``4·max(2m², m² + 3n², m² + E + 2n², 3E + m² + n², 2E + 4m² + n², 2E + 2m² + 4n²,
4E + 2m² + 2n², 5E)``. Not counted: cuSOLVER's QR workspace (``geqrf``/``orgqr``, sized by
the library at run time, O(m) columns of a panel) and, on the first step only, ``eigh``'s
(``cusolverDnSsyevd_bufferSize``; no published size), whose eigenvectors and ``flip`` copy
(2m²) stay under the orthogonal iteration's 3m². What the previous parameter's update leaves
alive is :data:`SOAP_CARRIED_TENSORS`, added by the term.
"""

from __future__ import annotations

__all__ = ["soap_step_bytes", "SOAP_CARRIED_TENSORS"]

SOAP_CARRIED_TENSORS = 3
"""Matrix-sized FP32 tensors of one parameter's update still alive while the next parameter
steps: Emerging-Optimizers' ``SOAP.step`` binds ``grad_projected``, ``adam_update`` and
``precond_update`` as loop locals, which are released only when the next iteration rebinds
them (after that parameter's factor and eigenbasis updates)."""


def soap_step_bytes(rows: int, cols: int, framework: str) -> int:
    """Most bytes one GPU holds at once, beyond the resident state, while ``framework``'s SOAP
    steps one ``rows`` × ``cols`` matrix (m = rows, n = cols, E = m·n; FP32 throughout, 4 B
    per element); 0 where the profile's SOAP step is not modelled.

    ``megatron``: Emerging-Optimizers' ``SOAP.step`` as Megatron-Core configures it, the most
    of the phases the module docstring lists,
    ``4·max(2m², m² + 3n², m² + E + 2n², 3E + m² + n², 2E + 4m² + n², 2E + 2m² + 4n²,
    4E + 2m² + 2n², 5E)``; what the previous parameter's update leaves alive is
    :data:`SOAP_CARRIED_TENSORS`, added by the term.

    ``textbook`` (the reference ``soap.py``): not modelled, 0 (its step was not read).

    Examples
    --------
    Llama 3 8B's fc1 on one rank of tp 2 (m = 14,336, n = 4,096; E = 58,720,256): the
    orthogonal iteration on L, 2E + 4m² + n² = 117,440,512 + 822,083,584 + 16,777,216 =
    956,301,312 elements, 3,825,205,248 B.

    >>> soap_step_bytes(14336, 4096, "megatron")
    3825205248
    >>> soap_step_bytes(4096, 4096, "megatron") == 4 * 8 * 4096**2  # 4E + 2m² + 2n²
    True
    >>> soap_step_bytes(4096, 4096, "textbook")
    0
    """
    if framework != "megatron":
        return 0
    m, n = rows, cols
    e = m * n
    mm, nn = m * m, n * n
    return 4 * max(
        2 * mm,
        mm + 3 * nn,
        mm + e + 2 * nn,
        3 * e + mm + nn,
        2 * e + 4 * mm + nn,
        2 * e + 2 * mm + 4 * nn,
        4 * e + 2 * mm + 2 * nn,
        5 * e,
    )
