"""How the judge waits for a word its worker writes (evalfarm.judge.staging.wait_for)."""

from __future__ import annotations

from evalfarm.judge.staging import LOOK_WITHOUT_SLEEP_S, wait_for


class FakeTime:
    """A clock that moves 1 us per look, and by what is slept; records how the waiter paused."""

    def __init__(self) -> None:
        self.now = 0.0
        self.events: list[tuple[str, float]] = []

    def clock(self) -> float:
        self.now += 1e-6
        return self.now

    def pause(self, s: float) -> None:
        self.events.append(("sleep", self.now))
        self.now += s

    def yield_core(self) -> None:
        self.events.append(("yield", self.now))


def run(done_at: float, deadline: float = 10.0, spin_s: float = 50e-6) -> tuple[str, FakeTime, float]:
    t = FakeTime()
    result = wait_for(lambda: t.now >= done_at, deadline, None, spin_s, t.clock, pause=t.pause, yield_core=t.yield_core)
    return result, t, t.now - done_at


def test_within_the_look_without_sleep_span_the_word_is_seen_at_the_next_look_whatever_the_wait():
    for done_at in (0.3e-3, 2.6e-3, 4.0e-3, 5.1e-3, 37e-3):
        result, t, late = run(done_at)
        assert result == "ok" and late <= 2e-6
        assert not [e for e in t.events if e[0] == "sleep"]
        assert all(at > 50e-6 for _, at in t.events)  # spun before it yielded


def test_a_long_wait_sleeps_between_looks_after_the_span_and_no_more_than_200_us_at_a_time():
    result, t, late = run(LOOK_WITHOUT_SLEEP_S + 0.05)
    sleeps = [at for kind, at in t.events if kind == "sleep"]
    assert result == "ok" and sleeps and min(sleeps) > LOOK_WITHOUT_SLEEP_S
    assert late <= 200e-6 + 2e-6


def test_the_deadline_ends_the_wait_and_a_message_ends_it_early():
    result, t, _ = run(done_at=1.0, deadline=0.002)
    assert result == "timeout" and 0.002 <= t.now < 0.0021
    t2 = FakeTime()
    assert wait_for(lambda: False, 1.0, lambda: t2.now > 1e-3, 50e-6, t2.clock, pause=t2.pause,
                    yield_core=t2.yield_core) == "message"
