"""Megatron-Core's dense linear layers that save their BF16 input instead of an FP8 copy under
FP8, so that Transformer Engine quantises that input a second time for the weight gradient, and
what the second quantisation costs beyond the one a layer that keeps an FP8 copy pays (the routed
experts' own rule: :mod:`model.expert_saved_inputs`).

Read at Megatron-LM d98e8a64dd (Transformer Engine ≥ 2.6, ``set_save_original_input``):

* the attention's output projection under every FP8 recipe but ``delayed``
  (``megatron/core/transformer/attention.py`` ``Attention.__init__``,
  ``multi_latent_attention.py`` ``MultiLatentAttention.__init__``: "the output of the fused
  core_attn is saved by itself");
* the shared experts' FC1 under the same recipes unless selective recomputation re-runs
  ``shared_experts`` (``moe/shared_experts.py`` ``SharedExpertMLP.__init__``: the pre-MLP
  norm's output is saved by the router);
* MLA's two down-projections under selective recomputation of ``layernorm``
  (``transformer_layer.py`` ``TransformerLayer.__init__`` →
  ``self_attention.set_for_recompute_input_layernorm()`` under FP8).

What the second quantisation costs (Transformer Engine v2.9): with ``save_original_input`` the
forward quantises the input row-wise only (``module/linear.py`` ``_Linear.forward``,
``module/grouped_linear.py`` ``_GroupedLinear.forward``: ``columnwise = … and not
save_original_input``); the weight gradient quantises the saved BF16 input again, column-wise
only in ``_Linear.backward`` (``set_usage(rowwise=False, columnwise=True)``) and in
``_GroupedLinear.backward`` under MXFP8 and block scaling, row- and column-wise under delayed
and current scaling (``Float8Quantizer``, ``Float8CurrentScalingQuantizer``). A layer that
keeps an FP8 copy quantises once, both ways. Counted in HBM bytes per element of a 16-bit input
(:func:`cast_bytes`), the share of one both-ways quantisation the second costs is
:func:`requantise_share`.
"""

from __future__ import annotations

from collections.abc import Collection
from fractions import Fraction

from trainplan.model.frameworks import Framework
from trainplan.model.precision import Fp8Recipe, Precision, fp8_recipe_of
from trainplan.model.specs import Architecture, AttentionKind, TrainingSpec

__all__ = [
    "proj_saves_original",
    "shared_fc1_saves_original",
    "mla_down_saves_original",
    "requantised_linears",
    "cast_bytes",
    "requantise_share",
]


def proj_saves_original(training: TrainingSpec, framework: Framework | str) -> bool:
    """Whether the attention's output projection saves its BF16 input (module docstring):
    ``megatron`` under FP8 with a recipe other than ``delayed``
    (:func:`model.precision.fp8_recipe_of`). The condition of the shared experts' FC1 and MLA's
    down-projections too (:func:`requantised_linears`; the activation memory's
    :attr:`model.activations.ActivationContext.fp8_proj_saves_original`).

    >>> t = TrainingSpec(seq_len=4, global_batch_size=1, precision="fp8", fp8_recipe="tensorwise")
    >>> proj_saves_original(t, "megatron"), proj_saves_original(t, "fsdp2")
    (True, False)
    """
    if training.precision is not Precision.FP8 or str(framework) != Framework.MEGATRON:
        return False
    return fp8_recipe_of(str(framework), training.fp8_recipe) is not Fp8Recipe.DELAYED


def shared_fc1_saves_original(proj: bool, recomputed: Collection[str]) -> bool:
    """Whether the shared experts' FC1 saves its BF16 input: under :func:`proj_saves_original`'s
    condition ``proj`` unless the recomputed modules ``recomputed`` hold ``shared_experts``
    (module docstring).

    >>> shared_fc1_saves_original(True, ("core_attn",)), shared_fc1_saves_original(True, ("shared_experts",))
    (True, False)
    """
    return proj and "shared_experts" not in recomputed


