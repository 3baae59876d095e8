/* The loop of put_messages: each message's arguments laid out as a CommitLog message (its
 * reference: put_encode.PutEncoder.encode, over message_codec.encode_message).
 *
 * encode_puts(messages, start, born_ms, limit, good_topics, hosts, store_host, crc32, out)
 *     -> the index of the first message it did not take (len(messages) when it took them all)
 *
 * From messages[start] on, each message whose arguments have the usual types and values is
 * encoded and appended to out (a list of bytes): a dict with no other key than put_message's
 * arguments; topic a str in good_topics (a set of topics found good by the reference's checks);
 * queue_id an int in 0..2**31-1, body bytes, flag a 32-bit int (both as missing: 0); tags None
 * or a str; keys None, a str, or a list or tuple of str; properties None or a dict of str to
 * str with no separator character; born_host None (the store host) or a key of hosts (a born
 * host the reference encoded before: (address, port) with a str address and an int port, or a
 * str), mapped to (packed address, port); every text encodable as UTF-8, the properties at
 * most 32767 bytes and the message at most limit bytes. At the first message that is not so,
 * the loop stops and answers its index, and the reference takes that message: it refuses it
 * (naming what is wrong) or encodes it (a value of another type it accepts, a host not seen).
 * store_host is (packed address, port); crc32 is the body CRC's function (zlib.crc32).
 */
#include "speedups.h"

/* the size of the fixed fields, totalSize .. bodyLength, without the two host addresses */
#define FIXED_SIZE 80
#define MAX_PROPERTIES 32767
#define MAX_TOPIC_V1 127

static PyObject *field_names[8];
enum { F_TOPIC, F_QUEUE_ID, F_BODY, F_TAGS, F_KEYS, F_PROPERTIES, F_BORN_HOST, F_FLAG };
static const char *field_text[8] = {"topic", "queue_id", "body", "tags", "keys", "properties", "born_host", "flag"};
static PyObject *tags_name, *keys_name;

int dledger_encode_init(void) {
    int i;
    for (i = 0; i < 8; i++) {
        field_names[i] = PyUnicode_InternFromString(field_text[i]);
        if (field_names[i] == NULL)
            return -1;
    }
    tags_name = PyUnicode_InternFromString("TAGS");
    keys_name = PyUnicode_InternFromString("KEYS");
    return tags_name != NULL && keys_name != NULL ? 0 : -1;
}

/* which argument a key of a message's dict is; -1 for none */
static int field_of(PyObject *key) {
    int i;
    if (!PyUnicode_CheckExact(key))
        return -1;
    for (i = 0; i < 8; i++)
        if (key == field_names[i])
            return i;
    for (i = 0; i < 8; i++)
        if (PyUnicode_Compare(key, field_names[i]) == 0)
            return i;
    return -1;
}

/* a text's UTF-8 bytes (kept by the str object); NULL, with no error set, when it has none
 * (a lone surrogate) */
static const char *utf8_of(PyObject *s, Py_ssize_t *n) {
    const char *p = PyUnicode_AsUTF8AndSize(s, n);
    if (p == NULL)
        PyErr_Clear();
    return p;
}

static int has_separator(const char *p, Py_ssize_t n) {
    return memchr(p, NAME_VALUE_SEPARATOR, (size_t)n) != NULL || memchr(p, PROPERTY_SEPARATOR, (size_t)n) != NULL;
}

