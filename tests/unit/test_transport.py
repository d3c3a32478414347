"""The NCCL transport verdict, on lines written from NCCL's and aws-ofi-nccl's own format strings
(tests/reference/nccl-transport-log-lines.md), and on any real capture dropped into tests/fixtures/nccl/."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_nccl_logs import (
    LOADED_PLUGIN,
    NET_CHANNEL,
    SELECTED_PROVIDER,
    UNRELATED,
    USING_NETWORK,
    Rank,
    nccl_job,
)
from workload.fabric import transport

FIXTURES = Path(__file__).parents[1] / "fixtures" / "nccl"

def job_log(ranks: list[Rank]) -> str:
    """The lines as they reach a Ray job log: interleaved, behind Ray's worker prefix, among other output."""
    out = ["Training started", "(RayTrainWorker pid=99, ip=10.0.1.5) loading model"]
    longest = max(len(rank.lines) for rank in ranks)
    for index in range(longest):
        for rank in ranks:
            if index < len(rank.lines):
                out.append(f"(RayTrainWorker pid={rank.pid}, ip=10.0.1.{rank.rank}) {rank.lines[index]}")
    return "\n".join(out) + "\n"


def key(rank: Rank) -> str:
    return f"{rank.host}:{rank.pid}"


def test_all_ranks_on_efa_pass_expect_efa():
    ranks = nccl_job()
    verdicts = transport.rank_verdicts(job_log(ranks))
    assert set(verdicts) == {key(rank) for rank in ranks}, "one verdict per host:pid of the 8 ranks"
    crossing = {key(ranks[i]) for i in (0, 3, 4, 7)}
    for rank_key, verdict in verdicts.items():
        expected = "efa" if rank_key in crossing else "intra-node"
        assert verdict == expected, f"rank {rank_key}: expected {expected}, got {verdict}"
    assert transport.check_expectation(verdicts, "efa") is None, "a 2-node EFA job must meet expect=efa"
    assert transport.check_expectation(verdicts, "socket") is not None, "an EFA job must fail expect=socket"


def test_every_rank_efa_when_every_rank_crosses_nodes():
    # One GPU per node: every rank sends and receives across nodes.
    ranks = nccl_job(nodes=4, gpus_per_node=1)
    verdicts = transport.rank_verdicts(job_log(ranks))
    assert list(verdicts.values()) == ["efa"] * 4, f"every rank of a 4x1 EFA job should be efa, got {verdicts}"


def test_socket_fallback_on_one_rank_fails_expect_efa():
    # Rank 4 lost the plugin (e.g. no EFA device mounted in its pod) and NCCL fell back to its socket transport.
    ranks = nccl_job(overrides={4: {"network": "Socket", "plugin": False}})
    verdicts = transport.rank_verdicts(job_log(ranks))
    assert verdicts[key(ranks[4])] == "socket", f"rank 4 fell back to NET/Socket, got {verdicts[key(ranks[4])]}"
    assert verdicts[key(ranks[7])] == "efa", "rank 7 still sends over NET/Libfabric with provider efa"
    problem = transport.check_expectation(verdicts, "efa")
    assert problem is not None and f"{key(ranks[4])}=socket" in problem, f"expect=efa must name rank 4: {problem}"


def test_using_network_socket_across_hosts_is_socket_without_net_channels():
    # NCCL_NET=Socket on every rank; a rank that logged no NET channel of its own still uses sockets across nodes.
    ranks = nccl_job(overrides={rank: {"network": "Socket"} for rank in range(8)})
    verdicts = transport.rank_verdicts(job_log(ranks))
    assert set(verdicts.values()) == {"socket"}, f"NCCL_NET=Socket on 2 nodes: every rank socket, got {verdicts}"
    assert transport.check_expectation(verdicts, "socket") is None, "expect=socket must pass on a socket job"


def test_a_lone_rank_log_knows_its_job_spans_nodes_from_nnodes():
    # Only rank 1's debug file is at hand: it never sends across nodes, but nNodes 2 says the job does.
    socket_job = nccl_job(overrides={rank: {"network": "Socket", "plugin": False} for rank in range(8)})
    assert transport.rank_verdicts({"1": socket_job[1].lines}) == {"1": "socket"}, \
        "a rank of a 2-node job with 'Using network Socket' is on sockets even without NET channels of its own"
    efa_job = nccl_job()
    assert transport.rank_verdicts({"1": efa_job[1].lines}) == {"1": "intra-node"}, \
        "a middle rank of a 2-node EFA job keeps its traffic on the node"


def test_single_node_is_intra_node_and_fails_expect_efa():
    ranks = nccl_job(nodes=1)
    verdicts = transport.rank_verdicts(job_log(ranks))
    assert set(verdicts.values()) == {"intra-node"}, f"4 ranks on one node: all intra-node, got {verdicts}"
    problem = transport.check_expectation(verdicts, "efa")
    assert problem is not None and "no rank crossed nodes" in problem, f"single node must fail expect=efa: {problem}"
    assert transport.check_expectation(verdicts, "intra-node") is None, "expect=intra-node passes on one node"


