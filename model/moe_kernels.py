"""The memory-bound passes Megatron-Core's MoE layer runs beyond the permutation, the router and
the experts' activation that :mod:`model.ops` counts for every framework.

Read from Megatron-Core at 0d8e0714 (the commit Megatron Bridge v0.2.0, the 25.11 container,
pins in ``3rdparty/``) and Transformer Engine's ``pytorch/module/fp8_padding.py``; per element
of the ``[R, h]`` rows the rank's local experts compute (``R`` = the busiest rank's routed
rows × etp, :func:`model.moe_rows.routed_rows`), β bytes per 16-bit element:

* **Sorting the chunks by local expert** (``MoEAlltoAllTokenDispatcher.dispatch_postprocess``
  and ``combine_preprocess``, ``token_dispatcher.py``): when a rank holds more than one expert
  (``num_local_experts > 1``) the all-to-all's output, ordered by source rank, is reordered by
  local expert before the experts and back after them — ``moe_utils.sort_chunks_by_idxs``
  (Transformer Engine's ``fused_sort_chunks_by_index`` under ``moe_permute_fusion``), or with
  drop-and-pad ``transpose(0, 1).contiguous()``. Two passes each reading and writing the rows:
  4β forward in 2 kernels | the same backward (each sort's gradient is the inverse sort).
  Only under the ``alltoall`` dispatcher: the flex dispatcher (DeepEP, HybridEP) hands the
  experts their rows in expert order.
* **FP8 padding** (``TEGroupedMLP.forward``: ``Fp8Padding`` before FC1, ``Fp8Unpadding`` after
  FC2, ``experts.py``): each expert's rows are padded to the recipe's alignment (16 rows, 32
  under MXFP8) by ``tex.fused_multi_row_padding``; Transformer Engine returns the input
  untouched only when every expert's count is already aligned, which routed counts are not
  (no Megatron Bridge recipe sets ``moe_router_padding_for_quantization``). Pad and unpad read
  and write the rows: 4β forward in 2 kernels | the same backward (``fused_multi_row_unpadding``
  of the input gradient, padding of the output gradient). Not under HybridEP, whose dispatch
  pads each expert's rows to the alignment itself (``_HybridEPManager.dispatch`` passes
  ``pad_multiple = get_fp8_align_size(fp8_recipe)`` under FP8), so Transformer Engine's
  padding finds them aligned.
* **FC2's bias** (models with ``linear_bias``, e.g. gpt-oss): ``linear_fc2`` is built with
  ``skip_bias_add=True`` and ``TEGroupedMLP._apply_bias`` adds it in PyTorch, one expert at a
  time: ``torch.cat([t + b * p for t, b, p in zip(split(rows), biases, split(probs))])``. Per
  local expert ``b * p`` (write β) and ``t + b·p`` (read 2β, write β), then ``cat`` (read β,
  write β): 6β in ``2·E_local + 1`` kernels | autograd: ``split``'s backward concatenates the
  gradients (2β, one kernel); per expert ``mul``'s two gradients, ``(g·p)`` summed over rows
  for the bias and ``(g·b)`` summed over ``h`` for the probability (each read β, write β, read
  β): 6β; 8β in ``4·E_local + 1`` kernels. The probabilities are in the router's dtype, the
  hidden states' (16-bit) unless ``moe_router_dtype`` is set (``router.py``
  ``Router.gating``); their ``[R, 1]`` reads are left out (under 1/h of the bytes).

Each pass is timed as every memory-bound kernel is (:func:`model.roofline.memory_seconds` plus
one ``t_kernel`` per further kernel, :func:`model.op_time.op_seconds`). Not counted here:
the FC1 bias (Transformer Engine's grouped GEMM adds it, ``skip_bias_add=False``), the
router's auxiliary-loss kernels (``[T, E]``, under 1/h of these), the all-to-all's token
counts and their device-to-host copy (bytes per expert, not per row).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.model.collective_rates import ring_latency_us
from trainplan.model.elementwise import Pass
from trainplan.model.frameworks import Framework
from trainplan.model.hardware import DeviceSpec
from trainplan.model.moe_run import Dispatcher
from trainplan.model.precision import Fp8Recipe, Precision, keeps_fp8_transpose
from trainplan.scenarios.kernel_data import collective_data

__all__ = [
    "ExpertPasses",
    "NO_EXPERT_PASSES",
    "DispatchMetadata",
    "counts_gather_seconds",
    "dispatch_metadata",
    "BIAS_GRAD_READS",
    "EXPERT_BIAS_GRAD_KERNELS",
    "expert_cast_kernels",
    "fc1_bias_grad_reads",
    "fc1_grad_kernels",
    "expert_passes_of",
    "experts_stay_bf16",
    "megatron_expert_passes",
]


@dataclass(frozen=True, slots=True)
class ExpertPasses:
    """Which of the module docstring's passes a framework's MoE layer runs."""

    megatron: bool = False
    """Megatron-Core's ``MoEAlltoAllTokenDispatcher`` chunk sort and ``TEGroupedMLP``'s
    per-expert FC2 bias; read for a dense layer too: its unfused GeGLU
    (:func:`model.unfused_glu.unfused_glu_pass`)."""
    fp8_padding: bool = False
    """``TEGroupedMLP``'s FP8 padding of each expert's rows (Megatron-Core under FP8)."""
    torchtitan: bool = False
    """torchtitan's ``AllToAllTokenDispatcher`` (the ``fsdp2`` profile): none of the passes
    above, but its all-to-all of the token counts and the host's wait on their copy
    (:func:`dispatch_metadata`, :mod:`model.torchtitan_experts`)."""
    deepspeed: bool = False
    """DeepSpeed's native ``MOELayer`` (the ``deepspeed`` profile): none of the passes above,
    but every dispatch buffer is ``E·C`` rows on both sides of the all-to-all, padded whether
    or not the recipe asks (:func:`model.moe_rows.row_factors` with ``padded``)."""


NO_EXPERT_PASSES = ExpertPasses()
"""The textbook profile: none of these passes counted."""


def expert_passes_of(framework: Framework | str, precision: Precision | str) -> ExpertPasses:
    """The passes the framework profile's MoE layer runs under the recipe's precision.

    >>> expert_passes_of("megatron", "fp8")
    ExpertPasses(megatron=True, fp8_padding=True, torchtitan=False, deepspeed=False)
    >>> expert_passes_of("fsdp2", "fp8")
    ExpertPasses(megatron=False, fp8_padding=False, torchtitan=True, deepspeed=False)
    >>> expert_passes_of("deepspeed", "fp8") == ExpertPasses(deepspeed=True)
    True
    """
    if Framework(framework) is Framework.FSDP2:
        return ExpertPasses(torchtitan=True)
    if Framework(framework) is Framework.DEEPSPEED:
        return ExpertPasses(deepspeed=True)
    if Framework(framework) is not Framework.MEGATRON:
        return NO_EXPERT_PASSES
    return ExpertPasses(True, Precision(str(precision)) is Precision.FP8)


def experts_stay_bf16(framework: Framework | str, precision: Precision | str) -> bool:
    """Whether the routed experts' GEMMs stay BF16 under ``precision`` fp8 while the other
    linear layers run FP8: the ``fsdp2`` profile (torchtitan). torchtitan's
    ``Float8LinearConverter.convert`` (``torchtitan/components/quantization/float8.py``,
    b5bcd76c6) swaps ``nn.Linear`` modules for torchao's ``Float8Linear`` and nothing else; the
    routed experts (``GroupedExperts``, batched weight tensors, not ``nn.Linear``) run FP8 only
    through the separate opt-in ``Float8GroupedExpertsConverter`` (rowwise, its own converter
    entry), which the planner's fsdp2 configuration does not write. The shared experts are
    ``nn.Linear`` and run FP8.

    >>> experts_stay_bf16("fsdp2", "fp8"), experts_stay_bf16("megatron", "fp8")
    (True, False)
    >>> experts_stay_bf16("fsdp2", "bf16")
    False
    """
    return str(framework) == "fsdp2" and Precision(str(precision)) is Precision.FP8


def megatron_expert_passes(
    passes: ExpertPasses,
    rows: float,
    h: int,
    beta: int,
    local_experts: int,
    dispatcher: Dispatcher | str,
    bias: bool,
) -> tuple[tuple[str, Pass], ...]:
    """(name, :class:`model.elementwise.Pass`) of each pass the module docstring lists that
    ``passes`` runs, over ``rows`` rows of width ``h`` on a rank holding ``local_experts``
    experts under ``dispatcher``; ``bias``: the experts' linear layers have biases.

    Examples
    --------
    GPT OSS 120B on one of 8 ranks (16 local experts), 4,096 tokens, top-4, BF16: 16,384 rows
    of 2,880, each 16-bit row pass 94,371,840 bytes (2β·R·h):

    >>> p = dict(megatron_expert_passes(ExpertPasses(True), 16384, 2880, 2, 16, "alltoall", True))
    >>> sorted(p)
    ['FC2 bias, per expert', 'expert chunk sort']
    >>> p["expert chunk sort"].forward_bytes / (2 * 2 * 16384 * 2880)  # two row passes
    2.0
    >>> b = p["FC2 bias, per expert"]
    >>> b.forward_bytes / (2 * 16384 * 2880), b.backward_bytes / (2 * 16384 * 2880)
    (6.0, 8.0)
    >>> b.forward_kernels, b.backward_kernels  # 2·16 + 1, 4·16 + 1
    (33, 65)
    """
    if not passes.megatron and not passes.fp8_padding:
        return ()
    dispatcher = Dispatcher(dispatcher)
    row_pass = 2 * beta * rows * h  # read and write the rows once
    out: list[tuple[str, Pass]] = []
    if passes.megatron and dispatcher is Dispatcher.ALLTOALL and local_experts > 1:
        out.append(("expert chunk sort", Pass(2 * row_pass, 2 * row_pass, 2, 2)))
    if passes.fp8_padding and dispatcher is not Dispatcher.HYBRIDEP:
        out.append(("FP8 padding of expert rows", Pass(2 * row_pass, 2 * row_pass, 2, 2)))
    if passes.megatron and bias:
        size = beta * rows * h
        out.append(
            (
                "FC2 bias, per expert",
                Pass(6 * size, 8 * size, 2 * local_experts + 1, 4 * local_experts + 1),
            )
        )
    return tuple(out)


EXPERT_CAST_KERNELS: dict[Fp8Recipe, int] = {
    Fp8Recipe.DELAYED: 0,
    Fp8Recipe.TENSORWISE: 4,
    Fp8Recipe.BLOCKWISE: 1,
    Fp8Recipe.MXFP8: 1,
}
"""Kernels Transformer Engine 2.9 launches per local expert to quantise one operand of a
``GroupedLinear`` (the input rows in the forward, the output gradient in the backward), beyond
one launch for the whole operand. ``tex.split_quantize`` (``pytorch/csrc/extensions/cast.cpp``
``multi_tensor_quantize_impl``) runs one fused ``nvte_multi_cast_transpose`` over every expert
only under delayed scaling (0 more per expert); every other recipe quantises "individually",
one ``Quantizer::quantize`` per expert: current scaling (``tensorwise``,
``Float8CurrentScalingQuantizer::quantize_impl``, ``pytorch/csrc/quantizer.cpp``) launches
``zero_amax_kernel`` and the amax kernel (``common/recipe/current_scaling.cu``
``launch_amax_kernel``), ``compute_scale_from_amax_kernel`` and the cast-transpose — 4;
MXFP8 (``common/util/cast_kernels.cuh`` ``mxfp8_quantize``, row- and column-wise in one
kernel) and block scaling (``nvte_quantize_v2``) — 1. Delayed scaling's 0 holds where the outputs
keep an FP8 transpose: :func:`expert_cast_kernels` gives 1 on a part that keeps none."""


def expert_cast_kernels(recipe: Fp8Recipe | str, device: DeviceSpec | None = None) -> int:
    """Kernel launches per local expert and quantised operand of a ``GroupedLinear`` under
    ``recipe`` (an :class:`model.precision.Fp8Recipe` value) on ``device``:
    :data:`EXPERT_CAST_KERNELS`, except delayed scaling on a part whose FP8 GEMMs keep no
    transpose (:func:`model.precision.keeps_fp8_transpose`: Blackwell) — 1. There the outputs
    have no column-wise data, so ``multi_tensor_quantize_impl`` (Transformer Engine v2.9
    70f536662a, ``pytorch/csrc/extensions/cast.cpp``), which fuses every expert into one
    ``nvte_multi_cast_transpose`` only where all quantizers are delayed scaling's and keep the
    transpose, calls each expert's ``Float8Quantizer::quantize`` in turn (one
    ``nvte_quantize_v2`` kernel). ``device`` None: a part that keeps the transpose.

    A grouped GEMM of ``E`` local experts pays ``(E − 1) ×`` this many kernel launches per
    quantised operand beyond the single cast the dense profile's ``te.Linear`` launches
    (:func:`model.op_time.expert_quantise_seconds`). Qwen3-30B-A3B on an H100 at EP 8 (16 local
    experts, current scaling): four quantised operands per MoE layer and micro-batch (FC1's
    and FC2's inputs, their output gradients), 4 × 15 × 4 = 240 launches.

    >>> expert_cast_kernels("tensorwise"), expert_cast_kernels("mxfp8"), expert_cast_kernels("delayed")
    (4, 1, 0)
    >>> 4 * (16 - 1) * expert_cast_kernels("tensorwise")
    240
    >>> from trainplan.topology.accelerator_file import get_part
    >>> expert_cast_kernels("delayed", get_part("H100-SXM")), expert_cast_kernels("delayed", get_part("B200"))
    (0, 1)
    """
    r = Fp8Recipe(str(recipe))
    if r is Fp8Recipe.DELAYED and not keeps_fp8_transpose(r, device):
        return 1
    return EXPERT_CAST_KERNELS[r]


EXPERT_BIAS_GRAD_KERNELS: dict[Fp8Recipe, int] = {
    Fp8Recipe.DELAYED: 2,
    Fp8Recipe.TENSORWISE: 5,
    Fp8Recipe.BLOCKWISE: 2,
    Fp8Recipe.MXFP8: 2,
}
"""Kernel launches per local expert that quantise FC1's output gradient with its bias gradient
where the experts' FC1 has a bias (``linear_bias``: Megatron-Core builds FC2 with
``skip_bias_add``, which ``TEGroupedLinear`` passes as ``return_bias``, Megatron-LM d98e8a64dd
``extensions/transformer_engine.py``, and Transformer Engine's ``GroupedLinear.__init__`` sets
``apply_bias = bias and not return_bias``: only FC1's bias is Transformer Engine's).
Transformer Engine v2.9 ``_GroupedLinear.backward`` loops over the experts under delayed,
current (``tensorwise``) and MXFP8 scaling, one ``tex.bgrad_quantize`` each
(``pytorch/csrc/extensions/bias.cpp``): fused ``nvte_quantize_dbias`` for delayed scaling and
MXFP8, the cast kernel and ``reduce_dbias`` (``common/util/cast_kernels.cuh``,
``common/transpose/cast_transpose_fusion.cu``) — 2; for current scaling ``at::sum_out`` then
the quantizer's 4 (:func:`expert_cast_kernels`) — 5. Under block scaling each expert's
``sum(dim=0)`` in PyTorch, then ``tex.split_quantize``, one quantizer call an expert — 2.
Read by :func:`fc1_grad_kernels`."""


BIAS_GRAD_READS = frozenset({Fp8Recipe.TENSORWISE, Fp8Recipe.BLOCKWISE})
"""Recipes whose FC1 bias gradient is a pass of its own over the output gradient: current
scaling's ``at::sum_out`` of ``bgrad_quantize`` (Transformer Engine v2.9 ``pytorch/csrc/
extensions/bias.cpp``: the fused ``nvte_quantize_dbias`` only for ``Float8Quantizer``, delayed
scaling's, and MXFP8) and block scaling's ``grad_output_mats[i].sum(dim=0)`` (``_GroupedLinear.
backward``), each reading the expert's rows of the BF16 gradient once; the fused kernels sum
as they cast (:func:`fc1_bias_grad_reads`)."""


def fc1_grad_kernels(recipe: Fp8Recipe | str, device: DeviceSpec | None, bias: bool) -> int:
    """Kernel launches per local expert that quantise the routed experts' FC1 output gradient
    under ``recipe`` on ``device``: :data:`EXPERT_BIAS_GRAD_KERNELS` where FC1 has a bias
    (``bias``: the model's ``linear_bias``), else :func:`expert_cast_kernels`. The one rule the
    step time (:attr:`model.grouped_gemm.GroupedFp8.fc1_grad_kernels`) and the host's call count
    (:func:`model.host_calls.expert_quantise_calls`) read.

    >>> from trainplan.topology.accelerator_file import get_part
    >>> h100 = get_part("H100-SXM")
    >>> fc1_grad_kernels("delayed", h100, False), fc1_grad_kernels("delayed", h100, True)
    (0, 2)
    >>> fc1_grad_kernels("tensorwise", h100, True)  # at::sum_out, then the quantizer's 4
    5
    """
    r = Fp8Recipe(str(recipe))
    return EXPERT_BIAS_GRAD_KERNELS[r] if bias else expert_cast_kernels(r, device)


def fc1_bias_grad_reads(recipe: Fp8Recipe | str, bias: bool) -> bool:
    """Whether FC1's bias gradient reads its BF16 output gradient once more, beyond the
    gradient's cast: under the recipes of :data:`BIAS_GRAD_READS` where FC1 has a bias. The
    fused ``nvte_quantize_dbias`` reduces the rows as it casts them; its per-tile partial sums,
    at most ``[⌈rows/64⌉, n]`` FP32 written and read again (``common/util/cast_kernels.cuh``
    ``cast_fp8_2D``, ``common/transpose/cast_transpose_fusion.cu``), are left out: at most 1/16
    of the gradient's bytes.

    >>> fc1_bias_grad_reads("tensorwise", True), fc1_bias_grad_reads("delayed", True)
    (True, False)
    >>> fc1_bias_grad_reads("tensorwise", False)
    False
    """
    return bias and Fp8Recipe(str(recipe)) in BIAS_GRAD_READS


@dataclass(frozen=True, slots=True)
class DispatchMetadata:
    """The small collectives Megatron-Core's ``MoEAlltoAllTokenDispatcher`` runs beside the
    tokens' dispatch and combine (Megatron-Core 0d8e0714, ``token_dispatcher.py``), per MoE
    layer and micro-batch on one rank."""

    probs_all_to_alls: tuple[int, int] = (0, 0)
    """(forward, backward) all-to-alls of the routed copies' probabilities, one 16-bit value
    per row (the router's dtype, the hidden states' unless ``moe_router_dtype`` is set):
    ``token_dispatch`` sends ``permuted_probs`` in an ``all_to_all`` of its own after the
    tokens', with the same splits, and autograd runs its transpose in the backward."""
    counts_all_gathers: int = 0
    """Forward all-gathers of the rank's token count per expert (``E`` int64 values per rank,
    over the expert-tensor × expert-parallel group, ``tp_ep``: ``parallel_state.
    get_expert_tensor_and_model_parallel_group``): ``preprocess`` gathers
    ``num_local_tokens_per_expert`` with ``gather_from_sequence_parallel_region`` to learn the
    output splits (no gradient flows through the counts)."""
    counts_all_to_alls: int = 0
    """Forward all-to-alls of the token counts per expert over the ep ranks: torchtitan's
    ``AllToAllTokenDispatcher._token_count_exchange`` (``all_to_all_single`` of ``E`` int64
    values, :func:`model.torchtitan_experts.counts_sent_bytes`; b5bcd76c6
    ``torchtitan/models/common/token_dispatcher.py``)."""
    host_syncs: int = 0
    """Forward waits of the host on a device-to-host copy: torchtitan's
    ``_sync_token_count_exchange`` copies the splits with ``.to("cpu", non_blocking=False)``
    before the tokens' all-to-all (:data:`model.torchtitan_experts.HOST_SYNC_S` each)."""


NO_DISPATCH_METADATA = DispatchMetadata()


def dispatch_metadata(passes: ExpertPasses, dispatcher: Dispatcher | str) -> DispatchMetadata:
    """:class:`DispatchMetadata` of the run under the ``alltoall`` dispatcher: Megatron-Core's
    (``passes.megatron``: the probabilities' all-to-alls and the counts' all-gather) or
    torchtitan's (``passes.torchtitan``: the counts' all-to-all and the host's wait); none
    otherwise (the flex dispatcher's DeepEP and HybridEP carry the probabilities and the layout
    in their own kernels; DeepSpeed is not read here).

    >>> dispatch_metadata(ExpertPasses(True), "alltoall")
    DispatchMetadata(probs_all_to_alls=(1, 1), counts_all_gathers=1, counts_all_to_alls=0, host_syncs=0)
    >>> dispatch_metadata(ExpertPasses(torchtitan=True), "alltoall").host_syncs
    1
    >>> dispatch_metadata(ExpertPasses(True), "hybridep") == NO_DISPATCH_METADATA
    True
    """
    if Dispatcher(dispatcher) is not Dispatcher.ALLTOALL:
        return NO_DISPATCH_METADATA
    if passes.torchtitan:
        return DispatchMetadata(counts_all_to_alls=1, host_syncs=1)
    return DispatchMetadata((1, 1), 1) if passes.megatron else NO_DISPATCH_METADATA


def counts_gather_seconds(
    ranks: int, scaleup: bool, per_domain: int = 1, domains: int = 0
) -> float:
    """Seconds of Megatron-Core's all-gather of the token counts per expert over ``ranks``
    (``E`` int64 values from each, 1 KB at 128 experts: ``preprocess`` in
    ``token_dispatcher.py``): NCCL's latency of a ring all-gather (``src/graph/tuning.cc``, the
    ``[nccl_latency]`` constants of ``scenarios/kernels/collectives.toml``) in the ``LL``
    protocol, the one NCCL's tuner picks for a message this small (its lowest base and per-hop
    latency; the bytes are not counted: 64 KB over 64 ranks, a few microseconds at LL's rate
    beside the hops' hundreds): the base plus ``ranks − 1`` hops, all over NVLink when the
    group's link is the scale-up domain, else with ``per_domain`` of the ranks in each domain
    those between domains over the network and the rest over NVLink at no less than NCCL's
    network overhead (:func:`model.collective_rates.ring_latency_us`, the rule of the clock's
    other collectives, :func:`model.roofline.collective_latency`); ``domains``: NCCL's node
    count of the expert-parallel group (:attr:`model.roofline.LinkTime.domains`, the ep
    group's, whose etp-wide blocks lie on the same nodes; 0: ``⌈ranks ∕ per_domain⌉``).

    >>> round(counts_gather_seconds(8, True) * 1e6, 1)  # 6.6 + 7 × 0.6 µs
    10.8
    >>> round(counts_gather_seconds(64, False) * 1e6, 1)  # 6.6 + 63 × 5.0 µs: a rank a node
    321.6
    >>> round(counts_gather_seconds(64, False, 8) * 1e6, 1)  # 6.6 + 7 × 2.7 + 56 × 1.0 µs
    81.5
    """
    if ranks <= 1:
        return 0.0
    local = ranks if scaleup else per_domain
    lat = collective_data().nccl_latency
    return ring_latency_us(lat, "all-gather", "LL", ranks, local, 0 if scaleup else domains) * 1e-6
