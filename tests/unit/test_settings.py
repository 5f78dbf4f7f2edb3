"""Settings: defaults, file, environment and flags, in that order; the seeds' key names as they are;
``.properties`` read as Java reads them; durations with units; errors in the user's own words."""

from __future__ import annotations

import io
import json
import os
import re
import tokenize
from pathlib import Path

import pytest

from acidclean.consumers.scheduling import BUNDLE_DUE_SPREAD_MS
from acidclean.shared.errors import ConfigurationError
from acidclean.shared.settings import (
    COMMAND_LINE_FLAGS,
    ENV_PREFIX,
    NON_SETTING_PREFIXES,
    NON_SETTING_VARIABLES,
    check_environment_names,
    load_settings,
    read_config_file,
    read_environment,
)

REPOSITORY = Path(__file__).resolve().parents[2]
INTERVAL_HINT = "not a duration (use a number of milliseconds or a value with a unit: 500ms, 2s, 5m, 1h, 1d)"


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
        "bootstrap.servers": "broker:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
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


def test_unknown_key_names_file_line_and_the_closest_known_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.properties"
    config.write_text("# tuned\n\nhive.compaction-cleanup-intervall=5\n")
    with pytest.raises(ConfigurationError) as error:
        load_settings(config, environ={})
    assert str(error.value).startswith(
        f"unknown setting 'hive.compaction-cleanup-intervall' in {config}:3; "
        "did you mean 'hive.compaction-cleanup-interval'? The known settings are: "
    )


def test_bad_value_names_the_key_as_written_and_where_it_came_from() -> None:
    with pytest.raises(ConfigurationError) as error:
        load_settings(environ={"ACIDCLEAN_CLEANUP_INTERVAL_MS": "soon"})
    assert str(error.value) == f"ACIDCLEAN_CLEANUP_INTERVAL_MS=soon in the environment: {INTERVAL_HINT}"
    with pytest.raises(ConfigurationError) as error:
        load_settings(environ={}, overrides={"hive.compaction-cleanup-threads": 0})
    assert str(error.value) == "hive.compaction-cleanup-threads=0 on the command line: input should be greater than 0"


def test_a_bad_flag_is_named_as_the_cleaner_command_spells_it() -> None:
    with pytest.raises(ConfigurationError) as error:
        load_settings(environ={}, overrides={"cleanup_threads": 0, "tenant": ""})
    assert str(error.value) == (
        "--threads=0 on the command line: input should be greater than 0; "
        "--tenant='' on the command line: string should have at least 1 character"
    )


def test_every_named_flag_is_an_option_of_the_cleaner_command() -> None:
    from acidclean.cli.cleaner import cleaner

    options = {opt for param in cleaner.params for opt in param.opts}
    assert set(COMMAND_LINE_FLAGS.values()) <= options


def test_a_bad_default_names_the_defaults_source() -> None:
    with pytest.raises(ConfigurationError) as error:
        load_settings(environ={}, defaults={"max_wait_s": "forever"}, defaults_source="the local stack in /srv/.stack")
    assert str(error.value) == (
        "max_wait_s=forever from the local stack in /srv/.stack: not a duration "
        "(use a number of seconds or a value with a unit: 500ms, 2s, 5m, 1h, 1d)"
    )


def test_a_json_setting_in_a_file_names_its_place_inside_the_value(tmp_path: Path) -> None:
    config = tmp_path / "acidclean.json"
    config.write_text('{"allowed_roots": {"default": "hdfs://nn/warehouse"}}')
    with pytest.raises(ConfigurationError) as error:
        load_settings(config, environ={})
    assert str(error.value) == (
        f'allowed_roots={{"default": "hdfs://nn/warehouse"}} in {config}: input should be a valid list (at default)'
    )


# -- bug 1: openLooKeng's durations ------------------------------------------------------------------


