/* dledger.broker._speedups: the broker's per-message hot loops in C, an optional twin of their
 * pure-Python references (the references define the results; the tests hold both to the same
 * answers, and the package works without this module: dledger/broker/speedups.py loads it;
 * docs/broker.md, "The compiled hot loops").
 *
 *   scan_messages(records, first_index) -> list of
 *       (index, pos, size, topic, queue_id, queue_offset, store_timestamp, tags_code,
 *        key_hashes, body_at, body_length)
 *       one tuple per record of a run of whole DLedger records (as the store's checked range
 *       read returns them); topic is None where the record is not a dispatchable message.
 *       (scan.c; its reference: dispatch_scan.MessageScanner)
 *   scan_queues(records, first_index, max_queues, keep_topic, keep_queue_id) -> None or
 *       (queues, work, done, kept, next_index, next_position): the same run's dispatch gathered per
 *       consume queue (scan.c; its reference: ReputService's walk over scan_messages' items)
 *   locate(buf, base=0) -> (topic, queue_id, store_timestamp_position) or None
 *       (stamps.c; its reference: message_codec.locate)
 *   stamp_messages(records, starts, sizes, positions, table, stamped, now) -> how many were stamped
 *       the append hook's batch form (stamps.c; its reference: append_stamps.python_stamp_messages)
 *   put_index_entries(mm, slots, entries_base, count, index_num, begin_timestamp, used, work, start)
 *       -> (taken, count, used, begin_timestamp, begin_phy_offset or None)
 *       IndexFile.put_hashes' loop (index_entries.c; its reference: IndexFile._put_hashes_python)
 *   encode_puts(messages, start, born_ms, limit, good_topics, hosts, store_host, crc32, out)
 *       -> the index of the first message it did not take
 *       put_messages' loop (encode.c; its reference: put_encode.PutEncoder.encode)
 *   put_results(positions, raws, stamped, prefix, leader_id, cls, status) -> list or None
 *       a batch put's PUT_OK answers (results.c; its reference: DLedgerCommitLog._results)
 *
 * Nothing here trusts a length it has not checked against the buffer: a record whose size
 * runs past the run (or is shorter than its header) raises ValueError naming it.
 */
#include "speedups.h"

static PyMethodDef methods[] = {
    {"scan_messages", dledger_scan_messages, METH_VARARGS,
     "scan_messages(records, first_index) -> [(index, pos, size, topic, queue_id, queue_offset, "
     "store_timestamp, tags_code, key_hashes, body_at, body_length), ...]: one tuple per record of a "
     "run of whole records; topic None where the record is not a dispatchable message."},
    {"scan_queues", dledger_scan_queues, METH_VARARGS,
     "scan_queues(records, first_index, max_queues, keep_topic, keep_queue_id) -> None or (queues, work, done, "
     "kept, next_index, next_position): "
     "the dispatch of a checked run gathered per consume queue (ReputService's walk over scan_messages' items)."},
    {"locate", dledger_locate, METH_VARARGS,
     "locate(buf, base=0) -> (topic, queue_id, store_timestamp_position) of the message at buf[base:], "
     "or None when those bytes are not a message of the length they claim."},
    {"stamp_messages", dledger_stamp_messages, METH_VARARGS,
     "stamp_messages(records, starts, sizes, positions, table, stamped, now) -> how many were stamped: "
     "the append hook's batch form (append_stamps.stamp_messages' reference)."},
    {"put_index_entries", dledger_put_index_entries, METH_VARARGS,
     "put_index_entries(mm, slots, entries_base, count, index_num, begin_timestamp, used, work, start) -> "
     "(taken, count, used, begin_timestamp, begin_phy_offset or None): IndexFile.put_hashes' loop."},
    {"encode_puts", dledger_encode_puts, METH_VARARGS,
     "encode_puts(messages, start, born_ms, limit, good_topics, hosts, store_host, crc32, out) -> the index of "
     "the first message not taken: put_messages' loop (put_encode.PutEncoder.encode's twin)."},
    {"put_results", dledger_put_results, METH_VARARGS,
     "put_results(positions, raws, stamped, prefix, leader_id, cls, status) -> the PUT_OK answers of a batch "
     "put, or None when the reference must answer (DLedgerCommitLog._results' twin)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dledger.broker._speedups",
    "The broker's per-message hot loops in C (optional twins of their Python references).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    PyObject *m;
    if (dledger_scan_init() < 0 || dledger_encode_init() < 0)
        return NULL;
    m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
