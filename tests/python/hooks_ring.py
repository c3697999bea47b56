"""hooks_ring.py -- the Python hooks' recording path (the C Recorded
wrappers of firebreak/_hooks.py: _firebreak.c, "recorded
torch.distributed calls"), checked against the events they leave in this
rank's own ring.  An unmodified script: firebreak appears only to read
the ring.  Run as each of 2 ranks of `firebreak run` (hooks_ring.sh).

Checked per call: op, group, input and output counts, dtype, peer, state
and the call site (this file:line), for positional and keyword
arguments, the default and a second group; async ops completed through
their future, and those without one (gloo's isend/irecv) through
wait(); a call made inside a recorded one not recorded; an
argument the hooks cannot read leaves the program's own error intact.
Offsets mirror src/lib/segment.h and src/fr/ring.h (fr_binding.py checks
the layout's identity fields).
"""
import os
import pickle
import struct
import sys
import time

import torch
import torch.distributed as dist

sys.dont_write_bytecode = True           # no __pycache__ in the source tree
sys.path.insert(0, sys.argv[1])          # tests/python: fbtest
from fbtest import check                 # noqa: E402
import fbtest                            # noqa: E402


def line():
    return sys._getframe(1).f_lineno


dist.init_process_group("gloo")
me, peer = dist.get_rank(), 1 - dist.get_rank()
from firebreak import _firebreak as fb  # noqa: E402  (the hooks' own copy)
check(getattr(dist.all_reduce, "_firebreak", False), "dist.all_reduce is not hooked")
check(dist.all_reduce.__name__ == "all_reduce" and
      dist.all_reduce.__wrapped__.__name__ == "all_reduce", "functools metadata")
check(pickle.loads(pickle.dumps(dist.all_reduce)) is dist.all_reduce,
      "dist.all_reduce does not pickle by name")

seg, u32, u64 = fbtest.own_segment()
fr_off, cap = u64(40), u32(48)
comm_slots = cap // 64 if cap >= 64 else (1 if cap >= 2 else 0)
ring, ring_slots = fr_off + comm_slots * 128, cap - comm_slots
head = lambda: u64(344)                              # noqa: E731
me_file = os.path.basename(__file__)[-20:]
F32, I64, OTHER = fb.DTYPE_F32, fb.DTYPE_I64, 1 << 3


def event(seq):
    o = ring + ((seq - 1) % ring_slots) * 128
    v = struct.unpack_from("<9Q4i2IH2B2I", seg, o)
    sfile = seg[o + 108:o + 128].rstrip(b"\0").decode()
    return dict(seq=v[0], comm=v[1], count=v[3], out=v[4], end=v[5], peer=v[9],
                csize=v[11], elem=v[14], op=v[15], dtype=v[16], state=v[17], flags=v[18],
                site=(sfile, v[19]))


def expect(h0, what, **want):
    """The events since h0: exactly one, with the fields in want."""
    n = head() - h0
    check(n == 1, "%s: %d events, want 1" % (what, n))
    if n < 1:
        return None
    e = event(h0 + 1)
    got = {k: e[k] for k in want}
    check(got == want, "%s: %r, want %r" % (what, got, want))
    return e


def settle(h, what):
    """An async event completes soon after its wait (a future's callback)."""
    t0 = time.monotonic()
    while event(h)["state"] != 2 and time.monotonic() - t0 < 5:
        time.sleep(0.01)
    check(event(h)["state"] == 2, "%s: state %d, want 2 (completed)" % (what, event(h)["state"]))


t = torch.ones(2)
t64 = torch.ones(3, dtype=torch.int64)
g = dist.new_group([0, 1])

h0 = head(); dist.all_reduce(t); l = line()                  # noqa: E702
e1 = expect(h0, "all_reduce", op=fb.OP_ALLREDUCE, count=2, out=2, dtype=F32, peer=-1,
            csize=2, state=2, site=(me_file, l))
h0 = head(); dist.all_reduce(group=g, tensor=t64); l = line()  # noqa: E702
e2 = expect(h0, "all_reduce(group=, tensor=)", op=fb.OP_ALLREDUCE, count=3, out=3,
            dtype=I64, state=2, site=(me_file, l))
