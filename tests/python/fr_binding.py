"""fr_binding.py -- the extension's flight-recorder and report bindings
(firebreak._firebreak: fr_skip, fr_comm, fr_begin, fr_end, committed,
note, dump_wait, dump_done), checked against the bytes they leave in this
rank's own segment.  Run as the one rank of `firebreak run` (fr_binding.sh).

The offsets below mirror src/lib/segment.h (fb__seg_header,
fb__seg_report) and src/fr/ring.h (fb__fr_event); the identity fields
read first (magic, version, entry size, rank, job id) check that they
still do.
"""
import atexit
import os
import shutil
import struct
import sys
import tempfile
import time

import firebreak
from firebreak import _firebreak as fb

sys.dont_write_bytecode = True           # no __pycache__ in the source tree
sys.path.insert(0, sys.argv[1])          # tests/python: fbtest
from fbtest import own_segment           # noqa: E402

fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what, flush=True)


def line():
    return sys._getframe(1).f_lineno


assert fb.attached(), "not attached: run under firebreak run"
CID = 0x1234abcd
check(fb.fr_comm(CID, 4, 1, 0, 1, "pg test") is True, "fr_comm on an attached rank")

# Helpers in files of their own: one whose name is longer than the ring's
# field, one in a directory the hooks skip (torch's, say).
tmp = tempfile.mkdtemp()
atexit.register(shutil.rmtree, tmp, True)
long_name = "a_helper_module_with_a_long_name"
skipdir = os.path.join(tmp, "skipped")
os.makedirs(skipdir)
for d, name in ((tmp, long_name), (skipdir, "inside_torch")):
    with open(os.path.join(d, name + ".py"), "w") as f:
        f.write("def call(fn, *a):\n    return fn(*a)\n")
sys.path[:0] = [tmp, skipdir]
import a_helper_module_with_a_long_name as longmod  # noqa: E402
import inside_torch  # noqa: E402
fb.fr_skip([skipdir + os.sep])

me = os.path.basename(__file__)[-20:]   # the ring keeps a name's last 20 bytes
expect = []   # (op, seq, flags, dtype, elem_bytes, count, out, peer, state, site)
h1 = fb.fr_begin(CID, fb.OP_ALLREDUCE, fb.DTYPE_F32, 0, 10, 10, -1, 0); l1 = line()
fb.fr_end(h1)
expect.append((fb.OP_ALLREDUCE, 1, 0, fb.DTYPE_F32, 4, 10, 10, -1, 2, (me, l1)))
h2 = fb.fr_begin(CID, fb.OP_BROADCAST, -1, 6, 3, 3, 2, 0); l2 = line()
expect.append((fb.OP_BROADCAST, 2, 8, 0, 6, 3, 3, 2, 1, (me, l2)))   # 8: dtype other
h3 = fb.fr_begin(CID, fb.OP_SEND, fb.DTYPE_I64, 0, 5, 5, 3, fb.FR_P2P); l3 = line()
fb.fr_end(h3)
expect.append((fb.OP_SEND, 1, 1, fb.DTYPE_I64, 8, 5, 5, 3, 2, (me, l3)))
h4 = longmod.call(fb.fr_begin, CID, fb.OP_BARRIER, -1, 0, 0, 0, -1, 0)
expect.append((fb.OP_BARRIER, 3, 8, 0, 0, 0, 0, -1, 1,
               ((long_name + ".py")[-20:], 2)))
args5 = (CID, fb.OP_ALLGATHER, fb.DTYPE_BF16, 0, 2, 8, -1, 0)
h5 = inside_torch.call(fb.fr_begin, *args5); l5 = line()
expect.append((fb.OP_ALLGATHER, 4, 0, fb.DTYPE_BF16, 2, 2, 8, -1, 1, (me, l5)))
check(all(h > 0 for h in (h1, h2, h3, h4, h5)), "handles %r" % ((h1, h2, h3, h4, h5),))

check(fb.fr_begin(0x999, fb.OP_ALLREDUCE, fb.DTYPE_F32, 0, 1, 1, -1, 0) == 0,
      "an undescribed group records nothing")
