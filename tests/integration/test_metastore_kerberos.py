"""Kerberos to the metastore, on a real MIT KDC and a real metastore that requires it.

The module starts a KDC (``deploy/local/kdc.py``: its own realm on a free 127.0.0.1 port) and a
metastore of the session's flavour (hive2 by default; hive3 or hive4 with ACIDCLEAN_TEST_METASTORE)
with ``hive.metastore.sasl.enabled=true``, its service principal ``hive/127.0.0.1@ACIDCLEAN.TEST`` and
keytab, and ``hadoop.security.authentication=kerberos``. acidclean's client names the service
principal ``hive/_HOST@ACIDCLEAN.TEST``, as clusters configure it. Both processes are stopped by pid.

Skipped, with the reason, only where MIT Kerberos (``make test`` installs it as root) or the Python
``gssapi`` module (the ``kerberos`` extra) is missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from acidclean.cli import EXIT_UNAVAILABLE, EXIT_USAGE, main
from acidclean.deploy.local.kdc import Kdc, kdc_tools_missing, kinit, start_kdc
from acidclean.deploy.local.metastore import MetastoreKerberos, start_metastore
from acidclean.deploy.local.process import stop_process
from acidclean.deploy.local.provision import FLAVOUR_ENV
from acidclean.shared import metastore_transport
from acidclean.shared.errors import ConfigurationError, MetastoreAuthenticationError, MetastoreError
from acidclean.shared.hive_metastore import HiveMetastore
from acidclean.shared.metastore import LockRequestComponent, Operation
from acidclean.shared.probes import metastore_check_for
from acidclean.shared.settings import Settings, load_settings

pytestmark = [pytest.mark.integration, pytest.mark.metastore]

REALM = "ACIDCLEAN.TEST"


def _why_not() -> str | None:
    missing = kdc_tools_missing()
    if missing:
        return missing
    if importlib.util.find_spec("gssapi") is None:
        return "no Python gssapi module: pip install -e '.[kerberos]' (make test does, once MIT Kerberos is installed)"
    return None


@dataclass(frozen=True)
class KerberizedMetastore:
    kdc: Kdc
    uri: str
    flavour: str
    client: str  # a principal whose key is in client_keytab
    client_keytab: Path
    stranger: str  # a principal the KDC knows that the metastore does not run as
    state_dir: Path

    def metastore_kerberos(self) -> MetastoreKerberos:
        """What the metastore runs as: its principal, its keytab, the realm."""
        return MetastoreKerberos(f"hive/127.0.0.1@{REALM}", self.state_dir / "hive.keytab", self.kdc.krb5_conf)

    def environment(self, **settings: str) -> dict[str, str]:
        """ACIDCLEAN_* variables for a client of this metastore with Kerberos; ``settings`` override."""
        values = {
            "metastore_uris": self.uri,
            "metastore_timeout_s": "20",
            "metastore_sasl_enabled": "true",
            "metastore_kerberos_principal": f"hive/_HOST@{REALM}",
            "metastore_client_principal": self.client,
            "metastore_client_keytab": str(self.client_keytab),
            **settings,
        }
        return {f"ACIDCLEAN_{key.upper()}": value for key, value in values.items()}

    def settings(self, **settings: str) -> Settings:
        return load_settings(environ=self.environment(**settings))


@pytest.fixture(scope="module")
def kerberized() -> Iterator[KerberizedMetastore]:
    reason = _why_not()
    if reason:
        pytest.skip(f"Kerberos tests skipped: {reason}")
    flavour = os.environ.get(FLAVOUR_ENV, "hive2")
    state_dir = Path(tempfile.mkdtemp(prefix="acidclean-kerberos-"))
    kdc = start_kdc(state_dir / "kdc", REALM)
    try:
        with pytest.MonkeyPatch.context() as patch:
            for name, value in kdc.environment().items():
                patch.setenv(name, value)
            # Where a test means "no credentials", the default ticket cache must not hold any either.
            patch.setenv("KRB5CCNAME", f"FILE:{state_dir / 'no-such-cache'}")
            kdc.add_principal("hive/127.0.0.1", state_dir / "hive.keytab")
            client = kdc.add_principal("acidclean/cleaner", state_dir / "cleaner.keytab")
            stranger = kdc.add_principal("hive/elsewhere")
            realm = KerberizedMetastore(kdc, "", flavour, client, state_dir / "cleaner.keytab", stranger, state_dir)
            process, uri = start_metastore(state_dir, flavour, kerberos=realm.metastore_kerberos())
            try:
                yield replace(realm, uri=uri)
            finally:
                stop_process(process.pid, process.name, start_time=process.start_time)
    finally:
        kdc.stop()
        shutil.rmtree(state_dir, ignore_errors=True)


def test_a_client_with_a_keytab_lists_databases_and_locks(kerberized: KerberizedMetastore) -> None:
    with HiveMetastore.from_settings(kerberized.settings()) as metastore:
        assert "default" in metastore.get_all_databases()
        metastore.create_database("kerberos")
        metastore.create_transactional_table("kerberos", "orders", [("id", "int")])
        lock = metastore.lock([LockRequestComponent("kerberos", "orders", operation=Operation.NO_TXN)])
        try:
            held = [info for info in metastore.show_locks("kerberos", "orders") if info.lock_id == lock.lock_id]
            assert [(info.lock_type, info.state) for info in held] == [("SHARED_READ", "ACQUIRED")]
        finally:
            metastore.unlock(lock.lock_id)
        assert not [info for info in metastore.show_locks("kerberos", "orders") if info.lock_id == lock.lock_id]


def test_messages_to_a_metastore_that_requires_privacy_are_encrypted(
    kerberized: KerberizedMetastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # hadoop.rpc.protection=privacy: the metastore offers only GSSAPI's confidentiality layer, so every
    # message after the negotiation is wrapped (encrypted) both ways; a mistake in either direction
    # would fail the first call.
    chosen: list[int] = []
    choose_layer = metastore_transport.choose_layer

    def spied(offer: bytes) -> tuple[int, int]:
        layer = choose_layer(offer)
        chosen.append(layer[0])
        return layer

    monkeypatch.setattr(metastore_transport, "choose_layer", spied)
    process, uri = start_metastore(
        kerberized.state_dir / "privacy",
        kerberized.flavour,
        kerberos=kerberized.metastore_kerberos(),
        extra_settings={"hadoop.rpc.protection": "privacy"},
    )
    try:
        with HiveMetastore.from_settings(kerberized.settings(metastore_uris=uri)) as metastore:
            metastore.create_database("private")
            metastore.create_transactional_table("private", "orders", [("id", "int"), ("name", "string")])
            assert metastore.get_table("private", "orders").transactional
            lock = metastore.lock([LockRequestComponent("private", "orders", operation=Operation.NO_TXN)])
            assert lock.lock_id in [info.lock_id for info in metastore.show_locks("private", "orders")]
            metastore.unlock(lock.lock_id)
    finally:
        stop_process(process.pid, process.name, start_time=process.start_time)
    assert chosen == [metastore_transport.LAYER_CONFIDENTIALITY]


def test_a_client_with_a_ticket_cache_from_kinit_connects(kerberized: KerberizedMetastore) -> None:
    cache = kerberized.state_dir / "kinit-cache"
    kinit(kerberized.kdc, kerberized.client, kerberized.client_keytab, cache)
    settings = kerberized.settings(
        metastore_client_keytab="", metastore_client_principal="", metastore_client_ticket_cache=f"FILE:{cache}"
    )
    with HiveMetastore.from_settings(settings) as metastore:
        assert "default" in metastore.get_all_databases()


def test_a_client_without_credentials_is_told_which_keys_to_set(kerberized: KerberizedMetastore) -> None:
    settings = kerberized.settings(metastore_client_keytab="", metastore_client_principal="")
    with pytest.raises(MetastoreAuthenticationError) as refused:
        HiveMetastore.from_settings(settings).get_all_databases()
    line = str(refused.value)
    assert "\n" not in line
    assert f"Kerberos authentication to the Hive Metastore at {kerberized.uri}" in line
    assert f"for hive/127.0.0.1@{REALM}" in line  # _HOST became the URI's host
    assert "No Kerberos credentials available (default cache: FILE:" in line  # what Kerberos said
    assert "set metastore_client_keytab and metastore_client_principal" in line


def test_a_service_principal_the_kdc_does_not_know_is_named(kerberized: KerberizedMetastore) -> None:
    settings = kerberized.settings(metastore_kerberos_principal=f"hive-metastore/_HOST@{REALM}")
    with pytest.raises(MetastoreAuthenticationError) as refused:
        HiveMetastore.from_settings(settings).get_all_databases()
    line = str(refused.value)
    assert f"Server hive-metastore/127.0.0.1@{REALM} not found in Kerberos database" in line
    assert "set hive.metastore.kerberos.principal (ACIDCLEAN_METASTORE_KERBEROS_PRINCIPAL)" in line


def test_a_service_principal_the_metastore_does_not_run_as_is_refused_by_the_metastore(
    kerberized: KerberizedMetastore,
) -> None:
    # The KDC issues the ticket; the metastore cannot read it and says so in its SASL ERROR message.
    settings = kerberized.settings(metastore_kerberos_principal=kerberized.stranger)
    with pytest.raises(MetastoreAuthenticationError) as refused:
        HiveMetastore.from_settings(settings).get_all_databases()
    line = str(refused.value)
    assert "\n" not in line
    assert f"for {kerberized.stranger} failed: the metastore refused the Kerberos authentication (BAD): " in line
    assert "GSS initiate failed" in line  # the metastore's own words
    assert "check that hive.metastore.kerberos.principal (ACIDCLEAN_METASTORE_KERBEROS_PRINCIPAL) names" in line


def test_a_plain_client_is_told_the_metastore_requires_kerberos(kerberized: KerberizedMetastore) -> None:
    with pytest.raises(MetastoreAuthenticationError) as refused:
        HiveMetastore(kerberized.uri, timeout_s=10).get_all_databases()
    assert "set hive.metastore.sasl.enabled=true (ACIDCLEAN_METASTORE_SASL_ENABLED)" in str(refused.value)


def test_a_keytab_that_is_not_there_is_a_settings_error(kerberized: KerberizedMetastore) -> None:
    missing = kerberized.state_dir / "nowhere.keytab"
    with pytest.raises(ConfigurationError, match=f"metastore_client_keytab={missing}: no such file"):
        HiveMetastore.from_settings(kerberized.settings(metastore_client_keytab=str(missing)))


def test_a_kdc_that_does_not_answer_is_an_outage_not_a_refusal(
    kerberized: KerberizedMetastore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from acidclean.deploy.local.kdc import krb5_conf
    from acidclean.deploy.local.process import free_port

    elsewhere = kerberized.state_dir / "krb5-no-kdc.conf"
    elsewhere.write_text(krb5_conf(REALM, free_port()))  # nothing listens there
    monkeypatch.setenv("KRB5_CONFIG", str(elsewhere))
    # A keytab of its own: the tickets the other tests got from the KDC stay valid for an hour in the
    # process's memory cache of their keytab, and a client holding them rightly needs no KDC.
    keytab = kerberized.state_dir / "kdc-down.keytab"
    keytab.write_bytes(kerberized.client_keytab.read_bytes())
    settings = kerberized.settings(metastore_client_keytab=str(keytab))
    with pytest.raises(MetastoreError) as failed:
        HiveMetastore.from_settings(settings).get_all_databases()
    assert not isinstance(failed.value, MetastoreAuthenticationError)
    line = str(failed.value)
    assert line.startswith(f"cannot reach the Hive Metastore at {kerberized.uri}: no Kerberos KDC answered"), line
    assert f"Cannot contact any KDC for realm '{REALM}'" in line
    assert f"the kdc entries of its realm in {elsewhere} (KRB5_CONFIG)" in line
    command = CliRunner().invoke(
        main, ["read", "kerberos.orders", "--count"], env=kerberized.environment(metastore_client_keytab=str(keytab))
    )
    assert command.exit_code == EXIT_UNAVAILABLE, command.output
    assert command.output.startswith("error: cannot reach the Hive Metastore at "), command.output


def test_commands_connect_with_kerberos_and_exit_2_when_refused(kerberized: KerberizedMetastore) -> None:
    runner = CliRunner()
    created = runner.invoke(
        main, ["create-table", "kerberos.cli_orders", "--columns", "id int, name string"], env=kerberized.environment()
    )
    assert created.exit_code == 0, created.output
    assert "created transactional table kerberos.cli_orders" in created.output
    ingested = runner.invoke(
        main, ["ingest", "kerberos.cli_orders", "--rows", "3", "--no-publish"], env=kerberized.environment()
    )
    assert ingested.exit_code == 0, ingested.output
    assert "committed write id" in ingested.output
    read = runner.invoke(main, ["read", "kerberos.cli_orders", "--count"], env=kerberized.environment())
    assert read.exit_code == 0, read.output
    assert read.stdout.strip().endswith("3")

    refused = runner.invoke(
        main,
        ["read", "kerberos.cli_orders", "--count"],
        env=kerberized.environment(metastore_kerberos_principal=f"hive-metastore/_HOST@{REALM}"),
    )
    assert refused.exit_code == EXIT_USAGE, refused.output
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Kerberos authentication to the Hive Metastore"), lines


def test_the_cleaner_waits_for_a_reader_and_cleans_through_kerberos(
    kerberized: KerberizedMetastore, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    from cleaner_support import Watcher, cleaner_settings, create_table, publish, running_cleaner, start_reader

    root = tmp_path / "data"
    plain = cleaner_settings(kafka_bootstrap, kerberized.uri, root, unique_name)
    kerberos = {key: value for key, value in kerberized.settings().model_dump().items() if key.startswith("metastore_")}
    settings = plain.model_copy(update={**kerberos, "metastore_timeout_s": 10.0})
    watcher = Watcher(settings)
    with HiveMetastore.from_settings(settings) as client:
        table = create_table(client, root, unique_name)
        table.commit_deltas(3)
        reader = start_reader(client, table)
        vacuum = table.minor_vacuum()
        assert [lock.lock_id for lock in vacuum.lock_snapshot] == [reader.lock_id]
        before = table.children()
        try:
            with running_cleaner(settings):
                publish(settings, vacuum)
                # The cleaner asked the metastore, through Kerberos, and saw the reader's lock still held.
                delays = watcher.wait_for(lambda: watcher.delays(vacuum), 30, "a delay while the reader holds its lock")
                assert delays[0].check_error is None, delays[0].check_error
                assert [lock.lock_id for lock in delays[0].locks_held] == [reader.lock_id]
                assert table.children() == before
                reader.release()
                [done] = watcher.wait_for(lambda: watcher.done(vacuum), 30, "CleanupDone once the reader is gone")
        finally:
            watcher.close()
    assert len(done.directories_removed) == 3
    assert table.children() == vacuum.new_directories


def test_readiness_completes_the_kerberos_handshake_and_names_a_refused_login(
    kerberized: KerberizedMetastore,
) -> None:
    # The port is open either way: only the handshake tells a working login from a refused one.
    assert metastore_check_for(kerberized.settings())() is None
    wrong_key = kerberized.settings(metastore_client_principal=kerberized.stranger)  # not in the keytab
    reason = metastore_check_for(wrong_key)()
    assert reason is not None
    assert reason.startswith("metastore refuses our Kerberos login: Kerberos authentication to the Hive Metastore")
    assert kerberized.stranger in reason
    assert "\n" not in reason
    plain = metastore_check_for(kerberized.settings(metastore_sasl_enabled="false"))
    assert plain() is None  # a plain probe only connects: what the Kerberos one adds is the login