if e1 and e2:
    check(e1["comm"] != e2["comm"], "the default group and new_group share comm %#x" % e1["comm"])
h0 = head(); dist.broadcast(t, 1); l = line()                # noqa: E702
expect(h0, "broadcast", op=fb.OP_BROADCAST, count=2, peer=1, state=2, site=(me_file, l))
h0 = head(); dist.barrier(); l = line()                      # noqa: E702
expect(h0, "barrier", op=fb.OP_BARRIER, count=0, out=0, flags=OTHER, state=2,
       site=(me_file, l))
outs = [torch.zeros(2), torch.zeros(2)]
h0 = head(); dist.all_gather(outs, t); l = line()            # noqa: E702
expect(h0, "all_gather", op=fb.OP_ALLGATHER, count=2, out=4, dtype=F32, state=2,
       site=(me_file, l))

# async_op=True: a Work with a future
h0 = head(); w = dist.all_reduce(t, async_op=True); l = line()  # noqa: E702
expect(h0, "all_reduce(async_op=True)", op=fb.OP_ALLREDUCE, count=2, site=(me_file, l))
w.wait()
settle(h0 + 1, "all_reduce(async_op=True) after wait")

# isend / irecv: gloo's Work has no future; completed by wait()
buf = torch.zeros(2)
h0 = head()
w = dist.isend(t, peer) if me == 0 else dist.irecv(buf, peer)
l = line() - 1
expect(h0, "isend/irecv", op=fb.OP_SEND if me == 0 else fb.OP_RECV, peer=peer, count=2,
       flags=1, site=(me_file, l))
w.wait()
settle(h0 + 1, "isend/irecv after wait()")
# A call made inside a recorded one is not recorded (torch calling its own
# wrapped functions).
def outer(tensor, group=None):
    dist.all_reduce(tensor)


wrapped = fb.Recorded(outer, fb.OP_REDUCE, 0, ((0, "tensor", None), (1, "group", None)),
                      ((fb.K_ARG, 1), (fb.K_ARG, 0), (fb.K_NUMEL, 0), (fb.K_NUMEL, 0),
                       (fb.K_NONE, 0)), "recording outer")
h0 = head(); wrapped(t); l = line()                          # noqa: E702
expect(h0, "a recorded call inside a recorded one", op=fb.OP_REDUCE, count=2, state=2,
       site=(me_file, l))

# Call sites are cached per (code object, instruction): two calls of the
# same collective in one function each keep their own line, every time.
def two_sites(tensor):
    a = head(); dist.all_reduce(tensor); la = line()         # noqa: E702
    b = head(); dist.all_reduce(tensor); lb = line()         # noqa: E702
    return (a, la), (b, lb)


for i in range(3):
    h1 = head()
    sites = two_sites(t)
    check(head() == h1 + 2, "two call sites: %d events, want 2" % (head() - h1))
    for h0, l in sites:
        e = event(h0 + 1)
        check((e["op"], e["site"]) == (fb.OP_ALLREDUCE, (me_file, l)),
              "two call sites in one function, call %d: %r, want line %d"
              % (i, e["site"], l))

# No stale entry: short-lived code objects, each calling from another
# line, more of them than the cache holds (a freed code object's address
# is reused by the next one: an entry keyed by the address alone would
# give the old line).
src = "def f(t, head, dist):\n%s    h = head(); dist.all_reduce(t)\n    return h\n"
stale = []
for i in range(300):
    pad = i % 37
    ns = {}
    exec(compile(src % ("    pass\n" * pad), "<site-%d>" % i, "exec"), ns)
    for _ in range(2):
        h0 = ns["f"](t, head, dist)
        e = event(h0 + 1) if head() == h0 + 1 else None
        want = ("<site-%d>" % i, pad + 2)
        if e is None or e["site"] != want:
            stale.append((i, e and e["site"], want))
    del ns
check(not stale, "call sites of short-lived code: %d wrong, first %r" % (
    len(stale), stale[:3]))

