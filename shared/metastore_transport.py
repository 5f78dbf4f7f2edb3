"""The Thrift transport to the Hive Metastore: plain, or SASL with Kerberos (GSSAPI).

Plain is Hive's default (``hive.metastore.sasl.enabled=false``): a buffered socket, unchanged. A
metastore with ``hive.metastore.sasl.enabled=true`` speaks Thrift's SASL framing and accepts only
the GSSAPI mechanism: the client proves who it is with a Kerberos service ticket for the metastore's
principal (Hive's ``hive.metastore.kerberos.principal``, ``hive/_HOST@REALM`` style, where ``_HOST``
stands for the host of the URI being connected to, lower-cased, as Hadoop's
``SecurityUtil.getServerPrincipal`` does).

The client's own credentials come from a keytab (``metastore_client_keytab`` with
``metastore_client_principal``), whose tickets MIT Kerberos keeps in an in-memory cache of this
process for that principal and keytab (so no file cache of the user's is read or overwritten, and
expired tickets are fetched again from the keytab), or else from a ticket cache
(``metastore_client_ticket_cache``, else ``KRB5CCNAME`` or the default cache that ``kinit`` fills).
The realm's configuration is MIT's: ``/etc/krb5.conf`` or ``KRB5_CONFIG``. Kerberos needs the Python
``gssapi`` module (the ``kerberos`` extra), imported only when SASL is on.

The SASL mechanism is RFC 4752 over Thrift's SASL negotiation (START, OK, BAD, ERROR, COMPLETE): the
security layer the metastore offers is taken as it comes (``hadoop.rpc.protection``: authentication,
integrity or privacy), weakest first, because a stronger layer than the server asks for buys nothing.
Every failure is a :class:`~acidclean.shared.errors.MetastoreAuthenticationError` naming the key to set
and what Kerberos or the metastore said, except a KDC that does not answer, which is an outage.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import re
import socket
import struct
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any, Protocol

from thrift.transport import TSocket, TTransport

from acidclean.shared.errors import ConfigurationError, MetastoreAuthenticationError, MetastoreError
from acidclean.shared.settings import Settings

# Thrift logs "Could not connect to any of [...]" itself before raising; with no handler configured
# Python prints it on stderr above acidclean's own one line. A handler here keeps that record for
# applications that configure logging, and off the terminal of those that do not.
logging.getLogger("thrift.transport.TSocket").addHandler(logging.NullHandler())

# Thrift's SASL negotiation status bytes (TSaslTransport.NegotiationStatus).
START, OK, BAD, ERROR, COMPLETE = 1, 2, 3, 4, 5
STATUS_NAMES = {START: "START", OK: "OK", BAD: "BAD", ERROR: "ERROR", COMPLETE: "COMPLETE"}
MAX_NEGOTIATION_BYTES = 1 << 20
MAX_FRAME_BYTES = 256 << 20
# RFC 4752 security layers, as bits of the server's offer.
LAYER_NONE, LAYER_INTEGRITY, LAYER_CONFIDENTIALITY = 1, 2, 4
MAX_RECEIVE_BUFFER = 0xFFFFFF

KEYTAB_KEY = "metastore_client_keytab"
PRINCIPAL_KEY = "metastore_client_principal"
TICKET_CACHE_KEY = "metastore_client_ticket_cache"
SERVICE_PRINCIPAL_KEY = "hive.metastore.kerberos.principal"
SASL_KEY = "hive.metastore.sasl.enabled"
_GSS_MINOR = re.compile(r"Minor \(\d+\): (.+)")
_GSS_MAJOR = re.compile(r"Major \(\d+\): ")
# Kerberos' own words for a KDC that did not answer: an outage, not a refusal.
KDC_UNREACHABLE = ("Cannot contact any KDC", "Cannot find KDC", "Resource temporarily unavailable")


@dataclass(frozen=True)
class KerberosSettings:
    """Who the client is and which service principal the metastore has."""

    service_principal: str
    client_principal: str | None = None
    keytab: str | None = None
    ticket_cache: str | None = None

    def __post_init__(self) -> None:
        if not self.service_principal:
            raise ConfigurationError(
                f"{SASL_KEY}=true needs the metastore's service principal: set {SERVICE_PRINCIPAL_KEY} "
                "(ACIDCLEAN_METASTORE_KERBEROS_PRINCIPAL), e.g. hive/_HOST@EXAMPLE.COM"
            )
        if self.keytab and not self.client_principal:
            raise ConfigurationError(
                f"{KEYTAB_KEY} is set but not whose key it holds: set {PRINCIPAL_KEY} "
                "(ACIDCLEAN_METASTORE_CLIENT_PRINCIPAL), e.g. acidclean/cleaner@EXAMPLE.COM"
            )

    def identity(self) -> str:
        """Who this client says it is, for messages."""
        if self.keytab:
            return f"{self.client_principal} (keytab {self.keytab})"
        cache = f"ticket cache {self.ticket_cache}" if self.ticket_cache else "the default ticket cache"
        return f"{self.client_principal} ({cache})" if self.client_principal else f"the principal of {cache}"


def kerberos_from_settings(settings: Settings) -> KerberosSettings | None:
    """The Kerberos side of the settings, or None for plain Thrift (``hive.metastore.sasl.enabled`` off)."""
    if not settings.metastore_sasl_enabled:
        return None
    keytab = settings.metastore_client_keytab
    if keytab and not Path(keytab.removeprefix("FILE:")).is_file():
        raise ConfigurationError(
            f"{KEYTAB_KEY}={keytab}: no such file; set it (ACIDCLEAN_METASTORE_CLIENT_KEYTAB) to the keytab of "
            f"{settings.metastore_client_principal or PRINCIPAL_KEY}"
        )
    return KerberosSettings(
        service_principal=settings.metastore_kerberos_principal,
        client_principal=settings.metastore_client_principal or None,
        keytab=keytab or None,
        ticket_cache=settings.metastore_client_ticket_cache or None,
    )


def service_principal_for(pattern: str, host: str) -> str:
    """``pattern`` with ``_HOST`` replaced by ``host`` lower-cased (the local name for a wildcard host)."""
    if "_HOST" not in pattern:
        return pattern
    if host in ("", "0.0.0.0"):
        host = socket.getfqdn()
    return pattern.replace("_HOST", host.lower())


class SaslMechanism(Protocol):
    """The client side of one SASL exchange (what :class:`SaslClientTransport` drives)."""

    name: str
    complete: bool

    def initial_response(self) -> bytes: ...

    def respond(self, challenge: bytes) -> bytes: ...

    def wrap(self, data: bytes) -> bytes: ...

    def unwrap(self, data: bytes) -> bytes: ...

    def dispose(self) -> None: ...


def choose_layer(offer: bytes) -> tuple[int, int]:
    """The security layer and the server's maximum message size, from the server's 4-byte offer
    (RFC 4752 section 3.1): the weakest layer offered."""
    if len(offer) != 4:
        raise MetastoreAuthenticationError(
            f"the metastore sent a {len(offer)}-byte GSSAPI security layer offer, not 4 bytes; is it a Hive Metastore?"
        )
    offered = offer[0]
    max_size = int.from_bytes(offer[1:], "big")
    for layer in (LAYER_NONE, LAYER_INTEGRITY, LAYER_CONFIDENTIALITY):
        if offered & layer:
            return layer, max_size
    raise MetastoreAuthenticationError(
        f"the metastore offered no GSSAPI security layer this client knows ({offered:#x})"
    )


def layer_choice(layer: int, authorization_id: str = "") -> bytes:
    """The client's reply to the offer before wrapping: the layer, its own maximum, who acts."""
    receive = 0 if layer == LAYER_NONE else MAX_RECEIVE_BUFFER
    return bytes([layer]) + receive.to_bytes(3, "big") + authorization_id.encode("utf-8")


