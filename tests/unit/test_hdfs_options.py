"""The pure parts of the HDFS adapter: settings from the environment, location URIs, error messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from acidclean.shared.errors import ConfigurationError
from acidclean.shared.storage import StorageError
from acidclean.shared.storage.hdfs import (
    HdfsLocation,
    describe_hdfs_error,
    hdfs_options,
    parse_config,
    split_hdfs_uri,
)

JAVA_TRACE = "\\n\\tat org.apache.hadoop.hdfs.server.namenode.FSNamesystem.mkdirs(FSNamesystem.java:3441)\\n"


def test_config_pairs_are_split_on_semicolons_and_new_lines_and_keep_commas_in_values() -> None:
    text = "dfs.ha.namenodes.ns1=nn1,nn2; dfs.namenode.rpc-address.ns1.nn1=host1:8020\n\nfs.defaultFS=hdfs://ns1"
    assert parse_config(text) == (
        ("dfs.ha.namenodes.ns1", "nn1,nn2"),
        ("dfs.namenode.rpc-address.ns1.nn1", "host1:8020"),
        ("fs.defaultFS", "hdfs://ns1"),
    )


def test_a_later_config_key_wins() -> None:
    assert parse_config("a.b=1;a.b=2") == (("a.b", "2"),)


@pytest.mark.parametrize("text", ["just.a.key", "=value", "a key=value"])
def test_a_config_item_that_is_not_key_equals_value_is_refused(text: str) -> None:
    with pytest.raises(ConfigurationError, match="is not a key=value pair"):
        parse_config(text)


def test_no_settings_mean_the_hadoop_configuration_files_decide() -> None:
    options = hdfs_options({})
    assert options.config == ()
    assert options.config_dir is None
    assert not options.kerberos


def test_a_principal_implies_kerberos(tmp_path: Path) -> None:
    keytab = tmp_path / "cleaner.keytab"
    keytab.write_bytes(b"\x05\x02")
    options = hdfs_options(
        {
            "ACIDCLEAN_HDFS_KERBEROS_PRINCIPAL": "cleaner/host@EXAMPLE.COM",
            "ACIDCLEAN_HDFS_KERBEROS_KEYTAB": str(keytab),
        }
    )
    assert options.kerberos
    assert options.config_dict == {"hadoop.security.authentication": "kerberos"}
    assert (options.kerberos_principal, options.kerberos_keytab) == ("cleaner/host@EXAMPLE.COM", str(keytab))


def test_an_explicit_authentication_wins_over_the_config_pairs() -> None:
    options = hdfs_options(
        {
            "ACIDCLEAN_HDFS_CONFIG": "hadoop.security.authentication=kerberos",
            "ACIDCLEAN_HDFS_AUTHENTICATION": "Simple",
        }
    )
    assert options.config_dict == {"hadoop.security.authentication": "simple"}


def test_an_unknown_authentication_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="use simple or kerberos"):
        hdfs_options({"ACIDCLEAN_HDFS_AUTHENTICATION": "token"})


def test_a_keytab_without_a_principal_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="name the principal"):
        hdfs_options({"ACIDCLEAN_HDFS_KERBEROS_KEYTAB": str(tmp_path)})


def test_a_missing_keytab_is_refused_before_any_login(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not a readable file"):
        hdfs_options(
            {
                "ACIDCLEAN_HDFS_KERBEROS_PRINCIPAL": "cleaner@EXAMPLE.COM",
                "ACIDCLEAN_HDFS_KERBEROS_KEYTAB": str(tmp_path / "missing.keytab"),
            }
        )


def test_equal_settings_are_equal_options_so_they_share_a_client() -> None:
    environment = {"ACIDCLEAN_HDFS_CONFIG": "b=2;a=1", "ACIDCLEAN_HDFS_CONF_DIR": "/etc/hadoop/conf"}
    assert hdfs_options(environment) == hdfs_options(dict(environment))
    assert hash(hdfs_options(environment)) == hash(hdfs_options({**environment, "ACIDCLEAN_HDFS_CONFIG": "a=1;b=2"}))


@pytest.mark.parametrize(
    ("uri", "authority", "path"),
    [
        ("hdfs://NameNode:8020/warehouse/db.db/t", "namenode:8020", "/warehouse/db.db/t"),
        ("hdfs://nn:8020/warehouse/db.db/t/", "nn:8020", "/warehouse/db.db/t"),
        ("hdfs://ns1/warehouse", "ns1", "/warehouse"),
        ("hdfs:///warehouse/t", "", "/warehouse/t"),
        ("hdfs://nn:8020", "nn:8020", "/"),
        ("HDFS://nn:8020/t/city=St. John%27s%232", "nn:8020", "/t/city=St. John%27s%232"),
    ],
)
def test_an_hdfs_uri_splits_into_the_namenode_and_the_literal_path(uri: str, authority: str, path: str) -> None:
    assert split_hdfs_uri(uri) == HdfsLocation(authority, path)


def test_an_empty_authority_means_the_default_file_system() -> None:
    assert split_hdfs_uri("hdfs:///t").client_url is None
    assert split_hdfs_uri("hdfs://ns1/t").client_url == "hdfs://ns1"


@pytest.mark.parametrize("uri", ["s3a://bucket/t", "/warehouse/t", "hdfs://user@nn:8020/t"])
def test_what_is_not_an_hdfs_location_is_refused(uri: str) -> None:
    with pytest.raises(StorageError):
        split_hdfs_uri(uri)


def test_a_namenode_exception_is_reduced_to_its_class_and_first_line_with_advice() -> None:
    error = RuntimeError(
        'RPCError("org.apache.hadoop.security.AccessControlException", '
        f'"Permission denied: user=cleaner, access=WRITE, inode=\\"/warehouse\\":hive:hive:drwxr-xr-x{JAVA_TRACE}")'
    )
    message = describe_hdfs_error(error, "nn:8020")
    assert message.startswith(
        "AccessControlException: Permission denied: user=cleaner, access=WRITE, "
        'inode="/warehouse":hive:hive:drwxr-xr-x;'
    )
    assert "hdfs dfs -chmod" in message
    assert "\tat " not in message and "FSNamesystem" not in message


def test_a_namenode_exception_without_advice_keeps_its_class_and_message() -> None:
    error = RuntimeError(
        f'RPCError("org.apache.hadoop.fs.ParentNotDirectoryException", "/t/f (is not a directory){JAVA_TRACE}")'
    )
    assert describe_hdfs_error(error, "nn:8020") == "ParentNotDirectoryException: /t/f (is not a directory)"


def test_safe_mode_says_to_wait() -> None:
    error = RuntimeError('RPCError("org.apache.hadoop.hdfs.server.namenode.SafeModeException", "Cannot delete /t.")')
    assert "wait until it leaves" in describe_hdfs_error(error, "nn:8020")


def test_a_refused_connection_names_the_namenode_and_what_to_check() -> None:
    message = describe_hdfs_error(OSError("Connection refused (os error 111)"), "nn:8020")
    assert message.startswith("Connection refused (os error 111); is the NameNode nn:8020 running")
    assert "HADOOP_CONF_DIR" in message
    assert "fs.defaultFS running" in describe_hdfs_error(OSError("Connection refused"), "")


def test_a_kerberos_failure_says_to_kinit() -> None:
    message = describe_hdfs_error(RuntimeError("GSSAPIError: No Kerberos credentials available"), "nn:8020")
    assert "kinit -kt" in message


def test_a_multi_line_error_keeps_its_first_line() -> None:
    error = FileExistsError("rename destination /t/base_1 already exists\n\tat org.apache.hadoop.hdfs.Foo")
    assert describe_hdfs_error(error, "nn:8020") == "rename destination /t/base_1 already exists"
