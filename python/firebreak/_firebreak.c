/*
 * _firebreak.c -- the CPython extension over libfirebreak.
 *
 * The engine stays in C: this file only converts Python values to the
 * public API's arguments and back (fb_init, fb_step, phases, fb_ckpt_*),
 * plus one read-only helper, layout(), that tells the torch glue which
 * tensors the newest complete checkpoint of a rank holds (so lazily created
 * optimizer state can be allocated before restoring into it).  Torch is
 * not known here: a tensor arrives as an address, a byte count and an
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
#include <unistd.h>

#include "firebreak/firebreak.h"
#include "ckpt/engine.h"
#include "ckpt/safetensors.h"
#include "ckpt/store.h"

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

/* Raise firebreak.Error(rc, "what: strerror"). */
static PyObject *raise_rc(int rc, const char *what)
{
    PyObject *msg = PyUnicode_FromFormat("%s: %s (%d)", what, fb_strerror(rc), rc);
    if (!msg)
        return NULL;
    PyObject *v = Py_BuildValue("(iN)", rc, msg);
    if (v) {
        PyErr_SetObject(fb_error, v);
        Py_DECREF(v);
    }
    return NULL;
}

/* ---------------------------------------------------------------- run */

static PyObject *py_init(PyObject *self, PyObject *noargs)
{
    return PyLong_FromLong(fb_init());
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

/*
 * layout(dir, rank, world_size) -> None | (step, [(name, dtype, shape)])
 * The newest complete checkpoint in dir whose shard for `rank` has a valid
 * header, and that shard's tensors (dtype as the fb_dtype number).  Reads
 * headers only: verifying is fb_ckpt_restore's job, which may then still
 * fall back to an older checkpoint (the glue asks again).
 */
static PyObject *py_layout(PyObject *self, PyObject *args)
{
    PyObject *dir_obj = NULL;
    int rank, world_size;
    if (!PyArg_ParseTuple(args, "O&ii", PyUnicode_FSConverter, &dir_obj, &rank,
                          &world_size))
        return NULL;
    const char *dir = PyBytes_AS_STRING(dir_obj);
    PyObject *result = NULL;
    fb__ckpt_entry *v = NULL;
    size_t n = 0;
    fb__st_header *h = NULL;
    int rc;
    if (rank < 0 || world_size < 1 || rank >= world_size) {
        PyErr_Format(PyExc_ValueError, "rank %d of world size %d", rank, world_size);
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = fb__ckpt_scan(dir, world_size, 0, &v, &n);
    Py_END_ALLOW_THREADS
    if (rc == -ENOENT) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    if (rc) {
        raise_rc(rc, dir);
        goto out;
    }
    for (size_t i = 0; i < n && !result; i++) {
        if (!v[i].complete)
            continue;
        char path[PATH_MAX], err[512];
        if (fb__ckpt_shard_path(path, sizeof path, dir, v[i].step, rank))
            continue;
        int fd = -1;
        Py_BEGIN_ALLOW_THREADS
        rc = fb__st_open(path, &fd, &h, err, sizeof err);
        Py_END_ALLOW_THREADS
        if (fd >= 0)
            close(fd);
        if (rc == -ENOMEM) {
            PyErr_NoMemory();
            goto out;
        }
        if (rc)
            continue; /* damaged: restore falls back past it too */
        PyObject *list = PyList_New((Py_ssize_t)h->ntensors);
        if (!list)
            goto out;
        for (size_t j = 0; j < h->ntensors; j++) {
            const fb__st_tensor *t = &h->tensors[j];
            PyObject *shape = PyTuple_New(t->ndim);
            if (!shape) {
                Py_DECREF(list);
                goto out;
            }
            for (int d = 0; d < t->ndim; d++)
                PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(t->shape[d]));
            PyObject *item = Py_BuildValue("(s#iN)", t->name, (Py_ssize_t)t->name_len,
                                           (int)t->dtype, shape);
            if (!item) {
                Py_DECREF(list);
                goto out;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)j, item);
        }
        result = Py_BuildValue("(KN)", (unsigned long long)v[i].step, list);
        if (!result)
            goto out;
        fb__st_free(h);
        h = NULL;
    }
    if (!result && !PyErr_Occurred())
        result = Py_NewRef(Py_None);
out:
    fb__st_free(h);
    free(v);
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
    Py_BEGIN_ALLOW_THREADS
    rc = fb_ckpt_open(&c->ck, &o);
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_rc(rc, o.dir ? o.dir : "opening the checkpoint handle");
        goto out;
    }
    ret = 0;
out:
    Py_XDECREF(dir_obj);
    return ret;
}

