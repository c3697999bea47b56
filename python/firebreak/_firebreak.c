/*
 * _firebreak.c -- the CPython extension over libfirebreak.
 *
 * The engine stays in C: this file only converts Python values to the
 * public API's arguments and back (fb_init, fb_step, phases, fb_ckpt_*,
 * and the reader fb_ckpt_layout_*: which tensors a step's shards hold, so
 * lazily created optimizer state can be allocated before restoring into
 * it, and any region of them from any rank's shard; firebreak.dcp's
 * StorageReader reads through it too).  The checkpoint part uses the
 * public header only (the flight recorder's bindings, further down, use
 * the library's internals).  Torch is not known here: a tensor arrives as an address, a byte count and an
 * owner object whose reference the handle keeps until close, so the memory
 * the engine was given stays valid (firebreak.h: "data must stay valid
 * until fb_ckpt_close").
 *
 * Errors are raised where they happen: firebreak.Error(rc, message) for a
 * libfirebreak code, ValueError / TypeError for bad arguments, each naming
 * the tensor or the argument.  Every call on a Ckpt first checks the handle
 * is open and not in use by another thread (the engine's calls on one
 * handle must not run concurrently); long calls release the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "firebreak/firebreak.h"
#include "lib/lib.h"

/* Python 3.8 and 3.9 lack these two (setup.py allows >= 3.8). */
#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_NewRef(PyObject *o)
{
    Py_INCREF(o);
    return o;
}
static int PyModule_AddObjectRef(PyObject *m, const char *name, PyObject *o)
{
    Py_INCREF(o);
    if (PyModule_AddObject(m, name, o) == 0)
        return 0;
    Py_DECREF(o);
    return -1;
}
#endif

static PyObject *fb_error; /* firebreak.Error */

/* libfirebreak's messages to its user (fb__say) during a call are kept
 * (fb__say_keep around the call), then written to sys.stderr (say_shown),
 * where a notebook or a redirected sys.stderr shows them, and the last
 * one of a call that failed is its error's message (raise_said): one
 * error is one message, not a line on the process's stderr and an
 * exception. */
static void say_shown(fb__say_buf *said)
{
    for (char *line = said->text, *nl; *line; line = nl ? nl + 1 : line + strlen(line)) {
        if ((nl = strchr(line, '\n')))
            *nl = '\0';
        PySys_FormatStderr("firebreak: %s\n", line);
    }
}

/* Raise firebreak.Error(rc, message): the last of the call's messages
 * SAID, without the C function's name it may start with ("fb_ckpt_open:
 * ", meaningless to a Python caller), else "what: strerror"; " (rc)"
 * after either.  The messages before the last (a restore's checkpoints
 * set aside on its way) are what happened on the way: shown. */
static PyObject *raise_said(int rc, const char *what, fb__say_buf *said)
{
    char last[sizeof said->text] = "";
    if (said && !said->cut && said->text[0]) {
        char *nl = strrchr(said->text, '\n');
        snprintf(last, sizeof last, "%s", nl ? nl + 1 : said->text);
        if (nl)
            *nl = '\0';
        else
            said->text[0] = '\0';
    }
    if (said)
        say_shown(said);
    size_t n = strncmp(last, "fb_", 3) ? 0 : 3 + strspn(last + 3, "abcdefghijklmnopqrstuvwxyz_");
    const char *words = last + (n && !strncmp(last + n, ": ", 2) ? n + 2 : 0);
    PyObject *msg = words[0] ? PyUnicode_FromFormat("%s (%d)", words, rc)
                             : PyUnicode_FromFormat("%s: %s (%d)", what, fb_strerror(rc), rc);
    if (!msg)
        return NULL;
    PyObject *v = Py_BuildValue("(iN)", rc, msg);
    if (v) {
        PyErr_SetObject(fb_error, v);
        Py_DECREF(v);
    }
    return NULL;
}

/* Raise firebreak.Error(rc, "what: strerror (rc)"). */
static PyObject *raise_rc(int rc, const char *what)
{
    return raise_said(rc, what, NULL);
}

/* ---------------------------------------------------------------- run */

static PyObject *py_init(PyObject *self, PyObject *noargs)
{
    fb__say_buf said;
    fb__say_keep(&said);
    int rc = fb_init();
    fb__say_keep(NULL);
    say_shown(&said); /* its warnings (FIREBREAK_INJECT, the segment) */
    return PyLong_FromLong(rc);
}

static PyObject *py_finalize(PyObject *self, PyObject *noargs)
{
    Py_BEGIN_ALLOW_THREADS
    fb_finalize();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_step(PyObject *self, PyObject *arg)
{
    unsigned long long step = PyLong_AsUnsignedLongLong(arg);
    if (step == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    fb_step((uint64_t)step);
    Py_RETURN_NONE;
}

static PyObject *py_set_phase(PyObject *self, PyObject *arg)
{
    long phase = PyLong_AsLong(arg);
    if (phase == -1 && PyErr_Occurred())
        return NULL;
    if (phase < FB_PHASE_INIT || phase > FB_PHASE_DONE)
        return PyErr_Format(PyExc_ValueError, "phase %ld: expected %d..%d", phase,
                            FB_PHASE_INIT, FB_PHASE_DONE);
    fb_set_phase((fb_phase)phase);
    Py_RETURN_NONE;
}

static PyObject *py_get_phase(PyObject *self, PyObject *noargs)
{
    return PyLong_FromLong((long)fb__lib_phase());
}

static PyObject *py_heartbeat(PyObject *self, PyObject *noargs)
{
    fb_heartbeat();
    Py_RETURN_NONE;
}

static PyObject *py_attached(PyObject *self, PyObject *noargs)
{
    return PyBool_FromLong(fb_attached());
}

static PyObject *py_rank(PyObject *self, PyObject *noargs)
{
    return PyLong_FromLong(fb_rank());
}

static PyObject *py_world_size(PyObject *self, PyObject *noargs)
{
    return PyLong_FromLong(fb_world_size());
}

static PyObject *py_restart_count(PyObject *self, PyObject *noargs)
{
    return PyLong_FromLong(fb_restart_count());
}

static PyObject *py_run_dir(PyObject *self, PyObject *noargs)
{
    const char *d = fb_run_dir();
    if (!d || !*d)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(d);
}

static PyObject *py_strerror(PyObject *self, PyObject *arg)
{
    long rc = PyLong_AsLong(arg);
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    if (rc < INT_MIN || rc > INT_MAX)
        return PyErr_Format(PyExc_ValueError, "error code %ld out of range", rc);
    return PyUnicode_FromString(fb_strerror((int)rc));
}

static PyObject *py_dtype_size(PyObject *self, PyObject *arg)
{
    long d = PyLong_AsLong(arg);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    if (d < 0 || d >= FB_DTYPE_COUNT_)
        return PyErr_Format(PyExc_ValueError, "dtype %ld: expected 0..%d", d,
                            FB_DTYPE_COUNT_ - 1);
    return PyLong_FromSize_t(fb_dtype_size((fb_dtype)d));
}

/* A shape tuple from ndim entries. */
static PyObject *dims_tuple(int ndim, const int64_t *v)
{
    PyObject *t = PyTuple_New(ndim);
    for (int d = 0; t && d < ndim; d++) {
        PyObject *x = PyLong_FromLongLong(v[d]);
        if (!x) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, d, x);
    }
    return t;
}

/*
 * layout(dir, rank, world_size) -> None | (step, [(name, dtype, shape)])
 * The newest complete checkpoint in dir saved by world_size ranks whose
 * shards have valid headers, and the tensors of `rank`'s shard (dtype as
 * the fb_dtype number).  Reads headers only: verifying is
 * fb_ckpt_restore's job, which may then still fall back to an older
 * checkpoint (the glue asks again).
 */
static PyObject *py_layout(PyObject *self, PyObject *args)
{
    PyObject *dir_obj = NULL;
    int rank, world_size;
    if (!PyArg_ParseTuple(args, "O&ii", PyUnicode_FSConverter, &dir_obj, &rank,
                          &world_size))
        return NULL;
    const char *dir = PyBytes_AS_STRING(dir_obj);
    PyObject *result = NULL, *list = NULL;
    fb_ckpt_layout *lay = NULL;
    int rc;
    if (rank < 0 || world_size < 1 || rank >= world_size) {
        PyErr_Format(PyExc_ValueError, "rank %d of world size %d", rank, world_size);
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = fb_ckpt_layout_open(&lay, dir, world_size, FB_CKPT_NEWEST);
    Py_END_ALLOW_THREADS
    if (rc == FB_ENOCKPT) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    if (rc) {
        raise_rc(rc, dir);
        goto out;
    }
    if (!(list = PyList_New(0)))
        goto out;
    for (size_t i = 0; i < fb_ckpt_layout_count(lay); i++) {
        fb_ckpt_tensor_info t;
        if (fb_ckpt_layout_tensor(lay, i, &t) || t.rank != rank)
            continue;
        PyObject *item = Py_BuildValue("(siN)", t.name, (int)t.dtype,
                                       dims_tuple(t.ndim, t.shape));
        if (!item || PyList_Append(list, item)) {
            Py_XDECREF(item);
            goto out;
        }
        Py_DECREF(item);
    }
    result = Py_BuildValue("(KO)", (unsigned long long)fb_ckpt_layout_step(lay), list);
out:
    Py_XDECREF(list);
    fb_ckpt_layout_close(lay);
    Py_XDECREF(dir_obj);
    return result;
}

/* ------------------------------------------------------------- Ckpt */

typedef struct {
    PyObject_HEAD
    fb_ckpt *ck;
    PyObject *owners; /* list: what keeps each registered tensor's memory */
    int in_use;       /* a call on this handle is running (GIL released) */
} Ckpt;

/* 0 when the handle may be used now, else -1 with an exception set. */
static int ckpt_enter(Ckpt *c)
{
    if (!c->ck) {
        PyErr_SetString(PyExc_ValueError, "checkpoint handle is closed");
        return -1;
    }
    if (c->in_use) {
        PyErr_SetString(PyExc_RuntimeError,
                        "checkpoint handle used by two threads at once");
        return -1;
    }
    c->in_use = 1;
    return 0;
}

static int Ckpt_init(Ckpt *c, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dir", "rank", "world_size", "keep", "async_save",
                             "on_busy", "on_error", "io_threads", "snapshot", NULL};
    PyObject *dir_obj = NULL;
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    int on_busy = (int)o.on_busy, on_error = (int)o.on_error, snapshot = (int)o.snapshot;
    if (c->ck) {
        PyErr_SetString(PyExc_ValueError, "checkpoint handle already open");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&iiipiiii", kwlist,
                                     PyUnicode_FSConverter, &dir_obj, &o.rank,
                                     &o.world_size, &o.keep, &o.async, &on_busy,
                                     &on_error, &o.io_threads, &snapshot))
        return -1;
    int ret = -1;
    if (on_busy < FB_CKPT_BUSY_WAIT || on_busy > FB_CKPT_BUSY_SKIP ||
        on_error < FB_CKPT_ERROR_CONTINUE || on_error > FB_CKPT_ERROR_STOP ||
        snapshot < FB_CKPT_SNAPSHOT_AUTO || snapshot > FB_CKPT_SNAPSHOT_PROTECT) {
        PyErr_SetString(PyExc_ValueError, "on_busy, on_error or snapshot out of range");
        goto out;
    }
    o.on_busy = (fb_ckpt_busy)on_busy;
    o.on_error = (fb_ckpt_on_error)on_error;
    o.snapshot = (fb_ckpt_snapshot)snapshot;
    o.dir = dir_obj ? PyBytes_AS_STRING(dir_obj) : NULL;
    c->owners = PyList_New(0);
    if (!c->owners)
        goto out;
    int rc;
    fb__say_buf said;
    fb__say_keep(&said);
    Py_BEGIN_ALLOW_THREADS
    rc = fb_ckpt_open(&c->ck, &o);
    Py_END_ALLOW_THREADS
    fb__say_keep(NULL);
    if (rc) {
        raise_said(rc, o.dir ? o.dir : "opening the checkpoint handle", &said);
        goto out;
    }
    say_shown(&said);
    ret = 0;
out:
    Py_XDECREF(dir_obj);
    return ret;
}

