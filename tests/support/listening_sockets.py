"""The TCP sockets that processes listen on, read from /proc (Linux): what `ss -ltnp` shows, without needing ss or
psutil on the test machine. /proc/net/tcp and tcp6 list the network namespace's sockets with their inode
(proc(5), /proc/net/tcp: state 0A is LISTEN; addresses are hex in the kernel's byte order, 32 bits at a time), and
/proc/<pid>/fd links each process's sockets as socket:[inode]."""
from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass

LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    host: str
    port: int
    pid: int
    process: str

    @property
    def loopback(self) -> bool:
        address = ipaddress.ip_address(self.host)
        mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, an IPv6 socket bound to 127.0.0.1
        return (mapped or address).is_loopback


def _address(hex_address: str, family: socket.AddressFamily) -> str:
    raw = bytes.fromhex(hex_address)
    native = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # each 32-bit word is host-order
    return socket.inet_ntop(family, native)


def _listening_inodes() -> dict[int, tuple[str, int]]:
    found = {}
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            with open(f"/proc/net/{table}") as file:
                rows = file.read().splitlines()[1:]
        except FileNotFoundError:  # a kernel without IPv6
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == LISTEN:
                address, port = fields[1].split(":")
                found[int(fields[9])] = (_address(address, family), int(port, 16))
    return found


def listeners(pids: list[int]) -> list[Listener]:
    """Every TCP socket the processes `pids` listen on (a process gone meanwhile is skipped)."""
    inodes, found = _listening_inodes(), []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                program, *arguments = file.read().decode(errors="replace").strip("\0").split("\0")
            # The program whole (a clone's path can be long, as in CI), its arguments shortened for messages.
            process = f"{program} {' '.join(arguments)[:80]}".strip()
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        for link in links:
            if link.startswith("socket:[") and int(link[8:-1]) in inodes:
                found.append(Listener(*inodes[int(link[8:-1])], pid, process))
    return found


def processes_with_env(entry: str) -> list[int]:
    """The processes whose environment holds `entry` (NAME=VALUE): those a process started, and theirs, inherit it."""
    wanted, pids = entry.encode(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as file:
                if wanted in file.read().split(b"\0"):
                    pids.append(int(name))
        except OSError:
            continue
    return pids


def listener_of_port(port: int) -> int:
    """The pid of the process listening on `port`."""
    inodes = {inode for inode, (_, bound) in _listening_inodes().items() if bound == port}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = [os.readlink(f"/proc/{name}/fd/{fd}") for fd in os.listdir(f"/proc/{name}/fd")]
        except OSError:
            continue
        if any(link.startswith("socket:[") and int(link[8:-1]) in inodes for link in links):
            return int(name)
    raise LookupError(f"no process of this user listens on port {port}")


def environment_entry(pid: int, name: str) -> str:
    with open(f"/proc/{pid}/environ", "rb") as file:
        for item in file.read().split(b"\0"):
            if item.startswith(name.encode() + b"="):
                return item.decode()
    raise LookupError(f"process {pid} has no {name} in its environment")
