"""evalfarm.judge.quiet: three quick probes in a row mean a quiet device; a busy one is given up on."""

from __future__ import annotations

import time

import torch

from evalfarm.judge.quiet import QUIET_CAP_S, QUIET_FLOOR_S, QuietProbe


def test_an_idle_device_is_quiet_after_three_quick_probes():
    calls = []
    probe = QuietProbe(torch, "cpu", lambda: calls.append(1))
    assert QUIET_FLOOR_S <= probe.limit_s <= QUIET_CAP_S
    calls.clear()
    quiet, waited = probe.wait()
    assert quiet and len(calls) == 3 and 0 <= waited < 0.1


def test_slow_probes_are_not_quiet_and_the_wait_gives_up():
    busy = [False]

    def sync():
        if busy[0]:
            time.sleep(QUIET_CAP_S * 2)  # every probe waits, as for another context's time slice

    probe = QuietProbe(torch, "cpu", sync)
    busy[0] = True
    quiet, waited = probe.wait(give_up_s=0.05)
    assert not quiet and waited >= 0.05


def test_one_slow_probe_restarts_the_count():
    pattern = iter([True, False, False, True, False, False, False])
    calls = []

    def sync():
        calls.append(1)
        if next(pattern, False):
            time.sleep(QUIET_CAP_S * 2)

    probe = QuietProbe(torch, "cpu", lambda: None)
    probe._sync = sync
    quiet, _ = probe.wait()
    assert quiet and len(calls) == 7