# The default group is read per call, not kept: made another group for a
# moment, the call is recorded on it.
c10d = dist.distributed_c10d
w_obj = c10d._world if "_default_pg" in getattr(getattr(c10d, "_world", None),
                                               "__dict__", {}) else c10d.GroupMember
w_attr = "_default_pg" if w_obj is not c10d.GroupMember else "WORLD"
default = getattr(w_obj, w_attr)
setattr(w_obj, w_attr, g)
try:
    h0 = head(); dist.all_reduce(t); l = line()              # noqa: E702
finally:
    setattr(w_obj, w_attr, default)
expect(h0, "all_reduce with the default group replaced", comm=e2 and e2["comm"],
       site=(me_file, l))
h0 = head(); dist.all_reduce(t); l = line()                  # noqa: E702
expect(h0, "all_reduce with the default group back", comm=e1 and e1["comm"],
       site=(me_file, l))

# Tensors read in place (numel and dtype from the TensorImpl, where the
# hooks' probes at start-up found them) and those torch is asked about
# (a subclass, another TensorImpl class, a dtype the probes did not
# name): each recorded with torch's own numel() and dtype.  A wrapper
# over a function that does nothing, so that any tensor can be passed.
def noop(tensor, group=None):
    return None


rec = fb.Recorded(noop, fb.OP_ALLREDUCE, 0, ((0, "tensor", None), (1, "group", None)),
                  ((fb.K_ARG, 1), (fb.K_ARG, 0), (fb.K_NUMEL, 0), (fb.K_NUMEL, 0),
                   (fb.K_NONE, 0)), "recording noop")
FB_DTYPES = {torch.float32: fb.DTYPE_F32, torch.float64: fb.DTYPE_F64,
             torch.int64: fb.DTYPE_I64, torch.bfloat16: fb.DTYPE_BF16,
             torch.uint8: fb.DTYPE_U8, torch.bool: fb.DTYPE_BOOL}


class Sub(torch.Tensor):
    pass


resized = torch.zeros(3)
redata = torch.zeros(2)
cases = [("plain", torch.zeros(2), "in place"),
         ("0-dim", torch.tensor(1.5), "in place"),
         ("bfloat16 rows", torch.zeros(3, 7, dtype=torch.bfloat16), "in place"),
         ("strided view", torch.zeros(10, dtype=torch.int64)[::3], "in place"),
         ("Parameter", torch.nn.Parameter(torch.zeros(6, dtype=torch.float64)), "in place"),
         ("resized", resized, "in place"), ("resized", resized, "in place"),
         (".data replaced", redata, "in place"), (".data replaced", redata, "in place"),
         ("a subclass", torch.zeros(4).as_subclass(Sub), "torch"),
         ("sparse", torch.zeros(4, 4).to_sparse(), "torch"),
         ("complex128", torch.zeros(3, dtype=torch.complex128), "torch"),
         ("empty uint8", torch.zeros(0, dtype=torch.uint8), "in place")]
import warnings                          # noqa: E402
with warnings.catch_warnings():
    warnings.simplefilter("ignore")      # "nested tensors are a prototype"
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
cases.append(("nested", nested, "torch"))     # its numel_ field is 0: not read
for i, (what, x, how) in enumerate(cases):
    if what == "resized" and i % 2 == 0:
        x.resize_(12)                    # no version bump: the same object, new size
    if what == ".data replaced" and i % 2 == 0:
        x.data = torch.zeros(5, dtype=torch.int64)
    c0 = fb.hooks_counts()
    h0 = head(); rec(x, g); l = line()                       # noqa: E702
    c1 = fb.hooks_counts()
    dt = FB_DTYPES.get(x.dtype)
    e = expect(h0, "a tensor %s" % what, count=x.numel(), out=x.numel(),
               dtype=dt if dt is not None else 0,
               flags=0 if dt is not None else OTHER,
               elem=x.element_size(), site=(me_file, l))
    direct, asked = c1[0] - c0[0], c1[1] - c0[1]
    if how == "in place":
        check((direct, asked) == (2, 0), "a tensor %s: read %d in place, asked torch %d, "
              "want 2 in place" % (what, direct, asked))
    else:
        check(asked >= 1, "a tensor %s: read %d in place, asked torch %d, want torch "
              "asked" % (what, direct, asked))

