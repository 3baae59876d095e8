/* The dispatch scan (its reference: dledger/broker/dispatch_scan.py's MessageScanner). */
#include "speedups.h"

/* What the dispatch needs of the properties p[0:n] (valid UTF-8): where TAGS, KEYS and
 * UNIQ_KEY lie (the last item of each name wins, an item counts only with exactly one
 * name/value separator: message_codec.parse_properties' rule) */
typedef struct {
    const unsigned char *tags, *keys, *uniq;
    Py_ssize_t tags_n, keys_n, uniq_n;
} found_properties;

static void find_properties(const unsigned char *p, Py_ssize_t n, found_properties *out) {
    Py_ssize_t i = 0;
    memset(out, 0, sizeof(*out));
    while (i <= n) {
        Py_ssize_t end = i, sep = -1, seps = 0;
        while (end < n && p[end] != PROPERTY_SEPARATOR) {
            if (p[end] == NAME_VALUE_SEPARATOR) {
                if (seps++ == 0)
                    sep = end;
            }
            end++;
        }
        if (seps == 1) {
            const unsigned char *name = p + i, *value = p + sep + 1;
            Py_ssize_t name_n = sep - i, value_n = end - sep - 1;
            if (name_n == 4 && memcmp(name, "TAGS", 4) == 0) {
                out->tags = value;
                out->tags_n = value_n;
            } else if (name_n == 4 && memcmp(name, "KEYS", 4) == 0) {
                out->keys = value;
                out->keys_n = value_n;
            } else if (name_n == 8 && memcmp(name, "UNIQ_KEY", 8) == 0) {
                out->uniq = value;
                out->uniq_n = value_n;
            }
        }
        i = end + 1;
    }
}

/* A message's key hashes, on the stack while there are few */
typedef struct {
    long stack[64];
    long *v;
    Py_ssize_t n, cap;
} hash_list;

static void hash_list_init(hash_list *h) {
    h->v = h->stack;
    h->n = 0;
    h->cap = 64;
}

static void hash_list_free(hash_list *h) {
    if (h->v != h->stack)
        PyMem_Free(h->v);
    hash_list_init(h);
}

static int hash_list_add(hash_list *h, long value) {
    if (h->n == h->cap) {
        long *grown = PyMem_Malloc(sizeof(long) * (size_t)h->cap * 2);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(grown, h->v, sizeof(long) * (size_t)h->n);
        if (h->v != h->stack)
            PyMem_Free(h->v);
        h->v = grown;
        h->cap *= 2;
    }
    h->v[h->n++] = value;
    return 0;
}

/* The key hashes of a message into h (emptied first): topic#UNIQ_KEY, then topic#key for each
 * key of KEYS split on spaces, empty keys dropped (IndexService.index_messages' keys); 0, or
 * -1 on error */
static int collect_hashes(uint32_t prefix, const found_properties *fp, hash_list *h) {
    h->n = 0;
    if (fp->uniq != NULL && fp->uniq_n > 0
            && hash_list_add(h, key_hash_of(java_hash_utf8(prefix, fp->uniq, fp->uniq_n))) < 0)
        return -1;
    if (fp->keys != NULL) {
        Py_ssize_t start = 0;
        while (start <= fp->keys_n) {
            Py_ssize_t end = start;
            while (end < fp->keys_n && fp->keys[end] != KEY_SEPARATOR)
                end++;
            if (end > start
                    && hash_list_add(h, key_hash_of(java_hash_utf8(prefix, fp->keys + start, end - start))) < 0)
                return -1;
            start = end + 1;
        }
    }
    return 0;
}