/* Up to FB_CKPT_MAX_DIMS non-negative integers from a sequence into out;
 * *ndim their count.  0, or -1 with an exception naming the tensor. */
static int parse_dims(PyObject *obj, const char *name, const char *what,
                      int64_t *out, int *ndim)
{
    PyObject *seq = PySequence_Fast(obj, "shape must be a sequence");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int ret = -1;
    if (n > FB_CKPT_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "tensor %s: %zd dimensions, at most %d", name,
                     n, FB_CKPT_MAX_DIMS);
        goto out;
    }
    for (Py_ssize_t d = 0; d < n; d++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, d));
        if (v == -1 && PyErr_Occurred())
            goto out;
        if (v < 0) {
            PyErr_Format(PyExc_ValueError, "tensor %s: %s%sdimension %zd is %lld",
                         name, what, *what ? " " : "", d, v);
            goto out;
        }
        out[d] = v;
    }
    *ndim = (int)n;
    ret = 0;
out:
    Py_DECREF(seq);
    return ret;
}

/* nbytes must be what shape and dtype make.  0, or -1 with an exception. */
static int check_nbytes(const char *name, int dtype, int ndim, const int64_t *shape,
                        unsigned long long nbytes)
{
    if (dtype < 0 || dtype >= FB_DTYPE_COUNT_) {
        PyErr_Format(PyExc_ValueError, "tensor %s: dtype %d: expected 0..%d", name,
                     dtype, FB_DTYPE_COUNT_ - 1);
        return -1;
    }
    unsigned long long expect = fb_dtype_size((fb_dtype)dtype);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] && expect > ULLONG_MAX / (unsigned long long)shape[d]) {
            PyErr_Format(PyExc_ValueError, "tensor %s: size overflows", name);
            return -1;
        }
        expect *= (unsigned long long)shape[d];
    }
    if (expect != nbytes) {
        PyErr_Format(PyExc_ValueError, "tensor %s: %llu bytes given, shape and dtype "
                     "make %llu", name, nbytes, expect);
        return -1;
    }
    return 0;
}

/* register(name, dtype, shape, address, nbytes, owner, global_shape=None,
 *          global_offset=None): a slice when global_shape is given. */
static PyObject *Ckpt_register(Ckpt *c, PyObject *args)
{
    const char *name;
    int dtype, ndim = 0, gndim = 0, ondim = 0;
    PyObject *shape_obj, *owner, *gshape_obj = Py_None, *goff_obj = Py_None;
    unsigned long long addr, nbytes;
    int64_t shape[FB_CKPT_MAX_DIMS], gshape[FB_CKPT_MAX_DIMS], goff[FB_CKPT_MAX_DIMS];
    if (!PyArg_ParseTuple(args, "siOKKO|OO", &name, &dtype, &shape_obj, &addr,
                          &nbytes, &owner, &gshape_obj, &goff_obj))
        return NULL;
    if (dtype < 0 || dtype >= FB_DTYPE_COUNT_)
        return PyErr_Format(PyExc_ValueError, "tensor %s: dtype %d: expected 0..%d",
                            name, dtype, FB_DTYPE_COUNT_ - 1);
    if (parse_dims(shape_obj, name, "", shape, &ndim) ||
        check_nbytes(name, dtype, ndim, shape, nbytes))
        return NULL;
    int slice = gshape_obj != Py_None;
    if (slice) {
        if (parse_dims(gshape_obj, name, "global", gshape, &gndim) ||
            (goff_obj != Py_None &&
             parse_dims(goff_obj, name, "offset", goff, &ondim)))
            return NULL;
        if (goff_obj == Py_None) {
            memset(goff, 0, sizeof goff);
            ondim = ndim;
        }
        if (gndim != ndim || ondim != ndim)
            return PyErr_Format(PyExc_ValueError, "tensor %s: %d dimensions, a "
                                "global shape of %d and an offset of %d", name,
                                ndim, gndim, ondim);
        for (int d = 0; d < ndim; d++)
            if (goff[d] > gshape[d] - shape[d])
                return PyErr_Format(PyExc_ValueError, "tensor %s: a slice of %lld at "
                                    "offset %lld in dimension %d does not fit the "
                                    "global size %lld", name, (long long)shape[d],
                                    (long long)goff[d], d, (long long)gshape[d]);
    }
    if (!addr && nbytes)
        return PyErr_Format(PyExc_ValueError, "tensor %s: null address", name);
    if (ckpt_enter(c))
        return NULL;
    /* A zero-byte tensor may have no address; give the engine a valid one. */
    static char empty;
    void *data = addr ? (void *)(uintptr_t)addr : &empty;
    int rc;
    if (PyList_Append(c->owners, owner)) {
        c->in_use = 0;
        return NULL;
    }
    fb__say_buf said;
    fb__say_keep(&said);
    Py_BEGIN_ALLOW_THREADS /* registering may fault in staging memory */
    rc = fb_ckpt_register_slice(c->ck, name, (fb_dtype)dtype, ndim, shape, data,
                                slice ? gshape : NULL, slice ? goff : NULL);
    Py_END_ALLOW_THREADS
    fb__say_keep(NULL);
    c->in_use = 0;
    if (rc) {
        char what[1200];
        snprintf(what, sizeof what, "registering tensor %s", name);
        return raise_said(rc, what, &said);
    }
    say_shown(&said);
    Py_RETURN_NONE;
}

