"""vpcCidr in a range where no node can be addressed (infra/config/rules.py check_vpc_range: loopback, this network,
link-local, multicast, reserved) is refused at preview naming the key; private and public ranges stay allowed."""
from __future__ import annotations

import pytest

from infra import config
from tests.program.test_refusals_at_preview import DEV, program_refusal


@pytest.mark.parametrize("cidr, kind", [
    ("127.42.0.0/16", "loopback"),
    ("127.255.240.0/20", "loopback"),
    ("0.0.0.0/16", "this-network"),
    ("0.12.0.0/18", "this-network"),
    ("169.254.0.0/16", "link-local"),
    ("224.10.0.0/16", "multicast"),
    ("239.255.0.0/20", "multicast"),
    ("240.0.0.0/16", "reserved"),
    ("255.255.0.0/16", "reserved"),
])
def test_a_vpc_in_a_range_no_node_can_use_is_refused(cidr, kind):
    with pytest.raises(ValueError) as refused:
        config.parse(DEV | {"vpcCidr": cidr})
    message = str(refused.value)
    assert message.startswith(f"config key 'vpcCidr': {cidr} is a {kind}"), message
    assert "RFC 1918" in message, message


def test_the_whole_program_refuses_it_before_any_resource():
    assert "loopback" in program_refusal({"vpcCidr": "127.16.0.0/16"})


@pytest.mark.parametrize("cidr", ["10.20.0.0/16", "172.31.0.0/16", "192.168.0.0/16", "100.64.0.0/16",
                                  "44.192.0.0/18"])
def test_private_and_public_ranges_stay_allowed(cidr):
    assert config.parse(DEV | {"vpcCidr": cidr}).vpc_cidr == cidr
