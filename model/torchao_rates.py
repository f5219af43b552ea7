"""How torchao's ``Float8Linear`` runs: the fsdp2 profile's FP8 linear layers (torchtitan's
``quantize.linear.float8`` converter, torchao's tensorwise recipe), timed from torchao's own
sources rather than Transformer Engine's GEMM profile (:func:`model.op_rates.recipe_speedups`,
another library's casts on another part).

* **Casts.** Under dynamic tensorwise scaling each GEMM operand is cast to FP8 on every call
  (torchao ``float8/float8_linear.py`` ``matmul_with_hp_or_float8_args``: the input and the
  weight in forward, the output gradient in backward; the weight gradient reads the forward's
  column-major copies). torchao's own accounting of those casts
  (``torchao/float8/roofline_utils.py`` ``get_tensor_memory_traffic_bytes`` and
  ``get_float8_mem_sympy``, pytorch/ao 299aacd0a, 2024-11-11): an operand whose amax reduction
  fuses with the operation before it (the input, the output gradient) moves 4 bytes per element
  (the cast reads BF16 and writes FP8 row-major and column-major); the weight, whose amax is a
  pass of its own, 6; each amax adds a second-stage kernel. :data:`CAST_BYTES`,
  :data:`CAST_KERNELS`.
* **The FP8 GEMM.** ``torch._scaled_mm`` (cuBLAS's per-tensor-scaled kernel). Its speed-up over
  the BF16 GEMM is read from torchao's published microbenchmark (:data:`TORCHAO_TENSORWISE`):
  the speed-up at which the model's own times of the benchmarked block — three GEMMs, the casts
  above, the LayerNorm and sigmoid around them — give the published figure
  (:func:`model.torchao_time.torchao_kernel_speedup`). The other published point, where casts and
  launches dominate, tests it.

torchao's benchmark (``torchao/float8/README.md``, section "Performance", pytorch/ao e2dad4a66,
2024-09-02; ``benchmarks/float8/float8_roofline.py`` at 9d9243444 times ``LNLinearSigmoid``,
BF16 against dynamic-scaling Float8, both under ``torch.compile``, forward + backward) is
published as a table by the forward's M, K, N whose text gives two points; the rest is an
image outside the repository.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.model.part_family import FAMILY, catalogue_part
from trainplan.model.precision import Fp8Recipe
from trainplan.model.roofline import RooflineParams

__all__ = [
    "TorchaoPoint",
    "TORCHAO_TENSORWISE",
    "CAST_BYTES",
    "CAST_KERNELS",
    "FP8_GATHER_CAST_BYTES",
    "FP8_GATHER_CAST_KERNELS",
    "TorchaoFp8",
    "torchao_point",
    "runs_torchao_float8",
    "cast_seconds",
]


@dataclass(frozen=True, slots=True)
class TorchaoPoint:
    """One published point of torchao's Float8 microbenchmark."""

    m: int
    """Forward rows (tokens), count."""
    k: int
    """Forward depth (in-features), count."""
    n: int
    """Forward columns (out-features), count."""
    speedup: float
    """BF16 seconds over Float8 seconds of the compiled LayerNorm → Linear → Sigmoid block,
    forward + backward (ratio)."""
    source: str


_README = (
    "pytorch/ao torchao/float8/README.md at e2dad4a66 (2024-09-02), 'Performance': tensorwise "
    "dynamic scaling, LayerNorm -> Linear -> Sigmoid forward + backward under torch.compile on "
    "NVIDIA H100"
)

TORCHAO_TENSORWISE: dict[str, tuple[TorchaoPoint, ...]] = {
    "hopper": (
        TorchaoPoint(1024, 2048, 1024, 0.80, f"{_README}, Example 1"),
        TorchaoPoint(4096, 8192, 16384, 1.39, f"{_README}, Example 2"),
    ),
}
"""Per part family, torchao's published tensorwise points, smallest first: the last times the
FP8 GEMM (:func:`model.torchao_time.torchao_kernel_speedup`), the first tests it. torchao measured
on an H100 with 2.4 TB/s HBM (``roofline_utils.py`` ``H100_PEAK_MEM_BW_BYTES_SEC``: 'custom to
Meta's H100 variant', the catalogue's H100-96GB-500W, the part of torchtitan's H100 runs); the
speed-up is read at the run's own part's rates, each Hopper part taken to reach the published
block figure."""

CAST_BYTES: tuple[int, int, int] = (4, 6, 4)
"""Bytes per element torchao's casts move: the forward's input (amax fused with the operation
before it: read BF16 2, write FP8 row-major and column-major 1 + 1), the weight (its amax pass
reads 2 more), the output gradient (as the input). ``roofline_utils.py``
``get_tensor_memory_traffic_bytes`` (dynamic scaling, ``fuse_with_prev`` for the input and the
output gradient, not for the weight) at 299aacd0a."""

CAST_KERNELS: tuple[int, int] = (5, 2)
"""Kernels the casts launch in the forward (input: the amax's second stage and the cast;
weight: the amax, its second stage and the cast) and in the input gradient (output gradient:
second stage and cast); ``get_float8_mem_sympy`` counts the three second stages as extra
kernels, the bytes above as the others."""


