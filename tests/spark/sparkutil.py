"""A SparkSession for tests and test child processes: loopback only, free ports, no UI."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

REPO = str(Path(__file__).resolve().parents[2])


def _prepare_env() -> None:
    """Environment the JVM and its Python workers inherit (set before the JVM starts)."""
    # The host name may resolve to a non-loopback address; bind everything to 127.0.0.1.
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Spark discovers `pyspark_*` modules with pkgutil.iter_modules in its Python workers; an
    # editable install maps packages through an import hook that iter_modules cannot see, so
    # the repository goes on the workers' path (a regular install needs nothing).
    pp = os.environ.get("PYTHONPATH", "")
    if REPO not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = REPO + (os.pathsep + pp if pp else "")


def free_port() -> int:
    """A currently free loopback TCP port (Spark retries the next one if it gets taken)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_spark(app: str) -> SparkSession:
    """local[2] session for a 2-core machine."""
    _prepare_env()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.port", str(free_port()))
        .config("spark.blockManager.port", str(free_port()))
        .config("spark.port.maxRetries", "16")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.python.unix.domain.socket.enabled", "true")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        # The JVM ignores TMPDIR: its scratch files and unpacked native libraries follow the
        # test run's temp directory this way (tests/conftest.py removes it after the run).
        .config("spark.local.dir", tempfile.gettempdir())
        .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={tempfile.gettempdir()}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