def test_single_node_with_using_network_socket_is_intra_node():
    # Without a plugin NCCL still prints "Using network Socket" on one node; no traffic leaves the node.
    ranks = nccl_job(nodes=1, overrides={rank: {"network": "Socket", "plugin": False} for rank in range(4)})
    verdicts = transport.rank_verdicts(job_log(ranks))
    assert set(verdicts.values()) == {"intra-node"}, f"one node, network Socket: intra-node, got {verdicts}"


def test_plugin_loaded_but_provider_tcp_is_socket():
    ranks = nccl_job(overrides={rank: {"provider": "tcp"} for rank in range(8)})
    evidence = transport.rank_evidence(job_log(ranks))
    crossing = evidence[key(ranks[3])]
    assert crossing.plugin == "Libfabric" and crossing.provider == "tcp", "rank 3 evidence: plugin Libfabric, tcp"
    assert crossing.verdict == "socket", f"libfabric over tcp is the TCP fallback; rank 3 got {crossing.verdict}"
    assert "tcp" in crossing.reason, f"the reason should name the provider: {crossing.reason}"
    assert transport.check_expectation({k: e.verdict for k, e in evidence.items()}, "efa") is not None


def test_truncated_log_is_unknown_and_fails_expect_efa():
    ranks = nccl_job()
    text = job_log(ranks)
    first_channel = text.index("Channel ")
    verdicts = transport.rank_verdicts(text[:first_channel])
    assert verdicts and set(verdicts.values()) == {"unknown"}, f"no channel lines yet: all unknown, got {verdicts}"
    problem = transport.check_expectation(verdicts, "efa")
    assert problem is not None and "unknown" in problem, f"unknown ranks must fail expect=efa: {problem}"


def test_line_cut_inside_net_name_is_not_a_channel():
    rank = Rank(3, "ray-train-gpu-worker-0", 3)
    rank.log(LOADED_PLUGIN % ("Libfabric", 10))
    rank.log(SELECTED_PROVIDER % ("efa", "efa-direct", 1))
    rank.log(USING_NETWORK % "Libfabric")
    full = NET_CHANNEL % (0, 0, 3, 3, 4, 0, "send", "Libfabric", 0, "")
    rank.log(full[: full.index("Libfabric") + 3])
    assert transport.rank_verdicts("\n".join(rank.lines)) == {key(rank): "unknown"}, \
        "a line cut at 'via NET/Lib' proves nothing"


def test_no_nccl_lines_fail_every_expectation_but_any():
    assert transport.rank_verdicts("Training started\nloss 1.2\n") == {}, "no NCCL lines, no ranks"
    assert transport.check_expectation({}, "efa") is not None, "no verdicts must fail expect=efa"
    assert transport.check_expectation({}, "any") is None, "expect=any never fails"
    with pytest.raises(ValueError, match="expect must be one of"):
        transport.check_expectation({}, "ib")


def test_per_rank_debug_files_from_the_summary_win_over_the_job_log():
    efa = nccl_job()
    socket = nccl_job(overrides={rank: {"network": "Socket", "plugin": False} for rank in range(8)})
    summary = {"nccl_logs": {rank.rank: [line for line in rank.lines if transport.is_transport_line(line)]
                             for rank in efa}}
    verdicts = transport.verdicts_from_summary(summary, job_log(socket))
    assert set(verdicts) == {str(rank) for rank in range(8)}, "summary ranks are the keys, as strings"
    assert verdicts["3"] == "efa" and verdicts["4"] == "efa", f"nccl_logs say efa on ranks 3 and 4: {verdicts}"
    fallback = transport.verdicts_from_summary({"nccl_logs": {}}, job_log(socket))
    assert set(fallback.values()) == {"socket"}, f"empty nccl_logs: the job log decides (socket), got {fallback}"


def test_is_transport_line_keeps_exactly_what_the_verdict_reads():
    ranks = nccl_job(overrides={4: {"network": "Socket", "plugin": False}})
    lines = job_log(ranks).splitlines()
    kept = [line for line in lines if transport.is_transport_line(line)]
    for message in UNRELATED:
        assert not any(line.endswith(message) for line in kept), f"{message!r} is not a transport line"
    assert not transport.is_transport_line("Using network Libfabric"), "a line without NCCL's prefix is not kept"
    assert transport.rank_evidence("\n".join(kept)).keys() == transport.rank_evidence("\n".join(lines)).keys()
    assert transport.rank_verdicts("\n".join(kept)) == transport.rank_verdicts("\n".join(lines)), \
        "filtering to transport lines must not change any verdict"


