"""The printed sentences on a layout's numerics: the GEMM precision and FP8 recipe as the
framework runs it (Transformer Engine or torchao, the weights and saved inputs, the linear
GEMMs' speed-up), the optimizer state and gradients, and the loss the memory terms count. Each
reads the figures the cost model reads; :func:`interface.render.assumptions.assumptions` prints
them."""

from __future__ import annotations

from trainplan.model.estimate import Estimate
from trainplan.model.fp8_gathers import fp8_param_gathers
from trainplan.model.frameworks import (
    Framework,
)
from trainplan.model.loss_memory import loss_kept_bytes_per_element, loss_peak_bytes_per_element
from trainplan.model.memory import cache_bytes_per_element
from trainplan.model.op_rates import FAMILY, RECIPE_PART, params_in_force, recipe_speedups
from trainplan.model.op_time import Clock
from trainplan.model.optimizers import OptimizerKind
from trainplan.model.precision import (
    FP8_GEMM_EFFICIENCY,
    KEPT_HIGH_PRECISION,
    Fp8Recipe,
    Precision,
    fp8_activation_bytes,
    fp8_recipe_of,
    fp8_weight_cache_bytes,
    linear_speedup,
)
from trainplan.model.torchao_rates import TorchaoFp8
from trainplan.model.torchao_time import torchao_fp8_rates

__all__ = ["loss_sentence", "precision_sentence"]


_DEFAULT_LOSS = {
    "megatron": "Megatron-Core's unfused vocab-parallel cross entropy",
    "fsdp2": "PyTorch's cross_entropy, as torchtitan calls it",
    "deepspeed": "Megatron-DeepSpeed's vocab-parallel cross entropy on an fp32 copy of the logits "
    "(the sequence-parallel one with Ulysses)",
}


def loss_sentence(est: Estimate) -> str:
    """What the last stage's loss keeps and holds per local logit, from the figures the memory
    terms read (:func:`model.loss_memory.loss_kept_bytes_per_element`,
    :func:`model.loss_memory.loss_peak_bytes_per_element`), and which loss that is."""
    t, lay = est.training, est.layout
    beta = t.activation_bytes
    kept = loss_kept_bytes_per_element(lay.framework, t.cross_entropy_fusion_impl, beta)
    impl = t.cross_entropy_fusion_impl
    peak = loss_peak_bytes_per_element(lay.framework, lay.tp, impl, beta, lay.cp, lay.pp)
    which = {
        "te": "Transformer Engine's fused cross entropy (parallel_cross_entropy, Transformer "
        "Engine 2.2 to 2.17, which writes the gradient into the BF16 logits; from 2.18 it keeps "
        "an FP32 gradient, 4 B, and Megatron-LM from core 0.19 no longer offers it)",
        "native": "Megatron-Core's fused vocab-parallel cross entropy",
    }.get(str(t.cross_entropy_fusion_impl), _DEFAULT_LOSS.get(str(lay.framework), "its loss"))
    held = ""
    if str(lay.framework) == "deepspeed" and lay.pp > 1:
        held = (
            " beside the fp32 logits of up to two micro-batches that DeepSpeed's pipeline "
            "engine keeps on the last stage (pipe_buffers['outputs'], 4 B per local logit each)"
        )
    torch_pp = not (t.pipeline_keeps_outputs or t.pipeline_frees_stage_tensors)
    if str(lay.framework) == "fsdp2" and lay.pp > 1 and torch_pp:
        held = (
            f", and {beta} B more: PyTorch's pipeline stage holds the BF16 logits (fwd_cache) "
            "until the micro-batch's backward ends, beside every layer's backward too"
        )
    return (
        f"loss: {which}; backward keeps {kept} B per local logit, the loss holds {peak} B at "
        f"its peak{held}"
    )


