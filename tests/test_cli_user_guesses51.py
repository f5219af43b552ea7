"""What a user guesses, read as meant or refused with what to write, each ``trainplan`` call its
own process (:mod:`tests.cli_runs`): a time limit in minutes written ``2m`` (the count suffix M),
a headroom written as bytes, and an accelerator named by its family and memory size."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many

SEARCH = ["search", "--model", "llama3-8b", "--gpus", "8"]
EVAL = ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--json", "--gpu"]


def test_guesses_are_read_or_refused_with_what_to_write():
    """``--time-limit 2m``: M is the count suffix (millions), so it is refused naming minutes,
    2min = 2 × 60 = 120 s, or the plain 120; ``--headroom 10GB``: a share, not bytes, so the
    refusal names its form (a fraction or a percent), not "the number alone" (10 is refused as
    above 1); ``--gpu H100-80GB``: two parts of the catalogue are 80 GB H100s (the SXM and the
    PCIe part), named both; ``--gpu "H200 141GB"``: the one 141 GB H200, taken."""
    runs = run_many(
        {
            "2m": [*SEARCH, "--time-limit", "2m"],
            "10GB": [*SEARCH, "--headroom", "10GB"],
            "h100": [*EVAL, "H100-80GB"],
            "h200": [*EVAL, "H200 141GB"],
        }
    )
    assert refusal(runs["2m"]) == (
        "--time-limit: '2m' is a count suffix, not a unit: write 2min (120 s) or 120"
    )
    assert refusal(runs["10GB"]) == (
        "--headroom: '10GB' is a size in bytes, not a plain number: write a fraction from 0 to "
        "1, or a percent such as 40%"
    )
    assert refusal(runs["h100"]) == (
        "--gpu: 'H100-80GB' is ambiguous: it could be H100-SXM, H100-PCIe; name one "
        "(trainplan gpus lists them)"
    )
    assert runs["h200"].returncode == 0, runs["h200"].stderr
    assert json.loads(runs["h200"].stdout)["gpu"]["name"] == "H200"


def test_packed_documents_are_said_on_the_layout_line():
    """``evaluate --document-length 1024`` sized the step for packed documents (the attention's
    FLOPs and, under megatron, the kernels' ``thd`` tensors) but its text said nothing of them;
    the layout line says it beside the sequence length, as the JSON's
    ``layout.document_lengths`` gives it ([[1024, 1]]: one length)."""
    base = ["evaluate", "--model", "llama3-8b", "--gpus", "8", "--document-length", "1024"]
    runs = run_many({"text": base, "json": [*base, "--json"]})
    line = runs["text"].stdout.splitlines()[1]
    assert "s 8,192 (packed documents of 1,024 tokens), rank order" in line, line
    assert json.loads(runs["json"].stdout)["layout"]["document_lengths"] == [[1024, 1]]
