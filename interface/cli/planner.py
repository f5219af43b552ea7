"""Planner commands: evaluate (the planner tab), gpus, models; the evaluate options ``trainplan
example`` shares, in the groups ``--help`` shows them in."""

from __future__ import annotations

from typing import Any

import click

from trainplan.interface.cli import cli
from trainplan.interface.cli.choices import (
    FRAMEWORK_WORDS,
    OPTIMIZER_WORDS,
    SCHEDULE_WORDS,
    NamedChoice,
)
from trainplan.interface.cli.common import COUNT, echo_json
from trainplan.interface.cli.options import (
    CALIBRATION,
    MODEL,
    RECIPE,
    Decorator,
    option_groups,
    set_option,
)
from trainplan.model.context_parallel import CpKind
from trainplan.model.optimizers import OptimizerKind
from trainplan.model.pipeline import Schedule

__all__ = ["evaluate_options", "EVALUATE_GROUPS", "run_evaluate", "CP_KIND_CHOICES"]

CP_KIND_CHOICES = [k.value for k in CpKind] + ["p2p", "all_gather", "a2a", "hybrid"]
"""``--cp-kind`` values: the flavours' names and Megatron-Core's ``--cp-comm-type`` spellings."""


CLUSTER: list[Decorator] = [
    click.option(
        "--gpu",
        help="Accelerator: a name (trainplan gpus) or a PATH.toml describing one (trainplan gpus "
        "--file); default H100-SXM.",
    ),
    click.option(
        "--gpus",
        "num_gpus",
        type=COUNT,
        help="GPUs in all: without --dp, dp is this ÷ (tp·pp·cp); with --dp, dp·tp·pp·cp must "
        "equal it.",
    ),
]
"""The accelerator and GPU count."""

LAYOUT: list[Decorator] = [
    click.option(
        "--framework",
        type=NamedChoice(["megatron", "deepspeed", "fsdp2", "textbook"], FRAMEWORK_WORDS),
        help="Whose mechanism a ZeRO stage is: peak memory and traffic as that framework runs "
        "it (default megatron; megatron --zero 3 is Megatron-FSDP); textbook = the ZeRO paper's "
        "steady state.",
    ),
    click.option(
        "--dp",
        type=COUNT,
        help="Data-parallel degree; default with --gpus: --gpus ÷ (tp·pp·cp), which must divide "
        "it (ep and etp are carved from dp·cp and tp: no GPUs of their own); without --gpus: 1 "
        "(an example: its own).",
    ),
    click.option("--tp", type=COUNT, help="Tensor-parallel degree (default 1)."),
    click.option("--pp", type=COUNT, help="Pipeline-parallel degree (default 1)."),
    click.option("--cp", type=COUNT, help="Context-parallel degree (default 1)."),
    click.option("--ep", type=COUNT, help="Expert-parallel degree, carved from dp·cp (default 1)."),
    click.option(
        "--etp",
        type=COUNT,
        help="Expert tensor-parallel degree (Megatron-Core --expert-tensor-parallel-size); "
        "default tp, under deepspeed 1 (experts whole on every tp rank; tp = Megatron-DeepSpeed's "
        "--enable-expert-tensor-parallelism, no other value).",
    ),
    click.option(
        "--zero",
        "zero_stage",
        type=click.IntRange(0, 3),
        help="ZeRO stage 0-3 (3 = FSDP); default the framework's (megatron 1, deepspeed 1, "
        "fsdp2 3, or 2 with --pp > 1 as torchtitan's default reshard policy runs it, textbook 1).",
    ),
    click.option(
        "--recompute",
        type=click.Choice(["none", "sqrt", "selective", "full"], case_sensitive=False),
        help="Activation recomputation (default none). selective is the framework's own: "
        "Megatron-Core's --recompute-modules (core_attn unless --set recompute_modules says), "
        "torchtitan's op-level policy under fsdp2.",
    ),
    click.option(
        "--sequence-parallel/--no-sequence-parallel",
        "sequence_parallel",
        default=None,
        help="Default: on when tp > 1.",
    ),
    click.option(
        "--cp-kind",
        "cp_kind",
        type=click.Choice(CP_KIND_CHOICES, case_sensitive=False),
        help="How the cp ranks exchange attention's inputs: ring (K/V point to point), "
        "all-gather (Llama 3), ulysses (all-to-all over heads), ulysses-kv-repeat "
        "(verl's: K/V heads repeated up to cp; fsdp2, textbook), a2a+p2p "
        "(ulysses inside groups of --cp-a2a, ring across) or PyTorch's context_parallel "
        "(pytorch-allgather, pytorch-alltoall; fsdp2); Megatron-Core's --cp-comm-type "
        "spellings p2p, all_gather, a2a and a2a+p2p's other name hybrid are aliases. "
        "Default: the framework's own (ring under megatron and textbook, ulysses under "
        "deepspeed, pytorch-allgather under fsdp2).",
    ),
    click.option(
        "--cp-a2a",
        "cp_a2a",
        type=COUNT,
        help="Inner all-to-all degree of --cp-kind a2a+p2p (Megatron-Core "
        "--hierarchical-context-parallel-sizes).",
    ),
    click.option(
        "--optimizer",
        "optimizer",
        type=NamedChoice([k.value for k in OptimizerKind], OPTIMIZER_WORDS),
        help="The optimizer whose state and step are counted (default adam): adam-8bit "
        "(bitsandbytes), adafactor, lion, muon (AdamW on the non-matrix parameters), soap; "
        "each under the frameworks that offer it.",
    ),
    click.option(
        "--rank-order", "rank_order", help="Axes inner to outer, e.g. tp-cp-ep-dp-pp (default)."
    ),
]
"""The parallel layout: framework profile, degrees, ZeRO stage, recomputation, rank order."""

