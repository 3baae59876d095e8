"""The in-process hub keeps one open endpoint per group and id."""

import pytest

from dledger.transport import EndpointInUseError
from dledger.transport.inproc import Hub


def test_a_hub_refuses_a_second_open_endpoint_with_the_same_group_and_id():
    hub = Hub()
    first = hub.endpoint("g", "n0", runtime=None)
    hub.endpoint("other", "n0", runtime=None)          # another group: another identity
    with pytest.raises(EndpointInUseError, match="already on this hub"):
        hub.endpoint("g", "n0", runtime=None)
    first.close()
    assert hub.endpoint("g", "n0", runtime=None) is hub.lookup("g", "n0")   # free again once closed
