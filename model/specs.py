"""What is trained (:class:`ModelSpec`, :class:`Architecture`) and how (:class:`TrainingSpec`).

Symbols follow docs/concepts/conventions.md "Units and symbols":
L layers, h hidden size, a attention heads, g KV heads, d head dim,
f FFN hidden size, V vocabulary, s sequence length, B global batch (sequences).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from trainplan.model.arch_checks import check_attention
from trainplan.model.arch_parts import (
    AttentionKind,
    MLASpec,
    Mlp,
    MoESpec,
    Norm,
    PositionEmbedding,
    positive,
)
from trainplan.model.attention import AttentionSpan, pattern_span
from trainplan.model.errors import InputError
from trainplan.model.frameworks import DistributedOptimizer
from trainplan.model.loss_memory import cross_entropy_fusion_of
from trainplan.model.moe_run import DROPLESS, MoERun
from trainplan.model.offload import NO_OFFLOAD, Offload
from trainplan.model.packing import Documents
from trainplan.model.precision import Fp8Recipe, Precision, parse_fp8_fields
from trainplan.model.recompute_modules import DEFAULT_RECOMPUTE_MODULES, parse_recompute_modules

__all__ = [
    "Mlp",
    "Norm",
    "AttentionKind",
    "AttentionSpan",
    "PositionEmbedding",
    "MoESpec",
    "MLASpec",
    "Architecture",
    "TrainingSpec",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Architecture:
    """Dimensions of a decoder-only transformer (GPT, Llama, Mistral, Mixtral, Qwen2/3, Gemma 2/3,
    gpt-oss, Llama 4, Phi-3, DeepSeek-V3 families)."""

    num_layers: int
    """L, transformer layers."""
    hidden_size: int
    """h, model width."""
    num_attention_heads: int
    """a, query heads."""
    ffn_hidden_size: int
    """f, FFN hidden size of a dense layer (4h for GPT)."""
    vocab_size: int
    """V, vocabulary (before any padding)."""
    num_kv_heads: int | None = None
    """g, key/value heads (GQA); None means ``num_attention_heads`` (MHA)."""
    head_dim: int | None = None
    """d, per-head dims; None means ``hidden_size / num_attention_heads``."""
    mlp: Mlp = Mlp.GELU
    norm: Norm = Norm.LAYERNORM
    attention: AttentionKind = AttentionKind.MHA
    position_embedding: PositionEmbedding = PositionEmbedding.ROPE
    max_position_embeddings: int | None = None
    """Rows of a learned position table (GPT: the training sequence length)."""
    linear_bias: bool = False
    """Biases on every linear layer (GPT-2/3, Megatron GPT); none in Llama."""
    tie_embeddings: bool = False
    """Output layer shares the input embedding matrix."""
    dropout: bool = False
    """Dropout after attention probabilities, attention output and MLP output (GPT); none in Llama."""
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    qkv_bias: bool = False
    """Biases on the q, k and v projections only (Qwen2/2.5: ``a·d + 2·g·d`` per layer); not
    with ``linear_bias``, which puts them on every linear layer."""
    qk_norm: bool = False
    """An RMSNorm over the head dim on queries and keys before QKᵀ, one learned weight of d each
    (Qwen3, Gemma 3: ``q_norm``, ``k_norm``; 2·d parameters per layer)."""
    post_norms: bool = False
    """Norms after the attention and the FFN too, before each residual add (Gemma 2/3's
    ``post_attention_layernorm``/``post_feedforward_layernorm``): four norms per layer."""
    sliding_window: int | None = None
    """W, keys a query of a ``local`` layer attends to, its own included (Mistral 7B 4,096;
    Gemma 3 1,024; gpt-oss 128); :mod:`model.attention`."""
    attention_chunk_size: int | None = None
    """C, tokens per chunk of a ``chunked`` layer (Llama 4: 8,192)."""
    attention_pattern: tuple[AttentionSpan, ...] = ()
    """The layers' spans, repeated over the layers (layer i takes entry i mod its length):
    ``("local", "global")`` for Gemma 2 and gpt-oss, five ``local`` and one ``global`` for
    Gemma 3, three ``chunked`` and one ``global`` for Llama 4. Empty: every layer ``local`` when
    only ``sliding_window`` is given (Mistral), every layer ``chunked`` when only
    ``attention_chunk_size`` is, else every layer ``global``."""
    attention_sinks: bool = False
    """A learned logit per head joins each row's softmax (gpt-oss ``sinks``): ``a`` parameters
    per layer, one more score column without FlashAttention; no key, so no matmul FLOPs."""
    attention_softcapping: bool = False
    """Attention logits soft-capped, ``cap·tanh(x/cap)`` (Gemma 2 ``attn_logit_softcapping``):
    without FlashAttention the tanh output is one more ``[b, a, s, s]`` tensor kept for
    backward; FlashAttention ≥ 2.6 applies the cap inside the kernel."""
    final_logit_softcapping: bool = False
    """The output logits soft-capped (Gemma 2 ``final_logit_softcapping``): the tanh output,
    ``β·S·V/tp``, is kept for backward besides the FP32 logits."""
    mtp_layers: int = 0
    """D, multi-token-prediction modules (DeepSeek-V3 §2.2, ``num_nextn_predict_layers`` = 1):
    each adds a projection 2h → h, two RMSNorms, one transformer block of the kind the layer
    index L + k would have, and a final RMSNorm, and runs the shared output head once more; it
    shares the embedding and the output head with the main model and sits on the last pipeline
    stage (Megatron-Core's default placement)."""
    glu_clamp: bool = False
    """The gated MLP's two halves clamped before the activation (gpt-oss ``swiglu_limit``)."""
    yarn_rope: bool = False
    """RoPE with YaRN frequency scaling (gpt-oss ``rope_scaling`` type ``yarn``)."""
    value_head: bool = False
    """The output layer is a value head, ``[h → 1]`` whole on every tensor-parallel rank, in
    place of the ``[h → V]`` LM head: the network of an RLHF critic or reward model (one number
    per token). The input embedding stays, tied or not. What it changes (parameters, logits,
    FLOPs) is :mod:`model.value_head`'s rule."""
    value_head_bias: bool = False
    """With ``value_head``: the head has a bias (one parameter more; verl's heads do, OpenRLHF's
    does not: :func:`model.value_head.value_head_bias`)."""

    def __post_init__(self) -> None:
        for name, kind in (
            ("mlp", Mlp),
            ("norm", Norm),
            ("attention", AttentionKind),
            ("position_embedding", PositionEmbedding),
        ):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, kind(str(value).lower()))
            except ValueError:
                allowed = ", ".join(k.value for k in kind)
                raise InputError(f"model.{name}: {value!r} is not one of {allowed}") from None
        positive(
            "model",
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            num_attention_heads=self.num_attention_heads,
            ffn_hidden_size=self.ffn_hidden_size,
            vocab_size=self.vocab_size,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            max_position_embeddings=self.max_position_embeddings,
        )
        if self.num_attention_heads % self.kv_heads:
            raise InputError(
                f"model.num_kv_heads: {self.kv_heads} must divide num_attention_heads = "
                f"{self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise InputError(
                f"model.hidden_size: {self.hidden_size} is not divisible by num_attention_heads = "
                f"{self.num_attention_heads}; give `head_dim`"
            )
        if (self.attention is AttentionKind.MLA) != (self.mla is not None):
            raise InputError("model.attention: 'mla' needs an [mla] table, and only it")
        if (
            self.position_embedding is PositionEmbedding.LEARNED
            and not self.max_position_embeddings
        ):
            raise InputError("model.max_position_embeddings: required with learned positions")
        if self.moe:
            self.moe.check_layers(self.num_layers)
        check_attention(self)
        fields = (f for f in self.__dataclass_fields__ if f != "_hash")
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f) for f in fields)))

    _hash: int = field(default=0, init=False, repr=False, compare=False)
    """Cached hash (architectures key every cached cost term)."""

    def __hash__(self) -> int:
        return self._hash

    @property
    def kv_heads(self) -> int:
        """g: key/value heads (a for MHA)."""
        return self.num_kv_heads or self.num_attention_heads

    @property
    def dim_per_head(self) -> int:
        """d: per-head dims."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def num_moe_layers(self) -> int:
        """Layers of the main model whose FFN is a mixture of experts."""
        return sum(map(self.is_moe_layer, range(self.num_layers)))

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based; L, L + 1, … are the MTP blocks) has a MoE FFN
        (:meth:`MoESpec.is_moe`)."""
        return self.moe is not None and self.moe.is_moe(index)

    def kind_index(self, moe: bool) -> int | None:
        """The first layer (main or MTP) whose FFN is MoE (``moe``) or dense; None when there is
        none. A layer's parameters, stored tensors and matmul FLOPs depend only on that kind."""
        return _kind_index(self, moe)

    def layer_span(self, index: int) -> AttentionSpan:
        """The attention span of layer ``index`` (:attr:`attention_pattern`, repeated)."""
        return pattern_span(self.attention_pattern, index)

    def span_width(self, span: AttentionSpan) -> int | None:
        """W for ``local``, C for ``chunked``, None for ``global``."""
        if span is AttentionSpan.LOCAL:
            return self.sliding_window
        if span is AttentionSpan.CHUNKED:
            return self.attention_chunk_size
        return None


