"""A value head in place of the LM head: the network of an RLHF critic or reward model.

The frameworks build a critic and a reward model from the policy's transformer without its
``[h → V]`` output layer, and end it in a ``[h → 1]`` linear that writes one number per token:

* verl b178a3cd5, FSDP workers: ``CriticWorker._build_critic_model_optimizer`` and
  ``RewardModelWorker._build_model`` (``verl/workers/fsdp_workers.py``) load the model as
  ``AutoModelForTokenClassification`` with ``num_labels = 1``: Hugging Face's
  ``GenericForTokenClassification`` (``transformers/modeling_layers.py``) is the base model
  (``AutoModel``, no ``lm_head``) and ``score = nn.Linear(hidden_size, num_labels)``, with a bias.
  Not covered: ``load_valuehead_model`` (``verl/utils/model.py``) falls back, for an
  architecture without a token-classification class, to trl's
  ``AutoModelForCausalLMWithValueHead``, which keeps the ``lm_head`` beside the value head;
  such a critic holds the policy's output layer too and this rule under-counts it.
* verl b178a3cd5, Megatron workers: ``CriticWorker._build_critic_model_optimizer`` and
  ``RewardModelWorker._build_rm_model`` (``verl/workers/megatron_workers.py``) build ``GPTModel``
  with ``McoreModuleWrapperConfig(is_value_model=True, share_embeddings_and_output_weights=
  False)``, and
  ``BaseModelInitializer.initialize`` (``verl/models/mcore/model_initializer.py``) replaces the
  post-process stage's ``output_layer`` by ``LinearForLastLayer(hidden_size, 1)``
  (``verl/models/llama/megatron/layers/parallel_linear.py``): a plain ``torch.nn.Linear``, bias
  on by default, whole on every tensor-parallel rank, its FP32 output gathered over the sequence
  parallel ranks.
* OpenRLHF 3c3be6234: ``_get_critic_model`` and ``_get_reward_model``
  (``openrlhf/models/model.py``) are the base model (``AutoModel``'s class, no ``lm_head``) and
  ``nn.Linear(hidden_size, 1, bias=False)``.

So a value-head network's parameters are the policy's less its untied output layer's ``V·h``
(tied embeddings: nothing leaves, the embedding stays) plus ``h`` (and 1 with a bias); its logits
are ``[tokens × 1]``, whole on every tp rank; its output projection's forward is ``2·tokens·h``
FLOPs. :func:`output_params` and :func:`output_columns` are the rule every consumer reads
(:func:`model.params.count_params`, the stages' parameters, the logits' bytes, the output layer's
operations and FLOPs); :func:`value_head_arch` makes the network.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.specs import Architecture
from trainplan.model.vocab import padded_vocab, vocab_multiple_for

__all__ = [
    "VALUE_HEAD_SOURCE",
    "value_head_bias",
    "value_head_arch",
    "ties_output",
    "output_params",
    "output_columns",
    "logits_columns_of",
]

VALUE_HEAD_SOURCE = (
    "verl b178a3cd5 verl/workers/fsdp_workers.py CriticWorker._build_critic_model_optimizer, "
    "RewardModelWorker._build_model "
    "(AutoModelForTokenClassification, num_labels 1) and verl/models/mcore/model_initializer.py "
    "(LinearForLastLayer(hidden_size, 1)); OpenRLHF 3c3be6234 openrlhf/models/model.py "
    "_get_critic_model (AutoModel + nn.Linear(hidden_size, 1, bias=False))"
)
"""Where the value head's rule is read (the module docstring)."""


def value_head_bias(framework: Framework | str) -> bool:
    """Whether the value head of ``framework``'s RLHF stack has a bias: verl's do (``megatron``:
    ``LinearForLastLayer``, bias on; ``fsdp2``: ``GenericForTokenClassification``'s ``score``,
    bias on), OpenRLHF's does not (``deepspeed``: ``bias=False``). Raises ValueError for an
    unknown framework.

    >>> value_head_bias("megatron"), value_head_bias("fsdp2"), value_head_bias("deepspeed")
    (True, True, False)
    """
    return Framework(framework) is not Framework.DEEPSPEED


def value_head_arch(arch: Architecture, framework: Framework | str) -> Architecture:
    """``arch`` with a value head in place of its LM head, as ``framework``'s RLHF stack builds a
    critic or reward model (:func:`value_head_bias`).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> critic = value_head_arch(get_model("qwen2.5-7b").model.arch, "deepspeed")
    >>> critic.value_head, critic.value_head_bias, critic.vocab_size
    (True, False, 152064)
    """
    return replace(arch, value_head=True, value_head_bias=value_head_bias(framework))


def ties_output(arch: Architecture) -> bool:
    """Whether the output layer is the input embedding's weight (tied embeddings with the LM
    head); a value head never is (verl's Megatron critic sets
    ``share_embeddings_and_output_weights=False``; the token-classification heads are their own
    ``nn.Linear``)."""
    return arch.tie_embeddings and not arch.value_head


def output_params(arch: Architecture, vocab_size: int | None = None) -> int:
    """Parameters of the output layer (counts): the value head's ``h`` (+ 1 with its bias); 0 for
    a tied LM head; else ``V·h`` (``vocab_size``, e.g. padded, overrides V).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("qwen2.5-7b").model.arch  # h 3,584, V 152,064
    >>> output_params(arch), output_params(value_head_arch(arch, "megatron"))
    (544997376, 3585)
    """
    h = arch.hidden_size
    if arch.value_head:
        return h + int(arch.value_head_bias)
    return 0 if arch.tie_embeddings else (vocab_size or arch.vocab_size) * h


def output_columns(arch: Architecture, vocab: Any, tp: Any = 1) -> Any:
    """The output layer's columns over all ``tp`` ranks together, what the logits' bytes and the
    output projection read ÷ tp: ``vocab`` (V, padded as the framework pads it, split over the
    ranks) for an LM head; ``tp`` for a value head (one column, whole on every rank). Works on
    arrays of ``vocab`` and ``tp`` (the search's tables).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("qwen2.5-7b").model.arch
    >>> output_columns(arch, 152064, 4), output_columns(value_head_arch(arch, "fsdp2"), 152064, 4)
    (152064, 4)
    """
    return tp if arch.value_head else vocab


def logits_columns_of(arch: Architecture, given: int | None, framework: Any, tp: Any) -> Any:
    """:func:`output_columns` of ``arch`` on ``tp`` ranks with V padded as ``framework`` pads it
    (:func:`model.vocab.padded_vocab`; ``given`` the multiple asked for, None = the framework's):
    the figure the logits' bytes and the output layer's operations read (the terms' lookup).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("qwen2.5-7b").model.arch
    >>> logits_columns_of(arch, None, "megatron", 8), logits_columns_of(
    ...     value_head_arch(arch, "megatron"), None, "megatron", 8)  # 152,064 to a multiple of 1,024
    (152576, 8)
    """
    vocab = padded_vocab(arch.vocab_size, vocab_multiple_for(framework, given), tp)
    return output_columns(arch, vocab, tp)