FP8_GATHER_CAST_BYTES: tuple[int, int, int] = (CAST_BYTES[0], 0, CAST_BYTES[2])
""":data:`CAST_BYTES` under torchao's FP8 all-gather (torchtitan's
``enable_fsdp_float8_all_gather``, :func:`model.fp8_gathers.fp8_param_gathers`): the weight
reaches ``matmul_with_hp_or_float8_args`` as the gathered ``Float8TrainingTensor``, and
``tensor_already_casted_to_fp8(weight_hp_t)`` skips its cast in the forward and in the input
gradient (which reads ``.t()`` of the same tensor: no re-cast for the transpose; pytorch/ao
36027d82d ``torchao/float8/float8_linear.py``). The cast runs instead in
``fsdp_pre_all_gather`` over the local shard (÷ the shard degree) on FSDP2's all-gather copy-in
stream (:mod:`model.fsdp2_copies`): not timed here."""

FP8_GATHER_CAST_KERNELS: tuple[int, int] = (CAST_KERNELS[0] - 3, CAST_KERNELS[1])
""":data:`CAST_KERNELS` without the weight's three forward kernels (its amax, the amax's second
stage and the cast) under torchao's FP8 all-gather (:data:`FP8_GATHER_CAST_BYTES`)."""


@dataclass(frozen=True, slots=True)
class TorchaoFp8:
    """How a part runs torchao's tensorwise ``Float8Linear`` (:func:`model.torchao_time.
    torchao_fp8_rates`)."""

    kernel_speedup: float
    """The FP8 GEMM's speed-up over BF16 at the part's rates (ratio), from the published point."""
    cast_bytes: tuple[int, int, int] = CAST_BYTES
    """:data:`CAST_BYTES`."""
    cast_kernels: tuple[int, int] = CAST_KERNELS
    """:data:`CAST_KERNELS`."""


def runs_torchao_float8(framework: str) -> bool:
    """Whether the framework's FP8 linear layers are torchao's ``Float8Linear``: ``fsdp2``
    (torchtitan's ``quantize.linear.float8`` converter, ``torchtitan/components/quantization/
    float8.py``, swaps every ``nn.Linear`` it converts for one).

    >>> runs_torchao_float8("fsdp2"), runs_torchao_float8("megatron")
    (True, False)
    """
    return framework == "fsdp2"


def torchao_point(device_name: str, recipe: Fp8Recipe | str | None) -> TorchaoPoint | None:
    """The published point that times torchao's FP8 GEMM on the part's family (the last of
    :data:`TORCHAO_TENSORWISE`); None for another recipe (torchao's delayed scaling has no
    published point; block scaling and MXFP8 are not its tensorwise recipe) or a part outside
    the families torchao measured (the layers then take Transformer Engine's profile).

    Examples
    --------
    >>> torchao_point("H200", "tensorwise").speedup
    1.39
    >>> torchao_point("B200", "tensorwise") is None, torchao_point("H100-SXM", "delayed") is None
    (True, True)
    """
    if recipe is None or Fp8Recipe(recipe) is not Fp8Recipe.TENSORWISE:
        return None
    points = TORCHAO_TENSORWISE.get(FAMILY.get(catalogue_part(device_name), ""))
    return points[-1] if points else None


def cast_seconds(
    rows: float,
    depth: float,
    cols: float,
    batch: float,
    hbm_bytes_per_s: float,
    p: RooflineParams,
    ao: TorchaoFp8,
    which: int,
) -> float:
    """Seconds of torchao's casts around pass ``which`` (0 forward, 1 input gradient, 2 weight
    gradient) of ``batch`` FP8 GEMMs ``[rows, depth] × [depth, cols]``: the forward casts its
    ``rows × depth`` input and its ``depth × cols`` weight, the input gradient its
    ``rows × depth`` output gradient, the weight gradient nothing (it reads the forward's
    column-major copies): :attr:`TorchaoFp8.cast_bytes` at the part's streaming bandwidth
    (``hbm_bytes_per_s`` × ``p.hbm_efficiency``) plus ``p.kernel_overhead_s`` per kernel of
    :attr:`TorchaoFp8.cast_kernels`.

    Examples
    --------
    A 4096-token forward through an 8192 → 16384 linear on a 2.4 TB/s H100: 4·4096·8192 +
    6·8192·16384 bytes at 0.9 of 2.4 TB/s, and 5 launches of 3 µs:

    >>> p = RooflineParams(gemm_efficiency=0.6, hbm_efficiency=0.9, kernel_overhead_s=3e-6)
    >>> round(cast_seconds(4096, 8192, 16384, 1, 2.4e12, p, TorchaoFp8(1.6), 0) * 1e6, 1)
    450.0
    >>> cast_seconds(4096, 8192, 16384, 1, 2.4e12, p, TorchaoFp8(1.6), 2)
    0.0
    """
    if which == 2:
        return 0.0
    a_in, a_w, a_go = ao.cast_bytes
    moved = (a_in * rows * depth + a_w * depth * cols) if which == 0 else a_go * rows * depth
    launches = ao.cast_kernels[which] * p.kernel_overhead_s
    return moved * batch / (hbm_bytes_per_s * p.hbm_efficiency) + launches
