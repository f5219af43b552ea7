"""The memory-bound elementwise passes of a layer as the framework runs them: one fused kernel
per pass, or PyTorch's eager kernels, one per operator, with their FP32 upcasts.

:mod:`model.ops` counts each elementwise pass (norm, rotary embedding, MLP activation, residual
add) as one kernel that reads its inputs and writes its output once: what Megatron-Core runs
(Transformer Engine's and Apex's fused norms, ``apply_rotary_pos_emb`` fused, ``bias_swiglu``),
and what Inductor emits under ``torch.compile`` (each block's elementwise chains fused into one
Triton kernel). torchtitan without ``torch.compile`` runs its model code op by op: each PyTorch
operator is a kernel of its own that reads its inputs from HBM and writes its output there, and
autograd saves the operators' inputs and runs one backward kernel (or a few) per operator.

The ``fsdp2`` profile runs torchtitan: its ``compile`` setting (``[training] compile``,
``torchtitan/config_manager.py`` at 9dec370, default false) chooses between the two
(:func:`elementwise_mode`). The other profiles' layers are fused kernels already; ``compile``
is refused there.

What torchtitan's eager code moves (``torchtitan/models/norms.py`` and
``torchtitan/models/llama/model.py`` at 9dec370), per element of the tensor named, β bytes per
16-bit activation element (2), 4 per FP32 element, autograd's formulas from PyTorch's
``tools/autograd/derivatives.yaml`` (``pow_backward`` = grad·(2·x.pow(1)), ``x.pow(1)`` a copy;
``mean.dim`` = grad expanded ÷ h; ``rsqrt`` = −½·grad·result³; ``mul`` = grad × the other
operand, reduced to the broadcast shape; ``_to_copy`` = grad cast back):

* ``RMSNorm`` (``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)`` over ``x.float()``,
  ``.type_as(x)``, ``* weight``) over ``[T_sp, h]``: forward ``x.float()`` β + 4, ``pow`` 8,
  ``mean`` 4, ``+ eps`` and ``rsqrt`` on ``[T, 1]``, ``x·r`` 8, ``type_as`` 4 + β, ``· weight``
  2β: 28 + 4β in 8 kernels | backward ``· weight``: dy·w 2β and dw = Σ dy·y 4β; ``type_as`` back
  β + 4; ``x·r``: dx = g·r 8, dr = Σ g·x 12 + 4; ``mean`` 4 (the expanded ÷ h); ``pow``: copy 8,
  × 2 8, × grad 12; the two gradients of ``x.float()`` summed 12; cast back 4 + β:
  76 + 8β in 16 kernels (three on ``[T, 1]``: ``rsqrt``'s backward).
* rotary embedding (``apply_rotary_emb``: ``view_as_complex(x.float())`` × ``freqs_cis``,
  ``view_as_real``, ``.type_as``) on q and k, ``[T, (a + g)·d/tp]``: forward cast β + 4, complex
  product 8 (the FP32 pair read and written; ``freqs_cis`` is ``[s, d/2]``, a broadcast), cast
  back 4 + β: 16 + 2β in 3 kernels per tensor | backward the same three, 16 + 2β.
* SwiGLU (``F.silu(w1(x)) * w3(x)``) per element of ``[T, f/tp]``: forward ``silu`` 2β, the
  product 3β: 5β in 2 kernels | backward the product's two gradients 3β + 3β (each reads dy
  and the other operand), ``silu_backward`` 3β: 9β in 3 kernels.
* ``repeat_kv`` (GQA, ``n_rep = a/g > 1``): ``unsqueeze(3).expand(…).reshape(…)`` of k and v
  copies each to ``a`` heads, read ``g·d``, write ``a·d`` per token and tensor | backward the
  expand's sum over the repeats, read ``a·d``, write ``g·d``: one kernel each way per tensor.
  Under ``torch.compile`` the copy stays (SDPA is an extern kernel that reads the repeated
  tensors; Inductor writes them); Megatron-Core hands the g K/V heads to the kernel, which
  supports GQA itself.

Per-kernel time: bytes on the part's HBM at the roofline's streaming efficiency plus one
``t_kernel`` per kernel (:func:`model.roofline.memory_seconds`, :attr:`model.ops.Op.forward_kernels`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from trainplan.model.errors import InputError
from trainplan.model.frameworks import Framework

__all__ = [
    "Elementwise",
    "elementwise_mode",
    "check_compile",
    "TORCHTITAN_COMPILE_DEFAULT",
    "Pass",
    "eager_rmsnorm",
    "eager_rope",
    "eager_swiglu",
    "repeat_kv_bytes",
    "megatron_unfused_rope",
    "megatron_glu_clamp",
    "megatron_unfused_bias_add",
]

TORCHTITAN_COMPILE_DEFAULT = False
"""torchtitan's ``[training] compile`` default (``torchtitan/config_manager.py`` at 9dec370:
``--training.compile`` is ``store_true``; ``train_configs/llama3_8b.toml``: ``compile = false``)."""


class Elementwise(StrEnum):
    """How a layer's elementwise passes run (the module docstring)."""

    FUSED = "fused"
    """One kernel per pass: Megatron-Core, Megatron-DeepSpeed, the textbook."""
    COMPILED = "compiled"
    """torchtitan under ``torch.compile``: one Inductor kernel per pass, the GQA K/V repeat
    copied."""
    EAGER = "eager"
    """torchtitan without ``torch.compile``: PyTorch's kernels, one per operator."""


