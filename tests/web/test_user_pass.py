"""A new user's pass over ``trainplan serve``, against a real server
process (:func:`tests.web.conftest.server`): ``curl -I`` on the address it prints."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit


def _head(address: str, path: str) -> http.client.HTTPResponse:
    where = urlsplit(address)
    conn = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=60)
    conn.request("HEAD", path)
    return conn.getresponse()


def test_head_answers_as_get_does(server):
    """``HEAD /`` answered 405 Method Not Allowed; now the redirect to the planner, as ``GET /``,
    and ``HEAD /planner`` (``curl -IL`` follows it) 200 with no body."""
    home = _head(server, "/")
    assert home.status == 307 and home.getheader("location") == "/planner"
    planner = _head(server, "/planner")
    assert planner.status == 200 and planner.read() == b""
    assert planner.getheader("content-type", "").startswith("text/html")
