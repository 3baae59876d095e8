/* The broker's compiled hot loops: what their C files share (dledger.broker._speedups; the
 * module's description is in module.c). */
#ifndef DLEDGER_SPEEDUPS_H
#define DLEDGER_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* bump with any change of what a function takes or gives (speedups.py checks it) */
#define ABI_VERSION 4

#define BODY_OFFSET 48
#define MAGIC_NORMAL 1
#define MAGIC_V1 ((int32_t)-626843481)
#define MAGIC_V2 ((int32_t)-626843477)
#define BORNHOST_V6_FLAG 0x10
#define STOREHOST_V6_FLAG 0x20
#define BORN_HOST_POSITION 48
#define MIN_MESSAGE 92
#define NAME_VALUE_SEPARATOR 0x01
#define PROPERTY_SEPARATOR 0x02
#define KEY_SEPARATOR ' '

static inline int16_t be16(const unsigned char *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
}

static inline int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int64_t be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)(uint32_t)be32(p) << 32) | (uint32_t)be32(p + 4));
}

static inline void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put_be64(unsigned char *p, int64_t v) {
    put_be32(p, (uint32_t)((uint64_t)v >> 32));
    put_be32(p + 4, (uint32_t)(uint64_t)v);
}

/* 1 when p[0:n] is strict UTF-8 (what bytes.decode("utf-8") accepts), 0 when not, -1 on error */
static inline int utf8_ok(const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        if (p[i] & 0x80) {
            PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
            if (s != NULL) {
                Py_DECREF(s);
                return 1;
            }
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                return 0;
            }
            return -1;
        }
    }
    return 1;
}

/* Java's String.hashCode continued from h over the UTF-16 units of p[0:n], which is valid
 * UTF-8 (checked by utf8_ok: every multi-byte sequence is whole) */
static inline uint32_t java_hash_utf8(uint32_t h, const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint32_t c = p[i];
        uint32_t cp;
        if (c < 0x80) {
            h = h * 31 + c;
            i++;
            continue;
        }
        if (c < 0xE0) {
            cp = ((c & 0x1F) << 6) | (p[i + 1] & 0x3F);
            i += 2;
        } else if (c < 0xF0) {
            cp = ((c & 0x0F) << 12) | ((uint32_t)(p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
            i += 3;
        } else {
            cp = ((c & 0x07) << 18) | ((uint32_t)(p[i + 1] & 0x3F) << 12) | ((uint32_t)(p[i + 2] & 0x3F) << 6)
                 | (p[i + 3] & 0x3F);
            i += 4;
        }
        if (cp >= 0x10000) {
            cp -= 0x10000;
            h = h * 31 + (0xD800 + (cp >> 10));
            h = h * 31 + (0xDC00 + (cp & 0x3FF));
        } else {
            h = h * 31 + cp;
        }
    }
    return h;
}

/* index_file.key_hash: abs of the signed hash, 0 where that overflows */
static inline long key_hash_of(uint32_t h) {
    int32_t s = (int32_t)h;
    if (s == INT32_MIN)
        return 0;
    return s < 0 ? -(long)s : (long)s;
}

/* The message's topic, found where the previous message's was when the bytes are the same */
typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
    PyObject *topic;      /* owned */
    uint32_t prefix_hash; /* Java hash of "topic#" */
} topic_cache;

static inline PyObject *cached_topic(topic_cache *tc, const unsigned char *p, Py_ssize_t n) {
    PyObject *topic;
    if (tc->topic != NULL && tc->n == n && memcmp(tc->p, p, (size_t)n) == 0) {
        tc->p = p;
        return tc->topic;
    }
    topic = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (topic == NULL)
        return NULL;
    Py_XDECREF(tc->topic);
    tc->topic = topic;
    tc->p = p;
    tc->n = n;
    tc->prefix_hash = java_hash_utf8(0, p, n) * 31 + '#';
    return topic;
}

/* Where the fields of the message at p[0:n] lie (message_codec.locate's reading) */
typedef struct {
    int32_t queue_id, body_len, topic_len;
    Py_ssize_t ts_pos, body_at, topic_at;  /* storeTimestamp, the stored body, the topic's bytes */
} message_head;

/* 1 with the head of the message at p[0:n]; 0 when those bytes are not a message of the length
 * they claim (message_codec.locate's rule; the topic's UTF-8 is the caller's to check) */
static inline int locate_in(const unsigned char *p, Py_ssize_t n, message_head *m) {
    int32_t total, magic, sys_flag;
    Py_ssize_t off;
    if (n < MIN_MESSAGE)
        return 0;
    total = be32(p);
    magic = be32(p + 4);
    m->queue_id = be32(p + 12);
    sys_flag = be32(p + 36);
    if (total != n || (magic != MAGIC_V1 && magic != MAGIC_V2))
        return 0;
    m->ts_pos = BORN_HOST_POSITION + ((sys_flag & BORNHOST_V6_FLAG) ? 20 : 8);
    off = m->ts_pos + 8 + ((sys_flag & STOREHOST_V6_FLAG) ? 20 : 8) + 12;
    if (off + 4 > n)
        return 0;
    m->body_len = be32(p + off);
    m->body_at = off + 4;
    off = m->body_at + (Py_ssize_t)m->body_len;
    if (m->body_len < 0 || off + 3 > n)
        return 0;
    if (magic == MAGIC_V2) {
        m->topic_len = be16(p + off);
        off += 2;
    } else {
        m->topic_len = p[off];
        off += 1;
    }
    if (m->topic_len <= 0 || off + m->topic_len > n)
        return 0;
    m->topic_at = off;
    return 1;
}

/* the module's functions (scan.c, stamps.c, index_entries.c) */
PyObject *dledger_scan_messages(PyObject *self, PyObject *args);
PyObject *dledger_scan_queues(PyObject *self, PyObject *args);
int dledger_scan_init(void);
PyObject *dledger_locate(PyObject *self, PyObject *args);
PyObject *dledger_stamp_messages(PyObject *self, PyObject *args);
PyObject *dledger_put_index_entries(PyObject *self, PyObject *args);
PyObject *dledger_encode_puts(PyObject *self, PyObject *args);
PyObject *dledger_put_results(PyObject *self, PyObject *args);
int dledger_encode_init(void);

#endif
