"""firebreak: the reliability layer for training jobs, from Python.

Heartbeats (step), phases (phase) and checkpoints (Checkpointer) over
libfirebreak, whose engine is C (the _firebreak extension).  Outside the
supervisor (`firebreak run`) heartbeats and phases are no-ops and the
checkpointer still saves and restores.  See docs/pytorch.md.
"""
import contextlib

from . import _firebreak
from ._firebreak import Error

__all__ = ["Error", "Checkpointer", "Slice", "step", "heartbeat", "phase", "attached",
           "rank", "world_size", "restart_count", "run_dir", "finalize",
           "committed", "sdc_register", "sdc_check", "sdc_clear"]
__version__ = _firebreak.VERSION

_firebreak.init()   # 0 attached or not; < 0: environment unusable, record nothing


# The extension raises Error(rc, message): args stay that pair, but the
# message is what a traceback or print(e) shows, not the tuple
# "(-20, '...: Not a directory (-20)')"; e.code is rc.
def _error_str(self):
    a = self.args
    if len(a) == 2 and isinstance(a[0], int) and isinstance(a[1], str):
        return a[1]
    return RuntimeError.__str__(self)


Error.__str__ = _error_str
Error.code = property(
    lambda self: self.args[0] if self.args and isinstance(self.args[0], int) else None,
    doc="the libfirebreak code (an E* constant of firebreak._firebreak, or -errno)")

attached = _firebreak.attached
rank = _firebreak.rank
world_size = _firebreak.world_size
restart_count = _firebreak.restart_count
run_dir = _firebreak.run_dir
heartbeat = _firebreak.heartbeat
finalize = _firebreak.finalize


from ._args import _whole  # noqa: E402

# The Python hooks (_hooks.py) count optimizer steps until the script
# calls step() itself: from then on its numbers win.
_user_steps = False
_last_step = 0


def step(n):
    """Step n has completed: a heartbeat (and the step's timing).  n: a
    whole number from 0 (an int, numpy or torch integer)."""
    n = _whole(n, "step", 0)
    _firebreak.step(n)
    global _user_steps, _last_step  # set once the step was taken, never for a refused one
    _user_steps = True
    _last_step = n


def committed(n):
    """The program's own checkpoint of step n is durable (written some way
    the hooks do not see: torch.save and dcp.save are seen)."""
    from ._hooks import committed as _committed
    _committed(_whole(n, "step", 0))


_PHASES = {"init": _firebreak.PHASE_INIT, "train": _firebreak.PHASE_TRAIN,
           "checkpoint": _firebreak.PHASE_CHECKPOINT,
           "restore": _firebreak.PHASE_RESTORE,
           # No phase of its own in libfirebreak yet: evaluation is timed
           # with the checkpoint phase's limit (--ckpt-timeout), the one
           # meant for long work without steps.  docs/pytorch.md.
           "eval": _firebreak.PHASE_CHECKPOINT}


@contextlib.contextmanager
def phase(name):
    """with firebreak.phase("eval"): ... -- the block runs under that
    phase's hang limit; the phase it was entered in is restored afterwards
    (start-up's before the first step, an outer block's when nested)."""
    if name not in _PHASES:
        raise ValueError("phase %r: expected one of %s" % (name, ", ".join(_PHASES)))
    before = _firebreak.get_phase()
    _firebreak.set_phase(_PHASES[name])
    try:
        yield
    finally:
        _firebreak.set_phase(before)


# ---- silent-data-corruption check (docs/sdc.md) ----
_sdc_owners = []     # (name, tensor) registered: the memory kept alive


def _sdc_entry(entry, taken):
    """One (name, tensor) entry checked before anything is registered."""
    try:
        name, t = entry
    except (TypeError, ValueError):
        raise TypeError("sdc_register: an entry is a (name, tensor) pair, not %r"
                        % (entry,)) from None
    if not isinstance(name, str) or not name:
        raise TypeError("sdc_register: a name is a non-empty str, not %r" % (name,))
    if not all(hasattr(t, a) for a in ("data_ptr", "is_contiguous", "numel",
                                       "element_size")):
        raise TypeError("sdc_register: %s is a %s, not a tensor"
                        % (name, type(t).__name__))
    if getattr(t, "device", None) is not None and t.device.type != "cpu":
        raise ValueError("sdc_register: %s is on %s: the check hashes host "
                         "memory (CPU tensors only)" % (name, t.device))
    if not t.is_contiguous():
        raise ValueError("sdc_register: %s is not contiguous" % name)
    if name in taken:
        raise ValueError("sdc_register: %s is registered already" % name)
    taken.add(name)
    return name, t


def sdc_register(tensors, slice_bytes=0, full_every=0):
    """Register replicated tensors for the SDC check: a dict of name ->
    tensor (a model's named_parameters(), say), or (name, tensor) pairs.
    Tensors must be CPU and contiguous, and stay where they are (optimizers
    update parameters in place).  Every rank registers the same tensors in
    the same order.  slice_bytes (bytes hashed per step) and full_every
    (steps between checks of every tensor): 0 keeps the default.  A call
    that raises registers none of its tensors."""
    items = tensors.items() if hasattr(tensors, "items") else tensors
    taken = set(n for n, _ in _sdc_owners)
    new = [_sdc_entry(e, taken) for e in items]
    try:
        for name, t in new:
            _firebreak.sdc_register(name, t.data_ptr(), t.numel() * t.element_size())
    except BaseException:
        # Refused by the library (a name sharing its first 47 bytes with
        # another, too many tensors): back to what was registered before.
        _firebreak.sdc_clear()
        for name, t in _sdc_owners:
            _firebreak.sdc_register(name, t.data_ptr(), t.numel() * t.element_size())
        raise
    _sdc_owners.extend(new)
    _firebreak.sdc_configure(slice_bytes, full_every)


def sdc_check(step):
    """After the optimizer step `step` (and firebreak.step(step)): hash this
    step's slice of the registered tensors and publish it to the
    supervisor, which compares the ranks."""
    _firebreak.sdc_check(step)


def sdc_clear():
    """Forget every tensor registered for the SDC check."""
    _firebreak.sdc_clear()
    del _sdc_owners[:]
# ---- end of the SDC check ----


def __getattr__(name):
    if name in ("Checkpointer", "Slice"):   # torch is imported only when used
        from . import _torch
        return getattr(_torch, name)
    raise AttributeError("module 'firebreak' has no attribute %r" % name)
