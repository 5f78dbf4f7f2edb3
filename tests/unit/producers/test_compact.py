"""Compaction without Spark: plan, compact every bucket, commit; the snapshot must not change.

Tables are written on the local file system; the snapshot is read with the shared ACID reader.
A property test drives random histories of inserts, deletes, aborted and open transactions and
minor and major vacuums, and checks after each vacuum that the visible rows, with their
identities, are exactly those before it and those a plain model of the history expects.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis_support import examples

from acidclean.producers.acid_files import sort_by_identity, write_acid_events
from acidclean.producers.commit import commit, finish_directories
from acidclean.producers.compact import bucket_tasks, compact_bucket
from acidclean.producers.plan import CompactionPlan, CompactionType, plan_compaction
from acidclean.shared.acid.events import decode_bucket_property
from acidclean.shared.acid.id_lists import MetastoreKind
from acidclean.shared.acid.names import delta_name
from acidclean.shared.acid.write_ids import ValidWriteIdList
from acidclean.shared.errors import VacuumRefusedError
from acidclean.shared.orc.reader import list_table_dir, read_snapshot
from acidclean.shared.orc.writer import delete_events, insert_events, write_acid_version_file

NOTHING_OPEN = 9223372036854775807
ROW_TYPE = pa.struct([("id", pa.int64()), ("v", pa.string())])
BUCKETS = 3
FS = pafs.LocalFileSystem()


class Table:
    """A Hive ACID table directory and the metastore's view of its write ids."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = str(root)
        self.next_write_id = 1
        self.open: list[int] = []
        self.aborted: list[int] = []
        self.next_value = 0

    def ids_text(self) -> str:
        hwm = self.next_write_id - 1
        min_open = min(self.open) if self.open else NOTHING_OPEN
        return f"db.t:{hwm}:{min_open}:{','.join(map(str, self.open))}:{','.join(map(str, self.aborted))}"

    def snapshot(self) -> ValidWriteIdList:
        return ValidWriteIdList.from_string(self.ids_text())

    def rows(self) -> pa.Table:
        return read_snapshot(FS, self.root, self.snapshot(), with_row_id=True).sort_by(
            [("originalTransaction", "ascending"), ("bucket", "ascending"), ("rowId", "ascending")]
        )

    def _finish(self, write_id: int, outcome: str) -> None:
        if outcome == "abort":
            self.aborted.append(write_id)
        elif outcome == "open":
            self.open.append(write_id)

    def insert(self, count: int, outcome: str = "commit") -> int:
        write_id = self.next_write_id
        self.next_write_id += 1
        directory = f"{self.root}/{delta_name(write_id, write_id, 0)}"
        values = np.arange(self.next_value, self.next_value + count, dtype=np.int64)
        self.next_value += count
        for bucket in range(BUCKETS):
            chosen = values[values % BUCKETS == bucket]
            if len(chosen):
                rows = pa.table({"id": chosen, "v": [f"v{i}" for i in chosen]})
                events = insert_events(rows, write_id, bucket_id=bucket)
                write_acid_events(FS, f"{directory}/bucket_{bucket:05d}", events)
        write_acid_version_file(FS, directory)
        self._finish(write_id, outcome)
        return write_id

    def delete(self, fraction: float, seed: int, outcome: str = "commit") -> int:
        visible = read_snapshot(FS, self.root, self.snapshot(), columns=[], with_row_id=True)
        write_id = self.next_write_id
        self.next_write_id += 1
        count = int(visible.num_rows * fraction)
        if count:
            chosen = visible.take(pa.array(np.random.default_rng(seed).choice(visible.num_rows, count, replace=False)))
            chosen = chosen.set_column(3, "currentTransaction", pa.array(np.full(count, write_id), pa.int64()))
            directory = f"{self.root}/{delta_name(write_id, write_id, 0, delete=True)}"
            events = delete_events(chosen, None, ROW_TYPE)
            buckets = np.array([decode_bucket_property(b).bucket_id for b in events.column("bucket").to_pylist()])
            for bucket in np.unique(buckets):
                part = sort_by_identity(events.filter(pa.array(buckets == bucket)))
                write_acid_events(FS, f"{directory}/bucket_{bucket:05d}", part)
            write_acid_version_file(FS, directory)
        self._finish(write_id, outcome)
        return write_id

    def resolve_oldest_open(self, outcome: str) -> None:
        """The oldest open transaction commits or aborts (its files are already written)."""
        if self.open:
            write_id = self.open.pop(0)
            if outcome == "abort":
                self.aborted.append(write_id)

    def plan(self, compaction: CompactionType) -> CompactionPlan:
        listing = list_table_dir(FS, self.root)
        return plan_compaction(listing, self.ids_text(), MetastoreKind.HIVE3, compaction, table="db.t")

    def vacuum(self, compaction: CompactionType, job: str = "job") -> CompactionPlan:
        plan = self.plan(compaction)
        if plan.existing_targets:
            # As run_vacuum: all targets present is a vacuum already done; some present is an error.
            assert plan.existing_targets == plan.targets, plan.existing_targets
            raise VacuumRefusedError("already committed")
        staging = f"{self.root}/_tmp_acidclean_{job}"
        for task in bucket_tasks(plan, location_uri=self.root, staging_dir=staging, row_type=ROW_TYPE, codec="zlib"):
            compact_bucket(task)
        produced = finish_directories(FS, staging, plan.targets)
        draft = {"event_id": job, "vacuum_job_id": job, "table": "db.t", "highest_write_id": plan.highest_write_id}
        commit(FS, self.root, staging, produced, draft)
        return plan


