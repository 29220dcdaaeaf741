"""``python -m carillon_executor MODULE[:ATTRIBUTE]``: imports the module (its ``@job``
functions become the handlers) and serves them until SIGTERM or SIGINT, then drains.

``ATTRIBUTE`` names an :class:`Executor` the module made; without it, one is made from the
flags and the environment. With no ``--admin`` and no ``CARILLON_ADMIN_URLS``, the executor
joins the local node (``CARILLON_URL``, else ``http://127.0.0.1:9001``: the quickstart's) with
the tokens of its data directory (``CARILLON_DATA_DIR``, else the default one).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from .executor import Executor, ExecutorConfigError, RegistrationError
from .jobs import JobDefinitionError


def _data_dir() -> Path:
    if os.environ.get("CARILLON_DATA_DIR"):
        return Path(os.environ["CARILLON_DATA_DIR"])
    if os.environ.get("XDG_DATA_HOME"):
        return Path(os.environ["XDG_DATA_HOME"]) / "carillon"
    if os.environ.get("HOME"):
        return Path(os.environ["HOME"]) / ".local" / "share" / "carillon"
    return Path("carillon-data")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as e:
        raise ExecutorConfigError(
            "admin_urls",
            f"no --admin given, and the local node's {path.name} cannot be read ({e}): "
            "name the admin nodes and give the tokens",
        ) from None


def _parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(
        prog="python -m carillon_executor",
        description="Serve the @job handlers of MODULE to Carillon's admin nodes.",
    )
    p.add_argument("target", help="MODULE or MODULE:ATTRIBUTE (an Executor the module made)")
    p.add_argument("--app", default=env("CARILLON_EXECUTOR_APP"),
                   help="the app the handlers are registered under (env CARILLON_EXECUTOR_APP; "
                   "default: the module's name)")
    p.add_argument("--admin", action="append", default=None,
                   help="admin node URLs (repeat, or comma-separate; env CARILLON_ADMIN_URLS)")
    p.add_argument("--listen", default=env("CARILLON_EXECUTOR_LISTEN", "127.0.0.1:9100"),
                   help="where the dispatch endpoint listens (env CARILLON_EXECUTOR_LISTEN; "
                   "default 127.0.0.1:9100; port 0 takes a free one)")
    p.add_argument("--advertise", default=env("CARILLON_EXECUTOR_ADVERTISE"),
                   help="the URL nodes reach this executor at (default: the bound address)")
    p.add_argument("--capacity", type=int, default=None,
                   help="attempts run at once (env CARILLON_EXECUTOR_CAPACITY; default 16)")
    p.add_argument("--weight", type=int, default=None, help="share of weighted work (default 1)")
    p.add_argument("--executor-id", default=env("CARILLON_EXECUTOR_ID"))
    p.add_argument("--drain-secs", type=float, default=None,
                   help="how long a stop waits for running attempts (default 30)")
    p.add_argument("--tls-cert", default=env("CARILLON_EXECUTOR_TLS_CERT"))
    p.add_argument("--tls-key", default=env("CARILLON_EXECUTOR_TLS_KEY"))
    p.add_argument("--client-ca", default=env("CARILLON_EXECUTOR_CLIENT_CA"),
                   help="accept only nodes presenting a client certificate signed by this CA")
    p.add_argument("--admin-ca", default=env("CARILLON_ADMIN_CA"),
                   help="trust admin nodes' HTTPS certificates of this CA too")
    p.add_argument("--log-level", default=env("CARILLON_LOG", "info"))
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    module_name, _, attribute = args.target.partition(":")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
        executor = getattr(module, attribute) if attribute else _from_flags(args, module_name)
        if not isinstance(executor, Executor):
            print(f"error: {args.target} is not an Executor", file=sys.stderr)
            return 2
        if args.drain_secs is not None:
            executor.drain_timeout = args.drain_secs
        executor.serve(args.listen, tls_cert=args.tls_cert, tls_key=args.tls_key,
                       client_ca=args.client_ca)
    except (ExecutorConfigError, JobDefinitionError, RegistrationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def _from_flags(args: argparse.Namespace, module_name: str) -> Executor:
    admin: List[str] = [u for a in args.admin or [] for u in a.split(",")]
    settings = {
        "app": args.app or module_name.rpartition(".")[2],
        "admin_urls": admin or None,
        "capacity": args.capacity,
        "weight": args.weight,
        "executor_id": args.executor_id,
        "advertise": args.advertise,
        "admin_ca": args.admin_ca,
    }
    if not admin and not os.environ.get("CARILLON_ADMIN_URLS"):
        data = _data_dir()
        settings["admin_urls"] = [os.environ.get("CARILLON_URL") or "http://127.0.0.1:9001"]
        settings["executor_token"] = os.environ.get("CARILLON_EXECUTOR_TOKEN") or _read(data / "executor-token")
        settings["dispatch_secret"] = os.environ.get("CARILLON_DISPATCH_SECRET") or _read(data / "dispatch-secret")
    return Executor.from_env(**settings)


if __name__ == "__main__":
    sys.exit(main())
