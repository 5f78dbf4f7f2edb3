"""The pure parts of the metastore's Kerberos transport: settings, the _HOST rule, the SASL framing,
the security layer choice and the error lines. The real KDC and metastore are in
tests/integration/test_metastore_kerberos.py."""

from __future__ import annotations

import struct
from io import BytesIO
from pathlib import Path

import pytest

from acidclean.shared.errors import ConfigurationError, MetastoreAuthenticationError, MetastoreError
from acidclean.shared.metastore_transport import (
    BAD,
    COMPLETE,
    ERROR,
    LAYER_CONFIDENTIALITY,
    LAYER_INTEGRITY,
    LAYER_NONE,
    OK,
    START,
    KerberosSettings,
    SaslClientTransport,
    choose_layer,
    gss_message,
    kerberos_error_line,
    kerberos_from_settings,
    layer_choice,
    service_principal_for,
)
from acidclean.shared.settings import load_settings


def frame(status: int, payload: bytes = b"") -> bytes:
    return struct.pack(">BI", status, len(payload)) + payload


class Wire:
    """A socket's two directions in memory: what the server will send, what the client sent."""

    def __init__(self, incoming: bytes) -> None:
        self.incoming = BytesIO(incoming)
        self.sent = bytearray()
        self.open_ = True

    def isOpen(self) -> bool:
        return self.open_

    def open(self) -> None:
        self.open_ = True

    def write(self, data: bytes) -> None:
        self.sent += data

    def flush(self) -> None:
        pass

    def readAll(self, size: int) -> bytes:
        data = self.incoming.read(size)
        if len(data) < size:
            raise EOFError("the server closed the connection")
        return data

    def close(self) -> None:
        self.open_ = False


class Mechanism:
    """Two rounds, then complete; wraps by adding a marker so the framing of wrapped data shows."""

    name = "GSSAPI"

    def __init__(self, wraps: bool = False) -> None:
        self.complete = False
        self.challenges: list[bytes] = []
        self.wraps = wraps
        self.disposed = False

    def initial_response(self) -> bytes:
        return b"token-1"

    def respond(self, challenge: bytes) -> bytes:
        self.challenges.append(challenge)
        if len(self.challenges) == 2:
            self.complete = True
            return b"layer-choice"
        return b"token-2"

    def wrap(self, data: bytes) -> bytes:
        return b"W" + data if self.wraps else data

    def unwrap(self, data: bytes) -> bytes:
        return data[1:] if self.wraps else data

    def dispose(self) -> None:
        self.disposed = True


def test_host_in_the_service_principal_is_the_uri_host_lower_cased() -> None:
    assert service_principal_for("hive/_HOST@EXAMPLE.COM", "Metastore-1.Example.COM") == (
        "hive/metastore-1.example.com@EXAMPLE.COM"
    )
    assert service_principal_for("hive/hms.example.com@EXAMPLE.COM", "10.0.0.1") == "hive/hms.example.com@EXAMPLE.COM"


def test_a_wildcard_host_means_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("socket.getfqdn", lambda: "Here.Example.Com")
    assert service_principal_for("hive/_HOST@R", "0.0.0.0") == "hive/here.example.com@R"


def test_the_negotiation_sends_start_and_each_response_as_thrift_sasl_frames() -> None:
    wire = Wire(frame(OK, b"challenge-1") + frame(OK, b"offer") + frame(COMPLETE))
    mechanism = Mechanism()
    SaslClientTransport(wire, mechanism).open()
    assert bytes(wire.sent) == (
        frame(START, b"GSSAPI") + frame(OK, b"token-1") + frame(OK, b"token-2") + frame(OK, b"layer-choice")
    )
    assert mechanism.challenges == [b"challenge-1", b"offer"]


@pytest.mark.parametrize("status", [BAD, ERROR])
def test_a_refusal_of_the_server_is_an_authentication_error_with_its_words(status: int) -> None:
    wire = Wire(frame(status, b"GSS initiate failed"))
    with pytest.raises(MetastoreAuthenticationError, match=r"refused the Kerberos authentication .*GSS initiate"):
        SaslClientTransport(wire, Mechanism()).open()


def test_complete_before_the_mechanism_is_done_is_refused() -> None:
    wire = Wire(frame(COMPLETE))
    with pytest.raises(MetastoreAuthenticationError, match="before Kerberos authentication was complete"):
        SaslClientTransport(wire, Mechanism()).open()