static PyObject *Ckpt_save(Ckpt *c, PyObject *arg)
{
    unsigned long long step = PyLong_AsUnsignedLongLong(arg);
    if (step == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (ckpt_enter(c))
        return NULL;
    int rc;
    fb__say_buf said;
    fb__say_keep(&said);
    Py_BEGIN_ALLOW_THREADS
    rc = fb_ckpt_save(c->ck, (uint64_t)step);
    Py_END_ALLOW_THREADS
    fb__say_keep(NULL);
    c->in_use = 0;
    if (rc && rc != FB_EBUSY)
        return raise_said(rc, "saving a checkpoint", &said);
    say_shown(&said); /* a save skipped (FB_EBUSY) says why */
    return PyBool_FromLong(rc != FB_EBUSY);
}

static PyObject *Ckpt_wait(Ckpt *c, PyObject *noargs)
{
    if (ckpt_enter(c))
        return NULL;
    int rc;
    fb__say_buf said;
    fb__say_keep(&said);
    Py_BEGIN_ALLOW_THREADS
    rc = fb_ckpt_wait(c->ck);
    Py_END_ALLOW_THREADS
    fb__say_keep(NULL);
    c->in_use = 0;
    if (rc)
        return raise_said(rc, "checkpoint save", &said);
    say_shown(&said);
    Py_RETURN_NONE;
}

/* restore() -> step, or None when there is no checkpoint (FB_ENOCKPT). */
static PyObject *Ckpt_restore(Ckpt *c, PyObject *noargs)
{
    if (ckpt_enter(c))
        return NULL;
    uint64_t step = 0;
    int rc;
    fb__say_buf said;
    fb__say_keep(&said);
    Py_BEGIN_ALLOW_THREADS
    rc = fb_ckpt_restore(c->ck, &step);
    Py_END_ALLOW_THREADS
    fb__say_keep(NULL);
    c->in_use = 0;
    if (rc && rc != FB_ENOCKPT)
        return raise_said(rc, "restoring a checkpoint", &said);
    say_shown(&said); /* the checkpoints set aside, when one was */
    if (rc == FB_ENOCKPT)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(step);
}

static void ckpt_close(Ckpt *c)
{
    fb_ckpt *ck = c->ck;
    c->ck = NULL;
    if (ck) {
        Py_BEGIN_ALLOW_THREADS
        fb_ckpt_close(ck);
        Py_END_ALLOW_THREADS
    }
    Py_CLEAR(c->owners); /* only now may the tensors' memory go */
}

static PyObject *Ckpt_close(Ckpt *c, PyObject *noargs)
{
    if (c->in_use) {
        PyErr_SetString(PyExc_RuntimeError,
                        "checkpoint handle closed while another thread uses it");
        return NULL;
    }
    ckpt_close(c);
    Py_RETURN_NONE;
}

static PyObject *Ckpt_get_dir(Ckpt *c, void *closure)
{
    if (!c->ck) {
        PyErr_SetString(PyExc_ValueError, "checkpoint handle is closed");
        return NULL;
    }
    return PyUnicode_DecodeFSDefault(fb_ckpt_dir(c->ck));
}

static PyObject *Ckpt_get_closed(Ckpt *c, void *closure)
{
    return PyBool_FromLong(c->ck == NULL);
}

static void Ckpt_dealloc(Ckpt *c)
{
    if (!c->in_use)
        ckpt_close(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyMethodDef Ckpt_methods[] = {
    {"register", (PyCFunction)(void (*)(void))Ckpt_register, METH_VARARGS,
     "register(name, dtype, shape, address, nbytes, owner): add a tensor; owner "
     "is kept alive until close()"},
    {"save", (PyCFunction)(void (*)(void))Ckpt_save, METH_O,
     "save(step) -> True, or False when skipped (on_busy=skip)"},
    {"wait", (PyCFunction)(void (*)(void))Ckpt_wait, METH_NOARGS, "wait for the save in flight"},
    {"restore", (PyCFunction)(void (*)(void))Ckpt_restore, METH_NOARGS,
     "restore() -> step restored, or None when no checkpoint verifies"},
    {"close", (PyCFunction)(void (*)(void))Ckpt_close, METH_NOARGS,
     "wait for the save in flight, free the handle"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Ckpt_getset[] = {
    {"dir", (getter)Ckpt_get_dir, NULL, "the checkpoint directory", NULL},
    {"closed", (getter)Ckpt_get_closed, NULL, "True after close()", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject CkptType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "firebreak._firebreak.Ckpt",
    .tp_basicsize = sizeof(Ckpt),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Ckpt(dir=None, rank=-1, world_size=0, keep=2, async_save=True, "
              "on_busy=0, on_error=0, io_threads=0, snapshot=0): an fb_ckpt handle",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Ckpt_init,
    .tp_dealloc = (destructor)Ckpt_dealloc,
    .tp_methods = Ckpt_methods,
    .tp_getset = Ckpt_getset,
};

/* ------------------------------------------------------------ Layout
 * A complete step opened for reading across its shards (fb_ckpt_layout_*):
 * replicated tensors from the rank that wrote them, slices of sharded
 * tensors on another world size.  open_layout() returns one or None. */

typedef struct {
    PyObject_HEAD
    fb_ckpt_layout *lay;
    int in_use;       /* read() is running with the GIL released */
} Layout;

static PyTypeObject LayoutType;

/* open_layout(dir, world_size=0, max_step=None) -> Layout | None */
static PyObject *py_open_layout(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"dir", "world_size", "max_step", NULL};
    PyObject *dir_obj = NULL, *max_obj = Py_None;
    int world_size = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|iO", kwlist, PyUnicode_FSConverter,
                                     &dir_obj, &world_size, &max_obj))
        return NULL;
    PyObject *result = NULL;
    uint64_t max_step = FB_CKPT_NEWEST;
    if (max_obj != Py_None) {
        unsigned long long m = PyLong_AsUnsignedLongLong(max_obj);
        if (m == (unsigned long long)-1 && PyErr_Occurred())
            goto out;
        max_step = m;
    }
    if (world_size < 0) {
        PyErr_Format(PyExc_ValueError, "world size %d", world_size);
        goto out;
    }
    fb_ckpt_layout *lay = NULL;
    const char *dir = PyBytes_AS_STRING(dir_obj);
    int rc;
    fb__say_buf said;
    fb__say_keep(&said);
    Py_BEGIN_ALLOW_THREADS
    rc = fb_ckpt_layout_open(&lay, dir, world_size, max_step);
    Py_END_ALLOW_THREADS
    fb__say_keep(NULL);
    say_shown(&said); /* the steps passed over, and why */
    if (rc == FB_ENOCKPT) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    if (rc) {
        raise_rc(rc, dir);
        goto out;
    }
    Layout *l = PyObject_New(Layout, &LayoutType);
    if (!l) {
        fb_ckpt_layout_close(lay);
        goto out;
    }
    l->lay = lay;
    l->in_use = 0;
    result = (PyObject *)l;
out:
    Py_XDECREF(dir_obj);
    return result;
}

static int layout_open(Layout *l)
{
    if (!l->lay) {
        PyErr_SetString(PyExc_ValueError, "checkpoint layout is closed");
        return -1;
    }
    if (l->in_use) {
        PyErr_SetString(PyExc_RuntimeError,
                        "checkpoint layout used by two threads at once");
        return -1;
    }
    return 0;
}

/* tensors() -> [(name, rank, dtype, shape, global_shape, global_offset)] */
static PyObject *Layout_tensors(Layout *l, PyObject *noargs)
{
    if (layout_open(l))
        return NULL;
    size_t n = fb_ckpt_layout_count(l->lay);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        fb_ckpt_tensor_info t;
        fb_ckpt_layout_tensor(l->lay, i, &t);
        PyObject *item = Py_BuildValue("(siiNNN)", t.name, t.rank, (int)t.dtype,
                                       dims_tuple(t.ndim, t.shape),
                                       dims_tuple(t.ndim, t.global_shape),
                                       dims_tuple(t.ndim, t.global_offset));
        if (!item)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* read([(name, rank, dtype, shape, global_shape, global_offset, address,
 *        nbytes)], io_threads=0): every region verified, then copied. */
static PyObject *Layout_read(Layout *l, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"requests", "io_threads", NULL};
    PyObject *reqs_obj;
    int io_threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|i", kwlist, &reqs_obj, &io_threads))
        return NULL;
    if (layout_open(l))
        return NULL;
    PyObject *seq = PySequence_Fast(reqs_obj, "requests must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    /* per request: shape, global shape, offset */
    int64_t (*dims)[3][FB_CKPT_MAX_DIMS] = PyMem_Calloc(n ? (size_t)n : 1, sizeof *dims);
    fb_ckpt_read_req *q = PyMem_Calloc(n ? (size_t)n : 1, sizeof *q);
    PyObject *ret = NULL;
    if (!dims || !q) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name;
        int rank, dtype, nd[3];
        PyObject *o[3];
        unsigned long long addr, nbytes;
        static const char *const what[3] = {"", "global", "offset"};
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "siiOOOKK;a request "
                              "is (name, rank, dtype, shape, global_shape, "
                              "global_offset, address, nbytes)", &name, &rank, &dtype,
                              &o[0], &o[1], &o[2], &addr, &nbytes))
            goto out;
        for (int k = 0; k < 3; k++)
            if (parse_dims(o[k], name, what[k], dims[i][k], &nd[k]))
                goto out;
        if (check_nbytes(name, dtype, nd[0], dims[i][0], nbytes))
            goto out;
        if (nd[1] != nd[0] || nd[2] != nd[0]) {
            PyErr_Format(PyExc_ValueError, "tensor %s: %d dimensions, a global "
                         "shape of %d and an offset of %d", name, nd[0], nd[1], nd[2]);
            goto out;
        }
        if (!addr && nbytes) {
            PyErr_Format(PyExc_ValueError, "tensor %s: null address", name);
            goto out;
        }
        q[i] = (fb_ckpt_read_req){name, rank < 0 ? -1 : rank, (fb_dtype)dtype, nd[0],
                                  dims[i][0], dims[i][1], dims[i][2],
                                  (void *)(uintptr_t)addr};
    }
    char err[1024];
    int rc;
    fb_ckpt_layout *lay = l->lay;
    l->in_use = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = fb_ckpt_layout_read(lay, q, (size_t)n, io_threads, err, sizeof err);
    Py_END_ALLOW_THREADS
    l->in_use = 0;
    if (rc) {
        raise_rc(rc, err[0] ? err : "reading a checkpoint");
        goto out;
    }
    ret = Py_NewRef(Py_None);
out:
    PyMem_Free(q);   /* names point into seq's tuples: freed after */
    PyMem_Free(dims);
    Py_DECREF(seq);
    return ret;
}

static PyObject *Layout_close(Layout *l, PyObject *noargs)
{
    if (l->in_use) {
        PyErr_SetString(PyExc_RuntimeError,
                        "checkpoint layout closed while another thread reads it");
        return NULL;
    }
    fb_ckpt_layout_close(l->lay);
    l->lay = NULL;
    Py_RETURN_NONE;
}

static PyObject *Layout_get_step(Layout *l, void *closure)
{
    if (layout_open(l))
        return NULL;
    return PyLong_FromUnsignedLongLong(fb_ckpt_layout_step(l->lay));
}

static PyObject *Layout_get_world_size(Layout *l, void *closure)
{
    if (layout_open(l))
        return NULL;
    return PyLong_FromLong(fb_ckpt_layout_world_size(l->lay));
}

static void Layout_dealloc(Layout *l)
{
    fb_ckpt_layout_close(l->lay);
    PyObject_Free(l);
}

static PyMethodDef Layout_methods[] = {
    {"tensors", (PyCFunction)(void (*)(void))Layout_tensors, METH_NOARGS,
     "tensors() -> [(name, rank, dtype, shape, global_shape, global_offset)]"},
    {"read", (PyCFunction)(void (*)(void))Layout_read, METH_VARARGS | METH_KEYWORDS,
     "read([(name, rank, dtype, shape, global_shape, global_offset, address, "
     "nbytes)], io_threads=0): read and verify, then copy every region"},
    {"close", (PyCFunction)(void (*)(void))Layout_close, METH_NOARGS, "release it"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Layout_getset[] = {
    {"step", (getter)Layout_get_step, NULL, "the checkpoint's step", NULL},
    {"world_size", (getter)Layout_get_world_size, NULL, "ranks that saved it", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject LayoutType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "firebreak._firebreak.Layout",
    .tp_basicsize = sizeof(Layout),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a complete checkpoint step opened for reading across its shards "
              "(open_layout)",
    .tp_dealloc = (destructor)Layout_dealloc,
    .tp_methods = Layout_methods,
    .tp_getset = Layout_getset,
};
/* ------------------------------------------------------ python hooks */
/*
 * For firebreak/_hooks.py (docs/pytorch.md, "Unmodified scripts"): record
 * torch.distributed calls into this rank's flight-recorder ring with the
 * caller's file:line, tell the supervisor which step is durable, and
 * answer its dump requests.  Every call here runs with the GIL held except
 * dump_wait, so the recorder's one-writer rule holds whatever thread
 * (the training thread, DDP's comm hook, a future's callback) records.
 */
#include <linux/futex.h>
#include <malloc.h>
#include <sys/syscall.h>

#include "common/util.h"
#include "fr/recorder.h"

#if PY_VERSION_HEX < 0x03090000
/* Python 3.8 lacks these two accessors (3.9 added them). */
static PyCodeObject *PyFrame_GetCode(PyFrameObject *f)
{
    Py_INCREF(f->f_code);
    return f->f_code;
}
static PyFrameObject *PyFrame_GetBack(PyFrameObject *f)
{
    Py_XINCREF(f->f_back);
    return f->f_back;
}
#endif

#if PY_VERSION_HEX < 0x03090000
#define Py_IS_TYPE(o, t) (Py_TYPE(o) == (t))
#endif

#define HOOK_SKIP_MAX 8
static char *hook_skip[HOOK_SKIP_MAX]; /* file prefixes that are not the caller */
static size_t hook_skip_len[HOOK_SKIP_MAX];
static int hook_nskip;

/* Call sites seen, one lookup per frame: keyed by the code object (a
 * strong reference: its address stays its own while the entry holds it)
 * and the instruction offset, whether its file is passed over (torch,
 * firebreak, the standard library: decided by the file's name, which a
 * code object never changes), the file's base name (UTF-8, owned by the
 * code: the ring keeps only that, so a call reads no more of the path) and
 * the line (PyFrame_GetLineNumber decodes the code's line table from its
 * start: a large share of recording one collective when done per call,
 * while a training loop calls from the same few places).  Direct-mapped;
 * fr_skip empties it. */
#define HOOK_SITES 128
static struct hook_site {
    PyCodeObject *code;
    const char *file;
    int lasti, line, skip;
} hook_sites[HOOK_SITES];

/* fr_skip(prefixes): frames whose file starts with one of these (torch's
 * and firebreak's directories) are passed over when looking for the
 * caller. */
static PyObject *py_fr_skip(PyObject *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "fr_skip: expected a sequence of str");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > HOOK_SKIP_MAX) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "fr_skip: at most %d prefixes, got %zd",
                            HOOK_SKIP_MAX, n);
    }
    char *v[HOOK_SKIP_MAX] = {0};
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *p = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
        if (!p || !(v[i] = strdup(p))) {
            for (Py_ssize_t k = 0; k < i; k++)
                free(v[k]);
            Py_DECREF(seq);
            return p ? PyErr_NoMemory() : NULL;
        }
    }
    Py_DECREF(seq);
    for (int i = 0; i < hook_nskip; i++)
        free(hook_skip[i]);
    for (Py_ssize_t i = 0; i < n; i++) {
        hook_skip[i] = v[i];
        hook_skip_len[i] = strlen(v[i]);
    }
    hook_nskip = (int)n;
    for (int i = 0; i < HOOK_SITES; i++)
        Py_CLEAR(hook_sites[i].code);
    Py_RETURN_NONE;
}

