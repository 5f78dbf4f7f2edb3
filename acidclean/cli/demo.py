"""``acidclean demo``: the whole story on the local stack (see ``acidclean.deploy.local.demo``)."""

from __future__ import annotations

from pathlib import Path

import click

from acidclean.cli import examples, require_extra
from acidclean.cli.stack import state_dir_option
from acidclean.deploy.local.demo import DemoOptions, run_demo
from acidclean.deploy.local.metastore import FLAVOURS


@click.command(
    epilog=examples(
        "acidclean demo",
        "acidclean demo --storage s3 --state-dir .stack-s3 --output-dir demo-s3",
        "acidclean demo --by-hand --minor",
    )
)
@state_dir_option
@click.option(
    "--metastore",
    "flavour",
    type=click.Choice(list(FLAVOURS)),
    default=None,
    help="hive2, hive3 or hive4 [default: hive3 with --storage s3, else hive2]",
)
@click.option(
    "--storage",
    type=click.Choice(["local", "hdfs", "s3"]),
    default="local",
    show_default=True,
    help="Where the table lives: the local disk, a real HDFS or a real S3 API server.",
)
@click.option("--commits", type=click.IntRange(min=2), default=8, show_default=True, help="Commits to stream.")
@click.option("--rows", type=click.IntRange(min=1), default=2000, show_default=True, help="Rows per commit.")
@click.option(
    "--interval-ms",
    type=click.IntRange(min=100),
    default=2000,
    show_default=True,
    help="The cleaner's re-check interval (hive.compaction-cleanup-interval).",
)
@click.option(
    "--by-hand",
    is_flag=True,
    help="Run the vacuum as `acidclean vacuum` instead of the initiator and the vacuum service.",
)
@click.option("--minor", is_flag=True, help="With --by-hand: a MINOR vacuum instead of a MAJOR one.")
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the demo leaves the timeline picture and the services' logs, which `acidclean stack down` "
    "does not remove [default: acidclean-demo beside the state directory].",
)
def demo(
    state_dir: Path,
    flavour: str | None,
    storage: str,
    commits: int,
    rows: int,
    interval_ms: int,
    by_hand: bool,
    minor: bool,
    output_dir: Path | None,
) -> None:
    """Run the whole story on the local stack, narrated.

    Starts the stack, streams commits into a table while a reader holds its lock; the commit that
    crosses the threshold makes the initiator request a vacuum, the vacuum service runs it, and the
    cleaner waits for the reader, then cleans. The stack keeps running afterwards; the timeline
    picture and the logs stay in the output folder after `acidclean stack down`.
    """
    require_extra("vacuum", "acidclean demo")
    flavour = flavour or ("hive3" if storage == "s3" else "hive2")
    if minor and not by_hand:
        raise click.UsageError("--minor needs --by-hand: the initiator picks the vacuum's type itself")
    options = DemoOptions(
        state_dir,
        flavour,
        commits,
        rows,
        interval_ms,
        full=not minor,
        storage=storage,
        by_hand=by_hand,
        output_dir=output_dir,
    )
    run_demo(options, click.echo)
