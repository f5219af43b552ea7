"""The largest value each size or count parameter accepts, with its reason (:data:`LIMITS`), and
the key a parameter's any spelling reads it by (:func:`limit_for`): what :mod:`model.units`
checks every number read against (docs/concepts/conventions.md "Inputs and errors").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

__all__ = ["FLOORS", "Floor", "Limit", "LIMITS", "floor_for", "limit_for", "limit_key"]


@dataclass(frozen=True, slots=True)
class Limit:
    """The largest accepted value of a size or count, with the reason it is no smaller."""

    maximum: int
    """Largest accepted value, in ``unit``."""
    unit: str
    """What the value counts (``tokens``, ``GPUs``…)."""
    why: str
    """The rule in words: the published extremes it leaves room for (each with its source)."""


_GPUS = Limit(2**24, "GPUs", "2^24; published training runs use up to ~10^5, Llama 3 16,384")
_SEQUENCES = Limit(2**24, "sequences", "2^24; published global batches are ~10^3, Llama 3 2,048")
_TOKENS_PER_SEQUENCE = Limit(
    2**24, "tokens", "2^24 = 16,777,216; the longest published training contexts are ~10^6"
)
_WIDTH = Limit(2**20, "dims", "2^20; the widest published models have h ~ 2.6·10^4, Megatron 1T")

LIMITS: Mapping[str, Limit] = MappingProxyType(
    {
        "params": Limit(
            10**15, "parameters", "10^15 = 1,000T; the largest published models have ~2·10^12"
        ),
        "seq_len": _TOKENS_PER_SEQUENCE,
        "global_batch_size": _SEQUENCES,
        "micro_batch_size": Limit(2**16, "sequences", "2^16; a global batch is at most 2^24"),
        "gpus": _GPUS,
        "layers": Limit(
            10**4, "layers", "10^4; the deepest published LLMs have ~10^2 layers, PaLM 118"
        ),
        "virtual_stages": Limit(10**4, "model chunks", "10^4, the most layers a model may have"),
        "hidden": _WIDTH,
        "ffn_hidden": Limit(
            2**22, "dims", "2^22; published FFNs are ~10^4–10^5 wide, Llama 3 405B 53,248"
        ),
        "heads": Limit(2**16, "heads", "2^16; published models have ~10^2, Megatron 1T 160"),
        "head_dim": Limit(2**16, "dims", "2^16; published heads have 64–256 dims"),
        "vocab": Limit(2**24, "tokens", "2^24; published vocabularies are ~10^5, Llama 3 128,256"),
        "vocab_multiple": Limit(
            2**16, "tokens", "2^16; Megatron-LM pads to multiples of 128 (× tp)"
        ),
        "tokens": Limit(
            10**16, "tokens", "10^16; the largest published budgets are ~1.6·10^13, Llama 3"
        ),
        "sequences": _SEQUENCES,
        "epochs": Limit(10**3, "epochs", "10^3; PPO implementations use 1–4 per batch"),
        "width": Limit(10**3, "columns", "10^3; a terminal line is ~10^2"),
        "stages": Limit(
            256,
            "stages",
            "256; the pipeline timeline draws one row per stage, and published runs use at most "
            "64, Megatron-LM's 1T (Narayanan et al. 2021 Table 1)",
        ),
        "top": Limit(100, "layouts", "100; each answer is one more CP-SAT solve of ~0.1–1 s"),
        "workers": Limit(2**10, "threads", "2^10; CP-SAT runs one search thread per worker"),
        "delay": Limit(60, "seconds per frame", "60; an animation frame longer than a minute"),
    }
)
"""Upper limits of sizes and counts, by parameter name (see :func:`limit_for` for the spellings
that share one). A value above its limit is refused by :func:`check_limit` with the limit and its
reason, rather than printed as an absurd figure (``--seq-len 1e26`` would be 4.98·10^23 GB)."""


@dataclass(frozen=True, slots=True)
class Floor:
    """The smallest accepted value of a size, with the reason a smaller one is taken for a typo."""

    minimum: int
    """Smallest accepted value, in ``unit``."""
    unit: str
    """What the value counts (``parameters``)."""
    why: str
    """The rule in words: what the smaller value most likely meant, and the published sizes the
    floor lies far below (each with its source)."""


FLOORS: Mapping[str, Floor] = MappingProxyType(
    {
        "params": Floor(
            10**6,
            "parameters",
            "a model size counts parameters: write 70B or 70e9 for 70 billion; the smallest "
            "published language models have ~10^8, GPT-2 small 124M (Radford et al. 2019)",
        ),
    }
)
"""Lower limits of sizes, by parameter name (the spellings of :func:`limit_for` share one): a
model size of ``70`` is 70 parameters, a typo for ``70B`` whose every figure would print as 0, so
:func:`model.units.parse_count` refuses it with the floor and its reason."""

_LIMIT_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        **dict.fromkeys(("num_params", "num_params_declared", "policy_params"), "params"),
        "reward_params": "params",
        **dict.fromkeys(("prompt_tokens", "completion_tokens", "logits_tokens"), "seq_len"),
        **dict.fromkeys(
            ("max_position_embeddings", "sliding_window", "attention_chunk_size"), "seq_len"
        ),
        **dict.fromkeys(("global_batch", "prompts", "rollout_batch"), "global_batch_size"),
        **dict.fromkeys(("samples_per_prompt", "max_micro_batch"), "micro_batch_size"),
        "micro_batch": "micro_batch_size",
        **dict.fromkeys(("num_gpus", "chips", "dp", "tp", "pp", "cp", "ep"), "gpus"),
        **dict.fromkeys(("max_tp", "nvlink_domain", "pod_size"), "gpus"),
        **dict.fromkeys(
            ("num_layers", "max_layers", "first_k_dense_layers", "mtp_layers", "moe_layer_step"),
            "layers",
        ),
        "hidden_size": "hidden",
        **dict.fromkeys(("kv_lora_rank", "q_lora_rank"), "hidden"),
        **dict.fromkeys(("ffn_hidden_size", "expert_ffn_hidden_size"), "ffn_hidden"),
        "shared_expert_ffn_hidden_size": "ffn_hidden",
        **dict.fromkeys(("num_attention_heads", "num_kv_heads", "kv_heads"), "heads"),
        **dict.fromkeys(("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"), "head_dim"),
        "vocab_size": "vocab",
        "pad_vocab": "vocab_multiple",
        "global_batch_tokens": "tokens",
    }
)


def _canonical(name: str) -> str:
    """``--seq-len`` → ``seq_len``; ``training.seq_len`` → ``seq_len``."""
    return name.rsplit(".", 1)[-1].lstrip("-").replace("-", "_").strip().lower()


@lru_cache(maxsize=256)  # bounded: a long-lived server sees any spelling a user types
def limit_for(name: str) -> Limit | None:
    """The :class:`Limit` of a parameter, by any of its spellings (``--seq-len``, ``seq_len``,
    ``training.seq_len``; ``tp`` and ``--gpus`` share the GPU limit); None when it has none.

    Examples
    --------
    >>> limit_for("--seq-len").maximum
    16777216
    >>> limit_for("model.num_layers") is LIMITS["layers"], limit_for("kernel_efficiency")
    (True, None)
    """
    return LIMITS.get(limit_key(name))


def limit_key(name: str) -> str:
    """The :data:`LIMITS` key of a parameter by any spelling (``--reward-params`` → ``params``)."""
    key = _canonical(name)
    return _LIMIT_ALIASES.get(key, key)


def floor_for(name: str) -> Floor | None:
    """The :class:`Floor` of a parameter, by any of its spellings (``--policy-params`` and
    ``--params`` share one); None when it has none.

    Examples
    --------
    >>> floor_for("--reward-params").minimum, floor_for("--seq-len")
    (1000000, None)
    """
    return FLOORS.get(limit_key(name))
