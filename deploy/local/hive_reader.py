"""Apache Hive's own ACID reader code (hive-exec 3.1.3 and 4.0.1), run over a table directory.

``hive-reader/HiveAcidReader.java`` calls Hive's ``AcidUtils.getAcidState``, its row reader
(``OrcInputFormat.getRecordReader``, row ids included) and its vectorized ACID reader
(``VectorizedOrcAcidRowBatchReader``), and writes the side files Hive's compactor writes into a base.
It is compiled with ``javac`` against the jars of ``hive-reader/<flavour>/pom.xml``, which Maven
resolves once into ``$ACIDCLEAN_CACHE_DIR/jars/hive-reader-<version>``. The interop test
(tests/integration/test_hive_reader_interop.py) compares what Hive reads with ``acidclean read``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acidclean.deploy.local.jars import HERE, cached_jars
from acidclean.deploy.local.process import QUICK_JIT, java_executable
from acidclean.shared.errors import StackError

HIVE_READER_VERSIONS = {"hive3": "3.1.3", "hive4": "4.0.1"}
SOURCE = HERE / "hive-reader" / "HiveAcidReader.java"
MAIN_CLASS = "org.apache.hadoop.hive.ql.io.orc.HiveAcidReader"
# Hive 3's serde reflects into java.net.URI and friends; JDK 17 needs them opened to the class path.
OPENS = tuple(
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in ("java.lang", "java.net", "java.nio", "java.util", "java.util.concurrent.atomic")
)


def hive_reader_jars(flavour: str, log_dir: Path) -> Path:
    """The folder of hive-exec ``HIVE_READER_VERSIONS[flavour]`` and the jars its ACID reader loads."""
    version = HIVE_READER_VERSIONS[flavour]
    pom = HERE / "hive-reader" / flavour / "pom.xml"
    return cached_jars(f"hive-reader-{version}", pom, f"hive-exec-{version}-core.jar", log_dir)


def _javac() -> str:
    java = Path(java_executable())
    beside = java.resolve().parent / "javac"
    found = str(beside) if beside.exists() else shutil.which("javac")
    if found is None:
        raise StackError(f"`javac` was not found beside {java} nor on the PATH: install a Java 17 JDK, not a JRE")
    return found


@dataclass(frozen=True)
class HiveReader:
    """Hive ``version``'s reader program, compiled into ``classes`` against ``jars``."""

    version: str
    jars: Path
    classes: Path

    def _run(self, *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
        classpath = os.pathsep.join([str(self.classes), *sorted(str(jar) for jar in self.jars.glob("*.jar"))])
        command = [
            java_executable(),
            *OPENS,
            *QUICK_JIT,
            "-XX:+UseSerialGC",
            "-Xmx512m",
            "-cp",
            classpath,
            MAIN_CLASS,
            *args,
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            raise StackError(f"Hive {self.version}'s reader failed ({done.returncode}): {done.stderr[-3000:]}")
        return done

    def read(
        self,
        locations: Sequence[str],
        write_ids: str,
        txns: str,
        columns: Sequence[tuple[str, str]],
        buckets: int,
    ) -> list[dict[str, Any]]:
        """What Hive reads from each table or partition directory under the valid write id list
        ``write_ids`` and transaction list ``txns``: one ``acid_state`` record per location, then its
        ``rows`` and ``vectorized`` rows (or one record with an ``error`` per reader that failed)."""
        names = ",".join(name for name, _ in columns)
        types = ":".join(kind for _, kind in columns)
        done = self._run("read", ",".join(locations), write_ids, txns, names, types, str(buckets))
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    def write_markers(self, directory: Path) -> None:
        """The side files Hive's compactor writes into a base it creates, written by Hive's own code."""
        directory.mkdir(parents=True, exist_ok=True)
        self._run("markers", str(directory))


def compile_hive_reader(flavour: str, work_dir: Path, log_dir: Path) -> HiveReader:
    """The reader program of Hive ``flavour`` (``hive3`` or ``hive4``), its jars fetched on first use."""
    jars = hive_reader_jars(flavour, log_dir)
    classes = work_dir / f"hive-reader-{flavour}"
    shutil.rmtree(classes, ignore_errors=True)
    classes.mkdir(parents=True)
    classpath = os.pathsep.join(sorted(str(jar) for jar in jars.glob("*.jar")))
    command = [_javac(), "-nowarn", "-d", str(classes), "-cp", classpath, str(SOURCE)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise StackError(f"javac could not compile {SOURCE.name} against {jars}: {done.stderr[-3000:]}")
    return HiveReader(HIVE_READER_VERSIONS[flavour], jars, classes)
