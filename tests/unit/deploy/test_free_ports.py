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


def test_a_taken_port_is_never_handed_out() -> None:
    taken = process.free_ports(16)
    # Whatever the system offers next, none of ``taken`` comes back.
    assert not set(process.free_ports(64, taken=taken)) & set(taken)


def test_the_probes_stay_bound_until_every_port_is_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The system offers the port it just freed again (as it may): a picker that closed each probe
    before the next would hand it out twice."""
    offered = iter([41001, 41001, 41002])
    bound: set[int] = set()

    class Probe:
        def __init__(self, *_: object) -> None:
            self.port = 0

        def bind(self, address: tuple[str, int]) -> None:
            port = next(offered)
            while port in bound:  # the real system never offers a port that is still bound
                port = next(offered)
            self.port = port
            bound.add(port)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

        def close(self) -> None:
            bound.discard(self.port)

    monkeypatch.setattr(process.socket, "socket", Probe)
    assert process.free_ports(2) == [41001, 41002]


def test_free_port_is_one_free_port() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", process.free_port()))
