"""The pages, one per tab, the static files they load and the API's documentation — all served
from the package, nothing from a network (the Swagger UI of ``/docs`` from the swagger-ui-bundle
package's own files).

A page is ``pages/layout.html`` around ``pages/<tab>.html`` (the search and frontier tabs share
``pages/search_inputs.html``), with ``static/app.js`` (the URL as
the page's state, the API calls, the error line, the accelerator table) and ``static/<tab>.js``.
"""

from __future__ import annotations

import re
from functools import cache
from html import escape as html_escape
from importlib.resources import files

from fastapi import APIRouter, HTTPException
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from trainplan.model import units
from trainplan.topology.accelerators import STATUS_HEADER, status_legend

__all__ = [
    "router",
    "PAGES",
    "GPU_PAGES",
    "SCRIPTS",
    "INTROS",
    "LIST_HELP",
    "LIST_SEPARATOR",
    "NO_FIELD",
    "STATIC",
    "swagger_folder",
]

PAGES = {
    "planner": "Planner",
    "pipeline": "Pipeline bubble",
    "mfu": "MFU & HFU",
    "ckpt": "Checkpointing",
    "rlhf": "RLHF",
    "search": "Search",
    "frontier": "Frontier",
    "sweep": "Sweep",
    "about": "About",
}
"""Each tab's path and title, in the navigation's order."""
INTROS = {
    "planner": "Pick a model (or type its size, or read a config.json) and a GPU, then set the "
    "degrees of data (dp), tensor (tp), pipeline (pp), context (cp) and expert (ep) parallelism. "
    "The planner adds up what one GPU holds at its peak: model state sharded by ZeRO-1, -2, -3 or "
    "FSDP over the data-parallel ranks, and the activations of the micro-batches in flight under "
    "the recomputation chosen. It compares the ZeRO stages the framework runs (megatron: 0, 1, "
    "3) and lists what each parallel axis "
    "sends per step, over which link, and for how long. An empty field takes the value shown in "
    "grey.",
    "pipeline": "A timeline of GPipe, 1F1B, interleaved 1F1B, the zero-bubble schedules (ZB-H1, "
    "ZB-H2, ZB-V) or DualPipe and DualPipeV on p stages with m micro-batches, the bubble "
    "((p − 1)/(v·m + p − 1) for GPipe and 1F1B) and how many micro-batches of activations each "
    "stage holds. An empty field takes the value shown in grey.",
    "mfu": "Model FLOPs utilisation from one measured step (6·N·D ÷ (peak × chips × seconds)), "
    "from tokens per second, or from a reported FLOP rate, optionally with PaLM's attention "
    "FLOPs; HFU adds the recomputed FLOPs. An empty field takes the value shown in grey.",
    "ckpt": "Step through, or play, the forward and backward passes of an n-layer network "
    "checkpointed every k layers: which activations are kept, which are discarded and "
    "recomputed, and how many are held at each moment against no checkpointing. Keys on the "
    "player: ← and → step, Home and End jump, Space plays and pauses.",
    "rlhf": "The resident memory of PPO (actor, critic, reward, reference), GRPO (no critic; no "
    "reward model with a rule-based reward) and DPO (policy and reference), and the FLOPs and "
    "time share of one RL step: rollout generation, scoring and training. Fields that do not "
    "apply to the algorithm are greyed out. Under them, the placement plan searches where each "
    "role runs and how (trainplan rlhf-plan); Cancel stops it on the server.",
    "search": "The fastest layout of a model on a GPU count (or a range or list of counts, "
    "accelerators, frameworks), proven optimal by CP-SAT over every legal combination of degrees, "
    "ZeRO stage, recomputation, schedule and micro-batch. Cancel stops the search on the server.",
    "frontier": "Every layout no other beats on both step time and memory per GPU (or GPU count, "
    "or cluster price): the Pareto frontier, each point one click from the Planner, and as CSV.",
    "sweep": "Many searches at once: every combination of the grid's models, GPUs, GPU counts, "
    "batch sizes and hardware what-ifs (1.5× the HBM, 2× the network) is one search. The "
    "progress streams as points finish; the best layout per model, a figure, and every row as CSV "
    "or Parquet follow. Cancel stops the sweep on the server.",
    "about": "What the planner computes, how to use each tab, how to link to a plan, the sources "
    "it follows and the limits of its figures.",
}
"""Each tab's "how to use" line, under its title."""
LIST_SEPARATOR: str = units.LIST_SEPARATOR
"""How one field holds several values (``2048;4096``): the separator of the command line's list
grammar (``model.units.LIST_SEPARATOR``), which the API reads; a comma only groups thousands."""
LIST_HELP = (
    f"Several values: a range lo..hi (64..4096), or the values with '{LIST_SEPARATOR}' between "
    f"them (2048{LIST_SEPARATOR}4096); a comma only groups thousands (16,384 is one number)."
)
"""The words for lists, in every form that takes them (``{{list_help}}``)."""
_SEARCH_NO_FIELD = {
    **dict.fromkeys(
        "params arch layers hidden heads kv-heads head-dim ffn-hidden vocab".split(),
        "a model the catalogue lacks comes as its config.json (the Job's upload), not by size",
    ),
    "workers": "the server's CP-SAT runs with the command line's defaults: 2 workers, 1 per stage",
    "mtp-layers": "Other settings: mtp_layers=0",
    "rank-order": "Other settings: rank_order=tp-cp-ep-dp-pp",
    "flash": "Other settings: flash_attention=false",
    "offload-optimizer": "Other settings: offload_optimizer=0.5",
    "offload-params": "Other settings: offload_params=true",
    "document-length": "Other settings: document_length=2048",
    "cp-a2a": "Other settings: cp_a2a=2",
}
NO_FIELD: dict[str, dict[str, str]] = {
    "search": _SEARCH_NO_FIELD,
    "frontier": _SEARCH_NO_FIELD,
    "evaluate": {  # a 2021 Megatron-LM setting the calibration runs carry, not a planning choice
        "pipeline-scatter-gather": "a link's pipeline-scatter-gather=false (calibrate's lines)"
    },
}
"""Per page (named as its command), the command's options without a field of their own, with
why: those out of the page's reach, or ``Other settings: KEY=VALUE``, the line of the page's
"Other settings" field (``--set KEY=VALUE``, one a line) that gives the same scenario key. A link
may still carry any of them (kept as they came and listed, :func:`interface.web.links.names`).
``tests/web/test_page_fields.py`` holds every other option of ``evaluate``, ``search`` and
``frontier`` to a field or a ``--set`` key."""
STATIC = files("trainplan.interface.web") / "static"
_PAGES = files("trainplan.interface.web") / "pages"

