"""The transformer layers the ``deepspeed`` profile can build: Megatron-DeepSpeed's.

The ``deepspeed`` profile counts DeepSpeed's engine running Megatron-DeepSpeed's model code
(deepspeedai/Megatron-DeepSpeed ``megatron/model/transformer.py``): ``ParallelTransformerLayer``
is a pre-norm layer (LayerNorm or RMSNorm before the attention and before the MLP, none after),
``ParallelAttention`` with causal full attention (FlashAttention or the core attention's
``baddbmm``) over MHA or GQA heads with RoPE or learned positions, ``ParallelMLP`` with GeLU,
SwiGLU (``args.swiglu``) or squared ReLU, and DeepSpeed's native MoE over the same
``ParallelMLP``. Its arguments (``megatron/arguments.py``) name no QK-norm, no norm after the
attention or the MLP, no GeGLU, no sliding-window, chunked or local attention, no attention
sinks, no logit soft-capping, no clamped gated activation, no YaRN frequency scaling, no
multi-latent attention and no multi-token prediction: a model with one of them cannot be built
there, so :func:`check_deepspeed_layers` refuses it rather than count a layer that does not run.

GQA: since 676a482c (FPDT, 2024-12-04) ``ParallelAttention.forward`` cuts the fused QKV output
in three equal parts when DeepSpeed's sequence parallelism is off (``each_hidden_size =
mixed_x_layer.shape[-1] // 3``) and asserts ``projection_size == kv_projection_size`` when it
is on: a GQA model runs on no later commit. Its parent, 6acc370a (2024-10-18), splits the
grouped layout (``split_tensor``) and repeats K and V to every head (``repeat_kv``); the
profile counts that commit's attention (:data:`model.activation_rows.REPEATED_KV`), the rest of
the layer being the same code at both commits (``git diff 6acc370a 4efb479d`` on
``transformer.py`` changes the QKV split, the FPDT paths and RoPE under DeepSpeed's sequence
parallelism only).
"""

from __future__ import annotations

from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.specs import Mlp

__all__ = [
    "deepspeed_missing_features",
    "check_deepspeed_layers",
    "deepspeed_pipe_refusal",
    "check_deepspeed_pipe_recompute",
    "keeps_embedding_view",
]


def deepspeed_missing_features(arch: Any, seq_len: int) -> list[str]:
    """The layer features of ``arch`` Megatron-DeepSpeed's ``ParallelTransformerLayer`` has no
    code for (the module docstring), in the order of the layer; a sliding window only where it
    is shorter than the sequence (``seq_len`` tokens: a longer window masks nothing).

    >>> from trainplan.model.specs import Architecture
    >>> gemma = Architecture(num_layers=6, hidden_size=64, num_attention_heads=4, num_kv_heads=2,
    ...     ffn_hidden_size=256, vocab_size=128, mlp="geglu", norm="rmsnorm", qk_norm=True,
    ...     post_norms=True, sliding_window=16, attention_pattern=("local", "global"))
    >>> deepspeed_missing_features(gemma, 64)
    ['QK-norm', 'local attention (sliding window 16)', 'post-norms', 'GeGLU']
    >>> llama = Architecture(num_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=2,
    ...     ffn_hidden_size=256, vocab_size=128, mlp="swiglu", norm="rmsnorm")
    >>> deepspeed_missing_features(llama, 64)
    []
    """
    out = []
    if arch.mla is not None:
        out.append("multi-latent attention")
    if arch.qk_norm:
        out.append("QK-norm")
    if arch.sliding_window is not None and arch.sliding_window < seq_len:
        out.append(f"local attention (sliding window {arch.sliding_window})")
    if arch.attention_chunk_size is not None and arch.attention_chunk_size < seq_len:
        out.append(f"chunked attention ({arch.attention_chunk_size} tokens)")
    if arch.attention_sinks:
        out.append("attention sinks")
    if arch.attention_softcapping or arch.final_logit_softcapping:
        out.append("logit soft-capping")
    if arch.yarn_rope:
        out.append("YaRN RoPE")
    if arch.post_norms:
        out.append("post-norms")
    if arch.mlp is Mlp.GEGLU:
        out.append("GeGLU")
    if arch.glu_clamp:
        out.append("a clamped gated activation")
    if arch.mtp_layers:
        out.append("multi-token prediction")
    return out


def check_deepspeed_layers(framework: Any, arch: Any, seq_len: int) -> None:
    """Refuse under ``deepspeed`` a model whose layers Megatron-DeepSpeed cannot build
    (:func:`deepspeed_missing_features`); ``arch`` None (a size-only model): nothing checked.

    Raises
    ------
    LayoutError
        ``framework`` deepspeed with a missing feature, one line naming them.

    >>> check_deepspeed_layers("megatron", None, 4096)
    """
    if framework != Framework.DEEPSPEED or arch is None:
        return
    missing = deepspeed_missing_features(arch, seq_len)
    if missing:
        raise LayoutError(
            f"framework: deepspeed runs Megatron-DeepSpeed's transformer layer, which has no "
            f"{', '.join(missing)} (use `framework` megatron or fsdp2)"
        )


