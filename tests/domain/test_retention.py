"""What a run keeps (domain/retention.py): the newest N complete checkpoints and every multiple of
M; `checkpoints_left` counts it without listing a run's saves, and equals listing them."""

from __future__ import annotations

import itertools

from domain.retention import checkpoints_left, retained


def saves(total_steps: int, every: int) -> list[int]:
    """The trainer's saves: every `every` steps, and the last step."""
    found = [s for s in range(1, total_steps + 1) if every and s % every == 0]
    return found if total_steps in found else [*found, total_steps]


def test_the_newest_and_every_multiple_are_kept():
    assert retained([50, 100, 150, 200, 250], 2, 0) == {200, 250}
    assert retained([50, 100, 150, 200, 250], 2, 100) == {100, 200, 250}
    assert retained([7], 3, 5) == {7}


def test_the_count_equals_the_saves_listed():
    for total, every, keep, m in itertools.product(range(1, 90), (0, 1, 7, 10, 50), (1, 3), (0, 4, 35, 100)):
        assert checkpoints_left(total, every, keep, m) == len(retained(saves(total, every), keep, m))


def test_a_long_run_keeps_a_few_not_all():
    """2,000 steps saving every 50: 40 saves, 3 kept by default; every 1000th adds step 1000."""
    assert len(saves(2000, 50)) == 40
    assert checkpoints_left(2000, 50, 3, 0) == 3
    assert checkpoints_left(2000, 50, 3, 1000) == 4
