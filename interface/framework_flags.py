"""The training frameworks' own spellings of a layout's parameters — Megatron-LM's
``--tensor-model-parallel-size``, torchtitan's ``--parallelism.tensor_parallel_degree`` — which a
user of those frameworks types first: refused in one line naming the framework, where its flag
comes from, and this command's flag with the value given (:func:`framework_hint`), on the command
line (:mod:`interface.cli.flag_hints`) and as a web API key (:mod:`interface.cli.query`), where
click would say only "No such option"."""

from __future__ import annotations

from collections.abc import Collection

from trainplan.interface.flags import PARAMETER_FLAGS

__all__ = ["FRAMEWORK_FLAGS", "framework_hint"]

MEGATRON = "Megatron-LM's flag (megatron/training/arguments.py at d98e8a64)"
"""Where Megatron-LM's flags come from, at commit d98e8a64ddf34856e74b24714e3bedb2f5a39553:
``megatron/training/arguments.py`` builds argparse options from dataclass fields
(ArgumentGroupFactory): the parallel sizes from ModelParallelConfig
(``megatron/core/model_parallel_config.py``), ``--recompute-granularity`` from TransformerConfig
(``megatron/core/transformer/transformer_config.py``), the batch sizes from TrainingConfig
(``megatron/training/config/training_config.py``); ``--seq-length`` and
``--num-virtual-stages-per-pipeline-rank`` it adds itself."""

TORCHTITAN = "torchtitan's flag (torchtitan/config/configs.py ParallelismConfig at b5bcd76c)"
"""Where torchtitan's ``--parallelism.*`` flags come from: the fields of ParallelismConfig in
``torchtitan/config/configs.py`` at commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a, each a
``--section.field`` flag of its config manager (torchtitan/config/manager.py ConfigManager.parse_args,
tyro)."""

FRAMEWORK_FLAGS: dict[str, tuple[str, str]] = {
    "--tensor-model-parallel-size": ("--tp", MEGATRON),
    "--pipeline-model-parallel-size": ("--pp", MEGATRON),
    "--context-parallel-size": ("--cp", MEGATRON),
    "--expert-model-parallel-size": ("--ep", MEGATRON),
    "--expert-tensor-parallel-size": ("--etp", MEGATRON),
    "--num-virtual-stages-per-pipeline-rank": ("--virtual-stages", MEGATRON),
    "--micro-batch-size": ("--micro-batch", MEGATRON),
    "--global-batch-size": ("--global-batch", MEGATRON),
    "--seq-length": ("--seq-len", MEGATRON),
    "--recompute-granularity": ("--recompute", MEGATRON),
    "--parallelism.tensor_parallel_degree": ("--tp", TORCHTITAN),
    "--parallelism.pipeline_parallel_degree": ("--pp", TORCHTITAN),
    "--parallelism.context_parallel_degree": ("--cp", TORCHTITAN),
    "--parallelism.expert_parallel_degree": ("--ep", TORCHTITAN),
}
"""A framework's flag → (this project's flag for the same figure, whose flag and where it is
defined). Only flags whose value means the same here: Megatron-LM's sizes and torchtitan's
degrees are the group sizes ``--tp``, ``--pp``, ``--cp``, ``--ep``, ``--etp`` take; the batch
flags count sequences as ``--micro-batch`` and ``--global-batch`` do; ``--recompute-granularity``
takes ``full`` and ``selective``, two of ``--recompute``'s values. Left out: torchtitan's
``data_parallel_shard_degree`` (one factor of ``--dp`` under HSDP) and Megatron-LM's
``--use-distributed-optimizer`` (an on/off flag, ``--zero 1`` here)."""


def framework_hint(
    flag: str, value: str, here: Collection[str], command: str, web: bool = False
) -> str | None:
    """The line refusing ``flag`` (a framework's spelling, :data:`FRAMEWORK_FLAGS`) given to
    ``command``, whose options are ``here`` (``--tp`` …; ``web``: the query keys, ``tp`` …),
    naming the framework, where the flag is defined and this command's flag with ``value`` (its
    own spelling where it has one, :data:`interface.flags.PARAMETER_FLAGS`: pipeline's
    ``--stages``); None when ``flag`` is no framework's or ``command`` does not take its
    parameter.

    >>> framework_hint("--tensor-model-parallel-size", "2", {"--tp"}, "evaluate")[-35:]
    'at d98e8a64): write it --tp: --tp 2'
    >>> framework_hint("--tensor-model-parallel-size", "2", {"--stages"}, "pipeline") is None
    True
    >>> framework_hint("--pipeline-model-parallel-size", "4", {"--stages"}, "pipeline")[-29:]
    'write it --stages: --stages 4'
    """
    if flag not in FRAMEWORK_FLAGS:
        return None
    ours, whose = FRAMEWORK_FLAGS[flag]
    spelt = next((fs for fs in PARAMETER_FLAGS.values() if ours in fs), (ours,))
    typed = [f[2:] if web else f for f in spelt]  # pipeline's --pp is --stages
    key = next((k for k in typed if k in here), None)
    if key is None:
        return None
    shown = flag[2:] if web else flag
    given = value if value and not value.startswith("-") else ""
    if web:
        example = f": {key}={given}" if given else ""
        return f"{shown!r}: no such parameter of {command}; it is {whose}: write it {key}{example}"
    example = f": {key} {given}" if given else ""
    return f"{shown}: no such option of trainplan {command}; it is {whose}: write it {key}{example}"
