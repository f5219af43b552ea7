"""The FP8 casts torchao's ``Float8Linear`` holds during a projection's backward under the
``fsdp2`` profile (torchtitan's ``Float8LinearConverter``): :func:`torchao_fp8_casts` for one
projection's shapes, :func:`fp8_cast_steps` at each projection step of a layer. Read by
:func:`model.backward_working.backward_working_bytes` (split from :mod:`model.backward_working`,
which re-exports :func:`torchao_fp8_casts`).
"""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.activations import ActivationContext
from trainplan.model.context_parallel import attention_dims
from trainplan.model.frameworks import Framework
from trainplan.model.specs import Architecture

__all__ = ["torchao_fp8_casts", "fp8_cast_steps"]


def torchao_fp8_casts(
    tokens: Fraction, in_features: Fraction, out_features: Fraction, element_bytes: Fraction,
    eager: bool,
) -> Fraction:  # fmt: skip
    """Bytes of the FP8 casts torchao's ``Float8Linear`` holds during its backward beside the
    input gradient, for ``tokens`` rows of ``in_features`` (K) in and ``out_features`` (N) out on
    this rank, ``element_bytes`` per FP8 element (1; MXFP8 1 + 1/32).

    ``matmul_with_hp_or_float8_args.backward`` (``torchao/float8/float8_linear.py``, pytorch/ao
    36027d82) casts ``grad_output`` along dim 0 ``[S, N]`` and the saved BF16 weight ``[K, N]``
    for the input gradient, then ``grad_output`` again along dim 1 ``[S, N]`` and the saved BF16
    input ``[S, K]`` for the weight gradient (``hp_tensor_to_float8_dynamic`` each: every
    torchtitan recipe casts all four, none arrives in FP8), and returns only after the weight
    gradient's GEMM. Eagerly (``eager``) every cast is a local of the function, alive until it
    returns: ``2·S·N + S·K + K·N`` elements. Compiled, Inductor frees a buffer after its last
    use, and what must exist is each GEMM's operands: ``S·N + max(K·N, S·K)``. The per-tensor or
    per-row scales (FP32) are left out.

    Examples
    --------
    Llama 3 8B's down projection at tp 1, s 8,192: ``2·8,192·4,096 + 8,192·14,336 +
    14,336·4,096`` = 243,269,632 B eager; ``8,192·4,096 + 8,192·14,336`` = 150,994,944 B
    compiled.

    >>> F = Fraction
    >>> torchao_fp8_casts(F(8192), F(14336), F(4096), F(1), True)
    Fraction(243269632, 1)
    >>> torchao_fp8_casts(F(8192), F(14336), F(4096), F(1), False)
    Fraction(150994944, 1)
    """
    S, K, N = tokens, in_features, out_features
    if eager:
        return element_bytes * (2 * S * N + S * K + K * N)
    return element_bytes * (S * N + max(K * N, S * K))


def fp8_cast_steps(
    ctx: ActivationContext, arch: Architecture, framework: Framework, ffn: int
) -> tuple[tuple[Fraction, Fraction], tuple[Fraction, Fraction]]:
    """((output projection, the largest of Q/K/V), (down projection, up or gate projection)):
    the casts of :func:`torchao_fp8_casts` at each projection step under ``fsdp2`` with FP8
    GEMMs (torchtitan's ``Float8LinearConverter`` swaps the layers' ``nn.Linear`` for torchao's
    ``Float8Linear``; the routed experts' grouped GEMMs stay BF16 unless converted apart), each
    projection's own shapes on this rank under torchtitan's tensor-parallel plan (the
    column-parallel ones ``h → out/tp`` on the gathered tokens, the row-parallel ones
    ``in/tp → h``); else zeros. Q, K, V are separate linear layers (``wq``, ``wk``, ``wv``;
    MLA's low-rank ones taken at the Q projection's shape, an upper bound), as are the gate and
    up projections (``w1``, ``w3``): one's casts at a time."""
    zero = (Fraction(0), Fraction(0))
    if framework is not Framework.FSDP2 or not ctx.fp8_gemms:
        return zero, zero
    S, tp, h = ctx.tokens, ctx.tp, Fraction(arch.hidden_size)
    q, kv, o = (Fraction(x, tp) for x in attention_dims(arch))
    one, eager = ctx.fp8_input_bytes, ctx.eager_elementwise
    attention = (
        torchao_fp8_casts(S, o, h, one, eager),
        torchao_fp8_casts(S, h, max(q, kv / 2), one, eager),
    )
    f = Fraction(ffn, tp)
    mlp = (torchao_fp8_casts(S, f, h, one, eager), torchao_fp8_casts(S, h, f, one, eager))
    return attention, mlp
