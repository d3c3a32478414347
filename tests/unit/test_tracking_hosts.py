"""The tracking URI's host (infra/config/experiment_tracking.py): an address in any notation C's inet_aton takes (and
so every HTTP client on the pods) is read as that address before asking whether it is public; the pods' egress is
public addresses on 443 only."""
from __future__ import annotations

import pytest

from infra.config.experiment_tracking import tracking_uri_problem


@pytest.mark.parametrize("host", [
    "0x7f.0.0.1", "0x7f000001", "017700000001", "127.0.1", "10.1", "0300.0250.7.9", "0xa9fea9fe", "2851995902",
    "0.0.0.0", "0", "100.0x40.0.1", "172.16.0x1.1",
])
def test_a_private_address_in_any_ipv4_notation_is_refused(host):
    message = tracking_uri_problem(f"https://{host}/mlflow", None)
    assert message is not None and "not a public address" in message


@pytest.mark.parametrize("uri", ["https://[::ffff:127.0.0.1]/", "https://[fe80::1]/", "https://[fd12::1]/",
                                 "https://[::]/"])
def test_ipv6_forms_are_refused(uri):
    assert tracking_uri_problem(uri, None) is not None


@pytest.mark.parametrize("host", ["999.1.1.1", "1.2.3.4.5", "10.0.0.08"])
def test_a_host_ending_in_a_number_that_is_no_address_is_refused(host):
    assert tracking_uri_problem(f"https://{host}/", None) is not None


@pytest.mark.parametrize("host", ["mlflow.example.org", "0x08080808", "8.8.4.4", "134744072", "cafe.example.org",
                                  "a1b2.example.org"])
def test_public_addresses_and_names_are_allowed(host):
    assert tracking_uri_problem(f"https://{host}/team", None) is None


@pytest.mark.parametrize("host", ["tracker.kube-system", "mlflow.monitoring", "Runs.Default"])
def test_a_service_of_the_cluster_by_its_namespace_is_refused(host):
    message = tracking_uri_problem(f"https://{host}/", None)
    assert message is not None and "is a Service of the cluster (SERVICE.NAMESPACE)" in message, message


@pytest.mark.parametrize("host, kind", [
    ("239.12.0.7", "multicast"), ("224.0.1.1", "multicast"), ("0xe9010101", "multicast"), ("0", "unspecified"),
    ("0.0.0.0", "unspecified"), ("241.7.7.7", "reserved"), ("255.255.255.255", "reserved"), ("169.254.3.4", "link-local"),
])
def test_an_address_no_https_connection_reaches_is_refused_by_its_kind(host, kind):
    # experiment_tracking._address_problem: ipaddress's kinds before is_global, which Python leaves True for
    # multicast groups it does not list as private.
    message = tracking_uri_problem(f"https://{host}/mlflow", None)
    assert message is not None and f"is a {kind} address" in message and "no HTTPS connection reaches" in message, message


@pytest.mark.parametrize("uri", ["https://[ff02::1]/", "https://[ff0e::101]/mlflow", "https://[::ffff:224.0.0.251]/"])
def test_an_ipv6_multicast_address_is_refused(uri):
    assert tracking_uri_problem(uri, None) is not None
