"""The two images of deploy/docker, built by ``make images`` and run with podman against the local stack.

The cleaner image cleans a table the dev environment vacuumed; the vacuum image's spark-submit
compacts a table in Spark's local mode and publishes its event. Both run on the host network (the
broker and the metastore listen on 127.0.0.1) as the images' own user 10001, the table's directory
mounted at the same path and opened to that user. Skipped with the reason where podman and buildah
are not installed (``make container-tools`` installs them as root with apt-get).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cleaner_support import TENANT, Watcher, settings_environment
from producers_support import DB, directories, make_settings, new_table, snapshot, vacuum, vacuum_events, write

from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = pytest.mark.integration

REPOSITORY = Path(__file__).resolve().parents[2]
TAG = "0.1.0"
CLEANER, VACUUM = f"localhost/acidclean-cleaner:{TAG}", f"localhost/acidclean-vacuum:{TAG}"
SITE_PACKAGES = "/opt/acidclean/lib/python3.11/site-packages"
ENGINE_ENV = {**os.environ, "CONTAINERS_CONF": str(REPOSITORY / "deploy" / "docker" / "containers.conf")}


@pytest.fixture(scope="module")
def images() -> None:
    missing = [tool for tool in ("podman", "buildah", "runc") if shutil.which(tool, path=_path()) is None]
    if missing:
        pytest.skip(f"no {', '.join(missing)}: `make container-tools` installs them (root and apt-get)")
    built = subprocess.run(["make", "images"], cwd=REPOSITORY, env=ENGINE_ENV, capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]


def _path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _podman_run(
    image: str, settings: Settings, table_dir: Path, *args: str, name: str, entrypoint: str | None = None
) -> list[str]:
    environment = [f"--env={key}={value}" for key, value in settings_environment(settings).items()]
    return [
        "podman",
        "run",
        *([f"--entrypoint={entrypoint}"] if entrypoint else []),
        "--rm",
        f"--name={name}",
        "--network=host",
        f"--volume={table_dir}:{table_dir}",
        "--env=SPARK_LOCAL_IP=127.0.0.1",
        *environment,
        image,
        *args,
    ]


def _stop(name: str) -> None:
    subprocess.run(["podman", "rm", "--force", "--time=10", name], env=ENGINE_ENV, capture_output=True, check=False)


@pytest.fixture
def table(metastore: HiveMetastore, unique_name: str) -> Iterator[Path]:
    """A new table with three committed deltas, its directory writable by the images' user."""
    metastore.create_database(DB)
    new_table(metastore, unique_name)
    write(metastore, unique_name, rows=40, commits=3, delete_fraction=0.25)
    location = Path(metastore.get_table(DB, unique_name).location.removeprefix("file:"))
    for folder, subfolders, files in os.walk(location):
        for entry in [folder, *(os.path.join(folder, f) for f in subfolders + files)]:
            os.chmod(entry, 0o777 if os.path.isdir(entry) else 0o666)
    yield location


@pytest.fixture
def settings(metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path, table: Path) -> Settings:
    return make_settings(
        metastore_uri,
        kafka_bootstrap,
        unique_name,
        tmp_path,
        tenant=TENANT,
        allowed_roots={TENANT: [str(table.parent)]},
        group_id=f"{unique_name}-cleaner",
        cleanup_interval_ms=300,
    )


def test_the_cleaner_image_cleans_a_vacuumed_table(
    images: None,
    metastore: HiveMetastore,
    spark: Any,
    settings: Settings,
    table: Path,
    unique_name: str,
) -> None:
    watcher = Watcher(settings)
    name = f"acidclean-cleaner-{uuid.uuid4().hex[:8]}"
    try:
        rows = snapshot(metastore, unique_name)
        result = vacuum(metastore, settings, spark, unique_name, full=True)
        assert result.publish is not None
        event = result.publish.event
        assert event.obsolete_directories
        cleaner = subprocess.Popen(
            _podman_run(CLEANER, settings, table, "cleaner", "--cleaner-id", "image", name=name),
            env=ENGINE_ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            watcher.wait_for(lambda: watcher.done(event), 120, "CleanupDone from the cleaner image")
        finally:
            _stop(name)
            log = cleaner.communicate(timeout=60)[0]
        assert watcher.rejected(event) == [], log[-3000:]
        assert directories(metastore, unique_name) == sorted(event.new_directories), log[-3000:]
        assert snapshot(metastore, unique_name).equals(rows)
    finally:
        watcher.close()


def test_the_vacuum_image_compacts_a_table_with_spark_submit_in_local_mode(
    images: None, metastore: HiveMetastore, settings: Settings, table: Path, unique_name: str
) -> None:
    rows = snapshot(metastore, unique_name)
    before = directories(metastore, unique_name)
    name = f"acidclean-vacuum-{uuid.uuid4().hex[:8]}"
    main = f"{SITE_PACKAGES}/acidclean/__main__.py"
    args = ("--master", "local[1]", main, "vacuum", f"{DB}.{unique_name}", "--full")
    command = _podman_run(VACUUM, settings, table, *args, name=name, entrypoint="spark-submit")
    try:
        done = subprocess.run(command, env=ENGINE_ENV, capture_output=True, text=True, timeout=600)
    finally:
        _stop(name)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (event,) = vacuum_events(settings)
    after = directories(metastore, unique_name)
    assert set(event.obsolete_directories) == set(before)
    assert after == sorted(set(before) | set(event.new_directories))
    assert [d for d in event.new_directories if d.startswith("base_")], event.new_directories
    assert snapshot(metastore, unique_name).equals(rows)
