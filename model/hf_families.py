"""The model families of Hugging Face ``config.json`` files, key by key.

:func:`read_hf` maps a parsed config to an :class:`~model.specs.Architecture` and notes. Every
key is either *read* (below, per family), *known not to change a cost the model counts*
(:data:`IGNORED_KEYS`, with the reason), or *named in the notes* as not understood — never dropped
silently. A value the model cannot represent (a dropout rate above 0, an activation it does not
know, biases on only some projections of a family that has none) is refused with the key, the
value and the rule.

Families (``model_type``; all pre-norm decoders with RoPE and no dropout):

* ``llama``, ``mistral``, ``mixtral``, ``phi3``: RMSNorm, SwiGLU (Phi-3's fused ``qkv_proj`` and
  ``gate_up_proj`` hold the same weights). ``sliding_window`` on every layer (Mistral 7B v0.1
  4,096; Phi-3-mini-4k 2,047; null = none). ``attention_bias`` puts biases on q, k, v and o,
  ``mlp_bias`` on the MLP (both or neither).
* ``qwen2`` (Qwen1.5, Qwen2, Qwen2.5): biases on q, k and v only (``qkv_bias``; hard-coded in
  ``Qwen2Attention``). ``qwen3``: no biases, QK-norm (``q_norm``/``k_norm`` over d). Both: a
  sliding window only with ``use_sliding_window`` true, on layers from ``max_window_layers`` on.
  ``qwen3_moe``: ``num_experts`` of ``moe_intermediate_size``, top ``num_experts_per_tok``, MoE on
  layers i with (i + 1) a multiple of ``decoder_sparse_step`` and not in ``mlp_only_layers``.
* ``gemma2``, ``gemma3_text`` (and ``gemma3``, whose ``text_config`` is read): GeGLU
  (``gelu_pytorch_tanh``), four norms per layer (``post_norms``), ``head_dim`` ≠ h/a, tied
  embeddings by default, a ``sliding_window`` on the local layers — every other layer from the
  first (Gemma 2), five of every six (Gemma 3, ``sliding_window_pattern`` 6), or as
  ``layer_types`` says; soft-capping (Gemma 2); QK-norm (Gemma 3).
* ``gpt_oss``: ``num_local_experts`` SwiGLU experts of ``intermediate_size`` with biases, top
  ``num_experts_per_tok``, a router with bias, biases on q, k, v and o (``attention_bias``), a
  learned sink logit per head (``sinks``), ``layer_types`` alternating a ``sliding_window`` of
  128 and full attention.
* ``llama4_text`` (and ``llama4``, whose ``text_config`` is read): ``num_local_experts`` routed
  experts of ``intermediate_size`` plus one shared expert of the same size, top
  ``num_experts_per_tok``, MoE on every ``interleave_moe_layer_step``-th layer (or the
  ``moe_layers`` listed), dense layers of ``intermediate_size_mlp``; chunked attention
  (``attention_chunk_size``) on the RoPE layers, global attention on the NoPE ones
  (``no_rope_layers`` 0: every fourth layer).
* ``deepseek_v3``: MLA, 1 shared + ``n_routed_experts`` routed experts, dense first
  ``first_k_dense_replace`` layers, router bias, and ``num_nextn_predict_layers`` MTP modules
  (``mtp_layers``).
"""

from __future__ import annotations

from typing import Any

from trainplan.model.errors import InputError, ScenarioError
from trainplan.model.hf_reader import (
    IGNORED_KEYS,
    Reader,
    layer_types,
    moe_spec,
    repeating_pattern,
    unread_notes,
)
from trainplan.model.specs import (
    Architecture,
    AttentionKind,
    AttentionSpan,
    MLASpec,
    Mlp,
    Norm,
    PositionEmbedding,
)

__all__ = ["HF_MODEL_TYPES", "IGNORED_KEYS", "read_hf", "read_hf_config", "architecture_from_hf"]

HF_MODEL_TYPES = (
    "llama",
    "mistral",
    "mixtral",
    "phi3",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "gemma2",
    "gemma3_text",
    "gemma3",
    "gpt_oss",
    "llama4_text",
    "llama4",
    "deepseek_v3",
)
"""``model_type`` values :func:`read_hf` understands."""

_WRAPPERS = {"gemma3": "gemma3_text", "llama4": "llama4_text"}
"""Multimodal configs whose ``text_config`` holds the decoder (its vision encoder is not modelled)."""