/* an int argument in lo..hi (not a bool): 1 with *v, 0 when not */
static int int_in(PyObject *o, long long lo, long long hi, long long *v) {
    int overflow;
    if (o == NULL) {
        *v = 0;
        return 1;
    }
    if (!PyLong_CheckExact(o))
        return 0;
    *v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (*v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return lo <= *v && *v <= hi;
}

/* a growing text buffer for the properties */
typedef struct {
    char *p;
    Py_ssize_t n, cap;
} text_buf;

static int tb_add(text_buf *b, const char *p, Py_ssize_t n) {
    if (n == 0)
        return 0;
    if (b->n + n > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 256;
        char *q;
        while (cap < b->n + n)
            cap *= 2;
        q = PyMem_Realloc(b->p, (size_t)cap);
        if (q == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, (size_t)n);
    b->n += n;
    return 0;
}

/* name \x01 value \x02, or 0 (not taken) when either holds a separator; -1 on error */
static int tb_property(text_buf *b, const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn) {
    static const char nv = NAME_VALUE_SEPARATOR, ps = PROPERTY_SEPARATOR;
    if (has_separator(k, kn) || has_separator(v, vn))
        return 0;
    if (tb_add(b, k, kn) < 0 || tb_add(b, &nv, 1) < 0 || tb_add(b, v, vn) < 0 || tb_add(b, &ps, 1) < 0)
        return -1;
    return 1;
}

/* KEYS' value: the keys joined by a space, into keys_buf; 1 (present), 2 (absent), 0 (not
 * taken), -1 on error */
static int keys_value(PyObject *keys, text_buf *keys_buf) {
    Py_ssize_t i, n, len;
    const char *p;
    PyObject **items;
    if (keys == NULL || keys == Py_None)
        return 2;
    if (PyUnicode_CheckExact(keys)) {
        p = utf8_of(keys, &len);
        return p == NULL ? 0 : (tb_add(keys_buf, p, len) < 0 ? -1 : 1);
    }
    if (PyList_CheckExact(keys)) {
        n = PyList_GET_SIZE(keys);
        items = ((PyListObject *)keys)->ob_item;
    } else if (PyTuple_CheckExact(keys)) {
        n = PyTuple_GET_SIZE(keys);
        items = ((PyTupleObject *)keys)->ob_item;
    } else {
        return 0;
    }
    if (n == 0)
        return 2;
    for (i = 0; i < n; i++) {
        if (!PyUnicode_CheckExact(items[i]))
            return 0;
        p = utf8_of(items[i], &len);
        if (p == NULL)
            return 0;
        if ((i > 0 && tb_add(keys_buf, " ", 1) < 0) || tb_add(keys_buf, p, len) < 0)
            return -1;
    }
    return 1;
}

/* the properties text as the reference lays it out: the caller's properties in their order,
 * TAGS and KEYS replacing the caller's own where named, else after them (TAGS first); 1, 0
 * (not taken), -1 on error */
static int properties_text(PyObject *properties, const char *tags, Py_ssize_t tags_n, const char *keys,
                           Py_ssize_t keys_n, text_buf *out) {
    int tags_done = tags == NULL, keys_done = keys == NULL, rc;
    Py_ssize_t pos = 0, kn, vn;
    PyObject *k, *v;
    const char *kp, *vp;
    if (properties != NULL && properties != Py_None) {
        if (!PyDict_CheckExact(properties))
            return 0;
        while (PyDict_Next(properties, &pos, &k, &v)) {
            if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v))
                return 0;
            kp = utf8_of(k, &kn);
            vp = utf8_of(v, &vn);
            if (kp == NULL || vp == NULL)
                return 0;
            if (tags != NULL && PyUnicode_Compare(k, tags_name) == 0) {
                vp = tags;
                vn = tags_n;
                tags_done = 1;
            } else if (keys != NULL && PyUnicode_Compare(k, keys_name) == 0) {
                vp = keys;
                vn = keys_n;
                keys_done = 1;
            }
            if ((rc = tb_property(out, kp, kn, vp, vn)) <= 0)
                return rc;
        }
    }
    if (!tags_done && (rc = tb_property(out, "TAGS", 4, tags, tags_n)) <= 0)
        return rc;
    if (!keys_done && (rc = tb_property(out, "KEYS", 4, keys, keys_n)) <= 0)
        return rc;
    return 1;
}

/* (packed address, port) of a born host or the store host: 1, 0 (not taken) */
static int host_of(PyObject *packed, const char **addr, Py_ssize_t *addr_n, long long *port) {
    PyObject *a, *p;
    if (!PyTuple_CheckExact(packed) || PyTuple_GET_SIZE(packed) != 2)
        return 0;
    a = PyTuple_GET_ITEM(packed, 0);
    p = PyTuple_GET_ITEM(packed, 1);
    if (!PyBytes_CheckExact(a) || (PyBytes_GET_SIZE(a) != 4 && PyBytes_GET_SIZE(a) != 16))
        return 0;
    if (!int_in(p, 0, 65535, port))
        return 0;
    *addr = PyBytes_AS_STRING(a);
    *addr_n = PyBytes_GET_SIZE(a);
    return 1;
}

