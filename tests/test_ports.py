"""An environment's ports: free, outside the kernel's ephemeral range (where clients' outgoing
connections take theirs), and never another starting environment's."""

from __future__ import annotations

import socket

from harness.environment.ports import LOOPBACK, LOWEST, ephemeral_range, free_ports


def test_ports_are_free_distinct_and_outside_the_ephemeral_range() -> None:
    low, high = ephemeral_range()
    ports = free_ports(40)
    assert len(set(ports)) == 40
    assert all(not low <= p <= high for p in ports)
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind((LOOPBACK, port))  # free indeed


def test_taken_and_bound_ports_are_never_picked() -> None:
    first = free_ports(30)
    again = free_ports(30, taken=set(first))
    assert not set(first) & set(again)
    low, _ = ephemeral_range()
    bound, *others = free_ports(3)
    taken = set(range(LOWEST, low)) - {bound, *others}  # only these three to choose from
    with socket.socket() as busy:
        busy.bind((LOOPBACK, bound))
        assert sorted(free_ports(2, taken=taken)) == sorted(others)
