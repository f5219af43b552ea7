"""Megatron-LM's arguments that build a plan's pipeline split: which layers each (virtual) stage
holds, written by :func:`interface.launch.megatron_flags` and printed under a ``megatron`` plan
(:func:`split_flags`).

Megatron-LM builds an even split only, unless told otherwise. At d98e8a64dd (2026-08-22):

* ``megatron/training/arguments.py`` ``validate_args`` asserts ``num_layers % pp == 0`` ("Number
  of layers should be divisible by the pipeline-model-parallel size") unless
  ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` is given
  (the embedding and loss counted in with ``--account-for-embedding-in-pipeline-split`` /
  ``--account-for-loss-in-pipeline-split``: L + 1 (+ 1) must divide), and with
  ``--num-layers-per-virtual-pipeline-stage N`` that ``N`` divides each stage's share; the
  uneven forms take the virtual stages as ``--num-virtual-stages-per-pipeline-rank`` ("please
  use --num-virtual-stages-per-pipeline-rank … when enable uneven pipeline parallelism"), and
  ``--pipeline-model-parallel-layout`` (which excludes the others) says any split;
* ``megatron/core/transformer/transformer_config.py`` ``TransformerConfig.__post_init__``
  refuses a first or last stage of no layers ("num_layers_in_first_pipeline_stage must be larger
  than 0"), the first/last counts beside the account-for flags, and an uneven rest;
* ``megatron/core/transformer/transformer_block.py`` ``get_num_layers_to_build`` builds what
  :mod:`model.megatron_split` counts (the forward rule; here each candidate's counts are that
  rule's, compared with the plan's, so no rule is written twice).
"""

from __future__ import annotations

from trainplan.model.errors import LayoutError
from trainplan.model.layout import Layout
from trainplan.model.megatron_split import accounted_chunk_sizes, first_last_chunk_sizes
from trainplan.model.schedule_support import IMPLEMENTATIONS
from trainplan.model.specs import Architecture
from trainplan.model.split import model_chunks

__all__ = ["MEGATRON_SCHEDULES", "megatron_pipeline_flags", "pipeline_layout", "split_flags"]

MEGATRON_SCHEDULES = ("gpipe", "1f1b", "interleaved")
"""Schedules Megatron-LM's flags express (GPipe as 1F1B, as before)."""

_ACCOUNTED = ((True, True), (True, False), (False, True))
"""The account-for-embedding / account-for-loss pairs tried, both first (Llama 3's split)."""


def decoder_chunks(arch: Architecture, layout: Layout) -> tuple[int, ...]:
    """Decoder layers of each of the plan's pp·v model chunks in model order (layer indices
    below L; the MTP blocks, L, L + 1, …, on the last chunk are no decoder layers: Megatron-Core
    counts them with ``--mtp-num-layers``, ``m`` in the layout string)."""
    chunks = model_chunks(
        arch, layout.pp, layout.virtual_stages, layout.split_rule, layout.stage_layers
    )
    return tuple(sum(1 for j in c if j < arch.num_layers) for c in chunks)


def _first_last(num_layers: int, pp: int, v: int, chunks: tuple[int, ...]) -> list[str] | None:
    """``--decoder-first/last-pipeline-num-layers`` for ``chunks``, when Megatron-Core builds
    exactly them from those (each end stage at least one layer: ``TransformerConfig``)."""
    ranks = [sum(chunks[i::pp]) for i in range(pp)]
    first, last = ranks[0], ranks[-1]
    if pp < 2 or min(first, last) < 1:
        return None
    try:
        built = first_last_chunk_sizes(num_layers, pp, v, first, last)
    except LayoutError:
        return None
    if built != chunks:
        return None
    return [
        "--decoder-first-pipeline-num-layers", str(first),
        "--decoder-last-pipeline-num-layers", str(last),
    ]  # fmt: skip


def _accounted(num_layers: int, pp: int, v: int, chunks: tuple[int, ...]) -> list[str] | None:
    """``--account-for-embedding/loss-in-pipeline-split`` for ``chunks``, when Megatron-Core
    builds exactly them from those."""
    for embedding, loss in _ACCOUNTED:
        try:
            built = accounted_chunk_sizes(num_layers, pp, v, embedding, loss)
        except LayoutError:
            continue
        if built == chunks:
            return ["--account-for-embedding-in-pipeline-split"] * embedding + [
                "--account-for-loss-in-pipeline-split"
            ] * loss
    return None


