"""``python -m trainplan.interface.fidelity``: the published-runs report (``--markdown``: the
page ``docs/fidelity-published.md``; ``--goals``: its goals and rows as the tables
``docs/fidelity.md`` shows), the validation set (``--validation``) or the former calibration
rows' residuals (``--residuals``); ``--validation --goals`` prints the set against its goals, the
table the README shows. ``--set KEY=VALUE`` (any key of ``trainplan evaluate --set``) evaluates
every run with it as well: what a mechanism or a constant moves (``--set nccl_sm_charge=false``),
the figures the manual quotes beside the model's own. Bad input: one line, exit 2."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from trainplan.interface.fidelity import published, validation
from trainplan.interface.fidelity.report import markdown_report, summary_tables, text_report
from trainplan.interface.fidelity.validation_report import goal_table, report_text
from trainplan.interface.flags import refusal
from trainplan.interface.scenario_keys import EVALUATE_KEYS, read_sets
from trainplan.model.errors import PlannerError

PROG = "python -m trainplan.interface.fidelity"


def _over(params: Mapping[str, Any], sets: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with ``sets`` over them; a table's entries (``overlap.dp``) over its own."""
    out = dict(params)
    for key, value in sets.items():
        before = out.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            value = {**before, **value}
        out[key] = value
    return out


def _validation_results(sets: Mapping[str, Any]) -> tuple[validation.ValidationResult, ...]:
    """The validation set evaluated, each run's parameters with ``sets`` over them."""
    runs = validation.validation_runs()
    if sets:
        runs = tuple(dataclasses.replace(r, params=_over(r.params, sets)) for r in runs)
    return validation.evaluate_all(runs)


def _output(args: argparse.Namespace) -> str:
    """What the command prints."""
    sets = read_sets(args.set, EVALUATE_KEYS, "evaluate")
    if sets and args.residuals:
        raise PlannerError("--set: --residuals reports the model as it stands; drop --set")
    # a counterfactual says it is one
    said = f"Every run with --set {' --set '.join(args.set)}: not the model's defaults.\n\n"
    head = said if sets and not args.json else ""
    if args.validation:
        results = _validation_results(sets)
        if args.goals:
            return head + "\n".join(goal_table(results)) + "\n"
        return head + report_text(results, args.markdown, args.json)
    if args.residuals:
        return f"{published.residuals()}\n"
    runs = published.evaluate_all(**sets)
    if args.goals:
        return head + "\n".join(summary_tables(runs)) + "\n"
    return head + (markdown_report(runs) if args.markdown else text_report(runs))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=published.__doc__)
    parser.add_argument("--markdown", action="store_true", help="print the Markdown page")
    parser.add_argument(
        "--validation",
        action="store_true",
        help="the validation set of published end-to-end runs (scenarios/validation)",
    )
    parser.add_argument("--json", action="store_true", help="with --validation: print JSON")
    parser.add_argument(
        "--goals",
        action="store_true",
        help="the runs against their goals (Markdown): the published runs' goals and rows as "
        "docs/fidelity.md shows them, or with --validation the set's table the README shows",
    )
    parser.add_argument(
        "--residuals",
        action="store_true",
        help="the step-time error of the former calibration rows (fits nothing)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="evaluate every run with KEY=VALUE as well (any key of trainplan evaluate --set; "
        "repeatable), e.g. --set nccl_sm_charge=false",
    )
    args = parser.parse_args(argv)
    if args.json and not args.validation:
        parser.error("--json applies to --validation only")
    if args.json and (args.markdown or args.goals):
        parser.error("--json: give one of --json, --markdown, --goals")
    try:
        text = _output(args)
    except PlannerError as err:
        typed = {"--set", *(f"--set {item.partition('=')[0].strip()}" for item in args.set)}
        print(f"{PROG}: error: {refusal(str(err), typed)}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
