"""``acidclean stack up | down | status | env | fetch``: the local Kafka broker and Hive Metastore.

``status`` exits 0 when every service runs and answers, 1 when there is no stack, a service is
stopped or not answering, or ``stack.json`` is damaged (the line says which).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

from acidclean.cli import EXIT_FAILED, examples
from acidclean.cli.context import stack_exports
from acidclean.deploy.local.jars import cache_dir, hive3_home, hive4_home, kafka_libs
from acidclean.deploy.local.metastore import FLAVOURS
from acidclean.deploy.local.stack import StackInfo, read_state, service_status, stack_up, stop_stack

DEFAULT_STATE_DIR = Path(".stack")
state_dir_option = click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="ACIDCLEAN_STATE_DIR",  # read when the command runs, not when this module is imported
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="Where the stack keeps its data, logs and stack.json (env ACIDCLEAN_STATE_DIR).",
)


PORT = click.IntRange(min=1, max=65535)


@click.group(
    epilog=examples("acidclean stack up", "acidclean stack status", "acidclean stack down"),
)
def stack() -> None:
    """Run the local stack: Kafka and a Hive Metastore.

    A real Kafka broker and a real Hive Metastore (and with --storage, HDFS or an S3 server) as local
    processes on 127.0.0.1.
    """


@stack.command(
    epilog=examples(
        "acidclean stack up",
        "acidclean stack up --metastore hive3 --state-dir .stack-hive3",
        "acidclean stack up --storage s3 --state-dir .stack-s3",
    )
)
@state_dir_option
@click.option(
    "--metastore",
    "flavour",
    type=click.Choice(list(FLAVOURS)),
    default=os.environ.get("ACIDCLEAN_TEST_METASTORE"),
    help="hive2: Hive 2.3.10 from the pyspark wheel; hive3: Hive 3.1.3, hive4: Hive 4.0.1, from Maven Central. "
    "[default: hive3 with --storage s3, else hive2]",
)
@click.option("--kafka-port", type=PORT, default=None, help="Broker port (default: a free port).")
@click.option("--metastore-port", type=PORT, default=None, help="Metastore port (default: a free port).")
@click.option(
    "--storage",
    type=click.Choice(["local", "hdfs", "s3"]),
    default="local",
    show_default=True,
    help="Where the warehouse lives: the local disk, a real HDFS (NameNode and DataNode in one local JVM) or "
    "a real S3 API server on 127.0.0.1 (needs --metastore hive3 or hive4).",
)
@click.option(
    "--hdfs-trash-interval",
    "hdfs_trash_interval",
    type=click.IntRange(min=0),
    default=None,
    help="With --storage hdfs: the NameNode's fs.trash.interval in minutes, how long cleanups stay "
    "restorable from .Trash (0 turns the trash off). [default: 1440]",
)
def up(
    state_dir: Path,
    flavour: str | None,
    kafka_port: int | None,
    metastore_port: int | None,
    storage: str,
    hdfs_trash_interval: int | None,
) -> None:
    """Start the stack (or report the one already running)."""
    flavour = flavour or ("hive3" if storage == "s3" else "hive2")
    info, started = stack_up(state_dir, flavour, kafka_port, metastore_port, storage, hdfs_trash_interval)
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
            f'or: eval "$(acidclean stack env --state-dir {shlex.quote(info.state_dir)})"'
        )


def export_lines(info: StackInfo) -> list[str]:
    """The ``export`` lines that point acidclean at a stack from any shell."""
    return [f"export {name}={shlex.quote(value)}" for name, value in stack_exports(info).items()]


@stack.command(epilog=examples('eval "$(acidclean stack env)"', "acidclean stack env --state-dir .stack-s3"))
@state_dir_option
def env(state_dir: Path) -> None:
    """Print the exports that point a shell at the stack."""
    info = read_state(state_dir.resolve())
    if info is None:
        raise click.ClickException(f"no stack in {state_dir.resolve()}: run `acidclean stack up` first")
    for line in export_lines(info):
        click.echo(line)


@stack.command(epilog=examples("acidclean stack status", "acidclean stack status --state-dir .stack-s3"))
@state_dir_option
def status(state_dir: Path) -> None:
    """Say what runs where; exit 1 unless every service runs.

    Exit 0 when every service runs and answers; 1 when there is no stack, a service is stopped or
    not answering (its line says which), or stack.json is damaged.
    """
    info = read_state(state_dir.resolve())
    if info is None:
        click.echo(f"no stack in {state_dir.resolve()}: run `acidclean stack up`", err=True)
        raise SystemExit(EXIT_FAILED)
    click.echo(f"stack in {info.state_dir} ({info.metastore_flavour} metastore)")
    labels = ("kafka", "metastore", info.storage)
    down: list[str] = []
    for label, service in zip(labels, info.services, strict=False):
        state = service_status(service)
        if state != "running":
            down.append(label)
        click.echo(f"  {label:<10} {service.address:<28} pid {service.pid:<8} {state}   log {service.log_file}")
    if down:
        click.echo(
            f"{' and '.join(down)} not running: `acidclean stack up` restarts the stack, "
            "`acidclean stack down` forgets it",
            err=True,
        )
        raise SystemExit(EXIT_FAILED)


@stack.command(
    epilog=examples(
        "acidclean stack down", "acidclean stack down --state-dir .stack-hive3", "acidclean stack down --forget"
    )
)
@state_dir_option
@click.option(
    "--forget",
    is_flag=True,
    help="Stop nothing: only remove the stack's state (the way out of a damaged stack.json; a service "
    "still running keeps running).",
)
def down(state_dir: Path, forget: bool) -> None:
    """Stop the stack's services and remove its state.

    Each service is stopped by the process id recorded at start (SIGTERM, then SIGKILL after 30 s),
    and only while that pid names the process started then: a pid that now belongs to another
    process is left alone, and said so.
    """
    report = stop_stack(state_dir, forget=forget)
    for note in report.left_alone:
        click.echo(note, err=True)
    if forget:
        click.echo(f"forgot the stack in {state_dir.resolve()}; stopped nothing")
    else:
        click.echo("stopped " + ", ".join(report.stopped) if report.stopped else "nothing was running")


@stack.command(epilog=examples("acidclean stack fetch", "acidclean stack fetch --no-hive3 --no-hive4"))
@click.option("--hive3/--no-hive3", default=True, show_default=True, help="Also fetch Hive Metastore 3.1.3.")
@click.option("--hive4/--no-hive4", default=True, show_default=True, help="Also fetch Hive Metastore 4.0.1.")
def fetch(hive3: bool, hive4: bool) -> None:
    """Download the stack's jars from Maven Central into the cache.

    Once: later runs reuse the cache (ACIDCLEAN_CACHE_DIR, default .cache/ of the checkout).
    """
    log_dir = cache_dir() / "logs"
    click.echo(f"kafka jars      {kafka_libs(log_dir)}")
    if hive3:
        click.echo(f"hive 3.1.3      {hive3_home(log_dir)}")
    if hive4:
        click.echo(f"hive 4.0.1      {hive4_home(log_dir)}")
