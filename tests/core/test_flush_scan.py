"""``batch.first_unfinished``, the scan ``Producer.flush`` waits with: finished batches stay
finished, so each check resumes where the last one stopped."""

from __future__ import annotations

from typing import Any

from aioaccum._core.batch import first_unfinished


class Watched:
    """Stands in for a batch: counts how often ``is_finished`` is read."""

    reads = 0

    def __init__(self) -> None:
        self.done = False

    @property
    def is_finished(self) -> bool:
        Watched.reads += 1
        return self.done


def test_a_flush_of_n_batches_reads_each_finished_one_once() -> None:
    Watched.reads = 0
    batches: list[Any] = [Watched() for _ in range(600)]
    first, wakeups = 0, 0
    while (first := first_unfinished(batches, first)) < len(batches):
        # One wake-up: three more batches end, the later ones first.
        for batch in reversed(batches[first : first + 3]):
            batch.done = True
        wakeups += 1
    assert wakeups == 200
    # Each batch is read once when it is found finished, plus one read per check that stops
    # at an unfinished one; a scan from the start at every wake-up would read about 60,000.
    assert Watched.reads <= len(batches) + wakeups + 1


def test_the_scan_stops_at_the_first_unfinished_batch_even_if_later_ones_ended() -> None:
    batches: list[Any] = [Watched() for _ in range(5)]
    for i in (0, 1, 3, 4):
        batches[i].done = True
    assert first_unfinished(batches, 0) == 2
    assert first_unfinished(batches, 2) == 2
    batches[2].done = True
    assert first_unfinished(batches, 2) == 5
    assert first_unfinished([], 0) == 0
