"""Connection limits with Kafka's names and behaviour (its SocketServer's ConnectionQuotas).

- ``max.connections``: at the limit the broker stops accepting. New clients wait in the
  kernel's listen backlog (they connect, but nothing answers) until a connection closes; none
  is refused. Kafka's acceptor does the same (it waits for a free slot before accepting).
- ``max.connections.per.ip`` / ``max.connections.per.ip.overrides``: a connection from an
  address that already holds its limit is accepted and closed at once, with a log line, as
  Kafka does; the address's other connections go on.

Both default to Integer.MAX_VALUE, as in Kafka. The counts live in the event loop's thread, so
no lock is needed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import socket
import time

log = logging.getLogger("kipproducer.broker")


def parse_overrides(text: str) -> dict[str, int]:
    """``host:count,host:count`` -> {host: count}. The count follows the last colon, so IPv6
    addresses need no brackets. A ValueError names the bad entry."""
    overrides: dict[str, int] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        try:
            value = int(count)
        except ValueError:
            value = -1
        if not sep or not host or value < 0:
            raise ValueError(f"{entry!r} is not host:count with a count of at least 0")
        overrides[host] = value
    return overrides


def resolve_overrides(overrides: dict[str, int]) -> dict[str, int]:
    """Host names to their addresses (Kafka resolves them once, at start), in the textual form
    peer addresses come in. A name that does not resolve is a ValueError."""
    resolved: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            resolved[str(ipaddress.ip_address(host))] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ValueError(f"host {host!r} does not resolve: {exc}") from None
        for info in infos:
            resolved[str(info[4][0])] = count
    return resolved


class ConnectionQuotas:
    """Counts the broker's connections, in total and per peer address."""

    def __init__(self, max_connections: int, max_per_ip: int, overrides_text: str = "") -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = resolve_overrides(parse_overrides(overrides_text))
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self._slot_freed: asyncio.Event | None = None
        self._warned_at = -1e9

    def reconfigure(self, max_connections: int, max_per_ip: int, overrides_text: str) -> None:
        """New limits at run time (dynamic max.connections...); connections already open
        stay, new ones are counted against the new limits."""
        self.overrides = resolve_overrides(parse_overrides(overrides_text))
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        if self._slot_freed is not None and self.total < max_connections:
            self._slot_freed.set()

    def limit_for(self, ip: str) -> int:
        return self.overrides.get(ip, self.max_per_ip)

    def admit(self, ip: str) -> bool:
        """Count a just-accepted connection from ``ip``; False (nothing counted) when the
        address is at its limit and the connection must be closed."""
        count = self.per_ip.get(ip, 0)
        limit = self.limit_for(ip)
        if count >= limit:
            log.info(
                "rejected connection from %s: it already has %d connections "
                "(max.connections.per.ip%s)", ip, count,
                ".overrides" if ip in self.overrides else "",
            )
            return False
        self.per_ip[ip] = count + 1
        self.total += 1
        return True

    def release(self, ip: str) -> None:
        count = self.per_ip.get(ip, 0)
        if count <= 1:
            self.per_ip.pop(ip, None)
        else:
            self.per_ip[ip] = count - 1
        self.total = max(0, self.total - 1)
        if self._slot_freed is not None and self.total < self.max_connections:
            self._slot_freed.set()

    async def wait_for_slot(self) -> None:
        """Until the broker holds fewer than max.connections connections."""
        if self.total < self.max_connections:
            return
        now = time.monotonic()
        if now - self._warned_at >= 10:  # once per stretch, not once per waiting client
            self._warned_at = now
            log.warning(
                "%d connections (max.connections): not accepting until one closes", self.total
            )
        while self.total >= self.max_connections:
            self._slot_freed = asyncio.Event()
            await self._slot_freed.wait()
        self._slot_freed = None


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft limit on open files to its hard limit (each connection holds
    a descriptor; the usual soft limit, 1024, is far below what max.connections allows).
    Returns the (old, new) soft limit. For the `kip broker` process only: an application that
    embeds the broker keeps its own limits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft >= hard:
        return soft, soft
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1_048_576)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        return soft, soft
    return soft, target