def mla_down_saves_original(proj: bool, recomputed: Collection[str]) -> bool:
    """Whether MLA's two down-projections save their BF16 input: under ``proj`` where the
    recomputed modules ``recomputed`` hold ``layernorm`` (module docstring).

    >>> mla_down_saves_original(True, ("layernorm",)), mla_down_saves_original(False, ("layernorm",))
    (True, False)
    """
    return proj and "layernorm" in recomputed


def requantised_linears(
    arch: Architecture, training: TrainingSpec, framework: Framework | str, plan: tuple[str, ...]
) -> frozenset[str]:
    """Names (:func:`model.ops.layer_ops`') of the dense linear layers that save their BF16 input
    and quantise it again for the weight gradient under the selective recomputation ``plan``
    (:func:`model.recompute_ops.layout_plan`, empty unless ``recompute = selective``): the
    output projection, the shared experts' FC1 unless ``plan`` re-runs ``shared_experts``,
    MLA's down-projections where ``plan`` re-runs ``layernorm``; none outside
    :func:`proj_saves_original`.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1, precision="fp8", fp8_recipe="mxfp8")
    >>> sorted(requantised_linears(get_model("deepseek-v3").model.arch, t, "megatron", ("layernorm",)))
    ['KV down-projection', 'Q down-projection', 'output projection', 'shared experts gate+up projection']
    >>> sorted(requantised_linears(get_model("llama3-8b").model.arch, t, "megatron", ()))
    ['output projection']
    """
    if not proj_saves_original(training, framework):
        return frozenset()
    names = {"output projection"}
    shared = arch.moe is not None and arch.moe.num_shared_experts > 0
    if shared and shared_fc1_saves_original(True, plan):
        names.add("shared experts " + ("gate+up projection" if arch.mlp.gated else "FC1"))
    if arch.attention is AttentionKind.MLA and mla_down_saves_original(True, plan):
        names |= {"Q down-projection", "KV down-projection"}
    return frozenset(names)


def cast_bytes(recipe: Fp8Recipe | str, directions: int) -> int:
    """HBM bytes per element of one Transformer Engine quantisation of a 16-bit tensor that
    writes ``directions`` (1 or 2: row-wise, column-wise) 1-byte FP8 copies: the read (2 B),
    each copy (1 B), and under current scaling (``tensorwise``) the amax kernel's read of the
    input first (2 B; ``common/recipe/current_scaling.cu`` ``launch_amax_kernel`` before the
    cast). Scales (MXFP8's 1 B a 32-element block) left out.

    >>> cast_bytes("tensorwise", 2), cast_bytes("tensorwise", 1), cast_bytes("mxfp8", 2)
    (6, 5, 4)
    """
    amax = 2 if Fp8Recipe(str(recipe)) is Fp8Recipe.TENSORWISE else 0
    return amax + 2 + directions


def requantise_share(recipe: Fp8Recipe | str, grouped: bool) -> Fraction:
    """The second quantisation of a saved BF16 input as a share of one both-ways quantisation
    (module docstring, :func:`cast_bytes`): the forward's row-wise cast plus the weight
    gradient's (column-wise; both ways for a ``grouped`` linear under delayed or current
    scaling) less the both-ways cast a layer keeping an FP8 copy makes.

    >>> [str(requantise_share(r, False)) for r in ("tensorwise", "mxfp8", "blockwise")]
    ['2/3', '1/2', '1/2']
    >>> [str(requantise_share(r, True)) for r in ("tensorwise", "mxfp8")]
    ['5/6', '1/2']
    """
    r = Fp8Recipe(str(recipe))
    both, one = cast_bytes(r, 2), cast_bytes(r, 1)
    backward = both if grouped and r in (Fp8Recipe.DELAYED, Fp8Recipe.TENSORWISE) else one
    return Fraction(one + backward - both, both)
