"""Reading a Hugging Face ``config.json`` key by key: what was read, what is known not to matter
(:data:`IGNORED_KEYS`), and the notes for the rest (:mod:`model.hf_families` holds the families).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainplan.model.errors import InputError, ScenarioError
from trainplan.model.hf_config import convert
from trainplan.model.specs import AttentionSpan, MoESpec
from trainplan.model.units import shown_text

__all__ = ["IGNORED_KEYS", "Reader", "unread_notes", "repeating_pattern", "layer_types", "moe_spec"]

IGNORED_KEYS: dict[str, str] = {
    **dict.fromkeys(
        (
            "architectures",
            "_name_or_path",
            "transformers_version",
            "torch_dtype",
            "dtype",
            "auto_map",
            "use_cache",
            "return_dict",
            "output_attentions",
            "output_hidden_states",
            "output_router_logits",
            "bos_token_id",
            "eos_token_id",
            "pad_token_id",
            "boi_token_index",
            "eoi_token_index",
            "image_token_index",
            "mm_tokens_per_image",
            "cache_implementation",
            "attn_implementation",
            "initializer_range",
            "pretraining_tp",
            "for_llm_compressor",
            "model_type",
        ),
        "bookkeeping: token ids, dtypes, versions, initialisation, inference options",
    ),  # fmt: skip
    **dict.fromkeys(
        (
            "max_position_embeddings",
            "rope_theta",
            "rope_scaling",
            "rope_parameters",
            "rope_local_base_freq",
            "original_max_position_embeddings",
            "partial_rotary_factor",
            "initial_context_length",
            "query_pre_attn_scalar",
            "attn_temperature_tuning",
            "floor_scale",
            "attn_scale",
            "rms_norm_eps",
            "layer_norm_eps",
            "swiglu_limit",
            "routed_scaling_factor",
        ),
        "positions and scalings: RoPE limits and frequencies, norm epsilons, score and output "
        "scales; no parameters, no matmul FLOPs, no stored tensors",
    ),  # fmt: skip
    **dict.fromkeys(
        (
            "router_aux_loss_coef",
            "router_jitter_noise",
            "aux_loss_alpha",
            "seq_aux",
            "norm_topk_prob",
            "scoring_func",
            "topk_method",
            "n_group",
            "topk_group",
            "ep_size",
        ),
        "routing and its loss: which experts, not how many or how large (group-limited routing "
        "sends less expert-parallel traffic, which is stated as an upper bound)",
    ),  # fmt: skip
}
"""Keys known not to change a cost the model counts, with the reason (not named in notes)."""


class Reader:
    """A config's keys, read one at a time; remembers which were read."""

    def __init__(self, config: dict[str, Any], where: str) -> None:
        self.config, self.where, self.read = config, where, {"model_type"}
        self.notes: list[str] = []

    def get(self, key: str, default: Any = dataclasses.MISSING) -> Any:
        self.read.add(key)
        value = self.config.get(key, default)
        if value is dataclasses.MISSING:
            raise ScenarioError(f"{self.where}: Hugging Face config has no {key!r} (required)")
        return value

    def count(self, key: str, default: Any = dataclasses.MISSING) -> Any:
        value = self.get(key, default)
        return None if value is None else convert(value, int, key, self.where)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.get(key, default)
        return default if value is None else bool(convert(value, bool, key, self.where))

    def refuse(self, key: str, value: Any, rule: str) -> ScenarioError:
        return ScenarioError(f"{self.where}: {key} = {value!r}: {rule}")


def unread_notes(r: Reader) -> list[str]:
    return [
        f"{r.where}: key {shown_text(key)} = {shown_text(r.config[key])} is not understood and "
        "was not used; check "
        "that it changes no cost (or write a scenario file with explicit dimensions)"
        for key in r.config
        if key not in r.read and key not in IGNORED_KEYS
    ]


def layer_types(r: Reader, num_layers: int) -> tuple[AttentionSpan, ...] | None:
    """``layer_types`` as the shortest pattern that repeats to it; None when absent."""
    types = r.get("layer_types", None)
    if types is None:
        return None
    spans = {
        "full_attention": AttentionSpan.GLOBAL,
        "sliding_attention": AttentionSpan.LOCAL,
        "chunked_attention": AttentionSpan.CHUNKED,
    }
    if not isinstance(types, list) or len(types) != num_layers or set(types) - set(spans):
        raise r.refuse(
            "layer_types", types, f"must list {num_layers} of {', '.join(spans)}, one per layer"
        )
    return repeating_pattern(tuple(spans[t] for t in types))


def repeating_pattern(spans: tuple[AttentionSpan, ...]) -> tuple[AttentionSpan, ...]:
    """The shortest prefix of ``spans`` that repeats to it (``Architecture.attention_pattern``).

    Examples
    --------
    >>> L, G = AttentionSpan.LOCAL, AttentionSpan.GLOBAL
    >>> repeating_pattern((L, G, L, G, L, G))
    (<AttentionSpan.LOCAL: 'local'>, <AttentionSpan.GLOBAL: 'global'>)
    """
    n = len(spans)
    period = next(p for p in range(1, n + 1) if all(spans[i] == spans[i % p] for i in range(n)))
    return spans[:period]


def moe_spec(r: Reader, **fields: Any) -> MoESpec:
    try:
        return MoESpec(**fields)
    except InputError as err:
        raise ScenarioError(f"{r.where}: {err}") from None
