"""A kubeconfig is read through the tools' one YAML reader (workload/config_file.py read_document) before the
Kubernetes client sees it (tools/kube.py): PyYAML's safe_load, which the client calls, expands aliases without bound,
and a 1 KB "billion laughs" ran 48 s into a MemoryError. An alias is refused naming --kubeconfig (exit 2) or the
$KUBECONFIG file (exit 3), at once, never the file's text; a kubeconfig without one still gives a client, its
certificate paths relative to the file as the client's own reading gives them."""
from __future__ import annotations

import importlib
import time

import pytest

from workload import cli

# Three levels of four aliases: small, but the rule is about any alias, not about its size.
LAUGHS = ("apiVersion: v1\nkind: Config\na: &a [token-not-shown, token-not-shown]\nb: &b [*a, *a, *a, *a]\n"
          "c: &c [*b, *b, *b, *b]\nclusters: [*c, *c, *c, *c]\n")
GOOD = """apiVersion: v1
kind: Config
current-context: lab
clusters:
- name: lab
  cluster: {server: "https://10.0.0.7:6443", certificate-authority: ca.pem}
contexts:
- name: lab
  context: {cluster: lab, user: me}
users:
- name: me
  user: {token: abc}
"""


@pytest.mark.parametrize("module, argv", [("tools.status", ["--stack", "dev"]), ("tools.job", ["list", "--stack", "dev"])])
def test_a_kubeconfig_with_aliases_is_refused_before_the_client_reads_it(module, argv, tmp_path, monkeypatch, capsys):
    main = importlib.import_module(module).main
    (tmp_path / "laughs.yaml").write_text(LAUGHS)
    started = time.monotonic()
    code = cli.run(main, [*argv, "--kubeconfig", str(tmp_path / "laughs.yaml")])
    err = capsys.readouterr().err
    assert code == cli.USAGE and err.startswith(f"error: --kubeconfig {tmp_path / 'laughs.yaml'}: YAML aliases (*name) "
                                                "are not allowed (line 4)"), err
    assert "token-not-shown" not in err and time.monotonic() - started < 1
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "laughs.yaml"))
    code = cli.run(main, argv)
    err = capsys.readouterr().err
    assert code == cli.ENVIRONMENT and f"KUBECONFIG's file {tmp_path / 'laughs.yaml'}: YAML aliases" in err, err


def test_a_kubeconfig_without_aliases_gives_a_client_as_the_file_says(tmp_path, monkeypatch):
    from tools.kube import api_client

    (tmp_path / "ca.pem").write_text("not checked until a request\n")
    (tmp_path / "lab.yaml").write_text(GOOD)
    monkeypatch.chdir(tmp_path.parent)  # the CA's relative path is the file's directory's, not the working one's
    configuration = api_client(tmp_path / "lab.yaml").configuration
    assert configuration.host == "https://10.0.0.7:6443" and configuration.ssl_ca_cert == str(tmp_path / "ca.pem")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "lab.yaml"))
    assert api_client(None).configuration.host == "https://10.0.0.7:6443"


@pytest.mark.parametrize("server, user", [
    ("http://10.0.0.7:8080", "{token: sentinel-token-value}"),
    ("HTTP://api.cluster.example.com", "{username: admin, password: sentinel-token-value}"),
])
def test_credentials_for_a_plain_http_server_are_refused_before_any_call(server, user, tmp_path, monkeypatch, capsys):
    # tools/kube.py _check_plain_http_credentials: the client would send the token (or Basic password) unencrypted.
    text = GOOD.replace('{server: "https://10.0.0.7:6443", certificate-authority: ca.pem}', f'{{server: "{server}"}}')
    (tmp_path / "plain.yaml").write_text(text.replace("{token: abc}", user))
    from tools import status

    code = cli.run(status.main, ["--stack", "dev", "--kubeconfig", str(tmp_path / "plain.yaml")])
    err = capsys.readouterr().err
    assert code == cli.USAGE and "its server is http://" in err and "allowed: an https:// server" in err, err
    assert "sentinel-token-value" not in err
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "plain.yaml"))
    assert cli.run(status.main, ["--stack", "dev"]) == cli.ENVIRONMENT
    assert "the kubeconfig: its server is http://" in capsys.readouterr().err


@pytest.mark.parametrize("server, user", [("http://127.0.0.1:8001", "{token: abc}"),  # kubectl proxy
                                          ("http://localhost:8001", "{token: abc}"),
                                          ("http://10.0.0.7:8080", "{}")])  # no credentials to expose
def test_a_loopback_or_credential_free_plain_http_server_gives_a_client(server, user, tmp_path):
    from tools.kube import api_client

    text = GOOD.replace('{server: "https://10.0.0.7:6443", certificate-authority: ca.pem}', f'{{server: "{server}"}}')
    (tmp_path / "plain.yaml").write_text(text.replace("{token: abc}", user))
    assert api_client(tmp_path / "plain.yaml").configuration.host == server
