"""``hetspec serve``: the what-if page on a local port (the server's packages: ``pip install 'hetspec[web]'``)."""

from __future__ import annotations

import argparse
import socket

from hwmodels.errors import HetSpecError

#: Loopback: the page is for the person at this machine; another address is the user's explicit choice.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="a local what-if web page over the simulator (needs 'hetspec[web]')")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise HetSpecError(f"--port must be in 1-65535 (got {args.port})")
    try:
        import uvicorn

        from web.app import create_app
    except ImportError as exc:
        raise HetSpecError(f"hetspec serve needs the web extra ({exc.name} is missing): "
                           "pip install 'hetspec[web]'") from None
    check_can_listen(args.host, args.port)
    print(f"HetSpec what-if page: http://{args.host}:{args.port}/  (Ctrl-C stops it)", flush=True)
    uvicorn.run(create_app(), host=args.host, port=args.port, log_level="warning")
    return 0


def check_can_listen(host: str, port: int) -> None:
    """One line if ``host:port`` cannot be listened on (a port in use, an address not of this machine), before
    the server starts: the server itself would log the failure over several lines."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(address)
    except OSError as exc:
        raise HetSpecError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
