"""Per-operation rates the roofline clock reads for a part as deployed: the attention kernel's
efficiency by sequence length, head dimensions and mask, the FP8/MXFP8 recipes' speed-up of the
linear GEMMs, the sustained tensor clock under a power cap and the streaming bandwidth of the
optimizer step — each from a published per-operation measurement (``scenarios/kernels/*.toml``,
:mod:`trainplan.scenarios.kernel_data`), never from an end-to-end run.

The part families (:mod:`model.part_family`) and the attention kernels' curves
(:mod:`model.attention_rates`) have modules of their own.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from trainplan.model.attention_rates import ATTENTION_KERNELS, default_attention_kernel
from trainplan.model.errors import InputError
from trainplan.model.gemm_shapes import (
    cached_weight_speedup,
    deepgemm_blocks,
    recipe_speedup,
    sm_count,
    wave_efficiency,
)
from trainplan.model.hardware import DeviceSpec
from trainplan.model.kernels import stream_fraction
from trainplan.model.nvlink_rates import busbw_curve_for, nvls_allreduce_speedup
from trainplan.model.part_family import FAMILY, catalogue_part
from trainplan.model.precision import Fp8Recipe, Precision, check_precision, linear_speedup
from trainplan.model.roofline import RooflineParams, roofline_params_for
from trainplan.scenarios.kernel_data import (
    gemm_data,
    low_precision_data,
    memory_data,
)

__all__ = [
    "FAMILY",
    "RECIPE_PART",
    "recipe_speedups",
    "check_fp8_recipe",
    "profile_recipes",
    "fp8_linear_speedups",
    "te_caches_fp8_weights",
    "SUSTAINED_CLOCK",
    "sustained_clock_fraction",
    "STREAM_PART",
    "stream_triad_fraction",
    "SM_PART",
    "CU_PART",
    "gemm_wave_efficiency",
    "dense_wave_efficiency",
    "deployed_params",
    "params_in_force",
]


RECIPE_PART: dict[str, str] = {"hopper": "H200-NVL", "blackwell": "B300"}
"""The part whose Transformer Engine GEMM profile stands for a family's recipes
(``lowp.toml``: NVIDIA/TransformerEngine ``docs/examples/gemm_profiling/gemm_profiling.rst`` at
1609c890 — one 4096-hidden, 16384-FFN layer at 15,872 tokens)."""


@lru_cache(maxsize=64)
def recipe_speedups(
    device_name: str, recipe: Fp8Recipe | str, weights_cached: bool = False
) -> tuple[float, float, float] | None:
    """(forward, input-gradient, weight-gradient) speed-up of a linear layer's GEMMs under an FP8
    recipe over BF16 on the part's family, with the recipe's quantisation kernels (Transformer
    Engine's ``autocast`` rows: casts, amax reductions, transposes, block scales): the BF16
    milliseconds of the pass over the recipe's (:func:`model.gemm_shapes.recipe_speedup`).
    With ``weights_cached`` (Transformer Engine under Megatron-Core: FP8 weights made once per
    step, the weight gradient reading the casts' columnwise copies) only the activations' and
    output gradients' casts are charged (:func:`model.gemm_shapes.cached_weight_speedup`)
    where the profile publishes the recipe's kernel-only time (current scaling, MXFP8; delayed
    scaling through current scaling's, the same per-tensor GEMM); the autocast rows otherwise
    (block scaling on Hopper has no kernel-only row). None for a part outside :data:`RECIPE_PART`'s families
    (the clock then keeps :func:`model.precision.linear_speedup`'s flat figure, said in the
    output).

    Raises
    ------
    InputError
        A recipe the family's profile does not publish (MXFP8 on Hopper: its tensor cores take
        no MX block scales; block scaling on Blackwell is not in the profile).

    Examples
    --------
    H200 NVL, delayed scaling: 10.653 / 6.188, 10.813 / 6.306 and 10.548 / 6.484 ms.

    >>> [round(x, 3) for x in recipe_speedups("H100-SXM", "delayed")]
    [1.722, 1.715, 1.627]

    Current scaling with cached weights: fprop 10.653 / (5.577 + 0.6933 × 0.926), dgrad
    10.813 / (5.661 + 0.744 × 1.134), wgrad 10.548 / 5.547.

    >>> [round(x, 3) for x in recipe_speedups("H100-SXM", "tensorwise", True)]
    [1.713, 1.662, 1.902]
    """
    part = RECIPE_PART.get(FAMILY.get(catalogue_part(device_name), ""))
    if part is None:
        return None
    name = Fp8Recipe(recipe).table_name
    rows = low_precision_data().layer_gemms
    passes = ("fprop", "dgrad", "wgrad")
    if weights_cached:
        try:
            fprop, dgrad, wgrad = (cached_weight_speedup(rows, part, name, (p,)) for p in passes)
            return fprop, dgrad, wgrad
        except InputError:
            pass
    fprop, dgrad, wgrad = (recipe_speedup(rows, part, name, passes=(p,)) for p in passes)
    return fprop, dgrad, wgrad


def check_fp8_recipe(
    precision: Precision | str, recipe: Fp8Recipe | str | None, device: DeviceSpec
) -> Fp8Recipe | None:
    """The FP8 recipe in force: None under bf16, ``delayed`` (Megatron-Core's default) under
    fp8 when none is given.

    Raises
    ------
    InputError
        A recipe given under bf16 (it does not apply), an unknown recipe, or ``mxfp8`` on a part
        outside the Blackwell family (MX block scales need Blackwell's tensor cores), or a
        recipe the part's family's profile does not publish (:func:`profile_recipes`: block
        scaling on Blackwell), one line naming the part and the recipes it has.
    """
    p = check_precision(precision, device)
    if p is Precision.BF16:
        if recipe is not None:
            raise InputError(f"fp8_recipe: {recipe} applies only with precision fp8 (bf16 given)")
        return None
    try:
        r = Fp8Recipe(str(recipe or Fp8Recipe.DELAYED).lower())
    except ValueError:
        allowed = ", ".join(x.value for x in Fp8Recipe)
        raise InputError(f"fp8_recipe: {recipe!r} is not one of {allowed}") from None
    if r is Fp8Recipe.MXFP8 and FAMILY.get(device.part) != "blackwell":
        raise InputError(
            f"fp8_recipe: mxfp8 needs Blackwell tensor cores (B200, B300, GB200, GB300); the "
            f"{device.name} has none"
        )
    profiled = profile_recipes(device.part)
    if profiled is not None and r not in profiled:
        part = RECIPE_PART[FAMILY[device.part]]
        raise InputError(
            f"fp8_recipe: {r.value} has no published GEMM profile on the {device.name}; "
            f"Transformer Engine's profile of its family (measured on the {part}) has "
            f"{', '.join(x.value for x in profiled)}: give one of those"
        )
    return r


def profile_recipes(device_name: str) -> tuple[Fp8Recipe, ...] | None:
    """The FP8 recipes Transformer Engine's GEMM profile publishes (autocast rows) for the
    part's family (:data:`RECIPE_PART`), in :class:`~model.precision.Fp8Recipe`'s order; None
    for a part outside those families (no profile: every recipe takes the flat figure).

    Examples
    --------
    >>> [r.value for r in profile_recipes("B200")]
    ['delayed', 'tensorwise', 'mxfp8']
    >>> [r.value for r in profile_recipes("H100-SXM")]
    ['delayed', 'tensorwise', 'blockwise']
    """
    part = RECIPE_PART.get(FAMILY.get(catalogue_part(device_name), ""))
    if part is None:
        return None
    rows = low_precision_data().layer_gemms
    have = {x for row in rows if (row.part, row.mode) == (part, "autocast") for x in row.recipes}
    return tuple(r for r in Fp8Recipe if r.table_name in have)


def fp8_linear_speedups(
    precision: Precision | str,
    recipe: Fp8Recipe | str | None,
    device: DeviceSpec,
    weights_cached: bool = False,
) -> tuple[float, float, float]:
    """(forward, input-gradient, weight-gradient) speed-up of the linear layers' GEMMs over
    BF16: 1 under bf16; under fp8 the recipe's published speed-ups on the part's family
    (:func:`recipe_speedups`, ``weights_cached`` where Transformer Engine caches the FP8
    weights for the step: :func:`te_caches_fp8_weights`), or :func:`model.precision.linear_speedup`'s flat figure (FP8 peak
    over BF16 peak × 0.75) for a part without a published profile (a recipe its family's
    profile lacks is refused by :func:`check_fp8_recipe`).

    Examples
    --------
    >>> from trainplan.model.hardware import DeviceSpec
    >>> h100 = DeviceSpec(name="H100-SXM", memory_bytes=80 * 10**9, memory_unit="GB",
    ...                   peak_flops_per_s=989.4e12, fp8_flops_per_s=1978.9e12)
    >>> [round(x, 3) for x in fp8_linear_speedups("fp8", "tensorwise", h100)]
    [1.638, 1.591, 1.51]
    """
    r = check_fp8_recipe(precision, recipe, device)
    if r is None:
        return (1.0, 1.0, 1.0)
    try:
        found = recipe_speedups(device.part, r, weights_cached)
    except InputError:
        found = None
    if found is None:
        flat = linear_speedup(precision, device)
        return (flat, flat, flat)
    return found


def te_caches_fp8_weights(framework: str) -> bool:
    """Whether the framework's FP8 linear layers are Transformer Engine's under Megatron-Core,
    which quantises a weight once per step (``megatron/core/extensions/transformer_engine.py``
    ``TELinear.forward`` passes ``is_first_microbatch``; TE ``module/linear.py`` requantises the
    weight only when it is None or True): ``megatron``. torchao's ``Float8Linear`` (torchtitan,
    the fsdp2 profile) casts its weight on every call.

    >>> te_caches_fp8_weights("megatron"), te_caches_fp8_weights("fsdp2")
    (True, False)
    """
    return framework == "megatron"


SUSTAINED_CLOCK: dict[str, tuple[float, str]] = {
    "H100-96GB-500W": (
        (835.5 + (989.4 - 835.5) * (500 - 400) / (700 - 400)) / 989.4,
        "derived: NVIDIA rates the same 132-SM H100 die at 989.4 dense BF16 TFLOPS at 700 W "
        "(H100 SXM) and 835.5 at 400 W (H100 NVL datasheet); torchtitan's Grand Teton H100s run "
        "at a 500 W limit (benchmarks/llama3_h100_202412_torchtitan.md, Hardware and footnote "
        "2: 'between SXM and NVL'); the tensor clock read linearly in board power between the "
        "two ratings: 886.8 TFLOPS, 0.896 of the SXM rating",
    ),
}
"""Per as-deployed part, the fraction of its rated dense peak its tensor cores sustain under
its power limit, with the derivation; parts not listed run at their rating (the vendor rates
each at the power its system gives it: B200 2.25 and GB200 2.5 PFLOPS of one die)."""


def sustained_clock_fraction(device_name: str) -> float:
    """:data:`SUSTAINED_CLOCK`'s fraction for the part, 1 where none is listed.

    Examples
    --------
    >>> round(sustained_clock_fraction("H100-96GB-500W"), 4), sustained_clock_fraction("H100-SXM")
    (0.8963, 1.0)
    """
    return SUSTAINED_CLOCK.get(catalogue_part(device_name), (1.0, ""))[0]


STREAM_PART: dict[str, tuple[str, float]] = {
    "A100-40GB": ("A100-80GB", 2.039),
    "A100-80GB": ("A100-80GB", 2.039),
    "H100-SXM": ("H100-SXM", 3.35),
    "H800": ("H100-SXM", 3.35),
    "H200": ("H200", 4.8),
}
"""Parts whose HBM a published BabelStream run measured (``memory.toml``, Azure
AI-benchmarking-guide), with that run's datasheet TB/s: the same HBM generation and stack
count (H800 has the H100 SXM's five HBM3 stacks)."""


def stream_triad_fraction(device_name: str) -> float | None:
    """The fraction of the datasheet HBM bandwidth BabelStream's triad reaches on the part
    (:func:`model.kernels.stream_fraction`): what a multi-tensor streaming kernel such as the
    optimizer step sustains. None for a part without a published run.

    Examples
    --------
    >>> round(stream_triad_fraction("H100-SXM"), 4), stream_triad_fraction("B200")
    (0.8866, None)
    """
    found = STREAM_PART.get(catalogue_part(device_name))
    if found is None:
        return None
    part, tbps = found
    return stream_fraction(memory_data().stream, part, "triad", tbps)


SM_PART: dict[str, str] = {
    "A100-40GB": "A100-40GB",
    "A100-80GB": "A100-80GB",
    "H100-SXM": "H100-SXM",
    "H100-96GB-500W": "H100-SXM",
    "H800": "H800",
    "H200": "H200",
    "B200": "B200",
    "GB200": "GB200",
    "B300": "B300",
    "GB300": "GB300",
}
"""Parts whose SM count ``gemm.toml`` sources (the 500 W H100 is the SXM die, 132 SMs; B300 and
GB300 from NVIDIA's Blackwell Ultra blog, GB200 as the B200's GPU)."""

CU_PART: dict[str, str] = {"MI300X": "MI300X", "MI325X": "MI325X", "MI355X": "MI355X"}
"""AMD parts whose compute units ``gemm.toml`` sources: what the GEMM wave rule divides tiles
over (:func:`gemm_wave_efficiency`). Not in :data:`SM_PART`, which also places DeepEP's SM share
(an NVIDIA-only dispatcher, :mod:`model.comm_sms`)."""


@lru_cache(maxsize=4096)
def gemm_wave_efficiency(
    device_name: str, m: int, n: int, groups: int = 1, contiguous: bool = True, taken: int = 0
) -> float | None:
    """Tile and wave quantisation of ``groups`` GEMMs with output ``[m, n]`` on the part: the
    useful share of the tile-times (:func:`model.gemm_shapes.wave_efficiency`) with the tile
    DeepGEMM picks (:func:`model.gemm_shapes.deepgemm_blocks`; ``contiguous``: a grouped
    expert GEMM in the contiguous layout, M blocks of 128). What a grouped expert GEMM with few
    tokens per expert loses against a large one (multiply a large-GEMM efficiency by it over
    the large GEMM's own factor). DeepGEMM's tile rule is Hopper's; on A100 and Blackwell it
    stands in for cuBLAS's and on AMD's CDNA parts (:data:`CU_PART`, compute units for SMs) for
    hipBLASLt's (an approximation: neither library publishes its tile choice). None for a part
    without a sourced SM or CU count (TPUs have neither).

    ``taken``: SMs the GEMM is launched without (Transformer Engine's userbuffers margin,
    :mod:`model.userbuffers_gemm`): the tiles and waves over the ``S − taken`` SMs it runs on,
    times ``(S − taken) / S``, so the share stays one of the whole part's tile-times.

    Examples
    --------
    8 experts of 256 tokens, n 4096, on an H100 (132 SMs): 128 × 128 tiles, 8·2·32 = 512
    tiles in 4 waves of 132, the useful share 512/528:

    >>> round(gemm_wave_efficiency("H100-SXM", 256, 4096, 8), 4)
    0.9697

    The same on 116 SMs (16 taken): 128 × 144 tiles, 8·2·29 = 464 tiles in 4 full waves of
    116, 8·256·4096 / (4·116·128·144) = 0.9808 of their tile-times, × 116/132:

    >>> round(gemm_wave_efficiency("H100-SXM", 256, 4096, 8, taken=16), 4)
    0.862
    """
    name = catalogue_part(device_name)
    part = SM_PART.get(name) or CU_PART.get(name)
    if part is None:
        return None
    sms = sm_count(gemm_data().sm_counts, part)
    run = sms - taken
    bm, bn = deepgemm_blocks(m, n, groups, run, contiguous)
    return wave_efficiency(m, n, groups, run, bm, bn) * run / sms


def dense_wave_efficiency(
    part: str | None, m: float, n: float, batch: float = 1, taken: int = 0
) -> float:
    """Tile and wave quantisation of ``batch`` dense GEMMs with output ``[m, n]`` on the part:
    :func:`gemm_wave_efficiency` with DeepGEMM's dense tiles (M blocks of 64, 128 or 256), on
    all its SMs but ``taken``; 1 for a part without a sourced SM or CU count (a TPU) or an
    empty GEMM; fractional ``m`` rounds up.

    Examples
    --------
    The 22B model's QKV projection in Korthikanti's Table 5 on an A100 (108 SMs): 4 × 2,048
    tokens, n = 3 · 6,144 / 8 = 2,304. DeepGEMM's 256 × 120 tiles make 32 × 20 = 640 tiles in
    6 waves of 108 (5.93 rounded up), the useful share 8,192 · 2,304 / (648 · 256 · 120):

    >>> round(dense_wave_efficiency("A100-80GB", 8192, 2304), 4)
    0.9481
    >>> dense_wave_efficiency("TPUv5p", 8192, 2304)
    1.0
    """
    if not part or m <= 0 or n <= 0 or batch <= 0:
        return 1.0
    w = gemm_wave_efficiency(part, *(math.ceil(x - 1e-9) for x in (m, n, batch)), False, taken)
    return 1.0 if w is None else w


def deployed_params(
    device_name: str, attention_kernel: str | None = None, **overrides: Any
) -> RooflineParams:
    """The roofline figures of a part as deployed: :func:`model.roofline.roofline_params_for`'s
    (with ``overrides``) plus the per-operation ones of this module — the attention kernel whose
    curves time the core (``attention_kernel``, else Transformer Engine's choice on the part:
    :func:`default_attention_kernel` under ``megatron``; none when an ``attention_efficiency``
    is given and no kernel), the sustained clock, the optimizer step's streaming fraction and the
    published bus-bandwidth curve of its NVLink domain (:func:`busbw_curve_for`; none when a
    ``scaleup_efficiency`` is given: that figure then times the domain's collectives).

    Raises
    ------
    InputError
        An attention kernel with no published curves.

    Examples
    --------
    >>> p = deployed_params("H100-96GB-500W")
    >>> p.attention_kernel, round(p.clock_fraction, 3)
    ('cudnn', 0.896)
    >>> deployed_params("H100-SXM", attention_efficiency=0.4).attention_kernel is None
    True
    """
    if attention_kernel is not None and attention_kernel not in ATTENTION_KERNELS:
        raise InputError(
            f"attention_kernel: {attention_kernel!r} is not one of {', '.join(ATTENTION_KERNELS)}"
        )
    base = roofline_params_for(device_name, **overrides)
    curve, curve_link = busbw_curve_for(device_name)
    if "scaleup_efficiency" in overrides:  # the user's (or calibrate's) figure rules the domain
        curve, curve_link = (), 0.0
    if "busbw_curve" in overrides:
        curve, curve_link = overrides["busbw_curve"], overrides.get("busbw_curve_link_gbps", 0.0)
    if attention_kernel is None and "attention_efficiency" not in overrides:
        attention_kernel = default_attention_kernel("megatron", device_name)
    return base.with_(
        attention_kernel=attention_kernel,
        part=device_name,
        clock_fraction=overrides.get("clock_fraction", sustained_clock_fraction(device_name)),
        nvls_allreduce_speedup=overrides.get(
            "nvls_allreduce_speedup", nvls_allreduce_speedup(device_name)
        ),
        optimizer_hbm_efficiency=overrides.get(
            "optimizer_hbm_efficiency", stream_triad_fraction(device_name)
        ),
        busbw_curve=curve,
        busbw_curve_link_gbps=curve_link,
    )


def params_in_force(
    given: RooflineParams | None,
    device_name: str,
    attention_kernel: str | None = None,
    framework: str | None = None,
    nvls: bool = True,
) -> RooflineParams:
    """The roofline figures in force: ``given`` (the cost options'), else the part's as
    deployed (:func:`deployed_params` with the options' attention kernel); with ``framework``
    and no ``attention_kernel`` given, the attention kernel that framework runs on the part
    (:func:`model.attention_rates.default_attention_kernel`) in place of the deployed default
    (where the figures time the core from curves at all: none where an attention efficiency
    was given). Without ``nvls`` (:class:`model.timing.CostOptions` ``nccl_nvls`` false,
    ``NCCL_NVLS_ENABLE=0``) no NVLS all-reduce speed-up, and a published curve measured with NVLS
    read as the ring's (÷ the speed-up), as its all-gathers already are.

    >>> params_in_force(None, "H100-SXM", nvls=False).nvls_allreduce_speedup
    1.0
    >>> params_in_force(None, "H100-SXM", None, "deepspeed").attention_kernel
    'flash-attention-2'
    >>> params_in_force(None, "H100-SXM", None, "fsdp2").attention_kernel
    'cudnn'
    """
    params = given or deployed_params(device_name, attention_kernel)
    if not nvls and (s := params.nvls_allreduce_speedup) != 1:
        curve = tuple((x, y / s) for x, y in params.busbw_curve)
        params = params.with_(nvls_allreduce_speedup=1.0, busbw_curve=curve)
    if framework is None or attention_kernel is not None or params.attention_kernel is None:
        return params
    kernel = default_attention_kernel(str(framework), device_name)
    if kernel is None or kernel == params.attention_kernel:
        return params
    return params.with_(attention_kernel=kernel)
