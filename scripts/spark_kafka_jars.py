#!/usr/bin/env python3
"""Fetch Spark's own Kafka sink (``format("kafka")``) for the side-by-side test and benchmark.

Runs Maven on ``scripts/spark_kafka_pom.xml`` (``spark-sql-kafka-0-10_2.13`` 4.2.0 and its
runtime dependencies, from Maven Central or the local Maven repository) into a directory, and
prints the jars to hand to ``spark.jars``, comma-separated: those pyspark does not already ship
(by artifact name, whatever the version), so that pyspark's own Spark, Scala and Hadoop jars are
the only ones on the class path.

    .venv/bin/python scripts/spark_kafka_jars.py [--dir .cache/spark-kafka-jars]

Needs Maven (``apt-get install maven``) the first time; later runs reuse the directory.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from pathlib import Path

SCRIPTS_DIR = Path(__file__).resolve().parent
POM = SCRIPTS_DIR / "spark_kafka_pom.xml"
DEFAULT_DIR = SCRIPTS_DIR.parent / ".cache" / "spark-kafka-jars"
_VERSION = re.compile(r"-\d[\w.\-]*\.jar$")


class JarsError(RuntimeError):
    """Maven is missing or could not fetch the jars."""


def artifact(jar: Path) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    return _VERSION.sub("", jar.name)


def pyspark_jars() -> set[str]:
    import pyspark

    return {artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def fetch(directory: Path = DEFAULT_DIR) -> list[Path]:
    """The jars Spark's Kafka sink needs beyond pyspark's, fetched into ``directory`` once.

    Raises:
        JarsError: No Maven on the PATH, or Maven failed (its output says why).
    """
    marker = directory / ".complete"
    if not marker.exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise JarsError(
                "Maven (mvn) is needed to fetch spark-sql-kafka-0-10: apt-get install maven"
            )
        directory.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                mvn,
                "-q",
                "-B",
                "-f",
                str(POM),
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={directory}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise JarsError(
                f"mvn exited with {done.returncode} fetching {POM.name}:\n"
                f"{done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
        marker.touch()
    shipped = pyspark_jars()
    return sorted(jar for jar in directory.glob("*.jar") if artifact(jar) not in shipped)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    print(",".join(str(jar) for jar in fetch(args.dir)))


if __name__ == "__main__":
    main()
