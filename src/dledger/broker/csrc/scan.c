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

/* The key hashes of a message: topic#UNIQ_KEY, then topic#key for each key of KEYS split on
 * spaces, empty keys dropped (IndexService.index_messages' keys); a new reference, the empty
 * tuple for none */
static PyObject *key_hashes(uint32_t prefix, const found_properties *fp) {
    long hashes[64];
    long *all = hashes;
    Py_ssize_t count = 0, cap = 64, i;
    PyObject *out = NULL;
    if (fp->uniq != NULL && fp->uniq_n > 0)
        hashes[count++] = key_hash_of(java_hash_utf8(prefix, fp->uniq, fp->uniq_n));
    if (fp->keys != NULL) {
        Py_ssize_t start = 0;
        while (start <= fp->keys_n) {
            Py_ssize_t end = start;
            while (end < fp->keys_n && fp->keys[end] != KEY_SEPARATOR)
                end++;
            if (end > start) {
                if (count == cap) {
                    long *grown = PyMem_Malloc(sizeof(long) * (size_t)cap * 2);
                    if (grown == NULL)
                        goto fail;
                    memcpy(grown, all, sizeof(long) * (size_t)count);
                    if (all != hashes)
                        PyMem_Free(all);
                    all = grown;
                    cap *= 2;
                }
                all[count++] = key_hash_of(java_hash_utf8(prefix, fp->keys + start, end - start));
            }
            start = end + 1;
        }
    }
    out = PyTuple_New(count);
    if (out == NULL)
        goto fail;
    for (i = 0; i < count; i++) {
        PyObject *h = PyLong_FromLong(all[i]);
        if (h == NULL) {
            Py_CLEAR(out);
            goto fail;
        }
        PyTuple_SET_ITEM(out, i, h);
    }
fail:
    if (all != hashes)
        PyMem_Free(all);
    if (out == NULL && !PyErr_Occurred())
        PyErr_NoMemory();
    return out;
}

/* The message at p[0:n]: its fields into the tuple slots 3.. of item (the topic a new
 * reference), 1 when it is a dispatchable message (message_codec.dispatch_fields' rule),
 * 0 when not, -1 on error. body_base: where p lies in the run (for body_at) */
static int message_fields(const unsigned char *p, Py_ssize_t n, Py_ssize_t body_base, topic_cache *tc,
                          PyObject *item) {
    int32_t props_len;
    Py_ssize_t off;
    message_head m;
    PyObject *topic, *hashes;
    uint32_t tags_code = 0;
    found_properties fp;
    int ok;

    /* locate's rule, and room for the properties' length after the topic */
    if (!locate_in(p, n, &m) || m.topic_at + m.topic_len + 2 > n)
        return 0;
    off = m.topic_at;
    topic = cached_topic(tc, p + off, m.topic_len);
    if (topic == NULL) {
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
    find_properties(p + off, props_len, &fp);
    if (fp.tags != NULL)
        tags_code = java_hash_utf8(0, fp.tags, fp.tags_n);
    hashes = key_hashes(tc->prefix_hash, &fp);
    if (hashes == NULL)
        return -1;
    Py_INCREF(topic);
    PyTuple_SET_ITEM(item, 3, topic);
    PyTuple_SET_ITEM(item, 4, PyLong_FromLong(m.queue_id));
    PyTuple_SET_ITEM(item, 5, PyLong_FromLongLong(be64(p + 20)));           /* queueOffset */
    PyTuple_SET_ITEM(item, 6, PyLong_FromLongLong(be64(p + m.ts_pos)));     /* storeTimestamp */
    PyTuple_SET_ITEM(item, 7, PyLong_FromLong((int32_t)tags_code));
    PyTuple_SET_ITEM(item, 8, hashes);
    PyTuple_SET_ITEM(item, 9, PyLong_FromSsize_t(body_base + m.body_at));
    PyTuple_SET_ITEM(item, 10, PyLong_FromLong(m.body_len));
    for (off = 4; off <= 10; off++) {
        if (PyTuple_GET_ITEM(item, off) == NULL)
            return -1;
    }
    return 1;
}

static PyObject *not_a_message_fields[8];

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
        if (total - off < BODY_OFFSET) {
            PyErr_Format(PyExc_ValueError, "record %lld at byte %zd of the run: %zd bytes left, shorter than a "
                         "record header (%d)", index, off, total - off, BODY_OFFSET);
            goto fail;
        }
        magic = be32(buf + off);
        size = be32(buf + off + 4);
        pos = be64(buf + off + 24);
        if (size < BODY_OFFSET || size > total - off) {
            PyErr_Format(PyExc_ValueError, "record %lld at byte %zd of the run claims size %d: not within the "
                         "%zd bytes left", index, off, size, total - off);
            goto fail;
        }
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
