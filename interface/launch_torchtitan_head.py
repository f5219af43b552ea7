"""A plan for torchtitan's HEAD (:data:`TORCHTITAN_HEAD_COMMIT`), which reads no TOML: its run is
a Python function returning a ``Trainer.Config`` (``torchtitan/config/README.md``: "Select one
with ``--module`` … and ``--config``"; the ``--section.option`` flags are frozen and to be
deleted). :func:`torchtitan_config` translates the TOML fragment of
:func:`interface.launch.torchtitan_toml` (torchtitan e347b1e5e, one assembly of the plan's
values) into assignments on such a config, each field one of :data:`TORCHTITAN_HEAD_FIELDS`.

What changed between the two commits, read in torchtitan's code:

* 9810191bb (2026-02-23): TOML ``JobConfig`` → ``Trainer.Config`` (``torchtitan/trainer.py``),
  ``ParallelismConfig``, ``TrainingConfig``, ``CompileConfig`` (``torchtitan/config/
  configs.py``), the same ``parallelism`` field names;
* the batch is counted in tokens (``TrainingConfig.num_tokens_per_microbatch_per_dp_rank``,
  ``num_tokens_per_train_step``, ``max_context_length``; ``ParallelismConfig.
  num_pp_microbatches``; ``Trainer.__init__``: ``gradient_accumulation_steps =
  num_tokens_per_train_step / (num_tokens_per_microbatch_per_dp_rank · num_pp_microbatches ·
  dp)``, ``num_pp_microbatches`` 1 without pp);
* 114151ad4 (2026-03-23) removed ``selective_ac_option``; the policy is a class now
  (``torchtitan/distributed/activation_checkpoint.py``: ``FullAC.Config``, ``SelectiveAC.Config``
  per-op, ``None`` for none), applied to every block;
* 8e5554449 (2026-06-14) removed ``context_parallel_rotate_method`` (unused since the
  refactor);
* ``ParallelDims`` (``torchtitan/distributed/parallel_dims.py``) has no expert tensor
  parallelism: ``efsdp = dp_shard · cp · tp / ep``, the experts whole on each rank;
* the output layer's module is ``lm_head`` (``pipeline_parallel.py``
  ``_generate_llm_fqn_per_model_part``; ``output`` at e347b1e5e), the default split the same.
"""

from __future__ import annotations

import tomllib
from typing import Any

from trainplan.interface.launch import LaunchFlags
from trainplan.model.layout import Layout

__all__ = ["TORCHTITAN_HEAD_COMMIT", "TORCHTITAN_HEAD_FIELDS", "torchtitan_config"]

TORCHTITAN_HEAD_COMMIT = "b5bcd76c (2026-08-21)"
"""The torchtitan commit :func:`torchtitan_config` writes for."""

TORCHTITAN_HEAD_FIELDS: dict[str, frozenset[str]] = {
    "parallelism": frozenset(
        """data_parallel_shard_degree tensor_parallel_degree pipeline_parallel_degree
        context_parallel_degree expert_parallel_degree fsdp_reshard_after_forward
        pipeline_parallel_schedule module_fqns_per_model_part num_pp_microbatches""".split()
    ),
    "training": frozenset(
        {"num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step", "max_context_length"}
    ),
    "compile": frozenset({"enable"}),
    "activation_checkpoint": frozenset({"FullAC", "SelectiveAC"}),
}
"""The ``Trainer.Config`` fields :func:`torchtitan_config` assigns, by attribute
(``config.parallelism.…`` and so on), each a field at :data:`TORCHTITAN_HEAD_COMMIT`:
``ParallelismConfig``, ``TrainingConfig`` and ``CompileConfig`` in ``torchtitan/config/
configs.py``; ``activation_checkpoint`` takes a policy's ``Config``, the classes named here
(``torchtitan/distributed/activation_checkpoint.py``), or None."""

_DROPPED = frozenset({"context_parallel_rotate_method", "expert_tensor_parallel_degree"})
"""e347b1e5e's keys HEAD has not (module docstring); said in notes where they matter."""


def _python(value: Any) -> str:
    """A TOML value as Python source (bools capitalised, lists and strings as repr)."""
    return repr(value)


