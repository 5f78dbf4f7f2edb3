"""Randomised histories over the pure rules alone: vacuums that pause, tables dropped and re-created,
partitions sharing one directory.

A table ``db.t`` with two partitions; writers commit, abort or stay open; readers lock their
partition, take their snapshot and list (as Trino and acidclean's own reader do); vacuums plan with
:func:`plan_compaction` and may pause before they commit, so another vacuum of the same partition plans
and commits meanwhile (the first lost its vacuum lock: no fencing yet) and two vacuums' overlapping
outputs lie in one listing; the table may be dropped (its directories removed once every reader and
writer is gone, as DROP's exclusive lock waits for them) and created again under the same name and
location, its write ids starting at 1 again so directory names repeat, while events of the old table
wait in the cleaner and paused vacuums of the old table resume; both partitions may have the same
location. The cleaner takes any pending event whose snapshot readers have all ended and computes what
it would delete with the rule under test.

The invariant, checked every time an obsolete set is computed: no live reader reads anything in it
(readers in the vacuum's lock snapshot have ended by then; every other one is not covered by it). And
every reader reads only directories written for its own table (not a dropped one's of the same name).

The machine is parameterised by the cleaner's rule and by what a lock snapshot covers, so the fixes
being built (rule 8: locks about directories; rule 9: the same table, checked before deleting) can be
tried here: :func:`todays_rule` (:func:`verify_claims`, the cleaner id list of
:func:`cleaner_ids`) with locks matched by table and partition name holds in histories without drops
or shared directories, and the scripted counterexamples below show where it does not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule
from hypothesis_support import examples

from acidclean.producers.plan import CompactionPlan, CompactionType, plan_compaction
from acidclean.shared.acid.claims import verify_claims
from acidclean.shared.acid.id_lists import MetastoreKind, cleaner_ids
from acidclean.shared.acid.names import delta_name
from acidclean.shared.acid.state import Listing, acid_state
from acidclean.shared.acid.write_ids import ValidWriteIdList
from acidclean.shared.errors import NotEnoughHistoryError, VacuumRefusedError

pytestmark = [pytest.mark.rule1, pytest.mark.rule3]

TABLE = "db.t"
PARTITIONS = ("p=1", "p=2")
COMMITTED, ABORTED, OPEN = "committed", "aborted", "open"


def event(text: str) -> None:
    """Hypothesis' event statistics; the scripted histories below run the rules outside a test run."""
    with contextlib.suppress(InvalidArgument):
        hypothesis_event(text)


@dataclass(frozen=True)
class Vacuum:
    """A vacuum as it planned (and, once committed, as its event says it)."""

    table_id: int  # the table it planned against (its create time / id)
    partition: str
    location: str
    plan: CompactionPlan
    lock_snapshot: frozenset[int] = frozenset()  # reader ids

    @property
    def new_directories(self) -> tuple[str, ...]:
        return self.plan.targets

    @property
    def claims(self) -> tuple[str, ...]:
        return self.plan.obsolete_after


@dataclass
class Reader:
    id: int
    table_id: int
    partition: str
    location: str
    reads: frozenset[str]


@dataclass
class Table:
    """The metastore's view of ``db.t`` now, and the directories under each location."""

    table_id: int = 1
    status: dict[int, str] = field(default_factory=dict)
    partition_of: dict[int, str] = field(default_factory=dict)

    def valid_ids_text(self) -> str:
        open_ids = [w for w, s in self.status.items() if s == OPEN]
        aborted = [w for w, s in self.status.items() if s == ABORTED]
        return ValidWriteIdList.from_ids(len(self.status), open_ids, aborted, table_name=TABLE).to_string()


@dataclass
class World:
    """What the rule under test may consult, besides the event: the metastore and the file system."""

    table: Table
    directories: dict[str, set[str]]  # location -> names listed there


CleanerRule = Callable[[Vacuum, World], frozenset[str]]
"""What a cleaner deletes for a vacuum whose snapshot readers have all ended (empty: nothing, or wait)."""


def listing(names: set[str], compacted: set[str]) -> Listing:
    return Listing.from_paths(
        [f"{name}/bucket_00000" for name in sorted(names)],
        data_formats={name: "compacted" for name in names & compacted},
    )


def todays_rule(vacuum: Vacuum, world: World) -> frozenset[str]:
    """Rule 3 as the cleaner runs it: wait while an id at or below the vacuum's cap is open, else delete
    the claims :func:`verify_claims` confirms against the listing, by name."""
    names = world.directories.get(vacuum.location, set())
    ids = cleaner_ids(MetastoreKind.HIVE3, world.table.valid_ids_text(), vacuum.plan.highest_write_id)
    if ids.relevant_open_ids(names):
        return frozenset()
    verdict = verify_claims(
        vacuum.new_directories,
        vacuum.claims,
        listing(names, {n for n in names if n.startswith("base_")}),
        ids.valid_ids(),
        None,
        vacuum.plan.highest_write_id,
    )
    return frozenset(verdict.deletable)


