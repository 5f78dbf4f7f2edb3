"""Ports the local stack hands its services: different from each other and free when handed out."""

from __future__ import annotations

import socket

import pytest

import acidclean.deploy.local.process as process


def test_ports_picked_together_are_all_different_and_each_can_be_bound() -> None:
    ports = process.free_ports(64)
    assert len(set(ports)) == 64
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", port))


class _System:
    """A socket factory standing in for the system: each bind gets the next offered port that is not
    bound at the moment (as the real system never hands out a bound port)."""

    def __init__(self, offered: list[int]) -> None:
        self.offered = iter(offered)
        self.bound: set[int] = set()

    def __call__(self, *_: object) -> _Probe:
        return _Probe(self)


class _Probe:
    def __init__(self, system: _System) -> None:
        self.system, self.port = system, 0

    def bind(self, address: tuple[str, int]) -> None:
        port = next(self.system.offered)
        while port in self.system.bound:
            port = next(self.system.offered)
        self.port = port
        self.system.bound.add(port)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def close(self) -> None:
        self.system.bound.discard(self.port)


def test_the_probes_stay_bound_until_every_port_is_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The system offers the port it just freed again (as it may): a picker that closed each probe
    before the next would hand it out twice."""
    monkeypatch.setattr(process.socket, "socket", _System([41001, 41001, 41002]))
    assert process.free_ports(2) == [41001, 41002]


def test_a_taken_port_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The system offers a port the caller already gave to another service: it is passed over."""
    monkeypatch.setattr(process.socket, "socket", _System([9092, 41003]))
    assert process.free_ports(1, taken=[9092]) == [41003]


def test_free_port_is_one_free_port() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", process.free_port()))
