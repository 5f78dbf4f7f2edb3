"""At most one vacuum in flight per key, whatever the interleaving (hypothesis), and the fold itself.

The simulation runs two initiators of one group over one shared log of request, vacuum and cleanup
events (the topics). Each initiator has its own :class:`InitiatorCore`, reads the log at its own pace,
and asks the same gate as the process (owned, caught up with the log as it was at its last
assignment, nothing in flight) before it requests. Commits, vacuum services that start, fail or
commit, cleaners, rebalances that move a key to the other initiator, and restarts that wipe an
initiator's memory are interleaved by hypothesis; the log must never hold two requests of one key
in flight at once, and a key over its threshold with nothing in flight is always requested again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from events.factories import done, rejected, requested, vacuum, vacuum_failed
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis_support import examples

from acidclean.producers.initiator.core import InitiatorCore
from acidclean.producers.initiator.inflight import InFlight
from acidclean.producers.initiator.rules import Figures, Thresholds
from acidclean.schemas.events import VacuumCommitted, VacuumRequested

PARTITIONS = ("ds=1", "ds=2")
THRESHOLDS = Thresholds(delta_num=2)


def _key(partition: str) -> str:
    return f"acme/sales.orders/{partition}"


@dataclass
class Initiator:
    core: InitiatorCore = field(default_factory=InitiatorCore)
    read: int = 0
    barrier: int = 0


@dataclass
class World:
    log: list[object] = field(default_factory=list)
    deltas: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTITIONS, 0))
    owner: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTITIONS, 0))
    initiators: list[Initiator] = field(default_factory=lambda: [Initiator(), Initiator()])
    next_write_id: int = 1

    def truth(self) -> InFlight:
        fold = InFlight()
        for event in self.log:
            fold.apply(event)
        return fold

    def append(self, event: object) -> None:
        if isinstance(event, VacuumRequested):
            assert not self.truth().in_flight(event.key), f"a second request of {event.key} while one is in flight"
        self.log.append(event)

    # what the processes do -------------------------------------------------------------------------

    def commit(self, partition: str) -> None:
        self.deltas[partition] += 1
        name = f"delta_{self.next_write_id:07d}_{self.next_write_id:07d}_0000"
        self.next_write_id += 1
        self.initiators[self.owner[partition]].core.observe_delta(_key(partition), name, 10)

    def tail(self, who: int, count: int) -> None:
        initiator = self.initiators[who]
        for event in self.log[initiator.read : initiator.read + count]:
            initiator.core.observe_lifecycle(event)
        initiator.read = min(len(self.log), initiator.read + count)

    def decide(self, who: int) -> None:
        initiator = self.initiators[who]
        caught_up = initiator.read >= initiator.barrier
        for key in list(initiator.core.dirty):
            partition = key.rsplit("/", 1)[1]
            owned = self.owner[partition] == who
            if owned and not caught_up:
                continue
            initiator.core.dirty.discard(key)
            if not initiator.core.may_request(key, owned=owned, caught_up=caught_up):
                continue
            if initiator.core.needs_listing(key):  # a fresh listing of the storage
                count = self.deltas[partition]
                initiator.core.set_listing(key, Figures(delta_count=count, delta_bytes=10 * count), ())
            if initiator.core.decision(key, THRESHOLDS) is not None:
                assert self.deltas[partition] > THRESHOLDS.delta_num, f"{key} requested on figures the storage lacks"
                request = requested(partition=partition, event_id=uuid.uuid4())
                self.append(request)  # published and acknowledged
                initiator.core.observe_lifecycle(request)

    def rebalance(self, partition: str) -> None:
        old = self.owner[partition]
        self.initiators[old].core.forget([_key(partition)])
        new = 1 - old
        self.owner[partition] = new
        self.initiators[new].barrier = len(self.log)
        # the group hands the uncommitted deltas of the partition to the new owner: it lists the key again
        self.initiators[new].core.dirty.add(_key(partition))

    def restart(self, who: int) -> None:
        self.initiators[who] = Initiator(barrier=len(self.log))
        for partition, owner in self.owner.items():
            if owner == who:
                self.initiators[who].core.dirty.add(_key(partition))  # its uncommitted deltas are read again

    # what the vacuum services and cleaners do ------------------------------------------------------

    def _open(self, partition: str) -> tuple[list[VacuumRequested], list[VacuumCommitted]]:
        fold = self.truth()
        key = _key(partition)
        requests = [e for e in self.log if isinstance(e, VacuumRequested) and e.event_id in fold.open_requests(key)]
        committed = {e.request_id for e in self.log if isinstance(e, VacuumCommitted)}
        cleaned = {getattr(e, "correlation_id", None) for e in self.log if not isinstance(e, VacuumCommitted)}
        vacuums = [e for e in self.log if isinstance(e, VacuumCommitted) and e.key == key and e.event_id not in cleaned]
        return [r for r in requests if r.event_id not in committed], vacuums

    def service(self, partition: str, outcome: str) -> None:
        waiting, _ = self._open(partition)
        if not waiting:
            return
        request = waiting[0]
        if outcome == "fail":
            self.log.append(vacuum_failed(request, event_id=uuid.uuid4()))
        else:
            self.deltas[partition] = 0  # the vacuum wrote a base over every delta
            self.log.append(vacuum(partition=partition, request_id=request.event_id, event_id=uuid.uuid4()))

    def clean(self, partition: str, how: str) -> None:
        _, vacuums = self._open(partition)
        if vacuums:
            v = vacuums[0]
            self.log.append(done(v, event_id=uuid.uuid4()) if how == "done" else rejected(v, event_id=uuid.uuid4()))


PARTITION = st.sampled_from(PARTITIONS)
WHO = st.sampled_from((0, 1))
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), PARTITION),
        st.tuples(st.just("commit"), PARTITION),
        st.tuples(st.just("commit"), PARTITION),
        st.tuples(st.just("tail"), WHO, st.integers(1, 4)),
        st.tuples(st.just("decide"), WHO),
        st.tuples(st.just("service"), PARTITION, st.sampled_from(("fail", "commit"))),
        st.tuples(st.just("clean"), PARTITION, st.sampled_from(("done", "rejected"))),
        st.tuples(st.just("rebalance"), PARTITION),
        st.tuples(st.just("restart"), WHO),
    ),
    max_size=60,
)


@settings(max_examples=examples(1500), deadline=None)
@given(STEPS)
def test_no_interleaving_puts_two_requests_of_one_key_in_flight(steps: list[tuple[object, ...]]) -> None:
    world = World()
    for step in steps:
        getattr(world, str(step[0]))(*step[1:])
    # Quiesce: everyone reads everything and decides. Every key over its threshold with nothing in
    # flight is then requested: nothing was lost on the way (restarts and rebalances included).
    for who in (0, 1):
        world.tail(who, len(world.log))
    for partition in PARTITIONS:
        world.initiators[world.owner[partition]].core.dirty.add(_key(partition))
    for who in (0, 1):
        world.decide(who)
    truth = world.truth()
    for partition in PARTITIONS:
        if world.deltas[partition] > THRESHOLDS.delta_num:
            assert truth.in_flight(_key(partition)), f"{partition}: over the threshold and never requested"


def test_a_request_ends_at_its_failure() -> None:
    fold = InFlight()
    request = requested()
    fold.apply(request)
    assert fold.in_flight(request.key)
    fold.apply(vacuum_failed(request, reason_code="nothing_to_vacuum"))
    assert not fold.in_flight(request.key)


def test_a_request_ends_only_when_its_vacuum_is_cleaned_even_read_out_of_order() -> None:
    request = requested()
    v = vacuum(request_id=request.event_id)
    for order in ([request, v, done(v)], [done(v), v, request], [v, request, done(v)], [request, done(v), v]):
        fold = InFlight()
        for event in order[:-1]:
            fold.apply(event)
        fold.apply(order[-1])
        assert not fold.in_flight(request.key), [type(e).__name__ for e in order]
    fold = InFlight()
    fold.apply(request)
    fold.apply(v)
    assert fold.in_flight(request.key)  # committed but not cleaned: the next request waits


def test_a_dead_lettered_vacuum_ends_its_request_and_a_manual_vacuum_holds_its_key_until_cleaned() -> None:
    request = requested()
    v = vacuum(request_id=request.event_id)
    fold = InFlight()
    for event in (request, v, rejected(v)):
        fold.apply(event)
    assert not fold.in_flight(request.key)
    manual = vacuum()
    fold.apply(manual)
    assert fold.in_flight(manual.key)
    fold.apply(done(manual))
    assert not fold.in_flight(manual.key)


def test_folding_an_event_twice_changes_nothing() -> None:
    request = requested()
    fold = InFlight()
    fold.apply(request)
    fold.apply(vacuum_failed(request))
    fold.apply(request)  # redelivered after its end
    assert not fold.in_flight(request.key)


def test_a_replayed_delta_counts_once_and_a_freed_key_is_listed_again() -> None:
    core = InitiatorCore()
    key = "acme/sales.orders/ds=2025-03-14"
    core.set_listing(key, Figures(delta_count=1, delta_bytes=5), ["delta_0000001_0000001_0000"])
    core.observe_delta(key, "delta_0000001_0000001_0000", 5)  # already listed
    core.observe_delta(key, "delta_0000002_0000002_0000", 5)
    assert core.figures[key].figures.delta_count == 2
    request = requested()
    core.observe_lifecycle(request)
    assert not core.may_request(key, owned=True, caught_up=True)
    assert core.observe_lifecycle(vacuum_failed(request)) == key
    assert core.needs_listing(key) and core.may_request(key, owned=True, caught_up=True)
    assert not core.may_request(key, owned=False, caught_up=True)
    assert not core.may_request(key, owned=True, caught_up=False)


def test_a_dead_lettered_request_ends() -> None:
    request = requested()
    fold = InFlight()
    fold.apply(request)
    fold.apply(rejected(None, table=request.table, partition=request.partition, correlation_id=request.event_id))
    assert not fold.in_flight(request.key)