def same_table_only(rule: CleanerRule) -> CleanerRule:
    """Rule 9's first half, as a stand-in for the fix being built: nothing for an event whose table is
    not the table of that name now (another id or create time)."""

    def checked(vacuum: Vacuum, world: World) -> frozenset[str]:
        return rule(vacuum, world) if vacuum.table_id == world.table.table_id else frozenset()

    return checked


class PureHistories(RuleBasedStateMachine):
    """See the module docstring. Subclasses set the rule, the lock scope and what may happen."""

    cleaner_rule: CleanerRule = staticmethod(todays_rule)  # type: ignore[assignment]
    locks_by_directory = False  # rule 8: a lock on any partition whose location is the vacuum's counts
    fenced_commits = False  # rules 7 and 9: a vacuum commits only into the table it planned against
    shared_directory = False
    drops = False

    def __init__(self) -> None:
        super().__init__()
        locations = {"p=1": "/w/t/p=1", "p=2": "/w/t/p=1" if self.shared_directory else "/w/t/p=2"}
        self.location_of = locations
        self.world = World(Table(), {location: set() for location in locations.values()})
        self.compacted: set[str] = set()  # names a vacuum wrote (bases carry the compactor's marker)
        self.owner: dict[tuple[str, str], int] = {}  # (location, name) -> id of the table that wrote it
        self.readers: list[Reader] = []
        self.next_reader = 1
        self.paused: list[Vacuum] = []
        self.pending: list[Vacuum] = []
        self.checks = 0

    # -- writers ----------------------------------------------------------------------------------

    @initialize(count=st.integers(1, 4))
    def committed_writes(self, count: int) -> None:
        for i in range(count):
            self.write(PARTITIONS[i % 2], COMMITTED)

    @rule(partition=st.sampled_from(PARTITIONS), outcome=st.sampled_from([COMMITTED, COMMITTED, ABORTED, OPEN]))
    def write(self, partition: str, outcome: str) -> None:
        table = self.world.table
        write_id = len(table.status) + 1
        table.status[write_id] = outcome
        table.partition_of[write_id] = partition
        location, name = self.location_of[partition], delta_name(write_id, write_id, 0)
        self.world.directories[location].add(name)
        self.owner[location, name] = table.table_id

    @precondition(lambda self: OPEN in self.world.table.status.values())
    @rule(data=st.data(), abort=st.booleans())
    def finish_write(self, data: st.DataObject, abort: bool) -> None:
        status = self.world.table.status
        write_id = data.draw(st.sampled_from(sorted(w for w, s in status.items() if s == OPEN)))
        status[write_id] = ABORTED if abort else COMMITTED

    # -- readers ----------------------------------------------------------------------------------

    @rule(partition=st.sampled_from(PARTITIONS))
    def start_reader(self, partition: str) -> None:
        """Lock the partition, then the snapshot, then list."""
        location = self.location_of[partition]
        snapshot = ValidWriteIdList.from_string(self.world.table.valid_ids_text())
        names = self.world.directories[location]
        try:
            reads = frozenset(acid_state(listing(names, self.compacted), snapshot).current_directories)
        except NotEnoughHistoryError:
            reads = frozenset()
        table_id = self.world.table.table_id
        foreign = sorted(name for name in reads if self.owner[location, name] != table_id)
        assert not foreign, f"a reader of table id {table_id} reads {foreign}, written for another table of that name"
        self.readers.append(Reader(self.next_reader, self.world.table.table_id, partition, location, reads))
        self.next_reader += 1

    @precondition(lambda self: self.readers)
    @rule(data=st.data())
    def end_reader(self, data: st.DataObject) -> None:
        self.readers.remove(data.draw(st.sampled_from(self.readers)))

    # -- vacuums ----------------------------------------------------------------------------------

    @rule(partition=st.sampled_from(PARTITIONS), major=st.booleans(), pause=st.booleans())
    def vacuum(self, partition: str, major: bool, pause: bool) -> None:
        """Plan; commit now, or pause (and lose the vacuum lock) and commit later."""
        location = self.location_of[partition]
        names = self.world.directories[location]
        try:
            plan = plan_compaction(
                listing(names, self.compacted),
                self.world.table.valid_ids_text(),
                MetastoreKind.HIVE3,
                CompactionType.MAJOR if major else CompactionType.MINOR,
                table=TABLE,
                partition=partition,
            )
        except (VacuumRefusedError, NotEnoughHistoryError):
            return  # nothing to do, or (a stale vacuum's base above this table's ids) Hive's refusal too
        vacuum = Vacuum(self.world.table.table_id, partition, location, plan)
        if pause:
            self.paused.append(vacuum)
        else:
            self.commit(vacuum)

    @precondition(lambda self: self.paused)
    @rule(data=st.data())
    def paused_vacuum_resumes(self, data: st.DataObject) -> None:
        vacuum = data.draw(st.sampled_from(self.paused))
        self.paused.remove(vacuum)
        self.commit(vacuum)

    def commit(self, vacuum: Vacuum) -> None:
        """Rename the output (a rename onto a name that exists fails: no event), snapshot the locks."""
        names = self.world.directories.setdefault(vacuum.location, set())
        if names & set(vacuum.new_directories):
            event("vacuum: its output's name exists, the rename fails")
            return
        if self.fenced_commits and vacuum.table_id != self.world.table.table_id:
            return  # its last check before the rename finds the table it planned against gone
        if any(set(v.new_directories) <= names for v in self.pending if v.location == vacuum.location):
            event("vacuum: commits beside another vacuum's output")
        names.update(vacuum.new_directories)
        self.owner.update({(vacuum.location, name): vacuum.table_id for name in vacuum.new_directories})
        self.compacted.update(vacuum.new_directories)
        covered = frozenset(r.id for r in self.readers if self.lock_covers(r, vacuum))
        self.pending.append(Vacuum(vacuum.table_id, vacuum.partition, vacuum.location, vacuum.plan, covered))

    def lock_covers(self, reader: Reader, vacuum: Vacuum) -> bool:
        """Today the snapshot is the table's locks filtered by partition name; rule 8 by directory."""
        if self.locks_by_directory:
            return reader.location == vacuum.location
        return reader.partition == vacuum.partition

    # -- drop and create again --------------------------------------------------------------------

    @precondition(lambda self: self.drops and not self.readers and OPEN not in self.world.table.status.values())
    @rule()
    def drop_and_create_again(self) -> None:
        """DROP waits for every lock; it removes the directories; CREATE starts write ids at 1 again."""
        for names in self.world.directories.values():
            names.clear()
        self.owner.clear()
        event("table dropped and created again" + (" while its events wait" if self.pending else ""))
        self.world.table = Table(table_id=self.world.table.table_id + 1)

    # -- the cleaner ------------------------------------------------------------------------------

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def cleaner_check(self, data: st.DataObject) -> None:
        vacuum = data.draw(st.sampled_from(self.pending))
        live = {r.id for r in self.readers}
        if vacuum.lock_snapshot & live:
            event("cleaner: a snapshot reader still reads")
            return  # rule 1: a reader of the snapshot still reads
        obsolete = type(self).cleaner_rule(vacuum, self.world)
        self.checks += 1
        event(f"cleaner: deletes {'something' if obsolete else 'nothing'}, {len(self.readers) or 'no'} live readers")
        for reader in self.readers:
            lost = reader.reads & obsolete if reader.location == vacuum.location else frozenset()
            assert not lost, (
                f"the cleanup of {vacuum.new_directories} (table id {vacuum.table_id}, {vacuum.partition}) "
                f"deletes {sorted(lost)}, read by reader {reader.id} (table id {reader.table_id}, "
                f"{reader.partition}), which its lock snapshot does not cover"
            )
        self.world.directories[vacuum.location] -= obsolete
        if not obsolete and data.draw(st.booleans()):
            return  # checked again later
        self.pending.remove(vacuum)

    # Cleaner checks and readers' ends as frequent as everything else (rules are drawn uniformly).

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def another_cleaner_check(self, data: st.DataObject) -> None:
        self.cleaner_check(data)

    @precondition(lambda self: self.readers)
    @rule(data=st.data())
    def another_reader_ends(self, data: st.DataObject) -> None:
        self.end_reader(data)