class GssapiMechanism:
    """SASL GSSAPI (RFC 4752) with the ``gssapi`` module: one Kerberos context per connection."""

    name = "GSSAPI"

    def __init__(self, settings: KerberosSettings, service_principal: str) -> None:
        self._gssapi = import_gssapi()
        self._settings = settings
        self.service_principal = service_principal
        self.complete = False
        self._layer = LAYER_NONE
        self._context: Any = None

    def _credentials(self) -> Any:
        gssapi = self._gssapi
        name = (
            gssapi.Name(self._settings.client_principal, gssapi.NameType.kerberos_principal)
            if self._settings.client_principal
            else None
        )
        store: dict[str, str] = {}
        if self._settings.keytab:
            # One memory cache per principal and keytab: reconnections reuse its tickets (a memory cache
            # lives as long as the process, so one per connection would grow with every reconnect).
            key = hashlib.sha256(f"{self._settings.client_principal}\0{self._settings.keytab}".encode()).hexdigest()
            store = {"client_keytab": self._settings.keytab, "ccache": f"MEMORY:acidclean-{key[:16]}"}
        elif self._settings.ticket_cache:
            store = {"ccache": self._settings.ticket_cache}
        if store:
            return gssapi.Credentials(name=name, usage="initiate", store=store)
        return gssapi.Credentials(name=name, usage="initiate")

    def initial_response(self) -> bytes:
        gssapi = self._gssapi
        flags = gssapi.RequirementFlag
        wanted = flags.mutual_authentication | flags.integrity | flags.confidentiality | flags.out_of_sequence_detection
        target = gssapi.Name(self.service_principal, gssapi.NameType.kerberos_principal)
        self._context = gssapi.SecurityContext(
            name=target,
            creds=self._credentials(),
            usage="initiate",
            flags=wanted,
        )
        return bytes(self._context.step() or b"")

    def respond(self, challenge: bytes) -> bytes:
        if not self._context.complete:
            return bytes(self._context.step(challenge) or b"")
        offer = self._context.unwrap(challenge).message
        self._layer, _ = choose_layer(bytes(offer))
        self.complete = True
        return bytes(self._context.wrap(layer_choice(self._layer), False).message)

    def wrap(self, data: bytes) -> bytes:
        if self._layer == LAYER_NONE:
            return data
        return bytes(self._context.wrap(data, self._layer == LAYER_CONFIDENTIALITY).message)

    def unwrap(self, data: bytes) -> bytes:
        if self._layer == LAYER_NONE:
            return data
        return bytes(self._context.unwrap(data).message)

    def dispose(self) -> None:
        self._context = None


