"""Checkpointer.restore straight into the program's tensors
(docs/pytorch.md, "Use"): the same bytes as the path through new
tensors, a corrupt shard that leaves no mixed state, a checkpoint that
does not match the program refused before a byte of it is written, and
optimizer state the program has not created yet still restored.
Run: PYTHONPATH=<build>/python python3 restore_inplace.py [CASE...]"""
import json
import os
import shutil
import struct
import sys
import tempfile

from fbtest import check, finish, require

require("torch")
import torch  # noqa: E402

import firebreak  # noqa: E402
from firebreak import _torch  # noqa: E402

# Large enough that the weights (4 MiB and up) go to mappings of their own
# (_torch._empty) and the engine reads each in several pieces.
D = 1024


def make(seed):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.Tanh(), torch.nn.Linear(D, 8))
    o = torch.optim.AdamW(m.parameters(), lr=1e-3)
    return m, o


def train(m, o, n):
    dtype = next(m.parameters()).dtype
    for _ in range(n):
        m(torch.randn(4, D, dtype=dtype)).pow(2).sum().backward()
        o.step()
        o.zero_grad()


def tensors(m, o):
    """Every tensor of the state, by name, as raw bytes (bitwise compare:
    -0.0 and NaN payloads count)."""
    out = {"model/" + k: v for k, v in m.state_dict().items()}
    for i, st in o.state_dict()["state"].items():
        for k, v in st.items():
            out["optim/%s/%s" % (i, k)] = v
    return {k: v.detach().clone().contiguous().view(-1).view(torch.uint8)
            for k, v in out.items()}


def train_both(a, b, n, what):
    """Train models a and b (model, optimizer) n steps on the same batches;
    then the same bytes."""
    for m, o in (a, b):
        torch.manual_seed(7)
        train(m, o, n)
    same(tensors(*a), tensors(*b), what)


def same(a, b, what):
    ok = check(set(a) == set(b), "%s: tensors %s, expected %s" % (what, sorted(a), sorted(b)))
    for k in sorted(set(a) & set(b)):
        ok &= check(torch.equal(a[k], b[k]), "%s: %s differs" % (what, k))
    return ok


def pointers(m, o):
    out = {"model/" + k: v.data_ptr() for k, v in m.state_dict().items()}
    for i, st in o.state_dict()["state"].items():
        for k, v in st.items():
            out["optim/%s/%s" % (i, k)] = v.data_ptr()
    return out


def saved(d, steps):
    """A model trained and saved at each of steps; the state at each."""
    m, o = make(1)
    want = {}
    with firebreak.Checkpointer({"model": m, "optim": o}, dir=d, keep=3,
                                extra={"pos": 5}) as ck:
        for s in steps:
            train(m, o, 2)
            ck.save(s)
            ck.wait()
            want[s] = tensors(m, o)
    return want


def corrupt(path):
    """Flip a byte three quarters into the largest tensor: its pieces (and
    others) are read into the program's tensors before its hash fails."""
    with open(path, "r+b") as f:
        hlen = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(hlen))
        big = max((v["data_offsets"] for k, v in head.items()
                   if k != "__metadata__" and k != _torch.META), key=lambda x: x[1] - x[0])
        at = 8 + hlen + big[0] + (big[1] - big[0]) * 3 // 4
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))


