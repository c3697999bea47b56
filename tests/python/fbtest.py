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
