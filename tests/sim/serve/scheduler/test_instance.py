"""The scheduler's wait on "a pass's timeout or a wake-up" (``first_of``) resumes as SimPy's ``a | b`` does."""

from __future__ import annotations

import simpy

from sim.serve.scheduler.instance import first_of


def _trace(wait) -> list[tuple[float, str]]:
    """Processes waking one another at equal times, each wait made with ``wait(env, timeout, wake)``: the order
    they resume in, with their times."""
    env = simpy.Environment()
    wake = env.event()
    log: list[tuple[float, str]] = []

    def sleeper(name: str, start: float, delay: float):
        yield env.timeout(start)
        yield wait(env, env.timeout(delay), wake)
        log.append((env.now, name))

    def waker():
        yield env.timeout(2)
        wake.succeed()
        log.append((env.now, "waker"))

    def other():
        for _ in range(3):  # steps at the wake-up's instant, interleaved with the resumes
            yield env.timeout(2 if not log else 0)
            log.append((env.now, "other"))

    env.process(sleeper("woken", 0, 5))  # woken at 2, before its timeout
    env.process(sleeper("timed out", 0, 1))  # its timeout first
    env.process(sleeper("tie", 0, 2))  # its timeout and the wake-up at the same instant
    env.process(waker())
    env.process(other())
    env.process(sleeper("late", 3, 4))  # the wake-up already processed when it waits
    env.run()
    return log


def test_first_of_resumes_each_waiter_where_a_simpy_condition_would():
    assert _trace(first_of) == _trace(lambda env, a, b: a | b)


def test_first_of_triggers_once_and_the_later_event_changes_nothing():
    env = simpy.Environment()
    a, b = env.timeout(1), env.timeout(3)
    done = first_of(env, a, b)
    env.run(until=2)
    assert done.processed and done.value is None
    env.run()  # b fires later without a second trigger
    assert env.now == 3