def case_same_as_new_tensors(d):
    """In place: the same bytes, RNG and extra as the old path through new
    tensors; the program's tensors keep their memory; saving goes on."""
    want = saved(d, [1])[1]
    results = {}
    for how in ("fresh", "inplace"):
        m, o = make(2)
        train(m, o, 1)                     # optimizer state exists: restored into
        ptrs = pointers(m, o)
        ck = firebreak.Checkpointer({"model": m, "optim": o}, dir=d, extra={"x": 0})
        if how == "fresh":
            ck._read_same = lambda lay, ck=ck: ck._read_fresh(
                lay, [e for e in lay.tensors() if e[1] == ck.rank])
        check(ck.restore() == 1, "%s: restored step" % how)
        results[how] = (tensors(m, o), torch.get_rng_state(), ck.extra)
        if how == "inplace":
            check(pointers(m, o) == ptrs, "inplace: the optimizer's or model's tensors "
                  "were replaced, not restored into")
            train(m, o, 1)
            ck.save(2)
            ck.wait()
            after = tensors(m, o)
        ck.close()
    same(results["inplace"][0], want, "in place vs saved")
    same(results["inplace"][0], results["fresh"][0], "in place vs new tensors")
    check(torch.equal(results["inplace"][1], results["fresh"][1]), "RNG state differs")
    check(results["inplace"][2] == results["fresh"][2] == {"pos": 5}, "extra differs")
    m, o = make(3)
    with firebreak.Checkpointer({"model": m, "optim": o}, dir=d) as ck:
        check(ck.restore() == 2, "the save after an in-place restore")
    same(tensors(m, o), after, "saved through the kept handle")


def case_corrupt_only(d):
    """The only checkpoint's shard is corrupt (a fresh Checkpointer: a
    handle of its own that verifies before it writes): nothing to
    restore, every tensor of the program exactly as it was, and no save
    handle made for tensors that were not restored."""
    saved(d, [1])
    corrupt(os.path.join(d, "step-0000000001", "rank-00000.safetensors"))
    m, o = make(2)
    train(m, o, 1)
    before = tensors(m, o)
    with firebreak.Checkpointer({"model": m, "optim": o}, dir=d) as ck:
        check(ck.restore() is None, "a corrupt only checkpoint restored")
        check(ck._ck is None, "a failed restore made a save handle")
    same(tensors(m, o), before, "after a failed restore (mixed state)")
    check(os.path.exists(os.path.join(d, "step-0000000001", "rank-00000.corrupt")),
          "the corrupt shard was not set aside")


def spy_fits(ck):
    """Record whether each restore goes through the save handle."""
    fits, orig = [], ck._save_handle_fits
    ck._save_handle_fits = lambda *a: fits.append(orig(*a)) or fits[-1]
    return fits


def case_rollback(d):
    """A restore after saves in this process goes through the save handle:
    the engine reads into place, each piece's old bytes set aside in the
    handle's staging first.  A corrupt shard with no older checkpoint
    leaves every tensor exactly as it was, though the pieces read before
    the bad hash were written into them (they are put back); a corrupt
    newest shard with an older one restores that step exactly."""
    m, o = make(1)
    ck = firebreak.Checkpointer({"model": m, "optim": o}, dir=d, keep=3,
                                snapshot="copy")
    fits = spy_fits(ck)
    train(m, o, 2)
    ck.save(1)
    ck.wait()
    corrupt(os.path.join(d, "step-0000000001", "rank-00000.safetensors"))
    train(m, o, 1)
    before = tensors(m, o)
    check(ck.restore() is None, "rollback: a corrupt only checkpoint restored")
    check(fits == [True], "rollback: not through the save handle (%s)" % fits)
    same(tensors(m, o), before, "rollback: after a failed restore (mixed state)")
    ck.save(2)
    ck.wait()
    want = tensors(m, o)
    train(m, o, 1)
    ck.save(3)
    ck.wait()
    corrupt(os.path.join(d, "step-0000000003", "rank-00000.safetensors"))
    train(m, o, 1)
    del fits[:]
    check(ck.restore() == 2, "rollback: did not fall back to step 2")
    check(fits and all(fits), "rollback: not through the save handle (%s)" % fits)
    same(tensors(m, o), want, "rollback: fallen back to step 2")
    ck.close()