def deepspeed_pipe_refusal(framework: Any, pp: int) -> str:
    """Why a per-stage plan (layers and recomputed layers chosen stage by stage) does not run
    under ``framework`` with ``pp`` stages, or "": under ``deepspeed`` with pp > 1 the model is
    Megatron-DeepSpeed's ``GPTModelPipe`` (4efb479d ``megatron/model/gpt_model.py``), which
    places the layers itself (``partition_method='type:transformer'``, balanced) and hands
    DeepSpeed's ``PipelineModule`` one ``activation_checkpoint_interval`` for every stage:
    ``checkpoint_num_layers``, or ``recompute_num_layers`` only with ``--recompute-granularity
    full --recompute-method uniform`` ("deepspeed's pipeline doesn't support the block recompute
    method"), else 0. ``PipelineModule.forward`` (DeepSpeed edaa72212
    ``deepspeed/runtime/pipe/module.py``) checkpoints each run of ``interval`` functions made of
    transformer layers only (``_is_checkpointable``): every layer of every stage, or none. No
    "first N layers of each stage" exists; ``--recompute-method block`` recomputes nothing there.

    >>> deepspeed_pipe_refusal("deepspeed", 1), deepspeed_pipe_refusal("megatron", 4)
    ('', '')
    >>> deepspeed_pipe_refusal("deepspeed", 2).split(" (")[0]
    'framework deepspeed with pp 2 recomputes every layer or none and places the layers itself'
    """
    if Framework(framework) is not Framework.DEEPSPEED or pp == 1:
        return ""
    return (
        f"framework deepspeed with pp {pp} recomputes every layer or none and places the layers "
        "itself (Megatron-DeepSpeed's GPTModelPipe: one activation_checkpoint_interval for every "
        "stage, partition_method type:transformer; --recompute-method block recomputes nothing "
        "there)"
    )


def check_deepspeed_pipe_recompute(
    setting: Any, framework: Any, pp: int, counts: tuple[int, ...] | None
) -> None:
    """Refuse per-stage recomputation counts (``Layout.recompute_layers``) that
    :func:`deepspeed_pipe_refusal` says do not run; ``setting`` unread (a legality rule's
    first argument).

    Raises
    ------
    LayoutError
        ``recompute_layers: 16,15 ...: use recompute full (every layer) or none``.
    """
    why = deepspeed_pipe_refusal(framework, pp)
    if counts is None or not any(counts) or not why:
        return
    shown = ",".join(map(str, counts))
    raise LayoutError(f"recompute_layers: {shown} does not run: {why}; use recompute full or none")


def keeps_embedding_view(dropout: bool, framework: Any) -> bool:
    """Whether the first stage keeps the input embedding's whole ``[S, b, h]`` output, not its
    sequence shard, for every micro-batch in flight, when tp > 1 with sequence parallelism.

    Megatron-DeepSpeed 4efb479d ``megatron/model/language_model.py`` ``Embedding.forward``
    (l. 231-267, called by ``EmbeddingPipe.forward``): the all-reduced ``[b, s, h]`` embedding is
    transposed into a new ``[s, b, h]`` tensor (``transpose(0, 1).contiguous()``), then
    ``tensor_parallel.scatter_to_sequence_parallel_region`` keeps this rank's rows:
    ``megatron/core/tensor_parallel/mappings.py`` ``_split_along_first_dim`` (l. 46-65) returns
    ``input_[dim_offset:dim_offset+local_dim_size].contiguous()``, a dim-0 slice of a contiguous
    tensor, already contiguous, so a view whose storage is the whole ``[s, b, h]``. With no
    dropout ``embedding_dropout`` (p = 0) returns that view unchanged, and it is the first layer's
    input: its checkpoint (full recomputation) or its first norm's saved input. The whole tensor
    therefore lives as long as the micro-batch's first layer. With dropout the dropout output is
    a new tensor and the view is freed. Megatron-LM clones after the scatter for this reason
    (``LanguageModelEmbedding.forward``, ``clone_scatter_output_in_embedding``); the other
    profiles count the shard. True only under ``deepspeed`` for a model without dropout.

    >>> keeps_embedding_view(False, "deepspeed"), keeps_embedding_view(True, "deepspeed")
    (True, False)
    >>> keeps_embedding_view(False, "megatron")
    False
    """
    return Framework(framework) is Framework.DEEPSPEED and not dropout
