"""The web API's part the table lacks (``accelerator=`` on ``/api/evaluate``): a JSON object with
the keys of an accelerator file, read by the file's reader, answering what ``trainplan evaluate
--gpu PATH.toml`` answers for the same part; bad input HTTP 422 with one line; a ``--gpu``
path refused (the web app reads no server files). Skipped without the ``[web]``/``[webtest]``
extras (see conftest)."""

from __future__ import annotations

import json
import warnings
from urllib.parse import urlencode

import pytest

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.api import evaluate  # noqa: E402
from trainplan.interface.web.app import create_app  # noqa: E402

PART = {"base": "H100-SXM", "name": "H100-600W", "bf16_tflops": 900, "source": "our measurement"}


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


def query(**kw: object) -> str:
    return "/api/evaluate?" + urlencode({"model": "llama3-8b", "dp": 8, **kw})


def test_an_inline_accelerator_is_the_file_part(client, tmp_path):
    """The object's part plans as the same keys in a file do: same step, same MFU (the 900e12
    peak), the answer saying where its figures come from."""
    got = client.get(query(accelerator=json.dumps(PART))).json()
    path = tmp_path / "p.toml"
    path.write_text(
        "[[accelerator]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in PART.items())
    )
    want = evaluate(model="llama3-8b", dp=8, gpu=str(path))
    assert got["time"]["step_s"] == want.step_s and got["time"]["mfu"] == want.mfu
    assert got["gpu"] == {
        "name": "H100-600W",
        "memory_bytes": 80 * 10**9,
        "peak_flops_per_s": 900e12,
        "source": want.device.source,
        "file": "the request's accelerator object",
        "part": "H100-SXM",
    }
    said = [a for a in got["assumptions"] if a.startswith("accelerator H100-600W: figures from")]
    assert said and said[0].startswith(
        "accelerator H100-600W: figures from: the request's accelerator object (bf16_tflops: our"
    )


@pytest.mark.parametrize(
    ("kw", "line"),
    [
        ({"accelerator": json.dumps({**PART, "bf16_tflops": -1})},
         "accelerator: key 'bf16_tflops' must be positive, got -1"),
        ({"accelerator": json.dumps({**PART, "tflops": 1})}, "accelerator: unknown key 'tflops'"),
        ({"accelerator": json.dumps({**PART, "base": "H100X"})},
         "accelerator: base 'H100X' is not in the accelerator table"),
        ({"accelerator": "[1]"}, "accelerator: must be a JSON object, not list"),
        ({"accelerator": "{"}, "accelerator: is not JSON"),
        ({"accelerator": json.dumps(PART), "gpu": "H100-SXM"},
         "gpu: 'H100-SXM' does not apply: the accelerator object is the part"),
        ({"gpu": "parts/x.toml"}, "gpu: 'parts/x.toml' does not apply here: the web app reads no files"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(client, kw, line):
    got = client.get(query(**kw))
    assert got.status_code == 422 and got.json()["error"].startswith(line), got.json()
    assert "\n" not in got.json()["error"]