@lru_cache(maxsize=1024)
def _kind_index(arch: Architecture, moe: bool) -> int | None:
    """:meth:`Architecture.kind_index`, cached (legality and every per-layer figure ask)."""
    total = arch.num_layers + arch.mtp_layers
    return next((i for i in range(total) if arch.is_moe_layer(i) == moe), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSpec:
    """The workload and numerics of one training step. Defaults: BF16 weights and gradients,
    mixed-precision Adam (16 B/param; Rajbhandari et al. 2019, §3.1), 16-bit activations,
    FlashAttention on."""

    seq_len: int
    """s, tokens per sequence."""
    global_batch_size: int
    """B, sequences per optimizer step."""
    flash_attention: bool = True
    """FlashAttention: no s×s score, softmax or dropout tensors are stored (drops 5·a·s·s·b)."""
    weight_bytes: int = 2
    """Bytes per parameter of the working weights (BF16)."""
    gradient_bytes: int | None = None
    """Bytes per gradient element as accumulated and reduced: 2 (BF16) or 4 (FP32). None = the
    framework's own default with bf16 parameters (:func:`model.mechanisms.mechanism`: FP32
    ``main_grad`` in Megatron-Core, FP32 reduction in FSDP2 as torchtitan sets it, the parameter
    dtype in DeepSpeed ZeRO and in the textbook's 16 B/param)."""
    optimizer_bytes: int = 12
    """Bytes per parameter of optimizer state (FP32 master 4 + Adam moments 4 + 4)."""
    activation_bytes: int = 2
    """Bytes per activation element (16-bit)."""
    offload: Offload = NO_OFFLOAD
    """Optimizer state and parameters on the host (:mod:`model.offload`)."""
    precision: Precision = Precision.BF16
    """The linear layers' GEMM precision: ``bf16`` or ``fp8`` (Transformer Engine: cached FP8
    weight copies, FP8-saved linear inputs, GEMMs at the FP8 peak; :mod:`model.precision`)."""
    fp8_recipe: Fp8Recipe | None = None
    """How FP8 tensors are scaled under ``precision = fp8`` (:class:`model.precision.Fp8Recipe`,
    Megatron-Core's ``--fp8-recipe``): delayed (the default), tensorwise, blockwise, mxfp8 —
    the linear GEMMs' published speed-up (:func:`model.op_rates.fp8_linear_speedups`) and the
    scales' bytes (:func:`model.precision.fp8_weight_cache_bytes`). None under bf16."""
    activation_convention: str = "paper"
    """``paper`` (Korthikanti et al.'s count; the default) or ``pytorch`` (also what PyTorch
    kernels keep: fp32 norm statistics, FlashAttention's logsumexp, eager SwiGLU's SiLU output,
    rotary tables, MoE routing indices; see :mod:`model.activations`, measured in
    ``tests/fidelity``)."""

    pipeline_frees_stage_tensors: bool = False
    """Under ``fsdp2`` with pp > 1: the pipeline runtime is Meta's for Llama 3 (arXiv 2407.21783
    §3.3.2: "we proactively deallocate tensors that will not be used for future computation,
    including the input and output tensors of each pipeline stage"; §3.3.1: no reshard after
    forward). False (the default) is PyTorch's ``torch.distributed.pipelining`` as torchtitan
    runs it: stage outputs kept in ``fwd_cache`` until their backward, one receive buffer per
    micro-batch for activations and for gradients, the last stage's outputs in ``output_chunks``
    until the next step (:mod:`model.terms.activations`, :func:`model.loss_memory.
    output_chunks_bytes`), whole model chunks gathered and freed by the multi-stage schedules'
    runtime (:mod:`model.fsdp2_pipeline`). The other profiles keep none of these."""
    pipeline_keeps_outputs: bool = False
    """Under ``fsdp2`` with pp > 1: the pipeline schedule keeps the last stage's output (the BF16
    logits) of every micro-batch until the next step (:func:`model.loss_memory.output_chunks_bytes`),
    as torchtitan's trainer had it until e5ef99aab (2025-10-22, "Update PP to release memory
    earlier", #1922). Since then ``torchtitan/trainer.py`` calls the schedule's
    ``step(..., return_outputs=False)``, and ``forward_one_chunk(..., save_forward_output=False)``
    (``torch/distributed/pipelining/stage.py``) keeps none: False, the default, is today's
    torchtitan. The other profiles keep no logits."""
    cpu_offloading_num_layers: int = 0
    """Transformer layers whose saved activations go to the host between forward and backward,
    whole (Megatron-Core's ``--cpu-offloading-num-layers`` with ``cpu_offloading`` and
    ``cpu_offloading_activations``, through Transformer Engine's ``get_cpu_offload_context``;
    :func:`model.activation_offload.layer_offload_seconds`). 0 (the default) offloads none;
    ``megatron`` with pp = 1, recompute none and dense layers only
    (:func:`model.activation_offload.check_layer_offload`)."""
    cross_entropy_fusion_impl: str = "none"
    """Which cross entropy Megatron-Core runs (:class:`model.loss_memory.CrossEntropyFusion`,
    named as Megatron Bridge's ``cross_entropy_fusion_impl``): ``none`` (the default, Megatron-LM's:
    the unfused vocab-parallel loss), ``native`` (``--cross-entropy-loss-fusion``, Megatron-Core's
    ``fused_vocab_parallel_cross_entropy``) or ``te`` (with ``--cross-entropy-fusion-impl te``,
    Transformer Engine's ``parallel_cross_entropy``, which writes the gradient into the logits
    buffer). What the last stage keeps and holds for the loss
    (:func:`model.loss_memory.loss_peak_bytes_per_element`) and its passes over the logits
    (:func:`model.ops.output_ops`). ``megatron`` only
    (:func:`model.loss_memory.check_cross_entropy_fusion`)."""

    memory_efficient_norm: bool = False
    """LayerNorm / RMSNorm keep their output (which the next projection keeps anyway) and fp32
    rstd instead of their input: Apex ``FusedLayerNorm`` / ``FusedRMSNorm(memory_efficient=True)``,
    Megatron-LM ``--memory-efficient-layer-norm``. Drops the two ``β·S·h`` norm inputs of every
    layer (so a pipeline stage's input tensor is needed by nothing and can be freed, as Llama 3
    §3.3.2 does); measured in ``tests/fidelity``."""
    compile: bool | None = None
    """torchtitan's ``[training] compile`` (``torch.compile`` of each block): Inductor fuses the
    elementwise passes; false runs them as PyTorch's eager operators (:mod:`model.elementwise`).
    None = the framework's default (``fsdp2``: torchtitan's, false). Only ``fsdp2`` reads it;
    the others' layers are fused kernels and refuse it (:func:`model.elementwise.elementwise_mode`)."""
    gathered_block_inputs: bool | None = None
    """Whether tensor parallelism keeps the attention and MLP blocks' all-gathered inputs for
    backward, whole on every tp rank (:attr:`model.activations.ActivationContext.
    gathered_block_inputs`). None = the framework profile's
    (:attr:`model.frameworks.Framework.gathers_block_inputs`: ``fsdp2`` runs torchtitan's DTensor
    plan, which keeps them; Megatron-Core keeps the sequence shard). False under ``fsdp2`` is FSDP
    beside a tensor parallelism that keeps the shard, as Meta's Llama 3 stack must have (its
    published layouts fit only so)."""

    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES
    """What selective recomputation recomputes, as Megatron-Core's ``--recompute-modules``
    names it (:mod:`model.recompute_modules`: ``core_attn``, ``layernorm``, ``mla_up_proj``,
    ``mlp``, ``moe_act``, ``moe``, ``shared_experts``); the default is the attention core,
    Korthikanti et al.'s selective recomputation. Other modules need the ``megatron`` (or
    ``textbook``) profile and ``recompute = selective`` (:func:`model.recompute_modules.check_recompute_modules`)."""

    fp8_param_gather: bool = False
    """The linear weights all-gathered at 1 B an element: ``megatron``, FP8 primary weights
    (``--fp8-param-gather``; NeMo's FP8 current scaling recipe), only the transpose cached
    (:func:`model.memory.cache_bytes_per_element`); ``fsdp2``, torchao's FP8 all-gather of FP32
    shards (torchtitan ``enable_fsdp_float8_all_gather``, :func:`model.fp8_gathers.
    fp8_param_gathers`). Needs ``precision = fp8``; refusals:
    :func:`model.fp8_gather_rules.check_fp8_param_gather`."""

    fsdp_double_buffer: bool = False
    """Megatron-FSDP's ``fsdp_double_buffer`` (Megatron-LM ``--fsdp-double-buffer``; forced by
    ``nccl_ub``): the gathered weights and the unsharded gradient buckets of the layers come
    from persistent pools of two units instead of the caching allocator (Megatron-LM
    ``param_and_grad_buffer.py`` ``FixedPoolAllocator``). Read under ``megatron`` ZeRO-3 only."""
    flat_parameters: bool = False
    """``fsdp2`` with pp 1 only: the run is PyTorch FSDP1 (``FullyShardedDataParallel``, flat
    parameters), its copies around the collectives FSDP1's (:mod:`model.fsdp2_copies`)."""
    deepspeed_overlap_comm: bool = False
    """DeepSpeed's ``zero_optimization.overlap_comm`` at ZeRO-1/2 (ignored elsewhere; DeepSpeed
    edaa72212 ``zero/config.py`` ``overlap_comm_valid``: off below ZeRO-3 unless set). Off: the
    reductions run on the compute stream (:func:`model.comm.reduces_beside_compute`); on: beside
    the backward, with a second IPG bucket (:func:`model.mechanisms.mechanism`)."""
    seq_parallel_communication_data_type: str = "fp32"
    """DeepSpeed's, fp32 (its default) or bf16: the gradients' dtype on the wire under Ulysses
    (``deepspeed``, cp > 1; :func:`model.deepspeed_mechanisms.sp_comm_bytes`)."""
    bias_dropout_fusion: bool = True
    """Megatron-DeepSpeed's TorchScript bias-dropout-add (false: ``--no-bias-dropout-fusion``),
    which keeps a bool mask per residual add at any dropout rate
    (:data:`model.activation_rows.BIAS_DROPOUT_MASKS`). Read under ``deepspeed`` only."""
    sac_saves_scaled_mm: bool = True
    """torchtitan's op-level selective checkpointing (``fsdp2``, ``recompute = selective``)
    under FP8 saves the FP8 GEMMs' outputs (``aten._scaled_mm``, in today's save list); false:
    the list before torchtitan 114151ad4, without ``aten._scaled_mm``, which recomputes every
    FP8 linear in backward and keeps none of their outputs (:mod:`model.op_checkpoint`). Read
    under ``fsdp2`` with ``precision = fp8`` only (:func:`model.key_rules.check_sac_scaled_mm`)."""

    distributed_optimizer: DistributedOptimizer = DistributedOptimizer.MCORE
    """Which implementation runs the ``megatron`` profile's ZeRO-1, by NeMo's name
    (:class:`model.frameworks.DistributedOptimizer`): ``mcore_distributed_optim`` (the default,
    Megatron-Core's distributed optimizer) or ``distributed_fused_adam`` (Apex's, as NeMo's
    launcher configurations up to 24.x run it: :func:`model.mechanisms.mechanism`). Another
    profile or stage refuses ``distributed_fused_adam``
    (:func:`model.frameworks.check_distributed_optimizer`)."""

    fp8_activation_storage: str = "linear_inputs"
    """How FP8 training stores activations (:data:`model.precision.FP8_ACTIVATION_STORAGE`):
    ``linear_inputs`` (Transformer Engine, the default) or ``deepseek_v3`` (DeepSeek-V3 §3.3.3:
    the attention output once in E5M6, the routed experts' SwiGLU inputs in FP8). Needs
    ``precision = fp8``; ``deepseek_v3`` runs in DeepSeek's own framework only (the ``textbook``
    profile, :mod:`model.legality`)."""

    documents: Documents | None = None
    """Each sequence packs documents of this length distribution under document masking
    (:mod:`model.packing`): attention FLOPs and time follow Σ lᵢ² of the documents, not s².
    None: each sequence is one document."""
    moe_run: MoERun = DROPLESS
    """How the MoE layers route and dispatch (:class:`model.moe_run.MoERun`: capacity factor,
    padding, imbalance, node-limited routing, the dispatcher and the all-to-all's overlap)."""
    muon_tp_mode: str | None = None
    """How Muon treats a tensor-parallel matrix, as Megatron-Core's ``--muon-tp-mode`` names it:
    ``duplicated`` (its default: each matrix all-gathered over tp and orthogonalised whole on
    every tp rank) or ``blockwise`` (each tp rank orthogonalises its own block, nothing
    gathered); None = the framework's (:func:`model.muon.muon_tp_gathers`). Its
    ``distributed`` is refused (not modelled). Megatron only."""
    runs_backward: bool = True
    """Whether the step runs a backward pass. False for an RLHF role that only scores (reference,
    reward: Megatron-Core's ``forward_only`` pass): no weight gradient, so no placeholder weight
    gradient is cached (:mod:`model.terms.dummy_wgrads`)."""

    def __post_init__(self) -> None:
        positive("training", seq_len=self.seq_len, global_batch_size=self.global_batch_size)
        object.__setattr__(
            self, "recompute_modules", parse_recompute_modules(self.recompute_modules)
        )
        if self.activation_convention not in ("paper", "pytorch"):
            raise InputError(
                f"training.activation_convention: {self.activation_convention!r} is not one of "
                "paper, pytorch"
            )
        try:
            object.__setattr__(self, "precision", Precision(str(self.precision).lower()))
        except ValueError:
            raise InputError(f"precision: {self.precision!r} is not one of bf16, fp8") from None
        if self.muon_tp_mode == "distributed":
            raise InputError(
                "muon_tp_mode: 'distributed' (Megatron-Core's Newton-Schulz on tp shards) is not "
                "modelled; use duplicated (its default) or blockwise"
            )
        if self.muon_tp_mode not in (None, "blockwise", "duplicated"):
            raise InputError(
                f"muon_tp_mode: {self.muon_tp_mode!r} is not one of duplicated, blockwise"
            )
        fusion = cross_entropy_fusion_of(self.cross_entropy_fusion_impl)
        object.__setattr__(self, "cross_entropy_fusion_impl", str(fusion))
        try:
            object.__setattr__(
                self, "distributed_optimizer", DistributedOptimizer(self.distributed_optimizer)
            )
        except ValueError:
            allowed = ", ".join(d.value for d in DistributedOptimizer)
            raise InputError(
                f"distributed_optimizer: {self.distributed_optimizer!r} is not one of {allowed}"
            ) from None
        recipe = parse_fp8_fields(
            self.precision, self.fp8_recipe, self.fp8_param_gather, self.fp8_activation_storage
        )
        object.__setattr__(self, "fp8_recipe", recipe)
        _check_byte_counts(self)

    @property
    def state_bytes_per_param(self) -> int:
        """Bytes of model state per parameter in the textbook's steady state (16 for
        mixed-precision Adam; gradients of 2 bytes unless given)."""
        return self.weight_bytes + (self.gradient_bytes or 2) + self.optimizer_bytes


def _check_byte_counts(training: TrainingSpec) -> None:
    """Refuse a bytes-per-element field of ``training`` that is not a whole number >= 0
    (``gradient_bytes`` may be None: the framework's own).

    Raises
    ------
    InputError
        ``training.weight_bytes: -1 must be a whole number >= 0``.
    """
    for name in ("weight_bytes", "gradient_bytes", "optimizer_bytes", "activation_bytes"):
        value = getattr(training, name)
        if name == "gradient_bytes" and value is None:
            continue
        if not isinstance(value, int) or value < 0:
            raise InputError(f"training.{name}: {value!r} must be a whole number >= 0")
