"""The page's sweeps: one cancelled stops after the batches running when the DELETE comes (until
then it is ``cancelling``, never ``running`` again, the DELETE's own answer included, then
``cancelled``); their results' folder goes with the server's process."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web import sweep  # noqa: E402
from trainplan.interface.web.app import create_app  # noqa: E402


@pytest.fixture
def job(monkeypatch, tmp_path):
    """A sweep of 3 points the server counts as running, 1 done (no pool is started)."""
    one = sweep.Job("0123abcd", SimpleNamespace(points=[1, 2, 3]), Path(tmp_path), todo=3, done=1)
    monkeypatch.setitem(sweep._JOBS, one.id, one)
    return one


def test_delete_answers_cancelling_until_the_running_batches_end(job):
    client = TestClient(create_app(("testserver",)))
    assert client.get(f"/api/sweep/{job.id}").json()["state"] == "running"
    cancelled = client.delete(f"/api/sweep/{job.id}")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelling"
    assert (
        job.cancel.is_set() and client.get(f"/api/sweep/{job.id}").json()["state"] == "cancelling"
    )
    job.state = "cancelled"  # what the sweep's thread sets once its batch ends
    final = client.get(f"/api/sweep/{job.id}").json()
    timing = ("points_per_s", "seconds_left")  # from the clock
    assert {k: v for k, v in final.items() if k not in timing} == {
        "id": job.id,
        "state": "cancelled",
        "points": 3,
        "todo": 3,
        "done": 1,
    }


def test_the_results_folder_goes_with_the_server(tmp_path):
    """The page's sweeps write into one temporary folder a process; it is removed as the process
    ends (it held 44 leftover folders in /tmp after a test run)."""
    import subprocess
    import sys

    code = (
        "from trainplan.interface.web.sweep import _folder; f = _folder(); "
        "(f / 'rows.parquet').write_text('x'); print(f)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    folder = Path(done.stdout.strip())
    assert folder.name.startswith("trainplan-sweeps-") and not folder.exists()
