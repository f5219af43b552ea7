"""The FP8 casts torchao's ``Float8Linear`` holds in its backward under ``fsdp2``
(:func:`model.backward_working.torchao_fp8_casts`), derived by hand from
``matmul_with_hp_or_float8_args.backward`` (``torchao/float8/float8_linear.py``): ``grad_output``
cast along dim 0 and the weight for the input gradient, ``grad_output`` along dim 1 and the
saved input for the weight gradient, all locals until the function returns (eager)."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.backward_working import backward_working_bytes
from trainplan.model.context_parallel import CpKind
from trainplan.model.frameworks import Framework
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.activation_fields import activation_context
from trainplan.model.torchao_backward import fp8_cast_steps, torchao_fp8_casts
from trainplan.scenarios.catalogue import get_model

LLAMA_8B = get_model("llama3-8b").model.arch  # h 4,096, f 14,336, 32 heads, 8 KV heads
S, H, F = 8192, 4096, 14336


def _w(precision: str, framework: str = "fsdp2", compile: bool = False, tp: int = 1) -> int:
    t = TrainingSpec(seq_len=S, global_batch_size=64, precision=precision, compile=compile)
    ctx = activation_context(t, 1, 1, tp, tp > 1, CpKind.RING, framework=framework)
    return int(backward_working_bytes(LLAMA_8B, False, ctx, framework, "cudnn"))


def test_one_linear_by_hand():
    # the down projection [S, f] -> [S, h]: 2·S·N + S·K + K·N eager, S·N + max(K·N, S·K) compiled
    eager = 2 * S * H + S * F + F * H
    assert eager == 243_269_632
    assert torchao_fp8_casts(Fraction(S), Fraction(F), Fraction(H), Fraction(1), True) == eager
    compiled = S * H + max(F * H, S * F)
    assert compiled == 150_994_944
    assert torchao_fp8_casts(Fraction(S), Fraction(F), Fraction(H), Fraction(1), False) == compiled


def test_llama3_8b_tp1_backward_working_set():
    """Llama 3 8B, s 8,192, b 1, tp 1, torchtitan (fsdp2), eager. In BF16 the largest step is
    the SwiGLU's backward: n (2·S·h = 67,108,864) + the down projection's dgrad f
    (2·S·f = 234,881,024) + the SwiGLU's input gradient 2f, less the down projection's input
    (f), released = n + 2f = 536,870,912 B. Under FP8 the down projection's step,
    n + f = 301,989,888 B, holds its four casts too, 243,269,632 B: 545,259,520 B, now the
    largest (+8,388,608 B). The up and gate projections' casts (2·S·f + S·h + h·f =
    327,155,712 B each) fall on a step that has released the MLP's saved inputs: not the
    largest."""
    n, f = 2 * S * H, 2 * S * F
    assert _w("bf16") == n + 2 * f == 536_870_912
    assert _w("fp8") == n + f + 243_269_632 == 545_259_520
    # compiled: the down projection's operands only, 301,989,888 + 150,994,944 = 452,984,832,
    # below the SwiGLU step
    assert _w("fp8", compile=True) == 536_870_912


def test_only_torchao():
    """Transformer Engine's FP8 (megatron) saves FP8 inputs, as the activations count them, and
    BF16 runs no cast: no torchao casts there."""
    zero = ((0, 0), (0, 0))
    for framework, precision in (("megatron", "fp8"), ("fsdp2", "bf16")):
        t = TrainingSpec(seq_len=S, global_batch_size=64, precision=precision)
        ctx = activation_context(t, 1, 1, 1, False, CpKind.RING, framework=framework)
        assert fp8_cast_steps(ctx, LLAMA_8B, Framework(framework), F) == zero