HISTORY_SETTINGS = settings(
    max_examples=examples(100),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class PausedVacuums(PureHistories):
    """Today's rule and locks: paused vacuums and overlapping outputs, one table, own directories."""


class FencedAgainstDropsAndSharedDirectories(PureHistories):
    """Everything, with the fixes being built as stand-ins: table identity checked before deleting
    (rule 9) and lock snapshots about directories (rule 8)."""

    cleaner_rule = staticmethod(same_table_only(todays_rule))  # type: ignore[assignment]
    locks_by_directory = True
    fenced_commits = True
    shared_directory = True
    drops = True


PausedVacuums.TestCase.settings = HISTORY_SETTINGS
FencedAgainstDropsAndSharedDirectories.TestCase.settings = HISTORY_SETTINGS
test_paused_vacuums_never_delete_what_a_reader_reads = PausedVacuums.TestCase
test_with_identity_and_directory_locks_drops_and_shared_directories_lose_nothing = (
    FencedAgainstDropsAndSharedDirectories.TestCase
)


# -- the counterexamples, scripted: today's rules fail them, the stand-ins for the fixes do not ------


class _First:
    """Stands in for hypothesis' ``data`` in a scripted history: the first choice, or False."""

    def draw(self, strategy: st.SearchStrategy[object]) -> object:
        elements = getattr(strategy, "elements", None)
        return elements[0] if elements else False


FIRST = _First()


def shared_directory_history(locks_by_directory: bool) -> PureHistories:
    """p=2 writes 1 and 2 into the directory p=1 shares; a p=2 reader reads them; a minor vacuum of
    p=1 compacts them (it lists the shared directory) and claims both; its lock snapshot, taken by
    partition name, does not hold the p=2 reader's lock."""
    machine = type("M", (PureHistories,), {"shared_directory": True, "locks_by_directory": locks_by_directory})()
    machine.write("p=2", COMMITTED)
    machine.write("p=2", COMMITTED)
    machine.start_reader("p=2")
    machine.vacuum("p=1", major=False, pause=False)
    assert machine.pending and machine.readers[0].reads == {delta_name(1, 1, 0), delta_name(2, 2, 0)}
    machine.cleaner_check(FIRST)  # type: ignore[arg-type]
    return machine


def old_event_after_drop_history(rule: CleanerRule) -> PureHistories:
    """An event of the dropped table waits in the cleaner; the table is created again, written (ids 1
    and 2 again), read, and vacuumed into the same base name; the old event's claims now name the new
    table's deltas, which a reader of the new table reads and the old lock snapshot knows nothing of."""
    machine = type("M", (PureHistories,), {"drops": True, "cleaner_rule": staticmethod(rule)})()
    machine.write("p=1", COMMITTED)
    machine.write("p=1", COMMITTED)
    machine.vacuum("p=1", major=True, pause=False)  # base_2 of table 1; its event waits
    machine.drop_and_create_again()
    machine.write("p=1", COMMITTED)
    machine.write("p=1", COMMITTED)
    machine.start_reader("p=1")
    machine.vacuum("p=1", major=True, pause=False)  # base_2 of table 2, its snapshot holds the reader
    assert [v.table_id for v in machine.pending] == [1, 2]
    machine.cleaner_check(FIRST)  # type: ignore[arg-type]
    return machine


def stale_vacuum_after_drop_history(fenced_commits: bool) -> PureHistories:
    """A vacuum of the dropped table pauses and resumes after the table was created again and written:
    its base_2 (the old table's rows) lands among the new table's deltas and hides them."""
    machine = type("M", (PureHistories,), {"drops": True, "fenced_commits": fenced_commits})()
    machine.write("p=1", COMMITTED)
    machine.write("p=1", COMMITTED)
    machine.vacuum("p=1", major=True, pause=True)
    machine.drop_and_create_again()
    machine.write("p=1", COMMITTED)
    machine.write("p=1", COMMITTED)
    machine.paused_vacuum_resumes(FIRST)  # type: ignore[arg-type]
    machine.start_reader("p=1")
    return machine


@pytest.mark.rule8
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="rule 8 (lock snapshots about directories)")
def test_shared_directory_with_locks_by_partition_name_loses_the_other_partitions_reader() -> None:
    shared_directory_history(locks_by_directory=False)


