"""The Spark ``dledger-messages`` source reads what the broker wrote, on every replica."""

from .helpers import OK, BrokerGroup


def test_the_spark_message_view_reads_the_brokers_log(dl, tmp_path):
    with BrokerGroup(tmp_path) as g:
        g.elected()
        items = [("orders" if i % 2 else "payments", i % 3, b"payload-%d" % i) for i in range(30)]
        log = g.logs[g.elected()]
        fs = [log.put_message_async(t, q, b, tags=f"tag{i % 2}", keys=[f"k{i}", "all"]) for i, (t, q, b) in
              enumerate(items)]
        assert g.c.run_until(lambda: all(f.done() for f in fs), 5_000)
        rs = [f.result() for f in fs]
        assert all(r.status is OK for r in rs)
        g.settle()
        dirs = [g.logs[i].root for i in g.c.ids]
    want = sorted((t, q, r.queue_offset, r.wrote_offset, f"tag{i % 2}", f"k{i} all", b, r.store_timestamp)
                  for i, ((t, q, b), r) in enumerate(zip(items, rs)))
    for d in dirs:
        rows = dl.read.format("dledger-messages").load(d).where("error IS NULL").collect()
        got = sorted((x["topic"], x["queue_id"], x["queue_offset"], x["physical_offset"], x["tags"], x["keys"],
                      bytes(x["body"]), x["store_timestamp"]) for x in rows)
        assert got == want
        assert all(x["physical_offset"] == x["entry_pos"] + 48 for x in rows)
