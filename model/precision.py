"""Numerics of a training recipe: the GEMM precision, the optimizer state's dtypes, the gradient
dtype — and what each costs in memory and buys in time.

**BF16** (the default): BF16 weights, activations and GEMMs; an FP32 master copy and FP32 Adam
moments in the optimizer (12 B/param; Rajbhandari et al. 2019 §3.1).

**FP8** as Transformer Engine runs it on Hopper and Blackwell (TE docs, "Using FP8 with
Transformer Engine"; Micikevicius et al. 2022, arXiv 2209.05433), the recipe Megatron-Core's
``--fp8-format hybrid`` selects:

* the high-precision (BF16) weights stay, and each linear layer's weight gains cached FP8 copies
  for the step: the weight and its transpose (Hopper's FP8 tensor cores take only the TN layout,
  so dgrad and wgrad need the transposed copy; TE ``Float8Tensor`` keeps both, and with
  ``is_first_microbatch`` caches them across the micro-batches of a step):
  :data:`FP8_WEIGHT_CACHE_BYTES` = 2 B per linear weight element. Under ZeRO-3 / FSDP the copies
  exist only for the gathered units. On Blackwell the per-tensor recipes keep no transpose (its
  FP8 GEMMs take the other layouts: :func:`keeps_fp8_transpose`), 1 B; Blackwell's MXFP8 keeps
  row- and column-wise copies (with one E8M0 scale per 32 elements each);
* the inputs a linear layer saves for its weight gradient are saved in FP8 (1 B per element,
  :data:`FP8_ACTIVATION_BYTES`): the QKV, output-projection, FC1 and FC2 / down-projection
  inputs, the routed experts' inputs (:data:`FP8_LINEAR_INPUTS`); the attention kernel still
  keeps its BF16 output beside the output projection's FP8 copy
  (:func:`model.activations.layer_activations`);
* the linear layers' GEMMs (forward, dgrad, wgrad; recomputed ones too) run at the FP8 dense peak
  (``DeviceSpec.fp8_flops_per_s``) at :data:`FP8_GEMM_EFFICIENCY` of the BF16 GEMM efficiency.

What stays in BF16 (or FP32): the embedding, the output layer and the loss, every norm, the MoE
router, the attention core (QKᵀ, softmax, scores·V: FlashAttention in BF16), the activation
functions, the gradients and their reduction (:attr:`TrainingSpec.gradient_bytes`), the master
weights and the optimizer — as in DeepSeek-V3's FP8 recipe (Liu et al. 2024, arXiv 2412.19437,
§3.3: "embedding module, the output head, MoE gating modules, normalization operators, and
attention operators" kept in their original precision).

**Optimizer state** (:func:`optimizer_state_bytes`): FP32 or BF16 Adam moments, with or without
the FP32 master weights — Megatron-Core's precision-aware optimizer (``--exp-avg-dtype``,
``--exp-avg-sq-dtype``, ``--main-params-dtype``); DeepSeek-V3 §3.3.3 tracks the moments in BF16
with FP32 master weights (8 B/param).
"""

from __future__ import annotations

from enum import StrEnum
from fractions import Fraction

from trainplan.model.errors import InputError, LayoutError
from trainplan.model.hardware import DeviceSpec
from trainplan.model.part_family import FAMILY

__all__ = [
    "Precision",
    "Fp8Recipe",
    "fp8_recipe_of",
    "parse_fp8_fields",
    "check_framework_fp8_recipe",
    "DTYPE_BYTES",
    "FP8_WEIGHT_CACHE_BYTES",
    "PER_TENSOR_RECIPES",
    "keeps_fp8_transpose",
    "FP8_ACTIVATION_BYTES",
    "FP8_GEMM_EFFICIENCY",
    "FP8_LINEAR_INPUTS",
    "FP8_ACTIVATION_STORAGE",
    "E5M6_ACTIVATION_BYTES",
    "KEPT_HIGH_PRECISION",
    "optimizer_state_bytes",
    "dtype_bytes",
    "check_precision",
    "check_fp8_activation_storage",
    "linear_speedup",
    "fp8_weight_cache_bytes",
    "fp8_activation_bytes",
]


class Precision(StrEnum):
    """The linear layers' GEMM precision: ``bf16`` or ``fp8`` (Transformer Engine)."""

    BF16 = "bf16"
    FP8 = "fp8"


