"""Helpers of the Python tests that are not the package's own (api.py and
kill_restore.py predate it): skip without a module, count failed checks."""
import importlib
import sys


def require(*modules):
    """Import each module or skip the test (exit 77), saying which."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            print("SKIP: %s (%s)" % (name, e))
            sys.exit(77)


failures = 0


def check(cond, what):
    """A failed check prints FAIL and the test goes on; returns cond."""
    global failures
    if not cond:
        failures += 1
        print("FAIL: %s" % what, file=sys.stderr)
    return cond


def finish(ok_line):
    """Exit 1 if any check failed, else print ok_line."""
    if failures:
        sys.exit(1)
    print(ok_line)


def own_segment():
    """This rank's segment under `firebreak run`, mapped read-only, and
    readers of its little-endian u32 and u64 at an offset; checks the
    magic (offsets: src/lib/segment.h)."""
    import mmap
    import os
    import struct
    name = "/dev/shm/fb.%s.%s.%s" % (os.environ["FIREBREAK_JOB_ID"],
                                     os.environ["FIREBREAK_ATTEMPT"],
                                     os.environ["FIREBREAK_RANK"])
    with open(name, "rb") as f:
        seg = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)

    def u32(o):
        return struct.unpack_from("<I", seg, o)[0]

    def u64(o):
        return struct.unpack_from("<Q", seg, o)[0]
    assert u64(0) == 0x31474553424546, "magic"
    return seg, u32, u64
