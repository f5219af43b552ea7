"""A query key written as the JSON answer names its field (``global_batch_size``,
``zero_stage``, ``micro_batch_size``: ``defaults_used`` and ``layout`` print them so) against
``trainplan serve`` in its own process, as a user's ``curl`` sends it. The refusal named a key the
user had not sent and suggested the very key it said did not exist (``global-batch: no such
parameter of evaluate (did you mean global-batch?)``), or an unrelated one (``zero: … (did you
mean per-stage?)``, though ``zero`` is evaluate's); it now names the key sent and the one to
write."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")

HINT = "(a key, in a query or a JSON body, is the command's option without its leading --, not the JSON answer's field name)"


def _refused(server: str, path: str) -> str:
    with pytest.raises(urllib.error.HTTPError) as got:
        urllib.request.urlopen(server + path, timeout=120)
    assert got.value.code == 422
    return json.loads(got.value.read())["error"]


@pytest.mark.parametrize(
    ("command", "field", "key"),
    [
        ("evaluate", "global_batch_size", "global-batch"),
        ("evaluate", "zero_stage", "zero"),
        ("evaluate", "micro_batch_size", "micro-batch"),
        ("evaluate", "num_gpus", "gpus"),
        ("evaluate", "flash_attention", "flash"),
        ("search", "zero_stage", "zero"),
        ("search", "global_batch_size", "global-batch"),
    ],
)
def test_a_json_field_name_as_query_key_names_the_key_to_write(server, command, field, key):
    line = _refused(server, f"/api/{command}?model=llama3-8b&gpus=8&{field}=1")
    assert line == f"{field!r}: no such parameter of {command}; write it {key} {HINT}"


def test_a_key_of_no_field_still_gets_the_closest_parameter(server):
    line = _refused(server, "/api/evaluate?model=llama3-8b&tpp=8")
    assert line.startswith("tpp: no such parameter of evaluate (did you mean tp?); its parameters")
