"""Which transport NCCL really used, read from its NCCL_DEBUG=INFO lines: EFA, the silent TCP fallback, or none.

Nothing here imports ray or torch: this module travels to the cluster inside the workload package (each rank
keeps only its transport lines with `is_transport_line`) and the Pulumi side reads the verdict with it.

NCCL prefixes every line with `<hostname>:<pid>:<tid> [<cudaDev>] NCCL INFO `; aws-ofi-nccl logs through
NCCL, so its lines carry the same prefix. The format strings are in
tests/reference/nccl-transport-log-lines.md. One process (host:pid) is one rank.

Verdict per rank:
- `efa`: the OFI plugin loaded, libfabric selected provider `efa`, and inter-node channels via NET/Libfabric;
- `socket`: inter-node traffic over TCP: a channel via NET/Socket, `Using network Socket` in a job that spans
  several hosts, or the OFI plugin on a non-EFA libfabric provider (`tcp`, `sockets`), which is the same
  fallback one layer down;
- `intra-node`: channel lines, none of them through the network (P2P, SHM);
- `unknown`: the lines that decide are missing (NCCL_DEBUG not INFO, a truncated log, no channel set up yet).

Usage: python -m workload.transport LOGFILE [LOGFILE...] [--expect efa] (exit codes: workload/cli.py)
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping, Sequence

from workload import cli
from workload.config.secret_text import masked, masked_data

VERDICTS = ("efa", "socket", "intra-node", "unknown")
EXPECTATIONS = ("efa", "socket", "intra-node", "any")

_PREFIX = re.compile(r"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]*):(?P<pid>\d+):\d+ \[\d+\] NCCL INFO (?P<message>.*)")
_USING_NETWORK = re.compile(r"^Using network (?P<name>.+?)\s*$")
_PLUGIN_LOADED = re.compile(r"NET/Plugin: Loaded net plugin (?P<name>.+?) \(v\d+\)")
_OFI_INIT = re.compile(r"Initializing aws-ofi-nccl")
# Older aws-ofi-nccl releases wrote "Selected Provider is efa (found 4 nics)".
_PROVIDER = re.compile(r"Selected provider is (?P<provider>[\w;+-]+)", re.IGNORECASE)
# "Channel 00/0 : 3[3] -> 4[0] [send] via NET/Libfabric/0/GDRDMA"; older NCCL has no "/0" after the channel.
_CHANNEL = re.compile(r"^Channel \d+(?:/\d+)? : .* via (?P<path>\S.*)$")
# The device index after the name is required, so a line cut inside "NET/Libf" is not mistaken for a channel.
_NET_PATH = re.compile(r"^NET/(?P<name>[^/]+)/\d")
_SOCKET_INIT = re.compile(r"NET/Socket : Using")
# Communicator init: "comm 0x... rank 3 nRanks 8 nNodes 2 localRanks 4 localRank 3 MNNVL 0". It tells a rank
# whose log is the only one at hand that the job spans nodes.
_NODES = re.compile(r"\bnNodes (?P<nodes>\d+)")
_OTHER_TRANSPORT_LINE = re.compile(r"NCCL_NET_PLUGIN set by environment|Using Libfabric version|NET/OFI")


def _is_libfabric(name: str) -> bool:
    return "libfabric" in name.lower()


def _is_socket(name: str) -> bool:
    return name.strip().lower() == "socket"


def is_transport_line(line: str) -> bool:
    """True for the NCCL / aws-ofi-nccl INFO lines the verdict reads; a rank keeps only these of its debug file."""
    match = _PREFIX.search(line)
    if match is None:
        return False
    message = match["message"]
    return bool(
        _USING_NETWORK.match(message)
        or _PLUGIN_LOADED.search(message)
        or _OFI_INIT.search(message)
        or _PROVIDER.search(message)
        or _CHANNEL.match(message)
        or _SOCKET_INIT.search(message)
        or _NODES.search(message)
        or _OTHER_TRANSPORT_LINE.search(message)
    )


@dataclass
class RankEvidence:
    """What one rank's lines say about its transport, and the verdict drawn from them."""

    hosts: set[str] = field(default_factory=set)
    plugin: str = ""
    """Name of the net plugin NCCL loaded (`Libfabric`), or `aws-ofi-nccl` when only its init line was seen."""
    provider: str = ""
    networks: set[str] = field(default_factory=set)
    """Every `Using network X` (one per communicator)."""
    net_channels: set[str] = field(default_factory=set)
    """Names after NET/ on channel lines: `Libfabric`, `Socket`."""
    local_channels: int = 0
    nodes: int = 0
    """The largest nNodes of this rank's communicators (0 when no init line was seen)."""
    verdict: str = "unknown"
    reason: str = ""

    def as_dict(self) -> dict:
        data = asdict(self)
        for key in ("hosts", "networks", "net_channels"):
            data[key] = sorted(data[key])
        return data