# A call that raises (a dtype gloo does not take, say) is over for this
# rank: its event completed, the program's exception untouched.  Left
# started, it looked like a collective every rank entered and none
# finished, and a later hang was blamed on no rank.
def raiser(tensor, group=None):
    raise RuntimeError("Invalid scalar type")


rec_raise = fb.Recorded(raiser, fb.OP_ALLREDUCE, 0, ((0, "tensor", None), (1, "group", None)),
                        ((fb.K_ARG, 1), (fb.K_ARG, 0), (fb.K_NUMEL, 0), (fb.K_NUMEL, 0),
                         (fb.K_NONE, 0)), "recording raiser")
h0 = head()
try:
    rec_raise(torch.zeros(2), g)
    raised = None
except RuntimeError as e:
    raised = str(e)
check(raised == "Invalid scalar type", "a call that raised: the program saw %r" % raised)
expect(h0, "a call that raised", state=2)

# Probes that cannot tell the fields apart (one dtype: every field that
# stays the same is a candidate) leave in-place reads off, saying why;
# the hooks' own probes turn them on again.
from firebreak import _hooks              # noqa: E402
one = [(x, x._cdata, x.numel(), fb.DTYPE_F32)
       for x in (torch.zeros(3), torch.zeros(8), torch.nn.Parameter(torch.zeros(5)))]
why = fb.hooks_tensors((torch.Tensor, torch.nn.Parameter), one)
check("not 1" in why, "probes of one dtype: %r, want 'found in N places, not 1'" % why)
c0 = fb.hooks_counts(); rec(t, g); c1 = fb.hooks_counts()    # noqa: E702
check((c1[0] - c0[0], c1[1] - c0[1]) == (0, 2), "after ambiguous probes: read %d in "
      "place, asked %d, want 0 and 2" % (c1[0] - c0[0], c1[1] - c0[1]))
# A probe whose object does not hold the address it came with: refused
# before that address is read.
bad = [(x, a, x.numel(), d) for x, a, d in
       ((torch.zeros(3), 4096, fb.DTYPE_F32), (torch.zeros(2, dtype=torch.int64),
                                               torch.zeros(1)._cdata, fb.DTYPE_I64),
        (torch.nn.Parameter(torch.zeros(5)), 8, fb.DTYPE_F32))]
why = fb.hooks_tensors((torch.Tensor, torch.nn.Parameter), bad)
check("address found in 0 places" in why, "probes with wrong addresses: %r" % why)
_hooks._H._read_tensors()
c0 = fb.hooks_counts(); rec(t, g); c1 = fb.hooks_counts()    # noqa: E702
check(c1[0] - c0[0] == 2, "the hooks' probes again: read %d in place, want 2"
      % (c1[0] - c0[0]))

# An argument the hooks cannot read: nothing recorded, the program sees
# torch's own error, not the hooks'.
try:
    dist.all_reduce.__wrapped__("not a tensor")
    theirs = None
except Exception as e:
    theirs = type(e)
h0 = head()
try:
    dist.all_reduce("not a tensor")
    ours = None
except Exception as e:
    ours = type(e)
check(ours is theirs and ours is not None, "a bad argument: %r, torch alone: %r" % (ours, theirs))
check(head() == h0, "a bad argument: %d events recorded" % (head() - h0))

dist.barrier()
print("hooks_ring: rank %d checked; %d failures" % (me, fbtest.failures), flush=True)
dist.destroy_process_group()
# No interpreter teardown: torch 2.15's gloo aborted a rank there in a CI
# run ("terminate called without an active exception" after this line and
# a clean destroy; the same as replicated.py's leave()), a crash that
# --max-restarts 0 turns into a failed run.  What this script checks is
# done; the supervisor takes exit 0 without fb_finalize as a completed rank.
sys.stdout.flush()
sys.stderr.flush()
os._exit(1 if fbtest.failures else 0)
