"""The model of a planner request: a catalogue name, a size taken as given (with dimensions or
without), or a ModelSpec built in code; its multi-token-prediction modules; parsed for
:func:`interface.inputs.build_case` (the defaults it leaves out are
:meth:`trainplan.optimizer.case.Case.of`'s)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Any, overload

from trainplan.model.errors import InputError, check_applicable, named_lookup
from trainplan.model.model_spec import ModelSpec
from trainplan.model.params import count_params
from trainplan.model.specs import Architecture, Mlp, Norm, PositionEmbedding
from trainplan.model.units import parse_count
from trainplan.scenarios.catalogue import get_model

__all__ = [
    "count_of",
    "model_of",
    "with_mtp",
]


@overload
def count_of(params: Mapping[str, Any], key: str, default: int) -> int: ...
@overload
def count_of(params: Mapping[str, Any], key: str, default: None = None) -> int | None: ...
def count_of(params: Mapping[str, Any], key: str, default: int | None = None) -> int | None:
    """A whole number >= 1 within its limit from ``params[key]`` (number or text like 70B; the
    rule of :func:`model.units.parse_count`), or ``default``."""
    value = params.get(key)
    return default if value is None else parse_count(value, key)


DIMENSIONS = ("arch", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab")
"""The dimensions that build a model with ``--params`` (:func:`_arch_from_dims`); a catalogue
model or a config.json has its own, so ``--model`` refuses them rather than drop them unread."""


def _arch_from_dims(params: Mapping[str, Any], seq_len: int) -> Architecture | None:
    if params.get("layers") is None and params.get("hidden") is None:
        extra = [k for k in DIMENSIONS if params.get(k) is not None]
        if extra:  # read only with both: refused rather than dropped unread
            raise InputError(
                f"model dimensions: `{extra[0]}` is read only with all of `layers`, `hidden` "
                "and `heads` (without them `params` is a size only)"
            )
        return None
    missing = [k for k in ("layers", "hidden", "heads") if params.get(k) is None]
    if missing:
        raise InputError(
            f"model dimensions: also give --{' --'.join(missing)} (with --layers/--hidden)"
        )
    kind = str(params.get("arch") or "gpt").lower()
    if kind not in ("gpt", "llama"):
        raise InputError(f"arch: {kind!r} is not one of gpt, llama")
    h = count_of(params, "hidden")
    assert h is not None
    gpt = kind == "gpt"
    ffn = count_of(params, "ffn_hidden", 4 * h if gpt else None)
    if ffn is None:
        raise InputError("ffn_hidden: required with --arch llama (e.g. 53248 for Llama 3 405B)")
    layers, heads = count_of(params, "layers"), count_of(params, "heads")
    assert layers is not None and heads is not None  # checked above
    return Architecture(
        num_layers=layers,
        hidden_size=h,
        num_attention_heads=heads,
        num_kv_heads=count_of(params, "kv_heads"),
        head_dim=count_of(params, "head_dim"),
        ffn_hidden_size=ffn,
        vocab_size=count_of(params, "vocab", 51200 if gpt else 128256),
        mlp=Mlp.GELU if gpt else Mlp.SWIGLU,
        norm=Norm.LAYERNORM if gpt else Norm.RMSNORM,
        position_embedding=PositionEmbedding.LEARNED if gpt else PositionEmbedding.ROPE,
        max_position_embeddings=seq_len if gpt else None,
        linear_bias=gpt,
        tie_embeddings=gpt,
        dropout=gpt,
    )


NO_MODEL = (
    "model: give --model NAME (a catalogue name or a config.json path), --params SIZE, or the "
    "dimensions --layers --hidden --heads"
)
"""The one refusal of a command given no model (evaluate, search, …)."""


def model_of(params: Mapping[str, Any], used: dict[str, Any]) -> tuple[ModelSpec, dict[str, int]]:
    if params.get("model_spec") is not None:  # a ModelSpec built in code (e.g. a model family)
        return params["model_spec"], dict(params.get("training_defaults") or {})
    name = params.get("model")
    size = params.get("params")
    if name is not None:
        check_applicable(
            {"params": size},
            {"params": f"model {name} has its own size; give either --model or --params, not both"},
        )
        check_applicable(
            {k: params.get(k) for k in DIMENSIONS},
            dict.fromkeys(
                DIMENSIONS,
                f"model {name} has its own dimensions; give them with --params instead of --model",
            ),
        )
        entry = named_lookup("model", get_model, str(name))
        return entry.model, dict(entry.training)
    dims_given = any(params.get(k) is not None for k in ("layers", "hidden", "heads"))
    if size is None and not dims_given:
        raise InputError(NO_MODEL)
    n = count_of(params, "params")
    seq = count_of(params, "seq_len", 4096)
    arch = _arch_from_dims(params, seq or 4096)
    counted = n if n is not None or arch is None else count_params(arch).total
    size_b = float(Fraction(counted or 0, 10**9))
    label = params.get("name") or (f"{size_b:g}B" if n is not None else f"{size_b:.3g}B")
    return ModelSpec(
        name=str(label), source="size given by the user", arch=arch, num_params_declared=n
    ), {}


def with_mtp(model: ModelSpec, params: Mapping[str, Any]) -> ModelSpec:
    """The model with ``mtp_layers`` multi-token-prediction modules instead of its own
    (``--mtp-layers``; DeepSeek-V3 §2.2), when given.

    Raises
    ------
    InputError
        For a model without dimensions, whose layers are unknown.
    """
    value = params.get("mtp_layers")
    if value is None:
        return model
    n = parse_count(value, "mtp_layers", minimum=0)
    if model.arch is None or model.num_params_declared is not None:
        raise InputError(
            f"mtp_layers: {value!r} needs a model with dimensions (a catalogue model or a "
            "config.json), not a declared size"
        )
    return replace(model, arch=replace(model.arch, mtp_layers=n))
