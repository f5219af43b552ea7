"""Megatron-Core's per-module selective recomputation (``--recompute-granularity selective
--recompute-modules M …``): which tensors of a layer each module stops keeping.

``TransformerConfig.recompute_modules`` (``megatron/core/transformer/transformer_config.py``;
default ``["core_attn"]``) names the parts of a layer recomputed in backward. Two mechanisms:

* *output-discarding* checkpoints (``tensor_parallel.CheckpointWithoutOutput``): the module's
  output is freed once its consumer has run (``discard_output_and_register_recompute``) and
  recomputed before the consumer's backward — ``layernorm``, ``mla_up_proj``, ``moe_act``;
* ordinary checkpoints: the module keeps only its input — ``core_attn``, ``mlp``, ``moe``,
  ``shared_experts``.

Per module (:data:`RECOMPUTE_MODULES`), the rows of :mod:`model.activations` it drops (their
FP8 variants too):

* ``core_attn``: the attention core's score tensors (Korthikanti et al. 2022 §5; the
  ``score_names`` of :class:`model.activations.LayerActivations`).
* ``layernorm``: where the norm is a module of its own (``TransformerLayer.__init__``:
  ``recompute_input_layernorm`` / ``recompute_pre_mlp_layernorm`` only when the norm is not an
  ``IdentityOp``; :func:`model.activation_offload.norm_modules`: MLA's input norm, a MoE layer's
  pre-MLP norm), the norm's output that the next layer keeps: MLA's "attention projection
  input", a MoE layer's "router and dispatch input" and its shared experts' FC1 input. Under FP8
  the following linear then saves the original input (``set_for_recompute_input_layernorm``,
  ``set_save_original_input``; ``MoELayer.set_for_recompute_pre_mlp_layernorm`` sets it on the
  shared experts' ``linear_fc1``, ``megatron/core/transformer/moe/moe_layer.py``), which is the
  same discarded tensor, so its FP8 copy goes too. Under the ``textbook`` profile every norm is
  a module of its own (``every_norm``: a paper's "all RMSNorm operations", DeepSeek-V3 §3.2.3:
  "We recompute all RMSNorm operations and MLA up-projections during back-propagation, thereby
  eliminating the need to persistently store their output activations"): a dense layer's
  pre-MLP norm output (the FC1 input), a non-MLA layer's QKV input and MLA's latent norm
  outputs go as well.
* ``mla_up_proj``: MLA's Q, K and V, the up-projections' outputs with RoPE applied, and the
  latents' norm outputs, the up-projections' inputs (``MultiLatentAttention``:
  ``qkv_up_checkpoint`` around ``qkv_up_proj_and_rope_apply``, freed after the attention core;
  the checkpoint keeps its inputs, the latents ``q_compressed`` and ``kv_compressed``, and
  Megatron-Core's Transformer Engine spec fuses ``q_layernorm`` / ``kv_layernorm`` into
  ``linear_q_up_proj`` / ``linear_kv_up_proj``, ``TELayerNormColumnParallelLinear`` in
  ``megatron/core/models/gpt/gpt_layer_specs.py``, so the norms run inside the checkpoint).
* ``moe_act``: the routed experts' activation output, the down projection's input
  (``TEGroupedMLP``: ``activation_recompute``), and a clamped activation's concatenated copy
  of its input (:data:`model.activation_rows.CLAMPED_GLU_COPY`; the checkpoint runs the
  activation without autograd and keeps FC1's output, its input), and what the unfused glu
  keeps (:mod:`model.unfused_glu`).
* ``mlp``: a dense layer's MLP checkpointed whole (``recompute_mlp``, dense layers only): its
  FC1 input, the activation's input and the down projection's input, and what the unfused glu
  keeps.
* ``moe``: the MoE layer checkpointed whole (``MoELayer``: ``moe_layer_recompute``): every row
  after its input (the router input is the checkpoint).
* ``shared_experts``: the shared experts' rows.

The rules Megatron-Core enforces (``TransformerConfig.__post_init__``) are
:func:`check_recompute_modules`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainplan.model.activation_offload import norm_modules
from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.precision import Fp8Recipe, Precision, fp8_recipe_of
from trainplan.model.unfused_glu import PROBS_PRODUCT, UNFUSED_GLU_ROWS

__all__ = [
    "RECOMPUTE_MODULES",
    "DEFAULT_RECOMPUTE_MODULES",
    "parse_recompute_modules",
    "recomputed_rows",
    "check_recompute_modules",
    "profile_recompute_modules",
]

RECOMPUTE_MODULES = (
    "core_attn",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe_act",
    "moe",
    "shared_experts",
)
"""Megatron-Core's ``--recompute-modules`` choices that a transformer layer of trainplan's
architectures has (``gdn_*``, ``gdp_*`` and ``mhc`` belong to layers it does not model)."""

DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
"""``recompute_modules``' default: the attention core (Korthikanti's selective recomputation)."""

_MLP_ROWS = ("FC1 input", "MLP SwiGLU input", "MLP GeGLU input", "MLP GeLU input",
             "MLP down projection input", "MLP FC2 input", "MLP SiLU output", "MLP GELU output",
             f"MLP {UNFUSED_GLU_ROWS[1]}")  # fmt: skip
_MOE_ACT_ROWS = ("routed expert down projection input", "routed expert clamped GLU input",
                 *(f"routed expert {n}" for n in (*UNFUSED_GLU_ROWS, PROBS_PRODUCT)))  # fmt: skip
_MOE_ROWS = ("router", "routed expert", "routing weights", "token permutation", "shared expert")


def profile_recompute_modules(
    framework: str,
    modules: tuple[str, ...],
    flash_attention: bool,
    cp: int = 1,
    transformer_engine: bool = False,
) -> tuple[str, ...]:
    """The modules a framework profile's selective recomputation really re-runs, of the
    ``modules`` asked for (:attr:`model.specs.TrainingSpec.recompute_modules`).

    Under ``deepspeed`` (Megatron-DeepSpeed) selective recomputation is the core attention's
    checkpoint only. With its own layers (``transformer_impl = local``) the code sets it only
    where the layer runs neither flash attention nor DeepSpeed's sequence parallelism:
    ``megatron/model/transformer.py`` ``ParallelAttention.__init__`` (deepspeedai/Megatron-
    DeepSpeed 4efb479d) sets ``checkpoint_core_attention = recompute_granularity ==
    'selective'`` in the branch without ``DistributedAttention`` (``cp`` > 1 here) and without
    ``use_flash_attn``; with either, ``forward`` calls the attention directly and keeps what it
    saves, so there it recomputes nothing (``()``). With Transformer Engine's layer
    (``transformer_engine``: ``transformer_impl = transformer_engine``, what the profile runs
    under ``precision = fp8``, its only FP8 path, :func:`model.deepspeed_fp8.check_deepspeed_fp8`)
    ``ParallelTransformer.__init__`` sets ``checkpoint_core_attention`` from the granularity
    alone and ``forward`` passes it to every ``TransformerLayer`` (its
    ``checkpoint_core_attention`` argument: Transformer Engine's ``DotProductAttention``
    re-runs the core, flash or not, in backward), so the core is recomputed as under
    ``megatron``. Every other profile runs the modules asked for (``fsdp2``'s op-level policy is
    read apart, :func:`model.recompute_ops.recompute_plan`).

    >>> profile_recompute_modules("deepspeed", ("core_attn",), True)
    ()
    >>> profile_recompute_modules("deepspeed", ("core_attn",), False, cp=2)
    ()
    >>> profile_recompute_modules("deepspeed", ("core_attn",), False)
    ('core_attn',)
    >>> profile_recompute_modules("deepspeed", ("core_attn",), True, transformer_engine=True)
    ('core_attn',)
    >>> profile_recompute_modules("megatron", ("core_attn",), True, cp=4)
    ('core_attn',)
    """
    local = Framework(framework) is Framework.DEEPSPEED and not transformer_engine
    if local and (flash_attention or cp > 1):
        return ()
    return modules


def parse_recompute_modules(value: Any) -> tuple[str, ...]:
    """The modules of a CLI value (``"core_attn,layernorm"``) or a list, in
    :data:`RECOMPUTE_MODULES` order, each once; :data:`DEFAULT_RECOMPUTE_MODULES` for None or
    ``""``.

    Raises
    ------
    LayoutError
        A name that is not one of :data:`RECOMPUTE_MODULES`.

    >>> parse_recompute_modules("layernorm, mla_up_proj")
    ('layernorm', 'mla_up_proj')
    >>> parse_recompute_modules(None)
    ('core_attn',)
    """
    if value is None or value == "":
        return DEFAULT_RECOMPUTE_MODULES
    names = value.replace(";", ",").split(",") if isinstance(value, str) else list(value)
    out = {str(n).strip() for n in names if str(n).strip()}
    bad = sorted(out - set(RECOMPUTE_MODULES))
    if bad:
        raise LayoutError(
            f"recompute_modules: {', '.join(bad)} is not one of Megatron-Core's recompute "
            f"modules ({', '.join(RECOMPUTE_MODULES)})"
        )
    return tuple(m for m in RECOMPUTE_MODULES if m in out)


_NORM_OUTPUTS = {
    "attn_norm": ("attention projection input",),
    "mlp_norm": ("router and dispatch input", "shared expert FC1 input"),
}
"""The rows that are a Megatron-Core norm module's output, by module
(:func:`model.activation_offload.norm_modules`)."""
_EVERY_NORM_OUTPUT = (
    "attention projection input",
    "QKV projection input",
    "query latent norm output",
    "kv latent norm output",
    "router and dispatch input",
    "shared expert FC1 input",
    "FC1 input",
)
"""Every norm's output among a layer's rows (``every_norm``)."""
_MLA_UP_PROJ = ("Q", "K", "V", "query latent norm output", "kv latent norm output")


def _drops(
    module: str, base: str, scores: frozenset[str], mla: bool, moe: bool, every_norm: bool
) -> bool:
    """Whether ``module`` (recomputed) drops the row whose name without its FP8 suffix is
    ``base``."""
    if module == "core_attn":
        return base in scores
    if module == "layernorm":
        if every_norm:
            return base in _EVERY_NORM_OUTPUT
        return any(base in _NORM_OUTPUTS[m] for m in norm_modules(mla, moe))
    if module == "mla_up_proj":
        return mla and base in _MLA_UP_PROJ
    if module == "moe_act":
        return moe and base.startswith(_MOE_ACT_ROWS)
    if module == "mlp":
        return not moe and base.startswith(_MLP_ROWS)
    if module == "moe":
        return moe and base.startswith(_MOE_ROWS) and base != "router and dispatch input"
    return module == "shared_experts" and base.startswith("shared expert")


def recomputed_rows(
    names: Iterable[str],
    scores: frozenset[str],
    modules: Iterable[str],
    mla: bool,
    moe: bool,
    every_norm: bool = False,
) -> frozenset[str]:
    """The rows among ``names`` (:attr:`model.activations.LayerActivations.terms`' names) that
    the recomputed ``modules`` drop in a layer (MLA attention or not, a MoE layer or not);
    ``scores`` are the layer's attention-score rows; ``every_norm``: ``layernorm`` recomputes
    every norm (the ``textbook`` profile), not only Megatron-Core's norm modules. See the module
    docstring.

    >>> rows = ("attention projection input", "Q", "K", "V", "router and dispatch input")
    >>> sorted(recomputed_rows(rows, frozenset(), ("layernorm", "mla_up_proj"), True, True))
    ['K', 'Q', 'V', 'attention projection input', 'router and dispatch input']
    >>> sorted(recomputed_rows(rows, frozenset(), ("layernorm",), False, False))
    []
    >>> sorted(recomputed_rows(("FC1 input (FP8)", "Q"), frozenset(), ("layernorm",), True, False, True))
    ['FC1 input (FP8)']
    """
    chosen = tuple(modules)
    out = set()
    for name in names:
        base = name.split(" (FP8")[0]
        if any(_drops(m, base, scores, mla, moe, every_norm) for m in chosen):
            out.add(name)
    return frozenset(out)


def check_recompute_modules(
    framework: str,
    recompute: str,
    modules: tuple[str, ...],
    has_moe: bool,
    has_mla: bool,
    fp8_delayed: bool = False,
    shared_experts: bool = False,
) -> None:
    """Check that ``framework`` runs the per-module recomputation of ``modules``.

    The ``textbook`` profile takes them too: it runs what a paper describes, and a paper's
    recomputation of named parts (DeepSeek-V3 §3.2.3: RMSNorm and the MLA up-projections) is
    written in Megatron-Core's module names. ``fsdp2`` and ``deepspeed`` recompute by their own
    policies.

    Raises
    ------
    LayoutError
        Modules other than the default with a profile other than ``megatron`` or ``textbook``, or with
        recomputation other than ``selective``; ``moe_act``, ``moe`` or ``shared_experts`` on
        a model without MoE layers; ``mla_up_proj`` without MLA (Megatron-Core's
        ``TransformerConfig.__post_init__``: "mla_up_proj in recompute_modules is only
        supported with multi_latent_attention"); what TE refuses under FP8's ``delayed``
        recipe (``fp8_delayed``; :func:`_check_delayed`).

    >>> check_recompute_modules("megatron", "selective", ("core_attn", "layernorm"), True, True)
    >>> try:
    ...     check_recompute_modules("fsdp2", "selective", ("layernorm",), False, False)
    ... except LayoutError as err:
    ...     print(err)  # doctest: +ELLIPSIS
    recompute_modules: layernorm is Megatron-Core's per-module recomputation; ...
    """
    if modules == DEFAULT_RECOMPUTE_MODULES:
        return
    named = ", ".join(modules) or "none"
    if str(framework) not in (Framework.MEGATRON, Framework.TEXTBOOK):
        raise LayoutError(
            f"recompute_modules: {named} is Megatron-Core's per-module recomputation; "
            f"{framework} has none (use `framework` megatron or textbook)"
        )
    if str(recompute) != "selective":
        raise LayoutError(
            f"recompute_modules: {named} applies to `recompute` selective "
            f"(Megatron-Core's --recompute-granularity selective), not {recompute}"
        )
    moe = sorted({"moe_act", "moe", "shared_experts"} & set(modules))
    if moe and not has_moe:
        raise LayoutError(
            f"recompute_modules: {', '.join(moe)} needs MoE layers; this model has none"
        )
    if "mla_up_proj" in modules and not has_mla:
        raise LayoutError(
            "recompute_modules: mla_up_proj needs multi-latent attention; this model has none"
        )
    if fp8_delayed and str(framework) == Framework.MEGATRON:
        _check_delayed(modules, has_moe, has_mla, shared_experts)


def _check_delayed(
    modules: tuple[str, ...], has_moe: bool, has_mla: bool, shared_experts: bool
) -> None:
    """Under ``megatron`` with FP8's ``delayed`` recipe, refuse the modules whose recomputation
    makes a Transformer Engine linear save its original input, which TE refuses with that recipe
    (``grouped_linear.py`` / ``linear.py``: "DelayedScaling recipe is not supported with
    save_original_input"): ``moe_act`` (Megatron-Core ``experts.py`` ``TEGroupedMLP.__init__``:
    ``set_save_original_input(self.linear_fc2)``) and ``layernorm`` on MLA
    (``set_for_recompute_input_layernorm``, both down-projections) or on shared experts
    (``MoELayer.set_for_recompute_pre_mlp_layernorm``, their fc1)."""
    refused = [m for m in modules if m == "moe_act" and has_moe]
    if "layernorm" in modules and (has_mla or shared_experts):
        refused.append("layernorm")
    if refused:
        raise LayoutError(
            f"recompute_modules: {', '.join(refused)} makes Transformer Engine linears save "
            "their original input, which TE refuses under fp8_recipe delayed "
            '("DelayedScaling recipe is not supported with save_original_input"); use '
            "fp8_recipe tensorwise, blockwise or mxfp8, or other modules"
        )


def check_setting_recompute_modules(
    arch: Any, training: Any, framework: str, recompute: str
) -> None:
    """:func:`check_recompute_modules` of a model's ``arch`` (None: a model given by size, every
    feature possible) and ``training``'s modules, precision and FP8 recipe; and, for the same
    reason as :func:`_check_delayed`, the ``expert_fc1`` activation offload under ``megatron``
    with FP8's ``delayed`` recipe: Megatron-Core sets ``save_original_input`` on the experts'
    FC1 with that offload (Megatron-LM d98e8a64dd ``moe/experts.py`` ``TEGroupedMLP.__init__``,
    l. 280–284, every recipe but MXFP8 and NVFP4), which Transformer Engine's
    ``module/grouped_linear.py`` ``_GroupedLinear.forward`` refuses with a ``Float8Quantizer``
    (``DelayedScaling``)."""
    has_moe = arch is None or arch.kind_index(True) is not None
    has_mla = arch is None or arch.mla is not None
    shared = arch is not None and arch.moe is not None and arch.moe.num_shared_experts > 0
    delayed = training.precision is Precision.FP8 and (
        fp8_recipe_of(str(framework), training.fp8_recipe) is Fp8Recipe.DELAYED
    )
    modules = training.recompute_modules
    check_recompute_modules(framework, recompute, modules, has_moe, has_mla, delayed, shared)
    offloaded = "expert_fc1" in training.offload.activations
    if delayed and offloaded and has_moe and str(framework) == Framework.MEGATRON:
        raise LayoutError(
            "offload_activations: expert_fc1 makes the experts' FC1 save its original input "
            "(Megatron-Core TEGroupedMLP.__init__, set_save_original_input), which Transformer "
            'Engine refuses under fp8_recipe delayed ("DelayedScaling recipe is not supported '
            'with save_original_input"); use fp8_recipe tensorwise, blockwise or mxfp8'
        )