class Fp8Recipe(StrEnum):
    """How FP8 tensors are scaled: Megatron-Core's ``--fp8-recipe`` (``megatron/training/
    arguments.py`` ``_add_transformer_engine_args``: choices tensorwise, delayed, mxfp8,
    blockwise; default delayed), each a Transformer Engine recipe: ``delayed`` —
    ``DelayedScaling`` (one scale per tensor from an amax history); ``tensorwise`` —
    ``Float8CurrentScaling`` (one scale per tensor from the tensor's own amax, NeMo's "FP8-CS");
    ``blockwise`` — ``Float8BlockScaling`` (DeepSeek-V3's 1×128 activation and 128×128 weight
    blocks, FP32 scales; Hopper); ``mxfp8`` — ``MXFP8BlockScaling`` (one E8M0 scale per 32
    elements, OCP MX v1.0; Blackwell tensor cores only, NeMo's "FP8-MX")."""

    DELAYED = "delayed"
    TENSORWISE = "tensorwise"
    BLOCKWISE = "blockwise"
    MXFP8 = "mxfp8"

    @property
    def table_name(self) -> str:
        """The recipe's name in ``scenarios/kernels/lowp.toml`` (Transformer Engine's GEMM
        profile): fp8-delayed, fp8-current, fp8-block, mxfp8."""
        return {"delayed": "fp8-delayed", "tensorwise": "fp8-current",
                "blockwise": "fp8-block", "mxfp8": "mxfp8"}[self.value]  # fmt: skip


DTYPE_BYTES = {"fp32": 4, "bf16": 2}
"""Bytes per element of the dtypes optimizer state and gradients can be held in."""

FP8_WEIGHT_CACHE_BYTES = 2
"""Bytes per linear weight element of the FP8 copies Transformer Engine caches for a step: the
FP8 weight and its FP8 transpose (1 + 1; TE ``Float8Tensor`` with its transpose cache)."""

FP8_ACTIVATION_BYTES = 1
"""Bytes per element of a linear layer's input saved in FP8 (E4M3) for its weight gradient."""

FP8_ACTIVATION_STORAGE = ("linear_inputs", "deepseek_v3")
"""How FP8 training stores activations (:attr:`model.specs.TrainingSpec.fp8_activation_storage`):
``linear_inputs`` — Transformer Engine: every linear layer saves its own FP8 input, the
attention kernel keeps its BF16 output and the activation functions their BF16 inputs;
``deepseek_v3`` — DeepSeek-V3's "Low-Precision Activation" (arXiv 2412.19437 §3.3.3): the
attention output, which both the attention core's backward and the output projection's read,
kept once in E5M6 (:data:`E5M6_ACTIVATION_BYTES`), and the MoE module's SwiGLU inputs (the
routed and the shared experts') cached in FP8 with their 1×128 tiles' scales, their output
recomputed (recompute module ``moe_act`` for the routed experts; the shared expert's by the
storage: :data:`model.activation_rows._DEEPSEEK_SWIGLU_INPUTS`)."""

E5M6_ACTIVATION_BYTES = Fraction(3, 2) + Fraction(4, 128)
"""Bytes per element of DeepSeek-V3's E5M6 attention output (§3.3.3: "a customized E5M6 data
format exclusively for these activations", 12 bits) with one FP32 scale per 1×128 tile (the
report's activation tiles, §3.3.2; the scales are powers of two, their storage is not given)."""

MX_BLOCK_ELEMENTS = 32
"""Elements per E8M0 (1-byte) scale of an MXFP8 tensor (TE ``MXFP8_BLOCK_SCALING_SIZE``;
``scenarios/kernels/lowp.toml`` ``block_format``; OCP MX v1.0)."""

SCALE_BYTES: dict[str, tuple[Fraction, Fraction]] = {
    "mxfp8": (Fraction(1, MX_BLOCK_ELEMENTS), Fraction(1, MX_BLOCK_ELEMENTS)),
    "blockwise": (Fraction(4, 128 * 128), Fraction(4, 128)),
}
"""Scale bytes per element of one FP8 copy, (weight, activation), of the block-scaled recipes:
MXFP8 one E8M0 byte per 32 elements of either; blockwise one FP32 scale per 128×128 weight
block and per 1×128 activation tile (DeepSeek-V3 §3.3.1; TE ``Float8BlockScaling``). The
per-tensor recipes (delayed, tensorwise) keep one scale per tensor: nothing per element."""


