"""Build an :class:`~model.specs.Architecture` from plain dicts: a scenario file's
``[architecture]`` table, or a Hugging Face ``config.json`` already parsed by the caller.

Standard library only and no I/O: callers read the file (``tomllib`` / ``json``) and pass the dict
with ``where`` (the file name), which every error message names.
"""

from __future__ import annotations

import dataclasses
import typing
from enum import Enum
from typing import Any

from trainplan.model.errors import InputError, ScenarioError
from trainplan.model.specs import (
    Architecture,
    AttentionKind,
    MLASpec,
    Mlp,
    MoESpec,
    Norm,
    PositionEmbedding,
)
from trainplan.model.units import closest_names

__all__ = ["architecture_from_dict", "architecture_from_hf", "HF_MODEL_TYPES"]

HF_MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "deepseek_v3")
"""``model_type`` values :func:`architecture_from_hf` understands (all pre-norm, RMSNorm, RoPE,
gated SiLU MLP, no dropout)."""


# --------------------------------------------------------------------------------------------
# Strict dict -> dataclass (scenario files)


def _convert(value: Any, kind: Any, key: str, where: str) -> Any:
    """``value`` checked against the annotation ``kind`` (int, bool, a StrEnum, optional)."""
    args = typing.get_args(kind)
    if args and type(None) in args:  # X | None
        if value is None:
            return None
        (kind,) = [a for a in args if a is not type(None)]
    if kind is bool:
        if not isinstance(value, bool):
            raise ScenarioError(f"{where}: {key} = {value!r} must be true or false")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ScenarioError(f"{where}: {key} = {value!r} must be a whole number")
        if isinstance(value, float):
            if not value.is_integer():
                raise ScenarioError(f"{where}: {key} = {value!r} must be a whole number")
            value = int(value)
        return value
    if isinstance(kind, type) and issubclass(kind, Enum):
        allowed = [m.value for m in kind]
        if value not in allowed:
            raise ScenarioError(
                f"{where}: {key} = {value!r} is not one of {', '.join(map(repr, allowed))}"
            )
        return kind(value)
    if kind is str:
        if not isinstance(value, str):
            raise ScenarioError(f"{where}: {key} = {value!r} must be a string")
        return value
    raise ScenarioError(f"{where}: {key}: cannot read a value of type {kind!r}")  # pragma: no cover


