import pytest
from hypothesis import given, strategies as st

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


# -- peers strings: one error naming the field and the offending part ---------------------------
@pytest.mark.parametrize("peers,offending", [
    ("n0-127.0.0.1:1,n1-127.0.0.1:2", "','"),                 # a comma where ';' belongs
    ("n0-127.0.0.1", "no ':port'"),                            # missing port
    ("n0-127.0.0.1:", "not a number"),                         # empty port
    ("n0-127.0.0.1:http", "'http'"),                           # non-numeric port
    ("n0-127.0.0.1:70000", "outside 1..65535"),
    ("n0-127.0.0.1:0", "outside 1..65535"),
    ("n0-h:1;n1-h:1", "also 'n0'"),                            # duplicate address
    ("n0-h:1;n0-h:2", "appears twice"),                        # duplicate id
    ("../x-h:1", "'../x'"), ("a/b-h:1", "'a/b'"), ("n\x00-h:1", "letters"),   # ids name directories
])
def test_a_bad_peers_string_names_the_field_and_the_offending_part(peers, offending):
    with pytest.raises(ConfigError) as exc:
        DLedgerConfig(self_id="n0", peers=peers).validate()
    assert exc.value.field == "peers" and offending in str(exc.value)


def test_self_id_absent_from_peers_is_named():
    with pytest.raises(ConfigError) as exc:
        DLedgerConfig(self_id="n3", peers="n0-h:1;n1-h:2").validate()
    assert exc.value.field == "self_id" and "'n3'" in str(exc.value)


ids = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True)
hosts = st.sampled_from(["127.0.0.1", "localhost", "my-host", "[::1]", "10.0.0.7"])


@given(members=st.lists(st.tuples(ids, hosts, st.integers(1, 65535)), min_size=1, max_size=5,
                        unique_by=(lambda m: m[0], lambda m: (m[1], m[2]))))
def test_well_formed_peers_parse_to_their_ids_and_addresses(members):
    peers = ";".join(f"{i}-{h}:{p}" for i, h, p in members)
    assert parse_peers(peers) == {i: f"{h}:{p}" for i, h, p in members}


@given(members=st.lists(st.tuples(ids, st.integers(1, 65535)), min_size=2, max_size=4, unique_by=lambda m: m[0]),
       damage=st.sampled_from(["comma", "no_port", "text_port", "dup_id", "dup_addr"]))
def test_a_damaged_peers_string_is_refused_with_one_config_error_on_peers(members, damage):
    parts = [f"{i}-h{k}:{p}" for k, (i, p) in enumerate(members)]
    if damage == "comma":
        text = ",".join(parts)
    elif damage == "no_port":
        text = ";".join(parts[:-1] + [parts[-1].rpartition(":")[0]])
    elif damage == "text_port":
        text = ";".join(parts[:-1] + [parts[-1].rpartition(":")[0] + ":p0rt"])
    elif damage == "dup_id":
        text = ";".join(parts + [f"{members[0][0]}-other:1"])
    else:
        text = ";".join(parts + [f"zz9-h0:{members[0][1]}"])
    with pytest.raises(ConfigError) as exc:
        parse_peers(text)
    assert exc.value.field == "peers"


@pytest.mark.parametrize("field,value", [
    ("transport", "udp"), ("tls_cert_file", ""), ("secret_file", ""), ("max_connections", 0)])
def test_transport_fields_are_checked(field, value):
    with pytest.raises(ConfigError) as exc:
        DLedgerConfig(**{field: value}).validate()
    assert exc.value.field == field


def test_tls_needs_certificate_key_and_ca_together():
    with pytest.raises(ConfigError) as exc:
        DLedgerConfig(tls_cert_file="c.pem", tls_key_file="k.pem").validate()
    assert exc.value.field == "tls_ca_file"
    DLedgerConfig(tls_cert_file="c.pem", tls_key_file="k.pem", tls_ca_file="ca.pem").validate()


def test_the_frame_limit_copies_the_wire_and_store_limits():
    from dledger import config, entry, protocol
    assert config.MAX_FRAME_BYTES == protocol.MAX_FRAME_BYTES
    assert config.MAX_RECORD_SIZE == entry.MAX_RECORD_SIZE and config.MIN_BLANK_LEN == entry.MIN_BLANK_LEN
    assert DLedgerConfig().validate().max_frame_bytes == protocol.MAX_FRAME_BYTES


@pytest.mark.parametrize("changes", [
    {"max_frame_bytes": 0}, {"max_frame_bytes": True}, {"max_frame_bytes": 64 * 1024 * 1024 + 1},
    # a 4 MiB record (the default largest) cannot fit a 1 MiB frame
    {"max_frame_bytes": 1024 * 1024},
    # nor a 2 MiB push, although small segments keep records small
    {"max_frame_bytes": 1024 * 1024, "mapped_file_size_for_entry_data": 256 * 1024,
     "max_batch_append_size": 2 * 1024 * 1024},
])
def test_a_frame_limit_that_could_not_carry_a_push_is_refused(changes):
    with pytest.raises(ConfigError) as exc:
        DLedgerConfig(**changes).validate()
    assert exc.value.field == "max_frame_bytes"


@given(segment=st.integers(4096, 8 * 1024 * 1024), batch=st.integers(1, 8 * 1024 * 1024),
       frame=st.integers(1, 64 * 1024 * 1024))
def test_a_valid_frame_limit_holds_a_full_push_or_the_largest_record_with_room(segment, batch, frame):
    c = DLedgerConfig(mapped_file_size_for_entry_data=segment, max_batch_append_size=batch, max_frame_bytes=frame)
    try:
        c.validate()
    except ConfigError as exc:
        assert exc.field == "max_frame_bytes"
        assert frame < max(batch, c.largest_record()) + 64 * 1024
        return
    assert frame >= max(batch, min(4 * 1024 * 1024, segment - 8)) + 64 * 1024


def test_the_tcp_options_take_the_configured_frame_limit():
    from dledger.transport.tcp_setup import options_for
    c = DLedgerConfig(max_frame_bytes=8 * 1024 * 1024).validate()
    assert options_for(c).max_frame_bytes == 8 * 1024 * 1024