def fp8_weight_cache_bytes(recipe: Fp8Recipe | str) -> Fraction:
    """Bytes per linear weight element of the FP8 copies Transformer Engine caches for a step
    under ``recipe``: the row-wise copy (forward) and the column-wise copy (dgrad's transposed
    operand), 1 B each, plus their scales — MXFP8 one E8M0 byte per 32 elements per copy
    (``transformer_engine/pytorch/tensor/mxfp8_tensor.py``: ``_rowwise_scale_inv`` of
    ``[rows, cols/32]`` and ``_columnwise_scale_inv`` of ``[rows/32, cols]``, padded to
    multiples of 128 × 4, the padding not counted), blockwise one FP32 per 128×128 block per
    copy; per-tensor recipes one scale per tensor (nothing per element).

    Examples
    --------
    >>> fp8_weight_cache_bytes("delayed"), fp8_weight_cache_bytes("mxfp8")
    (Fraction(2, 1), Fraction(33, 16))
    """
    scale = SCALE_BYTES.get(Fp8Recipe(recipe).value, (Fraction(0), Fraction(0)))[0]
    return FP8_WEIGHT_CACHE_BYTES + 2 * scale


PER_TENSOR_RECIPES = (Fp8Recipe.DELAYED, Fp8Recipe.TENSORWISE)
"""The recipes with one scale per tensor, whose FP8 data serves either GEMM layout where the
tensor cores take it (:func:`keeps_fp8_transpose`)."""


def keeps_fp8_transpose(recipe: Fp8Recipe | str, device: DeviceSpec | None) -> bool:
    """Whether Transformer Engine keeps a weight's FP8 transpose beside its FP8 data under
    ``recipe`` on ``device``: False for the per-tensor recipes (:data:`PER_TENSOR_RECIPES`) on
    a part whose FP8 GEMMs take non-TN layouts, True otherwise (and where the part is not
    known). Transformer Engine 2.9 (``transformer_engine/pytorch/csrc/quantizer.cpp``,
    ``Float8Quantizer`` and ``Float8CurrentScalingQuantizer``: ``with_transpose =
    columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``, the row-wise data serving the
    column-wise use) and ``transformer_engine/pytorch/utils.py``
    ``is_non_tn_fp8_gemm_supported``: compute capability 10.x–11.x or ≥ 13.0 — the Blackwell
    parts of :data:`model.part_family.FAMILY`. MXFP8 scales along rows for one use and along
    columns for the other, so both copies stay on every part.

    Examples
    --------
    >>> from trainplan.model.hardware import DeviceSpec
    >>> gb200 = DeviceSpec(name="GB200", memory_bytes=186 * 10**9, memory_unit="GB",
    ...                    peak_flops_per_s=2.5e15)
    >>> keeps_fp8_transpose("tensorwise", gb200), keeps_fp8_transpose("mxfp8", gb200)
    (False, True)
    >>> keeps_fp8_transpose("delayed", None)
    True
    """
    if device is None or Fp8Recipe(recipe) not in PER_TENSOR_RECIPES:
        return True
    return FAMILY.get(device.part) != "blackwell"


def fp8_activation_bytes(recipe: Fp8Recipe | str) -> Fraction:
    """Bytes per element of a linear layer's input saved for its weight gradient under
    ``recipe``: Transformer Engine keeps only the column-wise copy ("Discard row-wise data
    since it is not needed in backward pass": ``transformer_engine/pytorch/module/linear.py``
    ``_linear_forward_impl``, ``update_usage(rowwise_usage=False, columnwise_usage=True)``),
    1 B, plus its scales: MXFP8 1/32 B, blockwise 4/128 B.

    Examples
    --------
    >>> fp8_activation_bytes("tensorwise"), fp8_activation_bytes("mxfp8")
    (Fraction(1, 1), Fraction(33, 32))
    """
    scale = SCALE_BYTES.get(Fp8Recipe(recipe).value, (Fraction(0), Fraction(0)))[1]
    return FP8_ACTIVATION_BYTES + scale