def test_an_oversized_negotiation_message_is_not_read() -> None:
    wire = Wire(struct.pack(">BI", OK, 1 << 30))
    with pytest.raises(MetastoreAuthenticationError, match="is it a Hive Metastore"):
        SaslClientTransport(wire, Mechanism()).open()


@pytest.mark.parametrize("wraps", [False, True])
def test_messages_after_the_negotiation_are_length_prefixed_frames(wraps: bool) -> None:
    reply = b"W" + b"thrift reply" if wraps else b"thrift reply"
    wire = Wire(frame(OK, b"c") + frame(OK, b"o") + frame(COMPLETE) + struct.pack(">I", len(reply)) + reply)
    transport = SaslClientTransport(wire, Mechanism(wraps))
    transport.open()
    negotiated = len(wire.sent)
    transport.write(b"thrift ")
    transport.write(b"call")
    transport.flush()
    sent = (b"W" if wraps else b"") + b"thrift call"
    assert bytes(wire.sent[negotiated:]) == struct.pack(">I", len(sent)) + sent
    assert transport.read(6) + transport.read(100) == b"thrift reply"
    transport.close()
    assert not wire.isOpen()


def test_the_weakest_offered_security_layer_is_chosen() -> None:
    assert choose_layer(bytes([LAYER_NONE | LAYER_INTEGRITY | LAYER_CONFIDENTIALITY, 0, 0x10, 0])) == (LAYER_NONE, 4096)
    assert choose_layer(bytes([LAYER_INTEGRITY | LAYER_CONFIDENTIALITY, 0, 0, 1]))[0] == LAYER_INTEGRITY
    assert choose_layer(bytes([LAYER_CONFIDENTIALITY, 0, 0, 1]))[0] == LAYER_CONFIDENTIALITY
    with pytest.raises(MetastoreAuthenticationError, match="no GSSAPI security layer"):
        choose_layer(bytes([0x80, 0, 0, 0]))
    with pytest.raises(MetastoreAuthenticationError, match="3-byte"):
        choose_layer(b"\x01\x00\x00")


def test_the_layer_choice_names_the_layer_and_a_buffer_only_when_messages_are_protected() -> None:
    assert layer_choice(LAYER_NONE) == b"\x01\x00\x00\x00"
    assert layer_choice(LAYER_CONFIDENTIALITY, "cleaner") == b"\x04\xff\xff\xffcleaner"


def test_sasl_off_is_plain_thrift_and_kerberos_settings_come_from_hive_names(tmp_path: Path) -> None:
    assert kerberos_from_settings(load_settings(environ={})) is None
    keytab = tmp_path / "cleaner.keytab"
    keytab.write_bytes(b"\x05\x02")
    config = tmp_path / "acidclean.properties"
    config.write_text(
        "hive.metastore.sasl.enabled=true\n"
        "hive.metastore.kerberos.principal=hive/_HOST@EXAMPLE.COM\n"
        "metastore_client_principal=acidclean/cleaner@EXAMPLE.COM\n"
        f"metastore_client_keytab={keytab}\n"
    )
    assert kerberos_from_settings(load_settings(config_file=config, environ={})) == KerberosSettings(
        "hive/_HOST@EXAMPLE.COM", "acidclean/cleaner@EXAMPLE.COM", str(keytab)
    )
    from_environment = load_settings(
        environ={
            "ACIDCLEAN_METASTORE_SASL_ENABLED": "true",
            "ACIDCLEAN_METASTORE_KERBEROS_PRINCIPAL": "hive/_HOST@EXAMPLE.COM",
            "ACIDCLEAN_METASTORE_CLIENT_TICKET_CACHE": "FILE:/tmp/krb5cc_1000",
        }
    )
    assert kerberos_from_settings(from_environment) == KerberosSettings(
        "hive/_HOST@EXAMPLE.COM", ticket_cache="FILE:/tmp/krb5cc_1000"
    )