/* The key hashes of a message as a tuple (a new reference, the empty tuple for none) */
static PyObject *key_hashes(uint32_t prefix, const found_properties *fp) {
    hash_list h;
    PyObject *out = NULL;
    Py_ssize_t i;
    hash_list_init(&h);
    if (collect_hashes(prefix, fp, &h) < 0)
        goto done;
    out = PyTuple_New(h.n);
    if (out == NULL)
        goto done;
    for (i = 0; i < h.n; i++) {
        PyObject *v = PyLong_FromLong(h.v[i]);
        if (v == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
done:
    hash_list_free(&h);
    return out;
}

/* What the dispatch takes of one message */
typedef struct {
    PyObject *topic;           /* borrowed from the topic cache */
    Py_ssize_t topic_at, topic_len;
    int32_t queue_id;
    int64_t queue_offset, store_timestamp;
    int32_t tags_code;
    found_properties fp;
    Py_ssize_t body_at, body_len;
} message_fields_t;

/* The message at p[0:n]: its fields, 1 when it is a dispatchable message
 * (message_codec.dispatch_fields' rule), 0 when not, -1 on error */
static int parse_message(const unsigned char *p, Py_ssize_t n, topic_cache *tc, message_fields_t *out) {
    int32_t props_len;
    Py_ssize_t off;
    message_head m;
    int ok;

    /* locate's rule, and room for the properties' length after the topic */
    if (!locate_in(p, n, &m) || m.topic_at + m.topic_len + 2 > n)
        return 0;
    off = out->topic_at = m.topic_at;
    out->topic_len = m.topic_len;
    out->topic = cached_topic(tc, p + off, m.topic_len);
    if (out->topic == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    off += m.topic_len;
    props_len = be16(p + off);
    if (props_len < 0 || off + 2 + props_len != n)
        return 0;
    off += 2;
    ok = utf8_ok(p + off, props_len);
    if (ok <= 0)
        return ok;
    find_properties(p + off, props_len, &out->fp);
    out->tags_code = out->fp.tags != NULL ? (int32_t)java_hash_utf8(0, out->fp.tags, out->fp.tags_n) : 0;
    out->queue_id = m.queue_id;
    out->queue_offset = be64(p + 20);
    out->store_timestamp = be64(p + m.ts_pos);
    out->body_at = m.body_at;
    out->body_len = m.body_len;
    return 1;
}

/* The message at p[0:n]: its fields into the tuple slots 3.. of item (the topic a new
 * reference), 1 when it is a dispatchable message, 0 when not, -1 on error. body_base: where
 * p lies in the run (for body_at) */
static int message_fields(const unsigned char *p, Py_ssize_t n, Py_ssize_t body_base, topic_cache *tc,
                          PyObject *item) {
    message_fields_t f;
    PyObject *hashes;
    Py_ssize_t k;
    int ok = parse_message(p, n, tc, &f);
    if (ok <= 0)
        return ok;
    hashes = key_hashes(tc->prefix_hash, &f.fp);
    if (hashes == NULL)
        return -1;
    Py_INCREF(f.topic);
    PyTuple_SET_ITEM(item, 3, f.topic);
    PyTuple_SET_ITEM(item, 4, PyLong_FromLong(f.queue_id));
    PyTuple_SET_ITEM(item, 5, PyLong_FromLongLong(f.queue_offset));
    PyTuple_SET_ITEM(item, 6, PyLong_FromLongLong(f.store_timestamp));
    PyTuple_SET_ITEM(item, 7, PyLong_FromLong(f.tags_code));
    PyTuple_SET_ITEM(item, 8, hashes);
    PyTuple_SET_ITEM(item, 9, PyLong_FromSsize_t(body_base + f.body_at));
    PyTuple_SET_ITEM(item, 10, PyLong_FromLong((long)f.body_len));
    for (k = 4; k <= 10; k++) {
        if (PyTuple_GET_ITEM(item, k) == NULL)
            return -1;
    }
    return 1;
}

static PyObject *not_a_message_fields[8];

/* the record at buf[off:] (total bytes in all) as the scans walk it: its size and position, or
 * ValueError naming it when it is not within the run */
static int record_at(const unsigned char *buf, Py_ssize_t off, Py_ssize_t total, long long index, int32_t *magic,
                     int32_t *size, int64_t *pos) {
    if (total - off < BODY_OFFSET) {
        PyErr_Format(PyExc_ValueError, "record %lld at byte %zd of the run: %zd bytes left, shorter than a "
                     "record header (%d)", index, off, total - off, BODY_OFFSET);
        return -1;
    }
    *magic = be32(buf + off);
    *size = be32(buf + off + 4);
    *pos = be64(buf + off + 24);
    if (*size < BODY_OFFSET || *size > total - off) {
        PyErr_Format(PyExc_ValueError, "record %lld at byte %zd of the run claims size %d: not within the "
                     "%zd bytes left", index, off, *size, total - off);
        return -1;
    }
    return 0;
}

PyObject *dledger_scan_messages(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long first_index;
    const unsigned char *buf;
    Py_ssize_t off = 0, total;
    long long index;
    PyObject *out = NULL;
    topic_cache tc = {NULL, 0, NULL, 0};

    if (!PyArg_ParseTuple(args, "y*L:scan_messages", &view, &first_index))
        return NULL;
    buf = view.buf;
    total = view.len;
    index = first_index;
    out = PyList_New(0);
    if (out == NULL)
        goto done;
    while (off < total) {
        int32_t magic, size;
        int64_t pos;
        PyObject *item;
        int found = 0, k, rc;
        if (record_at(buf, off, total, index, &magic, &size, &pos) < 0)
            goto fail;
        item = PyTuple_New(11);
        if (item == NULL)
            goto fail;
        rc = PyList_Append(out, item);
        Py_DECREF(item);               /* the list holds it */
        if (rc < 0)
            goto fail;
        PyTuple_SET_ITEM(item, 0, PyLong_FromLongLong(index));
        PyTuple_SET_ITEM(item, 1, PyLong_FromLongLong(pos));
        PyTuple_SET_ITEM(item, 2, PyLong_FromLong(size));
        if (PyTuple_GET_ITEM(item, 0) == NULL || PyTuple_GET_ITEM(item, 1) == NULL ||
                PyTuple_GET_ITEM(item, 2) == NULL)
            goto fail;
        if (magic == MAGIC_NORMAL && size > BODY_OFFSET) {
            found = message_fields(buf + off + BODY_OFFSET, size - BODY_OFFSET, off + BODY_OFFSET, &tc, item);
            if (found < 0)
                goto fail;
        }
        if (!found) {
            /* not a message (a refused parse sets no slot): the defaults */
            for (k = 0; k < 8; k++) {
                Py_INCREF(not_a_message_fields[k]);
                PyTuple_SET_ITEM(item, 3 + k, not_a_message_fields[k]);
            }
        }
        off += size;
        index++;
    }
    goto done;
fail:
    /* a tuple left half filled is in the list: the list is dropped with it (NULL slots are
     * skipped by the tuple's deallocation) */
    Py_CLEAR(out);
done:
    Py_XDECREF(tc.topic);
    PyBuffer_Release(&view);
    return out;
}

/* the defaults of a record that is not a message: topic None, then 0, 0, 0, 0, (), 0, 0 */
int dledger_scan_init(void) {
    int k;
    not_a_message_fields[0] = Py_NewRef(Py_None);
    for (k = 1; k < 8; k++)
        not_a_message_fields[k] = PyLong_FromLong(0);
    Py_SETREF(not_a_message_fields[5], PyTuple_New(0));
    for (k = 0; k < 8; k++) {
        if (not_a_message_fields[k] == NULL)
            return -1;
    }
    return 0;
}

/* One consume queue's units of a run, as scan_queues gathers them */
typedef struct {
    const unsigned char *topic_bytes;   /* in the run */
    Py_ssize_t topic_len;
    PyObject *topic;                    /* owned */
    int32_t queue_id;
    int64_t first, last, end;           /* queue offsets; the last message's physical end */
    unsigned char *units;
    Py_ssize_t n, cap;                  /* bytes */
} queue_units;

static int add_unit(queue_units *q, int64_t offset, int32_t size, int32_t tags_code) {
    unsigned char *u;
    if (q->n + 20 > q->cap) {
        Py_ssize_t cap = q->cap ? q->cap * 2 : 20 * 64;
        unsigned char *grown = PyMem_Realloc(q->units, (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        q->units = grown;
        q->cap = cap;
    }
    u = q->units + q->n;
    put_be64(u, offset);
    put_be32(u + 8, (uint32_t)size);
    put_be64(u + 12, (int64_t)tags_code);
    q->n += 20;
    return 0;
}

/* scan_queues(records, first_index, max_queues, keep_topic, keep_queue_id) -> None, or (queues,
 * work, done, kept, next_index, next_position): the dispatch of a checked run gathered per consume queue (its reference: the
 * reput service's walk over scan_messages' items). queues: (topic, queue_id, first queue
 * offset, count, units, the last message's physical end) per queue, in the order of their
 * first message, units its consume-queue units (20 bytes each: physical offset, size, tags
 * code) in log order; work: (key hash, physical offset, store timestamp) for every key of
 * every message in log order; done: (physical offset, store timestamp) per message; kept:
 * (physical offset, stored body) of each message of the queue (keep_topic, keep_queue_id) in
 * log order (none when keep_topic is None); next_position -1 for an empty run. None when a queue's stamped offsets do not follow one
 * another, or more than max_queues queues are in the run: the caller walks the run message by
 * message instead. */
PyObject *dledger_scan_queues(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long first_index, index;
    Py_ssize_t max_queues, n_queues = 0, off = 0, total, i;
    const unsigned char *buf;
    queue_units *queues = NULL;
    PyObject *work = NULL, *done = NULL, *kept = NULL, *out = NULL, *groups = NULL, *keep_topic;
    topic_cache tc = {NULL, 0, NULL, 0};
    hash_list h;
    int64_t next_pos = -1;
    int keep_queue_id;

    if (!PyArg_ParseTuple(args, "y*LnOi:scan_queues", &view, &first_index, &max_queues, &keep_topic,
                          &keep_queue_id))
        return NULL;
    if (keep_topic != Py_None && !PyUnicode_Check(keep_topic)) {
        PyErr_SetString(PyExc_TypeError, "scan_queues: keep_topic must be a str or None");
        PyBuffer_Release(&view);
        return NULL;
    }
    hash_list_init(&h);
    if (max_queues < 1)
        max_queues = 1;
    buf = view.buf;
    total = view.len;
    index = first_index;
    queues = PyMem_Calloc((size_t)max_queues, sizeof(queue_units));
    work = PyList_New(0);
    done = PyList_New(0);
    kept = PyList_New(0);
    if (queues == NULL || work == NULL || done == NULL || kept == NULL) {
        if (queues == NULL)
            PyErr_NoMemory();
        goto fail;
    }
    while (off < total) {
        int32_t magic, size;
        int64_t pos, offset;
        message_fields_t f;
        queue_units *q = NULL;
        PyObject *item;
        int found = 0;
        if (record_at(buf, off, total, index, &magic, &size, &pos) < 0)
            goto fail;
        if (magic == MAGIC_NORMAL && size > BODY_OFFSET) {
            found = parse_message(buf + off + BODY_OFFSET, size - BODY_OFFSET, &tc, &f);
            if (found < 0)
                goto fail;
        }
        if (found) {
            const unsigned char *tp = buf + off + BODY_OFFSET + f.topic_at;
            offset = pos + BODY_OFFSET;
            for (i = 0; i < n_queues; i++) {
                if (queues[i].queue_id == f.queue_id && queues[i].topic_len == f.topic_len
                        && memcmp(queues[i].topic_bytes, tp, (size_t)f.topic_len) == 0) {
                    q = &queues[i];
                    break;
                }
            }
            if (q == NULL) {
                if (n_queues == max_queues)
                    goto none;
                q = &queues[n_queues++];
                q->topic_bytes = tp;
                q->topic_len = f.topic_len;
                q->topic = Py_NewRef(f.topic);
                q->queue_id = f.queue_id;
                q->first = f.queue_offset;
            } else if (f.queue_offset != q->last + 1) {
                goto none;
            }
            q->last = f.queue_offset;
            q->end = offset + (size - BODY_OFFSET);
            if (add_unit(q, offset, size - BODY_OFFSET, f.tags_code) < 0)
                goto fail;
            if (collect_hashes(tc.prefix_hash, &f.fp, &h) < 0)
                goto fail;
            for (i = 0; i < h.n; i++) {
                item = Py_BuildValue("(lLL)", h.v[i], (long long)offset, (long long)f.store_timestamp);
                if (item == NULL || PyList_Append(work, item) < 0) {
                    Py_XDECREF(item);
                    goto fail;
                }
                Py_DECREF(item);
            }
            item = Py_BuildValue("(LL)", (long long)offset, (long long)f.store_timestamp);
            if (item == NULL || PyList_Append(done, item) < 0) {
                Py_XDECREF(item);
                goto fail;
            }
            Py_DECREF(item);
            if (keep_topic != Py_None && f.queue_id == keep_queue_id && PyUnicode_Compare(f.topic, keep_topic) == 0) {
                item = Py_BuildValue("(Ly#)", (long long)offset,
                                     (const char *)buf + off + BODY_OFFSET + f.body_at, f.body_len);
                if (item == NULL || PyList_Append(kept, item) < 0) {
                    Py_XDECREF(item);
                    goto fail;
                }
                Py_DECREF(item);
            }
        }
        next_pos = pos + size;
        off += size;
        index++;
    }
    groups = PyList_New(n_queues);
    if (groups == NULL)
        goto fail;
    for (i = 0; i < n_queues; i++) {
        queue_units *q = &queues[i];
        PyObject *g = Py_BuildValue("(OiLLy#L)", q->topic, q->queue_id, (long long)q->first,
                                    (long long)(q->last - q->first + 1), (const char *)q->units, q->n,
                                    (long long)q->end);
        if (g == NULL)
            goto fail;
        PyList_SET_ITEM(groups, i, g);
    }
    out = Py_BuildValue("(NNNNLL)", groups, work, done, kept, index, (long long)next_pos);
    groups = work = done = kept = NULL;
    goto end;
none:
    out = Py_NewRef(Py_None);
    goto end;
fail:
    out = NULL;
end:
    Py_XDECREF(groups);
    Py_XDECREF(work);
    Py_XDECREF(done);
    Py_XDECREF(kept);
    if (queues != NULL) {
        for (i = 0; i < n_queues; i++) {
            Py_XDECREF(queues[i].topic);
            PyMem_Free(queues[i].units);
        }
        PyMem_Free(queues);
    }
    hash_list_free(&h);
    Py_XDECREF(tc.topic);
    PyBuffer_Release(&view);
    return out;
}
