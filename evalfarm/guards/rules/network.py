"""Network access. Runtime: the worker runs in a network namespace without network; the rule
blocks because a request that leaves the machine cannot be undone. Role: blocks."""

from __future__ import annotations

from evalfarm.guards.rules.base import cpp_rule, name_rules

RULE_IDS = ("network",)

NAMES = name_rules(
    "network",
    [
        "socket", "urllib", "urllib3", "http", "requests", "httpx", "aiohttp", "ftplib",
        "smtplib", "telnetlib", "xmlrpc", "websocket", "websockets", "paramiko", "grpc", "zmq",
        "ssl", "socketserver", "poplib", "imaplib",
    ],
    "network access",
)

CPP = (
    cpp_rule("network", r"\bsocket\s*\(|<sys/socket\.h>|\bgetaddrinfo\b|\bcurl_\w+",
             "network access from C++"),
)