_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262208, "sliding_window_pattern": 6},
}
"""Keys a family's released configs leave to the transformers config class's defaults
(``Gemma3TextConfig``: V 262,208, five local layers to one global), used when absent."""


def read_hf(config: Any, where: str) -> tuple[Architecture, tuple[str, ...]]:
    """The :class:`Architecture` of a parsed ``config.json`` and the notes on what it leaves out
    (see the module docstring for every family and key).

    Raises
    ------
    ScenarioError
        A missing required key, an unsupported ``model_type`` or a value that cannot be modelled,
        naming the key, the value, the rule and ``where``.
    """
    if not isinstance(config, dict):
        raise ScenarioError(f"{where}: a Hugging Face config must be a JSON object")
    notes: list[str] = []
    model_type = config.get("model_type")
    if model_type is None:
        raise ScenarioError(f"{where}: Hugging Face config has no 'model_type' (required)")
    if model_type in _WRAPPERS:
        outer = Reader(config, where)
        text = outer.get("text_config")
        if not isinstance(text, dict):
            raise outer.refuse("text_config", text, "must be a table holding the text decoder")
        if "vision_config" in config:
            outer.read.add("vision_config")
            notes.append(
                f"{where}: the vision encoder (vision_config) is not modelled: the text decoder "
                "only"
            )
        if "tie_word_embeddings" in config and "tie_word_embeddings" not in text:
            text = {**text, "tie_word_embeddings": outer.get("tie_word_embeddings")}
        outer.read.add("tie_word_embeddings")
        notes += unread_notes(outer)
        config = {"model_type": _WRAPPERS[model_type], **text}
        where, model_type = f"{where} [text_config]", _WRAPPERS[model_type]
    if model_type not in HF_MODEL_TYPES:
        raise ScenarioError(
            f"{where}: model_type {model_type!r} is not supported; supported: "
            f"{', '.join(HF_MODEL_TYPES)} (or write a scenario file with explicit dimensions)"
        )
    r = Reader({**_DEFAULTS.get(model_type, {}), **config}, where)
    kwargs = _common(r, model_type)
    kwargs.update(_FAMILY[model_type](r, kwargs))
    if "quantization_config" in config:
        r.read.add("quantization_config")
        notes.append(
            f"{where}: quantization_config describes how the released checkpoint is stored; the "
            "training precision is the planner's (bf16 weights unless told)"
        )
    notes += r.notes + unread_notes(r)
    try:
        return Architecture(**kwargs), tuple(notes)
    except InputError as err:
        raise ScenarioError(f"{where}: {err}") from None