def test_cli_prints_json_and_exits_nonzero_when_expectation_fails(tmp_path, capsys):
    efa_log = tmp_path / "efa.log"
    efa_log.write_text(job_log(nccl_job()))
    socket_log = tmp_path / "socket.log"
    socket_log.write_text(job_log(nccl_job(overrides={4: {"network": "Socket", "plugin": False}})))

    assert transport.main([str(efa_log), "--expect", "efa"]) == 0, "an EFA log passes --expect efa"
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["verdicts"]["ray-train-gpu-worker-0:4003"] == "efa", report

    assert transport.main([str(socket_log), "--expect", "efa"]) == 1, "a socket fallback fails --expect efa"
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert err == f"error: {report['problem']}\n", "a person reads the verdict as one error line, as every command's"
    assert report["ok"] is False and "ray-train-gpu-worker-1:4004=socket" in report["problem"], report
    assert report["ranks"]["ray-train-gpu-worker-1:4004"]["networks"] == ["Socket"], report["ranks"]


def test_cli_refuses_an_unknown_expectation_naming_the_allowed_ones(tmp_path, capsys):
    log = tmp_path / "efa.log"
    log.write_text(job_log(nccl_job()))
    with pytest.raises(SystemExit) as exit:
        transport.main([str(log), "--expect", "tcp"])
    error = capsys.readouterr().err
    assert exit.value.code == 2 and "--expect" in error, f"a bad --expect must be a usage error naming it: {error}"
    assert all(name in error for name in transport.EXPECTATIONS), f"the error must list the allowed values: {error}"


def test_cli_runs_as_a_module_without_ray_or_torch(tmp_path):
    log = tmp_path / "single.log"
    log.write_text(job_log(nccl_job(nodes=1)))
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['transport', sys.argv[1], '--expect', 'efa']\n"
        "try:\n"
        "    runpy.run_module('workload.transport', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    heavy = sorted(m for m in ('ray', 'torch') if m in sys.modules)\n"
        "    print('HEAVY', heavy, 'RC', exit.code)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(log)], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).parents[2])
    assert "HEAVY [] RC 1" in done.stdout, \
        f"python -m workload.transport must exit 1 on a single-node log without importing ray/torch: {done}"


def _fixture_captures() -> list[Path]:
    if not FIXTURES.is_dir():
        return []
    return sorted(path for path in FIXTURES.iterdir() if not path.name.startswith(".") and path.suffix != ".md")


def _expected_from_name(name: str) -> str | None:
    lowered = name.lower()
    for needle, expect in (("intra-node", "intra-node"), ("single-node", "intra-node"), ("socket", "socket"),
                           ("tcp", "socket"), ("efa", "efa")):
        if needle in lowered:
            return expect
    return None


@pytest.mark.parametrize("capture", _fixture_captures(), ids=lambda path: path.name)
def test_captured_nccl_output(capture: Path):
    """Every file (or folder of per-rank files) under tests/fixtures/nccl/ is judged; its name says what it
    should show (see the README there)."""
    files = sorted(p for p in capture.rglob("*") if p.is_file()) if capture.is_dir() else [capture]
    text = "\n".join(path.read_text(encoding="utf-8", errors="replace") for path in files)
    verdicts = transport.rank_verdicts(text)
    assert verdicts, f"{capture.name}: no NCCL INFO lines with the host:pid:tid prefix were found"
    expect = _expected_from_name(capture.name)
    if expect is None:
        assert "unknown" not in verdicts.values(), f"{capture.name}: every rank should get a verdict: {verdicts}"
    else:
        problem = transport.check_expectation(verdicts, expect)
        assert problem is None, f"{capture.name}: expected {expect}: {problem}"


def test_real_one_gpu_capture_is_intra_node_and_fails_expect_efa(capsys):
    """NCCL 2.28 on one H200 (bench/record/ray_overhead.py, NCCL_DEBUG_FILE): a one-rank communicator prints
    `Using network Socket` and `nNodes 1` but no channel to a peer; that is intra-node, never EFA."""
    capture = FIXTURES / "h200-one-gpu-intra-node.log"
    assert transport.rank_verdicts(capture.read_text()) == {"vm:716": "intra-node"}
    assert transport.main([str(capture), "--expect", "efa"]) == 1, "a one-GPU run must fail --expect efa"
    assert '"ok": false' in capsys.readouterr().out


@pytest.mark.parametrize("capture, verdict", [
    ("h200x2-nvlink-intra-node", "intra-node"),
    ("h200x2-socket-fallback", "socket"),
])
def test_real_two_gpu_captures_fail_expect_efa(capture, verdict):
    """Real NCCL 2.28 output of bench/record/scaling.py on 2 H200s: NVLink is intra-node, the forced socket transport
    is socket on both ranks, and neither passes as EFA (the gate the Pulumi job resource applies)."""
    files = sorted((FIXTURES / capture).glob("*.log"))
    assert len(files) == 2, f"{capture}: expected one NCCL debug file per rank"
    verdicts = transport.rank_verdicts("\n".join(path.read_text() for path in files))
    assert sorted(verdicts.values()) == [verdict, verdict], f"{capture}: expected {verdict} on both ranks: {verdicts}"
    assert transport.main([str(path) for path in files] + ["--expect", "efa"]) == 1, f"{capture} must fail efa"