def _read_line(evidence: RankEvidence, line: re.Match) -> None:
    """Add one NCCL INFO line (a match of _PREFIX) to its rank's evidence."""
    evidence.hosts.add(line["host"])
    message = line["message"]
    if match := _NODES.search(message):
        evidence.nodes = max(evidence.nodes, int(match["nodes"]))
    if match := _USING_NETWORK.match(message):
        evidence.networks.add(match["name"])
    elif match := _PLUGIN_LOADED.search(message):
        evidence.plugin = match["name"]
    elif _OFI_INIT.search(message):
        evidence.plugin = evidence.plugin or "aws-ofi-nccl"
    elif match := _PROVIDER.search(message):
        evidence.provider = match["provider"].lower()
    elif match := _CHANNEL.match(message):
        path = match["path"]
        if net := _NET_PATH.match(path):
            evidence.net_channels.add(net["name"])
        elif not path.startswith("NET/"):
            evidence.local_channels += 1


def _decide(evidence: RankEvidence, multi_host: bool) -> tuple[str, str]:
    sockets = [name for name in evidence.net_channels if _is_socket(name)]
    if sockets:
        return "socket", "inter-node channels via NET/Socket"
    if multi_host and any(_is_socket(name) for name in evidence.networks):
        return "socket", "Using network Socket in a job across hosts"
    libfabric = [name for name in evidence.net_channels if _is_libfabric(name)]
    if libfabric:
        if evidence.provider and evidence.provider != "efa":
            return "socket", f"NET/Libfabric channels on libfabric provider {evidence.provider!r}, not efa"
        if not evidence.provider:
            return "unknown", "NET/Libfabric channels, but no 'Selected provider is' line"
        plugin_seen = evidence.plugin or any(_is_libfabric(name) for name in evidence.networks)
        if not plugin_seen:
            return "unknown", "NET/Libfabric channels, but no line shows the OFI plugin loading"
        return "efa", "OFI plugin, provider efa, inter-node channels via NET/Libfabric"
    if evidence.net_channels:
        names = ", ".join(sorted(evidence.net_channels))
        return "unknown", f"inter-node channels via an unexpected network: {names}"
    if evidence.local_channels:
        return "intra-node", "channels only through P2P/SHM, none through the network"
    if evidence.nodes == 1 and not multi_host:
        # A communicator of one rank (one GPU) sets up no channel to a peer, so it prints no channel lines.
        return "intra-node", "every communicator is on one node (nNodes 1): nothing crosses the network"
    return "unknown", "no channel lines (NCCL_DEBUG not INFO, or the log ends before the channels were set up)"


def _decide_all(per_rank: dict[str, RankEvidence]) -> dict[str, RankEvidence]:
    hosts = set().union(*(evidence.hosts for evidence in per_rank.values())) if per_rank else set()
    multi_host = len(hosts) > 1 or any(evidence.nodes > 1 for evidence in per_rank.values())
    for evidence in per_rank.values():
        evidence.verdict, evidence.reason = _decide(evidence, multi_host)
    return per_rank


def rank_evidence(logs: str | Mapping[object, str | Iterable[str]]) -> dict[str, RankEvidence]:
    """Evidence and verdict per rank.

    `logs` is either one text (a job log or a debug file: lines grouped by host:pid, the key of each rank), or
    the per-rank mapping the training summary gives ({rank: lines or text}, keys kept as strings).
    """
    per_rank: dict[str, RankEvidence] = {}
    if isinstance(logs, str):
        for line in logs.splitlines():
            if match := _PREFIX.search(line):
                _read_line(per_rank.setdefault(f"{match['host']}:{match['pid']}", RankEvidence()), match)
    else:
        for rank, lines in logs.items():
            evidence = per_rank.setdefault(str(rank), RankEvidence())
            for line in lines.splitlines() if isinstance(lines, str) else lines:
                if match := _PREFIX.search(line):
                    _read_line(evidence, match)
    return _decide_all(per_rank)


