"""NCCL's INFO lines as ranks write them, from NCCL's and aws-ofi-nccl's own format strings
(tests/reference/nccl-transport-log-lines.md): a job's ranks (`nccl_job`) for the transport verdict's tests and for the
fake job servers' logs."""
from __future__ import annotations

# The format strings, as they stand in the C sources.
PREFIX = "%s:%d:%d [%d] NCCL INFO "
USING_NETWORK = "Using network %s"
LOADED_PLUGIN = "NET/Plugin: Loaded net plugin %s (v%d)"
PLUGIN_ENV = "NCCL_NET_PLUGIN set by environment to %s"
OFI_INIT = "NET/OFI Initializing aws-ofi-nccl %s"
LIBFABRIC_VERSION = "NET/OFI Using Libfabric version %u.%u"
SELECTED_PROVIDER = "NET/OFI Selected provider is %s, fabric is %s (found %d nics)"
SOCKET_INIT = "NET/Socket : Using%s"
COMM_INIT = "comm %s rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d"
NET_CHANNEL = "Channel %02d/%d : %d[%d] -> %d[%d] [%s] via NET/%s/%d%s"
P2P_CHANNEL = "Channel %02d/%d : %d[%d] -> %d[%d] via P2P/%s"
UNRELATED = ["cudaDriverVersion 12080", "Bootstrap: Using eth0:10.0.1.5<0>", "Connected all rings, use ring PXN 0"]


class Rank:
    """One NCCL process: its host, pid, global rank and local GPU, and the network it will use."""

    def __init__(self, rank: int, host: str, local: int, *, network="Libfabric", provider="efa", plugin=True):
        self.rank, self.host, self.local = rank, host, local
        self.pid = 4000 + rank
        self.network, self.provider, self.plugin = network, provider, plugin
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(PREFIX % (self.host, self.pid, self.pid + 50, self.local) + message)


def nccl_job(nodes: int = 2, gpus_per_node: int = 4, channels: int = 2, overrides: dict | None = None) -> list[Rank]:
    """The INFO lines of an all-reduce ring over `nodes` x `gpus_per_node` ranks with one NIC per node, so only
    the last rank of a node sends across and the first receives (as on g6.12xlarge). `overrides` maps a rank
    to Rank keyword arguments, to break one rank."""
    world = nodes * gpus_per_node
    ranks = [
        Rank(rank, f"ray-train-gpu-worker-{rank // gpus_per_node}", rank % gpus_per_node,
             **(overrides or {}).get(rank, {}))
        for rank in range(world)
    ]
    for rank in ranks:
        rank.log("cudaDriverVersion 12080")
        if rank.plugin:
            rank.log(PLUGIN_ENV % "ofi")
            rank.log(LOADED_PLUGIN % ("Libfabric", 10))
            rank.log(OFI_INIT % "v1.16.3")
            rank.log(LIBFABRIC_VERSION % (1, 22))
            rank.log(SELECTED_PROVIDER % (rank.provider, "efa-direct" if rank.provider == "efa" else "10.0.1.0/24", 1))
        if rank.network == "Socket":
            rank.log(SOCKET_INIT % " [0]eth0:10.0.1.5<0>")
        rank.log(USING_NETWORK % rank.network)
        rank.log(COMM_INIT % ("0x55d7c8a0", rank.rank, world, nodes, gpus_per_node, rank.local, 0))
    for channel in range(channels):
        for sender in ranks:
            receiver = ranks[(sender.rank + 1) % world]
            if sender.host == receiver.host:
                sender.log(P2P_CHANNEL % (channel, 0, sender.rank, sender.local, receiver.rank, receiver.local,
                                          "CUMEM/read"))
            else:
                ends = (channel, 0, sender.rank, sender.local, receiver.rank, receiver.local)
                sender.log(NET_CHANNEL % (*ends, "send", sender.network, 0, ""))
                receiver.log(NET_CHANNEL % (*ends, "receive", receiver.network, 0, ""))
    for rank in ranks:
        rank.log("Connected all rings, use ring PXN 0")
    return ranks
