"""A search job's inputs: the model, training setup, layout, accelerator, links and cost
options that ``evaluate()`` reads, and the links each axis of a layout rides on the cluster.

Parsing flat parameters (CLI options, scenario files) into a :class:`Case` is the interfaces'
job (:func:`trainplan.interface.inputs.build_case`); the search only reads cases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainplan.model.estimate import Estimate, evaluate
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.layout import Layout, validate
from trainplan.model.model_spec import ModelSpec
from trainplan.model.specs import TrainingSpec
from trainplan.model.timing import CostOptions
from trainplan.topology.graph import build_cluster
from trainplan.topology.placement import axis_links

__all__ = ["Case", "links_for"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """Everything ``evaluate()`` needs, plus where each default came from."""

    model: ModelSpec
    training: TrainingSpec
    layout: Layout
    device: DeviceSpec
    links: ClusterLinks
    options: CostOptions
    num_gpus: int | None
    vocab_multiple: int | None = None
    """Pad V to a multiple of this × tp (``--pad-vocab``); None = each layout's framework's
    (:data:`model.vocab.VOCAB_MULTIPLE`)."""
    fabric: tuple[tuple[str, Any], ...] = ()
    """Cluster-graph options (rail_optimized, pod_size, oversubscription); empty = two tiers."""
    defaults_used: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    """What the reader must know about the inputs themselves (a default chosen by a rule, not
    published): printed with the evaluation's notes."""

    def evaluate(self, layout: Layout | None = None) -> Estimate:
        """Evaluate this case (or another layout of it).

        Raises
        ------
        LayoutError
            The layout's first broken legality rule (:func:`model.layout.validate`), checked
            before the links are placed so the message is the cost model's.
        """
        lay = layout or self.layout
        validate(lay, self.model, self.training, None if layout else self.num_gpus)
        return evaluate(
            self.model,
            self.training,
            lay,
            self.device,
            links_for(lay, self.links, self.fabric),
            self.options,
            None if layout else self.num_gpus,
            self.vocab_multiple,
        )


def links_for(
    layout: Layout, links: ClusterLinks, fabric: tuple[tuple[str, Any], ...] = ()
) -> dict[str, Any]:
    """Per-axis links of ``layout`` for its rank order: on a two-tier cluster (NVLink domains and a
    scale-out tier; topology.placement's span rule) or, with ``fabric`` options (``rail_optimized``,
    ``pod_size``, ``oversubscription``), the bottleneck bandwidth of each axis's first rank group in
    a networkx cluster graph (topology.graph)."""
    degrees = {"dp": layout.dp, "tp": layout.tp, "pp": layout.pp, "cp": layout.cp, "ep": layout.ep}
    degrees["etp"] = layout.expert_tp
    if not fabric:
        return axis_links(degrees, links, layout.rank_order)
    graph = build_cluster(
        layout.num_gpus,
        links.nvlink_domain,
        links.nvlink_bytes_per_s,
        links.scaleout_bytes_per_s,
        **dict(fabric),
    )
    return axis_links(degrees, graph, layout.rank_order)
