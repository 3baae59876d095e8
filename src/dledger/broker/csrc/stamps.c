/* The append hook's reading of a message and its batch form (references:
 * message_codec.locate, append_stamps.python_stamp_messages). */
#include "speedups.h"

PyObject *dledger_locate(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t base = 0;
    message_head m;
    const unsigned char *p;
    PyObject *topic, *out = NULL;

    if (!PyArg_ParseTuple(args, "y*|n:locate", &view, &base))
        return NULL;
    if (base < 0) {
        PyErr_Format(PyExc_ValueError, "base %zd is negative", base);
        goto done;
    }
    if (base > view.len)
        goto none;
    p = (const unsigned char *)view.buf + base;
    if (!locate_in(p, view.len - base, &m))
        goto none;
    topic = PyUnicode_DecodeUTF8((const char *)p + m.topic_at, m.topic_len, "strict");
    if (topic == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            goto done;
        PyErr_Clear();
        goto none;
    }
    out = Py_BuildValue("(Nin)", topic, m.queue_id, m.ts_pos);
    goto done;
none:
    out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return out;
}

/* The append hook's batch form (its reference: append_stamps.python_stamp_messages): for each record of
 * records (starts[i], sizes[i], at log position positions[i]) whose body is a message, its
 * queue offset from table ((topic, queue_id) -> next offset, moved on), stamped into it with
 * its physical offset and the store time now, and stamped[position] = (queue_offset, now);
 * how many were stamped */
PyObject *dledger_stamp_messages(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *starts, *sizes, *positions, *table, *stamped, *out = NULL, *now_obj = NULL;
    long long now;
    Py_ssize_t n, i, count = 0;
    topic_cache tc = {NULL, 0, NULL, 0};

    if (!PyArg_ParseTuple(args, "w*O!O!O!O!O!L:stamp_messages", &view, &PyList_Type, &starts, &PyList_Type, &sizes,
                          &PyList_Type, &positions, &PyDict_Type, &table, &PyDict_Type, &stamped, &now))
        return NULL;
    n = PyList_GET_SIZE(starts);
    if (PyList_GET_SIZE(sizes) != n || PyList_GET_SIZE(positions) != n) {
        PyErr_SetString(PyExc_ValueError, "stamp_messages: starts, sizes and positions differ in length");
        goto done;
    }
    now_obj = PyLong_FromLongLong(now);
    if (now_obj == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        Py_ssize_t start = PyLong_AsSsize_t(PyList_GET_ITEM(starts, i));
        Py_ssize_t size = PyLong_AsSsize_t(PyList_GET_ITEM(sizes, i));
        long long pos = PyLong_AsLongLong(PyList_GET_ITEM(positions, i));
        message_head m;
        unsigned char *body;
        PyObject *topic, *key, *qo_obj, *stamp;
        long long qo;
        int rc;
        if (PyErr_Occurred())
            goto done;
        if (start < 0 || size < BODY_OFFSET || start > view.len - size) {
            PyErr_Format(PyExc_ValueError, "stamp_messages: record %zd (%zd bytes at %zd) is not within the "
                         "%zd-byte buffer", i, size, start, view.len);
            goto done;
        }
        body = (unsigned char *)view.buf + start + BODY_OFFSET;
        if (!locate_in(body, size - BODY_OFFSET, &m))
            continue;
        topic = cached_topic(&tc, body + m.topic_at, m.topic_len);
        if (topic == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto done;
            PyErr_Clear();
            continue;
        }
        key = Py_BuildValue("(Oi)", topic, m.queue_id);
        if (key == NULL)
            goto done;
        qo_obj = PyDict_GetItemWithError(table, key);
        if (qo_obj == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            goto done;
        }
        qo = qo_obj == NULL ? 0 : PyLong_AsLongLong(qo_obj);
        if (qo == -1 && PyErr_Occurred()) {
            Py_DECREF(key);
            goto done;
        }
        qo_obj = PyLong_FromLongLong(qo + 1);
        rc = qo_obj == NULL ? -1 : PyDict_SetItem(table, key, qo_obj);
        Py_XDECREF(qo_obj);
        Py_DECREF(key);
        if (rc < 0)
            goto done;
        stamp = Py_BuildValue("(LO)", qo, now_obj);
        if (stamp == NULL)
            goto done;
        key = PyLong_FromLongLong(pos);
        rc = key == NULL ? -1 : PyDict_SetItem(stamped, key, stamp);
        Py_XDECREF(key);
        Py_DECREF(stamp);
        if (rc < 0)
            goto done;
        put_be64(body + 20, qo);
        put_be64(body + 28, pos + BODY_OFFSET);
        put_be64(body + m.ts_pos, now);
        count++;
    }
    out = PyLong_FromSsize_t(count);
done:
    Py_XDECREF(now_obj);
    Py_XDECREF(tc.topic);
    PyBuffer_Release(&view);
    return out;
}