def case_first_save_planned(d):
    """A fresh Checkpointer's restore makes the save handle the first save
    needs (the tensors read into, the optimizer state it created among
    them), so the first save does not plan or register again and its
    staging has the time until then to be populated; a second restore
    goes through that handle.  A restore that finds nothing makes none."""
    m0, o0 = make(1)
    with firebreak.Checkpointer({"model": m0, "optim": o0}, dir=d, keep=3) as ck:
        train(m0, o0, 2)
        ck.save(1)
        ck.wait()
    for lazy in (True, False):
        m, o = make(2)
        if not lazy:
            train(m, o, 1)                 # optimizer state exists: restored into
        ck = firebreak.Checkpointer({"model": m, "optim": o}, dir=d, keep=3)
        replans = []
        orig = ck._replan
        ck._replan = lambda *a: replans.append(1) or orig(*a)
        check(ck.restore() == 1, "lazy=%s: restored step" % lazy)
        check(ck._ck is not None, "lazy=%s: no save handle after the restore" % lazy)
        same(tensors(m, o), tensors(m0, o0), "lazy=%s: restored" % lazy)
        fits = spy_fits(ck)
        train(m, o, 1)
        check(ck.restore() == 1, "lazy=%s: restored again" % lazy)
        check(fits == [True], "lazy=%s: the second restore not through the save "
              "handle (%s)" % (lazy, fits))
        same(tensors(m, o), tensors(m0, o0), "lazy=%s: restored again" % lazy)
        torch.manual_seed(7)
        train(m, o, 1)
        want = tensors(m, o)
        ck.save(2 if lazy else 3)
        ck.wait()
        check(replans == [], "lazy=%s: the first save after the restore planned "
              "the save handle again" % lazy)
        ck.close()
        m2, o2 = make(3)
        with firebreak.Checkpointer({"model": m2, "optim": o2}, dir=d) as ck2:
            check(ck2.restore() == (2 if lazy else 3), "lazy=%s: the save" % lazy)
        same(tensors(m2, o2), want, "lazy=%s: saved through the restore's handle" % lazy)
        shutil.rmtree(os.path.join(d, "step-%010d" % (2 if lazy else 3)))
    # the handle's staging sets old bytes aside like a save's: a corrupt
    # shard read into place through it leaves the program as it was
    m, o = make(4)
    with firebreak.Checkpointer({"model": m, "optim": o}, dir=d) as ck:
        check(ck.restore() == 1, "restored step 1 for the corrupt case")
        train(m, o, 1)
        before = tensors(m, o)
        corrupt(os.path.join(d, "step-0000000001", "rank-00000.safetensors"))
        fits = spy_fits(ck)
        check(ck.restore() is None, "a corrupt only checkpoint restored")
        check(fits == [True], "the corrupt case not through the save handle (%s)" % fits)
    same(tensors(m, o), before, "after a failed restore through the restore's "
         "handle (mixed state)")
    empty = os.path.join(d, "empty")
    with firebreak.Checkpointer({"model": m, "optim": o}, dir=empty) as ck:
        check(ck.restore() is None and ck._ck is None,
              "nothing restored, yet a save handle was made")


def case_slice_first_save(d):
    """A slice (firebreak.Slice) restored by a new Checkpointer: the save
    handle made at restore registers it with its place, as save would, so
    the first save does not plan again and writes the place."""
    t = torch.arange(4096 * 256, dtype=torch.float32).reshape(4096, 256)
    with firebreak.Checkpointer({"w": firebreak.Slice(t, (8192, 256), (4096, 0))},
                                dir=d) as ck:
        ck.save(1)
        ck.wait()
    u = torch.zeros(4096, 256)
    with firebreak.Checkpointer({"w": firebreak.Slice(u, (8192, 256), (4096, 0))},
                                dir=d) as ck:
        check(ck.restore() == 1 and torch.equal(u, t), "slice: restored")
        replans = []
        orig = ck._replan
        ck._replan = lambda *a: replans.append(1) or orig(*a)
        u.add_(1)
        ck.save(2)
        ck.wait()
        check(replans == [], "slice: the first save after the restore planned again")
    v = torch.zeros(4096, 256)
    with firebreak.Checkpointer({"w": firebreak.Slice(v, (8192, 256), (4096, 0))},
                                dir=d) as ck:
        check(ck.restore() == 2 and torch.equal(v, t + 1), "slice: step 2")