def megatron_pipeline_flags(arch: Architecture, layout: Layout, notes: list[str]) -> list[str]:
    """The stage split's flags, the first form that builds the plan's split exactly: nothing
    for Megatron-LM's own even split (``--num-layers-per-virtual-pipeline-stage`` with even
    chunks); ``--decoder-first/last-pipeline-num-layers`` (with
    ``--num-virtual-stages-per-pipeline-rank`` when interleaved); the account-for-embedding /
    loss flags (Llama 3's embedding-only first and output-only last chunk); else the layout
    string (:func:`pipeline_layout`, said in ``notes``). A schedule Megatron-Core does not run
    is said in ``notes`` (its 1F1B written).

    Examples
    --------
    >>> arch = Architecture(num_layers=126, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> lay = Layout(pp=32, schedule="interleaved", virtual_stages=4)
    >>> megatron_pipeline_flags(arch, lay, [])  # 126 + 2 = 128 one-layer chunks
    ['--account-for-embedding-in-pipeline-split', '--account-for-loss-in-pipeline-split', \
'--num-virtual-stages-per-pipeline-rank', '4']
    >>> megatron_pipeline_flags(arch, Layout(pp=16), [])  # 7, 8 × 14, 7
    ['--decoder-first-pipeline-num-layers', '7', '--decoder-last-pipeline-num-layers', '7']
    """
    if str(layout.schedule) not in MEGATRON_SCHEDULES:
        notes.append(
            f"schedule {layout.schedule}: Megatron-Core runs 1f1b and interleaved only "
            f"({'; '.join(IMPLEMENTATIONS[str(layout.schedule)])} run it); these flags are "
            "its 1F1B"
        )
        return []
    pp, v = layout.pp, layout.virtual_stages
    if pp == 1:
        return []
    chunks = decoder_chunks(arch, layout)
    even = len(set(chunks)) == 1
    if v > 1 and even:
        return ["--num-layers-per-virtual-pipeline-stage", str(chunks[0])]
    if v == 1 and even and layout.stage_layers is None:  # L/pp each: Megatron-LM's own
        return []
    vpp = [] if v == 1 else ["--num-virtual-stages-per-pipeline-rank", str(v)]
    for form in (_first_last, _accounted):
        flags = form(arch.num_layers, pp, v, chunks)
        if flags is not None:
            return flags + vpp
    notes.append(_why_layout(chunks, pp, v))
    return ["--pipeline-model-parallel-layout", pipeline_layout(chunks, arch.mtp_layers)]


def _why_layout(chunks: tuple[int, ...], pp: int, v: int) -> str:
    """Why a split takes the layout string: no first/last or account-for form builds it."""
    counts = ",".join(map(str, chunks))
    if v > 1:
        return (
            f"layers per model chunk {counts} (v = {v}): uneven, which "
            "--num-layers-per-virtual-pipeline-stage cannot say; Megatron-Core's "
            "--pipeline-model-parallel-layout (experimental there) lists the pp·v chunks in "
            "model order"
        )
    if len(set(chunks[1:-1])) > 1:
        why = "the middle stages differ, which --decoder-first/last-pipeline-num-layers cannot say"
    else:
        why = (
            "an end stage holds no layer, which --decoder-first/last-pipeline-num-layers cannot "
            "say (TransformerConfig refuses 0)"
        )
    return (
        f"layers per stage {counts}: {why}; Megatron-Core's --pipeline-model-parallel-layout "
        "(experimental there) says it"
    )


def split_flags(arch: Architecture | None, layout: Layout) -> list[str] | None:
    """The flags a ``megatron`` plan's split needs beyond its degrees and interleaving — what a
    user launching it with Megatron-LM must add, or it refuses the layout (``validate_args``
    asserts pp divides L) or builds another split; None where it needs none (its own even
    split, a size-only model, another framework, a schedule Megatron-Core does not run).

    >>> arch = Architecture(num_layers=80, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16)
    >>> split_flags(arch, Layout(pp=7, framework="megatron"))  # 11, 11, 12, 12, 12, 11, 11
    ['--pipeline-model-parallel-layout', 'Et*11|t*11|t*12|t*12|t*12|t*11|t*11L']
    >>> split_flags(arch, Layout(pp=8, framework="megatron")) is None
    True
    """
    if arch is None or str(layout.framework) != "megatron":
        return None
    flags = megatron_pipeline_flags(arch, layout, [])
    if not flags or flags[0] == "--num-layers-per-virtual-pipeline-stage":
        return None
    return flags


def pipeline_layout(split: tuple[int, ...], mtp: int = 0) -> str:
    """Megatron-Core's ``--pipeline-model-parallel-layout`` string for ``split`` decoder layers
    per stage (v = 1), or per model chunk in model order (pp·v of them, interleaved), with
    ``mtp`` multi-token-prediction blocks after the last chunk's decoder layers: ``E`` the
    embedding, ``t`` a transformer (decoder) layer (``t*N`` N of them), ``m`` an MTP block,
    ``|`` between (virtual) stages, ``L`` the loss — Megatron-LM
    ``megatron/core/transformer/pipeline_parallel_layer_layout.py``
    ``PipelineParallelLayerLayout.parse_str_to_list`` (``char2layer_type``: E, L, t, m) and
    ``validate_layer_layout`` (the ``t`` count equals ``--num-layers``, the ``m`` count
    ``--mtp-num-layers``, no decoder layer after an MTP block, the MTP blocks in a rank's last
    chunk); its example ``Et*3|(tt|)*29,m|L`` is DeepSeek-V3's.

    Examples
    --------
    >>> pipeline_layout((9, 10, 0, 11))
    'Et*9|t*10||t*11L'
    >>> pipeline_layout((3, 4, 2), mtp=1)
    'Et*3|t*4|t*2mL'
    """
    stages = [f"t*{n}" if n else "" for n in split]
    stages[-1] += "" if not mtp else "m" if mtp == 1 else f"m*{mtp}"
    return "E" + "|".join(stages) + "L"
