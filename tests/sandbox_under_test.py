"""The sandbox this test run's candidates get, and what the tests that start daemons do about it.

A daemon refuses to serve candidates without the strong sandbox (evalfarm.sandbox.isolation). Where this
host has it (bubblewrap; `make test` and `.ci/run` install it where they can), every daemon a test
starts runs with it. Where it has not, the tests that start daemons opt out explicitly with
``DAEMON_ARGS`` (``--allow-weak-sandbox``), and the run says so at its start and at its end
(tests/conftest.py): a green run then has not tested the real sandbox.
"""

from __future__ import annotations

from evalfarm.sandbox import isolation

SANDBOX = isolation.assess("cpu")
# Added to the command line of every daemon the tests start: empty where the strong sandbox is here.
DAEMON_ARGS: tuple[str, ...] = () if SANDBOX.strong else ("--allow-weak-sandbox",)


def describe() -> str:
    """One line for the test run's header and summary."""
    if SANDBOX.strong:
        return f"sandbox under test: {SANDBOX.summary()}"
    return (f"sandbox under test: {SANDBOX.summary()}. The daemons these tests start run with "
            f"--allow-weak-sandbox, so the real sandbox is NOT tested here. Fix: {SANDBOX.fix}")