def directories(table: Table) -> list[str]:
    return sorted(os.listdir(table.root))


def test_minor_vacuum_keeps_every_row_and_identity_and_carries_the_deletes(tmp_path: Path) -> None:
    table = Table(tmp_path)
    for _ in range(3):
        table.insert(40)
    table.delete(0.25, seed=1)
    before = table.rows()
    plan = table.vacuum(CompactionType.MINOR)
    assert plan.targets == ("delete_delta_0000001_0000004", "delta_0000001_0000004")
    assert table.rows().equals(before)
    assert before.num_rows == 90  # 120 inserted, 30 deleted and still hidden


def test_major_vacuum_applies_the_deletes_and_keeps_identities(tmp_path: Path) -> None:
    table = Table(tmp_path)
    for _ in range(3):
        table.insert(40)
    table.delete(0.5, seed=2)
    before = table.rows()
    table.vacuum(CompactionType.MAJOR)
    assert "base_0000004" in directories(table)
    after = read_snapshot(FS, f"{table.root}/base_0000004", table.snapshot(), with_row_id=True)
    assert after.num_rows == before.num_rows == 60  # the base alone holds exactly the visible rows
    assert table.rows().equals(before)


def test_rows_of_aborted_transactions_are_dropped_and_open_ones_wait(tmp_path: Path) -> None:
    table = Table(tmp_path)
    table.insert(10)
    table.insert(10, outcome="abort")
    table.insert(10)
    table.insert(10, outcome="open")
    table.insert(10)
    before = table.rows()
    plan = table.vacuum(CompactionType.MAJOR)
    assert plan.targets == ("base_0000003",)
    assert plan.held_back == ("delta_0000004_0000004_0000", "delta_0000005_0000005_0000")
    base = read_snapshot(FS, f"{table.root}/base_0000003", table.snapshot(), with_row_id=True)
    assert sorted(set(base.column("originalTransaction").to_pylist())) == [1, 3]
    assert table.rows().equals(before)


def test_a_bucket_whose_rows_were_all_deleted_leaves_an_empty_but_valid_base(tmp_path: Path) -> None:
    table = Table(tmp_path)
    table.insert(30)
    table.delete(1.0, seed=3)
    table.vacuum(CompactionType.MAJOR)
    assert sorted(os.listdir(f"{table.root}/base_0000002")) == [
        "_acidclean_vacuum.json",
        "_metadata_acid",
        "_orc_acid_version",
    ]
    assert table.rows().num_rows == 0


