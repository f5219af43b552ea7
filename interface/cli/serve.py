"""``trainplan serve``: the planner in the browser, on this machine only (the ``[web]`` extra)."""

from __future__ import annotations

import socket

import click

from trainplan.interface.cli import cli
from trainplan.model.errors import InputError

HOST = "127.0.0.1"
"""Loopback only: the app is for the person at this machine."""


def _socket(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:port (0: a free port), or one line saying why not."""
    if not 0 <= port <= 65535:
        raise InputError(f"--port: {port} must be from 0 to 65535 (0 = any free port)")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((HOST, port))
    except OSError as err:
        sock.close()
        raise InputError(
            f"--port: {port} cannot be used on {HOST} ({err.strerror}); give another, or 0 for any free port"
        ) from None
    sock.listen(128)
    return sock


@cli.command("serve")
@click.option(
    "--port", type=int, default=8000, show_default=True, help="Port on 127.0.0.1 (0: any free one)."
)
def serve_cmd(port: int) -> None:
    """The planner in the browser: every tab, the JSON API (/docs) and the figures, served on
    127.0.0.1 from the package, nothing from a network (pip install -e '.[web]').

    Example: trainplan serve --port 8000
    """
    try:
        from trainplan.interface.web.app import serve
    except ImportError as err:
        raise InputError(
            f"serve: {err.name or 'the web extra'} is not installed; pip install -e '.[web]'"
        ) from None
    sock = _socket(port)
    address = f"http://{HOST}:{sock.getsockname()[1]}/"
    click.echo(f"trainplan serving on {address} (API documentation: {address}docs; Ctrl+C stops)")
    serve(sock)
