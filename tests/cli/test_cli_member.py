"""``dledger member add|promote|remove|list``, ``dledger status``'s membership columns and
``dledger node --join``, run through ``dledger.cli.main`` against DLedgerServers over TCP in this
process (the multi-process scenario is in tests/membership)."""

import json
import time

import pytest

from dledger.cli import build_parser, main
from dledger.cli.client import status_table
from dledger.cli.node import FLAG_FIELDS

from client.test_client_membership import JoiningGroup


@pytest.fixture
def group(tmp_path):
    g = JoiningGroup(tmp_path).start_all()
    g.leader()
    yield g
    g.stop_all()


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_member_add_list_promote_and_remove_as_an_operator_runs_them(group, capsys):
    g = group
    flags = ["--peers", g.peers, "--group", "t"]
    g.start_joiner()
    code, out, err = run(capsys, "member", "add", *flags, "--id", "n3", "--address", g.n3_address, "--learner")
    assert code == 0, err
    assert out.startswith("n3 added as a learner (entry ") and out.rstrip().endswith("voters n0, n1, n2; learners n3")

    code, out, _ = run(capsys, "member", "list", *flags)
    rows = [line.split() for line in out.splitlines()]
    assert [r[:3] for r in rows] == [["n0", g.servers["n0"].config.peer_map["n0"], "voter"],
                                     ["n1", g.servers["n1"].config.peer_map["n1"], "voter"],
                                     ["n2", g.servers["n2"].config.peer_map["n2"], "voter"],
                                     ["n3", g.n3_address, "learner"]]
    assert all(len(r) == 4 for r in rows)

    # promote is refused (one line, exit 1) until the learner has caught up with the leader
    deadline = time.monotonic() + 30
    while True:
        code, out, err = run(capsys, "member", "promote", *flags, "--id", "n3")
        if code == 0 or time.monotonic() > deadline:
            break
        assert err.startswith("dledger member promote: refused: FALL_BEHIND_TOO_MUCH") and len(err.splitlines()) == 1
        time.sleep(0.1)                                 # (real processes over TCP: poll until caught up)
    assert code == 0 and out.startswith("n3 promoted to voter (entry "), err

    code, out, _ = run(capsys, "member", "list", *flags, "--json")
    view = json.loads(out)
    assert [(m["id"], m["role"]) for m in view["members"]][-1] == ("n3", "voter")
    assert view["config_index"] >= 0 and view["leader_id"] in {"n0", "n1", "n2"}

    code, out, _ = run(capsys, "member", "remove", *flags, "--id", "n3", "--json")
    answer = json.loads(out)
    assert code == 0 and answer["name"] == "SUCCESS" and "n3" not in answer["voters"]

    # a refusal: one line on stderr with the leader's reason, exit 1
    code, out, err = run(capsys, "member", "remove", *flags, "--id", "n7")
    assert code == 1 and out == ""
    assert err.startswith("dledger member remove: refused: UNKNOWN_MEMBER (code 401): n7 is not a member")
    assert len(err.splitlines()) == 1


def test_member_add_promotes_the_learner_once_caught_up(group, capsys):
    g = group
    g.start_joiner()
    code, out, err = run(capsys, "member", "add", "--peers", g.peers, "--group", "t", "--id", "n3",
                         "--address", g.n3_address)
    assert code == 0, err
    assert out.startswith("n3 added as a voter") and "voters n0, n1, n2, n3" in out


def _until_a_leader_answers(ask, leads, timeout: float = 30.0):
    """``ask()`` again until ``leads`` holds for its answer or ``timeout`` passes; the last answer."""
    deadline = time.monotonic() + timeout
    while not leads(answer := ask()) and time.monotonic() < deadline:
        time.sleep(0.1)                                 # (real processes over TCP: poll)
    return answer


def test_status_shows_each_members_role_match_and_lag_and_the_configuration(group, capsys):
    g = group
    flags = ["--peers", g.peers, "--group", "t"]
    g.start_joiner()
    assert run(capsys, "member", "add", *flags, "--id", "n3", "--address", g.n3_address, "--learner")[0] == 0
    # MEMBER, MATCH, LAG and the configuration are the leader's view: while an election runs (a
    # stalled loop thread on a loaded machine outlasts the 300 ms election timeout) no answer
    # carries them, so each form is asked again until a leader answers
    status = _until_a_leader_answers(lambda: json.loads(run(capsys, "status", *flags, "--json")[1]),
                                     lambda status: any(s.get("role") == "LEADER" for s in status.values()))
    assert set(status) == {"n0", "n1", "n2", "n3"}          # n3 learnt from the members' answers
    assert status["n3"]["member"] == "learner" and status["n0"]["member"] == "voter"
    assert all(isinstance(s["match"], int) for s in status.values())
    out = _until_a_leader_answers(lambda: run(capsys, "status", *flags, "-w", "table")[1],
                                  lambda out: " LEADER " in out)
    header, *rows = out.splitlines()
    assert header.split()[-3:] == ["MEMBER", "MATCH", "LAG"]
    config_line = [line for line in out.splitlines() if line.startswith("configuration (entry ")]
    assert len(config_line) == 1 and config_line[0].endswith("voters n0, n1, n2; learners n3")


def test_the_status_table_shows_dashes_without_a_leader():
    text = status_table({"n0": {"node_id": "n0", "address": "h:1", "role": "FOLLOWER", "term": 1,
                                "leader_id": None, "ledger_end_index": 3, "committed_index": 3,
                                "member": None, "match": None, "lag": None}})
    assert text.splitlines()[1].split()[-3:] == ["-", "-", "-"]
    assert "configuration" not in text


def test_member_flags_are_checked_and_every_action_has_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["member", "add", "--peers", "n0-h:1", "--group", "g", "--id", "n3"])
    assert exc.value.code == 2 and "--address" in capsys.readouterr().err
    assert main(["member", "add", "--peers", "n0-h:1", "--group", "g", "--id", "n3", "--address", "nope"]) == 2
    assert "host:port" in capsys.readouterr().err
    parser = build_parser()
    member = parser.commands["member"]
    text = member.format_help()
    assert "--join" in text and "member add" in text and "member remove" in text
    for action in ("add", "promote", "remove", "list"):
        with pytest.raises(SystemExit):
            main(["member", action, "--help"])
        assert "example:" in capsys.readouterr().out


def test_node_join_maps_to_the_join_field_and_is_documented(capsys):
    assert FLAG_FIELDS["join"] == "join" and FLAG_FIELDS["bootstrap"] == "bootstrap"
    with pytest.raises(SystemExit):
        main(["node", "--help"])
    text = capsys.readouterr().out
    assert "--join" in text and "--bootstrap" in text and "waits until a member adds it" in " ".join(text.split())