FP8_GEMM_EFFICIENCY = 0.75
"""FP8 GEMMs' fraction of the FP8 peak relative to BF16 GEMMs' fraction of the BF16 peak
(their kernel efficiency × this): on Hopper (FP8 peak 2× BF16) the linear layers' GEMMs run
2 × 0.75 = 1.5× faster, the quantisation kernels TE runs around each GEMM (casts, transposes,
amax reductions) folded in. With the linear layers most of a dense transformer's step this gives
1.3–1.4× end to end on NeMo's published FP8 layouts (``tests/model/test_precision.py``):
inside Megatron-Bridge's Performance Tuning Guide's "typically achieving a speedup of 1.2–1.5X"
for FP8 on the Transformer block's linear layers (Low Precision Training, §1) and near the 1.42×
a user measured for a 13B GPT on H100 (0.34 → 0.24 s/step, NVIDIA/Megatron-LM issue #396).
Not fitted to a row: the absolute FP8 step times of NeMo's tables are compared, with their gap,
in docs/fidelity-validation.md."""

FP8_LINEAR_INPUTS = frozenset(
    {
        "QKV projection input",
        "attention projection input",
        "query latent norm output",
        "kv latent norm output",
        "output projection input",
        "FC1 input",
        "MLP down projection input",
        "MLP FC2 input",
        "routed expert inputs (top-k copies)",
        "routed expert down projection input",
        "routed expert FC2 input",
        "shared expert down projection input",
        "shared expert FC2 input",
    }
)
"""The activation rows (:mod:`model.activations`) that are a linear layer's saved input, held in
FP8 under ``precision = fp8``; MLA's latents' norm outputs are the up-projections' inputs
(``linear_q_up_proj``, ``linear_kv_up_proj``), the latents themselves the norms' BF16 inputs."""

KEPT_HIGH_PRECISION = (
    "embedding, output layer and loss, norms, MoE router, attention core, activation functions, "
    "gradients, master weights and optimizer"
)
"""What FP8 training keeps in BF16/FP32 (DeepSeek-V3 §3.3; Transformer Engine)."""


def optimizer_state_bytes(moments: str = "fp32", master_weights: bool = True) -> int:
    """Bytes per parameter of Adam's state: two moments of ``moments`` dtype, plus an FP32
    master copy of the weights when ``master_weights``.

    Raises
    ------
    InputError
        ``moments`` not fp32 or bf16.

    Examples
    --------
    Mixed-precision Adam (ZeRO §3.1): 4 + 4 + 4 = 12; DeepSeek-V3's BF16 moments with FP32
    master weights: 4 + 2 + 2 = 8; BF16 moments and no master copy: 2 + 2 = 4.

    >>> optimizer_state_bytes(), optimizer_state_bytes("bf16"), optimizer_state_bytes("bf16", False)
    (12, 8, 4)
    """
    return (4 if master_weights else 0) + 2 * dtype_bytes("optimizer_dtype", moments)


def dtype_bytes(name: str, dtype: str) -> int:
    """Bytes per element of ``dtype`` (fp32 or bf16) for the parameter ``name``.

    Raises
    ------
    InputError
        Naming ``name`` and the allowed dtypes.
    """
    try:
        return DTYPE_BYTES[str(dtype).lower()]
    except KeyError:
        raise InputError(f"{name}: {dtype!r} is not one of fp32, bf16") from None


def check_precision(precision: Precision | str, device: DeviceSpec) -> Precision:
    """The precision, checked against the device.

    Raises
    ------
    InputError
        Not bf16 or fp8, or fp8 on a device without FP8 tensor cores.
    """
    try:
        p = Precision(str(precision).lower())
    except ValueError:
        raise InputError(f"precision: {precision!r} is not one of bf16, fp8") from None
    if p is Precision.FP8 and device.fp8_flops_per_s is None:
        raise InputError(
            f"precision: fp8 needs FP8 tensor cores (Hopper, Blackwell, MI300, Gaudi 3); the "
            f"{device.name} has none in {device.figures_from}"
        )
    return p


def linear_speedup(precision: Precision | str, device: DeviceSpec) -> float:
    """How much faster the linear layers' GEMMs run than in BF16: 1 for bf16; for fp8 the FP8
    peak over the BF16 peak × :data:`FP8_GEMM_EFFICIENCY`.

    Examples
    --------
    >>> from trainplan.model.hardware import DeviceSpec
    >>> h100 = DeviceSpec(name="H100", memory_bytes=80 * 10**9, memory_unit="GB",
    ...                   peak_flops_per_s=989.4e12, fp8_flops_per_s=1978.9e12)
    >>> round(linear_speedup("fp8", h100), 4)
    1.5001
    """
    p = check_precision(precision, device)
    if p is Precision.BF16:
        return 1.0
    assert device.fp8_flops_per_s is not None
    return device.fp8_flops_per_s / device.peak_flops_per_s * FP8_GEMM_EFFICIENCY


