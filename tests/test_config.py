import pytest

from dledger.config import ConfigError, DLedgerConfig, parse_peers


def test_defaults_validate_and_give_sub_second_failover():
    c = DLedgerConfig().validate()
    assert c.peer_map == {"n0": "127.0.0.1:20911"}
    assert c.election_timeout_ms + c.max_vote_interval_ms < 1000
    assert c.default_path.endswith("dledger-n0")


def test_peers_parse_ids_before_first_dash_and_keep_dashes_in_addresses():
    assert parse_peers("n0-127.0.0.1:20911;n1-my-host:20912;") == {
        "n0": "127.0.0.1:20911", "n1": "my-host:20912"}


@pytest.mark.parametrize("peers", ["", ";", "n0", "-127.0.0.1:1", "n0-", "n0-a:1;n0-b:2",
                                   # ids name store directories: no path tricks (SC-08)
                                   "..-h:1", ".-h:1", "a/b-h:1", "n0-h:1;../x-h:2", "a\\b-h:1", "n\x000-h:1",
                                   "a b-h:1"])
def test_bad_peers_are_refused_naming_the_field(peers):
    with pytest.raises(ConfigError) as exc:
        DLedgerConfig(peers=peers).validate()
    assert exc.value.field == "peers"
    assert "DLedgerConfig.peers" in str(exc.value)


@pytest.mark.parametrize("field,value", [
    ("self_id", "n9"), ("self_id", ""), ("store_type", "disk"), ("durability", "maybe"),
    ("heart_beat_time_interval_ms", 0), ("max_pending_requests_num", -1),
    ("max_vote_interval_ms", 10), ("mapped_file_size_for_entry_index", 33),
    ("lease_ratio", 1.5), ("preferred_leader_ids", "n7"), ("max_push_in_flight", True),
])
def test_validate_names_the_bad_field(field, value):
    with pytest.raises(ConfigError) as exc:
        DLedgerConfig(**{field: value}).validate()
    assert exc.value.field == field


def test_store_type_is_case_insensitive_like_java():
    assert DLedgerConfig(store_type="MEMORY").validate().store_type == "memory"


def test_preferred_leader_ids_split_on_semicolons():
    c = DLedgerConfig(peers="n0-h:1;n1-h:2;n2-h:3", preferred_leader_ids="n1;n2").validate()
    assert c.preferred_leader_id_list() == ["n1", "n2"]


def test_a_lease_longer_than_the_clock_drift_allows_is_refused_naming_both_fields():
    # with clocks within 1 +- d, a lease of r election timeouts is safe while r(1+d) < 1-d
    DLedgerConfig(self_id="n0", peers="n0-127.0.0.1:1", lease_ratio=0.8, max_clock_drift=0.1).validate()
    with pytest.raises(ConfigError) as exc:
        DLedgerConfig(self_id="n0", peers="n0-127.0.0.1:1", lease_ratio=0.8, max_clock_drift=0.12).validate()
    assert "lease_ratio" in str(exc.value) and "max_clock_drift" in str(exc.value)
    with pytest.raises(ConfigError):
        DLedgerConfig(self_id="n0", peers="n0-127.0.0.1:1", lease_ratio=0.95).validate()
    with pytest.raises(ConfigError) as exc:
        DLedgerConfig(self_id="n0", peers="n0-127.0.0.1:1", max_clock_drift=-0.1).validate()
    assert "max_clock_drift" in str(exc.value)
