"""scripts/kafka feature: tests choose the cluster's transaction protocol version.

The level is read back both through the script (which asks every node) and through Kafka's own
``kafka-features describe``, so a mistake in the script's wire parsing cannot pass unseen.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from faults import cluster
from faults.cluster import KAFKA_SCRIPT

pytestmark = pytest.mark.kafka

FEATURE_TOOL = "org.apache.kafka.tools.FeatureCommand"


def described_level(bootstrap: str, feature: str) -> int:
    """FinalizedVersionLevel of ``feature`` in Kafka's FeatureCommand ``describe``."""
    result = subprocess.run(
        [
            sys.executable,
            str(KAFKA_SCRIPT),
            "java-class",
            FEATURE_TOOL,
            "--bootstrap-server",
            bootstrap,
            "describe",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found = re.search(
        rf"^Feature: {re.escape(feature)}\s.*FinalizedVersionLevel: (\d+)",
        result.stdout,
        re.MULTILINE,
    )
    assert found is not None, result.stdout
    return int(found.group(1))


def test_transaction_version_is_set_and_read_back(kafka_bootstrap: str) -> None:
    before = cluster.transaction_version()
    try:
        for level in (1, 2):
            cluster.set_transaction_version(level)
            assert cluster.transaction_version() == level
            assert described_level(kafka_bootstrap, "transaction.version") == level
    finally:
        cluster.set_transaction_version(before)


def test_fixture_sets_the_level(transaction_version: int) -> None:
    assert cluster.transaction_version() == transaction_version