def check_fp8_activation_storage(framework: str, storage: str) -> None:
    """Refuse an ``fp8_activation_storage`` other than ``linear_inputs`` outside the
    ``textbook`` profile: DeepSeek-V3's activation storage (§3.3.3) runs in DeepSeek's own
    framework, which ``textbook`` stands for (with DualPipe); Transformer Engine (Megatron-Core)
    and torchao (torchtitan) save each linear layer's input as :mod:`model.activations` counts.

    Raises
    ------
    LayoutError
        Another storage under ``megatron``, ``deepspeed`` or ``fsdp2``.

    >>> check_fp8_activation_storage("textbook", "deepseek")
    >>> check_fp8_activation_storage("megatron", "linear_inputs")
    """
    if storage != "linear_inputs" and str(framework) != "textbook":
        raise LayoutError(
            f"fp8_activation_storage: {storage} is DeepSeek's own framework's (the textbook "
            f"profile), not {framework}'s (its linear layers save their own inputs)"
        )


def fp8_recipe_of(framework: str, recipe: Fp8Recipe | str | None) -> Fp8Recipe:
    """The FP8 recipe ``framework`` runs: ``recipe`` when given, else the framework's default —
    torchao's tensorwise dynamic scaling under ``fsdp2`` (torchtitan's Float8 converter builds
    ``Float8LinearConfig.from_recipe_name``; torchao ``torchao/float8/config.py``
    ``Float8LinearRecipeName``: TENSORWISE is the default, and torchtitan's ``recipe_name`` was
    None, that default, at the 2024–2025 releases the validation rows ran), Transformer Engine's
    delayed scaling elsewhere, on every part (Megatron-Core ``transformer_config.py``
    ``fp8_recipe = "delayed"``). Not Transformer Engine's own default: from v2.0 (544dd14b4) to
    d0067d0da ``get_default_fp8_recipe`` returns ``MXFP8BlockScaling()`` at compute capability
    10.0–11.x (B200, B300, GB200, GB300; current scaling at 12.x since v2.7), but only an
    ``fp8_autocast`` given no recipe reads it, and ``deepspeed``'s one FP8 stack gives one:
    DeepSpeed edaa72212 calls no Transformer Engine, and Megatron-DeepSpeed 4efb479d
    ``ParallelTransformer.__init__`` builds ``DelayedScaling`` and passes it to ``fp8_autocast``
    (:mod:`model.deepspeed_fp8`; HF Accelerate 16cb6eb8 ``apply_fp8_autowrap`` also builds
    ``DelayedScaling`` unless ``use_mxfp8_block_scaling``). ``textbook`` runs no framework's
    code: it keeps per-tensor delayed scaling (Micikevicius et al. 2022's per-tensor scales;
    Transformer Engine's default before v2.0, v1.13 ``get_default_fp8_recipe``). The one place
    the default is read: memory, time and the printed assumptions call it.

    >>> str(fp8_recipe_of("fsdp2", None)), str(fp8_recipe_of("megatron", None))
    ('tensorwise', 'delayed')
    >>> str(fp8_recipe_of("fsdp2", "mxfp8"))
    'mxfp8'
    >>> str(fp8_recipe_of("deepspeed", None)), str(fp8_recipe_of("textbook", None))
    ('delayed', 'delayed')
    """
    if recipe is not None:
        return Fp8Recipe(str(recipe).lower())
    return Fp8Recipe.TENSORWISE if str(framework) == "fsdp2" else Fp8Recipe.DELAYED