def torchtitan_config(toml: LaunchFlags, layout: Layout) -> LaunchFlags:
    """The assignments on a ``Trainer.Config`` named ``config`` that give torchtitan's HEAD the
    plan of ``toml`` (:func:`interface.launch.torchtitan_toml`'s fragment for ``layout``): the
    same ``parallelism`` and ``compile`` fields, the batch in tokens (b·s per micro-batch, B·s a
    step, s the context; m pipeline micro-batches at pp > 1), the activation-checkpoint policy
    class, the output module renamed ``lm_head``. Notes: ``toml``'s, and what HEAD cannot take
    (every-N-th-block AC, the CP rotate method, an expert tp above 1).

    Examples
    --------
    >>> frag = LaunchFlags(('[parallelism]', 'tensor_parallel_degree = 2',
    ...     'pipeline_parallel_degree = 2', 'pipeline_parallel_microbatch_size = 2', '[training]',
    ...     'local_batch_size = 16', 'global_batch_size = 64', 'seq_len = 4096',
    ...     '[activation_checkpoint]', 'mode = "full"'), ())
    >>> print("\\n".join(torchtitan_config(frag, Layout(tp=2, pp=2, dp=4)).flags[1:]))
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    config.parallelism.tensor_parallel_degree = 2
    config.parallelism.pipeline_parallel_degree = 2
    config.parallelism.num_pp_microbatches = 8
    config.training.num_tokens_per_microbatch_per_dp_rank = 8192
    config.training.num_tokens_per_train_step = 262144
    config.training.max_context_length = 4096
    config.activation_checkpoint = FullAC.Config()
    """
    doc = tomllib.loads("\n".join(toml.flags))
    notes = list(toml.notes)
    parallel = dict(doc.get("parallelism", {}))
    lines = [
        f"# torchtitan {TORCHTITAN_HEAD_COMMIT}: in the configuration function (--module M "
        "--config F) that returns the model's Trainer.Config as config",
        "from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC",
    ]
    _dropped(parallel, layout, notes)
    micro = parallel.pop("pipeline_parallel_microbatch_size", None)
    for key, value in parallel.items():
        if key in _DROPPED:
            continue
        if key == "module_fqns_per_model_part":
            value = [["lm_head" if m == "output" else m for m in part] for part in value]
        lines.append(f"config.parallelism.{key} = {_python(value)}")
    training = doc.get("training")
    if training is not None:
        lines += _batch(training, micro)
    lines.append("config.activation_checkpoint = " + _policy(doc["activation_checkpoint"], notes))
    if "compile" in doc:
        lines.append(f"config.compile.enable = {_python(doc['compile']['enable'])}")
    return LaunchFlags(tuple(lines), tuple(notes))


def _dropped(parallel: dict[str, Any], layout: Layout, notes: list[str]) -> None:
    """Notes for e347b1e5e's keys HEAD has not, where the plan's value is not what HEAD runs."""
    rotate = parallel.get("context_parallel_rotate_method", "allgather")
    if rotate != "allgather":
        notes.append(
            f"context_parallel_rotate_method {rotate}: torchtitan's HEAD has no such setting "
            "(8e5554449 removed it); it runs PyTorch's default rotation, all-gather"
        )
    if parallel.get("expert_tensor_parallel_degree", 1) != 1:
        notes.append(
            f"expert tp {layout.expert_tp}: torchtitan's HEAD keeps the experts whole "
            "(parallel_dims.py: efsdp = dp_shard·cp·tp/ep, no etp); that run's expert memory "
            "and traffic are the plan's with etp 1"
        )


def _batch(training: dict[str, Any], micro: int | None) -> list[str]:
    """HEAD's token counts for e347b1e5e's ``[training]`` (``local_batch_size``, the micro-batch
    b at pp 1; b·m at pp > 1 with ``micro`` = b), ``global_batch_size`` B, ``seq_len`` s: b·s a
    micro-batch, B·s a step, s the context, and at pp > 1 ``num_pp_microbatches`` m."""
    local, s = training["local_batch_size"], training["seq_len"]
    b = local if micro is None else micro
    lines = [] if micro is None else [f"config.parallelism.num_pp_microbatches = {local // micro}"]
    return lines + [
        f"config.training.num_tokens_per_microbatch_per_dp_rank = {b * s}",
        f"config.training.num_tokens_per_train_step = {training['global_batch_size'] * s}",
        f"config.training.max_context_length = {s}",
    ]


def _policy(ac: dict[str, Any], notes: list[str]) -> str:
    """HEAD's activation-checkpoint policy for e347b1e5e's ``[activation_checkpoint]``: full →
    ``FullAC.Config()``, per-op selective → ``SelectiveAC.Config()``, none → ``None``; every
    N-th block (no such policy at HEAD) → ``FullAC.Config()``, said in ``notes``."""
    mode, option = ac["mode"], ac.get("selective_ac_option")
    if mode == "full":
        return "FullAC.Config()"
    if mode == "none":
        return "None"
    if option == "op":
        return "SelectiveAC.Config()"
    notes.append(
        f'selective_ac_option "{option}" (full AC of one block in {option}): torchtitan\'s HEAD '
        "has no block-level policy (114151ad4); FullAC recomputes every block, more than the plan: it "
        "fits wherever the plan fits and runs the extra recomputation"
    )
    return "FullAC.Config()"
