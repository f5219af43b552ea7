"""The options evaluate, example, search and frontier share, and the groups their ``--help``
shows them in (cloup's option groups, :func:`option_groups`). The rarely set knobs have no flag:
``--set KEY=VALUE`` (:func:`set_option`) gives any scenario-file key, and a moved flag is refused
with its key (:data:`interface.flags.MOVED_FLAGS`). Every option also works in the web API (the
query parameter of its long name, as do the moved flags' names) and, for search and frontier, as
the scenario file's key of the same name (:mod:`interface.scenario`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click
import cloup

from trainplan.interface.cli.common import COUNT, NUMBER, WHOLE

__all__ = [
    "Decorator",
    "option_groups",
    "MODEL",
    "RECIPE",
    "CALIBRATION",
    "set_option",
    "command_flags",
]

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def option_groups(*groups: tuple[str, Sequence[Decorator]]) -> Decorator:
    """A decorator adding each (title, options) group in order: ``--help`` lists the groups in
    this order, each under its title (:func:`cloup.option_group`; the command's class is a
    :class:`cloup.Command`, :class:`interface.cli.common.GuardedCommand`)."""

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        for title, options in reversed(groups):
            f = cloup.option_group(title, *options)(f)
        return f

    return apply


MODEL: list[Decorator] = [
    click.option(
        "--model",
        "model",
        help="Catalogue name (trainplan models lists them) or a config.json path.",
    ),
    click.option(
        "--params",
        "params",
        type=NUMBER,
        help="Model size taken as given (70B, 1.5T, 7.5e9); with dimensions, checked against their count.",
    ),
    click.option(
        "--arch",
        type=click.Choice(["gpt", "llama"], case_sensitive=False),
        help="Layer family of a model given by its dimensions.",
    ),
    click.option(
        "--layers",
        type=COUNT,
        help="L, transformer layers (a model by its dimensions, with --hidden and --heads).",
    ),
    click.option("--hidden", type=COUNT, help="h, hidden size (a model by its dimensions)."),
    click.option("--heads", type=COUNT, help="a, attention heads (a model by its dimensions)."),
    click.option("--kv-heads", "kv_heads", type=COUNT, help="g, KV heads (GQA; default a)."),
    click.option(
        "--head-dim",
        "head_dim",
        type=COUNT,
        help="d, head dimension (default h / a; give it where a does not divide h).",
    ),
    click.option(
        "--ffn-hidden",
        "ffn_hidden",
        type=COUNT,
        help="f, FFN hidden size (a model by its dimensions).",
    ),
    click.option("--vocab", type=COUNT, help="V, vocabulary size (a model by its dimensions)."),
    click.option(
        "--mtp-layers",
        "mtp_layers",
        type=WHOLE,
        help="Multi-token-prediction modules trained with the model (DeepSeek-V3: 1; 0 drops "
        "them); default the model's.",
    ),
]
"""The model: a catalogue name or config.json, or a size with dimensions."""

CALIBRATION: Decorator = click.option(
    "--calibration",
    "calibration",
    type=click.Path(exists=True, dir_okay=False),
    help="A file written by trainplan calibrate: its fitted figures for its GPU.",
)
"""A calibration file: with the accelerator it was fitted on."""

RECIPE: list[Decorator] = [
    click.option(
        "--flash/--no-flash",
        "flash_attention",
        default=None,
        help="FlashAttention (default on).",
    ),
    click.option(
        "--precision",
        type=click.Choice(["bf16", "fp8"], case_sensitive=False),
        help="GEMM precision of the linear layers (default bf16). fp8 = Transformer Engine: "
        "cached FP8 weight copies (+2 B per linear weight, weight and transpose; +1 B on "
        "Blackwell under per-tensor scaling), linear inputs saved in FP8, "
        "linear GEMMs at the FP8 peak; embedding, output layer, norms, router and attention "
        "core stay BF16.",
    ),
    click.option(
        "--fp8-recipe",
        "fp8_recipe",
        type=click.Choice(["delayed", "tensorwise", "blockwise", "mxfp8"], case_sensitive=False),
        help="With --precision fp8: Megatron-Core's --fp8-recipe (default delayed; NeMo's "
        "FP8-CS is tensorwise, FP8-MX is mxfp8, Blackwell only). Sets the linear GEMMs' "
        "published speed-up per pass and the scales' bytes.",
    ),
    click.option(
        "--offload-optimizer",
        "offload_optimizer",
        type=NUMBER,
        help="Fraction 0-1 (or a percent: 50%) of the optimizer state (and its step) on the host: Megatron-Core "
        "--optimizer-offload-fraction; DeepSpeed offload_optimizer = 1. The CPU runs Adam; "
        "gradients and weights cross the host link.",
    ),
    click.option(
        "--offload-params",
        "offload_params",
        is_flag=True,
        default=None,
        help="ZeRO-3 parameter shards, their gradients and the optimizer on the host "
        "(DeepSpeed offload_param, FSDP2 CPUOffloadPolicy).",
    ),
    click.option(
        "--document-length",
        "document_length",
        type=NUMBER,
        help="Sequences are packs of documents of this mean length (tokens) under document "
        "masking: attention FLOPs and time follow the documents' sum of squared lengths, not "
        "the pack's; MFU is shown both ways, as Megatron-LM's counter does. A histogram: the "
        "scenario file's or the API's document_lengths.",
    ),
]
"""The training recipe most runs set: FlashAttention, FP8, optimizer and parameter offload, packed
documents (the rest of the recipe is ``--set``'s: :data:`interface.flags.MOVED_FLAGS`)."""


def command_flags(command: click.Command) -> dict[str, str]:
    """The flags of ``command`` by the parameter each gives, {name: first long flag}
    (``zero_stage``: ``--zero``, ``num_gpus``: ``--gpus``), ``--set`` itself left out: what a
    ``--set`` of a key that is no scenario key but one of these is answered with
    (:func:`interface.scenario_keys.read_sets`), read off the command's own options so that a
    flag added to it is named without a second list.

    >>> @click.command()
    ... @click.option("--zero", "zero_stage")
    ... @click.option("--set", "set", multiple=True)
    ... def f(zero_stage, set): ...
    >>> command_flags(f)
    {'zero_stage': '--zero'}
    """
    out: dict[str, str] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name is None or "--set" in param.opts:
            continue
        long = next((o for o in param.opts if o.startswith("--")), None)
        if long is not None:
            out[param.name] = long
    return out


def set_option(command: str) -> Decorator:
    """``--set KEY=VALUE`` (repeatable) of ``command`` (evaluate, search or frontier): any key it
    takes of a scenario file (:mod:`interface.scenario_keys`), read and checked as the file's; the
    parameter ``set`` is {key: value}."""
    where = "the [cluster] table's" if command == "evaluate" else "a scenario file's"

    def read(ctx: click.Context, param: click.Parameter, value: Any) -> dict[str, Any]:
        from trainplan.interface.scenario_keys import EVALUATE_KEYS, SEARCH_KEYS, read_sets

        if any(item.strip() == "help" for item in value or ()):  # the keys, at the terminal
            from trainplan.interface.cli.reference import scenario_keys_text

            click.echo(scenario_keys_text(command))
            ctx.exit(0)
        keys = EVALUATE_KEYS if command == "evaluate" else SEARCH_KEYS
        return read_sets(value or (), keys, command, command_flags(ctx.command))

    return click.option(
        "--set",
        "set",
        multiple=True,
        metavar="KEY=VALUE",
        callback=read,
        help=f"Any of {where} keys, as the file writes it (repeatable): the rarely set knobs "
        "live here (--set moe_node_limit=4, --set overlap.dp=0.5); --set help lists every "
        "key. A key a flag also gives is refused.",
    )
