"""Where the daemons are: fixed addresses, DNS names, or an endpoints file.

An endpoint spec is one of

* ``host:port`` (or ``[v6]:port``): one daemon;
* ``dns:///name:port`` (also ``dns:name:port``): every A/AAAA record of `name` is a daemon,
  e.g. a Kubernetes headless Service; re-resolved every `interval`;
* ``file:///path`` (also ``file:path``): one spec per line (``#`` comments; ``dns:`` lines
  allowed), re-read when the file changes.

`Discovery.resolve()` gives the current set of daemon addresses. A DNS name that fails to
resolve, or a file that cannot be read, keeps its last answer: a resolver hiccup never drains
a healthy farm.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)


class EndpointSpecError(ValueError):
    """An endpoint spec that cannot be understood; the message says which and why."""


class Resolver(Protocol):
    async def resolve(self, host: str, port: int) -> list[str]:
        """Addresses ("ip:port" / "[ip6]:port") of every A/AAAA record of `host`."""
        ...


class SystemResolver:
    """The system resolver (getaddrinfo), off the event loop."""

    async def resolve(self, host: str, port: int) -> list[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        out = []
        for family, _type, _proto, _name, sockaddr in infos:
            ip = sockaddr[0]
            out.append(f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}")
        return sorted(set(out))


def _split_host_port(text: str, spec: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise EndpointSpecError(f"endpoint {spec!r}: expected NAME:PORT")
    return host.strip("[]"), int(port)


@dataclasses.dataclass(frozen=True)
class Static:
    address: str


@dataclasses.dataclass(frozen=True)
class Dns:
    host: str
    port: int


@dataclasses.dataclass(frozen=True)
class File:
    path: Path


Source = Static | Dns | File


def parse_spec(spec: str) -> Source:
    spec = spec.strip()
    if spec.startswith("dns:"):
        rest = spec[4:]
        if rest.startswith("//"):  # dns://[authority]/name:port; the authority is not supported
            authority, _, rest = rest[2:].partition("/")
            if authority:
                raise EndpointSpecError(f"endpoint {spec!r}: a DNS server in the URI is not supported; "
                                        "use dns:///name:port (the system resolver)")
        host, port = _split_host_port(rest, spec)
        return Dns(host, port)
    if spec.startswith("file:"):
        rest = spec[5:]
        path = rest[2:] if rest.startswith("//") else rest
        if not path:
            raise EndpointSpecError(f"endpoint {spec!r}: expected file:///path")
        return File(Path(path))
    _split_host_port(spec, spec)
    return Static(spec)


def is_dynamic(specs: list[str]) -> bool:
    return any(not isinstance(parse_spec(s), Static) for s in specs)


class Discovery:
    def __init__(self, specs: list[str], resolver: Resolver | None = None) -> None:
        self.sources = [parse_spec(s) for s in specs]
        self.resolver = resolver or SystemResolver()
        self._last: dict[Source, list[str]] = {}
        self._file_lines: dict[Path, tuple[float, list[Source]]] = {}

    @property
    def dynamic(self) -> bool:
        return any(not isinstance(s, Static) for s in self.sources)

    async def resolve(self) -> list[str]:
        """Every daemon address now, in a stable order, without duplicates."""
        out: list[str] = []
        for source in self.sources:
            out.extend(await self._expand(source, depth=0))
        return list(dict.fromkeys(out))

    async def _expand(self, source: Source, depth: int) -> list[str]:
        if isinstance(source, Static):
            return [source.address]
        if isinstance(source, Dns):
            try:
                found = await self.resolver.resolve(source.host, source.port)
            except (TimeoutError, OSError) as err:
                log.warning("event=dns_failed name=%s error=%s keeping=%d", source.host, err,
                            len(self._last.get(source, [])))
                return self._last.get(source, [])
            self._last[source] = list(found)
            return list(found)
        if depth > 0:
            raise EndpointSpecError(f"{source.path}: an endpoints file cannot name another file")
        return [a for inner in self._read_file(source) for a in await self._expand(inner, depth + 1)]

    def _read_file(self, source: File) -> list[Source]:
        try:
            mtime = source.path.stat().st_mtime_ns
            cached = self._file_lines.get(source.path)
            if cached is not None and cached[0] == mtime:
                return cached[1]
            lines = source.path.read_text(encoding="utf-8").splitlines()
            specs = [parse_spec(line) for line in (x.split("#", 1)[0].strip() for x in lines) if line]
        except (OSError, EndpointSpecError) as err:
            kept = self._file_lines.get(source.path, (0, []))[1]
            log.warning("event=endpoints_file_unreadable path=%s error=%s keeping=%d", source.path, err, len(kept))
            return kept
        self._file_lines[source.path] = (mtime, specs)
        return specs