/* a born host as the caller gave it, found among those the reference packed: 1, 0 (not taken),
 * -1 on error. The caller's value must have the reference's types too: (str, int) or str (a
 * dict finds ("h", True) under ("h", 1)) */
static int born_host_of(PyObject *hosts, PyObject *born, const char **addr, Py_ssize_t *addr_n, long long *port) {
    PyObject *packed;
    if (PyTuple_CheckExact(born)) {
        if (PyTuple_GET_SIZE(born) != 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(born, 0))
            || !PyLong_CheckExact(PyTuple_GET_ITEM(born, 1)))
            return 0;
    } else if (!PyUnicode_CheckExact(born)) {
        return 0;
    }
    packed = PyDict_GetItemWithError(hosts, born);
    if (packed == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return host_of(packed, addr, addr_n, port);
}

/* one message's arguments (f, by field): its bytes, appended to out; 1, 0 (not taken), -1 on error */
static int encode_fields(PyObject **f, long long born_ms, Py_ssize_t limit, PyObject *good_topics, PyObject *hosts,
                         PyObject *store_host, PyObject *crc32, PyObject *out, text_buf *props, text_buf *keys_buf) {
    PyObject *crc_obj, *raw;
    Py_ssize_t topic_n, tags_n = 0, body_n, born_n, store_n, total, topic_field;
    const char *topic, *tags = NULL, *keys = NULL, *born, *store;
    long long queue_id, flag, born_port, store_port, crc;
    int rc, v2;
    int32_t sys_flag = 0;
    unsigned char *p;

    if (f[F_TOPIC] == NULL || !PyUnicode_CheckExact(f[F_TOPIC]))
        return 0;
    rc = PySet_Contains(good_topics, f[F_TOPIC]);
    if (rc <= 0)
        return rc;
    topic = utf8_of(f[F_TOPIC], &topic_n);
    if (topic == NULL || topic_n == 0 || topic_n > 32767)
        return 0;
    if (!int_in(f[F_QUEUE_ID], 0, 0x7FFFFFFF, &queue_id) || !int_in(f[F_FLAG], INT32_MIN, INT32_MAX, &flag))
        return 0;
    if (f[F_BODY] == NULL || !PyBytes_CheckExact(f[F_BODY]))
        return 0;
    body_n = PyBytes_GET_SIZE(f[F_BODY]);
    if (f[F_TAGS] != NULL && f[F_TAGS] != Py_None) {
        if (!PyUnicode_CheckExact(f[F_TAGS]))
            return 0;
        if (PyUnicode_GET_LENGTH(f[F_TAGS]) > 0) {
            tags = utf8_of(f[F_TAGS], &tags_n);
            if (tags == NULL)
                return 0;
        }
    }
    keys_buf->n = 0;
    rc = keys_value(f[F_KEYS], keys_buf);
    if (rc <= 0)
        return rc;
    if (rc == 1)
        keys = keys_buf->p != NULL ? keys_buf->p : "";
    props->n = 0;
    rc = properties_text(f[F_PROPERTIES], tags, tags_n, keys, keys_buf->n, props);
    if (rc <= 0)
        return rc;
    if (props->n > MAX_PROPERTIES)
        return 0;
    if (!host_of(store_host, &store, &store_n, &store_port))
        return 0;
    if (f[F_BORN_HOST] == NULL || f[F_BORN_HOST] == Py_None) {
        born = store;
        born_n = store_n;
        born_port = store_port;
    } else if ((rc = born_host_of(hosts, f[F_BORN_HOST], &born, &born_n, &born_port)) <= 0) {
        return rc;
    }
    if (born_n == 16)
        sys_flag |= BORNHOST_V6_FLAG;
    if (store_n == 16)
        sys_flag |= STOREHOST_V6_FLAG;
    v2 = topic_n > MAX_TOPIC_V1;
    topic_field = (v2 ? 2 : 1) + topic_n;
    total = FIXED_SIZE + born_n + store_n + body_n + topic_field + 2 + props->n;
    if (total > limit || total > INT32_MAX)
        return 0;
    crc_obj = PyObject_CallOneArg(crc32, f[F_BODY]);
    if (crc_obj == NULL)
        return -1;
    crc = PyLong_AsLongLong(crc_obj);
    Py_DECREF(crc_obj);
    if (crc == -1 && PyErr_Occurred())
        return -1;
    raw = PyBytes_FromStringAndSize(NULL, total);
    if (raw == NULL)
        return -1;
    p = (unsigned char *)PyBytes_AS_STRING(raw);
    put_be32(p, (uint32_t)total);
    put_be32(p + 4, (uint32_t)(v2 ? MAGIC_V2 : MAGIC_V1));
    put_be32(p + 8, (uint32_t)(crc & 0x7FFFFFFF));
    put_be32(p + 12, (uint32_t)queue_id);
    put_be32(p + 16, (uint32_t)(int32_t)flag);
    put_be64(p + 20, 0);                         /* queueOffset: the append hook stamps it */
    put_be64(p + 28, 0);                         /* physicalOffset: likewise */
    put_be32(p + 36, (uint32_t)sys_flag);
    put_be64(p + 40, born_ms);
    p += 48;
    memcpy(p, born, (size_t)born_n);
    put_be32(p + born_n, (uint32_t)born_port);
    p += born_n + 4;
    put_be64(p, 0);                              /* storeTimestamp: the append hook stamps it */
    p += 8;
    memcpy(p, store, (size_t)store_n);
    put_be32(p + store_n, (uint32_t)store_port);
    p += store_n + 4;
    put_be32(p, 0);                              /* reconsumeTimes */
    put_be64(p + 4, 0);                          /* preparedTransactionOffset */
    put_be32(p + 12, (uint32_t)body_n);
    p += 16;
    memcpy(p, PyBytes_AS_STRING(f[F_BODY]), (size_t)body_n);
    p += body_n;
    if (v2) {
        p[0] = (unsigned char)(topic_n >> 8);
        p[1] = (unsigned char)topic_n;
        p += 2;
    } else {
        *p++ = (unsigned char)topic_n;
    }
    memcpy(p, topic, (size_t)topic_n);
    p += topic_n;
    p[0] = (unsigned char)(props->n >> 8);
    p[1] = (unsigned char)props->n;
    if (props->n)
        memcpy(p + 2, props->p, (size_t)props->n);
    rc = PyList_Append(out, raw);
    Py_DECREF(raw);
    return rc < 0 ? -1 : 1;
}

