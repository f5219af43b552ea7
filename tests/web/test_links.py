"""The link → form mapping: every name a hand-written link of the original tool uses on each tab
reads as that tab's own parameter, and a name no tab knows is refused by the API naming it and the
command's parameters (never click's "No such option" guessing at an option the page lacks)."""

from __future__ import annotations

import pytest

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")

from trainplan.interface.cli.query import parse_query  # noqa: E402
from trainplan.interface.web.links import aliases, names  # noqa: E402
from trainplan.model.errors import InputError  # noqa: E402

ORIGINAL = {
    "planner": {"model": "model", "params": "params", "gpu": "gpu", "dp": "dp", "tp": "tp",
                "pp": "pp", "cp": "cp", "ep": "ep", "zero_stage": "zero"},
    "pipeline": {"pp": "stages", "p": "stages", "m": "microbatches", "schedule": "schedule",
                 "v": "virtual-stages"},
    "mfu": {"params": "params", "tokens": "tokens", "gpus": "chips", "step": "step-seconds",
            "gpu": "gpu", "peak_tflops": "peak-tflops", "tokens_per_second": "tokens-per-second"},
    "ckpt": {"n": "layers", "k": "every", "labels": "labels", "step": "step"},
    "rlhf": {"algorithm": "algorithm", "model": "model", "gpus": "gpus", "reward": "reward",
             "policy_params": "policy-params"},
}  # fmt: skip
"""Per tab, the original tool's link names (the issue's links and the examples' parameters) →
the tab's own name (its command's option without dashes)."""


def _page_name(page: str, key: str) -> str:
    """A link's ``key`` as page.js's canonical() reads it: own name, else an alias."""
    own = set(names(page))
    if key in own:
        return key
    return aliases(page).get(key) or aliases(page).get(key.replace("_", "-"), key)


@pytest.mark.parametrize(
    ("page", "key", "want"),
    [(page, key, want) for page, m in ORIGINAL.items() for key, want in m.items()],
)
def test_every_original_name_reads_as_the_tabs_own(page, key, want):
    assert want in names(page)
    assert _page_name(page, key) == want


def test_the_original_names_that_are_no_command_name():
    assert aliases("pipeline")["pp"] == "stages"
    assert aliases("mfu")["gpus"] == "chips"
    assert aliases("mfu")["step"] == "step-seconds"
    assert "gpus" not in aliases("rlhf")  # the RLHF command has --gpus of its own


def test_an_unknown_name_is_refused_naming_it_and_the_parameters():
    with pytest.raises(InputError) as err:
        parse_query("pipeline", [("stagez", "8")])
    text = str(err.value)
    assert text.startswith(
        "stagez: no such parameter of pipeline (did you mean stages?); its parameters are "
    )
    assert "stages" in text and "microbatches" in text
    assert "No such option" not in text and "png" not in text  # a file option is no guess


def test_the_planners_link_may_carry_its_uploaded_config():
    """``config`` (the uploaded config.json's text) and ``accelerator`` are the API's own
    parameters of /api/evaluate, no option of ``evaluate``: the planner's link names include
    them, so app.js canonical() keeps them (it refused ``config`` and opened llama3-70b)."""
    assert {"config", "accelerator"} <= set(names("planner"))
    # the search and frontier take the upload too (their answers' planner links carry it), but
    # no inline accelerator
    assert "config" in names("search") and "config" in names("frontier")
    assert "accelerator" not in names("search")