for bad in ((CID, 0, fb.DTYPE_F32, 0, 1, 1, -1, 0), (CID, 99, fb.DTYPE_F32, 0, 1, 1, -1, 0),
            (CID, fb.OP_ALLREDUCE, 99, 0, 1, 1, -1, 0)):
    try:
        fb.fr_begin(*bad)
        check(False, "fr_begin%r accepted" % (bad,))
    except ValueError:
        pass
try:
    fb.fr_comm(CID, 2, 2, 0, 1, "x")
    check(False, "fr_comm with rank == size accepted")
except ValueError:
    pass
try:
    fb.fr_skip(["a"] * 9)
    check(False, "9 skip prefixes accepted")
except ValueError:
    pass

fb.committed(7, 100, 5, "torch.save /x/ckpt.pt")
firebreak.committed(9)
fb.note(fb.NOTE_WHERE, 3, "train.py:12 in main")
t0 = time.monotonic()
check(fb.dump_wait(0, 50) == 0, "dump_wait without a request")
check(time.monotonic() - t0 >= 0.04, "dump_wait returned before its timeout")
fb.dump_done(5)

# ---- the segment, as a reader sees it
seg, u32, u64 = own_segment()
assert (u32(8), u32(12)) == (1, 3), "version %d.%d" % (u32(8), u32(12))
assert u32(36) == 128 and struct.unpack_from("<i", seg, 56)[0] == 0, "layout"
assert seg[96:96 + 64].rstrip(b"\0").decode() == os.environ["FIREBREAK_JOB_ID"]
report_off, report_cap, fr_off, cap = u32(28), u32(32), u64(40), u32(48)
report_head, fr_head = u64(336), u64(344)
check(u64(384) == 5, "dump_done %d, want 5" % u64(384))
check(u64(376) == 0, "dump_request %d" % u64(376))

comm_slots = cap // 64 if cap >= 64 else (1 if cap >= 2 else 0)
ring = fr_off + comm_slots * 128
ring_slots = cap - comm_slots
check(fr_head == len(expect), "fr_head %d, want %d" % (fr_head, len(expect)))
for i, want in enumerate(expect):
    o = ring + (i % ring_slots) * 128
    (seq, comm, cseq, count, out, begin, end, wall, step, peer, tag, csize, crank,
     pair, eb, op, dt, state, flags, sline) = struct.unpack_from(
        "<9Q4i2IH2B2I", seg, o)
    sfile = seg[o + 108:o + 128].rstrip(b"\0").decode()
    wop, wseq, wflags, wdt, web, wcount, wout, wpeer, wstate, wsite = want
    got = (op, cseq, flags, dt, eb, count, out, peer, state, (sfile, sline))
    check(seq == i + 1 and comm == CID and csize == 4 and crank == 1,
          "event %d: seq %d comm %#x size %d rank %d" % (i, seq, comm, csize, crank))
    check(got == want, "event %d: %r, want %r" % (i, got, want))
    check((end > 0) == (wstate == 2), "event %d: end time %d, state %d" % (i, end, state))
    if op == fb.OP_SEND:
        check(pair == 1, "send: pair seq %d" % pair)

kinds = []
for i in range(report_head):
    o = report_off + (i % report_cap) * 256
    seq, kind, code, step, nbytes, v1 = struct.unpack_from("<QIiQQQ", seg, o)
    text = seg[o + 56:o + 256].split(b"\0")[0].decode()
    kinds.append((kind, code, step, nbytes, v1, text))
want_reports = [(2, 1, 7, 100, 5, "torch.save /x/ckpt.pt"),
                (2, 1, 9, 0, 0, "firebreak.committed"),
                (10, fb.NOTE_WHERE, 3, 0, 0, "train.py:12 in main")]
check(kinds[-3:] == want_reports, "reports %r, want %r" % (kinds[-3:], want_reports))
print("fr_binding: %d events, %d reports checked; %d failures"
      % (len(expect), len(want_reports), len(fails)), flush=True)
sys.exit(1 if fails else 0)
