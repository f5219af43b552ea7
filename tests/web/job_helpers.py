"""A client that leaves before a job's answer stops the job's process: the check the search,
frontier and RLHF-plan endpoints share (:mod:`interface.web.jobs`)."""

from __future__ import annotations

import http.client
import json
import time
import urllib.request
from pathlib import Path


def jobs(server: str) -> list:
    """The server's running jobs (``/api/jobs``)."""
    with urllib.request.urlopen(f"{server}/api/jobs", timeout=10) as res:
        return json.loads(res.read())


def leaving_stops_the_job(server: str, path: str, read_first_event: bool = False) -> dict:
    """Request ``path``, wait (30 s at most) until its job runs, close the connection (after
    reading the first event where ``read_first_event``), and assert that within 10 s no job is
    left and the job's process is gone; the job as ``/api/jobs`` listed it."""
    host, port = server.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("GET", path)
    if read_first_event:
        res = conn.getresponse()
        assert res.status == 200 and b'"event"' in res.fp.readline() + res.fp.readline()
    deadline = time.time() + 30
    running: list = []
    while not running and time.time() < deadline:
        running = jobs(server)
        time.sleep(0.2)
    assert running, f"{path} never started"
    pid = running[0]["pid"]
    assert Path(f"/proc/{pid}").exists()
    conn.close()
    deadline = time.time() + 10
    while (jobs(server) or Path(f"/proc/{pid}").exists()) and time.time() < deadline:
        time.sleep(0.2)
    assert jobs(server) == [] and not Path(f"/proc/{pid}").exists(), path
    return running[0]