def elementwise_mode(framework: Framework | str, compile: bool | None) -> Elementwise:
    """How the framework runs the elementwise passes under the recipe's ``compile``
    (None: the framework's default, :data:`TORCHTITAN_COMPILE_DEFAULT` under ``fsdp2``); the
    other profiles' layers are fused kernels whatever it says (a search weighing several
    profiles applies it to ``fsdp2`` only; :func:`check_compile` refuses it where no profile
    reads it).

    >>> elementwise_mode("fsdp2", None), elementwise_mode("fsdp2", True)
    (<Elementwise.EAGER: 'eager'>, <Elementwise.COMPILED: 'compiled'>)
    >>> elementwise_mode("megatron", True)
    <Elementwise.FUSED: 'fused'>
    """
    if Framework(framework) is not Framework.FSDP2:
        return Elementwise.FUSED
    on = TORCHTITAN_COMPILE_DEFAULT if compile is None else compile
    return Elementwise.COMPILED if on else Elementwise.EAGER


def check_compile(value: object, frameworks: Iterable[Framework | str]) -> None:
    """Refuse ``compile`` (set: not None) where none of ``frameworks`` (the profiles evaluated
    or searched) is ``fsdp2``.

    Raises
    ------
    InputError
        ``compile`` given without ``fsdp2``.

    Examples
    --------
    >>> check_compile(True, ("megatron", "fsdp2"))
    >>> try:
    ...     check_compile(False, ("megatron",))
    ... except InputError as err:
    ...     print(err)
    compile: false applies to framework fsdp2 (torchtitan's torch.compile); megatron runs fused kernels
    """
    names = [str(Framework(f)) for f in frameworks]
    if value is None or str(Framework.FSDP2) in names:
        return
    raise InputError(
        f"compile: {str(value).lower()} applies to framework fsdp2 (torchtitan's "
        f"torch.compile); {', '.join(names)} {'runs' if len(names) == 1 else 'run'} fused kernels"
    )


@dataclass(frozen=True, slots=True)
class Pass:
    """HBM bytes and kernels of one elementwise pass, forward and backward."""

    forward_bytes: float
    backward_bytes: float
    forward_kernels: int
    backward_kernels: int


def eager_rmsnorm(elements: float, beta: int) -> Pass:
    """torchtitan's eager ``RMSNorm`` over ``elements`` (``T_sp·h``) inputs of ``beta`` bytes
    (the module docstring): (28 + 4β) | (76 + 8β) bytes per element, 8 | 16 kernels.

    >>> eager_rmsnorm(1, 2)
    Pass(forward_bytes=36, backward_bytes=92, forward_kernels=8, backward_kernels=16)
    """
    return Pass((28 + 4 * beta) * elements, (76 + 8 * beta) * elements, 8, 16)


def eager_rope(elements: float, beta: int) -> Pass:
    """torchtitan's eager ``apply_rotary_emb`` over ``elements`` of q and k together:
    (16 + 2β) bytes per element each way, 3 kernels per tensor (6).

    >>> eager_rope(1, 2)
    Pass(forward_bytes=20, backward_bytes=20, forward_kernels=6, backward_kernels=6)
    """
    moved = (16 + 2 * beta) * elements
    return Pass(moved, moved, 6, 6)


def eager_swiglu(elements: float, beta: int) -> Pass:
    """torchtitan's eager ``F.silu(w1(x)) * w3(x)`` per output element: 5β | 9β bytes,
    2 | 3 kernels.

    >>> eager_swiglu(1, 2)
    Pass(forward_bytes=10, backward_bytes=18, forward_kernels=2, backward_kernels=3)
    """
    return Pass(5 * beta * elements, 9 * beta * elements, 2, 3)


