"""Argument checks shared by the package's modules, torch-free (firebreak
itself imports this; _torch.py too)."""
import operator

STEP_MAX = (1 << 63) - 1     # a step is an int64 in the shard's metadata


def _whole(value, what, lo, hi=STEP_MAX):
    """value as an int in [lo, hi] (an int, an integer-valued float, or
    anything with __index__: numpy and torch integers), else TypeError or
    ValueError naming `what`."""
    if isinstance(value, (bool, str, bytes)):
        raise TypeError("%s: expected an int, got %s %r" % (what, type(value).__name__, value))
    try:
        n = operator.index(value)
    except TypeError:
        if not isinstance(value, float):
            raise TypeError("%s: expected an int, got %s" % (what, type(value).__name__)) from None
        if not value.is_integer():
            raise ValueError("%s %r: expected a whole number" % (what, value)) from None
        n = int(value)
    if n < lo or n > hi:
        raise ValueError("%s %d: expected %d <= %s <= %d" % (what, n, lo, what, hi))
    return n
