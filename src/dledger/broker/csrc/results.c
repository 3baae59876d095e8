/* The answers of a batch put: one PutMessageResult(PUT_OK, ...) per message (its reference:
 * commit_log.DLedgerCommitLog._results, over put_result.put_ok).
 *
 * put_results(positions, raws, stamped, prefix, leader_id, cls, status) -> list, or None
 *
 * For each message (its entry's log position positions[i], its bytes raws[i]): its stamp
 * (queue offset, store timestamp), popped from stamped; the answer has wrote_offset position +
 * 48, wrote_bytes len(raws[i]), that queue offset, msg_id prefix + the offset in 16 upper-case
 * hex digits, that store timestamp, leader_id, detail "". None, with nothing popped, when a
 * message has no stamp or a value has another type than these: the reference answers then.
 * cls is PutMessageResult (a class with __slots__, whose slots are set here directly, as its
 * slot setters would) and status PutMessageStatus.PUT_OK.
 */
#include "speedups.h"
#include <structmember.h>

#define N_SLOTS 8
static const char *slot_names[N_SLOTS] = {"status", "wrote_offset", "wrote_bytes", "queue_offset", "msg_id",
                                          "store_timestamp", "leader_id", "detail"};
enum { S_STATUS, S_WROTE_OFFSET, S_WROTE_BYTES, S_QUEUE_OFFSET, S_MSG_ID, S_STORE_TIMESTAMP, S_LEADER_ID, S_DETAIL };
static PyTypeObject *slots_of = NULL;   /* the class the offsets were read from (a strong reference) */
static Py_ssize_t slot_offsets[N_SLOTS];
static PyObject *empty_text = NULL;

/* the byte offset of each slot of cls (its member descriptors), read once per class: 0, or -1
 * with TypeError when cls is not such a class */
static int read_slots(PyTypeObject *cls) {
    int i;
    if (cls == slots_of)
        return 0;
    for (i = 0; i < N_SLOTS; i++) {
        PyObject *d = PyDict_GetItemString(cls->tp_dict, slot_names[i]);
        PyMemberDef *m;
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyErr_Format(PyExc_TypeError, "put_results: %s has no slot %s", cls->tp_name, slot_names[i]);
            return -1;
        }
        m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY)) {
            PyErr_Format(PyExc_TypeError, "put_results: slot %s of %s is not an object slot", slot_names[i],
                         cls->tp_name);
            return -1;
        }
        slot_offsets[i] = m->offset;
    }
    if (cls->tp_basicsize < slot_offsets[S_DETAIL] + (Py_ssize_t)sizeof(PyObject *)) {
        PyErr_SetString(PyExc_TypeError, "put_results: the class's slots lie outside its instances");
        return -1;
    }
    Py_XSETREF(slots_of, (PyTypeObject *)Py_NewRef(cls));
    return 0;
}

static inline void set_slot(PyObject *obj, int i, PyObject *value) {
    /* a new instance's slots are NULL: nothing to release */
    *(PyObject **)((char *)obj + slot_offsets[i]) = value;
}

PyObject *dledger_put_results(PyObject *self, PyObject *args) {
    PyObject *positions, *raws, *stamped, *prefix, *leader_id, *status, *out = NULL;
    PyTypeObject *cls;
    Py_ssize_t n, i, prefix_n;
    const char *prefix_p;

    if (!PyArg_ParseTuple(args, "O!O!O!UOO!O:put_results", &PyList_Type, &positions, &PyList_Type, &raws,
                          &PyDict_Type, &stamped, &prefix, &leader_id, &PyType_Type, &cls, &status))
        return NULL;
    if (read_slots(cls) < 0)
        return NULL;
    if (empty_text == NULL && (empty_text = PyUnicode_FromString("")) == NULL)
        return NULL;
    if (!PyUnicode_IS_ASCII(prefix))
        Py_RETURN_NONE;
    prefix_p = PyUnicode_AsUTF8AndSize(prefix, &prefix_n);
    if (prefix_p == NULL)
        return NULL;
    n = PyList_GET_SIZE(positions);
    if (PyList_GET_SIZE(raws) != n || (leader_id != Py_None && !PyUnicode_Check(leader_id)))
        Py_RETURN_NONE;
    /* every message has its stamp, of the expected shape: else the reference answers */
    for (i = 0; i < n; i++) {
        PyObject *pos = PyList_GET_ITEM(positions, i), *stamp;
        long long p;
        if (!PyLong_CheckExact(pos) || !PyBytes_CheckExact(PyList_GET_ITEM(raws, i)))
            Py_RETURN_NONE;
        p = PyLong_AsLongLong(pos);
        if (p == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (p < 0 || p > INT64_MAX - BODY_OFFSET)
            Py_RETURN_NONE;
        stamp = PyDict_GetItemWithError(stamped, pos);
        if (stamp == NULL) {
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
        if (!PyTuple_CheckExact(stamp) || PyTuple_GET_SIZE(stamp) != 2)
            Py_RETURN_NONE;
    }
    out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        PyObject *pos = PyList_GET_ITEM(positions, i), *stamp, *r, *v;
        char id[64];
        long long p = PyLong_AsLongLong(pos);
        int len;
        if (p == -1 && PyErr_Occurred())
            goto fail;
        stamp = PyDict_GetItemWithError(stamped, pos);
        if (stamp == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "put_results: a stamp went away");
            goto fail;
        }
        Py_INCREF(stamp);
        if (PyDict_DelItem(stamped, pos) < 0) {
            Py_DECREF(stamp);
            goto fail;
        }
        r = cls->tp_alloc(cls, 0);
        if (r == NULL) {
            Py_DECREF(stamp);
            goto fail;
        }
        PyList_SET_ITEM(out, i, r);
        set_slot(r, S_STATUS, Py_NewRef(status));
        set_slot(r, S_QUEUE_OFFSET, Py_NewRef(PyTuple_GET_ITEM(stamp, 0)));
        set_slot(r, S_STORE_TIMESTAMP, Py_NewRef(PyTuple_GET_ITEM(stamp, 1)));
        Py_DECREF(stamp);
        set_slot(r, S_LEADER_ID, Py_NewRef(leader_id));
        set_slot(r, S_DETAIL, Py_NewRef(empty_text));
        if ((v = PyLong_FromLongLong(p + BODY_OFFSET)) == NULL)
            goto fail;
        set_slot(r, S_WROTE_OFFSET, v);
        if ((v = PyLong_FromSsize_t(PyBytes_GET_SIZE(PyList_GET_ITEM(raws, i)))) == NULL)
            goto fail;
        set_slot(r, S_WROTE_BYTES, v);
        len = snprintf(id, sizeof(id), "%016llX", (unsigned long long)(p + BODY_OFFSET));
        v = PyUnicode_New(prefix_n + len, 127);
        if (v == NULL)
            goto fail;
        memcpy(PyUnicode_DATA(v), prefix_p, (size_t)prefix_n);
        memcpy((char *)PyUnicode_DATA(v) + prefix_n, id, (size_t)len);
        set_slot(r, S_MSG_ID, v);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}
