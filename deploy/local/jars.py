"""Resolve the jars of the local stack from Maven Central into a git-ignored cache directory.

Kafka's broker jars and the Hive Metastore 3.1.3 and 4.0.1 distributions are declared in the small poms beside
this file and copied by ``maven-dependency-plugin`` (pinned: Maven 3.8 would otherwise pick an old
plugin). The Hive 2.3.10 metastore needs no download: its jars ship inside the pyspark wheel.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

from acidclean.deploy.local.process import run_to_completion
from acidclean.shared.errors import StackError

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
HERE = Path(__file__).resolve().parent
HIVE3_DIST = "apache-hive-metastore-3.1.3-bin"
HIVE4_DIST = "apache-hive-metastore-4.0.1-bin"
# Jars whose classes the shaded Hadoop client mostly has too: they go to fallback/, last on the class
# path, so that only what the shaded client lacks is loaded from them.
FALLBACK_JARS = ("hadoop-hdfs-",)


def cache_dir() -> Path:
    """``$ACIDCLEAN_CACHE_DIR``, else ``.cache`` of the source checkout, else ``~/.cache/acidclean``."""
    configured = os.environ.get("ACIDCLEAN_CACHE_DIR")
    if configured:
        return Path(configured).resolve()
    checkout = HERE.parent.parent
    if (checkout / "pyproject.toml").exists():
        return checkout / ".cache"
    return Path.home() / ".cache" / "acidclean"


def _maven() -> str:
    found = shutil.which("mvn")
    if found is None:
        raise StackError(
            "`mvn` was not found on the PATH: install Apache Maven 3.8+ (e.g. `apt install maven`); "
            "it downloads the Kafka and Hive Metastore jars from Maven Central once."
        )
    return found


def _copy_dependencies(pom: Path, output: Path, log_file: Path) -> None:
    partial = output.with_name(output.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    command = [
        _maven(),
        "-B",
        "-q",
        "-f",
        str(pom),
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={partial}",
    ]
    maven_settings = os.environ.get("ACIDCLEAN_MAVEN_SETTINGS")
    if maven_settings:  # e.g. a corporate mirror of Maven Central
        command[1:1] = ["-s", maven_settings]
    try:
        run_to_completion(f"Maven download for {pom.parent.name}", command, log_file, timeout_s=1200)
    except StackError as error:
        raise StackError(
            f"{error}\nMaven could not fetch the jars; check that Maven Central "
            "(https://repo.maven.apache.org) is reachable, or name a settings.xml with a mirror in "
            "ACIDCLEAN_MAVEN_SETTINGS."
        ) from error
    partial.rename(output)


def cached_jars(name: str, pom: Path, present: str, log_dir: Path) -> Path:
    """The jar folder ``name`` of the cache, resolved from ``pom`` on first use (when no file matches
    the glob ``present`` yet)."""
    libs = cache_dir() / "jars" / name
    if not any(libs.glob(present)):
        shutil.rmtree(libs, ignore_errors=True)
        libs.parent.mkdir(parents=True, exist_ok=True)
        _copy_dependencies(pom, libs, log_dir / f"maven-{name}.log")
    return libs


def kafka_libs(log_dir: Path) -> Path:
    """The folder of Kafka broker jars, downloading them on first use."""
    return cached_jars("kafka", HERE / "kafka" / "pom.xml", "kafka_2.13-*.jar", log_dir)


def hive3_home(log_dir: Path) -> Path:
    """The unpacked Hive Metastore 3.1.3 distribution (lib/, scripts/), with the other jars in extra/."""
    return _metastore_home("hive3", HIVE3_DIST, log_dir)


def hive4_home(log_dir: Path) -> Path:
    """The unpacked Hive Metastore 4.0.1 distribution (lib/, scripts/), with the other jars in extra/."""
    return _metastore_home("hive4", HIVE4_DIST, log_dir)


def _metastore_home(flavour: str, dist: str, log_dir: Path) -> Path:
    """The standalone metastore tarball of ``deploy/local/<flavour>/pom.xml`` unpacked into the cache
    as ``dist``, with the pom's jars in ``dist/extra`` (and ``dist/fallback``); downloaded and unpacked
    on first use."""
    home = cache_dir() / "jars" / dist
    if (home / "lib").is_dir() and any((home / "extra").glob("hive-exec-*.jar")):
        return home
    download = cache_dir() / "jars" / f"{flavour}-download"
    if not any(download.glob("*.tar.gz")) or not any(download.glob("hive-exec-*.jar")):
        shutil.rmtree(download, ignore_errors=True)
        download.parent.mkdir(parents=True, exist_ok=True)
        _copy_dependencies(HERE / flavour / "pom.xml", download, log_dir / f"maven-{flavour}.log")
    tarball = next(download.glob("hive-standalone-metastore-*-bin.tar.gz"))
    staging = home.with_name(home.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tarfile.open(tarball) as archive:
        archive.extractall(staging, filter="data")
    (staging / dist / "extra").mkdir()
    (staging / dist / "fallback").mkdir()
    for jar in download.glob("*.jar"):
        folder = "fallback" if jar.name.startswith(FALLBACK_JARS) else "extra"
        shutil.copy2(jar, staging / dist / folder / jar.name)
    shutil.rmtree(home, ignore_errors=True)
    (staging / dist).rename(home)
    shutil.rmtree(staging, ignore_errors=True)
    return home


def pyspark_jars() -> Path:
    """The jar folder inside the installed pyspark wheel (holds Hive 2.3.10)."""
    try:
        import pyspark
    except ImportError as error:
        raise StackError(
            "the hive2 metastore runs from the pyspark wheel's jars, which needs the vacuum extra: "
            "pip install 'acidclean[vacuum]' (or use --metastore hive3 or hive4)"
        ) from error
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    if not any(jars.glob("hive-metastore-2.3.*.jar")):
        raise StackError(f"no Hive 2.3 metastore jar in {jars}: reinstall pyspark 4.0.x")
    return jars
