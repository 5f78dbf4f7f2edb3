"""``acidclean stack up | down | status``: the local Kafka broker and Hive Metastore."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

from acidclean.cli.context import stack_exports
from acidclean.deploy.local.jars import cache_dir, hive3_home, kafka_libs
from acidclean.deploy.local.stack import StackInfo, read_state, service_status, stack_down, stack_up

DEFAULT_STATE_DIR = Path(os.environ.get("ACIDCLEAN_STATE_DIR", ".stack"))
state_dir_option = click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Where the stack keeps its data, logs and stack.json (env ACIDCLEAN_STATE_DIR).",
)


@click.group()
def stack() -> None:
    """Run the local stack: a real Kafka broker and a real Hive Metastore on 127.0.0.1."""


@stack.command()
@state_dir_option
@click.option(
    "--metastore",
    "flavour",
    type=click.Choice(["hive2", "hive3"]),
    default=os.environ.get("ACIDCLEAN_TEST_METASTORE"),
    help="hive2: Hive 2.3.10 from the pyspark wheel; hive3: Hive 3.1.3 from Maven Central. "
    "[default: hive3 with --storage s3, else hive2]",
)
@click.option("--kafka-port", type=int, default=None, help="Broker port (default: a free port).")
@click.option("--metastore-port", type=int, default=None, help="Metastore port (default: a free port).")
@click.option(
    "--storage",
    type=click.Choice(["local", "hdfs", "s3"]),
    default="local",
    show_default=True,
    help="Where the warehouse lives: the local disk, a real HDFS (NameNode and DataNode in one local JVM) or "
    "a real S3 API server on 127.0.0.1 (needs --metastore hive3).",
)
def up(state_dir: Path, flavour: str | None, kafka_port: int | None, metastore_port: int | None, storage: str) -> None:
    """Start the stack (or report the one already running)."""
    flavour = flavour or ("hive3" if storage == "s3" else "hive2")
    info, started = stack_up(state_dir, flavour, kafka_port, metastore_port, storage)
    verb = "started" if started else "already running"
    click.echo(f"stack {verb} in {info.state_dir}")
    click.echo(
        f"  kafka      {info.kafka_bootstrap:<28} pid {info.kafka.pid:<8} ready in {info.kafka.seconds_to_ready:.1f} s"
    )
    click.echo(
        f"  metastore  {info.metastore_uri:<28} pid {info.metastore.pid:<8} ready in "
        f"{info.metastore.seconds_to_ready:.1f} s ({info.metastore_flavour})"
    )
    if info.storage_service is not None:
        click.echo(
            f"  {info.storage:<10} {info.storage_service.address:<28} pid {info.storage_service.pid:<8} ready in "
            f"{info.storage_service.seconds_to_ready:.1f} s"
        )
    click.echo(f"  warehouse  {info.warehouse}")
    here = Path.cwd() / ".stack"
    if Path(info.state_dir) == here.resolve():
        click.echo("acidclean commands run from this directory use it; for another shell: acidclean stack env")
    else:
        click.echo(
            f"acidclean commands use it with ACIDCLEAN_STATE_DIR={shlex.quote(info.state_dir)}; "
            f"or: eval \"$(acidclean stack env --state-dir {shlex.quote(info.state_dir)})\""
        )


def export_lines(info: StackInfo) -> list[str]:
    """The ``export`` lines that point acidclean at a stack from any shell."""
    return [f"export {name}={shlex.quote(value)}" for name, value in stack_exports(info).items()]


@stack.command()
@state_dir_option
def env(state_dir: Path) -> None:
    """Print the export lines that point another shell at the stack: eval "$(acidclean stack env)"."""
    info = read_state(state_dir.resolve())
    if info is None:
        raise click.ClickException(f"no stack in {state_dir.resolve()}: run `acidclean stack up` first")
    for line in export_lines(info):
        click.echo(line)


@stack.command()
@state_dir_option
def status(state_dir: Path) -> None:
    """Say what runs where."""
    info = read_state(state_dir.resolve())
    if info is None:
        click.echo(f"no stack in {state_dir.resolve()}")
        raise SystemExit(3)
    click.echo(f"stack in {info.state_dir} ({info.metastore_flavour} metastore)")
    labels = ("kafka", "metastore", info.storage)
    for label, service in zip(labels, info.services, strict=False):
        click.echo(
            f"  {label:<10} {service.address:<28} pid {service.pid:<8} {service_status(service)}"
            f"   log {service.log_file}"
        )


@stack.command()
@state_dir_option
def down(state_dir: Path) -> None:
    """Stop the services by their process ids and remove the stack's state."""
    stopped = stack_down(state_dir)
    click.echo("stopped " + ", ".join(stopped) if stopped else "nothing was running")


@stack.command()
@click.option("--hive3/--no-hive3", default=True, show_default=True, help="Also fetch Hive Metastore 3.1.3.")
def fetch(hive3: bool) -> None:
    """Download the stack's jars from Maven Central into the cache (once; later runs reuse it)."""
    log_dir = cache_dir() / "logs"
    click.echo(f"kafka jars      {kafka_libs(log_dir)}")
    if hive3:
        click.echo(f"hive 3.1.3      {hive3_home(log_dir)}")