/* fr_comm(comm_id, size, rank, first, stride, name) -> bool: describe a
 * process group (first/stride: world ranks of its members, stride 0
 * unknown).  False when not recording. */
static PyObject *py_fr_comm(PyObject *self, PyObject *args)
{
    unsigned long long id;
    int size, rank, first, stride;
    const char *name;
    if (!PyArg_ParseTuple(args, "Kiiiis", &id, &size, &rank, &first, &stride, &name))
        return NULL;
    if (size <= 0 || rank < 0 || rank >= size)
        return PyErr_Format(PyExc_ValueError, "fr_comm: rank %d of size %d", rank, size);
    return PyBool_FromLong(fb__fr_comm_register(id, 0, size, rank, first, stride, name)
                           != NULL);
}

/* The entry of this frame's call site (NULL with an exception set: its
 * file name is not UTF-8). */
static struct hook_site *site_of(PyFrameObject *f, PyCodeObject *co)
{
#if PY_VERSION_HEX >= 0x030B0000
    int lasti = PyFrame_GetLasti(f);
#else
    int lasti = f->f_lasti;
#endif
    uintptr_t k = ((uintptr_t)co >> 4) ^ (uintptr_t)lasti * 0x9e3779b1u;
    struct hook_site *e = &hook_sites[(k ^ (k >> 7)) & (HOOK_SITES - 1)];
    if (__builtin_expect(e->code == co && e->lasti == lasti, 1))
        return e;
    const char *fn = PyUnicode_AsUTF8(co->co_filename);
    if (!fn)
        return NULL;
    int skip = !strncmp(fn, "<frozen", 7);
    for (int i = 0; i < hook_nskip && !skip; i++)
        skip = !strncmp(fn, hook_skip[i], hook_skip_len[i]);
    Py_INCREF(co);
    Py_XSETREF(e->code, co);
    const char *base = strrchr(fn, '/');
    e->file = base ? base + 1 : fn; /* what the ring keeps: read per call */
    e->lasti = lasti;
    e->skip = skip;
    e->line = skip ? 0 : PyFrame_GetLineNumber(f);
    return e;
}

/* The first frame of the calling thread outside the skipped prefixes:
 * its file's base name (UTF-8, owned by the code object, which *code
 * keeps alive) and line; 0 when there is none. */
static int hook_site(PyCodeObject **code, const char **file)
{
    PyFrameObject *f = PyEval_GetFrame(); /* borrowed */
    Py_XINCREF(f);
    int line = 0;
    *code = NULL;
    while (f) {
        PyCodeObject *co = PyFrame_GetCode(f);
        struct hook_site *e = co ? site_of(f, co) : NULL;
        if (e && !e->skip) {
            line = e->line;
            *code = co;
            *file = e->file;
            break;
        }
        if (!e && co)
            PyErr_Clear(); /* a name that is not UTF-8: not a site */
        Py_XDECREF(co);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_XDECREF(f);
    return line > 0 ? line : 0;
}

/* Record entering `op` on the described group `comm_id` from the caller's
 * file:line: the handle, 0 when not recording (or the group unknown).
 * dtype -1: elem_bytes says the element size. */
static uint64_t hook_record(uint64_t comm_id, int op, int dtype, unsigned elem_bytes,
                            uint64_t count, uint64_t out_count, int peer, uint32_t flags)
{
    fb__fr_comm *c = fb__fr_comm_find(comm_id);
    if (!c)
        return 0;
    uint32_t fl = flags & (FB__FR_F_P2P | FB__FR_F_VARIABLE);
    if (dtype < 0)
        fl |= FB__FR_F_DTYPE_OTHER;
    else
        elem_bytes = (unsigned)fb_dtype_size((fb_dtype)dtype);
    PyCodeObject *co;
    const char *file = NULL;
    int line = hook_site(&co, &file);
    uint64_t h = fb__fr_record_at(c, (fb_op)op, dtype < 0 ? 0 : dtype, elem_bytes, count,
                                  out_count, peer, 0, fl, FB__FR_STARTED, file,
                                  (uint32_t)line);
    Py_XDECREF(co);
    return h;
}

/* fr_begin(comm_id, op, dtype, elem_bytes, count, out_count, peer, flags)
 * -> handle: an fb_op entered on a described group, from the caller's
 * file:line.  dtype: an fb_dtype, or -1 (then elem_bytes says its size).
 * flags: FR_P2P, FR_VARIABLE.  0 when not recording. */
static PyObject *py_fr_begin(PyObject *self, PyObject *args)
{
    unsigned long long id, count, out_count;
    int op, dtype, peer;
    unsigned int elem_bytes, flags;
    if (!PyArg_ParseTuple(args, "KiiIKKiI", &id, &op, &dtype, &elem_bytes, &count,
                          &out_count, &peer, &flags))
        return NULL;
    if (op <= FB_OP_UNKNOWN || op >= FB_OP_COUNT_ || dtype < -1 ||
        dtype >= FB_DTYPE_COUNT_)
        return PyErr_Format(PyExc_ValueError, "fr_begin: op %d, dtype %d", op, dtype);
    return PyLong_FromUnsignedLongLong(hook_record(id, op, dtype, elem_bytes, count,
                                                   out_count, peer, flags));
}

/* fr_end(handle): the operation completed. */
static PyObject *py_fr_end(PyObject *self, PyObject *arg)
{
    unsigned long long h = PyLong_AsUnsignedLongLong(arg);
    if (h == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    fb__fr_event_state(h, FB__FR_COMPLETED);
    Py_RETURN_NONE;
}

/* committed(step, bytes, ns, text): the program's own checkpoint of
 * `step` is written (a whole-job checkpoint, FB__COMMIT_WHOLE). */
static PyObject *py_committed(PyObject *self, PyObject *args)
{
    unsigned long long step, bytes, ns;
    const char *text;
    if (!PyArg_ParseTuple(args, "KKKs", &step, &bytes, &ns, &text))
        return NULL;
    fb__lib_report(FB__REPORT_CKPT_COMMITTED, FB__COMMIT_WHOLE, step, bytes, ns, 0,
                   text);
    Py_RETURN_NONE;
}

/* note(code, step, text): a free-text report (NOTE_WHERE: where the main
 * thread is, answering a dump request). */
static PyObject *py_note(PyObject *self, PyObject *args)
{
    int code;
    unsigned long long step;
    const char *text;
    if (!PyArg_ParseTuple(args, "iKs", &code, &step, &text))
        return NULL;
    fb__lib_report(FB__REPORT_NOTE, code, step, 0, 0, 0, text);
    Py_RETURN_NONE;
}

/* dump_wait(last, timeout_ms) -> request: waits (without the GIL) until
 * the supervisor's dump request differs from `last` or the time is up;
 * returns the request word (0 when not attached). */
static PyObject *py_dump_wait(PyObject *self, PyObject *args)
{
    unsigned long long last;
    int timeout_ms;
    if (!PyArg_ParseTuple(args, "Ki", &last, &timeout_ms))
        return NULL;
    fb__seg *seg = fb__lib_seg();
    fb__seg_header *h = seg ? fb__seg_hdr(seg) : NULL;
    if (!h)
        return PyLong_FromLong(0);
    uint64_t req = last;
    Py_BEGIN_ALLOW_THREADS
    /* A futex on the word's low half: the supervisor wakes it after its
     * pwrite (fb__seg_request_dump), so the thread sleeps until asked
     * instead of polling (wakeups every few ms would cost the training
     * thread's collectives on a busy machine).  The timeout bounds a
     * missed wake. */
    uint32_t *word = (uint32_t *)(void *)&h->dump_request;
    uint64_t until = fb__now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
    for (;;) {
        req = atomic_load_explicit(&h->dump_request, memory_order_acquire);
        uint64_t now = fb__now_ns();
        if (req != last || now >= until)
            break;
        uint64_t left = until - now;
        struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
        syscall(SYS_futex, word, FUTEX_WAIT, (uint32_t)last, &ts, NULL, 0);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(req);
}

/* dump_done(request): the dumps asked by `request` are written. */
static PyObject *py_dump_done(PyObject *self, PyObject *arg)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(arg);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    fb__seg *seg = fb__lib_seg();
    if (seg)
        atomic_store_explicit(&fb__seg_hdr(seg)->dump_done, v, memory_order_release);
    Py_RETURN_NONE;
}

/* ---------------------------------------- recorded torch.distributed calls */
/*
 * Recorded(orig, op, flags, params, fields, what): what _hooks.py puts
 * in place of a torch.distributed function.  The per-call path is here,
 * in C, because it runs once per collective and must cost a small
 * fraction of the smallest one (docs/pytorch.md, "Unmodified scripts"):
 * it takes the group, tensor, counts and peer from the call's arguments
 * as described once at wrap time, finds the group and the dtype in
 * small caches (Python is asked only for a group or a dtype seen the
 * first time), records the begin with the caller's file:line, calls the
 * original and records the end; a returned Work goes to Python's
 * end_later.  A call made while this thread is inside a recorded one
 * (torch calling its own wrapped functions) is not recorded.  Nothing
 * here may fail the program's call: a failure to record is handed to
 * Python's failed() and the original runs regardless.
 *
 * params: up to HOOK_PARAMS (position or -1, keyword, default) of the
 * original's arguments; fields: (kind, param) for the group, the tensor,
 * the input count, the output count and the peer, in that order.
 */
#define HOOK_PARAMS 4
enum {
    HOOK_F_GROUP, HOOK_F_TENSOR, HOOK_F_COUNT, HOOK_F_OUT, HOOK_F_PEER, HOOK_F_N_
};
enum hook_kind {
    HOOK_K_NONE = 0,  /* nothing: no group (the default), no tensor, 0, peer -1 */
    HOOK_K_ARG,       /* the argument itself                                 */
    HOOK_K_FIRST,     /* a list's first element (the tensor of a list)       */
    HOOK_K_NUMEL,     /* a tensor's numel()                                  */
    HOOK_K_SUM,       /* the sum of a list's tensors' numel()                */
    HOOK_K_LEN,       /* len(list)                                           */
    HOOK_K_LEN_GROUP, /* len(list) times the group's size                    */
    HOOK_K_COUNT_
};

/* How the default group is read per call: getattr(world_obj, world_attr)
 * as Python would, or its two fast equivalents hooks_setup() found to
 * hold: a class attribute that is not a descriptor (torch 1.13's
 * GroupMember.WORLD: the type's attribute cache), an instance's own dict
 * entry that no descriptor of its type shadows (torch 2.x's
 * _world._default_pg: one dict lookup).  Each falls back to getattr for
 * a value it cannot vouch for. */
enum { HOOK_W_GETATTR, HOOK_W_CLASS, HOOK_W_DICT };

/* Set once by hooks_setup(); every Recorded shares them. */
static struct {
    PyObject *comm;      /* comm(group) -> (comm_id, size, {world rank: group rank}) */
    PyObject *end_later; /* end_later(work, handle): an async op's Work            */
    PyObject *failed;    /* failed(what, exception): says so once                  */
    PyObject *world_obj; /* getattr(world_obj, world_attr): the default group      */
    PyObject *world_attr;
    PyObject *dtypes;    /* {torch.dtype: fb_dtype}                                */
    int world_how;       /* HOOK_W_*: how the default group is read               */
    PyObject *s_numel, *s_dtype, *s_element_size;
} hook;

/* Inside a recorded call on this thread.  initial-exec: read in a few
 * instructions instead of a call to __tls_get_addr (an int fits in the
 * static TLS glibc keeps spare for dlopen'ed modules). */
static _Thread_local int hook_inside __attribute__((tls_model("initial-exec")));

/* Groups seen: a strong reference keeps each object's address its own,
 * so a pointer compare is an identity test.  Replaced round-robin past
 * HOOK_GROUPS (the comm is registered again on its next use, same id). */
#define HOOK_GROUPS 16
static struct hook_group {
    PyObject *pg;
    uint64_t comm_id;
    int size;
    PyObject *ranks; /* {world rank: group rank} */
} hook_groups[HOOK_GROUPS];
static unsigned hook_groups_next;

/* dtypes seen: torch.dtype objects are singletons. */
#define HOOK_DTYPES 32
static struct hook_dtype {
    PyObject *dt;
    int dtype;           /* fb_dtype, or -1 */
    unsigned elem_bytes; /* when -1 */
} hook_dtypes[HOOK_DTYPES];
static int hook_ndtypes;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *orig;
    PyObject *dict; /* __wrapped__, __name__, _firebreak ... (functools) */
    PyObject *what; /* for messages: "recording all_reduce" */
    int op;
    uint32_t flags;
    int nparams;
    struct {
        Py_ssize_t pos;
        PyObject *name; /* interned */
        PyObject *dflt;
    } param[HOOK_PARAMS];
    struct {
        int kind, param;
    } field[HOOK_F_N_];
} Recorded;

static PyTypeObject RecordedType;

/* hooks_setup(comm, end_later, failed, world_obj, world_attr, dtypes) */
static PyObject *py_hooks_setup(PyObject *self, PyObject *args)
{
    PyObject *v[6];
    if (!PyArg_ParseTuple(args, "OOOOUO!", &v[0], &v[1], &v[2], &v[3], &v[4],
                          &PyDict_Type, &v[5]))
        return NULL;
    PyObject **dst[6] = {&hook.comm, &hook.end_later, &hook.failed, &hook.world_obj,
                         &hook.world_attr, &hook.dtypes};
    for (int i = 0; i < 6; i++)
        Py_XSETREF(*dst[i], Py_NewRef(v[i]));
    hook.world_how = HOOK_W_GETATTR;
    if (PyType_Check(hook.world_obj)) {
        if (!_PyType_Lookup(Py_TYPE(hook.world_obj), hook.world_attr)) /* the metatype's */
            hook.world_how = HOOK_W_CLASS;
    }
#if PY_VERSION_HEX < 0x030D0000 /* 3.13 hides _PyObject_GetDictPtr: getattr there */
    else if (_PyObject_GetDictPtr(hook.world_obj) &&
             !_PyType_Lookup(Py_TYPE(hook.world_obj), hook.world_attr)) {
        hook.world_how = HOOK_W_DICT;
    }
#endif
    for (int i = 0; i < HOOK_GROUPS; i++) {
        Py_CLEAR(hook_groups[i].pg);
        Py_CLEAR(hook_groups[i].ranks);
    }
    for (int i = 0; i < hook_ndtypes; i++)
        Py_CLEAR(hook_dtypes[i].dt);
    hook_ndtypes = 0;
    Py_RETURN_NONE;
}

/* The value of parameter i in this call (borrowed). */
static PyObject *param_value(Recorded *r, int i, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    Py_ssize_t pos = r->param[i].pos;
    if (pos >= 0 && pos < nargs)
        return args[pos];
    if (kwnames) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        PyObject *name = r->param[i].name;
        for (Py_ssize_t k = 0; k < nk; k++)
            if (PyTuple_GET_ITEM(kwnames, k) == name)
                return args[nargs + k];
        for (Py_ssize_t k = 0; k < nk; k++) /* a name that is not interned */
            if (PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, k), name) == 0)
                return args[nargs + k];
    }
    return r->param[i].dflt;
}

