"""Racing writers for the conditional-write tests: threads released together, so their
requests reach the server at once."""

from __future__ import annotations

import threading
from collections.abc import Callable


def race(put: Callable[[int], bool], writers: int) -> list[int]:
    """Runs ``put(i)`` for ``i`` in ``range(writers)``, each in its own thread, released
    together by a barrier; returns the ``i`` whose ``put`` returned True (it won). An
    exception in any thread fails the caller, naming it."""
    barrier = threading.Barrier(writers)
    won = [False] * writers
    failures: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            barrier.wait()
            won[i] = put(i)
        except BaseException as e:  # reported below, not swallowed
            failures.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    return [i for i, w in enumerate(won) if w]
