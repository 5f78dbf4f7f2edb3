"""The vacuum service on the real stack (Kafka, metastore, Spark): a request is answered exactly once.

A request leads to VacuumStarted, then VacuumCommitted carrying the request's id, which a cleaner
then cleans; a request that cannot be vacuumed ends with VacuumFailed and its reason; a request
delivered twice (a second group, as a redelivery to another host while the first still runs) runs
one vacuum; and a service killed mid-vacuum loses no request: the next one finishes it once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
from cleaner_support import running_cleaner
from producers_support import DB, directories, make_settings, new_table, write
from vacuum_service_support import (
    of_type,
    publish_requests,
    request_for,
    running_service,
    settings_environment,
    start_command,
    subprocesses,
    topic_events,
    wait_for,
)

from acidclean.producers.exclusion import VACUUM_LOCK_SUFFIX
from acidclean.schemas.events import CleanupDone, VacuumCommitted, VacuumFailed, VacuumStarted
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.settings import Settings

pytestmark = [pytest.mark.integration]


def committed_for(settings: Settings, request_id: Any) -> list[VacuumCommitted]:
    return of_type(topic_events(settings, "vacuum_committed"), VacuumCommitted, request_id=request_id)


def answers(settings: Settings, request_id: Any) -> list[Any]:
    events = topic_events(settings, "vacuum_requests")
    return [e for e in events if isinstance(e, VacuumStarted | VacuumFailed) and e.correlation_id == request_id]


def test_a_request_is_started_committed_with_its_id_and_then_cleaned(
    metastore: HiveMetastore, table_settings: Settings, spark: Any, unique_name: str, table_location: Path
) -> None:
    write(metastore, unique_name, rows=20, commits=3)
    singles = directories(metastore, unique_name)
    request = request_for(table_settings, f"{DB}.{unique_name}", f"file:{table_location}")
    with running_service(table_settings, spark, metrics_port=0) as service:
        publish_requests(table_settings, request)
        [vacuum] = wait_for(lambda: committed_for(table_settings, request.event_id), 120, "VacuumCommitted")
        [started] = of_type(answers(table_settings, request.event_id), VacuumStarted)
        assert started.vacuum_service_id == service.service_id and started.causation_id == request.event_id
        assert len(vacuum.new_directories) == 1
        assert sorted(vacuum.obsolete_directories) == sorted(singles)

        # The same request again (a redelivery): answered from the topics, no second vacuum.
        publish_requests(table_settings, request)
        wait_for(lambda: service.metrics.requests.labels("answered")._value.get() == 1, 60, "the duplicate answered")
        assert service.metrics.requests.labels("committed")._value.get() == 1
        assert service.http_port is not None
        base = f"http://127.0.0.1:{service.http_port}"
        assert urlopen(f"{base}/readyz", timeout=10).read() == b"ok\n"  # Spark, group, broker, metastore
        assert urlopen(f"{base}/healthz", timeout=10).status == 200
        metrics = urlopen(f"{base}/metrics", timeout=10).read().decode()
        assert 'acidclean_vacuum_service_requests_total{outcome="committed"} 1.0' in metrics

    with running_cleaner(table_settings):
        done = wait_for(
            lambda: of_type(topic_events(table_settings, "cleanup_done"), CleanupDone, correlation_id=vacuum.event_id),
            60,
            "CleanupDone",
        )
    assert sorted(d.name for d in done[0].directories_removed) == sorted(singles)
    assert directories(metastore, unique_name) == vacuum.new_directories
    assert len(committed_for(table_settings, request.event_id)) == 1
    assert of_type(answers(table_settings, request.event_id), VacuumFailed) == []


def test_requests_that_cannot_be_vacuumed_end_with_vacuum_failed_and_their_reason(
    metastore: HiveMetastore, table_settings: Settings, spark: Any, unique_name: str, table_location: Path
) -> None:
    write(metastore, unique_name, rows=20, commits=1)  # one delta: nothing for a minor vacuum to do
    nothing = request_for(table_settings, f"{DB}.{unique_name}", f"file:{table_location}")
    gone = request_for(table_settings, f"{DB}.{unique_name}_dropped", f"file:{table_location}_dropped")
    with running_service(table_settings, spark) as service:
        publish_requests(table_settings, nothing, gone)
        wait_for(lambda: service.metrics.requests.labels("failed")._value.get() == 2, 90, "two VacuumFailed")
    failures = {f.correlation_id: f for f in of_type(topic_events(table_settings, "vacuum_requests"), VacuumFailed)}
    assert failures[nothing.event_id].reason_code == "nothing_to_vacuum"
    assert "nothing to compact" in failures[nothing.event_id].message
    assert failures[gone.event_id].reason_code == "table_gone"
    assert f"{DB}.{unique_name}_dropped does not exist" in failures[gone.event_id].message
    assert all("\n" not in failure.message for failure in failures.values())
    assert committed_for(table_settings, nothing.event_id) == []


def test_a_request_delivered_to_two_services_at_once_runs_one_vacuum(
    metastore: HiveMetastore,
    table_settings: Settings,
    spark: Any,
    unique_name: str,
    table_location: Path,
    tmp_path: Path,
) -> None:
    new = new_table(metastore, unique_name + "b", buckets=4)
    location = metastore.get_table(DB, unique_name + "b").location
    write(metastore, unique_name + "b", rows=50_000, commits=3)
    # A second host: its own consumer group and its own state directory (a shared one would hand it the
    # first host's outbox, whose VacuumCommitted it then publishes too: the same event twice).
    other_group = table_settings.model_copy(
        update={"vacuum_service_group_id": "second-host", "state_dir": tmp_path / "second-host"}
    )
    request = request_for(table_settings, new, location)
    held = threading.Event()
    seen_locks: list[int] = []
    resource = f"{unique_name}b{VACUUM_LOCK_SUFFIX}".lower()

    def watch_exclusion() -> None:  # the vacuum lock of the key: never two holders at once
        while not held.is_set():
            locks = [
                lock
                for lock in metastore.show_locks(DB)
                if (lock.table or "").lower() == resource and lock.state == "ACQUIRED"
            ]
            seen_locks.append(len(locks))
            held.wait(0.1)

    watcher = threading.Thread(target=watch_exclusion, daemon=True)
    watcher.start()
    try:
        with (
            running_service(table_settings, spark, "first") as first,
            running_service(other_group, spark, "second") as second,
        ):
            publish_requests(table_settings, request)
            wait_for(lambda: committed_for(table_settings, request.event_id), 180, "VacuumCommitted")
            wait_for(
                lambda: (
                    sum(
                        s.metrics.requests.labels(o)._value.get()
                        for s in (first, second)
                        for o in ("committed", "answered")
                    )
                    == 2
                ),
                120,
                "both services answered",
            )
            outcomes = sorted(
                s.metrics.requests.labels(o)._value.get() for s in (first, second) for o in ("committed", "answered")
            )
    finally:
        held.set()
        watcher.join(5)
    assert outcomes == [0, 0, 1, 1]
    assert len(committed_for(table_settings, request.event_id)) == 1
    assert max(seen_locks) == 1  # seen held, never twice
    assert of_type(answers(table_settings, request.event_id), VacuumFailed) == []


def test_a_service_killed_mid_vacuum_loses_no_request_and_the_next_one_vacuums_once(
    metastore: HiveMetastore, metastore_uri: str, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    metastore.create_database(DB)
    name = new_table(metastore, unique_name, buckets=4)
    write(metastore, unique_name, rows=100_000, commits=4)
    singles = directories(metastore, unique_name)
    location = metastore.get_table(DB, unique_name).location
    settings = make_settings(
        metastore_uri,
        kafka_bootstrap,
        unique_name,
        tmp_path / "state",
        tenant="acme",
        vacuum_service_group_id=f"{unique_name}-vacuums",
        vacuum_service_master="local[2]",
        vacuum_lock_wait_s=1,
        vacuum_lock_stale_s=6,
    )
    (tmp_path / "state").mkdir()
    request = request_for(settings, name, location)
    publish_requests(settings, request)
    with subprocesses() as started:
        first = start_command(settings, tmp_path / "first.log", "vacuum-service", "--service-id", "first")
        started.append(first)
        wait_for(
            lambda: of_type(answers(settings, request.event_id), VacuumStarted),
            180,
            "VacuumStarted from the first service",
            every_s=0.2,
        )
        assert first.kill() == -signal.SIGKILL, first.log()
        before = committed_for(settings, request.event_id)  # the kill may land before or after the commit

        second = start_command(settings, tmp_path / "second.log", "vacuum-service", "--service-id", "second")
        started.append(second)
        [vacuum] = wait_for(lambda: committed_for(settings, request.event_id), 240, "VacuumCommitted", every_s=1)
        assert second.stop() == 0, second.log()
    assert before in ([], [vacuum])
    assert of_type(answers(settings, request.event_id), VacuumFailed) == [], second.log()
    compacted = [d for d in directories(metastore, unique_name) if d not in singles and not d.startswith("_")]
    assert compacted == vacuum.new_directories  # one vacuum's output, not two
    assert '"message":"vacuum service started"' in second.log()


def test_the_spark_submit_template_answers_one_request_once(
    metastore: HiveMetastore, table_settings: Settings, unique_name: str, table_location: Path, tmp_path: Path
) -> None:
    write(metastore, unique_name, rows=20, commits=3)
    request = request_for(table_settings, f"{DB}.{unique_name}", f"file:{table_location}")
    request_file = tmp_path / "request.json"
    request_file.write_text(request.model_dump_json())
    script = Path(__file__).resolve().parents[2] / "deploy" / "production" / "vacuum-request-spark-submit.sh"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACIDCLEAN_")}
    env.update(settings_environment(table_settings))
    env.update(
        SPARK_MASTER="local[1]",
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PATH=f"{Path(sys.executable).parent}:{env['PATH']}",
    )
    runs = [
        subprocess.run(
            [str(script), str(request_file)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        for _ in range(2)
    ]  # submitted twice: vacuumed once
    logs = "\n".join(
        run.stdout + "".join(line for line in run.stderr.splitlines(True) if '"level"' in line) for run in runs
    )
    assert [run.returncode for run in runs] == [0, 0], logs
    assert "committed: VacuumCommitted" in runs[0].stdout, runs[0].stdout
    assert "answered: already committed" in runs[1].stdout, runs[1].stdout
    [vacuum] = committed_for(table_settings, request.event_id)
    [started] = of_type(answers(table_settings, request.event_id), VacuumStarted)
    assert started.vacuum_service_id.startswith("spark-submit-")
    assert vacuum.new_directories[0] in directories(metastore, unique_name)