def import_gssapi() -> Any:
    """The ``gssapi`` module, or a configuration error saying how to install it."""
    try:
        return importlib.import_module("gssapi")
    except ImportError as error:
        raise ConfigurationError(
            f"{SASL_KEY}=true needs the Python gssapi module: pip install 'acidclean[kerberos]' "
            "(it builds against MIT Kerberos: apt-get install libkrb5-dev)"
        ) from error


class SaslClientTransport(TTransport.TTransportBase, TTransport.CReadableTransport):  # type: ignore[misc]
    """Thrift's SASL client transport: the negotiation, then each flush as one length-prefixed frame
    (wrapped when the negotiated layer protects messages)."""

    def __init__(self, transport: Any, mechanism: SaslMechanism) -> None:
        self.transport = transport
        self.mechanism = mechanism
        self._write_buffer = BytesIO()
        self._read_buffer = BytesIO(b"")

    def open(self) -> None:
        if not self.transport.isOpen():
            self.transport.open()
        self._send(START, self.mechanism.name.encode("ascii"))
        self._send(OK, self.mechanism.initial_response())
        while True:
            status, payload = self._receive()
            if status == OK:
                self._send(OK, self.mechanism.respond(payload))
            elif status == COMPLETE:
                if not self.mechanism.complete:
                    if payload:
                        self.mechanism.respond(payload)
                    if not self.mechanism.complete:
                        raise MetastoreAuthenticationError(
                            "the metastore ended the SASL negotiation before Kerberos authentication was complete"
                        )
                return
            elif status in (BAD, ERROR):
                raise MetastoreAuthenticationError(
                    f"the metastore refused the Kerberos authentication ({STATUS_NAMES[status]}): "
                    + (payload.decode("utf-8", "replace").strip() or "no reason given")
                )
            else:
                raise MetastoreAuthenticationError(f"the metastore sent SASL status {status}; is it a Hive Metastore?")

    def _send(self, status: int, payload: bytes) -> None:
        self.transport.write(struct.pack(">BI", status, len(payload)) + payload)
        self.transport.flush()

    def _receive(self) -> tuple[int, bytes]:
        status, length = struct.unpack(">BI", self.transport.readAll(5))
        if length > MAX_NEGOTIATION_BYTES:
            raise MetastoreAuthenticationError(
                f"the metastore sent a {length}-byte SASL message ({status=}); is it a Hive Metastore?"
            )
        return status, self.transport.readAll(length) if length else b""

    def isOpen(self) -> bool:
        return bool(self.transport.isOpen())

    def write(self, data: bytes) -> None:
        self._write_buffer.write(data)

    def flush(self) -> None:
        frame = self.mechanism.wrap(self._write_buffer.getvalue())
        self._write_buffer = BytesIO()
        self.transport.write(struct.pack(">I", len(frame)) + frame)
        self.transport.flush()

    def read(self, size: int) -> bytes:
        data = self._read_buffer.read(size)
        if data:
            return bytes(data)
        self._read_frame()
        return bytes(self._read_buffer.read(size))

    def _read_frame(self) -> None:
        (length,) = struct.unpack(">I", self.transport.readAll(4))
        if length > MAX_FRAME_BYTES:
            raise TTransport.TTransportException(
                TTransport.TTransportException.SIZE_LIMIT, f"metastore frame of {length} bytes"
            )
        self._read_buffer = BytesIO(self.mechanism.unwrap(self.transport.readAll(length)))

    def close(self) -> None:
        self.mechanism.dispose()
        self.transport.close()

    # CReadableTransport, for the accelerated binary protocol.
    @property
    def cstringio_buf(self) -> BytesIO:
        return self._read_buffer

    def cstringio_refill(self, partial: bytes, required: int) -> BytesIO:
        buffered = partial
        while len(buffered) < required:
            self._read_frame()
            buffered += self._read_buffer.getvalue()
        self._read_buffer = BytesIO(buffered)
        return self._read_buffer


