"""The virtual stages the layout search tries with the interleaved schedule
(:func:`virtual_stage_options`), and the divisors it builds every degree from."""

from __future__ import annotations

from trainplan.model.split import MAX_EMPTY_CHUNKS

__all__ = ["DEFAULT_VIRTUAL_STAGES", "divisors", "virtual_stage_options"]


def divisors(n: int) -> list[int]:
    """Positive divisors of n, ascending.

    Examples
    --------
    >>> divisors(12)
    [1, 2, 3, 4, 6, 12]
    """
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


DEFAULT_VIRTUAL_STAGES: tuple[int, ...] = (2, 3, 4, 8)
"""Virtual stages the search tries with interleaving besides those that split a rank's layers
evenly (:func:`virtual_stage_options`): Megatron-LM Table 1's 2 and 3, 4, and Llama 3 405B's 8
(one-layer chunks, §3.3.2), with chunks of unequal layers where v does not divide a rank's
(Megatron-LM's ``--pipeline-model-parallel-layout``; :mod:`model.pipeline_uneven`)."""


def virtual_stage_options(num_layers: int | None, pp: int) -> tuple[int, ...]:
    """The virtual stages the search tries at ``pp`` unless the space names them: every v ≥ 2
    that divides the layers a rank holds where the model's L layers split evenly over pp —
    alone, or with the embedding and the loss counted as a layer each (Megatron-Core's
    ``--account-for-embedding-in-pipeline-split``, ``--account-for-loss-in-pipeline-split``):
    what Megatron-Core builds without a layout (``megatron/training/arguments.py``
    ``validate_args`` and ``megatron/core/transformer/transformer_block.py``
    ``get_num_layers_to_build`` at d98e8a64dd: ``num_layers_per_pipeline_rank % vp_size == 0``)
    — and :data:`DEFAULT_VIRTUAL_STAGES`, at most ``(L + 2)/pp`` chunks a rank
    (:func:`model.split.check_chunks`); the defaults alone without L.

    Examples
    --------
    >>> virtual_stage_options(80, 4)  # 20 layers a rank: 2, 4, 5, 10, 20
    (2, 3, 4, 5, 8, 10, 20)
    >>> virtual_stage_options(126, 16)  # 128 = 126 + embedding + loss: 8 a rank
    (2, 3, 4, 8)
    """
    if num_layers is None:
        return DEFAULT_VIRTUAL_STAGES
    found = set(DEFAULT_VIRTUAL_STAGES)
    for total in (num_layers, num_layers + 1, num_layers + 2):
        if total % pp == 0:
            found.update(divisors(total // pp))
    return tuple(v for v in sorted(found) if v > 1 and pp * v <= num_layers + MAX_EMPTY_CHUNKS)
