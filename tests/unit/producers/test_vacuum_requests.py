"""The vacuum service's answer to one request, on fakes (the real stack: tests/integration/test_vacuum_service.py).

``run_vacuum`` is replaced by a stub here: what is checked is which events the handler publishes,
when it does not run a vacuum at all, and that it waits rather than fails while another vacuum holds
the key.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from acidclean.producers import vacuum_requests
from acidclean.producers.plan import CompactionPlan, CompactionType
from acidclean.producers.vacuum import VacuumResult
from acidclean.producers.vacuum_requests import RequestHandler, ServiceOutbox, failure_code, one_line
from acidclean.schemas.common import utc_now
from acidclean.schemas.events import (
    RequestedBy,
    VacuumFailed,
    VacuumFigures,
    VacuumRequested,
    VacuumStarted,
    VacuumThresholds,
)
from acidclean.shared.bus.memory import InMemoryBus
from acidclean.shared.errors import (
    NothingToCompactError,
    TableNotFoundError,
    VacuumBusyError,
    VacuumError,
    VacuumRefusedError,
)
from acidclean.shared.settings import load_settings

TOPIC = "acid.vacuum.requests"


def request() -> VacuumRequested:
    now = utc_now()
    return VacuumRequested(
        tenant="default",
        table="db.t",
        occurred_at=now,
        location="file:/w/db.db/t",
        compaction_type="MINOR",
        reason="12 deltas > hive.compactor.delta.num.threshold 10",
        figures=VacuumFigures(delta_count=12, delete_delta_count=0, delta_bytes=1, base_bytes=0, aborted_txns=0),
        thresholds=VacuumThresholds(delta_num=10, delta_pct=0.1, aborted_txns=1000),
        requested_by=RequestedBy(initiator_id="i", trigger="event"),
        requested_at=now,
    )


def handler(tmp_path: Path, bus: InMemoryBus, answer: list[str | None], **kwargs: Any) -> RequestHandler:
    return RequestHandler(
        load_settings(environ={}, overrides={"state_dir": str(tmp_path)}),
        "svc-1",
        metastore=lambda: object(),  # type: ignore[arg-type, return-value]
        bus=lambda: bus,
        spark=lambda: object(),  # type: ignore[arg-type, return-value]
        outbox=ServiceOutbox(tmp_path / "outbox"),
        stopping=threading.Event(),
        retry_s=0.01,
        lookup=lambda _: answer.pop(0) if answer else None,
        **kwargs,
    )


def test_a_request_answered_before_runs_nothing_and_publishes_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    runs: list[Any] = []
    monkeypatch.setattr(vacuum_requests, "run_vacuum", lambda *a, **k: runs.append(a))
    bus = InMemoryBus()
    handled = handler(tmp_path, bus, ["committed"]).handle(request())
    assert (handled.outcome, handled.message) == ("answered", "already committed")
    assert runs == [] and bus.events(TOPIC) == []


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (NothingToCompactError("nothing to compact in db.t: it has no committed delta"), "nothing_to_vacuum"),
        (NothingToCompactError("nothing can be compacted in db.t yet: txn 4 is open"), "nothing_to_vacuum"),
        (VacuumRefusedError("Hive's compactor has a MAJOR compaction of db.t"), "refused"),
        (VacuumError("the vacuum of db.t failed while writing:\nboom"), "error"),
        (RuntimeError("Py4JJavaError\n  at ..."), "error"),
    ],
)
def test_a_vacuum_that_does_not_commit_ends_its_request_with_vacuum_failed(
    tmp_path: Path, monkeypatch: Any, error: Exception, code: str
) -> None:
    def fail(*_: Any, **__: Any) -> None:
        raise error

    monkeypatch.setattr(vacuum_requests, "run_vacuum", fail)
    bus = InMemoryBus()
    given = request()
    handled = handler(tmp_path, bus, []).handle(given)
    started, failed = bus.events(TOPIC)
    assert isinstance(started, VacuumStarted) and started.correlation_id == given.event_id
    assert isinstance(failed, VacuumFailed) and failed.correlation_id == given.event_id
    assert (handled.outcome, failed.reason_code) == ("failed", code)
    assert "\n" not in failed.message


def test_a_dropped_table_is_table_gone() -> None:
    refused = VacuumRefusedError("table db.t does not exist in the metastore")
    refused.__cause__ = TableNotFoundError("no such table")
    assert failure_code(refused) == "table_gone"


def test_while_another_vacuum_holds_the_key_the_request_waits_then_finds_its_answer(
    tmp_path: Path, monkeypatch: Any
) -> None:
    tries: list[int] = []

    def busy(*_: Any, **__: Any) -> None:
        tries.append(1)
        raise VacuumBusyError("another vacuum of db.t is running")

    monkeypatch.setattr(vacuum_requests, "run_vacuum", busy)
    bus = InMemoryBus()
    # Not answered at first; answered (committed by the holder: this very request) after two waits.
    handled = handler(tmp_path, bus, [None, None, None, "committed"]).handle(request())
    assert handled.outcome == "answered" and len(tries) == 3
    assert [type(e) for e in bus.events(TOPIC)] == [VacuumStarted]  # no VacuumFailed


def test_a_stopping_service_leaves_a_waiting_request_unanswered(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(vacuum_requests, "run_vacuum", lambda *a, **k: (_ for _ in ()).throw(VacuumBusyError("busy")))
    answering = handler(tmp_path, InMemoryBus(), [])
    answering._stopping.set()
    assert answering.handle(request()).outcome == "abandoned"


def test_an_unacknowledged_answer_is_retried_and_a_one_shot_run_gives_up(tmp_path: Path, monkeypatch: Any) -> None:
    plan = CompactionPlan.__new__(CompactionPlan)
    monkeypatch.setattr(vacuum_requests, "run_vacuum", lambda *a, **k: VacuumResult("already-committed", plan))
    bus = InMemoryBus()
    bus.fail_next(2)  # VacuumStarted is not acknowledged twice, then is
    handled = handler(tmp_path, bus, []).handle(request())
    assert handled.outcome == "failed" and handled.reason_code == "nothing_to_vacuum"
    assert [type(e) for e in bus.events(TOPIC)] == [VacuumStarted, VacuumFailed]

    never = InMemoryBus()
    never.fail_next(100)
    assert handler(tmp_path, never, [], publish_tries=3).handle(request()).outcome == "abandoned"
    assert never.events(TOPIC) == []


def test_a_flush_never_takes_the_draft_of_a_vacuum_still_committing(tmp_path: Path) -> None:
    outbox = ServiceOutbox(tmp_path)
    request_id = str(uuid.uuid4())
    committing = threading.Event()
    done = threading.Event()

    def vacuum() -> None:
        with outbox.running():
            outbox.save_draft({"event_id": str(uuid.uuid4()), "request_id": request_id})
            committing.set()
            done.wait(5)

    thread = threading.Thread(target=vacuum)
    thread.start()
    committing.wait(5)
    assert outbox.entries() == []  # another thread's flush sees nothing to finish or drop
    done.set()
    thread.join(5)
    [entry] = outbox.of_request(uuid.UUID(request_id))  # once that vacuum ended (a crash: the next run)
    assert entry.draft["request_id"] == request_id


def test_one_line_keeps_a_message_on_one_line_within_the_limit() -> None:
    assert one_line("a\n  b\r\nc") == "a b c"
    assert len(one_line("x" * 10_000)) == 4096
    assert CompactionType("MINOR") is CompactionType.MINOR