def precision_sentence(est: Estimate) -> str:
    """The recipe's numerics: GEMM precision, optimizer state, gradient dtype."""
    t = est.training
    grads = f"{t.gradient_bytes} B gradients" if t.gradient_bytes else "the framework's gradients"
    state = f"optimizer state {t.optimizer_bytes} B/param, {grads}"
    if est.layout.optimizer is not OptimizerKind.ADAM:
        state = (
            f"optimizer {est.layout.optimizer}: its own state per parameter class (an FP32 "
            f"master included; Optimizers and packed documents in the docs), {grads}"
        )
    if t.precision is not Precision.FP8:
        return f"precision bf16 (weights, activations, GEMMs); {state}"
    recipe = fp8_recipe_of(est.layout.framework, t.fp8_recipe)
    published = recipe_speedups(est.device.part, recipe) if recipe is not Fp8Recipe.MXFP8 or \
        FAMILY.get(est.device.part) == "blackwell" else None  # fmt: skip
    ao = _torchao_rates(est, recipe)
    if ao is not None:
        speed = (
            f"{ao.kernel_speedup:.2f}× faster (torchao's published Float8 block speed-up on "
            "H100 read through this model's own times), each call's casts charged as torchao's "
            "roofline counts them; tensorwise is torchtitan's recipe up to 6348d93d1, 2026-04; "
            "since then torchtitan accepts only the rowwise recipes, for which no per-GEMM rate "
            "is published, so a current torchtitan may run slower than this"
        )
    elif published is not None:
        fwd, dgrad, wgrad = published
        speed = (
            f"{fwd:.2f}×, {dgrad:.2f}×, {wgrad:.2f}× faster in forward, input and weight gradient "
            f"(Transformer Engine's published {recipe.value} GEMM profile on "
            f"{RECIPE_PART[FAMILY[est.device.part]]}, quantisation included)"
        )
    else:
        flat = linear_speedup(t.precision, est.device)
        speed = (
            f"{flat:.2f}× faster (FP8 peak at {FP8_GEMM_EFFICIENCY:g} of the BF16 efficiency; no "
            "published recipe profile for this part)"
        )
    impl, weights, inputs = _fp8_linear(est, recipe)
    return (
        f"precision fp8, recipe {recipe.value} ({impl}): {weights}, {inputs}, linear GEMMs "
        f"{speed}; in BF16/FP32: {KEPT_HIGH_PRECISION}; {state}"
    )


def _torchao_rates(est: Estimate, recipe: Fp8Recipe) -> TorchaoFp8 | None:
    """The rates the time model gives torchao's ``Float8Linear`` on this layout
    (:func:`model.torchao_time.torchao_fp8_rates`, on the clock the roofline reads), or None
    where the linear layers are not torchao's or torchao published nothing for the part."""
    d = est.device
    if d.hbm_bytes_per_s is None:
        return None
    o = est.options
    params = params_in_force(o.roofline, d.part, o.attention_kernel, str(est.layout.framework))
    clock = Clock(d.peak_flops_per_s, d.hbm_bytes_per_s, params)
    t, framework = est.training, est.layout.framework
    gather = fp8_param_gathers(framework, t.precision, t.fp8_recipe, t.fp8_param_gather)
    return torchao_fp8_rates(t.precision, recipe, d.part, framework, clock, gather)


def _fp8_linear(est: Estimate, recipe: Fp8Recipe) -> tuple[str, str, str]:
    """(implementation, weights, saved inputs) of an FP8 linear layer, read from the flags and
    the byte count the memory terms read (:attr:`model.frameworks.Framework.fp8_caches_weights`,
    :attr:`model.frameworks.Framework.fp8_saves_fp8_inputs`,
    :func:`model.memory.cache_bytes_per_element`): Transformer Engine's cached FP8 weight
    copies and FP8 saved inputs, or torchao's ``Float8Linear`` (``fsdp2``), which casts inside
    each GEMM and saves the high-precision input."""
    t, framework = est.training, Framework(est.layout.framework)
    cache = cache_bytes_per_element(t, framework, est.device)
    if not framework.fp8_caches_weights and t.fp8_param_gather:
        weights = (
            "linear weights cast to FP8 before FSDP's all-gather (torchao's FP8 all-gather, "
            "1 B gathered; the scales precomputed once a step), no cast inside the GEMMs"
        )
    elif not framework.fp8_caches_weights:
        weights = "linear weights cast to FP8 inside each GEMM, no FP8 copy kept"
    elif t.fp8_param_gather:
        kept = (
            f"only the column-wise copy cached (+{float(cache):g} B per linear weight)"
            if cache
            else "no copy cached (the row-wise data serves both layouts on this part)"
        )
        weights = f"linear weights held as FP8 primary weights (1 B; --fp8-param-gather), {kept}"
    else:
        copies = (
            "FP8 row- and column-wise copies"
            if cache == fp8_weight_cache_bytes(recipe)
            else "one FP8 copy (the row-wise data serves both layouts on this part)"
        )
        weights = f"linear weights cached as {copies} (+{float(cache):g} B per linear weight)"
    if framework.fp8_saves_fp8_inputs:
        inputs = (
            f"linear inputs saved in FP8 ({float(fp8_activation_bytes(recipe)):g} B per element)"
        )
    else:
        inputs = "linear inputs saved in BF16 (cast to FP8 again in backward)"
    impl = "Transformer Engine" if framework.fp8_caches_weights else "torchao Float8Linear"
    return impl, weights, inputs