router = APIRouter(include_in_schema=False)


def swagger_folder() -> str:
    """The folder of Swagger UI's script and style sheet inside the swagger-ui-bundle package."""
    import swagger_ui_bundle

    return str(swagger_ui_bundle.swagger_ui_path)


GPU_PAGES = frozenset({"planner", "search", "frontier", "sweep", "mfu", "rlhf"})
"""The tabs where an accelerator is chosen (a GPU field, or the sweep's scenario naming them):
they end with the accelerator table; the pipeline, checkpointing and about tabs, which have no
GPU, do not."""

SCRIPTS = {"search": ("search_page",), "frontier": ("search_page",), "rlhf": ("rlhf_plan",)}
"""Scripts a tab loads between app.js and its own (the search and frontier tabs' shared page; the
RLHF tab's step plan and placement plan section)."""

_ACCELERATORS = re.compile(r'\s*<section class="accelerators".*?</section>', re.DOTALL)


@cache
def _page(name: str) -> str:
    here = ' class="here" aria-current="page"'
    nav = "".join(
        f'<a href="/{key}" data-tab="{key}"{here if key == name else ""}>{title}</a>'
        for key, title in PAGES.items()
    )
    nav += '<a href="/docs">API</a><a href="/manual/">Documentation</a>'
    html = (_PAGES / "layout.html").read_text()
    for key, value in (
        ("title", PAGES[name]),
        ("page", name),
        ("nav", nav),
        ("intro", INTROS[name]),
        ("content", (_PAGES / f"{name}.html").read_text()),
        (
            "scripts",
            "".join(f'<script src="/static/{js}.js"></script>\n' for js in SCRIPTS.get(name, ())),
        ),
        ("search_inputs", (_PAGES / "search_inputs.html").read_text()),
        ("list_help", LIST_HELP),
        ("sep", LIST_SEPARATOR),
        ("gpu_status_legend", html_escape(status_legend())),
        ("gpu_status_header", html_escape(STATUS_HEADER)),
    ):
        html = html.replace("{{" + key + "}}", value)
    return html if name in GPU_PAGES else _ACCELERATORS.sub("", html)


@router.api_route("/", methods=["GET", "HEAD"])
def home() -> Response:
    """The planner is the first tab (a hash link, ``/#pipeline?stages=8``, keeps its hash across
    the redirect and opens its own tab). ``HEAD /`` (``curl -I``, an uptime probe) answers as
    ``GET`` does, not 405."""
    return RedirectResponse("/planner")


@router.get("/docs")
def docs() -> Response:
    """The API's OpenAPI description in Swagger UI, served from the package."""
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="trainplan API",
        swagger_js_url="/vendor/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url="/vendor/swagger-ui/swagger-ui.css",
        swagger_favicon_url="/vendor/swagger-ui/favicon-32x32.png",
    )


@router.get("/favicon.ico")
def favicon() -> Response:
    """No icon: an empty answer (204), not the 404 of an unknown page in the browser's console."""
    return Response(status_code=204)


@router.api_route("/{name}", methods=["GET", "HEAD"])
def page(name: str) -> Response:
    """One tab's page; its state is its query string (``HEAD`` answers as ``GET``)."""
    if name not in PAGES:
        raise HTTPException(404, f"no page {name!r}; the pages are {', '.join(PAGES)}")
    return HTMLResponse(_page(name))