BATCH: list[Decorator] = [
    click.option(
        "--seq-len", "seq_len", type=COUNT, help="s, tokens per sequence; default the model's."
    ),
    click.option(
        "--micro-batch",
        "micro_batch_size",
        type=COUNT,
        help="b, sequences per micro-batch; default 1.",
    ),
    click.option(
        "--global-batch",
        "global_batch_size",
        type=COUNT,
        help="B, sequences per step; default the catalogue model's published batch, else "
        "dp·b·4·pp (a note says so; a size-only model: dp·b). 'Defaults used' names the value.",
    ),
    click.option(
        "--global-batch-tokens",
        "global_batch_tokens",
        help="B in tokens per step (16e6 = 1,953 sequences of 8,192 is refused; 16,777,216 = "
        "2,048): a whole number of sequences of --seq-len; instead of --global-batch.",
    ),
    click.option(
        "--schedule",
        type=NamedChoice([s.value for s in Schedule], SCHEDULE_WORDS),
        help="Pipeline schedule (default 1f1b); zb-h1, zb-h2, zb-v, dualpipe and dualpipev split "
        "the backward (under the frameworks that run them).",
    ),
    click.option(
        "--virtual-stages",
        "virtual_stages",
        type=COUNT,
        help="v, model chunks per stage (interleaved; 2 under zb-v and dualpipev).",
    ),
    click.option(
        "--stage-layers",
        "stage_layers",
        help="Transformer layers per pipeline stage, e.g. 7,8,8,7 (pp counts; or pp × "
        "virtual-stages counts, one per model chunk in model order); must sum to L. "
        "Default: the framework's own split (megatron: as even as L allows, the end stages "
        "holding fewer; deepspeed: DeepSpeed's, the first stages holding more; "
        "fsdp2: torchtitan's, the embedding and the output counted as a layer each).",
    ),
    click.option(
        "--recompute-layers",
        "recompute_layers",
        help="Layers fully recomputed on each pipeline stage, e.g. 2,4,4,0 (pp counts; the "
        "first that many layers of each stage, Megatron-LM's --recompute-method block; the "
        "others keep --recompute none or selective). With virtual-stages > 1 the count is "
        "per model chunk, as Megatron-LM's: the first that many layers of each of the "
        "stage's chunks.",
    ),
    click.option(
        "--pipeline-scatter-gather/--no-pipeline-scatter-gather",
        "pipeline_scatter_gather",
        default=None,
        help="Megatron-LM 2021's scatter_gather_tensors_in_pipeline: with tp > 1 and no "
        "sequence parallelism each pipeline send carries 1/tp of the activation (Narayanan et al. "
        "2021 §4.1); default off (Megatron-Core sends the whole tensor).",
    ),
]
"""Sequence, batch and pipeline schedule."""

