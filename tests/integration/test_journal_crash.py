"""kill -9 of a producer process with a journal, several times in a row on the same folder:
every record whose ``send()`` returned is in the topic afterwards, and none twice.

Each round starts ``tests/faults/journal_child.py`` on the same journal folder (it first re-sends
what the previous process left owed), lets it offer records flat out, and kills it with SIGKILL
after a random number of returned sends. A last process only recovers and closes. The topic is
then read with confluent-kafka and the scenario's table printed. No record may be there twice:
the batches a killed process had sent go again under its producer id, epoch and sequences, and
the broker, which keeps that producer's state, answers the copies it has as duplicates.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ._servers import REPO_ROOT
from .test_producer_crash import PARTITIONS, read_topic

if TYPE_CHECKING:
    from conftest import TopicFactory

pytestmark = [pytest.mark.kafka]

TESTS_DIR = REPO_ROOT / "tests"
# Kills in a row: 4 here, more in the soak run (scripts/chaos --scenario journal sets it).
ROUNDS = int(os.environ.get("AIOACCUM_JOURNAL_KILLS", 4))
PER_ROUND = 200_000  # more than a round reaches before its kill
START_TIMEOUT_S = 60.0


def _env() -> dict[str, str]:
    path = [str(TESTS_DIR), str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def _returned(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().split("\n") if line.strip().isdigit()]


def _child(bootstrap: str, topic: str, folder: Path, first: int, count: int,
           returned: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(TESTS_DIR / "faults" / "journal_child.py"), bootstrap, topic,
         str(folder), str(first), str(count), str(returned)],
        env=_env(), stdout=subprocess.PIPE, text=True,
    )


async def test_kill_9_loses_nothing_send_returned(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    folder = tmp_path / "journal"
    returned_file = tmp_path / "returned.txt"
    rng = random.Random(31)
    recovered: list[int] = []
    for round_no in range(ROUNDS):
        already = len(_returned(returned_file))
        kill_after = already + rng.randint(5_000, 40_000)
        child = _child(kafka_bootstrap, topic, folder, round_no * PER_ROUND, PER_ROUND,
                       returned_file)
        assert child.stdout is not None
        recovered.append(int(child.stdout.readline().split()[1]))
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(_returned(returned_file)) < kill_after:
            assert child.poll() is None, f"the child ended early with {child.returncode}"
            assert time.monotonic() < deadline, "the child produced too slowly"
            time.sleep(0.005)  # noqa: ASYNC251  (the child runs on its own; nothing to await)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        child.stdout.close()
    last = _child(kafka_bootstrap, topic, folder, 0, 0, returned_file)
    out, _ = last.communicate(timeout=120)
    assert last.returncode == 0
    recovered.append(int(out.split()[1]))

    at_least_once = int(out.split()[3])

    returned = _returned(returned_file)
    offered = set(_returned(returned_file.with_name(returned_file.name + ".offered")))
    contents = read_topic(kafka_bootstrap, topic)
    found = Counter({rid: len(pos) for rid, pos in contents.positions.items()})
    lost = [rid for rid in returned if rid not in found]
    duplicated = sum(n - 1 for n in found.values() if n > 1)
    print(
        f"\nkill -9 x{ROUNDS} | offered {len(offered)} | returned from send {len(returned)} | "
        f"found {len(found)} distinct ({contents.consumed} records) | duplicated {duplicated} | "
        f"lost {len(lost)} | recovered at each restart {recovered[1:]} | at least once "
        f"(last restart) {at_least_once} | out of order {contents.order_violations}"
    )
    assert lost == []
    assert set(found) <= offered  # nothing but what was offered
    assert contents.foreign == 0
    assert duplicated == 0, [(rid, contents.positions[rid]) for rid, n in found.items()
                             if n > 1][:20]
    assert contents.order_violations == 0  # recovered records before new ones, in order
    assert sum(recovered[1:]) > 0  # the kills left owed records, and restarts sent them
