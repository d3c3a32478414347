"""TCP throughput in both directions at once between two network namespaces (bench/tools/loopback-throttle.sh check).

    python3 two_way_throughput.py serve ADDRESS PORT SECONDS                  # in each namespace
    python3 two_way_throughput.py send ADDRESS PORT SECONDS MAX_GBYTES STREAMS  # towards the other one

`send` opens STREAMS TCP connections and writes 1 MiB buffers until SECONDS have passed or MAX_GBYTES are sent;
`serve` accepts them and counts what arrives, then prints one JSON line: bytes, seconds (first byte to last), Gbit/s.
Bounded in time and bytes, and it only ever connects to the address it is given (the other namespace's veth end).
"""
from __future__ import annotations

import json
import socket
import sys
import threading
import time

BUFFER = 1 << 20


def serve(address: str, port: int, seconds: float) -> None:
    listener = socket.create_server((address, port))
    listener.settimeout(seconds + 10)
    counts, first, last, threads = [], [], [], []

    def drain(connection: socket.socket) -> None:
        received = 0
        with connection:
            while chunk := connection.recv(BUFFER):
                if not received:
                    first.append(time.perf_counter())
                received += len(chunk)
            last.append(time.perf_counter())
        counts.append(received)

    deadline = time.monotonic() + seconds + 10
    listener.settimeout(2.0)
    while time.monotonic() < deadline:
        try:
            connection, _ = listener.accept()
        except socket.timeout:
            if threads and all(not thread.is_alive() for thread in threads):
                break
            continue
        connection.settimeout(seconds + 10)
        thread = threading.Thread(target=drain, args=(connection,))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    elapsed = max(last) - min(first)
    print(json.dumps({"received_bytes": sum(counts), "streams": len(counts), "seconds": round(elapsed, 3),
                      "gbit_per_s": round(sum(counts) * 8 / elapsed / 1e9, 3)}), flush=True)


def send(address: str, port: int, seconds: float, max_gbytes: float, streams: int) -> None:
    payload = memoryview(bytearray(BUFFER))
    budget = int(max_gbytes * 1e9 / streams)

    def push() -> None:
        sent, stop = 0, time.monotonic() + seconds
        with socket.create_connection((address, port), timeout=seconds + 10) as connection:
            while sent < budget and time.monotonic() < stop:
                connection.sendall(payload)
                sent += BUFFER

    threads = [threading.Thread(target=push) for _ in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    mode, address, port, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    if mode == "serve":
        serve(address, port, seconds)
    else:
        send(address, port, seconds, float(sys.argv[5]), int(sys.argv[6]))
