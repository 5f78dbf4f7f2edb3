"""Settings: defaults, file, environment and flags, in that order; the seeds' key names as they are."""

from __future__ import annotations

from pathlib import Path

import pytest

from acidclean.shared.errors import ConfigurationError
from acidclean.shared.settings import load_settings


def test_defaults_match_the_seed() -> None:
    settings = load_settings(environ={})
    assert settings.cleanup_interval_ms == 2000
    assert settings.cleanup_threads == 2
    assert settings.topic("vacuum_committed") == "acid.vacuum.committed"


def test_seed_and_openlookeng_key_names_are_accepted(tmp_path: Path) -> None:
    config = tmp_path / "hive.properties"
    config.write_text(
        "# a catalog file as openLooKeng users have it\n"
        "hive.vacuum-cleanup-recheck-interval=750\n"
        "hive.compaction-cleanup-threads=4\n"
        "hive.metastore.uris=thrift://hms:9083\n"
        "bootstrap.servers=broker:9092\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=PLAIN\n"
    )
    settings = load_settings(config, environ={})
    assert settings.cleanup_interval_ms == 750
    assert settings.cleanup_threads == 4
    assert settings.metastore_uris == "thrift://hms:9083"
    assert settings.kafka == {
        "bootstrap.servers": "broker:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"
    }


def test_environment_beats_file_and_flags_beat_environment(tmp_path: Path) -> None:
    config = tmp_path / "acidclean.json"
    config.write_text('{"hive.compaction-cleanup-interval": 100, "cleanup_threads": 3, "topic_prefix": "a."}')
    environ = {
        "ACIDCLEAN_CLEANUP_INTERVAL_MS": "200",
        "ACIDCLEAN_KAFKA_BOOTSTRAP": "envbroker:9092",
        "ACIDCLEAN_KAFKA_SASL_USERNAME": "me",
        "ACIDCLEAN_TEST_METASTORE": "hive3",  # a test switch, not a setting: ignored
    }
    settings = load_settings(config, environ=environ, overrides={"cleanup_threads": 5, "tenant": None})
    assert settings.cleanup_interval_ms == 200
    assert settings.cleanup_threads == 5
    assert settings.topic_prefix == "a."
    assert settings.tenant == "default"
    assert settings.kafka == {"bootstrap.servers": "envbroker:9092", "sasl.username": "me"}


def test_unknown_key_is_refused_with_the_known_names(tmp_path: Path) -> None:
    config = tmp_path / "bad.properties"
    config.write_text("hive.compaction-cleanup-intervall=5\n")
    with pytest.raises(ConfigurationError, match=r"unknown setting 'hive.compaction-cleanup-intervall'.*known"):
        load_settings(config, environ={})


def test_bad_value_names_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="cleanup_interval_ms"):
        load_settings(environ={"ACIDCLEAN_CLEANUP_INTERVAL_MS": "soon"})
    with pytest.raises(ConfigurationError, match="cleanup_threads"):
        load_settings(environ={}, overrides={"hive.compaction-cleanup-threads": 0})


def test_malformed_properties_line_names_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "c.properties"
    config.write_text("cleanup_threads=2\njust-a-word\n")
    with pytest.raises(ConfigurationError, match=r"c\.properties:2"):
        load_settings(config, environ={})
