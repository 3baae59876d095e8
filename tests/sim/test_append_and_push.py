"""Java DLedger's AppendAndPushTest / BatchPushTest: two-node groups with forced roles (the
elector off, as DLedger's harness), in virtual time."""

from dledger.protocol import DLedgerResponseCode as Code, PushEntryRequest, PushEntryType
from dledger.sim import Cluster


def test_appends_made_while_the_follower_is_down_commit_when_it_returns():
    with Cluster(n=2, seed=1, leader="n0") as c:
        c.crash("n1")
        futures = [c.append(b"e%d" % i) for i in range(10)]
        c.run_for(500)
        assert c.servers["n0"].node.committed_index == -1 and not any(f.done() for f in futures)
        c.restart("n1")
        assert c.run_until(lambda: all(s.node.committed_index == 9 for s in c.servers.values()), 3_000)
        assert all(f.result().code == Code.SUCCESS for f in futures)
        c.check()


def test_without_the_follower_appends_time_out_and_then_the_leader_reports_pending_full():
    with Cluster(n=2, seed=2, leader="n0", max_wait_ack_time_ms=1_000, max_pending_requests_num=20) as c:
        c.crash("n1")
        first = [c.append(b"t%d" % i) for i in range(10)]
        assert c.run_until(lambda: all(f.done() for f in first), 1_000 + 1_000)
        assert {f.result().code for f in first} == {Code.WAIT_QUORUM_ACK_TIMEOUT}
        more = [c.append(b"p%d" % i) for i in range(22)]
        c.run_for(1)
        assert more[-1].done() and more[-1].result().code == Code.LEADER_PENDING_FULL
        c.check()


def test_appends_wait_while_the_follower_is_down_and_complete_when_it_is_back():
    with Cluster(n=2, seed=3, leader="n0") as c:
        c.crash("n1")
        f = c.append(b"first")
        c.run_for(500)
        assert not f.done()
        c.restart("n1")
        assert c.run_until(f.done, 1_500) and f.result().code == Code.SUCCESS
        c.crash("n1")
        g = c.append(b"second")
        c.run_for(500)
        assert not g.done()
        c.restart("n1")
        assert c.run_until(g.done, 1_500) and g.result().code == Code.SUCCESS
        for s in c.servers.values():
            assert (s.store.ledger_before_begin_index, s.store.ledger_end_index) == (-1, 1)
        c.check()


def test_the_leader_resends_pushes_the_follower_never_answered():
    with Cluster(n=2, seed=4, leader="n0") as c:
        count = {"n": 0}

        def every_third_append_push(env):
            if isinstance(env.msg, PushEntryRequest) and env.msg.type == PushEntryType.APPEND:
                count["n"] += 1
                return count["n"] % 3 == 0
            return False

        c.network.drop_if = every_third_append_push
        for i in range(10):
            f = c.append(b"m%d" % i)
            assert c.run_until(f.done, 3_000) and f.result().code == Code.SUCCESS
        assert count["n"] > 10
        assert all(s.store.ledger_end_index == 9 for s in c.servers.values())
        c.check()


def test_a_new_leader_truncates_the_longer_log_of_the_old_one():
    with Cluster(n=2, seed=5, leader="n0") as c:
        for i in range(5):
            f = c.append(b"c%d" % i)
            assert c.run_until(f.done, 1_000)
        c.partition(["n0"], ["n1"])
        tail = [c.append(b"u%d" % i) for i in range(5)]
        c.run_for(100)
        assert c.servers["n0"].store.ledger_end_index == 9
        assert c.servers["n1"].store.ledger_end_index == 4
        c.heal()
        c.force_roles("n1", term=1)                 # roles swapped, in a new term
        assert c.run_until(lambda: c.servers["n0"].store.ledger_end_index == 4, 1_000)
        futures = [c.append(b"n%d" % i) for i in range(10)]
        assert c.run_until(lambda: all(f.done() for f in futures), 2_000)
        assert [f.result().index for f in futures] == list(range(5, 15))
        assert all(f.done() and f.result().code != Code.SUCCESS for f in tail)
        c.check()


def test_batched_pushes_carry_many_entries_per_request():
    with Cluster(n=3, seed=6, leader="n0", max_batch_append_size=300) as c:
        sizes = []
        c.network.drop_if = lambda env: (isinstance(env.msg, PushEntryRequest) and
                                         env.msg.type == PushEntryType.APPEND and
                                         sizes.append(env.msg.count)) and False
        futures = [c.append(b"b%02d" % i) for i in range(30)]
        assert c.run_until(lambda: all(f.done() for f in futures), 1_000)
        assert all(f.result().code == Code.SUCCESS for f in futures)
        assert max(sizes) > 1 and all(n * (48 + 3) <= 300 or n == 1 for n in sizes)
        c.check()


def test_a_lagging_follower_is_fed_no_faster_than_its_byte_quota():
    with Cluster(n=2, seed=7, leader="n0", peer_push_quota=200_000, max_wait_ack_time_ms=60_000, strict_history=False,
                 mapped_file_size_for_entry_data=8 << 20, mapped_file_size_for_entry_index=32 * 8192) as c:
        c.crash("n1")
        body = bytes(952)                      # 1,000-byte records
        # 6 MB behind: far more than a full push window (8 pushes of 256 KiB), which is how far
        # a follower that keeps up may lag without being held to the quota
        futures = [c.servers["n0"].batch_append([body] * 100) for _ in range(60)]
        c.run_for(10)
        c.restart("n1")
        assert c.run_until(lambda: c.servers["n1"].store.ledger_end_index >= 0, 2_000)
        start = c.now_ms
        c.run_for(3_000)
        fed = c.servers["n1"].store.ledger_end_index
        # about 200 KB/s (pushes of up to 256 KB) while it lags more than 1000 entries and a window
        assert 3 * 200 <= fed <= 4 * 262 + 1, (fed, c.now_ms - start)
        assert c.run_until(lambda: all(f.done() for f in futures), 30_000)
        assert all(f.result().ok for f in futures)
        assert c.servers["n1"].store.ledger_end_index == 5_999
        c.check()


def test_a_follower_thousands_of_small_entries_behind_within_a_push_window_is_not_held_to_the_quota():
    with Cluster(n=2, seed=7, leader="n0", peer_push_quota=10_000, max_wait_ack_time_ms=60_000,
                 strict_history=False) as c:
        assert c.run_until(lambda: c.leader() == "n0", 5_000)
        # 4,000 entries of 176-byte records at once: 4,000 behind, but 700 KB, under the 2 MiB a
        # full push window holds; held to the 10 KB/s quota they would go one push (256 KiB) a
        # second, three seconds for them all
        futures = [c.servers["n0"].batch_append([bytes([k % 251]) * 128] * 250) for k in range(16)]
        start = c.now_ms
        assert c.run_until(lambda: all(f.done() for f in futures), 5_000)
        assert all(f.result().ok for f in futures) and c.now_ms - start < 500, c.now_ms - start
        assert c.run_until(lambda: c.servers["n1"].store.ledger_end_index == c.servers["n0"].store.ledger_end_index,
                           5_000)
        c.check()
