"""Which of the routed experts' two linear layers save their BF16 input instead of an FP8 copy
under Megatron-Core, so that Transformer Engine quantises that input a second time in the
backward: read by the activation memory (:mod:`model.terms.activation_fields`) and by the
host's expert calls (:mod:`model.host_calls`) and the step time (the weight-gradient pass of
each such linear quantises its input again, :func:`model.grouped_gemm.expert_cast_seconds`),
both through :func:`requantised_inputs`.

Megatron-LM d98e8a64dd ``megatron/core/transformer/moe/experts.py`` ``TEGroupedMLP.__init__``
calls ``set_save_original_input`` on ``linear_fc1`` with the ``expert_fc1`` activation offload
when the recipe is not MXFP8 ("to avoid the CPU overhead of multiple d2h copies", l. 278–284),
and on ``linear_fc2`` under selective recomputation of ``moe_act`` with FP8 (l. 269–276).
Transformer Engine 2.9 ``pytorch/module/grouped_linear.py`` ``_GroupedLinear.forward`` then
saves the input as given and ``_GroupedLinear.backward`` quantises it again for the weight
gradient (``tex.split_quantize(inp_view, ctx.m_splits, ctx.input_quantizers)`` under
``ctx.save_original_input``).
"""

from __future__ import annotations

from trainplan.model.frameworks import Framework
from trainplan.model.precision import Fp8Recipe, Precision, fp8_recipe_of
from trainplan.model.specs import TrainingSpec

__all__ = ["expert_fc1_saves_original", "expert_fc2_saves_original", "requantised_inputs"]


def expert_fc1_saves_original(training: TrainingSpec, framework: Framework | str) -> bool:
    """Whether the routed experts' FC1 saves its BF16 input (module docstring): ``megatron``
    under FP8 with ``expert_fc1`` in ``training.offload.activations`` and a recipe other than
    MXFP8 (:func:`model.precision.fp8_recipe_of`).

    >>> from dataclasses import replace
    >>> from trainplan.model.offload import Offload
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1, precision="fp8", fp8_recipe="tensorwise",
    ...                  offload=Offload(activations=("expert_fc1",)))
    >>> expert_fc1_saves_original(t, "megatron"), expert_fc1_saves_original(t, "fsdp2")
    (True, False)
    >>> expert_fc1_saves_original(replace(t, fp8_recipe="mxfp8"), "megatron")
    False
    """
    if training.precision is not Precision.FP8 or str(framework) != Framework.MEGATRON:
        return False
    recipe = fp8_recipe_of(str(framework), training.fp8_recipe)
    return recipe is not Fp8Recipe.MXFP8 and "expert_fc1" in training.offload.activations


def expert_fc2_saves_original(
    training: TrainingSpec, framework: Framework | str, plan: tuple[str, ...]
) -> bool:
    """Whether the routed experts' FC2 saves its BF16 input (module docstring): ``megatron``
    under FP8 where the selective recomputation ``plan`` (:func:`model.recompute_ops.
    layout_plan`, empty unless ``recompute = selective``) re-runs ``moe_act``.

    >>> t = TrainingSpec(seq_len=4, global_batch_size=1, precision="fp8", fp8_recipe="tensorwise")
    >>> expert_fc2_saves_original(t, "megatron", ("moe_act",))
    True
    >>> expert_fc2_saves_original(t, "megatron", ("core_attn",))
    False
    """
    fp8 = training.precision is Precision.FP8
    return fp8 and str(framework) == Framework.MEGATRON and "moe_act" in plan


def requantised_inputs(
    training: TrainingSpec, framework: Framework | str, plan: tuple[str, ...]
) -> tuple[bool, bool]:
    """(FC1, FC2): whether each of the routed experts' linears saves its BF16 input and
    quantises it again for its weight gradient (:func:`expert_fc1_saves_original`,
    :func:`expert_fc2_saves_original` of the selective ``plan``). The one rule the step time
    (:attr:`model.grouped_gemm.GroupedFp8.requantised`) and the host's call count
    (:func:`model.host_calls.saved_originals`) read.

    >>> t = TrainingSpec(seq_len=4, global_batch_size=1, precision="fp8", fp8_recipe="tensorwise")
    >>> requantised_inputs(t, "megatron", ("moe_act",)), requantised_inputs(t, "megatron", ())
    ((False, True), (False, False))
    """
    fc1 = expert_fc1_saves_original(training, framework)
    return fc1, expert_fc2_saves_original(training, framework, plan)
