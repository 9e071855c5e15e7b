"""One rule module per threat idea. See :mod:`evalfarm.guards.rules.base` for what a module
declares, and :mod:`evalfarm.guards.rule_roles` for the role of each rule id."""

from __future__ import annotations

from evalfarm.guards.rules import (
    caching,
    comparator,
    cpp,
    dynamic_code,
    filesystem,
    global_state,
    graphs,
    harness,
    interposition,
    l2,
    lazy_output,
    monkeypatch,
    network,
    precision,
    process,
    seed,
    streams,
    strict,
    threads,
    timer,
)

MODULES = (
    streams, threads, graphs, precision, strict, process, network, filesystem, harness,
    interposition, timer, comparator, monkeypatch, lazy_output, dynamic_code, global_state,
    seed, caching, l2, cpp,
)
# Writes to module/class attributes: the first module that claims one reports it
# (precision and graphs add evidence and let the next one classify the flag too).
PATCH_ORDER = (precision, graphs, global_state, timer, comparator, harness, monkeypatch)