def test_missing_kerberos_settings_name_the_key_to_set(tmp_path: Path) -> None:
    no_principal = load_settings(environ={"ACIDCLEAN_METASTORE_SASL_ENABLED": "true"})
    principal_key = r"set hive.metastore.kerberos.principal \(ACIDCLEAN_METASTORE_KERBEROS_PRINCIPAL\)"
    with pytest.raises(ConfigurationError, match=principal_key):
        kerberos_from_settings(no_principal)
    keytab = tmp_path / "k.keytab"
    keytab.write_bytes(b"")
    client_key = r"set metastore_client_principal \(ACIDCLEAN_METASTORE_CLIENT_PRINCIPAL\)"
    with pytest.raises(ConfigurationError, match=client_key):
        KerberosSettings("hive/_HOST@R", keytab=str(keytab))
    missing = load_settings(
        environ={
            "ACIDCLEAN_METASTORE_SASL_ENABLED": "true",
            "ACIDCLEAN_METASTORE_KERBEROS_PRINCIPAL": "hive/_HOST@R",
            "ACIDCLEAN_METASTORE_CLIENT_PRINCIPAL": "me@R",
            "ACIDCLEAN_METASTORE_CLIENT_KEYTAB": str(tmp_path / "gone.keytab"),
        }
    )
    with pytest.raises(ConfigurationError, match=r"metastore_client_keytab=.*gone.keytab: no such file"):
        kerberos_from_settings(missing)


class FakeGssError(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def gen_message(self) -> str:
        return self.text


def test_a_gss_error_is_told_in_kerberos_own_words() -> None:
    error = FakeGssError(
        "Major (851968): Unspecified GSS failure.  Minor code may provide more information, "
        "Minor (2529638919): Server hive/x@R not found in Kerberos database"
    )
    assert gss_message(error) == "Server hive/x@R not found in Kerberos database"
    assert gss_message(FakeGssError("Major (65536): An unsupported mechanism was requested")) == (
        "An unsupported mechanism was requested"
    )


@pytest.mark.parametrize(
    ("said", "advice"),
    [
        ("Server hive/x@R not found in Kerberos database", "set hive.metastore.kerberos.principal"),
        ("Client 'me@R' not found in Kerberos database", "check metastore_client_principal"),
        ("No Kerberos credentials available (default cache: FILE:/tmp/krb5cc_0)", "set metastore_client_keytab and"),
        ("No key table entry found for me@R", "set metastore_client_keytab and"),
        ("Preauthentication failed", "export the keytab again"),
        ("the metastore refused the Kerberos authentication (BAD): GSS initiate failed", "names the principal"),
        ("something else entirely", "check metastore_client_principal, metastore_client_keytab and"),
    ],
)
def test_each_kerberos_failure_says_which_key_to_set(said: str, advice: str) -> None:
    settings = KerberosSettings("hive/_HOST@R", "me@R", "/etc/me.keytab")
    line = kerberos_error_line(settings, "hive/h@R", "thrift://h:9083", FakeGssError(said))
    assert line.startswith(
        f"Kerberos authentication to the Hive Metastore at thrift://h:9083 as me@R (keytab /etc/me.keytab) for "
        f"hive/h@R failed: {said}; "
    )
    assert advice in line
    assert "\n" not in line


def test_a_refused_authentication_exits_as_bad_settings_and_fails_closed_as_a_metastore_error() -> None:
    # The CLI maps ConfigurationError to exit 2; the cleaner waits (deletes nothing) on any MetastoreError.
    assert issubclass(MetastoreAuthenticationError, ConfigurationError)
    assert issubclass(MetastoreAuthenticationError, MetastoreError)


def test_every_command_builds_its_metastore_client_from_the_settings() -> None:
    # One place decides plain or Kerberos: a client built from the URIs alone would speak plain Thrift
    # to a metastore that requires Kerberos. (deploy/local builds clients of the local stack it starts.)
    # Every real folder of the package, by resolved path: acidclean/ links to the others, so whether a walk
    # follows those links decides neither what is read nor what is excused.
    import re

    root = Path(__file__).resolve().parents[2]
    local_stack = root / "deploy" / "local"
    scanned = sorted(
        {
            path.resolve()
            for folder in ("acidclean", "producers", "consumers", "shared", "schemas", "deploy")
            for path in (root / folder).rglob("*.py")
        }
        - set(local_stack.rglob("*.py"))
    )
    assert {root / "acidclean" / "cli" / "context.py", root / "deploy" / "__init__.py"} <= set(scanned)
    built_elsewhere = [
        f"{path.relative_to(root)}:{number}"
        for path in scanned
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"(?<!class )\bHiveMetastore\(", line)  # a call, not the class statement
    ]
    assert built_elsewhere == [], "use HiveMetastore.from_settings(settings) at " + ", ".join(built_elsewhere)