def rank_verdicts(logs: str | Mapping[object, str | Iterable[str]]) -> dict[str, str]:
    """{rank: verdict}, verdicts from VERDICTS. Ranks are host:pid for a text, the given keys for a mapping."""
    return {rank: evidence.verdict for rank, evidence in rank_evidence(logs).items()}


def verdicts_from_summary(summary: Mapping | None, job_log: str) -> dict[str, str]:
    """The verdicts of a finished job: from each rank's own NCCL debug lines when the summary has them, else
    from whatever NCCL lines reached the job log."""
    nccl_logs = (summary or {}).get("nccl_logs") or {}
    if any(nccl_logs.values()):
        return rank_verdicts(nccl_logs)
    return rank_verdicts(job_log)


def check_expectation(verdicts: Mapping[str, str], expect: str) -> str | None:
    """None when the verdicts meet `expect`, else a message saying which ranks did not.

    Ranks whose own channels never leave their node (`intra-node`) are fine in a multi-node job: with one NIC
    per node only the ranks at the ends of each ring cross nodes. The job must still show `expect` on at least
    one rank, so a single-node run does not pass as EFA.
    """
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {', '.join(EXPECTATIONS)}; got {expect!r}")
    if expect == "any":
        return None
    if not verdicts:
        return f"expected transport {expect}, but no NCCL transport lines were found for any rank"
    allowed = {expect, "intra-node"}
    wrong = {rank: verdict for rank, verdict in sorted(verdicts.items()) if verdict not in allowed}
    if wrong:
        listed = ", ".join(f"{rank}={verdict}" for rank, verdict in wrong.items())
        return f"expected transport {expect} on every rank that crosses nodes; got {listed}"
    if expect not in verdicts.values():
        return f"expected transport {expect}, but no rank crossed nodes (all intra-node)"
    return None


# The most bytes of log read, all LOGFILEs together. NCCL_DEBUG=INFO prints, per rank, its init lines and one
# "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/..." line per channel and connected peer, sends and receives
# (nccl src/transport/net.cc, p2p.cc, shm.cc: tests/reference/nccl-transport-log-lines.md): at 32 channels, with
# ring and tree peers, some hundreds of lines of about 120 bytes, under 100 KiB a rank (an estimate from the format
# strings, not a measurement). A 1,000-rank job's init log is then under 100 MiB; 512 MiB leaves five times that for
# the training's own output around it, and bounds what this command holds in memory (a 4 GiB file was a MemoryError).
MAX_LOG_BYTES = 512 * 2**20
# A log's first bytes that say it is compressed (each format's magic number: RFC 1952 2.3.1 gzip ID1 ID2 0x1f 0x8b;
# zstd's frame magic 0xFD2FB528 little-endian, RFC 8878 3.1.1; bzip2's "BZh"; xz's header magic, the .xz file format
# 2.1.1.1; LZ4's frame magic 0x184D2204; zip's local file header "PK\3\4"). Read as text, such a log held "no NCCL
# transport lines" - a wrong answer about a log that has them. gzip (what `gzip job.log`, and log shippers, write)
# is decompressed here, within the same MAX_LOG_BYTES of text; the others are refused naming the file.
GZIP_MAGIC = b"\x1f\x8b"
OTHER_COMPRESSIONS = {b"\x28\xb5\x2f\xfd": "zstd-compressed", b"BZh": "bzip2-compressed",
                      b"\xfd7zXZ\x00": "xz-compressed", b"\x04\x22\x4d\x18": "LZ4-compressed",
                      b"PK\x03\x04": "a zip archive"}


