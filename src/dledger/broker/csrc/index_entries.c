/* The key index's writes (its reference: IndexFile._put_hashes_python). */
#include "speedups.h"

/* IndexFile.put_hashes' loop: the entries work[start:] ((key_hash, phy_offset, store_timestamp)
 * each) into the index file's mmap until it is full (index_num entries); the file's fields in
 * and out as IndexFile keeps them. Layout: slots of 4 bytes from HEADER_SIZE, entries of 20
 * bytes (hash:i32 phy:i64 timeDiff:i32 prev:i32) from entries_base. */
#define INDEX_HEADER_SIZE 40
#define INDEX_ENTRY_SIZE 20


PyObject *dledger_put_index_entries(PyObject *self, PyObject *args) {
    Py_buffer mm;
    long long slots, entries_base, count, index_num, begin, used, start, n, stop, i;
    long long last = 0, diff = 0;
    int have_last = 0;
    PyObject *work, *begin_phy = NULL, *out = NULL;
    unsigned char *m;

    if (!PyArg_ParseTuple(args, "w*LLLLLLO!L:put_index_entries", &mm, &slots, &entries_base, &count, &index_num,
                          &begin, &used, &PyList_Type, &work, &start))
        return NULL;
    m = mm.buf;
    n = PyList_GET_SIZE(work);
    if (slots <= 0 || start < 0 || count < 0 || entries_base < INDEX_HEADER_SIZE + slots * 4) {
        PyErr_SetString(PyExc_ValueError, "put_index_entries: slots, start, count or entries_base out of range");
        goto done;
    }
    if (count >= index_num || start >= n) {
        out = Py_BuildValue("(iLLLO)", 0, count, used, begin, Py_None);
        goto done;
    }
    stop = n < start + index_num - count ? n : start + index_num - count;
    if (entries_base + (count + (stop - start)) * INDEX_ENTRY_SIZE > mm.len) {
        PyErr_Format(PyExc_ValueError, "put_index_entries: %lld entries from %lld run past the %zd-byte file",
                     stop - start, count, mm.len);
        goto done;
    }
    for (i = start; i < stop; i++) {
        PyObject *item = PyList_GET_ITEM(work, i);
        long long h, phy, ts, slot_pos;
        int32_t prev;
        unsigned char *e;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "put_index_entries: each entry is (key_hash, phy_offset, store_timestamp)");
            goto done;
        }
        h = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
        phy = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1));
        ts = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 2));
        if (PyErr_Occurred())
            goto done;
        if (h < INT32_MIN || h > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "put_index_entries: key hash %lld is not a 32-bit integer", h);
            goto done;
        }
        slot_pos = INDEX_HEADER_SIZE + (((h % slots) + slots) % slots) * 4;
        prev = be32(m + slot_pos);
        if (prev <= 0 || prev > count) {
            prev = 0;
            used++;
        }
        if (!have_last || ts != last) {   /* a message's keys share their time */
            have_last = 1;
            last = ts;
            if (begin <= 0 || ts <= begin)
                diff = 0;
            else {
                diff = (ts - begin) / 1000;
                if (diff > 0x7FFFFFFF)
                    diff = 0x7FFFFFFF;
            }
        }
        e = m + entries_base + count * INDEX_ENTRY_SIZE;
        put_be32(e, (uint32_t)h);
        put_be32(e + 4, (uint32_t)((uint64_t)phy >> 32));
        put_be32(e + 8, (uint32_t)phy);
        put_be32(e + 12, (uint32_t)diff);
        put_be32(e + 16, (uint32_t)prev);
        put_be32(m + slot_pos, (uint32_t)count);
        if (count <= 1) {
            Py_XDECREF(begin_phy);
            begin_phy = PyTuple_GET_ITEM(item, 1);
            Py_INCREF(begin_phy);
            begin = ts;
            have_last = 0;
        }
        count++;
    }
    out = Py_BuildValue("(LLLLO)", stop - start, count, used, begin, begin_phy != NULL ? begin_phy : Py_None);
done:
    Py_XDECREF(begin_phy);
    PyBuffer_Release(&mm);
    return out;
}
