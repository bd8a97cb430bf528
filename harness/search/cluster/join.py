"""Joining a Ray cluster the first time: the cluster's token, a fast pre-flight check, one-line errors.

Ray 2.60 turns token authentication on by default for clusters started with ``ray start --head``,
but a driver that joins with ``ray.init(address=...)`` only sends the token when
``RAY_AUTH_MODE=token`` is set; without it the user sees twenty seconds of ``InvalidAuthToken``
log lines and a traceback. :func:`join` looks for the token where Ray itself keeps it
(``RAY_AUTH_TOKEN``, the file named by ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``) and turns
token mode on when one is found; then, before ``ray.init``, it checks in a couple of seconds that
something listens at the address and that the cluster accepts the token, so a wrong address, a
stopped cluster or a wrong token is one line naming the cause and the fix.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from pathlib import Path

from harness.search import adapter
from trials.errors import ArchsearchError
from trials.lazy import lazy_import

# Ray: only when a cluster is joined (the CLI imports this module to check its arguments).
ray = lazy_import("ray")

AUTH_MODE = "RAY_AUTH_MODE"
TOKEN_VARIABLE = "RAY_AUTH_TOKEN"
TOKEN_PATH_VARIABLE = "RAY_AUTH_TOKEN_PATH"
CONNECT_TIMEOUT_S = 2.0


class ClusterError(ArchsearchError, RuntimeError):
    """The cluster cannot be joined: one line with the cause and the fix (exit code 2)."""

    kind = "cluster"


def token_source() -> str | None:
    """Where the cluster token comes from (Ray's own order), or None when there is none."""
    if os.environ.get(TOKEN_VARIABLE):
        return f"${TOKEN_VARIABLE}"
    path = os.environ.get(TOKEN_PATH_VARIABLE)
    if path:
        return path if Path(path).expanduser().is_file() else None
    default = Path.home() / ".ray" / "auth_token"
    return str(default) if default.is_file() else None


def use_token_if_available() -> str | None:
    """Turn on Ray's token mode when a token is available and the user has not chosen a mode."""
    source = token_source()
    if source is None or os.environ.get(AUTH_MODE):
        return source
    os.environ[AUTH_MODE] = "token"
    with contextlib.suppress(Exception):  # Ray caches its config: refresh it
        adapter.refresh_ray_config()
    return source


def resolve(address: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``."""
    if address.startswith("ray://"):
        host, _, port = address.removeprefix("ray://").rpartition(":")
        scheme = "ray"
    else:
        scheme = "gcs"
        if address == "auto":
            found = adapter.local_cluster_address()
            if found is None:
                raise ClusterError(
                    "--address auto found no running Ray cluster here (RAY_ADDRESS is unset and no cluster was "
                    "started on this machine): start one with `ray start --head`, or give --address HOST:PORT"
                )
            address = found
        host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ClusterError(f"--address {address!r} is not HOST:PORT, ray://HOST:PORT or auto")
    return scheme, host, int(port)


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def _quiet_stderr():
    """Silence Ray's C++ warnings (written straight to file descriptor 2) during a probe."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _check_token(host: str, port: int, source: str | None) -> None:
    """Ask the cluster's GCS for one key with the token this process would send (well under a second)."""
    try:
        with _quiet_stderr():
            client = adapter.gcs_client(f"{host}:{port}")
            client.internal_kv_get(b"session_name", b"session", timeout=CONNECT_TIMEOUT_S)
    except Exception as error:
        text = str(error)
        if "Unauthenticated" in text or "InvalidAuthToken" in text or type(error).__name__ == "AuthenticationError":
            have = f"the token from {source}" if source else "no token"
            raise ClusterError(
                f"the Ray cluster at {host}:{port} refused {have}: copy the head's token (`ray get-auth-token` "
                f"there) into {TOKEN_VARIABLE}, a file named by {TOKEN_PATH_VARIABLE}, or ~/.ray/auth_token here"
            ) from None
        raise ClusterError(
            f"no Ray cluster answers at {host}:{port} ({type(error).__name__}: {text.splitlines()[0][:120]}): "
            "check the address and that the head runs (`ray start --head --port PORT`)"
        ) from None


def join(address: str) -> None:
    """``ray.init`` on the cluster at ``address``, after the token and pre-flight checks (ClusterError)."""
    source = use_token_if_available()
    scheme, host, port = resolve(address)
    if not _listening(host, port):
        raise ClusterError(
            f"nothing listens at {host}:{port}: check --address, and that the Ray head runs there "
            f"(`ray start --head --port {port}`) and the port is open from this machine"
        )
    if scheme == "gcs":
        _check_token(host, port, source)
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except Exception as error:  # anything the pre-flight did not foresee: still one line
        raise ClusterError(f"cannot join the Ray cluster at {address}: {str(error).splitlines()[0][:200]}") from None


def alive_nodes() -> int:
    return sum(1 for node in ray.nodes() if node.get("Alive", True))
