"""The ``Host`` header check that keeps DNS rebinding out of servers that trust their network.

A web page whose domain an attacker re-points at 127.0.0.1 (DNS rebinding) reaches a loopback
server through the visitor's browser, but the browser still sends the page's own name as ``Host``.
A server that answers only the names it knows (loopback, ``localhost``, names its operator lists)
cannot be read that way. The codec server (without a token) and the HTTP API (in header mode) both
answer ``421 Misdirected Request`` to any other ``Host``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable


def host_name(header: str | None) -> str | None:
    """The name a ``Host`` header gives, without its port, lower-case, without a trailing dot
    (``[::1]:8091`` -> ``::1``); None for an empty or missing header."""
    if not header or not header.strip():
        return None
    host = header.strip()
    if host.startswith("["):  # [v6]:port
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".").lower() or None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is ``localhost`` or a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_allowed(header: str | None, names: Iterable[str] = ()) -> bool:
    """Whether a request's ``Host`` header names loopback, ``localhost`` or one of ``names``."""
    host = host_name(header)
    if host is None:
        return False
    return is_loopback(host) or host in {n.rstrip(".").lower() for n in names}


__all__ = ["host_allowed", "host_name", "is_loopback"]