def case_corrupt_fallback(d):
    """The newest shard corrupt: the previous good checkpoint, bit for bit."""
    want = saved(d, [1, 2])
    corrupt(os.path.join(d, "step-0000000002", "rank-00000.safetensors"))
    m, o = make(2)
    train(m, o, 1)
    with firebreak.Checkpointer({"model": m, "optim": o}, dir=d) as ck:
        check(ck.restore() == 1, "did not fall back to step 1")
    same(tensors(m, o), want[1], "fallen back to step 1")


def refused(ck, what, words):
    """ck.restore() raises ValueError with every one of words."""
    try:
        ck.restore()
        check(False, "%s: restore did not raise" % what)
    except ValueError as e:
        check(all(w in str(e) for w in words), "%s: message %r lacks %s"
              % (what, str(e), words))


def case_mismatch(d):
    """A shape or dtype the checkpoint does not have: refused naming the
    tensor and both, nothing of the program changed."""
    saved(d, [1])
    for what, change, words in (
            ("shape", lambda m: m[2].__init__(D, 16),
             ["tensor model/2.weight", "(16, %d)" % D, "(8, %d)" % D]),
            ("dtype", lambda m: m.double(),
             ["tensor model/0.", "torch.float64", "torch.float32"])):
        m, o = make(2)
        change(m)
        o = torch.optim.AdamW(m.parameters(), lr=1e-3)
        train(m, o, 1)
        before = tensors(m, o)
        ck = firebreak.Checkpointer({"model": m, "optim": o}, dir=d)
        refused(ck, what, words)
        ck.close()
        same(tensors(m, o), before, "%s: after a refused restore" % what)


def case_param_groups(d):
    """An optimizer whose parameter groups are not the saved ones (a layer
    frozen, the groups split): refused naming the state entry and both
    layouts, before a byte of the model is overwritten (torch's own
    load_state_dict would raise only after the model was loaded), with and
    without the optimizer's state created yet."""
    saved(d, [1])
    for what, groups, fresh, words in (
            ("a layer left out", lambda m: m[2].parameters(), True,
             ["state['optim']", "1 group of 2 parameters", "1 group of 4"]),
            ("a layer left out, state created", lambda m: m[2].parameters(), False,
             ["state['optim']"]),
            ("two groups", lambda m: [{"params": m[0].parameters()},
                                      {"params": m[2].parameters(), "lr": 0.1}], True,
             ["state['optim']", "2 groups of 2, 2 parameters", "1 group of 4"])):
        m, o = make(2)
        o = torch.optim.AdamW(groups(m), lr=1e-3)
        if not fresh:
            train(m, o, 1)
        before = tensors(m, o)
        extra = {"pos": -1}
        ck = firebreak.Checkpointer({"model": m, "optim": o}, dir=d, extra=extra)
        refused(ck, what, words)
        check(ck.extra is extra, "%s: extra replaced by a refused restore" % what)
        ck.close()
        same(tensors(m, o), before, "%s: after a refused restore" % what)


def case_load_refused(d):
    """An object's own load_state_dict refusing, which no check before the
    read can foresee: its error raised, and a warning that the state may
    hold the step in part."""
    class Picky:
        def __init__(self):
            self.ok = True

        def state_dict(self):
            return {"n": 1}

        def load_state_dict(self, sd):
            if not self.ok:
                raise RuntimeError("picky refuses")

    m, o = make(1)
    with firebreak.Checkpointer({"model": m, "picky": Picky()}, dir=d) as ck:
        ck.save(1)
        ck.wait()
    p = Picky()
    p.ok = False
    ck = firebreak.Checkpointer({"model": make(2)[0], "picky": p}, dir=d)
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            ck.restore()
            check(False, "load refused: restore did not raise")
        except RuntimeError as e:
            check("picky refuses" in str(e), "load refused: %r" % str(e))
    said = [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]
    check(any("state['picky']" in t and "do not train on it" in t for t in said),
          "load refused: no warning naming the entry: %s" % said)
    ck.close()


