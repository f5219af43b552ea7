"""The names of the memory report's lines that depend on the run (the gathered weights, the
library that holds the dispatch or tp-overlap buffers, the output layer freed before the
backward): :func:`interface.render.report.evaluate_text` prints them; ``planner.js`` names the
page's lines alike."""

from __future__ import annotations

from typing import Any

__all__ = ["FREED_LABEL", "gathered_label", "library_labels"]


def gathered_label(m: dict[str, Any]) -> str:
    """The gathered-weights line's name (``memory.zero3_gathered_what``; planner.js alike)."""
    what = m.get("zero3_gathered_what")
    return f"gathered weights ({what})" if what else "gathered weights"


def library_labels(d: dict[str, Any]) -> tuple[str, str]:
    """The lines named after the library that holds the bytes (planner.js alike): the expert
    dispatcher's buffers (HybridEP's or DeepEP's, ``layout.moe.moe_dispatcher``) and the tp
    overlap buffers (PyTorch's symmetric memory under ``fsdp2``, else Transformer Engine's)."""
    hybrid = (d["layout"].get("moe") or {}).get("moe_dispatcher") == "hybridep"
    fsdp2 = d["layout"].get("framework") == "fsdp2"
    overlap = "async-TP symmetric memory" if fsdp2 else "Transformer Engine userbuffers"
    dispatcher = "HybridEP" if hybrid else "DeepEP"
    return f"expert dispatch buffers ({dispatcher})", f"{overlap} (whole run)"


FREED_LABEL = "less: output layer, freed before the backward"
"""``memory.output_layer_freed_bytes``' line: a subtraction shown as one (its bytes after
``less:``, positive), so the lines add up to the total; planner.js alike."""
