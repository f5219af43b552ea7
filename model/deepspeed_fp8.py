"""DeepSpeed's FP8: the one stack that runs it under the ``deepspeed`` profile, and the layouts
that stack cannot run (:func:`check_deepspeed_fp8`, the legality rule ``deepspeed_fp8``). What
its layer holds in backward: :mod:`model.deepspeed_backward`.

DeepSpeed edaa72212 has no FP8 path of its own (nothing under ``deepspeed/`` reads Transformer
Engine; ``moe/experts.py`` ``Experts.forward`` loops over the user's expert module). The
profile's tensor, pipeline and sequence parallelism are Megatron-DeepSpeed's, which trains FP8
only through Transformer Engine's ``TransformerLayer`` (deepspeedai/Megatron-DeepSpeed 4efb479d):

* ``megatron/arguments.py`` ``validate_args``: ``--fp8-e4m3`` / ``--fp8-hybrid`` need
  ``--transformer-impl transformer_engine``;
* ``megatron/model/transformer.py`` ``ParallelTransformer.__init__`` scales with
  ``DelayedScaling`` only, at every tp (microsoft/Megatron-DeepSpeed f4157bea: it builds
  ``transformer_engine.common.recipe.DelayedScaling(margin, interval, fp8_format,
  amax_history_len, amax_compute_algo, override_linear_precision)`` whenever ``--fp8-e4m3`` or
  ``--fp8-hybrid`` is set, reading no parallel size, and ``ParallelTransformer.forward`` passes
  it as ``fp8_autocast(fp8_recipe=self.fp8_recipe)``; its arguments offer no other recipe), so
  under ``deepspeed`` FP8 is delayed scaling at every tp (HF Accelerate's
  ``apply_fp8_autowrap``, which can build ``MXFP8BlockScaling``, swaps ``nn.Linear`` modules
  for Transformer Engine's ``Linear``: not the ``TransformerLayer`` whose ``LayerNormMLP`` this
  profile's memory counts, :mod:`model.deepspeed_backward`); ``build_layer`` asserts ``num_attention_heads ==
  num_key_value_heads`` ("Transformer_engine does not support GQA"), builds the layer with
  Transformer Engine's defaults (LayerNorm, a GELU MLP) and ignores the expert count ``n_e``;
* ``megatron/training.py`` ``get_model`` asserts every model chunk is a ``GPTModel`` with that
  layer ("Transformer Engine is only approved for GPT models"), and ``pretrain_gpt.py``
  ``model_provider`` builds ``GPTModel`` under DeepSpeed only with ``--no-pipeline-parallel``
  (``GPTModelPipe``, the pipeline engine's model, otherwise), which ``parse_args`` allows with
  ``pipeline_model_parallel_size == 1`` only;
* DeepSpeed-Ulysses (``DistributedAttention``), the profile's only context parallelism, is
  wired into Megatron-DeepSpeed's own ``ParallelAttention.__init__`` only
  (``enable_ds_sequence_parallel``); ``build_layer``'s Transformer Engine branch passes no
  sequence-parallel group, so that layer would attend within each rank's chunk.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.precision import Precision

__all__ = ["check_deepspeed_fp8"]


def _te_layer_gaps(arch: Any) -> list[str]:
    """What Megatron-DeepSpeed's Transformer Engine layer does not run of ``arch`` at tp > 1
    (module docstring: no GQA, LayerNorm and GELU only)."""
    why = []
    if arch is not None:
        if arch.num_kv_heads not in (None, arch.num_attention_heads):
            why.append("does not run GQA")
        if str(arch.norm) != "layernorm" or str(arch.mlp) != "gelu":
            why.append("builds LayerNorm and a GELU MLP only")
    return why


def check_deepspeed_fp8(
    framework: str, precision: Precision, recipe: Any, arch: Any, tp: int, pp: int = 1, cp: int = 1
) -> None:
    """Refuse FP8 under ``deepspeed`` where its one FP8 path cannot run the layout (module
    docstring). ``arch`` None (a size-only model): the recipe, cp and pp only.

    Raises
    ------
    LayoutError
        fp8 under deepspeed with routed experts; at cp or pp > 1; or at tp > 1 with GQA,
        RMSNorm or a gated MLP. A recipe other than delayed is refused at every tp by the
        framework's recipe rule, :func:`model.precision.check_framework_fp8_recipe`.

    >>> check_deepspeed_fp8("deepspeed", Precision.FP8, None, None, 2)
    >>> check_deepspeed_fp8("megatron", Precision.FP8, "mxfp8", None, 2, 4)
    >>> try:
    ...     check_deepspeed_fp8("deepspeed", Precision.FP8, None, None, 1, 2)
    ... except LayoutError as err:
    ...     print(str(err).split(":")[1])
     fp8 with `framework` deepspeed at pp 2
    """
    if str(framework) != Framework.DEEPSPEED or precision is not Precision.FP8:
        return
    if arch is not None and getattr(arch, "moe", None) is not None:
        raise LayoutError(
            "precision: fp8 with `framework` deepspeed on a model with routed experts: DeepSpeed "
            "has no FP8 path and Megatron-DeepSpeed's TE layer builds no MoE (use megatron or bf16)"
        )
    if cp > 1:
        raise LayoutError(
            f"precision: fp8 with `framework` deepspeed at cp {cp}: DeepSpeed's sequence "
            "parallelism (Ulysses) runs in Megatron-DeepSpeed's own attention only, not in the "
            "Transformer Engine layer it trains FP8 with (use `framework` megatron, `cp` 1 or "
            "`precision` bf16)"
        )
    if pp > 1:
        raise LayoutError(
            f"precision: fp8 with `framework` deepspeed at pp {pp}: Megatron-DeepSpeed runs "
            "Transformer Engine, its only FP8 path, in GPTModel only, which DeepSpeed builds "
            "with --no-pipeline-parallel, pp 1 (use `framework` megatron, `pp` 1 or `precision` bf16)"
        )
    why = _te_layer_gaps(arch) if tp > 1 else []
    if why:
        raise LayoutError(
            f"precision: fp8 with `framework` deepspeed at tp {tp} runs Megatron-DeepSpeed's "
            f"Transformer Engine layer, which {' and '.join(why)} (use `framework` megatron)"
        )