def case_before_first_step(d):
    """A rollback to a checkpoint saved before the optimizer's first step
    (it had no state then, the program has now): restored as torch's
    load_state_dict would, the optimizer's state gone, training on exactly
    as from a fresh start (it was refused: "the state dict's keys
    changed")."""
    m, o = make(1)
    ck = firebreak.Checkpointer({"model": m, "optim": o}, dir=d)
    ck.save(0)
    ck.wait()
    want = tensors(m, o)
    train(m, o, 2)
    check(len(o.state) > 0, "no optimizer state after training")
    check(ck.restore() == 0, "rolled back to step 0")
    check(len(o.state) == 0, "optimizer state kept: %d entries" % len(o.state))
    same(tensors(m, o), want, "rolled back")
    m1, o1 = make(1)
    train_both((m, o), (m1, o1), 2, "two steps after the rollback")
    ck.save(1)
    ck.wait()
    ck.close()
    m2, o2 = make(3)
    with firebreak.Checkpointer({"model": m2, "optim": o2}, dir=d) as ck:
        check(ck.restore() == 1, "the save after the rollback")
    same(tensors(m2, o2), tensors(m1, o1), "step 1")


def case_lazy_optimizer(d):
    """A fresh program has no optimizer state yet: restore creates it
    (4 MiB moments on mappings of their own), training goes on exactly as
    it would have without the restart, and the next save works."""
    m0, o0 = make(1)
    with firebreak.Checkpointer({"model": m0, "optim": o0}, dir=d) as ck:
        train(m0, o0, 2)
        ck.save(1)
        ck.wait()
    m, o = make(2)
    check(len(o.state) == 0, "the fresh optimizer has state")
    with firebreak.Checkpointer({"model": m, "optim": o}, dir=d) as ck:
        check(ck.restore() == 1, "restored step")
        same(tensors(m, o), tensors(m0, o0), "restored with lazy optimizer state")
        train_both((m, o), (m0, o0), 1, "one step after the restore")
        ck.save(2)
        ck.wait()
    m2, o2 = make(3)
    with firebreak.Checkpointer({"model": m2, "optim": o2}, dir=d) as ck:
        check(ck.restore() == 2, "the save after the restore")
    same(tensors(m2, o2), tensors(m0, o0), "step 2")


def case_tied(d):
    """Two state dict entries on the same memory (tied weights): both
    restored, and a corrupt shard still leaves them as they were."""
    def tied(seed):
        torch.manual_seed(seed)
        m = torch.nn.Sequential(torch.nn.Linear(D, D, bias=False),
                                torch.nn.Linear(D, D, bias=False))
        m[1].weight = m[0].weight
        return m
    m0 = tied(1)
    with firebreak.Checkpointer({"model": m0}, dir=d) as ck:
        ck.save(1)
        ck.wait()
    m = tied(2)
    with firebreak.Checkpointer({"model": m}, dir=d) as ck:
        check(ck.restore() == 1, "tied: restored")
    check(torch.equal(m[0].weight, m0[0].weight) and m[1].weight is m[0].weight,
          "tied: weights")
    corrupt(os.path.join(d, "step-0000000001", "rank-00000.safetensors"))
    m = tied(3)
    before = m[0].weight.detach().clone()
    with firebreak.Checkpointer({"model": m}, dir=d) as ck:
        check(ck.restore() is None, "tied: a corrupt checkpoint restored")
    check(torch.equal(m[0].weight, before), "tied: changed by a failed restore")


CASES = {n[5:]: f for n, f in sorted(globals().items()) if n.startswith("case_")}


def main():
    for name in sys.argv[1:] or list(CASES):
        d = tempfile.mkdtemp(prefix="fbpy-restore-")
        try:
            CASES[name](os.path.join(d, "ck"))
            print("done %s" % name)
        finally:
            shutil.rmtree(d)
    finish("restore_inplace: ok")


if __name__ == "__main__":
    main()
