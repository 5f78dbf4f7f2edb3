"""The settings of a command, with the local stack it runs in as their lowest layer.

After ``acidclean stack up``, every command run from the same directory (or with
``ACIDCLEAN_STATE_DIR`` naming the stack's folder) finds ``stack.json`` there and uses that stack's
Kafka broker, metastore and storage, and the cleaner may delete under the stack's warehouse (the
default tenant's allowed root, there and only there). A config file, ``ACIDCLEAN_*`` variables and
flags always win over the stack. The command says on standard error, once, which stack it uses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from acidclean.deploy.local.process import pid_alive
from acidclean.deploy.local.stack import DamagedStateError, StackInfo, read_state
from acidclean.shared.settings import Settings, load_settings

DEFAULT_TENANT = "default"


def stack_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where a command looks for the local stack: ``$ACIDCLEAN_STATE_DIR``, else ``./.stack``."""
    source = os.environ if environ is None else environ
    return Path(source.get("ACIDCLEAN_STATE_DIR") or ".stack").resolve()


def running_stack(state_dir: Path) -> StackInfo | None:
    """The stack recorded in ``state_dir`` if its services' processes are alive, else None (with a
    note when a damaged ``stack.json`` is ignored: a command does not need the stack to run)."""
    try:
        info = read_state(state_dir)
    except DamagedStateError as error:
        click.echo(f"note: not using the local stack: {error}", err=True)
        return None
    if info is None:
        return None
    if not all(pid_alive(service.pid, service.start_time) for service in info.services):
        click.echo(
            f"note: the local stack in {state_dir} is not running (run `acidclean stack up`, or "
            "`acidclean stack down` to forget it); not using it",
            err=True,
        )
        return None
    return info


def stack_defaults(info: StackInfo) -> dict[str, Any]:
    """The settings a stack provides: its broker, metastore, state folder and warehouse root."""
    return {
        "metastore_uris": info.metastore_uri,
        "kafka": {"bootstrap.servers": info.kafka_bootstrap},
        "state_dir": info.state_dir,
        "allowed_roots": {DEFAULT_TENANT: [info.warehouse]},
    }


def command_settings(config_file: Path | None, overrides: Mapping[str, Any] | None = None) -> Settings:
    """The settings of a command: the local stack it runs in (if any), then the config file, the
    environment and ``overrides`` (its flags)."""
    state_dir = stack_state_dir()
    info = running_stack(state_dir)
    if info is None:
        return load_settings(config_file, overrides=overrides)
    for name, value in info.environment.items():  # the storage's endpoint, for this process and its children
        os.environ.setdefault(name, value)
    click.echo(
        f"using the local stack in {state_dir} (kafka {info.kafka_bootstrap}, metastore {info.metastore_uri}, "
        f"warehouse {info.warehouse})",
        err=True,
    )
    return load_settings(
        config_file,
        overrides=overrides,
        defaults=stack_defaults(info),
        defaults_source=f"the local stack in {state_dir}",
    )


def stack_exports(info: StackInfo) -> dict[str, str]:
    """What another shell needs to use the stack: its broker, metastore, state folder, allowed root
    and storage environment, as ``ACIDCLEAN_*`` variables."""
    import json

    return {
        "ACIDCLEAN_KAFKA_BOOTSTRAP": info.kafka_bootstrap,
        "ACIDCLEAN_METASTORE_URIS": info.metastore_uri,
        "ACIDCLEAN_STATE_DIR": info.state_dir,
        "ACIDCLEAN_ALLOWED_ROOTS": json.dumps({DEFAULT_TENANT: [info.warehouse]}),
        **info.environment,
    }