OUTPUT: list[Decorator] = [
    click.option(
        "--mfu-convention",
        "mfu_convention",
        type=click.Choice(["6n", "6n+attention", "megatron"], case_sensitive=False),
        help="Model FLOPs: 6·N per token (default), plus PaLM's attention FLOPs, or "
        "Korthikanti's term by term.",
    ),
    click.option("--per-stage", "per_stage", is_flag=True, help="Also list every pipeline stage."),
    click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
]
"""What is printed."""

STAGE_SPLIT: list[Decorator] = [
    click.option(
        "--first-stage-layers",
        "first_stage_layers",
        type=click.IntRange(0),
        help="Megatron-Core's --decoder-first-pipeline-num-layers: layers on the first "
        "stage, the rest split evenly over the others.",
    ),
    click.option(
        "--last-stage-layers",
        "last_stage_layers",
        type=click.IntRange(0),
        help="Megatron-Core's --decoder-last-pipeline-num-layers.",
    ),
    click.option(
        "--account-for-embedding/--no-account-for-embedding",
        "account_for_embedding",
        default=None,
        help="Megatron-Core's --account-for-embedding-in-pipeline-split: the embedding "
        "counts as a layer, so the first stage holds one transformer layer fewer.",
    ),
    click.option(
        "--account-for-loss/--no-account-for-loss",
        "account_for_loss",
        default=None,
        help="Megatron-Core's --account-for-loss-in-pipeline-split (the last stage).",
    ),
]
"""Megatron-Core's arguments for the pipeline split (evaluate's own: no scenario key)."""

EVALUATE_GROUPS: tuple[tuple[str, list[Decorator]], ...] = (
    ("Model", MODEL),
    ("Cluster", [*CLUSTER, CALIBRATION]),
    ("Parallel layout", LAYOUT),
    ("Sequence, batch and pipeline schedule", BATCH),
    ("Training recipe", RECIPE),
    ("Output", OUTPUT),
    ("Megatron-Core's pipeline split", STAGE_SPLIT),
)
"""The option groups of ``trainplan evaluate`` and ``trainplan example`` (which overrides an
example's parameters with them, and its own ``--set`` with any parameter)."""

evaluate_options: Decorator = option_groups(*EVALUATE_GROUPS)
"""Every option of ``trainplan example`` shared with evaluate, in its group."""


def run_evaluate(
    params: dict[str, Any], as_json: bool, per_stage: bool, header: str = ""
) -> dict[str, Any]:
    """Evaluate flat parameters (:func:`interface.commands.evaluate_json`); print JSON or text
    (after ``header``, once the evaluation has passed every check: a refusal prints one line
    and nothing before it); return the JSON object."""
    from trainplan.interface.commands import evaluate_json
    from trainplan.interface.render.report import evaluate_text
    from trainplan.interface.requests import evaluate_request

    out = evaluate_json(evaluate_request(params, per_stage))
    if as_json:
        echo_json(out)
    else:
        if header:
            click.echo(header)
        click.echo(evaluate_text(out, out["defaults_used"]))
        if per_stage:
            from trainplan.interface.render.tables import stages_text

            click.echo(
                "\nPer pipeline stage (per GPU; GB = 10^9 bytes):\n" + stages_text(out["stages"])
            )
    return out