def test_openlookeng_recheck_interval_with_a_unit_is_read(tmp_path: Path) -> None:
    config = tmp_path / "hive.properties"
    config.write_text("hive.vacuum-cleanup-recheck-interval=5m\n")
    assert load_settings(config, environ={}).cleanup_interval_ms == 300_000


@pytest.mark.parametrize(
    ("written", "milliseconds"),
    [
        ("2000", 2000),
        ("500ms", 500),
        ("2s", 2000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        ("2.5s", 2500),
        ("10.00m", 600_000),
        (" 3 s ", 3000),
        ("0.0005s", 1),  # rounded to a whole millisecond, as Airlift's Duration.toMillis does
    ],
)
def test_interval_takes_milliseconds_or_a_unit(written: str, milliseconds: int) -> None:
    assert load_settings(environ={"ACIDCLEAN_CLEANUP_INTERVAL_MS": written}).cleanup_interval_ms == milliseconds
    overrides = {"hive.compaction-cleanup-interval": written}
    assert load_settings(environ={}, overrides=overrides).cleanup_interval_ms == milliseconds


@pytest.mark.parametrize(
    "field", ["max_wait_s", "metastore_timeout_s", "abandoned_staging_s", "vacuum_lock_wait_s", "vacuum_lock_stale_s"]
)
@pytest.mark.parametrize(
    ("written", "seconds"),
    [("90", 90.0), ("1.5", 1.5), ("500ms", 0.5), ("2.5s", 2.5), ("10.00m", 600.0), ("1d", 86400.0)],
)
def test_seconds_settings_take_seconds_or_a_unit(field: str, written: str, seconds: float) -> None:
    settings = load_settings(environ={ENV_PREFIX + field.upper(): written})
    assert getattr(settings, field) == seconds


def test_numbers_from_json_and_flags_stay_in_the_settings_own_unit(tmp_path: Path) -> None:
    config = tmp_path / "acidclean.json"
    config.write_text('{"cleanup_interval_ms": 1500, "max_wait_s": 60, "metastore_timeout_s": "1m"}')
    settings = load_settings(config, environ={}, overrides={"vacuum_lock_wait_s": 2.5})
    assert (settings.cleanup_interval_ms, settings.max_wait_s, settings.metastore_timeout_s) == (1500, 60.0, 60.0)
    assert settings.vacuum_lock_wait_s == 2.5


@pytest.mark.parametrize("written", ["5x", "5 minutes", "-1s", "1e3ms", "5M", "s", ""])
def test_a_bad_duration_names_key_file_line_and_the_units(tmp_path: Path, written: str) -> None:
    config = tmp_path / "acidclean.properties"
    config.write_text(f"hive.metastore.uris=thrift://hms:9083\nhive.vacuum-cleanup-recheck-interval={written}\n")
    with pytest.raises(ConfigurationError) as error:
        load_settings(config, environ={})
    shown = written or "''"
    assert str(error.value) == f"hive.vacuum-cleanup-recheck-interval={shown} in {config}:2: {INTERVAL_HINT}"


def test_a_zero_interval_is_refused_as_before() -> None:
    with pytest.raises(ConfigurationError, match=r"^ACIDCLEAN_CLEANUP_INTERVAL_MS=0ms in the environment: .*greater"):
        load_settings(environ={"ACIDCLEAN_CLEANUP_INTERVAL_MS": "0ms"})


def test_the_bundle_spread_defaults_to_the_handlers_and_refuses_a_negative_one() -> None:
    assert load_settings(environ={}).cleanup_bundle_spread_ms == BUNDLE_DUE_SPREAD_MS
    assert load_settings(environ={"ACIDCLEAN_CLEANUP_BUNDLE_SPREAD_MS": "250"}).cleanup_bundle_spread_ms == 250
    with pytest.raises(ConfigurationError) as error:
        load_settings(environ={"ACIDCLEAN_CLEANUP_BUNDLE_SPREAD_MS": "-1"})
    assert str(error.value) == (
        "ACIDCLEAN_CLEANUP_BUNDLE_SPREAD_MS=-1 in the environment: input should be greater than or equal to 0"
    )


# -- bug 2: .properties as Java reads them ------------------------------------------------------------


def test_properties_file_is_read_as_java_reads_it(tmp_path: Path) -> None:
    config = tmp_path / "acidclean.properties"
    config.write_text(
        "# a comment\n"
        "! another comment, as Java allows\n"
        "hive.metastore.uris=thrift://metastore-1:9083,\\\n"
        "                    thrift://metastore-2:9083\n"
        "hive.compaction-cleanup-threads 4\n"
        "tenant:analytics\n"
        "   topic_prefix = caf\\u00e9.\n"
        "group_id\t=\tcleaners\n"
        "client.id=a\\=b\n"
    )
    settings = load_settings(config, environ={})
    assert settings.metastore_uris == "thrift://metastore-1:9083,thrift://metastore-2:9083"
    assert settings.cleanup_threads == 4
    assert settings.tenant == "analytics"
    assert settings.topic_prefix == "café."
    assert settings.group_id == "cleaners"
    assert settings.kafka["client.id"] == "a=b"


def test_a_continued_value_is_not_read_as_a_setting_of_its_own(tmp_path: Path) -> None:
    config = tmp_path / "acidclean.properties"
    config.write_text("hive.metastore.uris=thrift://a:9083,\\\n  thrift://b:9083\n")
    assert read_config_file(config) == {"hive.metastore.uris": "thrift://a:9083,thrift://b:9083"}


def test_lines_are_counted_across_continuations(tmp_path: Path) -> None:
    config = tmp_path / "acidclean.properties"
    config.write_text("hive.metastore.uris=thrift://a:9083,\\\n  thrift://b:9083\ncleanup_threads=none\n")
    with pytest.raises(ConfigurationError, match=rf"^cleanup_threads=none in {re.escape(str(config))}:3: input"):
        load_settings(config, environ={})


def test_a_line_without_a_value_is_an_unknown_key_named_with_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "c.properties"
    config.write_text("cleanup_threads=2\njust-a-word\n")
    with pytest.raises(ConfigurationError, match=r"unknown setting 'just-a-word' in .*c\.properties:2"):
        load_settings(config, environ={})


def test_a_bad_unicode_escape_names_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "c.properties"
    config.write_text("tenant=a\ntopic_prefix=\\u00zz\n")
    with pytest.raises(ConfigurationError, match=r"c\.properties:2: \\u00zz is not a unicode escape"):
        load_settings(config, environ={})


def test_the_production_example_file_loads() -> None:
    settings = load_settings(REPOSITORY / "deploy" / "production" / "acidclean.properties", environ={})
    assert settings.tenant == "analytics"
    assert settings.allowed_roots == {"analytics": ["hdfs://namenode:8020/warehouse/analytics"]}


def test_json_config_files_keep_working(tmp_path: Path) -> None:
    config = tmp_path / "acidclean.json"
    config.write_text(json.dumps({"topics": {"dead_letter": "dlq"}, "kafka": {"client.id": "c"}, "tenant": "t"}))
    settings = load_settings(config, environ={})
    assert (settings.topics.dead_letter, settings.kafka["client.id"], settings.tenant) == ("dlq", "c", "t")


# -- bug 3: environment variables ----------------------------------------------------------------------


def test_a_misspelt_environment_variable_is_refused_with_a_suggestion() -> None:
    with pytest.raises(ConfigurationError) as error:
        load_settings(environ={"ACIDCLEAN_CLEANUP_INTERVL_MS": "5000"})
    assert str(error.value) == (
        "unknown environment variable ACIDCLEAN_CLEANUP_INTERVL_MS; did you mean ACIDCLEAN_CLEANUP_INTERVAL_MS?"
    )


def test_an_unknown_variable_with_no_close_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"^unknown environment variable ACIDCLEAN_ZZZ; the ACIDCLEAN_\* .*"):
        read_environment({"ACIDCLEAN_ZZZ": "1"})


