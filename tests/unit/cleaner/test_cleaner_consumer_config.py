"""The cleaner's consumer settings: its defaults for a delay topic of large bundles, and the user's own."""

from __future__ import annotations

from confluent_kafka import Consumer

from acidclean.consumers.cleaner_process import cleaner_consumer_config

KAFKA = {"bootstrap.servers": "127.0.0.1:1"}


def test_the_cleaner_fetches_a_full_queue_again_after_20_ms_not_librdkafkas_second() -> None:
    config = cleaner_consumer_config(KAFKA, "acidclean-cleaner.acme", "c1")
    assert config["fetch.queue.backoff.ms"] == "20"
    assert config["queued.max.messages.kbytes"] == "16384" and config["fetch.wait.max.ms"] == "100"
    assert config["client.id"] == "acidclean-cleaner-c1" and config["group.id"] == "acidclean-cleaner.acme"
    Consumer(config).close()  # the linked librdkafka knows every setting


def test_the_users_kafka_settings_win_over_the_cleaners_defaults() -> None:
    given = {"fetch.queue.backoff.ms": "500", "queued.max.messages.kbytes": "4096", "client.id": "mine"}
    config = cleaner_consumer_config({**KAFKA, **given}, "g", "c1")
    assert {key: config[key] for key in given} == given