@pytest.mark.rule8
def test_shared_directory_with_locks_by_directory_waits_for_the_other_partitions_reader() -> None:
    machine = shared_directory_history(locks_by_directory=True)
    assert machine.pending and machine.checks == 0  # not ready: the p=2 reader is in the snapshot


@pytest.mark.rule9
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="rule 9 (the same table, checked before deleting)")
def test_an_old_tables_event_deletes_the_recreated_tables_deltas_by_name() -> None:
    old_event_after_drop_history(todays_rule)


@pytest.mark.rule9
def test_an_old_tables_event_deletes_nothing_once_the_table_identity_is_checked() -> None:
    machine = old_event_after_drop_history(same_table_only(todays_rule))
    assert machine.readers[0].reads <= machine.world.directories["/w/t/p=1"]


@pytest.mark.rule7
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="rule 7 (fencing: the vacuum checks before commit)")
def test_a_vacuum_of_the_dropped_table_commits_into_the_recreated_one() -> None:
    stale_vacuum_after_drop_history(fenced_commits=False)


@pytest.mark.rule7
def test_a_fenced_vacuum_of_the_dropped_table_commits_nothing() -> None:
    machine = stale_vacuum_after_drop_history(fenced_commits=True)
    assert machine.readers[0].reads == {delta_name(1, 1, 0), delta_name(2, 2, 0)}