/* register(name, dtype, shape, address, nbytes, owner) */
static PyObject *Ckpt_register(Ckpt *c, PyObject *args)
{
    const char *name;
    int dtype;
    PyObject *shape_obj, *owner;
    unsigned long long addr, nbytes;
    if (!PyArg_ParseTuple(args, "siOKKO", &name, &dtype, &shape_obj, &addr, &nbytes,
                          &owner))
        return NULL;
    if (dtype < 0 || dtype >= FB_DTYPE_COUNT_)
        return PyErr_Format(PyExc_ValueError, "tensor %s: dtype %d: expected 0..%d",
                            name, dtype, FB_DTYPE_COUNT_ - 1);
    PyObject *seq = PySequence_Fast(shape_obj, "shape must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t ndim = PySequence_Fast_GET_SIZE(seq);
    int64_t shape[FB__ST_MAX_DIMS];
    unsigned long long expect = fb_dtype_size((fb_dtype)dtype);
    PyObject *ret = NULL;
    if (ndim > FB__ST_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "tensor %s: %zd dimensions, at most %d", name,
                     ndim, FB__ST_MAX_DIMS);
        goto out;
    }
    for (Py_ssize_t d = 0; d < ndim; d++) {
        long long s = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, d));
        if (s == -1 && PyErr_Occurred())
            goto out;
        if (s < 0) {
            PyErr_Format(PyExc_ValueError, "tensor %s: dimension %zd is %lld", name,
                         d, s);
            goto out;
        }
        shape[d] = s;
        if (s && expect > ULLONG_MAX / (unsigned long long)s) {
            PyErr_Format(PyExc_ValueError, "tensor %s: size overflows", name);
            goto out;
        }
        expect *= (unsigned long long)s;
    }
    if (expect != nbytes) {
        PyErr_Format(PyExc_ValueError, "tensor %s: %llu bytes given, shape and dtype "
                     "make %llu", name, nbytes, expect);
        goto out;
    }
    if (!addr && nbytes) {
        PyErr_Format(PyExc_ValueError, "tensor %s: null address", name);
        goto out;
    }
    if (ckpt_enter(c))
        goto out;
    /* A zero-byte tensor may have no address; give the engine a valid one. */
    static char empty;
    void *data = addr ? (void *)(uintptr_t)addr : &empty;
    int rc;
    if (PyList_Append(c->owners, owner)) {
        c->in_use = 0;
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS /* registering may fault in staging memory */
    rc = fb_ckpt_register(c->ck, name, (fb_dtype)dtype, (int)ndim, shape, data);
    Py_END_ALLOW_THREADS
    c->in_use = 0;
    if (rc) {
        char what[1200];
        snprintf(what, sizeof what, "registering tensor %s", name);
        raise_rc(rc, what);
        goto out;
    }
    ret = Py_NewRef(Py_None);
out:
    Py_DECREF(seq);
    return ret;
}

static PyObject *Ckpt_save(Ckpt *c, PyObject *arg)
{
    unsigned long long step = PyLong_AsUnsignedLongLong(arg);
    if (step == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (ckpt_enter(c))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fb_ckpt_save(c->ck, (uint64_t)step);
    Py_END_ALLOW_THREADS
    c->in_use = 0;
    if (rc == FB_EBUSY)
        Py_RETURN_FALSE;
    if (rc)
        return raise_rc(rc, "saving a checkpoint");
    Py_RETURN_TRUE;
}

static PyObject *Ckpt_wait(Ckpt *c, PyObject *noargs)
{
    if (ckpt_enter(c))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fb_ckpt_wait(c->ck);
    Py_END_ALLOW_THREADS
    c->in_use = 0;
    if (rc)
        return raise_rc(rc, "checkpoint save");
    Py_RETURN_NONE;
}

/* restore() -> step, or None when there is no checkpoint (FB_ENOCKPT). */
static PyObject *Ckpt_restore(Ckpt *c, PyObject *noargs)
{
    if (ckpt_enter(c))
        return NULL;
    uint64_t step = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fb_ckpt_restore(c->ck, &step);
    Py_END_ALLOW_THREADS
    c->in_use = 0;
    if (rc == FB_ENOCKPT)
        Py_RETURN_NONE;
    if (rc)
        return raise_rc(rc, "restoring a checkpoint");
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
    return PyUnicode_DecodeFSDefault(c->ck->dir);
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
    FB_PY_SDC_METHODS
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_firebreak",
    "libfirebreak for Python: heartbeats, phases, checkpoints (see firebreak)",
    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__firebreak(void); /* the one exported name */
PyMODINIT_FUNC PyInit__firebreak(void)
{
    if (PyType_Ready(&CkptType) < 0)
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
        {"DTYPE_I64", FB_DTYPE_I64},
        {"BUSY_WAIT", FB_CKPT_BUSY_WAIT}, {"BUSY_SKIP", FB_CKPT_BUSY_SKIP},
        {"ERROR_CONTINUE", FB_CKPT_ERROR_CONTINUE},
        {"ERROR_STOP", FB_CKPT_ERROR_STOP},
        {"SNAPSHOT_AUTO", FB_CKPT_SNAPSHOT_AUTO},
        {"SNAPSHOT_COPY", FB_CKPT_SNAPSHOT_COPY},
        {"SNAPSHOT_PROTECT", FB_CKPT_SNAPSHOT_PROTECT},
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++)
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].value))
            goto fail;
    if (PyModule_AddStringConstant(m, "VERSION", fb_version()))
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