def _common(r: Reader, model_type: str) -> dict[str, Any]:
    """The keys every family shares: dimensions, tied embeddings, activation, dropout."""
    num_layers = r.count("num_hidden_layers")
    h, a = r.count("hidden_size"), r.count("num_attention_heads")
    g = r.count("num_key_value_heads", None)
    d = r.count("head_dim", None)
    gemma = model_type.startswith("gemma")
    act = r.get("hidden_act", "gelu_pytorch_tanh" if gemma else "silu")
    if gemma:  # Gemma 2/3 name it hidden_activation (hidden_act kept for older files)
        act = r.get("hidden_activation", None) or act
    if act in ("silu", "swish"):
        mlp = Mlp.SWIGLU
    elif act in ("gelu_pytorch_tanh", "gelu", "gelu_new"):
        mlp = Mlp.GEGLU
    else:
        raise r.refuse("hidden_act", act, "a gated MLP of SiLU (SwiGLU) or GELU (GeGLU) only")
    for key in ("attention_dropout", "resid_pdrop", "embd_pdrop", "hidden_dropout"):
        rate = r.get(key, 0)
        if rate not in (None, 0, 0.0):
            raise r.refuse(key, rate, "dropout above 0 is not modelled for this family")
    return {
        "num_layers": num_layers,
        "hidden_size": h,
        "num_attention_heads": a,
        "num_kv_heads": None if g in (None, a) else g,
        "head_dim": None if d is None or (h % a == 0 and d == h // a) else d,
        "ffn_hidden_size": r.count("intermediate_size"),
        "vocab_size": r.count("vocab_size"),
        "mlp": mlp,
        "norm": Norm.RMSNORM,
        "attention": AttentionKind.MHA,
        "position_embedding": PositionEmbedding.ROPE,
        "tie_embeddings": r.flag("tie_word_embeddings", gemma),
        "dropout": False,
    }


def _biases(r: Reader, _: dict[str, Any]) -> dict[str, Any]:
    """Llama/Mistral/Phi-3: ``attention_bias`` (q, k, v, o) and ``mlp_bias``, both or neither."""
    attention, mlp = r.flag("attention_bias"), r.flag("mlp_bias")
    if attention != mlp:
        which = "attention" if attention else "MLP"
        raise r.refuse(
            "attention_bias" if attention else "mlp_bias",
            True,
            f"biases on the {which} projections only cannot be represented (linear_bias means "
            "every linear layer)",
        )
    return {"linear_bias": attention}


def _window_everywhere(r: Reader, kw: dict[str, Any]) -> dict[str, Any]:
    """Mistral, Mixtral, Phi-3: ``sliding_window`` (null = none) on every layer, or on the
    layers ``layer_types`` names."""
    window = r.count("sliding_window", None)
    pattern = layer_types(r, kw["num_layers"])
    if pattern is not None and AttentionSpan.LOCAL not in pattern:
        window = None
    return {**_biases(r, kw), "sliding_window": window, "attention_pattern": pattern or ()}


def _qwen_window(r: Reader, kw: dict[str, Any]) -> dict[str, Any]:
    """Qwen2/3: a window only with ``use_sliding_window``, on layers from ``max_window_layers``."""
    window = r.count("sliding_window", None)
    use = r.flag("use_sliding_window")
    first = r.count("max_window_layers", kw["num_layers"])
    pattern = layer_types(r, kw["num_layers"])
    if pattern is None and use and window:
        L = kw["num_layers"]
        pattern = tuple(
            AttentionSpan.LOCAL if i >= first else AttentionSpan.GLOBAL for i in range(L)
        )
    if not pattern or AttentionSpan.LOCAL not in pattern:
        return {}
    return {"sliding_window": window, "attention_pattern": pattern}


def _qwen2(r: Reader, kw: dict[str, Any]) -> dict[str, Any]:
    """Qwen2Attention hard-codes biases on q, k and v (and none on o or the MLP)."""
    return {"qkv_bias": True, **_qwen_window(r, kw)}


def _qwen3(r: Reader, kw: dict[str, Any]) -> dict[str, Any]:
    if r.flag("attention_bias"):
        raise r.refuse("attention_bias", True, "Qwen3 has no attention biases")
    return {"qk_norm": True, **_qwen_window(r, kw)}


def _qwen3_moe(r: Reader, kw: dict[str, Any]) -> dict[str, Any]:
    moe = moe_spec(
        r,
        num_experts=r.count("num_experts"),
        experts_per_token=r.count("num_experts_per_tok"),
        expert_ffn_hidden_size=r.count("moe_intermediate_size"),
        moe_layer_step=r.count("decoder_sparse_step", 1),
        dense_layers=tuple(r.get("mlp_only_layers", None) or ()),
    )
    return {**_qwen3(r, kw), "moe": moe}


def _gemma(r: Reader, kw: dict[str, Any], gemma3: bool) -> dict[str, Any]:
    """Gemma 2/3: local layers every other one (2) or five of six (3, ``sliding_window_pattern``)."""
    pattern = layer_types(r, kw["num_layers"])
    if pattern is None:
        period = r.count("sliding_window_pattern", 6) if gemma3 else 2
        pattern = (AttentionSpan.LOCAL,) * (period - 1) + (AttentionSpan.GLOBAL,)
    window = r.count("sliding_window")
    alias = r.count("sliding_window_size", window)  # Gemma 2's released configs repeat it
    if alias != window:
        raise r.refuse("sliding_window_size", alias, f"differs from sliding_window = {window}")
    out: dict[str, Any] = {
        "post_norms": True,
        "qk_norm": gemma3,
        "sliding_window": window,
        "attention_pattern": pattern,
        "attention_softcapping": r.get("attn_logit_softcapping", None) is not None,
        "final_logit_softcapping": r.get("final_logit_softcapping", None) is not None,
    }
    if r.flag("attention_bias"):
        raise r.refuse("attention_bias", True, "Gemma has no attention biases")
    return out


def _gpt_oss(r: Reader, kw: dict[str, Any]) -> dict[str, Any]:
    k = r.count("num_experts_per_tok", None) or r.count("experts_per_token")
    r.read.add("experts_per_token")
    moe = moe_spec(
        r,
        num_experts=r.count("num_local_experts"),
        experts_per_token=k,
        expert_ffn_hidden_size=kw["ffn_hidden_size"],
        router_bias=True,
        stacked_experts=True,  # GptOssExperts: gate_up_proj, down_proj and biases, [E, …] each
    )
    pattern = layer_types(r, kw["num_layers"])
    if pattern is None:  # GptOssConfig's default: sliding on layers 0, 2, 4, …
        pattern = (AttentionSpan.LOCAL, AttentionSpan.GLOBAL)
    if not r.flag("attention_bias", True):
        raise r.refuse(
            "attention_bias",
            False,
            "gpt-oss's experts and router have biases; attention without them cannot be "
            "represented (linear_bias means every linear layer)",
        )
    return {
        "linear_bias": True,  # q, k, v, o and every expert's gate/up and down biases
        "attention_sinks": True,
        "glu_clamp": r.get("swiglu_limit", None) is not None,
        "yarn_rope": (r.get("rope_scaling", None) or {}).get("rope_type") == "yarn",
        "sliding_window": r.count("sliding_window"),
        "attention_pattern": pattern,
        "moe": moe,
    }


LLAMA4_DEFAULTS: dict[str, Any] = {
    "intermediate_size_mlp": 16384,
    "interleave_moe_layer_step": 1,
    "no_rope_layer_interval": 4,
    "attention_chunk_size": 8192,
    "use_qk_norm": True,
}
"""What transformers' ``Llama4TextConfig.__init__`` (``src/transformers/models/llama4/
configuration_llama4.py``) sets a ``llama4_text`` key the config leaves out to: the dense
layers' FFN width 16,384 (``intermediate_size`` is the experts'), every layer a MoE layer, every
fourth layer without RoPE, chunks of 8,192 tokens, the q/k L2 norm on. A config read here without
one gets the same, named in the notes (:func:`_llama4`)."""


def _llama4(r: Reader, kw: dict[str, Any]) -> dict[str, Any]:
    L = kw["num_layers"]
    d, taken = LLAMA4_DEFAULTS, []

    def default(key: str) -> Any:  # transformers' value of a key the config leaves out
        if key not in r.config:
            taken.append(f"{key} = {d[key]}")
        return d[key]

    step = r.count("interleave_moe_layer_step", default("interleave_moe_layer_step"))
    listed = r.get("moe_layers", None)
    dense: tuple[int, ...] = ()
    by_step = [i for i in range(L) if (i + 1) % step == 0]
    if listed is not None and sorted(listed) != by_step:  # an explicit list wins over the step
        dense, step = tuple(i for i in range(L) if i not in set(listed)), 1
    moe = moe_spec(
        r,
        num_experts=r.count("num_local_experts"),
        experts_per_token=r.count("num_experts_per_tok"),
        expert_ffn_hidden_size=kw["ffn_hidden_size"],
        num_shared_experts=1,
        moe_layer_step=step,
        dense_layers=dense,
    )
    chunk = r.count("attention_chunk_size", default("attention_chunk_size"))
    pattern = layer_types(r, L)
    if pattern is None:
        rope = r.get("no_rope_layers", None)
        if rope is None or rope == []:
            interval = r.count("no_rope_layer_interval", default("no_rope_layer_interval"))
            rope = [int((i + 1) % interval != 0) for i in range(L)]
        r.read.add("no_rope_layer_interval")
        pattern = repeating_pattern(
            tuple(AttentionSpan.CHUNKED if use and chunk else AttentionSpan.GLOBAL for use in rope)
        )
    if r.flag("use_qk_norm", default("use_qk_norm")):
        r.notes.append(
            f"{r.where}: use_qk_norm is a weight-free L2 norm of q and k on the RoPE layers: no "
            "parameters; the Q and K it keeps before normalising (about β·S·(a + g)·d per such "
            "layer) are not counted in activations"
        )
    ffn = r.count("intermediate_size_mlp", default("intermediate_size_mlp"))
    if taken:
        r.notes.append(
            f"{r.where}: {', '.join(taken)}: not in the config, transformers' Llama4TextConfig "
            "defaults (configuration_llama4.py)"
        )
    return {
        "ffn_hidden_size": ffn,
        "moe": moe,
        "attention_chunk_size": chunk if AttentionSpan.CHUNKED in pattern else None,
        "attention_pattern": pattern,
        **_biases(r, kw),
    }


def _mixtral(r: Reader, kw: dict[str, Any]) -> dict[str, Any]:
    moe = moe_spec(
        r,
        num_experts=r.count("num_local_experts"),
        experts_per_token=r.count("num_experts_per_tok"),
        expert_ffn_hidden_size=kw["ffn_hidden_size"],
    )
    return {**_window_everywhere(r, kw), "moe": moe}


def _group_limit(r: Reader) -> int | None:
    """``topk_group`` when the router is group-limited (``n_group`` > 1 groups and fewer taken:
    transformers ``DeepseekV3TopkRouter.get_topk_indices`` keeps the ``topk_group`` best of
    ``n_group`` groups; DeepSeek-V3's 4 of 8, the nodes); None otherwise (``n_group`` 1:
    every expert open to every token)."""
    groups, taken = r.count("n_group", 1) or 1, r.count("topk_group", 1) or 1
    return taken if 1 < groups and taken < groups else None


def _deepseek_v3(r: Reader, kw: dict[str, Any]) -> dict[str, Any]:
    mla = MLASpec(
        q_lora_rank=r.count("q_lora_rank"),
        kv_lora_rank=r.count("kv_lora_rank"),
        qk_nope_head_dim=r.count("qk_nope_head_dim"),
        qk_rope_head_dim=r.count("qk_rope_head_dim"),
        v_head_dim=r.count("v_head_dim"),
    )
    L, freq, first = (
        kw["num_layers"],
        r.count("moe_layer_freq", 1),
        r.count("first_k_dense_replace"),
    )
    if first > L:  # the first k layers dense: k at most the layers there are
        raise r.refuse("first_k_dense_replace", first, f"more than num_hidden_layers = {L}")
    moe = moe_spec(
        r,
        num_experts=r.count("n_routed_experts"),
        experts_per_token=r.count("num_experts_per_tok"),
        expert_ffn_hidden_size=r.count("moe_intermediate_size"),
        num_shared_experts=r.count("n_shared_experts") or 0,
        first_k_dense_layers=first,
        group_limit=_group_limit(r),
        router_bias=True,  # DeepseekV3TopkRouter's e_score_correction_bias (§2.1.2)
        bias_balancing=True,  # updated from the token counts, auxiliary-loss-free (§2.1.2)
        # DeepseekV3's rule: layer i is MoE when i >= first_k_dense_replace and i % freq == 0
        dense_layers=tuple(i for i in range(first, L) if i % freq),
    )
    if r.flag("attention_bias"):
        raise r.refuse("attention_bias", True, "DeepSeek-V3's MLA has no biases")
    # MLA: the report's d_h = qk_nope_head_dim (a saved head_dim, qk_rope_head_dim in recent
    # transformers, is not the head dim); MHA-style num_key_value_heads does not apply
    return {
        "attention": AttentionKind.MLA,
        "mla": mla,
        "head_dim": mla.qk_nope_head_dim,
        "num_kv_heads": None,
        "moe": moe,
        "mtp_layers": r.count("num_nextn_predict_layers", 0) or 0,
    }


_FAMILY = {
    "llama": _biases,
    "mistral": _window_everywhere,
    "phi3": _window_everywhere,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "gemma2": lambda r, kw: _gemma(r, kw, gemma3=False),
    "gemma3_text": lambda r, kw: _gemma(r, kw, gemma3=True),
    "gpt_oss": _gpt_oss,
    "llama4_text": _llama4,
    "deepseek_v3": _deepseek_v3,
}
"""Each family's reading of the keys beyond :func:`_common`."""


def read_hf_config(config: Any, where: str) -> tuple[Architecture, tuple[str, ...]]:
    """Map a Hugging Face ``config.json`` (already parsed) to an :class:`Architecture` and the
    notes on what was left out: a key neither read nor known to change no cost, a vision encoder
    not modelled. The families, every key read and every key knowingly ignored are in
    :mod:`model.hf_families`.

    Raises
    ------
    ScenarioError
        On a missing required key (naming it and ``where``), an unsupported ``model_type``, a
        value that cannot be modelled (naming the key, the value and the rule), or rejected
        dimensions.
    """
    return read_hf(config, where)


def architecture_from_hf(config: Any, where: str) -> Architecture:
    """The :class:`Architecture` of a Hugging Face ``config.json`` (:func:`read_hf_config`
    without its notes).

    Examples
    --------
    >>> arch = architecture_from_hf({"model_type": "llama", "num_hidden_layers": 32,
    ...     "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
    ...     "intermediate_size": 14336, "vocab_size": 128256}, "config.json")
    >>> arch.kv_heads, arch.mlp.value, arch.norm.value
    (8, 'swiglu', 'rmsnorm')
    >>> try:
    ...     architecture_from_hf({"model_type": "llama"}, "config.json")
    ... except ScenarioError as err:
    ...     print(err)
    config.json: Hugging Face config has no 'num_hidden_layers' (required)
    """
    return read_hf_config(config, where)[0]
