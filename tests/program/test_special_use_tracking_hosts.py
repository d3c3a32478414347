"""A tracking server under a special-use domain (workload/config/special_names.py: RFC 6761, 6762, 7686, 8375, 9476,
ICANN's .internal) is refused on every path that would hand it to MLflow: the preview's trainMlflowTrackingUri and
`tools.job submit --mlflow_tracking_uri` (the stack's egress rule, infra/config/experiment_tracking.py: public DNS never
resolves any of them), and `workload.local` for the names no resolver answers anywhere (.onion, .invalid)."""
from __future__ import annotations

import pytest

from infra import config
from infra.config.experiment_tracking import tracking_uri_problem
from tests.program.test_refusals_at_preview import DEV, program_refusal
from tests.support.cli_process import run_cli
from workload import cli
from workload.config import TrainConfig, special_names
from workload.run import preflight

MLFLOW = {"trainEnabled": True, "trainReportTo": "mlflow"}


@pytest.mark.parametrize("host, domain", [
    ("abcdefghijklmnop234567abcdefghijklmnop234567abcdefghijklmn.onion", ".onion (RFC 7686)"),
    ("Tracker.Team.INVALID.", ".invalid (RFC 6761)"),
    ("mlflow.team.test", ".test (RFC 6761)"),
    ("runs.example", ".example (RFC 6761)"),
    ("mlflow.corp.alt", ".alt (RFC 9476)"),
    ("mlflow.lab.home.arpa", ".home.arpa (RFC 8375)"),
])
def test_the_preview_refuses_a_special_use_host_naming_the_key(host, domain):
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | MLFLOW | {"trainMlflowTrackingUri": f"https://{host}/mlflow"})
    message = str(refused.value)
    assert message.startswith("config key 'trainMlflowTrackingUri': ") and domain in message, message


def test_the_whole_program_refuses_it_before_any_resource():
    message = program_refusal(MLFLOW | {"trainMlflowTrackingUri": "https://tracking7q.onion/"})
    assert ".onion (RFC 7686)" in message, message


def test_public_names_that_merely_contain_the_words_stay_allowed():
    for host in ("mlflow.example.com", "test.mlflow.org", "onion.example.org", "invalid-names.example.net"):
        assert tracking_uri_problem(f"https://{host}/", None) is None, host
    assert special_names.not_public("mlflow.example.com") is None
    assert special_names.never_resolved("mlflow.team.test") is None  # /etc/hosts may name it on one's own machine


def test_tools_job_submit_refuses_it_naming_the_flag():
    code, stderr, _, _ = run_cli("tools.job", ["submit", "--stack", "dev", "--print_config", "--", "--report_to",
                                               "mlflow", "--mlflow_tracking_uri", "https://runs.team.invalid/"])
    assert code == cli.USAGE and "--mlflow_tracking_uri" in stderr and ".invalid (RFC 6761)" in stderr, stderr[-600:]


def test_the_local_run_refuses_a_name_no_resolver_answers(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = TrainConfig(model_config="tiny", report_to="mlflow", mlflow_tracking_uri="https://runs2x.onion/")
    with pytest.raises(cli.UsageError, match=r"--mlflow_tracking_uri: .*\.onion \(RFC 7686\)"):
        preflight.check_tracking_host(cfg, cfg.mlflow_tracking_uri)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracker.invalid:5000")
    cfg = TrainConfig(model_config="tiny", report_to="mlflow")
    with pytest.raises(cli.EnvironmentProblem, match=r"MLFLOW_TRACKING_URI: .*\.invalid"):
        preflight.check_tracking_host(cfg, "http://tracker.invalid:5000")
    # A server on this machine's own network stays the local run's to reach.
    preflight.check_tracking_host(cfg, "http://mlflow.lab.home.arpa:5000")
    # The checks every run makes before Ray starts (workload.local and the job's driver) make this one.
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with pytest.raises(cli.UsageError, match="--mlflow_tracking_uri"):
        preflight.check_credentials(TrainConfig(model_config="tiny", report_to="mlflow",
                                                mlflow_tracking_uri="https://runs2x.onion/"))
