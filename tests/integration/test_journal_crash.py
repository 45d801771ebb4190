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
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from faults.workload import record_id

from aioaccum._journal import entries
from aioaccum._journal.entries import ENTRY_HEADER, SEGMENT_HEADER
from aioaccum._journal.segment import SUFFIX

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


def _tear_last_entry(folder: Path) -> tuple[int, int | None]:
    """Cut the newest segment's last entry six bytes short, as a crash in the middle of its
    write would: returns its kind and, for a record, its id."""
    newest = max(folder.glob(f"*{SUFFIX}"))
    data = bytearray(newest.read_bytes())
    pos = last = SEGMENT_HEADER.size
    while data[pos:pos + ENTRY_HEADER.size] != bytes(ENTRY_HEADER.size):
        length, _crc, _kind = ENTRY_HEADER.unpack_from(data, pos)
        last, pos = pos, pos + ENTRY_HEADER.size + length
    length, _crc, kind = ENTRY_HEADER.unpack_from(data, last)
    payload = bytes(data[last + ENTRY_HEADER.size:pos])
    decoded = entries.decode(kind, payload)
    torn_id = record_id(decoded.value) if isinstance(decoded, entries.Record) else None
    # The kill may have come after the next entry's payload was copied but before its header
    # (written last): bytes behind a zero header. A crash in the middle of the last entry's
    # write has nothing behind it, so those bytes go first; left there, they would make the
    # torn entry one in the middle of the segment, reported as corrupt.
    with open(newest, "r+b") as f:
        f.seek(pos - 6)
        f.write(bytes(len(data) - (pos - 6)))
    return kind, torn_id


def _recover_only(bootstrap: str, topic: str, folder: Path, returned: Path) -> tuple[str, str]:
    """A process that only recovers the folder and closes: its (stdout, stderr)."""
    last = subprocess.Popen(
        [sys.executable, str(TESTS_DIR / "faults" / "journal_child.py"), bootstrap, topic,
         str(folder), "0", "0", str(returned)],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = last.communicate(timeout=120)
    assert last.returncode == 0, err[-3000:]
    return out, err


async def test_a_torn_tail_is_cut_off_counted_and_the_rest_delivered(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = await topic_factory(partitions=PARTITIONS)
    folder = tmp_path / "journal"
    returned_file = tmp_path / "returned.txt"
    child = _child(kafka_bootstrap, topic, folder, 0, PER_ROUND, returned_file)
    assert child.stdout is not None
    child.stdout.readline()
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(_returned(returned_file)) < 20_000:
        assert child.poll() is None, f"the child ended early with {child.returncode}"
        assert time.monotonic() < deadline, "the child produced too slowly"
        time.sleep(0.005)  # noqa: ASYNC251  (the child runs on its own; nothing to await)
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    child.stdout.close()
    kind, torn_id = _tear_last_entry(folder)

    out, err = _recover_only(kafka_bootstrap, topic, folder, returned_file)
    said = re.search(r"(\d+) torn and (\d+) corrupt", err)
    assert said is not None, err[-3000:]
    returned = _returned(returned_file)
    contents = read_topic(kafka_bootstrap, topic)
    found = Counter({rid: len(pos) for rid, pos in contents.positions.items()})
    lost = [rid for rid in returned if rid not in found]
    torn = f"record {torn_id}" if torn_id is not None else f"entry kind {kind}"
    print(
        f"\ntorn tail ({torn})"
        f" | returned from send {len(returned)} | recovered {out.split()[1]} | torn "
        f"{said[1]} | corrupt {said[2]} | found {len(found)} | lost {len(lost)}"
    )
    assert (int(said[1]), int(said[2])) == (1, 0)  # found by its CRC, cut off, counted
    # Only the torn record may be missing (in a real crash in its write, its send() has not
    # returned), and it is never sent as garbage.
    assert set(lost) <= {torn_id}
    assert torn_id not in found
    assert max(found.values()) == 1