def test_nothing_is_left_in_staging_after_a_commit(tmp_path: Path) -> None:
    table = Table(tmp_path)
    table.insert(5)
    table.insert(5)
    table.vacuum(CompactionType.MINOR)
    assert not [name for name in directories(table) if name.startswith("_tmp")]


OUTCOMES = st.sampled_from(["commit"] * 6 + ["abort", "open"])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.integers(1, 30), OUTCOMES),
        st.tuples(st.just("delete"), st.floats(0.05, 0.6), OUTCOMES),
        st.tuples(st.just("resolve"), st.just(0), st.sampled_from(["commit", "abort"])),
        st.tuples(st.just("vacuum"), st.sampled_from(list(CompactionType)), st.just("")),
    ),
    min_size=4,
    max_size=14,
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_random_histories_of_writes_and_vacuums_never_change_what_a_snapshot_reads(
    tmp_path_factory: object, steps: list[tuple[str, object, object]]
) -> None:
    root = tmp_path_factory.mktemp("history")  # type: ignore[attr-defined]
    table = Table(root)
    for number, (action, argument, outcome) in enumerate(steps):
        if action == "insert":
            table.insert(int(argument), str(outcome))  # type: ignore[call-overload]
        elif action == "delete":
            table.delete(float(argument), seed=number, outcome=str(outcome))  # type: ignore[arg-type]
        elif action == "resolve":
            table.resolve_oldest_open(str(outcome))
        else:
            before = table.rows()
            try:
                plan = table.vacuum(argument, job=str(number))  # type: ignore[arg-type]
            except VacuumRefusedError:
                event("vacuum refused")
                continue
            event(f"{plan.compaction_type.value} vacuum committed")
            after = table.rows()
            assert after.equals(before), f"{plan.compaction_type} into {plan.targets} changed the snapshot"
            # Nothing above the compacted range is claimed obsolete.
            assert all(name not in plan.held_back for name in plan.obsolete_after)


def test_long_seeded_histories_with_many_vacuums_never_change_what_a_snapshot_reads(tmp_path: Path) -> None:
    committed = {CompactionType.MINOR: 0, CompactionType.MAJOR: 0}
    for seed in range(4):
        random = np.random.default_rng(seed)
        table = Table(tmp_path / f"history{seed}")
        for step in range(30):
            roll = random.random()
            outcome = str(random.choice(["commit"] * 6 + ["abort", "open"]))
            if roll < 0.45:
                table.insert(int(random.integers(1, 40)), outcome)
            elif roll < 0.6:
                table.delete(float(random.uniform(0.05, 0.5)), seed=step, outcome=outcome)
            elif roll < 0.7:
                table.resolve_oldest_open(str(random.choice(["commit", "abort"])))
            else:
                compaction = CompactionType.MAJOR if random.random() < 0.25 else CompactionType.MINOR
                before = table.rows()
                try:
                    table.vacuum(compaction, job=f"{seed}-{step}")
                except VacuumRefusedError:
                    continue
                assert table.rows().equals(before), f"history {seed}, step {step}: {compaction} changed the snapshot"
                committed[compaction] += 1
    assert min(committed.values()) >= 3, committed


@pytest.mark.parametrize("compaction", [CompactionType.MINOR, CompactionType.MAJOR])
def test_each_task_reports_the_bytes_of_its_own_buckets_input_files(tmp_path: Path, compaction: CompactionType) -> None:
    table = Table(tmp_path)
    for _ in range(3):
        table.insert(40)
    table.delete(0.25, seed=2)
    plan = table.plan(compaction)
    tasks = bucket_tasks(
        plan, location_uri=table.root, staging_dir=f"{table.root}/_tmp_x", row_type=ROW_TYPE, codec="zlib"
    )
    by_bucket: dict[int, int] = {}
    for path in Path(table.root).glob("*delta_*/bucket_*"):
        if path.parent.name in plan.inputs:
            bucket = int(path.name.split("_")[1])
            by_bucket[bucket] = by_bucket.get(bucket, 0) + path.stat().st_size
    assert len(tasks) > 1 and {t.bucket: t.input_bytes for t in tasks} == by_bucket
    assert {t.bucket: compact_bucket(t).bytes_read for t in tasks} == by_bucket