# The byte order marks of UTF-16 (little and big endian): a log saved as UTF-16 is read as its text, not searched as
# bytes whose every other byte is NUL (which finds no NCCL line: a wrong verdict about a log that has them).
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _decompressed(path: str, data: bytes, max_bytes: int) -> bytes:
    """A log's text: `data` itself, or its gzip stream decompressed (at most `max_bytes`, read no further: a small
    file that inflates to gigabytes stops there), or UsageError naming LOGFILE for another compression."""
    import gzip
    import io
    import zlib

    if (what := next((name for magic, name in OTHER_COMPRESSIONS.items() if data.startswith(magic)), None)):
        raise cli.UsageError(f"LOGFILE {path} is {what} (its first bytes say so), which is not read: decompress it "
                             "(gzip is read)")
    if data.startswith(UTF16_BOMS):  # Windows PowerShell 5's `>` writes UTF-16 with its byte order mark
        try:
            return data.decode("utf-16").encode("utf-8")
        except UnicodeDecodeError:
            raise cli.UsageError(f"LOGFILE {path} starts as UTF-16 text but is not; give the log as UTF-8") from None
    if not data.startswith(GZIP_MAGIC):
        return data
    try:
        text = gzip.GzipFile(fileobj=io.BytesIO(data)).read(max_bytes + 1)
    except (OSError, EOFError, zlib.error) as error:  # BadGzipFile is an OSError; a stream cut short, EOFError
        raise cli.UsageError(f"LOGFILE {path} starts as gzip but cannot be decompressed ({type(error).__name__}); "
                             "give the whole file, or the log uncompressed") from None
    if len(text) > max_bytes:
        raise cli.UsageError(f"LOGFILE {path} decompresses to more than {max_bytes:,} bytes (the logs read at most "
                             f"{MAX_LOG_BYTES:,} in all); give the job's log, or the files NCCL_DEBUG_FILE names")
    return text


def read_log(path: str, max_bytes: int) -> bytes:
    """A LOGFILE's text (gzip decompressed: _decompressed), through the rule of every file the user names
    (workload/user_files.py: a regular file, within `max_bytes`, without holes; a FIFO refused unopened), or
    UsageError naming LOGFILE."""
    from workload import user_files

    try:
        data = user_files.read_bytes(path, max(max_bytes, 0))
    except user_files.Refused as refused:
        more = (f" (the LOGFILEs before it took {MAX_LOG_BYTES - max_bytes:,} of the {MAX_LOG_BYTES:,} bytes read "
                "at most)") if max_bytes < MAX_LOG_BYTES and "bytes" in refused.why else ""
        raise cli.UsageError(f"LOGFILE {path} {refused.why}{more}; give the job's log, or the files NCCL_DEBUG_FILE "
                             "names") from None
    except OSError as error:
        raise cli.UsageError(f"LOGFILE {path}: {error.strerror}") from None
    return _decompressed(path, data, max(max_bytes, 0))


def main(argv: Sequence[str] | None = None) -> int:
    parser = cli.parser(
        "python -m workload.transport",
        "Print the NCCL transport of every rank found in NCCL_DEBUG=INFO logs (a job log, or the files\n"
        "NCCL_DEBUG_FILE names) as JSON.\n\n"
        "  python -m workload.transport job.log --expect efa",
        check_failed="the transport is not --expect, or no rank's transport lines were found")
    parser.add_argument("logfiles", nargs="+", metavar="LOGFILE", help="job log or NCCL_DEBUG_FILE output")
    parser.add_argument("--expect", default="any", choices=EXPECTATIONS,
                        help="the transport every rank that crosses nodes must show; any: report only")
    args = parser.parse_args(argv)
    logs: list[bytes] = []
    for path in args.logfiles:
        logs.append(read_log(path, MAX_LOG_BYTES - sum(map(len, logs))))
    text = "\n".join(log.decode("utf-8", errors="replace") for log in logs) + "\n"
    evidence = rank_evidence(text)
    verdicts = {rank: item.verdict for rank, item in evidence.items()}
    problem = check_expectation(verdicts, args.expect)
    if not verdicts:
        # Even with --expect any: an answer of "ok" about a log that says nothing would be a false all-clear.
        problem = ("no NCCL transport lines in the given log(s): was NCCL_DEBUG=INFO set, and did the job get as "
                   "far as its first collective?")
    # Hosts, network and plugin names are the log's words, and a log is untrusted input: a line the job printed may
    # hold a token (NCCL INFO env HF_TOKEN=...), so what is printed of it is masked as every refusal is.
    print(json.dumps(masked_data({
        "expect": args.expect,
        "ok": problem is None,
        "problem": problem,
        "verdicts": verdicts,
        "ranks": {rank: item.as_dict() for rank, item in evidence.items()},
    }), indent=2, sort_keys=True))
    if problem is not None:  # the JSON is for scripts; a person reads the verdict as every command's error line
        print(f"error: {masked(problem)}", file=sys.stderr)
    return cli.OK if problem is None else cli.CHECK_FAILED