def _build(cls: type, d: Any, where: str, nested: dict[str, type] | None = None) -> Any:
    """Instantiate the frozen dataclass ``cls`` from ``d``, rejecting unknown and missing keys."""
    if not isinstance(d, dict):
        raise ScenarioError(f"{where}: expected a table, got {d!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    nested = nested or {}
    for key in d:
        if key not in fields:
            hint = closest_names(key, list(fields))
            raise ScenarioError(f"{where}: unknown key {key!r}; {hint}")
    missing = [
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
        and name not in d
    ]
    if missing:
        raise ScenarioError(f"{where}: missing required key(s) {', '.join(missing)}")
    kwargs: dict[str, Any] = {}
    for key, value in d.items():
        if key in nested:
            kwargs[key] = _build(nested[key], value, f"{where} [{key}]")
        else:
            kwargs[key] = _convert(value, hints[key], key, where)
    try:
        return cls(**kwargs)
    except InputError as err:
        raise ScenarioError(f"{where}: {err}") from None


def architecture_from_dict(d: dict[str, Any], where: str) -> Architecture:
    """Read an ``[architecture]`` table (e.g. of ``scenarios/models/*.toml``) strictly.

    Keys are exactly the :class:`~model.specs.Architecture` field names; the nested tables
    ``moe`` and ``mla`` take the :class:`~model.specs.MoESpec` / :class:`~model.specs.MLASpec`
    field names. Enum fields (``mlp``, ``norm``, ``attention``, ``position_embedding``) take their
    string values. Whole numbers may be written as TOML integers or as whole floats (``4096.0``);
    any other float is rejected, as is a number where true/false is expected.

    Parameters
    ----------
    d : dict
        The table, as ``tomllib`` or ``json`` returns it.
    where : str
        Where it came from (a file name and table), named in every error.

    Returns
    -------
    Architecture

    Raises
    ------
    ScenarioError
        On an unknown key (with the closest field names), a missing required key, a value of the
        wrong type, or dimensions that :class:`Architecture` rejects.

    Examples
    --------
    >>> arch = architecture_from_dict({"num_layers": 2, "hidden_size": 8,
    ...     "num_attention_heads": 2, "ffn_hidden_size": 32, "vocab_size": 16,
    ...     "mlp": "swiglu"}, "example.toml [architecture]")
    >>> arch.mlp
    <Mlp.SWIGLU: 'swiglu'>
    >>> try:
    ...     architecture_from_dict({"num_layer": 2}, "example.toml")
    ... except ScenarioError as err:
    ...     print(err)
    example.toml: unknown key 'num_layer'; did you mean num_layers, mla, num_kv_heads?
    """
    return _build(Architecture, d, where, nested={"moe": MoESpec, "mla": MLASpec})


# --------------------------------------------------------------------------------------------
# Hugging Face config.json


def _get(config: dict[str, Any], key: str, where: str, default: Any = dataclasses.MISSING) -> Any:
    value = config.get(key, default)
    if value is dataclasses.MISSING:
        raise ScenarioError(f"{where}: Hugging Face config has no {key!r} (required)")
    return value


def _count(config: dict[str, Any], key: str, where: str, default: Any = dataclasses.MISSING) -> Any:
    value = _get(config, key, where, default)
    if value is None:
        return None
    return _convert(value, int, key, where)


def _flag(config: dict[str, Any], key: str, where: str) -> bool:
    value = config.get(key, False)
    return bool(_convert(value, bool, key, where)) if value is not None else False


def _hf_biases(config: dict[str, Any], model_type: str, where: str) -> dict[str, bool]:
    """``linear_bias`` and ``qkv_bias`` from the bias flags.

    Llama/Mistral: ``attention_bias`` puts biases on q, k, v and o; ``mlp_bias`` on gate, up and
    down. Qwen2 always has biases on q, k and v only (hard-coded in ``Qwen2Attention``).
    """
    attention = _flag(config, "attention_bias", where)
    mlp = _flag(config, "mlp_bias", where)
    if model_type == "qwen2":
        return {"linear_bias": False, "qkv_bias": True}
    if attention != mlp:
        which = "attention" if attention else "MLP"
        raise ScenarioError(
            f"{where}: biases on the {which} projections only (attention_bias = {attention}, "
            f"mlp_bias = {mlp}) cannot be represented; Architecture.linear_bias means every linear"
        )
    return {"linear_bias": attention}


def _hf_moe(config: dict[str, Any], model_type: str, where: str) -> MoESpec | None:
    experts = config.get("num_local_experts") or config.get("n_routed_experts")
    if model_type in ("mixtral", "deepseek_v3") and not experts:
        key = "num_local_experts" if model_type == "mixtral" else "n_routed_experts"
        _get(config, key, where)  # raises: the MoE model has no expert count
    if not experts:
        return None
    if _count(config, "moe_layer_freq", where, 1) != 1:
        raise ScenarioError(f"{where}: moe_layer_freq != 1 (MoE every k-th layer) is not modelled")
    if model_type == "deepseek_v3":
        expert_ffn = _count(config, "moe_intermediate_size", where)
        shared = _count(config, "n_shared_experts", where) or 0
        first_dense = _count(config, "first_k_dense_replace", where)
        # DeepseekV3TopkRouter's e_score_correction_bias (aux-loss-free balancing, §2.1.2)
        router_bias = True
    else:  # Mixtral: every layer is MoE, experts of intermediate_size, no shared expert
        expert_ffn = _count(config, "intermediate_size", where)
        shared, first_dense, router_bias = 0, 0, False
    try:
        return MoESpec(
            num_experts=_convert(experts, int, "n_routed_experts", where),
            experts_per_token=_count(config, "num_experts_per_tok", where),
            expert_ffn_hidden_size=expert_ffn,
            num_shared_experts=shared,
            first_k_dense_layers=first_dense,
            router_bias=router_bias,
        )
    except InputError as err:
        raise ScenarioError(f"{where}: {err}") from None


def _hf_mla(config: dict[str, Any], where: str) -> MLASpec:
    try:
        return MLASpec(
            q_lora_rank=_count(config, "q_lora_rank", where),
            kv_lora_rank=_count(config, "kv_lora_rank", where),
            qk_nope_head_dim=_count(config, "qk_nope_head_dim", where),
            qk_rope_head_dim=_count(config, "qk_rope_head_dim", where),
            v_head_dim=_count(config, "v_head_dim", where),
        )
    except InputError as err:
        raise ScenarioError(f"{where}: {err}") from None


def architecture_from_hf(config: dict[str, Any], where: str) -> Architecture:
    """Map a Hugging Face ``config.json`` (already parsed) to an :class:`Architecture`.

    Supported ``model_type`` values: ``llama``, ``mistral``, ``mixtral``, ``qwen2``,
    ``deepseek_v3``. All are pre-norm decoders with RMSNorm, RoPE, a gated SiLU MLP (SwiGLU,
    ``hidden_act = "silu"``) and no dropout; ``max_position_embeddings`` is a RoPE limit, not a
    parameter table, and is left out.

    Key mapping: ``num_hidden_layers`` → L, ``hidden_size`` → h, ``num_attention_heads`` → a,
    ``num_key_value_heads`` → g (absent or equal to a: MHA), ``head_dim`` → d (absent or equal to
    h/a: default), ``intermediate_size`` → f, ``vocab_size`` → V, ``tie_word_embeddings``
    (absent: false, the default of every supported config class), ``attention_bias`` and
    ``mlp_bias`` → ``linear_bias`` (both or neither; one alone cannot be represented).

    - Mixtral: ``num_local_experts`` experts of ``intermediate_size``, top
      ``num_experts_per_tok``, every layer MoE, no router bias.
    - DeepSeek-V3: MLA from ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
      ``qk_rope_head_dim``, ``v_head_dim`` (d = ``qk_nope_head_dim``, the report's d_h = 128; a
      saved ``head_dim`` key, which recent transformers set to ``qk_rope_head_dim``, is ignored);
      ``n_routed_experts`` experts of ``moe_intermediate_size``, ``n_shared_experts`` shared ones of
      the same size, dense FFN of ``intermediate_size`` in the first ``first_k_dense_replace``
      layers; ``router_bias`` is true (the router's ``e_score_correction_bias``, DeepSeek-V3
      Technical Report §2.1.2). The multi-token-prediction module
      (``num_nextn_predict_layers``, 14B parameters in the release) is *ignored*: it is not part of
      the 671B main model the report counts.
    - Qwen2 (and Qwen2.5, the same ``model_type``): biases on q, k and v only
      (``Architecture.qkv_bias``).
    - Mistral's ``sliding_window`` and DeepSeek's group-limited routing do not change parameter
      counts or activation shapes and are ignored.

    Parameters
    ----------
    config : dict
        The parsed ``config.json``.
    where : str
        The file it came from, named in every error.

    Returns
    -------
    Architecture

    Raises
    ------
    ScenarioError
        On a missing required key (naming it and ``where``), an unsupported ``model_type``,
        activation or bias layout, nonzero ``attention_dropout``, or rejected dimensions.

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
    if not isinstance(config, dict):
        raise ScenarioError(f"{where}: a Hugging Face config must be a JSON object")
    model_type = _get(config, "model_type", where)
    if model_type not in HF_MODEL_TYPES:
        raise ScenarioError(
            f"{where}: model_type {model_type!r} is not supported; supported: "
            f"{', '.join(HF_MODEL_TYPES)} (or write a scenario file with explicit dimensions)"
        )
    num_layers = _count(config, "num_hidden_layers", where)
    h = _count(config, "hidden_size", where)
    a = _count(config, "num_attention_heads", where)
    ffn = _count(config, "intermediate_size", where)
    vocab = _count(config, "vocab_size", where)
    act = _get(config, "hidden_act", where, "silu")
    if act not in ("silu", "swish"):
        raise ScenarioError(
            f"{where}: hidden_act {act!r} in a gated MLP is not modelled (only SiLU: SwiGLU)"
        )
    if config.get("attention_dropout") not in (None, 0, 0.0):
        raise ScenarioError(f"{where}: attention_dropout > 0 is not modelled")
    g = _count(config, "num_key_value_heads", where, None)
    is_mla = model_type == "deepseek_v3"
    mla = _hf_mla(config, where) if is_mla else None
    d = mla.qk_nope_head_dim if mla else _count(config, "head_dim", where, None)
    if d is not None and not is_mla and h % a == 0 and d == h // a:
        d = None
    try:
        return Architecture(
            num_layers=num_layers,
            hidden_size=h,
            num_attention_heads=a,
            num_kv_heads=None if g in (None, a) else g,
            head_dim=d,
            ffn_hidden_size=ffn,
            vocab_size=vocab,
            mlp=Mlp.SWIGLU,
            norm=Norm.RMSNORM,
            attention=AttentionKind.MLA if is_mla else AttentionKind.MHA,
            position_embedding=PositionEmbedding.ROPE,
            tie_embeddings=_flag(config, "tie_word_embeddings", where),
            dropout=False,
            moe=_hf_moe(config, model_type, where),
            mla=mla,
            **_hf_biases(config, model_type, where),
        )
    except InputError as err:
        raise ScenarioError(f"{where}: {err}") from None