def test_variables_that_are_not_settings_are_accepted() -> None:
    environ = {
        "ACIDCLEAN_S3_ENDPOINT": "http://127.0.0.1:9000",
        "ACIDCLEAN_HDFS_CONF_DIR": "/etc/hadoop",
        "ACIDCLEAN_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "ACIDCLEAN_KAFKA_BOOTSTRAP": "b:9092",
        **{name: "x" for name in NON_SETTING_VARIABLES},
        "ACIDCLEAN_STATE_DIR": "/tmp/stack",
        "ACIDCLEAN_METASTORE_URIS": "thrift://m:9083",
        "ACIDCLEAN_VACUUM_COMMIT": "rename",  # a plain string, not JSON
        "ACIDCLEAN_ALLOWED_ROOTS": '{"default": ["/w"]}',
        "PATH": "/usr/bin",
    }
    settings = load_settings(environ=environ)
    assert settings.kafka == {"bootstrap.servers": "b:9092", "session.timeout.ms": "6000"}
    assert (settings.state_dir, settings.vacuum_commit) == (Path("/tmp/stack"), "rename")
    assert settings.allowed_roots == {"default": ["/w"]}


def test_bad_json_in_a_variable_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match=r"^ACIDCLEAN_ALLOWED_ROOTS=\{default in the environment: not JSON"):
        load_settings(environ={"ACIDCLEAN_ALLOWED_ROOTS": "{default"})