def check_framework_fp8_recipe(framework: str, recipe: Fp8Recipe | str | None) -> None:
    """Refuse under ``deepspeed`` every recipe but delayed scaling, at every tp: its one FP8
    stack, Megatron-DeepSpeed (f4157bea ``megatron/model/transformer.py``
    ``ParallelTransformer.__init__``), builds ``DelayedScaling`` whatever the parallel sizes and
    ``forward`` passes it to ``fp8_autocast``; its arguments name no other recipe
    (:mod:`model.deepspeed_fp8`). Refuse under ``fsdp2`` the recipes torchtitan does not run:

    * delayed scaling: torchao's Float8 training scales dynamically only (delayed scaling was
      deleted from ``torchao.float8``, pytorch/ao d37019636, February 2025; its recipes are
      tensorwise, rowwise and rowwise_with_gw_hp);
    * blockwise: torchtitan offers no blockwise recipe. 820504e ``torchtitan/config_manager.py``:
      ``Float8.recipe_name: Literal["tensorwise", "rowwise", "rowwise_with_gw_hp"] | None``
      (None: tensorwise) and ``MX.recipe_name: Literal["mxfp8"]``; b5bcd76c
      ``components/quantization/float8.py`` ``Float8LinearConverter.Config.recipe_name:
      Literal["rowwise", "rowwise_with_gw_hp"]``. Blockwise FP8 (``Float8BlockScaling``) is
      Transformer Engine's.

    Raises
    ------
    LayoutError
        ``fp8_recipe`` delayed or blockwise with ``framework`` fsdp2; tensorwise, blockwise or
        mxfp8 with ``framework`` deepspeed.

    >>> check_framework_fp8_recipe("megatron", "delayed")
    >>> check_framework_fp8_recipe("fsdp2", None)
    >>> check_framework_fp8_recipe("fsdp2", "blockwise")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: fp8_recipe: blockwise is Transformer Engine's ...
    """
    if recipe is None:
        return
    if str(framework) == "deepspeed" and Fp8Recipe(str(recipe).lower()) is not Fp8Recipe.DELAYED:
        raise LayoutError(
            f"fp8_recipe: {recipe} with `framework` deepspeed: Megatron-DeepSpeed, its one FP8 "
            "stack, scales with Transformer Engine's DelayedScaling only, at every tp (use "
            "`fp8_recipe` delayed or `framework` megatron)"
        )
    if str(framework) != "fsdp2":
        return
    if Fp8Recipe(str(recipe).lower()) is Fp8Recipe.DELAYED:
        raise LayoutError(
            "fp8_recipe: delayed is Transformer Engine's; fsdp2 runs torchao's Float8, which "
            "scales dynamically only (use tensorwise, or `framework` megatron)"
        )
    if Fp8Recipe(str(recipe).lower()) is Fp8Recipe.BLOCKWISE:
        raise LayoutError(
            "fp8_recipe: blockwise is Transformer Engine's (Float8BlockScaling); torchtitan "
            "(`framework` fsdp2) offers torchao's tensorwise (at 9dec370, the validation "
            "runs'), rowwise, rowwise_with_gw_hp and mxfp8 (at b5bcd76c6), no blockwise (use "
            "tensorwise or mxfp8, or `framework` megatron)"
        )


def parse_fp8_fields(
    precision: Precision, recipe: Fp8Recipe | str | None, param_gather: bool, storage: str
) -> Fp8Recipe | None:
    """The training spec's FP8 fields checked against its ``precision`` (already parsed):
    ``recipe`` parsed (None stays None: the framework's default, :func:`fp8_recipe_of`),
    ``param_gather`` (FP8 primary weights) and an FP8 activation ``storage`` other than
    ``linear_inputs`` need precision fp8; ``storage`` one of :data:`FP8_ACTIVATION_STORAGE`.

    Raises
    ------
    InputError
        One line naming the field, its value and the rule.

    >>> parse_fp8_fields(Precision.FP8, "MXFP8", False, "linear_inputs")
    <Fp8Recipe.MXFP8: 'mxfp8'>
    """
    if param_gather and precision is not Precision.FP8:
        raise InputError(
            f"fp8_param_gather: FP8 primary weights need precision fp8, not {precision}"
        )
    if storage not in FP8_ACTIVATION_STORAGE:
        raise InputError(
            f"fp8_activation_storage: {storage!r} is not one of {', '.join(FP8_ACTIVATION_STORAGE)}"
        )
    if storage != "linear_inputs" and precision is not Precision.FP8:
        raise InputError(
            f"fp8_activation_storage: {storage} stores FP8 activations and needs precision fp8, "
            f"not {precision}"
        )
    if recipe is None:
        return None
    if precision is not Precision.FP8:
        raise InputError(
            f"fp8_recipe: {recipe} applies only with precision fp8 ({precision} given)"
        )
    try:
        return Fp8Recipe(str(recipe).lower())
    except ValueError:
        allowed = ", ".join(r.value for r in Fp8Recipe)
        raise InputError(f"fp8_recipe: {recipe!r} is not one of {allowed}") from None
