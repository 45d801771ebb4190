"""Carries the local cluster's replication traffic through the fault proxy, for as long as the
cluster runs.

scripts/kafka starts one relay per multi-node cluster (unless ``up --direct-replication``). Each
node's REPLICATION listener, which brokers use to talk to each other, advertises a relay port;
the relay forwards each relay port to its node's listener with ``tests/faults/proxy.py``. So a
test can cut a leader off from its followers while clients and controllers still reach it:
``scripts/kafka replication stall N`` writes the control file, ``scripts/kafka replication
heal`` empties it, and the relay applies whatever the file says within a tenth of a second.

The control file holds JSON: ``{"stall": [node, ...]}``. A stalled node's route holds every
connection open and carries no bytes, as a partition does: followers fetching from that node
get nothing until it heals. Only 127.0.0.1 is bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from faults.proxy import Fault, FaultProxy

POLL_S = 0.1


def read_stalled(control: Path) -> frozenset[int]:
    try:
        data = json.loads(control.read_text() or "{}")
    except (OSError, ValueError):
        return frozenset()
    stall = data.get("stall", []) if isinstance(data, dict) else []
    return frozenset(int(node) for node in stall)


async def relay(routes: dict[int, tuple[int, int]], control: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with FaultProxy(routes) as proxy:
        applied: frozenset[int] = frozenset()
        while not stop.is_set():
            stalled = read_stalled(control)
            if stalled != applied:
                proxy.clear()
                for node in stalled:
                    proxy.set_fault(Fault.stall(), node=node)
                applied = stalled
                print(f"relay: stalled nodes {sorted(stalled)}", flush=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--routes", required=True,
                        help='JSON {"node": [relay_port, replication_port]}')
    parser.add_argument("--control", required=True, type=Path)
    args = parser.parse_args()
    routes = {int(node): (int(ports[0]), int(ports[1]))
              for node, ports in json.loads(args.routes).items()}
    asyncio.run(relay(routes, args.control))
    return 0


if __name__ == "__main__":
    sys.exit(main())