def repeat_kv_bytes(tokens: float, heads: float, kv_heads: float, dim: float, beta: int) -> float:
    """Bytes ``repeat_kv`` moves for k and v together, each way: ``2·β·tokens·(g + a)·d``
    (read the g heads, write the a; 0 without GQA, ``a = g``). ``heads`` and ``kv_heads`` per
    tp rank.

    >>> repeat_kv_bytes(1, 32, 8, 128, 2), repeat_kv_bytes(1, 8, 8, 128, 2)
    (20480, 0)
    """
    if heads <= kv_heads:
        return 0
    return 2 * beta * tokens * (heads + kv_heads) * dim


def megatron_unfused_rope(elements: float, beta: int) -> Pass:
    """Megatron-Core's unfused rotary embedding (``_apply_rotary_pos_emb_bshd``,
    ``megatron/core/models/common/embeddings/rope_utils.py`` at 0d8e0714) over ``elements`` of q
    and k together, what a YaRN model runs under Megatron Bridge: ``apply_rotary_pos_emb`` takes
    the unfused path when ``mscale`` (the YaRN concentration factor,
    ``_yarn_get_concentration_factor_from_config``) is not 1, and Bridge's
    ``validate_rope_fusion_compatibility`` (``utils/fusions.py``, v0.2.0) turns
    ``apply_rope_fusion`` off for a ``position_embedding_type`` other than ``rope``.

    Per element of a tensor ``t``, β bytes: forward ``t·cos`` 2β, ``_rotate_half``'s negation of
    one half β and ``cat`` 2β, ``·sin`` 2β, the sum 3β, the final ``cat`` with the empty
    ``t_pass`` 2β: 12β in 6 kernels, plus 6 on the ``[s, d]`` frequencies (``cos``, ``sin``,
    ``· mscale``, ``.to``; their bytes, under 1/heads of ``t``'s, left out). Backward
    (``derivatives.yaml``): ``grad·sin`` 2β, the negation β, ``split``'s ``cat`` of the halves'
    gradients 2β, ``grad·cos`` 2β, ``t_pass``'s ``slice_backward`` zeros β, and two additions of
    the three gradients of ``t`` 6β: 14β in 7 kernels. Per tensor, q and k each.

    >>> megatron_unfused_rope(1, 2)
    Pass(forward_bytes=24, backward_bytes=28, forward_kernels=24, backward_kernels=14)
    """
    return Pass(12 * beta * elements, 14 * beta * elements, 24, 14)


def megatron_glu_clamp(elements: float, beta: int) -> Pass:
    """The clamp Megatron-Core applies before a gated activation with
    ``activation_func_clamp_value`` (gpt-oss's ``swiglu_limit``; Megatron Bridge's
    ``GPTOSSProvider``: 7.0), per element of the activation's output ``[rows, f]``:
    ``weighted_bias_quick_geglu_impl`` (``megatron/core/fusions/fused_bias_geglu.py`` at
    0d8e0714) clamps the gate and the linear half in eager PyTorch and concatenates them before
    the compiled activation. Forward: two ``clamp`` 2β each, ``cat`` 4β: 8β in 3 kernels.
    Backward (``clamp_backward``, ``torch/csrc/autograd/FunctionsManual.cpp``): the gate's
    ``where(self <= max, grad, 0)`` (``le`` β + 1, ``where`` 2β + 1, a scalar fill), the linear
    half's ``where((self >= min).logical_and_(self <= max), grad, 0)`` (``ge`` and ``le`` β + 1
    each, ``logical_and_`` 3, ``where`` 2β + 1, a scalar fill), and ``chunk``'s
    ``split_backward`` ``cat`` 4β: 11β + 8 bytes in 9 kernels.

    >>> megatron_glu_clamp(1, 2)
    Pass(forward_bytes=16, backward_bytes=30, forward_kernels=3, backward_kernels=9)
    """
    return Pass(8 * beta * elements, (11 * beta + 8) * elements, 3, 9)


def megatron_unfused_bias_add(elements: float, beta: int) -> Pass:
    """What Megatron-Core's unfused bias-dropout-add (``_bias_dropout_add_func``,
    ``megatron/core/fusions/fused_bias_dropout.py`` at 0d8e0714) adds to the residual add when
    the attention's output projection has a bias (``skip_bias_add=True``) and
    ``bias_dropout_fusion`` is off, per element of ``[T_sp, h]``: forward ``x + bias`` 2β (a
    dropout of probability 0 returns its input), backward the bias gradient's sum over tokens β;
    one kernel each. Megatron-Core's ``TEGroupedMLP`` refuses ``bias_dropout_fusion`` with
    ``add_bias_linear`` (``moe/experts.py``), so a MoE model with biases (gpt-oss) runs it.

    >>> megatron_unfused_bias_add(1, 2)
    Pass(forward_bytes=4, backward_bytes=2, forward_kernels=1, backward_kernels=1)
    """
    return Pass(2 * beta * elements, beta * elements, 1, 1)