@cli.command("evaluate")
@option_groups(*EVALUATE_GROUPS, ("Scenario keys", [set_option("evaluate")]))
def evaluate_cmd(as_json: bool, per_stage: bool, **params: Any) -> None:
    """The planner: memory per GPU, ZeRO table, traffic per axis, bubble, step time, MFU.

    Example: trainplan evaluate --model llama3-405b --gpu H100-SXM --tp 8 --pp 16 --dp 128
    """
    run_evaluate(params, as_json, per_stage)


@cli.command("gpus")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--file",
    "part_file",
    metavar="PATH.toml",
    help="Show the accelerator a TOML file describes, as the planner reads a gpu given as "
    "PATH.toml: its figures, each with its source, and the catalogue part whose per-part rates "
    "it takes.",
)
@click.argument("name_filter", metavar="[FILTER]", required=False)
def gpus_cmd(as_json: bool, part_file: str | None, name_filter: str | None) -> None:
    """The accelerator table: memory, dense BF16 peak, links, each with its source; FILTER: only
    the accelerators whose names hold it, in any case (trainplan gpus h100)."""
    from trainplan.interface.commands import gpus_json, named_like
    from trainplan.interface.render.tables import gpus_text

    rows = named_like(gpus_json(part_file), name_filter, "accelerator", "trainplan gpus")
    if as_json:
        echo_json(rows)
        return
    from trainplan.topology.accelerators import status_legend

    click.echo(gpus_text(rows))
    click.echo(
        "memory: vendor = the vendor's nominal figure, in its unit (GiB = 2^30 B); device = the "
        "bytes the device has, as its driver reports them where a capture is known; usable = "
        "device less the runtime reserve, what evaluate's capacity is (GB = 10^9 B)"
    )
    click.echo(status_legend())
    if part_file is not None:
        from trainplan.interface.render.tables import part_file_text

        click.echo(part_file_text(rows[0]))
    shown = _SOURCES if part_file is None else _SOURCES + _FILE_SOURCES
    click.echo("\nSources:")
    for r in rows:
        click.echo(f"  {r['name']}: {r['source']}")
        for key, label in shown:
            if r.get(key):
                click.echo(f"  {' ' * len(r['name'])}  {label}{r[key]}")


_SOURCES = (
    ("fp8_source", ""),
    ("bandwidth_source", "HBM and host link: "),
    ("power_source", "power: "),
)
"""The sources ``trainplan gpus`` lists under a row's ``source``, with their labels."""
_FILE_SOURCES = (("host_source", "host: "), ("driver_source", "driver capture: "))
"""The sources ``trainplan gpus --file`` lists besides (every figure of the part it shows)."""


def _number(value: object) -> object:
    """A whole number in the one form the tool prints (``15,360``); anything else as it is."""
    return f"{value:,}" if type(value) is int else value


@cli.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("name_filter", metavar="[FILTER]", required=False)
def models_cmd(as_json: bool, name_filter: str | None) -> None:
    """The model catalogue: names, sizes and sources (a Sources section after the table, as
    trainplan gpus prints); FILTER: only the models whose names hold it, in any case
    (trainplan models llama)."""
    from trainplan.interface.commands import models_json, named_like

    rows = named_like(models_json(), name_filter, "model", "trainplan models")
    if as_json:
        echo_json(rows)
        return
    from trainplan.interface.render.report import table_text
    from trainplan.model.params import ACTIVE_COUNTS

    click.echo(
        table_text(
            [
                {
                    k: f"{v / 1e9:,.1f}B" if k.startswith("num") else _number(v)
                    for k, v in r.items()
                    if k != "source"
                }
                for r in rows
            ]
        )
    )
    click.echo(f"\nnum_active_params: {ACTIVE_COUNTS}")
    click.echo("\nSources:")
    for r in rows:
        click.echo(f"  {r['name']}: {r['source']}")
