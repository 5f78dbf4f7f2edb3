"""A real MIT Kerberos KDC on 127.0.0.1, for the tests of Kerberos to the metastore.

Debian's ``krb5-kdc`` (``krb5kdc``, ``kdb5_util``) and ``krb5-admin-server`` (``kadmin.local``) run as
plain processes: a realm of its own, its database, stash, configuration and keytabs under one
directory, and the KDC listening on one free port (UDP and TCP) of 127.0.0.1. Nothing is read from or
written to ``/etc``: every tool gets ``KRB5_CONFIG`` and ``KRB5_KDC_PROFILE`` pointing into that
directory, and a client (Python's GSSAPI or a JVM with ``-Djava.security.krb5.conf``) uses the
``krb5.conf`` written there.

``make test`` installs the Debian packages where they are missing (see the Makefile); without them
:func:`kdc_tools_missing` says which binary is absent, and the Kerberos tests skip with that reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from acidclean.deploy.local.process import (
    StartedProcess,
    free_port,
    port_accepts,
    run_to_completion,
    start_service,
    stop_process,
)
from acidclean.shared.errors import StackError

# Where Debian puts the KDC's binaries, which a non-root PATH often lacks.
SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")
TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local")
DEBIAN_PACKAGES = "krb5-kdc krb5-admin-server krb5-user libkrb5-dev"
# What both Java 17 and MIT accept by default (Java 17 refuses DES and RC4).
ENCTYPES = "aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96"


def find_tool(name: str) -> str | None:
    """The path of a Kerberos tool on the PATH or in the sbin directories, or None."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *SBIN_DIRS])
    return shutil.which(name, path=search)


def kdc_tools_missing() -> str | None:
    """None when a KDC can be started here, else which tools are missing and how to install them."""
    missing = [name for name in TOOLS if find_tool(name) is None]
    if not missing:
        return None
    return f"no {', '.join(missing)}: install MIT Kerberos (apt-get install -y {DEBIAN_PACKAGES}, or make test as root)"


def krb5_conf(realm: str, port: int) -> str:
    """A client configuration that knows only this realm, reaches its KDC over TCP and asks no DNS."""
    return f"""[libdefaults]
    default_realm = {realm}
    dns_lookup_kdc = false
    dns_lookup_realm = false
    dns_canonicalize_hostname = false
    rdns = false
    udp_preference_limit = 1
    ticket_lifetime = 1h
    forwardable = true
    default_tkt_enctypes = {ENCTYPES}
    default_tgs_enctypes = {ENCTYPES}
    permitted_enctypes = {ENCTYPES}

[realms]
    {realm} = {{
        kdc = 127.0.0.1:{port}
    }}
"""


def kdc_conf(realm: str, port: int, state_dir: Path) -> str:
    return f"""[kdcdefaults]
    kdc_listen = 127.0.0.1:{port}
    kdc_tcp_listen = 127.0.0.1:{port}

[realms]
    {realm} = {{
        database_name = {state_dir / "principal"}
        key_stash_file = {state_dir / "stash"}
        acl_file = {state_dir / "kadm5.acl"}
        max_life = 1h
        max_renewable_life = 1d
        supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
    }}

[logging]
    kdc = FILE:{state_dir / "logs" / "kdc.log"}
    admin_server = FILE:{state_dir / "logs" / "kadmin.log"}
    default = FILE:{state_dir / "logs" / "krb5lib.log"}
"""


@dataclass(frozen=True)
class Kdc:
    """A running KDC: its realm, port, client configuration and process."""

    realm: str
    port: int
    state_dir: Path
    krb5_conf: Path
    process: StartedProcess

    def environment(self) -> dict[str, str]:
        """What a process needs to use this realm (MIT's library reads it at every context it makes)."""
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.state_dir / "kdc.conf")}

    def _kadmin(self, query: str) -> None:
        tool = find_tool("kadmin.local")
        assert tool is not None  # checked when the KDC started
        run_to_completion(
            f"kadmin.local {query.split()[0]}",
            [tool, "-r", self.realm, "-q", query],
            self.state_dir / "logs" / "kadmin-local.log",
            timeout_s=30,
            env={**os.environ, **self.environment()},
        )

    def add_principal(self, principal: str, keytab: Path | None = None) -> str:
        """Create ``principal`` (``name`` or ``name/host``, in this realm) with a random key; with
        ``keytab``, export its key there. Returns the full principal name."""
        full = principal if "@" in principal else f"{principal}@{self.realm}"
        self._kadmin(f"addprinc -randkey {full}")
        if keytab is not None:
            keytab.parent.mkdir(parents=True, exist_ok=True)
            self._kadmin(f"ktadd -k {keytab} -norandkey {full}")
        return full

    def stop(self) -> None:
        stop_process(self.process.pid, self.process.name, start_time=self.process.start_time)


def _udp_port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_kdc(state_dir: Path, realm: str = "ACIDCLEAN.TEST", timeout_s: float = 30) -> Kdc:
    """Create a realm under ``state_dir`` and start its KDC; stop it with :meth:`Kdc.stop`."""
    missing = kdc_tools_missing()
    if missing:
        raise StackError(f"cannot start a Kerberos KDC: {missing}")
    state_dir = state_dir.resolve()
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    port = free_port()
    while not _udp_port_free(port):
        port = free_port()
    (state_dir / "krb5.conf").write_text(krb5_conf(realm, port), encoding="utf-8")
    (state_dir / "kdc.conf").write_text(kdc_conf(realm, port, state_dir), encoding="utf-8")
    (state_dir / "kadm5.acl").write_text("", encoding="utf-8")
    env = {**os.environ, "KRB5_CONFIG": str(state_dir / "krb5.conf"), "KRB5_KDC_PROFILE": str(state_dir / "kdc.conf")}
    # The master password protects a database that lives as long as this directory; it is no secret.
    run_to_completion(
        "kdb5_util create",
        [str(find_tool("kdb5_util")), "create", "-s", "-r", realm, "-P", "acidclean-test-master"],
        state_dir / "logs" / "kdb5_util.log",
        timeout_s=30,
        env=env,
    )
    pid_file = state_dir / "krb5kdc.pid"
    process = start_service(
        f"Kerberos KDC ({realm})",
        [str(find_tool("krb5kdc")), "-n", "-r", realm, "-P", str(pid_file)],
        state_dir / "logs" / "krb5kdc.out",
        ready=lambda: port_accepts(port),
        timeout_s=timeout_s,
        env=env,
    )
    return Kdc(realm, port, state_dir, state_dir / "krb5.conf", process)


def kinit(kdc: Kdc, principal: str, keytab: Path, cache: Path) -> None:
    """Put a ticket for ``principal`` from ``keytab`` into the ticket cache file ``cache``."""
    tool = find_tool("kinit")
    if tool is None:
        raise StackError(f"no kinit: install MIT Kerberos (apt-get install -y {DEBIAN_PACKAGES})")
    completed = subprocess.run(
        [tool, "-k", "-t", str(keytab), "-c", f"FILE:{cache}", principal],
        env={**os.environ, **kdc.environment()},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if completed.returncode != 0:
        raise StackError(f"kinit {principal} failed: {completed.stderr.strip()}")
