"""firebreak's hooks for Python ranks under `firebreak run`.

The supervisor puts this directory first on PYTHONPATH, so Python runs it
at start-up (the `site` module imports `sitecustomize`).  It arms
firebreak._hooks, which stays idle until the program imports torch, then
hands over to the sitecustomize this one hides, if there is one (Debian
ships one), as if this one were not there.  Nothing here may stop the
program: a failure is one line on stderr.  docs/pytorch.md, "Unmodified
scripts".
"""


def _arm():
    import os
    import sys
    if os.environ.get("FIREBREAK_PYTHON_HOOKS") != "1":
        return
    try:
        from firebreak import _hooks
        _hooks.arm()
    except Exception as e:  # never the program's problem
        sys.stderr.write("firebreak: Python hooks not loaded: %s: %s\n"
                         % (type(e).__name__, e))


def _chain():
    import importlib.machinery
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path
            if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # as site.py itself reports a failing one
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for "
                         "traceback:\n%s: %s\n" % (type(e).__name__, e))


_arm()
_chain()
