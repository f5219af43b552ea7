"""The web API's side of tests/test_cli_newuser47.py: a model by its dimensions takes
``head-dim`` (the Planner's field of that name) as the command line's ``--head-dim``, and an
uploaded config.json refuses the dimensions beside it — ``vocab`` and ``head-dim`` too, which it
answered with the config's own and dropped unread."""

from __future__ import annotations

import json
import warnings

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402

GPT = "/api/evaluate?arch=gpt&layers=80&hidden=8190&heads=64&tp=4"
CONFIG = json.dumps(
    {
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "intermediate_size": 1024,
        "vocab_size": 32000,
    }
)


def test_head_dim_on_the_web_is_the_command_lines():
    """Without ``head-dim`` the refusal names the field; with ``head-dim=128`` the model has the
    64,859,706,300 parameters tests/test_cli_newuser47.py counts by hand."""
    client = TestClient(create_app(("testserver",)))
    bad = client.get(GPT)
    assert bad.status_code == 422
    assert bad.json() == {
        "error": "model.hidden_size: 8190 is not divisible by num_attention_heads = 64; "
        "give head-dim"
    }
    good = client.get(GPT + "&head-dim=128")
    assert good.status_code == 200, good.text
    assert good.json()["model"]["num_params"] == 64_859_706_300


def test_an_uploaded_config_refuses_vocab_and_head_dim_beside_it():
    """``{"config": …, "vocab": 1000}`` answered the config's 32,000-row vocabulary and dropped
    the 1,000 unread; like ``layers`` or ``hidden`` beside a config it is refused, one line."""
    client = TestClient(create_app(("testserver",)))
    why = (
        "does not apply: the uploaded config.json is the model; give the config, a model or a size"
    )
    for key, value in (("vocab", 1000), ("head-dim", 64), ("layers", 8)):
        res = client.post("/api/evaluate", json={"config": CONFIG, key: value})
        assert res.status_code == 422, (key, res.text)
        assert res.json() == {"error": f"{key}: {value} {why}"}
    alone = client.post("/api/evaluate", json={"config": CONFIG})
    assert alone.status_code == 200, alone.text
    assert alone.json()["model"]["padded_vocab_size"] == 32000
