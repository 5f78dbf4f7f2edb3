"""The vacuum's publisher connects while the tasks run, so the publish after the commit does not
wait for a new producer's handshake; a failure to connect early is left to the publish to report."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import acidclean.producers.publish as publish_module
from acidclean.producers.publish import Publisher
from acidclean.producers.vacuum import _connect_in_background
from acidclean.shared.errors import BusError
from acidclean.shared.settings import load_settings


class _Bus:
    def __init__(self, *_: Any, **__: Any) -> None:
        self.published: list[tuple[str, Any]] = []

    def publish(self, topic: str, event: Any) -> str:
        self.published.append((topic, event))
        return "delivered"


def test_connect_creates_the_topic_and_one_producer_however_many_threads_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[_Bus] = []
    topics: list[list[str]] = []

    def slow_ensure_topics(_settings: Any, names: list[str], **_: Any) -> None:
        time.sleep(0.05)  # both threads are inside connect() at once
        topics.append(names)

    def new_bus(*args: Any, **kwargs: Any) -> _Bus:
        created.append(_Bus(*args, **kwargs))
        return created[-1]

    monkeypatch.setattr(publish_module, "ensure_topics", slow_ensure_topics)
    monkeypatch.setattr(publish_module, "KafkaEventBus", new_bus)
    publisher = Publisher(load_settings(environ={}))
    threads = [threading.Thread(target=publisher.connect) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert publisher.publish("event") == "delivered"  # type: ignore[arg-type,comparison-overlap]
    assert topics == [["vacuum_committed"]]
    assert len(created) == 1 and created[0].published == [(publisher.topic, "event")]


def test_an_injected_bus_is_used_as_it_is() -> None:
    bus = _Bus()
    publisher = Publisher(load_settings(environ={}), bus)  # type: ignore[arg-type]
    assert publisher.connect() is bus


class _UnreachablePublisher:
    def __init__(self) -> None:
        self.attempts = 0

    def connect(self) -> None:
        self.attempts += 1
        raise BusError("Kafka at 127.0.0.1:1 is unreachable")


def test_a_failed_early_connect_raises_nowhere_and_the_publish_meets_it_again(monkeypatch: pytest.MonkeyPatch) -> None:
    escaped: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", escaped.append)
    publisher = _UnreachablePublisher()
    thread = _connect_in_background(publisher)  # type: ignore[arg-type]
    thread.join(5)
    assert not thread.is_alive() and escaped == [] and publisher.attempts == 1
    with pytest.raises(BusError, match="unreachable"):
        publisher.connect()  # what the publish does, and reports through the outbox