def kerberos_error_line(settings: KerberosSettings, service_principal: str, uri: str, error: BaseException) -> str:
    """One line for a failed Kerberos authentication: the server, who we are, what was said, what to set."""
    said = gss_message(error)
    advice = next(
        (text for pattern, text in _ADVICE if re.search(pattern, said, re.IGNORECASE)),
        f"check {PRINCIPAL_KEY}, {KEYTAB_KEY} and {SERVICE_PRINCIPAL_KEY}",
    ).format(service=service_principal)
    return (
        f"Kerberos authentication to the Hive Metastore at {uri} as {settings.identity()} for "
        f"{service_principal} failed: {said}; {advice}"
    )


# What to do, by what Kerberos or the metastore said; the first match wins.
_ADVICE = (
    (
        r"server \S* ?not found",
        f"the KDC has no principal {{service}}: set {SERVICE_PRINCIPAL_KEY} (ACIDCLEAN_METASTORE_KERBEROS_PRINCIPAL) "
        "to the metastore's service principal",
    ),
    (
        r"client \S* ?not found",
        f"the KDC does not know this client: check {PRINCIPAL_KEY} (ACIDCLEAN_METASTORE_CLIENT_PRINCIPAL)",
    ),
    (
        r"no kerberos credentials|no credentials|credentials cache|key ?tab|key table",
        f"set {KEYTAB_KEY} and {PRINCIPAL_KEY} (ACIDCLEAN_METASTORE_CLIENT_KEYTAB, "
        f"ACIDCLEAN_METASTORE_CLIENT_PRINCIPAL), or {TICKET_CACHE_KEY} to a cache kinit filled",
    ),
    (
        r"preauthentication failed|password incorrect",
        f"the key in {KEYTAB_KEY} is not the KDC's current key for {PRINCIPAL_KEY}: export the keytab again",
    ),
    (
        r"refused the kerberos|checksum|decrypt|wrong|mismatch",
        f"check that {SERVICE_PRINCIPAL_KEY} (ACIDCLEAN_METASTORE_KERBEROS_PRINCIPAL) names the principal the "
        "metastore runs as (its own hive.metastore.kerberos.principal) and that its keytab is current",
    ),
)


def gss_message(error: BaseException) -> str:
    """A GSSAPI error's text on one line: Kerberos' own words (the minor status) where there are any,
    since the GSSAPI major status only says in general terms that something failed."""
    generator = getattr(error, "gen_message", None)
    text = " ".join((str(generator()) if callable(generator) else str(error)).split())
    minor = _GSS_MINOR.search(text)
    return minor[1].strip() if minor else _GSS_MAJOR.sub("", text).strip()


def open_transport(host: str, port: int, timeout_s: float, kerberos: KerberosSettings | None) -> Any:
    """An open Thrift transport to ``host:port``: plain without ``kerberos``, else SASL/GSSAPI.

    Raises Thrift's own exception when the socket does not connect (the caller reports an outage),
    and :class:`MetastoreAuthenticationError` when Kerberos or the metastore refuse us."""
    sock = TSocket.TSocket(host, port)
    sock.setTimeout(int(timeout_s * 1000))
    if kerberos is None:
        plain = TTransport.TBufferedTransport(sock)
        plain.open()
        return plain
    gssapi = import_gssapi()
    service_principal = service_principal_for(kerberos.service_principal, host)
    uri = f"thrift://{host}:{port}"
    transport = SaslClientTransport(sock, GssapiMechanism(kerberos, service_principal))
    sock.open()
    try:
        transport.open()
    except gssapi.exceptions.GSSError as error:
        sock.close()
        said = gss_message(error)
        if any(marker in said for marker in KDC_UNREACHABLE):
            config = os.environ.get("KRB5_CONFIG", "/etc/krb5.conf")
            raise MetastoreError(
                f"cannot reach the Hive Metastore at {uri}: no Kerberos KDC answered for {kerberos.identity()} "
                f"({said}); check that the KDC runs and the kdc entries of its realm in {config} (KRB5_CONFIG)"
            ) from error
        raise MetastoreAuthenticationError(kerberos_error_line(kerberos, service_principal, uri, error)) from error
    except MetastoreAuthenticationError as error:
        sock.close()
        raise MetastoreAuthenticationError(kerberos_error_line(kerberos, service_principal, uri, error)) from error
    except (TTransport.TTransportException, OSError, EOFError) as error:
        sock.close()
        raise MetastoreAuthenticationError(
            f"the Hive Metastore at {uri} closed the connection during the Kerberos (SASL) handshake ({error}); "
            f"if it does not require Kerberos, set {SASL_KEY}=false (ACIDCLEAN_METASTORE_SASL_ENABLED)"
        ) from error
    return transport