static struct hook_group *group_of(PyObject *pg)
{
    for (int i = 0; i < HOOK_GROUPS; i++)
        if (hook_groups[i].pg == pg)
            return &hook_groups[i];
    PyObject *res = PyObject_CallFunctionObjArgs(hook.comm, pg, NULL);
    if (!res)
        return NULL;
    unsigned long long id;
    int size;
    PyObject *ranks;
    if (!PyArg_ParseTuple(res, "KiO!", &id, &size, &PyDict_Type, &ranks)) {
        Py_DECREF(res);
        return NULL;
    }
    struct hook_group *g = &hook_groups[hook_groups_next++ % HOOK_GROUPS];
    Py_XSETREF(g->pg, Py_NewRef(pg));
    Py_XSETREF(g->ranks, Py_NewRef(ranks));
    g->comm_id = id;
    g->size = size;
    Py_DECREF(res);
    return g;
}

/* Tensor types seen (torch.Tensor, nn.Parameter, ...) with the
 * descriptors of their `dtype` and `numel` found once: calling those
 * directly skips the attribute lookup (a third of reading them).  The
 * lookup is the type's own, so a subclass that overrides either is
 * honoured; anything but a plain getset / method descriptor goes the
 * generic way. */
#define HOOK_TYPES 4
static struct hook_type {
    PyTypeObject *type;
    PyObject *dtype_d, *numel_d; /* NULL: the generic way */
    PyCFunction numel_f;         /* numel_d's C function when it takes no arguments */
} hook_types[HOOK_TYPES];
static unsigned hook_types_next;

static struct hook_type *type_of(PyObject *t)
{
    PyTypeObject *tp = Py_TYPE(t);
    for (int i = 0; i < HOOK_TYPES; i++)
        if (hook_types[i].type == tp)
            return &hook_types[i];
    struct hook_type *e = &hook_types[hook_types_next++ % HOOK_TYPES];
    PyObject *d = _PyType_Lookup(tp, hook.s_dtype); /* borrowed */
    PyObject *n = _PyType_Lookup(tp, hook.s_numel);
    Py_XSETREF(e->dtype_d, d && Py_IS_TYPE(d, &PyGetSetDescr_Type) &&
                                   ((PyGetSetDescrObject *)d)->d_getset->get
                               ? Py_NewRef(d)
                               : NULL);
    Py_XSETREF(e->numel_d, n && Py_IS_TYPE(n, &PyMethodDescr_Type) ? Py_NewRef(n) : NULL);
    /* METH_NOARGS alone: called as the descriptor would call it, without
     * going through it (t is an instance of the type that defines it:
     * found in its MRO). */
    PyMethodDef *md = e->numel_d ? ((PyMethodDescrObject *)e->numel_d)->d_method : NULL;
    e->numel_f = md && md->ml_flags == METH_NOARGS ? md->ml_meth : NULL;
    Py_INCREF(tp);
    Py_XSETREF(e->type, tp);
    return e;
}

/* Tensors read in place.  Torch's numel() and dtype, called through
 * Python, are most of a recorded call's cost between two collectives:
 * their code, torch's thread-local state and the method machinery are
 * no longer cached when the next call comes (docs/bench.md, "Why the
 * real call costs more than the no-op").  Both are plain fields of the
 * tensor's TensorImpl (numel_, an int64; data_type_, whose 16-bit index
 * is the ScalarType), and the Python object holds the TensorImpl's
 * address (what `tensor._cdata` returns).  Where these are depends on
 * torch's version and build, so nothing here is compiled in:
 * hooks_tensors() finds them on probe tensors made by _hooks.py (every
 * dtype the hooks name, many shapes, views, resized ones, a Parameter),
 * and turns in-place reads on only when each of the three offsets is the
 * one place that holds the right value in every probe.  A call reads in
 * place only a tensor of exactly the probed Python types (torch.Tensor,
 * nn.Parameter: no subclass, whose numel or dtype may be its own) whose
 * TensorImpl has the probes' vtable (a dense tensor: a sparse, nested,
 * quantized or wrapped one is another class, and nested ones compute
 * numel() their own way) and whose code is one the probes named;
 * anything else asks torch as before.  FIREBREAK_HOOKS_ASK_TORCH=1 in
 * the rank's environment keeps them off (_hooks.py). */
#define HOOK_CODES 64
#define HOOK_IMPL_WINDOW 256 /* bytes of a TensorImpl the probes search */
static struct {
    PyTypeObject *type[2];    /* torch.Tensor, nn.Parameter: exactly these */
    Py_ssize_t impl_off;      /* the TensorImpl's address in the object; 0 off */
    const void *vtable;       /* the probes' TensorImpl class */
    int numel_off, code_off;  /* numel_ (int64), data_type_'s index (uint16) */
    signed char dtype[HOOK_CODES]; /* ScalarType -> fb_dtype; -1 not probed */
    unsigned long long direct, asked; /* tensors read in place, through torch */
} hook_tensor;

/* The TensorImpl of a tensor that may be read in place, or NULL. */
static inline const char *tensor_impl(PyObject *t)
{
    PyTypeObject *tp = Py_TYPE(t);
    if (!hook_tensor.impl_off || (tp != hook_tensor.type[0] && tp != hook_tensor.type[1]))
        return NULL;
    const char *p = *(const char *const *)(const void *)((const char *)t + hook_tensor.impl_off);
    if (!p || *(const void *const *)(const void *)p != hook_tensor.vtable)
        return NULL;
    return p;
}