/* one message: its arguments read from its dict and held while it is encoded (the CRC's call
 * runs Python code) */
static int encode_one(PyObject *m, long long born_ms, Py_ssize_t limit, PyObject *good_topics, PyObject *hosts,
                      PyObject *store_host, PyObject *crc32, PyObject *out, text_buf *props, text_buf *keys_buf) {
    PyObject *f[8] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    int which, i, rc;

    if (!PyDict_CheckExact(m))
        return 0;
    while (PyDict_Next(m, &pos, &k, &v)) {
        if ((which = field_of(k)) < 0)
            return 0;
        f[which] = v;
    }
    for (i = 0; i < 8; i++)
        Py_XINCREF(f[i]);
    rc = encode_fields(f, born_ms, limit, good_topics, hosts, store_host, crc32, out, props, keys_buf);
    for (i = 0; i < 8; i++)
        Py_XDECREF(f[i]);
    return rc;
}

PyObject *dledger_encode_puts(PyObject *self, PyObject *args) {
    PyObject *messages, *good_topics, *hosts, *store_host, *crc32, *out;
    Py_ssize_t start, limit, i, n;
    long long born_ms;
    text_buf props = {NULL, 0, 0}, keys = {NULL, 0, 0};
    int rc = 1;

    if (!PyArg_ParseTuple(args, "O!nLnO!O!O!OO!:encode_puts", &PyList_Type, &messages, &start, &born_ms, &limit,
                          &PySet_Type, &good_topics, &PyDict_Type, &hosts, &PyTuple_Type, &store_host, &crc32,
                          &PyList_Type, &out))
        return NULL;
    n = PyList_GET_SIZE(messages);
    if (start < 0)
        start = 0;
    for (i = start; i < n; i++) {
        PyObject *m = PyList_GET_ITEM(messages, i);
        Py_INCREF(m);
        rc = encode_one(m, born_ms, limit, good_topics, hosts, store_host, crc32, out, &props, &keys);
        Py_DECREF(m);
        if (rc <= 0)
            break;
        n = PyList_GET_SIZE(messages);           /* a crc32 that changed the list */
    }
    PyMem_Free(props.p);
    PyMem_Free(keys.p);
    if (rc < 0)
        return NULL;
    return PyLong_FromSsize_t(i);
}
