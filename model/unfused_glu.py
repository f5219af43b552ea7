"""Megatron-Core's unfused gated activation: what a GeGLU MLP keeps and moves under ``megatron``.

Megatron-Core fuses a gated activation only where ``bias_activation_fusion`` is on, and
``TransformerConfig.__post_init__`` (Megatron-LM d98e8a64dd
``megatron/core/transformer/transformer_config.py``) refuses that flag for any activation but
``F.gelu``, ``F.silu`` and ``quick_gelu`` ("When bias_activation_fusion is True, activation
function should be either gelu, swiglu, or quick_geglu"); the flag defaults to False. Megatron
Bridge 067f987d builds every Gemma with GELU's tanh form and never sets the flag:
``gemma_provider.py`` ``GemmaModelProvider``, ``gemma2_provider.py``, ``gemma3_provider.py``
``Gemma3ModelProvider`` (``activation_func = fast_gelu  # identical to openai_gelu``,
``gated_linear_unit = True``), and ``gemma_bridge.py`` / ``gemma2_bridge.py`` set
``provider.activation_func = fast_gelu`` on import; ``use_te_activation_func`` stays False. So a
GeGLU MLP (:attr:`model.specs.Mlp.GEGLU`, Gemma's ``gelu_pytorch_tanh``) runs the unfused branch
of ``megatron/core/transformer/mlp.py`` ``MLP.forward`` (the shared experts' ``SharedExpertMLP``
too, an ``MLP``)::

    x_glu, x_linear = torch.chunk(x, 2, dim=-1)
    return self.config.activation_func(x_glu) * (x_linear + self.config.glu_linear_offset)

``fast_gelu`` (``megatron/core/activations.py``) is ``@jit_fuser``, ``torch.compile`` from torch
2.2 on (``megatron/core/jit.py`` ``enable_jit_fuser``), a graph of its own: it saves its input
``x_glu``, a view that keeps FC1's whole ``[S, 2f/tp]`` output (the paper's row). The rest runs
eagerly: ``x_linear + glu_linear_offset`` (0.0 by default) writes a new ``[S, f/tp]``, and the
product's ``MulBackward0`` saves both operands, GELU's output and that sum; FC2 saves the
product (the paper's row). Two ``β·S·f/tp`` rows more than the fused count
(:func:`unfused_glu_rows`), *tp*. The routed experts' ``TEGroupedMLP.forward``
(``moe/experts.py`` ``bias_act_func``, the same ``glu``) then multiplies by ``permuted_probs``
(FP32 ``[R, 1]``, which needs a gradient), which keeps the glu product too, then casts back
(``.to(original_dtype)``, which keeps nothing): three ``β·R·f_e`` rows (the FP32 weights are the
"routing weights in the expert activation" row already).

Measured on the CPU with torch 2.13 (``tests/model/test_unfused_glu.py``'s docstring): 5·[S, f]
saved against the fused 3·[S, f]; 6·[R, f] with the probabilities' product.

Recomputation: the module ``mlp`` checkpoints the dense MLP whole and ``moe_act`` runs
``bias_act_func`` without autograd (``CheckpointWithoutOutput``), so both drop these rows
(:mod:`model.recompute_modules`); the ``moe_act`` offload takes the experts' ones
(:mod:`model.activation_offload`).

Time (:func:`unfused_glu_pass`): the activation as three kernels, not ``bias_swiglu``'s one."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.elementwise import Pass

__all__ = ["PROBS_PRODUCT", "UNFUSED_GLU_ROWS", "unfused_glu_rows", "unfused_glu_pass"]

UNFUSED_GLU_ROWS = ("GELU output (unfused glu)", "up + glu_linear_offset (unfused glu)")
"""The rows' names after the MLP's prefix ("MLP", "shared expert", "routed expert")."""

PROBS_PRODUCT = "glu output (unfused glu, kept by the probabilities' product)"
"""The routed experts' third row's name after the prefix."""


def unfused_glu_rows(
    prefix: str, tokens: Fraction, ffn: int, beta: int, routed: bool = False
) -> list[tuple[str, Fraction, str]]:
    """The rows the unfused glu keeps beyond the fused count (the module docstring), in bytes
    before sharding: GELU's output and ``up + glu_linear_offset``, ``β·tokens·ffn`` each; the
    routed experts (``routed``) the product the probabilities' multiply keeps as well.

    >>> [(n, int(b)) for n, b, _ in unfused_glu_rows("MLP", Fraction(4), 8, 2)]
    [('MLP GELU output (unfused glu)', 64), ('MLP up + glu_linear_offset (unfused glu)', 64)]
    >>> len(unfused_glu_rows("routed expert", Fraction(4), 8, 2, routed=True))
    3
    """
    names = UNFUSED_GLU_ROWS + ((PROBS_PRODUCT,) if routed else ())
    return [(f"{prefix} {name}", beta * tokens * ffn, "tp") for name in names]


def unfused_glu_pass(elements: float, beta: int) -> Pass:
    """The unfused glu's passes per element of its output ``[T, f/tp]``, β bytes, replacing the
    fused activation's one kernel (3β | 5β). Forward: the compiled ``fast_gelu`` reads ``x_glu``
    and writes its output (2β, one Inductor kernel), ``x_linear + 0.0`` 2β, the product 3β:
    7β in 3 kernels. Backward (PyTorch ``derivatives.yaml``; the add passes its gradient on):
    the product's two gradients 3β each, the compiled GELU's backward reads the gradient and
    ``x_glu`` and writes one (3β), ``chunk``'s ``split_backward`` concatenates the two halves'
    gradients (``cat`` 4β): 13β in 4 kernels. As torchtitan's eager SwiGLU
    (:func:`model.elementwise.eager_swiglu`, 5β | 9β) with the add and the ``cat``.

    >>> unfused_glu_pass(1, 2)
    Pass(forward_bytes=14, backward_bytes=26, forward_kernels=3, backward_kernels=4)
    """
    return Pass(7 * beta * elements, 13 * beta * elements, 3, 4)