/* "O&" converter: an int that is an address. */
static int address_conv(PyObject *o, void *p)
{
    *(void **)p = PyLong_AsVoidPtr(o);
    return !PyErr_Occurred();
}

struct probe {
    PyObject *t;
    const char *impl;
    size_t window;          /* bytes of impl that may be read */
    long long numel;
    int dtype;              /* fb_dtype */
};

/* The one offset in [from, to) (step `step`) where ok(probe, offset)
 * holds for every probe; -1 when none or several. */
static Py_ssize_t probe_find(const struct probe *pr, Py_ssize_t n, Py_ssize_t from,
                             Py_ssize_t to, Py_ssize_t step,
                             int (*ok)(const struct probe *, Py_ssize_t, Py_ssize_t,
                                       const struct probe *),
                             Py_ssize_t *found)
{
    *found = 0;
    Py_ssize_t at = -1;
    for (Py_ssize_t o = from; o + step <= to; o += step) {
        int all = 1;
        for (Py_ssize_t i = 0; i < n && all; i++)
            all = ok(&pr[i], o, i, pr);
        if (all) {
            at = o;
            ++*found;
        }
    }
    return *found == 1 ? at : -1;
}

static int ok_impl(const struct probe *p, Py_ssize_t o, Py_ssize_t i, const struct probe *all)
{
    (void)i, (void)all;
    return o + (Py_ssize_t)sizeof(void *) <= Py_TYPE(p->t)->tp_basicsize &&
           *(const char *const *)(const void *)((const char *)p->t + o) == p->impl;
}

static int ok_numel(const struct probe *p, Py_ssize_t o, Py_ssize_t i, const struct probe *all)
{
    (void)i, (void)all;
    int64_t v;
    if ((size_t)o + sizeof v > p->window)
        return 0;
    memcpy(&v, p->impl + o, sizeof v);
    return v == p->numel;
}

/* The same dtype gives the same code, another dtype another one, each
 * below HOOK_CODES. */
static int ok_code(const struct probe *p, Py_ssize_t o, Py_ssize_t i, const struct probe *all)
{
    uint16_t c, d;
    if ((size_t)o + sizeof c > p->window)
        return 0;
    memcpy(&c, p->impl + o, sizeof c);
    if (c >= HOOK_CODES)
        return 0;
    for (Py_ssize_t k = 0; k < i; k++) {
        if ((size_t)o + sizeof d > all[k].window)
            return 0;
        memcpy(&d, all[k].impl + o, sizeof d);
        if ((d == c) != (all[k].dtype == p->dtype))
            return 0;
    }
    return 1;
}

/* hooks_tensors(types, probes) -> str: find where tensors of `types`
 * (exactly these Python types) keep their TensorImpl, numel and dtype;
 * probes: (tensor, its TensorImpl's address, numel, fb_dtype), every one
 * a dense tensor whose TensorImpl was allocated on its own (its address
 * is the start of a malloc'd block: at most that block is read).
 * Turns in-place reads on and returns "" when each offset is found once,
 * else says why and leaves them off.  hooks_tensors(None, None) turns
 * them off. */
static PyObject *py_hooks_tensors(PyObject *self, PyObject *args)
{
    PyObject *types, *probes;
    if (!PyArg_ParseTuple(args, "OO", &types, &probes))
        return NULL;
    hook_tensor.impl_off = 0;
    for (int i = 0; i < 2; i++)
        Py_CLEAR(hook_tensor.type[i]);
    if (types == Py_None)
        return PyUnicode_FromString("off");
    PyTypeObject *tp[2];
    if (!PyArg_ParseTuple(types, "O!O!;hooks_tensors: types is (type, type)", &PyType_Type,
                          &tp[0], &PyType_Type, &tp[1]))
        return NULL;
    PyObject *seq = PySequence_Fast(probes, "hooks_tensors: probes is a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    struct probe *pr = n > 0 ? calloc((size_t)n, sizeof *pr) : NULL;
    PyObject *why = NULL;
    if (!pr) {
        why = n > 0 ? PyErr_NoMemory() : PyUnicode_FromString("no probes");
        goto out;
    }
    int seen[2] = {0, 0};
    for (Py_ssize_t i = 0; i < n; i++) {
        void *impl;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i),
                              "OO&Li;hooks_tensors: a probe is (tensor, address, numel, "
                              "dtype)", &pr[i].t, address_conv, &impl, &pr[i].numel,
                              &pr[i].dtype))
            goto out;
        pr[i].impl = impl;
        if (!impl || pr[i].dtype < 0 || pr[i].dtype >= FB_DTYPE_COUNT_) {
            PyErr_Format(PyExc_ValueError, "hooks_tensors: probe %zd: address %p, dtype %d",
                         i, impl, pr[i].dtype);
            goto out;
        }
        seen[0] |= Py_TYPE(pr[i].t) == tp[0];
        seen[1] |= Py_TYPE(pr[i].t) == tp[1];
        if (Py_TYPE(pr[i].t) != tp[0] && Py_TYPE(pr[i].t) != tp[1]) {
            why = PyUnicode_FromFormat("probe %zd is a %s", i, Py_TYPE(pr[i].t)->tp_name);
            goto out;
        }
    }
    if (!seen[0] || !seen[1]) {
        why = PyUnicode_FromString("no probe of one of the types");
        goto out;
    }
    /* The address first, read inside the Python objects only: no
     * TensorImpl's memory is read before every probe's object is seen to
     * hold the address it came with. */
    static const char *const name[3] = {"the TensorImpl's address", "numel", "dtype"};
    Py_ssize_t k[3], found[3];
    k[0] = probe_find(pr, n, (Py_ssize_t)sizeof(PyObject), 256, sizeof(void *), ok_impl,
                      &found[0]);
    if (k[0] < 0) {
        why = PyUnicode_FromFormat("%s found in %zd places, not 1", name[0], found[0]);
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t w = malloc_usable_size((void *)pr[i].impl);
        pr[i].window = w < HOOK_IMPL_WINDOW ? w : HOOK_IMPL_WINDOW;
    }
    const void *vt = *(const void *const *)(const void *)pr[0].impl;
    for (Py_ssize_t i = 1; i < n; i++)
        if (*(const void *const *)(const void *)pr[i].impl != vt) {
            why = PyUnicode_FromFormat("probe %zd: another TensorImpl class", i);
            goto out;
        }
    k[1] = probe_find(pr, n, sizeof(void *), HOOK_IMPL_WINDOW, sizeof(int64_t), ok_numel,
                      &found[1]);
    k[2] = probe_find(pr, n, sizeof(void *), HOOK_IMPL_WINDOW, sizeof(uint16_t), ok_code,
                      &found[2]);
    for (int i = 1; i < 3; i++)
        if (k[i] < 0) {
            why = PyUnicode_FromFormat("%s found in %zd places, not 1", name[i], found[i]);
            goto out;
        }
    memset(hook_tensor.dtype, -1, sizeof hook_tensor.dtype);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t c;
        memcpy(&c, pr[i].impl + k[2], sizeof c);
        hook_tensor.dtype[c] = (signed char)pr[i].dtype;
    }
    for (int i = 0; i < 2; i++)
        hook_tensor.type[i] = (PyTypeObject *)Py_NewRef((PyObject *)tp[i]);
    hook_tensor.vtable = vt;
    hook_tensor.numel_off = (int)k[1];
    hook_tensor.code_off = (int)k[2];
    hook_tensor.impl_off = k[0];
    why = PyUnicode_FromString("");
out:
    free(pr);
    Py_DECREF(seq);
    return why;
}

/* hooks_counts() -> (read in place, asked torch): tensors so far. */
static PyObject *py_hooks_counts(PyObject *self, PyObject *noargs)
{
    return Py_BuildValue("KK", hook_tensor.direct, hook_tensor.asked);
}

/* A tensor's numel(); 0 for None. */
static int numel_of(PyObject *t, uint64_t *n)
{
    *n = 0;
    if (t == Py_None)
        return 0;
    const char *impl = tensor_impl(t);
    if (impl) {
        int64_t v;
        memcpy(&v, impl + hook_tensor.numel_off, sizeof v);
        *n = (uint64_t)v;
        hook_tensor.direct++;
        return 0;
    }
    hook_tensor.asked++;
    struct hook_type *e = type_of(t);
    PyObject *v = e->numel_f   ? e->numel_f(t, NULL)
                  : e->numel_d ? PyObject_Vectorcall(e->numel_d, &t, 1, NULL)
                               : PyObject_CallMethodObjArgs(t, hook.s_numel, NULL);
    if (!v)
        return -1;
    *n = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

/* A count field: numel, the sum over a list, a list's length. */
static int count_of(int kind, PyObject *v, const struct hook_group *g, uint64_t *n)
{
    *n = 0;
    if (kind == HOOK_K_NONE || v == Py_None)
        return 0;
    if (kind == HOOK_K_NUMEL)
        return numel_of(v, n);
    if (kind == HOOK_K_LEN || kind == HOOK_K_LEN_GROUP) {
        Py_ssize_t len = PyObject_Length(v);
        if (len < 0)
            return -1;
        *n = (uint64_t)len * (kind == HOOK_K_LEN_GROUP ? (uint64_t)g->size : 1);
        return 0;
    }
    PyObject *seq = PySequence_Fast(v, "a list of tensors");
    if (!seq)
        return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && !rc; i++) {
        uint64_t k;
        rc = numel_of(PySequence_Fast_GET_ITEM(seq, i), &k);
        *n += k;
    }
    Py_DECREF(seq);
    return rc;
}

