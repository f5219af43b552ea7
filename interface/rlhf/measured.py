"""Published RLHF steps beside the planner's figure for the same configuration (issue 12).

``scenarios/rlhf_measured.toml`` holds each run's configuration, its reported figure and its
source; :func:`rows` evaluates every run with the faithful RLHF accounting
(:func:`interface.rlhf.faithful.evaluate_placement`, the ``trainplan rlhf --model …`` tab) and
gives the error. ``python -m trainplan.interface.rlhf.measured`` prints the table of docs/guides/rlhf.md
("Measured RLHF configurations").
"""

from __future__ import annotations

from typing import Any

from trainplan import scenarios
from trainplan.interface.rlhf.faithful import evaluate_placement, rlhf_inputs
from trainplan.model.hf_config import architecture_from_dict
from trainplan.model.model_spec import ModelSpec

__all__ = ["runs", "rows", "table_markdown", "main"]


def runs() -> list[dict[str, Any]]:
    """The measured runs as written in the data file."""
    return list(scenarios.data("rlhf_measured")["run"])


def _model(name: str) -> ModelSpec | None:
    models = scenarios.data("rlhf_measured").get("models", {})
    if name not in models:
        return None
    return ModelSpec(
        name=name,
        source="scenarios/rlhf_measured.toml (released config.json)",
        arch=architecture_from_dict(dict(models[name]), f"rlhf_measured.toml: models.{name}"),
    )


def evaluate_run(run: dict[str, Any]) -> dict[str, Any]:
    """One run: its figures, the planner's step, the error (predicted / measured − 1)."""
    params = {"model": run["model"], **run["rlhf"]}
    spec = _model(run["model"])
    if spec is not None:
        params["model_spec"] = spec
    plan = evaluate_placement(rlhf_inputs(params))
    measured = run["measured_step_seconds"]
    return {
        "name": run["name"],
        "says": run["says"],
        "row": run["row"],
        "measured_step_seconds": measured,
        "predicted_step_seconds": plan.step_s,
        "error": plan.step_s / measured - 1,
        "phase_seconds": dict(zip(("rollout", "scoring", "training"), plan.phase_s, strict=True)),
        "fits": plan.fits,
        "peak_bytes": max(p.peak for p in plan.pools),
    }


def rows() -> list[dict[str, Any]]:
    """Every run evaluated (:func:`evaluate_run`)."""
    return [evaluate_run(r) for r in runs()]


def table_markdown(evaluated: list[dict[str, Any]]) -> str:
    """The RLHF guide's table: run, measured and predicted step time, error, the predicted phases,
    peak memory per GPU and the fit verdict."""
    head = (
        "| run (NeMo-RL v0.5, GRPO) | measured step | planner | error | rollout / scoring / "
        "training | peak GB/GPU | fits |\n|---|---:|---:|---:|---|---:|---|"
    )
    lines = [head]
    for r in evaluated:
        ph = r["phase_seconds"]
        lines.append(
            f"| {r['says']} | {r['measured_step_seconds']:g} s | "
            f"{r['predicted_step_seconds']:.1f} s | {r['error'] * 100:+.0f}% | "
            f"{ph['rollout']:.1f} / {ph['scoring']:.1f} / {ph['training']:.1f} s | "
            f"{float(r['peak_bytes']) / 1e9:.1f} | {'yes' if r['fits'] else 'no'} |"
        )
    return "\n".join(lines)


def main() -> None:
    """Print the table (``python -m trainplan.interface.rlhf.measured``)."""
    print(table_markdown(rows()))


if __name__ == "__main__":
    main()
