"""FollowerProgress and Inflights: the leader's view of one follower, without a network."""

from dledger.core.follower_progress import DispatchState, FollowerProgress, Inflights


def test_a_new_follower_is_compared_at_the_leaders_end():
    pr = FollowerProgress("n1", 8, 4)
    assert (pr.state, pr.next, pr.match, len(pr.inflights)) == (DispatchState.COMPARE, 8, -1, 0)


def test_compare_match_raises_the_water_mark_and_truncates_then_appends_from_it():
    pr = FollowerProgress("n1", 8, 4)
    pr.on_compare_match(5)
    assert (pr.state, pr.match) == (DispatchState.TRUNCATE, 5)
    pr.truncated()
    assert (pr.state, pr.next) == (DispatchState.APPEND, 6)


def test_the_water_mark_never_goes_down_on_acks():
    pr = FollowerProgress("n1", 0, 4)
    pr.on_compare_match(-1)
    pr.truncated()
    pr.append_sent(0, 5, now=10, commit_index=-1)
    pr.append_sent(5, 5, now=11, commit_index=-1)
    pr.on_append_ack(5, 5)
    pr.on_append_ack(0, 5)                       # answered out of order
    assert pr.match == 9 and not pr.inflights and pr.next == 10
    pr.on_append_ack(0, 2)                       # a late answer to an older, shorter push
    assert pr.match == 9


def test_inflights_are_a_window_acked_only_by_the_exact_push():
    w = Inflights(2)
    w.add(0, 3, 100)
    assert not w.full() and w.oldest().sent_ms == 100
    w.add(3, 2, 110)
    assert w.full() and len(w) == 2
    w.ack(3, 1)                                  # a different push from the same index
    assert len(w) == 2
    w.ack(0, 3)
    assert len(w) == 1 and w.oldest().first == 3


def test_a_resend_from_the_match_clears_the_window():
    pr = FollowerProgress("n1", 0, 4)
    pr.on_compare_match(2)
    pr.truncated()
    pr.append_sent(3, 4, now=5, commit_index=2)
    seq = pr.control_seq
    pr.push_timed_out()
    assert not pr.inflights and pr.next == 3 and pr.control_seq == seq + 1


def test_a_follower_that_lost_its_log_is_compared_again_below_its_old_water_mark():
    pr = FollowerProgress("n1", 0, 4)
    pr.on_compare_match(9)
    pr.truncated()
    pr.lost_log(end_index=-1, leader_end=20)
    assert (pr.state, pr.match, pr.next) == (DispatchState.COMPARE, -1, 21)


def test_an_answer_to_a_given_up_control_request_is_recognisably_stale():
    pr = FollowerProgress("n1", 5, 4)
    seq = pr.control_sent(now=10)
    assert pr.control_sent_ms == 10
    pr.give_up_control()
    assert pr.control_seq != seq
    pr.control_answered()
    assert pr.control_sent_ms == -1


def test_a_recovery_starts_once_per_incarnation_of_the_follower():
    p = FollowerProgress("n1", 10, 4)
    p.match = 7
    assert p.recovery_starts(5)
    p.start_recovery(9, 5)
    assert (p.recovering, p.incarnation, p.match, p.epoch) == (True, 5, -1, 1)
    assert not p.recovery_starts(5)             # the same process says it again
    assert p.recovery_starts(6)                 # it restarted: its water mark is forgotten again


def test_a_spent_quota_pauses_the_follower_until_the_next_second_and_a_new_second_refills_it():
    pr = FollowerProgress("n1", 0, 4)
    assert not pr.quota_spent(now=2_300, quota=100)
    pr.charge_quota(60)
    assert not pr.quota_spent(now=2_400, quota=100)
    pr.charge_quota(60)
    assert pr.quota_spent(now=2_500, quota=100) and pr.retry_at == 3_000
    assert not pr.quota_spent(now=3_000, quota=100) and pr.quota_bytes == 0


def test_pause_until_holds_back_sends_and_a_follower_behind_the_begin_is_installed_then_truncated():
    pr = FollowerProgress("n1", 3, 4)
    pr.pause_until(150)
    assert pr.retry_at == 150
    pr.behind_begin()                            # the leader's log now begins after entry 8
    assert pr.state is DispatchState.INSTALL_SNAPSHOT
    pr.installed(8)
    assert (pr.state, pr.match) == (DispatchState.TRUNCATE, 8)
    pr.truncated()
    assert (pr.state, pr.next) == (DispatchState.APPEND, 9)
    pr.behind_begin()                            # retention moved the begin again
    pr.install_refused(30)
    assert (pr.state, pr.next, pr.match) == (DispatchState.COMPARE, 31, 8)


def test_a_commit_answer_and_the_end_of_a_recovery_are_named_changes():
    pr = FollowerProgress("n1", 0, 4)
    pr.commit_push_sent(now=5, commit_index=2)
    assert pr.commit_outstanding and pr.commit_sent == 2
    pr.commit_answered()
    assert not pr.commit_outstanding
    pr.start_recovery(leader_end=7, incarnation=42)
    assert pr.recovering and pr.match == -1 and pr.next == 8
    pr.recovery_ends()
    assert not pr.recovering


def test_the_pusher_changes_a_progress_only_through_its_methods():
    """Every field of ``FollowerProgress`` changes only inside the progress (as etcd's
    tracker): the entry pusher assigns none of them."""
    import ast
    import pathlib
    source = pathlib.Path(__file__).resolve().parents[2] / "src" / "dledger" / "core" / "entry_pusher.py"
    fields = set(FollowerProgress.__slots__)
    writes = []
    for node in ast.walk(ast.parse(source.read_text())):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for leaf in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(leaf, ast.Attribute) and leaf.attr in fields \
                        and not (isinstance(leaf.value, ast.Name) and leaf.value.id == "self"):
                    writes.append(f"line {leaf.lineno}: .{leaf.attr}")
    assert writes == []
