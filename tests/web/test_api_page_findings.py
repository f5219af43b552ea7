"""A browser tester's findings on the page, checked at the API: the planner's step terms come
from the answer's own list (the CLI's ``Step:`` line reads the same list); the checkpointing
frame and the DualPipe timeline cost little at large sizes; ``/favicon.ico`` answers 204; the
accelerator table only on the tabs that choose an accelerator; a count's refusal gives whole
numbers as examples; the pipeline's pass limit writes its numbers with thousands separators."""

from __future__ import annotations

import re
import time

import pytest

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


def test_step_terms_are_every_term_of_the_clis_step_line(client):
    """DeepSpeed ZeRO-3 with the optimizer on the host, Llama 3 8B on 8 H100s: the CLI prints
    ``compute 239.452 s + bubble 0.0 ms + exposed comm 8.297 s + offload 9.009 s = 256.758 s``
    (7.856 s and 256.317 s before each micro-batch's last reduce-scatter bucket, after the
    backward's computation, waited whole, model/dp_exposure.py; 8.722 s and 257.183 s before
    DeepSpeed's coordinator was walked, model/deepspeed_fetches.py);
    the page showed compute + bubble + exposed comm only (4.0 min + 0.0 ms + 8.722 s against a
    4.3 min step). The terms, in that order, add to the step: 239.452 + 0 + 8.297 + 9.009 =
    256.758 s."""
    q = "model=llama3-8b&framework=deepspeed&dp=8&zero=3&offload-optimizer=1"
    t = client.get(f"/api/evaluate?{q}").json()["time"]
    terms = t["step_terms"]
    assert [x["term"] for x in terms] == ["compute", "bubble", "exposed comm", "offload"]
    assert [round(x["s"], 3) for x in terms] == [239.452, 0.0, 8.297, 9.009]
    assert sum(x["s"] for x in terms) == pytest.approx(t["step_s"], rel=1e-12)
    assert round(t["step_s"], 3) == 256.758


def test_step_terms_without_offload_are_the_three(client):
    """Without an optimizer step charge, offload or accumulation the list is the three terms
    the page always showed (a term that is zero is left out, as the CLI leaves it out)."""
    t = client.get("/api/evaluate?model=llama3-8b&dp=8").json()["time"]
    assert [x["term"] for x in t["step_terms"]][:3] == ["compute", "bubble", "exposed comm"]
    assert sum(x["s"] for x in t["step_terms"]) == pytest.approx(t["step_s"], rel=1e-12)


def test_the_checkpointing_frame_at_1000_layers_is_cheap(client):
    """n = 1,000: 1,001 bars and a tick a cell took ~5.5 s and 432 KB a frame; the row is one
    image beyond 200 cells, with at most ~25 names (every 50th: input, out50, …, out1000). The
    30 s bound is only a guard against the old cost; the sizes are the assertion."""
    start = time.perf_counter()
    svg = client.get("/api/figures/ckpt-step?layers=1000&step=2").text
    assert time.perf_counter() - start < 30
    assert len(svg) < 150_000
    assert "out50" in svg and "out1000" in svg and "out41" not in svg


def test_dualpipe_32_by_128_is_drawn_as_collections(client):
    """32 ranks × 128 micro-batches of DualPipe: 8,944 passes, once a patch each (~19 s on the
    server, 36 s under a profiler); now one collection per row and bar height. The 60 s bound
    is a guard only."""
    start = time.perf_counter()
    res = client.get("/api/figures/pipeline?stages=32&microbatches=128&schedule=dualpipe")
    assert res.status_code == 200
    assert time.perf_counter() - start < 60


def test_favicon_is_an_empty_answer(client):
    res = client.get("/favicon.ico")
    assert res.status_code == 204 and res.content == b""


@pytest.mark.parametrize(
    ("tab", "shown"),
    [("planner", True), ("mfu", True), ("search", True), ("pipeline", False), ("ckpt", False)],
)
def test_the_accelerator_table_only_where_an_accelerator_is_chosen(client, tab, shown):
    html = client.get(f"/{tab}").text
    assert ('id="gpu-table"' in html) is shown


def test_a_counts_refusal_gives_whole_numbers():
    """Checkpointing's ``every`` has no limit of its own: its refusal said "write e.g. 0.5, 4e6…",
    a fraction for a count."""
    from trainplan.model.errors import InputError
    from trainplan.model.units import parse_count

    with pytest.raises(InputError) as err:
        parse_count("x", "every")
    assert (
        str(err.value)
        == "every: 'x' is not a number (write a whole number, e.g. 4, 16 or 4,000,000)"
    )


def test_the_pass_limit_writes_its_numbers_grouped(client):
    """4 stages × 4,000,000 micro-batches: the line said ``4·4000000·1``; the numbers now read as
    the grammar writes them."""
    err = client.get("/api/pipeline?stages=4&microbatches=4,000,000").json()["error"]
    assert re.match(r"stages × microbatches × virtual_stages: 4·4,000,000·1 is over", err), err


def test_the_pages_frontier_chart_is_the_plot_alone(client):
    """The page's chart left a 12-inch figure's layout list beside the plot, ~6 px tall at
    1,280 px (the table under it lists every layout): the page's chart is the plot, its points
    still links to the planner."""
    svg = client.get("/api/figures/frontier?model=llama3-8b&gpus=8..32&against=gpus").text
    assert "ZeRO-" not in svg
    assert len(re.findall(r'id="point-\d+"', svg)) == 5


def test_a_tp_cap_far_above_the_gpu_count_answers_as_uncapped(client):
    """``/api/search?…&max-tp=4,000,000`` gave no answer in 150 s (a list tp = 1..4,000,000);
    the cap now filters the divisors of 8 where the shapes are built."""
    base = "/api/search?model=llama3-8b&gpus=8&pp=1&zero=1&time-limit=5"
    capped = client.get(f"{base}&max-tp=4,000,000").json()
    free = client.get(base).json()
    assert capped["layout"] == free["layout"] and capped["objective_s"] == free["objective_s"]