/* The tensor's fb_dtype (-1: another, its element size in *elem_bytes). */
static int dtype_of(PyObject *t, int *dtype, unsigned *elem_bytes)
{
    const char *impl = tensor_impl(t);
    if (impl) {
        uint16_t c;
        memcpy(&c, impl + hook_tensor.code_off, sizeof c);
        if (c < HOOK_CODES && hook_tensor.dtype[c] >= 0) {
            *dtype = hook_tensor.dtype[c];
            *elem_bytes = 0;
            hook_tensor.direct++;
            return 0;
        }
    }
    hook_tensor.asked++;
    struct hook_type *tt = type_of(t);
    PyObject *dt;
    if (tt->dtype_d) {
        PyGetSetDescrObject *gd = (PyGetSetDescrObject *)tt->dtype_d;
        dt = gd->d_getset->get(t, gd->d_getset->closure);
    } else {
        dt = PyObject_GetAttr(t, hook.s_dtype);
    }
    if (!dt)
        return -1;
    for (int i = 0; i < hook_ndtypes; i++)
        if (hook_dtypes[i].dt == dt) {
            *dtype = hook_dtypes[i].dtype;
            *elem_bytes = hook_dtypes[i].elem_bytes;
            Py_DECREF(dt);
            return 0;
        }
    int rc = -1;
    *dtype = -1;
    *elem_bytes = 0;
    PyObject *v = PyDict_GetItemWithError(hook.dtypes, dt); /* borrowed */
    if (v) {
        *dtype = (int)PyLong_AsLong(v);
    } else if (!PyErr_Occurred()) {
        PyObject *eb = PyObject_CallMethodObjArgs(t, hook.s_element_size, NULL);
        if (eb) {
            *elem_bytes = (unsigned)PyLong_AsUnsignedLong(eb);
            Py_DECREF(eb);
        }
    }
    if (PyErr_Occurred())
        goto out;
    if (*dtype < -1 || *dtype >= FB_DTYPE_COUNT_) {
        PyErr_Format(PyExc_ValueError, "fb_dtype %d", *dtype);
        goto out;
    }
    if (hook_ndtypes < HOOK_DTYPES) {
        struct hook_dtype *d = &hook_dtypes[hook_ndtypes++];
        d->dt = Py_NewRef(dt);
        d->dtype = *dtype;
        d->elem_bytes = *elem_bytes;
    }
    rc = 0;
out:
    Py_DECREF(dt);
    return rc;
}

/* The default group (a new reference), read as hooks_setup() found. */
static PyObject *world_group(void)
{
    PyObject *w = NULL;
    if (hook.world_how == HOOK_W_CLASS) {
        w = _PyType_Lookup((PyTypeObject *)hook.world_obj, hook.world_attr);
    }
#if PY_VERSION_HEX < 0x030D0000
    else if (hook.world_how == HOOK_W_DICT) {
        PyObject **dp = _PyObject_GetDictPtr(hook.world_obj);
        w = dp && *dp ? PyDict_GetItemWithError(*dp, hook.world_attr) : NULL;
        if (!w && PyErr_Occurred())
            return NULL;
    }
#endif
    if (w && !Py_TYPE(w)->tp_descr_get) /* a plain value: what getattr gives */
        return Py_NewRef(w);
    return PyObject_GetAttr(hook.world_obj, hook.world_attr);
}

/* Record the begin of this call: *h its handle, 0 when not recorded.
 * -1 with an exception set when an argument could not be read. */
static int recorded_begin(Recorded *r, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, uint64_t *h)
{
    PyObject *v[HOOK_F_N_];
    for (int f = 0; f < HOOK_F_N_; f++)
        v[f] = r->field[f].kind == HOOK_K_NONE
                   ? Py_None
                   : param_value(r, r->field[f].param, args, nargs, kwnames);
    PyObject *pg = v[HOOK_F_GROUP], *world = NULL;
    if (pg == Py_None) {
        world = world_group();
        if (!world)
            return -1;
        pg = world;
    }
    int rc = -1;
    struct hook_group *g = group_of(pg);
    if (!g)
        goto out;
    uint64_t count, out_count;
    if (count_of(r->field[HOOK_F_COUNT].kind, v[HOOK_F_COUNT], g, &count))
        goto out;
    if (r->field[HOOK_F_OUT].kind == r->field[HOOK_F_COUNT].kind &&
        v[HOOK_F_OUT] == v[HOOK_F_COUNT])
        out_count = count; /* in place (all_reduce, broadcast): one numel() */
    else if (count_of(r->field[HOOK_F_OUT].kind, v[HOOK_F_OUT], g, &out_count))
        goto out;
    PyObject *t = v[HOOK_F_TENSOR];
    if (r->field[HOOK_F_TENSOR].kind == HOOK_K_FIRST && t != Py_None) {
        Py_ssize_t len = PyObject_Length(t);
        if (len < 0)
            goto out;
        t = len ? PySequence_GetItem(t, 0) : Py_NewRef(Py_None);
        if (!t)
            goto out;
    } else {
        Py_INCREF(t);
    }
    int dtype = -1;
    unsigned elem_bytes = 0;
    int bad = t != Py_None && dtype_of(t, &dtype, &elem_bytes);
    Py_DECREF(t);
    if (bad)
        goto out;
    int peer = -1;
    if (v[HOOK_F_PEER] != Py_None) {
        long p = PyLong_AsLong(v[HOOK_F_PEER]);
        if (p == -1 && PyErr_Occurred())
            goto out;
        if (p >= 0) {
            PyObject *gr = PyDict_GetItemWithError(g->ranks, v[HOOK_F_PEER]);
            if (!gr && PyErr_Occurred())
                goto out;
            peer = gr ? (int)PyLong_AsLong(gr) : -1;
            if (PyErr_Occurred())
                goto out;
        }
    }
    rc = 0;
    *h = hook_record(g->comm_id, r->op, dtype, elem_bytes, count, out_count, peer,
                     r->flags);
out:
    Py_XDECREF(world);
    return rc;
}

/* Hand the pending exception to Python's failed(what, exc); never raises. */
static void recorded_failed(Recorded *r)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *res = hook.failed ? PyObject_CallFunctionObjArgs(
                                      hook.failed, r->what, value ? value : Py_None, NULL)
                                : NULL;
    Py_XDECREF(res);
    PyErr_Clear();
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

static PyObject *recorded_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames)
{
    Recorded *r = (Recorded *)self;
    if (hook_inside || !hook.comm)
        return PyObject_Vectorcall(r->orig, args, nargsf, kwnames);
    uint64_t h = 0;
    if (recorded_begin(r, args, PyVectorcall_NARGS(nargsf), kwnames, &h)) {
        h = 0;
        recorded_failed(r);
    }
    hook_inside = 1;
    PyObject *ret = PyObject_Vectorcall(r->orig, args, nargsf, kwnames);
    hook_inside = 0;
    /* A call that raised (a dtype gloo does not take, a closed group) is
     * over for this rank: left "started", it looked like a collective
     * every rank entered and none finished, and a later hang was blamed
     * on no rank.  Its exception is the caller's, untouched. */
    if (h && !ret)
        fb__fr_event_raised(h);
    if (h && ret) {
        if (ret == Py_None) {
            fb__fr_event_state(h, FB__FR_COMPLETED);
        } else { /* async_op: a Work, completed later */
            PyObject *hv = PyLong_FromUnsignedLongLong(h);
            PyObject *res =
                hv ? PyObject_CallFunctionObjArgs(hook.end_later, ret, hv, NULL) : NULL;
            Py_XDECREF(hv);
            if (res)
                Py_DECREF(res);
            else
                recorded_failed(r);
        }
    }
    return ret;
}

static PyObject *Recorded_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *orig, *params, *fields, *what;
    int op;
    unsigned int flags;
    if (kw && PyDict_GET_SIZE(kw))
        return PyErr_Format(PyExc_TypeError, "Recorded() takes no keyword arguments");
    if (!PyArg_ParseTuple(args, "OiIO!O!U", &orig, &op, &flags, &PyTuple_Type, &params,
                          &PyTuple_Type, &fields, &what))
        return NULL;
    if (!PyCallable_Check(orig))
        return PyErr_Format(PyExc_TypeError, "Recorded: %R is not callable", orig);
    if (op <= FB_OP_UNKNOWN || op >= FB_OP_COUNT_)
        return PyErr_Format(PyExc_ValueError, "Recorded: op %d", op);
    Py_ssize_t np = PyTuple_GET_SIZE(params);
    if (np > HOOK_PARAMS || PyTuple_GET_SIZE(fields) != HOOK_F_N_)
        return PyErr_Format(PyExc_ValueError,
                            "Recorded: %zd params (at most %d), %zd fields (%d)", np,
                            HOOK_PARAMS, PyTuple_GET_SIZE(fields), HOOK_F_N_);
    Recorded *r = (Recorded *)type->tp_alloc(type, 0);
    if (!r)
        return NULL;
    r->vectorcall = recorded_vectorcall;
    r->orig = Py_NewRef(orig);
    r->what = Py_NewRef(what);
    r->op = op;
    r->flags = flags & (FB__FR_F_P2P | FB__FR_F_VARIABLE);
    for (Py_ssize_t i = 0; i < np; i++) {
        Py_ssize_t pos;
        PyObject *name, *dflt;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(params, i), "nUO;Recorded: a param is "
                              "(position, name, default)", &pos, &name, &dflt))
            goto fail;
        r->param[i].pos = pos;
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        r->param[i].name = name;
        r->param[i].dflt = Py_NewRef(dflt);
        r->nparams = (int)i + 1;
    }
    for (int f = 0; f < HOOK_F_N_; f++) {
        int kind, param;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(fields, f), "ii;Recorded: a field is "
                              "(kind, param)", &kind, &param))
            goto fail;
        if (kind < 0 || kind >= HOOK_K_COUNT_ ||
            (kind != HOOK_K_NONE && (param < 0 || param >= np))) {
            PyErr_Format(PyExc_ValueError, "Recorded: field %d: kind %d, param %d", f,
                         kind, param);
            goto fail;
        }
        r->field[f].kind = kind;
        r->field[f].param = param;
    }
    return (PyObject *)r; /* tracked by the GC since tp_alloc */
fail:
    Py_DECREF(r);
    return NULL;
}

static int Recorded_traverse(Recorded *r, visitproc visit, void *arg)
{
    Py_VISIT(r->orig);
    Py_VISIT(r->dict);
    Py_VISIT(r->what);
    for (int i = 0; i < r->nparams; i++)
        Py_VISIT(r->param[i].dflt);
    return 0;
}

static int Recorded_clear(Recorded *r)
{
    Py_CLEAR(r->orig);
    Py_CLEAR(r->dict);
    Py_CLEAR(r->what);
    for (int i = 0; i < r->nparams; i++) {
        Py_CLEAR(r->param[i].name);
        Py_CLEAR(r->param[i].dflt);
    }
    r->nparams = 0;
    return 0;
}

static void Recorded_dealloc(Recorded *r)
{
    PyObject_GC_UnTrack(r);
    Recorded_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

/* As a function is: bound when found on an instance through its class. */
static PyObject *Recorded_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

/* Pickled as the function it stands for is: by name, in its module (the
 * __module__ and __qualname__ functools copied). */
static PyObject *Recorded_reduce(PyObject *self, PyObject *noargs)
{
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyMethodDef Recorded_methods[] = {
    {"__reduce__", Recorded_reduce, METH_NOARGS, "pickled by name"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Recorded_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL}};

#if PY_VERSION_HEX < 0x03090000
#define Py_TPFLAGS_HAVE_VECTORCALL _Py_TPFLAGS_HAVE_VECTORCALL
#endif

static PyTypeObject RecordedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "firebreak._firebreak.Recorded",
    .tp_basicsize = sizeof(Recorded),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Recorded(orig, op, flags, params, fields, what): orig, its calls "
              "recorded in the flight-recorder ring",
    .tp_new = Recorded_new,
    .tp_dealloc = (destructor)Recorded_dealloc,
    .tp_traverse = (traverseproc)Recorded_traverse,
    .tp_clear = (inquiry)Recorded_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Recorded, vectorcall),
    .tp_dictoffset = offsetof(Recorded, dict),
    .tp_descr_get = Recorded_get,
    .tp_getset = Recorded_getset,
    .tp_methods = Recorded_methods,
};

