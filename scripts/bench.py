#!/usr/bin/env python3
"""Producer clients side by side against a local cluster: aioaccum, aiokafka, confluent-kafka
(plain and asyncio), kafka-python and Java's ProducerPerformance, interleaved over repetitions.

    scripts/bench --list                       workloads and contenders
    scripts/bench                              the default workloads, 3 repetitions
    scripts/bench --all --docs                 everything; rewrites docs/benchmarks.md and
                                               docs/bench/ (results.json and the charts)
    scripts/bench --quick --bootstrap H:P      CI smoke run (< 60 s)
    scripts/bench --brokers 3 --workload keyed-6p,keyed-600p,keyed-6000p,topics-1000
                                               partition scaling, on 3 brokers
    scripts/bench --targets --docs             issue 29's targets in one interleaved run on 3
                                               brokers: their workloads and contenders, then
                                               each target met, missed or not measured
    scripts/bench --render-docs docs/bench/results.json    only regenerate the docs

Without --bootstrap it starts a cluster of --brokers brokers (1 unless told) through
scripts/kafka (honouring AIOACCUM_KAFKA_PORT_OFFSET / AIOACCUM_KAFKA_STATE) unless one already
runs there, and stops only what it started. Exit status 1 when any run failed its
delivered-count check.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.runner import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