def _names_in_code() -> dict[str, Path]:
    """Every ACIDCLEAN_* name in the repository's code: string literals and comments of Python files (not
    identifiers such as ACIDCLEAN_NAMESPACE), and the whole text of scripts and config files."""
    pattern = re.compile(r"\bACIDCLEAN_[A-Z0-9_]*")
    suffixes = {".py", ".sh", ".yaml", ".yml", ".properties", ".toml", ".cfg", ".json", ".xml", ".java"}
    found: dict[str, Path] = {}
    for folder, subfolders, files in os.walk(REPOSITORY):
        subfolders[:] = [
            d
            for d in subfolders
            if (d == ".ci" or not d.startswith(".")) and not d.endswith(".egg-info") and d != "build"  # make docs' site
        ]
        for file in files:
            path = Path(folder, file)
            wanted = path.suffix in suffixes or file == "Makefile" or folder.endswith(".ci")
            if not wanted or path == Path(__file__).resolve():  # this file names wrong variables on purpose
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            if path.suffix == ".py":
                tokens = tokenize.generate_tokens(io.StringIO(text).readline)
                text = "\n".join(t.string for t in tokens if t.type in (tokenize.STRING, tokenize.COMMENT))
            for name in pattern.findall(text):
                found.setdefault(name, path)
    return found


def test_every_acidclean_variable_in_the_code_is_a_setting_or_listed() -> None:
    names = _names_in_code()
    assert "ACIDCLEAN_CRASH_AT" in names and "ACIDCLEAN_S3_ENDPOINT" in names  # the scan does see them
    assert "ACIDCLEAN_NAMESPACE" not in names  # a Python constant, not a variable
    prefixes = {ENV_PREFIX, "ACIDCLEAN_KAFKA_", *NON_SETTING_PREFIXES}
    unknown = []
    for name, path in sorted(names.items()):
        if name.endswith("_"):  # a prefix, as in ACIDCLEAN_S3_* or ACIDCLEAN_KAFKA_<NAME>
            if name not in prefixes:
                unknown.append(f"{name}* ({path.relative_to(REPOSITORY)})")
            continue
        try:
            check_environment_names([name])
        except ConfigurationError as error:
            unknown.append(f"{path.relative_to(REPOSITORY)}: {error}")
    assert not unknown, "add these to NON_SETTING_VARIABLES in shared/settings.py: " + "; ".join(unknown)
