"""``python -m trainplan.interface.fidelity``: the published-runs report (``--markdown``: the
page ``docs/fidelity-published.md``), the validation set (``--validation``) or the former
calibration rows' residuals (``--residuals``); ``--validation --goals`` prints the set against
its goals, the table the README shows."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from trainplan.interface.fidelity import published
from trainplan.interface.fidelity.report import markdown_report, text_report
from trainplan.interface.fidelity.validation import evaluate_all
from trainplan.interface.fidelity.validation_report import goal_table, print_report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainplan.interface.fidelity", description=published.__doc__
    )
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
        help="with --validation: print the table of the set against its goals (Markdown)",
    )
    parser.add_argument(
        "--residuals",
        action="store_true",
        help="the step-time error of the former calibration rows (fits nothing)",
    )
    args = parser.parse_args(argv)
    for flag in ("json", "goals"):
        if getattr(args, flag) and not args.validation:
            parser.error(f"--{flag} applies to --validation only")
    if args.goals:
        print("\n".join(goal_table(evaluate_all())))
        return 0
    if args.validation:
        print_report(args.markdown, args.json)
        return 0
    if args.residuals:
        print(published.residuals())
        return 0
    print(markdown_report() if args.markdown else text_report(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
