"""``acidclean audit DB.TABLE --plot FILE.png``: read one table's events and draw its timeline."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import cast

from acidclean.consumers.audit import bundle_members
from acidclean.consumers.timeline import Timeline, TimelineEvent, build_timeline
from acidclean.schemas.common import EventBase
from acidclean.schemas.events import (
    CleanupDone,
    CleanupStarted,
    DelayedVacuums,
    DelayEnvelope,
    DeltaCommitted,
    VacuumCommitted,
    VacuumFailed,
    VacuumRequested,
    VacuumStarted,
)
from acidclean.shared.bus.codec import decode
from acidclean.shared.bus.reader import LogReader
from acidclean.shared.bus.records import raw_record
from acidclean.shared.settings import Settings

TIMELINE_TOPICS: dict[str, tuple[type[EventBase], ...]] = {
    "delta_committed": (DeltaCommitted,),
    "vacuum_committed": (VacuumCommitted,),
    "cleanup_delay": (DelayEnvelope, DelayedVacuums),
    "cleanup_done": (CleanupStarted, CleanupDone),
    "vacuum_requests": (VacuumRequested, VacuumStarted, VacuumFailed),
}
TIMELINE_CLASSES = tuple(cls for classes in TIMELINE_TOPICS.values() for cls in classes)
MARK_LABEL = {
    "requested": "vacuum requested",
    "running": "vacuum running",
    "failed": "vacuum failed",
    "vacuum": "vacuum committed",
    "wait": "requeued (locks held)",
    "cleanup": "cleanup done",
}
MARK_STYLE = {
    "requested": ("tab:purple", ":"),
    "running": ("tab:purple", "-."),
    "failed": ("tab:red", "-"),
    "vacuum": ("tab:blue", "-"),
    "wait": ("tab:orange", ":"),
    "cleanup": ("tab:green", "--"),
}


def read_timeline(settings: Settings, table: str, partition: str | None = None) -> Timeline:
    """Read the ingest, vacuum, delay and cleanup topics to their end and build the table's timeline."""
    expected = {settings.topic(name): classes for name, classes in TIMELINE_TOPICS.items()}
    reader = LogReader(settings.kafka, list(expected))
    events: list[TimelineEvent] = []
    for message in reader:
        members, carry = bundle_members(raw_record(message))
        for record in members:
            event = decode(
                record, rejected_by="acidclean-plot", tenant=settings.tenant, expected=expected[record.topic]
            )
            if carry is not None:
                event = carry.applied(event)
            if isinstance(event, TIMELINE_CLASSES):
                events.append(cast(TimelineEvent, event))
    return build_timeline(events, table, partition)


def _number(moment: datetime) -> float:
    import matplotlib.dates as mdates

    return float(mdates.date2num(moment))  # type: ignore[no-untyped-call]


def draw(timeline: Timeline, target: Path) -> None:
    """Write the timeline as a PNG: the delta-directory count as steps, the events as vertical lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(10, 4.5), dpi=110)
    if timeline.points:
        times = [_number(at) for at, _ in timeline.points]
        counts = [count for _, count in timeline.points]
        # Carry the last level on past the last event, so a cleanup's drop shows as a level, not an edge.
        tail = max((times[-1] - times[0]) * 0.08, 1 / 86400)
        times.append(times[-1] + tail)
        counts.append(counts[-1])
        axes.step(times, counts, where="post", color="black", linewidth=2, label="delta directories")
        axes.fill_between(times, counts, step="post", color="black", alpha=0.08)
        axes.annotate(f"{counts[-1]}", (times[-1], counts[-1]), textcoords="offset points", xytext=(4, 4))
    vacuums = [_number(mark.at) for mark in timeline.marks if mark.kind == "vacuum"]
    cleanups = [_number(mark.at) for mark in timeline.marks if mark.kind == "cleanup"]
    for start in vacuums:
        end = min((at for at in cleanups if at >= start), default=None)
        if end is not None:
            axes.axvspan(start, end, color="tab:orange", alpha=0.12, label=None)
    # A request is in flight until its vacuum commits (or it fails): shaded from the request on.
    requests = [_number(mark.at) for mark in timeline.marks if mark.kind == "requested"]
    ends = vacuums + [_number(mark.at) for mark in timeline.marks if mark.kind == "failed"]
    for start in requests:
        end = min((at for at in ends if at >= start), default=None)
        if end is not None:
            axes.axvspan(start, end, color="tab:purple", alpha=0.10, label=None)
    labelled: set[str] = set()
    for mark in timeline.marks:
        colour, style = MARK_STYLE[mark.kind]
        label = MARK_LABEL[mark.kind]
        legend = None if label in labelled else label
        axes.axvline(_number(mark.at), color=colour, linestyle=style, alpha=0.8, label=legend)
        labelled.add(label)
    name = timeline.table + (f" / {timeline.partition}" if timeline.partition else "")
    axes.xaxis_date()
    axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))  # type: ignore[no-untyped-call]
    axes.set_title(f"{name}: delta directories over time (shaded: vacuum in flight, then waiting for readers' locks)")
    axes.set_xlabel("time (UTC)")
    axes.set_ylabel("delta directories")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, frameon=False)
    figure.autofmt_xdate()
    figure.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, format="png")
    plt.close(figure)