/* The module's part for the hooks: the type, the kinds, the names. */
static int hook_module_init(PyObject *m)
{
    if (PyType_Ready(&RecordedType) < 0 ||
        PyModule_AddObjectRef(m, "Recorded", (PyObject *)&RecordedType))
        return -1;
    static const struct { const char *name; int value; } kinds[] = {
        {"K_NONE", HOOK_K_NONE}, {"K_ARG", HOOK_K_ARG}, {"K_FIRST", HOOK_K_FIRST},
        {"K_NUMEL", HOOK_K_NUMEL}, {"K_SUM", HOOK_K_SUM}, {"K_LEN", HOOK_K_LEN},
        {"K_LEN_GROUP", HOOK_K_LEN_GROUP}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (PyModule_AddIntConstant(m, kinds[i].name, kinds[i].value))
            return -1;
    if (!hook.s_numel) {
        hook.s_numel = PyUnicode_InternFromString("numel");
        hook.s_dtype = PyUnicode_InternFromString("dtype");
        hook.s_element_size = PyUnicode_InternFromString("element_size");
        if (!hook.s_numel || !hook.s_dtype || !hook.s_element_size)
            return -1;
    }
    return 0;
}

#define HOOK_METHODS                                                             \
    {"fr_skip", py_fr_skip, METH_O, "fr_skip(prefixes): not the caller's files"}, \
    {"fr_comm", py_fr_comm, METH_VARARGS,                                        \
     "fr_comm(comm_id, size, rank, first, stride, name) -> bool"},               \
    {"fr_begin", py_fr_begin, METH_VARARGS,                                      \
     "fr_begin(comm_id, op, dtype, elem_bytes, count, out_count, peer, flags) -> handle"}, \
    {"fr_end", py_fr_end, METH_O, "fr_end(handle)"},                             \
    {"committed", py_committed, METH_VARARGS, "committed(step, bytes, ns, text)"}, \
    {"note", py_note, METH_VARARGS, "note(code, step, text)"},                   \
    {"dump_wait", py_dump_wait, METH_VARARGS, "dump_wait(last, timeout_ms) -> request"}, \
    {"dump_done", py_dump_done, METH_O, "dump_done(request)"},                   \
    {"hooks_setup", py_hooks_setup, METH_VARARGS,                                \
     "hooks_setup(comm, end_later, failed, world_obj, world_attr, dtypes)"},      \
    {"hooks_tensors", py_hooks_tensors, METH_VARARGS,                            \
     "hooks_tensors(types, probes) -> why not ('' when tensors are read in place)"}, \
    {"hooks_counts", py_hooks_counts, METH_NOARGS,                               \
     "hooks_counts() -> (tensors read in place, through torch)"},

#define HOOK_CONSTS                                                              \
    {"FR_P2P", FB__FR_F_P2P}, {"FR_VARIABLE", FB__FR_F_VARIABLE},                \
    {"NOTE_WHERE", FB__NOTE_WHERE},                                              \
    {"OP_ALLREDUCE", FB_OP_ALLREDUCE}, {"OP_BROADCAST", FB_OP_BROADCAST},        \
    {"OP_REDUCE", FB_OP_REDUCE}, {"OP_ALLGATHER", FB_OP_ALLGATHER},              \
    {"OP_GATHER", FB_OP_GATHER}, {"OP_SCATTER", FB_OP_SCATTER},                  \
    {"OP_REDUCE_SCATTER", FB_OP_REDUCE_SCATTER}, {"OP_ALLTOALL", FB_OP_ALLTOALL}, \
    {"OP_BARRIER", FB_OP_BARRIER}, {"OP_SEND", FB_OP_SEND}, {"OP_RECV", FB_OP_RECV}, \
    {"OP_COALESCED", FB_OP_COALESCED},

/* ----------------------------------------------------------- module */

/* ---- silent-data-corruption check (docs/sdc.md) ---- */

static PyObject *py_sdc_register(PyObject *self, PyObject *args)
{
    const char *name;
    unsigned long long addr, nbytes;
    if (!PyArg_ParseTuple(args, "sKK", &name, &addr, &nbytes))
        return NULL;
    int rc = fb_sdc_register(name, (void *)(uintptr_t)addr, (size_t)nbytes);
    if (rc)
        return raise_rc(rc, name);
    Py_RETURN_NONE;
}

static PyObject *py_sdc_configure(PyObject *self, PyObject *args)
{
    unsigned long long slice, every;
    if (!PyArg_ParseTuple(args, "KK", &slice, &every))
        return NULL;
    fb_sdc_configure((size_t)slice, (uint64_t)every);
    Py_RETURN_NONE;
}

static PyObject *py_sdc_check(PyObject *self, PyObject *arg)
{
    unsigned long long step = PyLong_AsUnsignedLongLong(arg);
    if (step == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fb_sdc_check((uint64_t)step);
    Py_END_ALLOW_THREADS
    if (rc)
        return raise_rc(rc, "SDC check");
    Py_RETURN_NONE;
}

static PyObject *py_sdc_clear(PyObject *self, PyObject *unused)
{
    fb_sdc_clear();
    Py_RETURN_NONE;
}

#define FB_PY_SDC_METHODS                                                     \
    {"sdc_register", py_sdc_register, METH_VARARGS,                           \
     "sdc_register(name, address, nbytes): a replicated tensor"},             \
    {"sdc_configure", py_sdc_configure, METH_VARARGS,                         \
     "sdc_configure(slice_bytes, full_every); 0: the default"},               \
    {"sdc_check", py_sdc_check, METH_O, "sdc_check(step): hash and publish"}, \
    {"sdc_clear", py_sdc_clear, METH_NOARGS, "forget the registered tensors"},
/* ---- end of the SDC check ---- */

static PyMethodDef methods[] = {
    {"init", py_init, METH_NOARGS, "fb_init(): 0 attached or unattached, <0 unusable"},
    {"finalize", py_finalize, METH_NOARGS, "fb_finalize()"},
    {"step", py_step, METH_O, "fb_step(step): heartbeat, step completed"},
    {"set_phase", py_set_phase, METH_O, "fb_set_phase(phase)"},
    {"get_phase", py_get_phase, METH_NOARGS, "the rank's phase now"},
    {"heartbeat", py_heartbeat, METH_NOARGS, "fb_heartbeat()"},
    {"attached", py_attached, METH_NOARGS, "True under the supervisor"},
    {"rank", py_rank, METH_NOARGS, "fb_rank()"},
    {"world_size", py_world_size, METH_NOARGS, "fb_world_size()"},
    {"restart_count", py_restart_count, METH_NOARGS, "fb_restart_count()"},
    {"run_dir", py_run_dir, METH_NOARGS, "the run directory, or None"},
    {"strerror", py_strerror, METH_O, "fb_strerror(rc)"},
    {"dtype_size", py_dtype_size, METH_O, "fb_dtype_size(dtype)"},
    {"layout", py_layout, METH_VARARGS,
     "layout(dir, rank, world_size) -> None | (step, [(name, dtype, shape)])"},
    {"open_layout", (PyCFunction)(void (*)(void))py_open_layout,
     METH_VARARGS | METH_KEYWORDS,
     "open_layout(dir, world_size=0, max_step=None) -> Layout | None"},
    /* firebreak.dcp */
    HOOK_METHODS
    FB_PY_SDC_METHODS
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_firebreak",
    "libfirebreak for Python: heartbeats, phases, checkpoints (see firebreak)",
    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__firebreak(void); /* the one exported name */
PyMODINIT_FUNC PyInit__firebreak(void)
{
    if (PyType_Ready(&CkptType) < 0 || PyType_Ready(&LayoutType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    fb_error = PyErr_NewExceptionWithDoc(
        "firebreak.Error", "A libfirebreak call failed: args are (rc, message).",
        PyExc_RuntimeError, NULL);
    if (!fb_error || PyModule_AddObjectRef(m, "Error", fb_error) ||
        PyModule_AddObjectRef(m, "Ckpt", (PyObject *)&CkptType))
        goto fail;
    static const struct { const char *name; long value; } consts[] = {
#define FB__PYERR(name, code, msg) {#name, code},
        FB_ERRNO_MAP(FB__PYERR)
#undef FB__PYERR
        {"PHASE_INIT", FB_PHASE_INIT}, {"PHASE_TRAIN", FB_PHASE_TRAIN},
        {"PHASE_CHECKPOINT", FB_PHASE_CHECKPOINT},
        {"PHASE_RESTORE", FB_PHASE_RESTORE}, {"PHASE_DONE", FB_PHASE_DONE},
        {"DTYPE_BOOL", FB_DTYPE_BOOL}, {"DTYPE_U8", FB_DTYPE_U8},
        {"DTYPE_I8", FB_DTYPE_I8}, {"DTYPE_I16", FB_DTYPE_I16},
        {"DTYPE_F16", FB_DTYPE_F16}, {"DTYPE_BF16", FB_DTYPE_BF16},
        {"DTYPE_I32", FB_DTYPE_I32}, {"DTYPE_F32", FB_DTYPE_F32},
        {"DTYPE_C64", FB_DTYPE_C64}, {"DTYPE_F64", FB_DTYPE_F64},
        {"DTYPE_I64", FB_DTYPE_I64}, {"DTYPE_U16", FB_DTYPE_U16},
        {"DTYPE_U32", FB_DTYPE_U32}, {"DTYPE_U64", FB_DTYPE_U64},
        {"DTYPE_F8_E5M2", FB_DTYPE_F8_E5M2}, {"DTYPE_F8_E4M3", FB_DTYPE_F8_E4M3},
        {"BUSY_WAIT", FB_CKPT_BUSY_WAIT}, {"BUSY_SKIP", FB_CKPT_BUSY_SKIP},
        {"ERROR_CONTINUE", FB_CKPT_ERROR_CONTINUE},
        {"ERROR_STOP", FB_CKPT_ERROR_STOP},
        {"SNAPSHOT_AUTO", FB_CKPT_SNAPSHOT_AUTO},
        {"SNAPSHOT_COPY", FB_CKPT_SNAPSHOT_COPY},
        {"SNAPSHOT_PROTECT", FB_CKPT_SNAPSHOT_PROTECT},
        HOOK_CONSTS
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++)
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].value))
            goto fail;
    if (hook_module_init(m))
        goto fail;
    if (PyModule_AddStringConstant(m, "VERSION", fb_version()) ||
        PyModule_AddIntConstant(m, "DEVICE_SUPPORT", fb_ckpt_device_support()))
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
