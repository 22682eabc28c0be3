import gc, sys, time
import torch
from benchmarks import dynamic_shapes as ds
import mini_inductor  # noqa
from mini_inductor.runtime.cudagraphs import nodes, trees
MODELS = []
orig_loop = ds._train_loop
def loop(b):
    e, m = orig_loop(b); MODELS.append((b, m)); return e, m
ds._train_loop = loop

def describe(f, depth=0):
    me = sys._getframe()
    for r in gc.get_referrers(f):
        if r is me or type(r).__name__ == "frame":
            continue
        s = type(r).__name__
        if isinstance(r, list):
            s += "[len %d: %s]" % (len(r), ",".join(sorted({type(x).__name__ for x in r[:50]})))
        elif isinstance(r, dict):
            s += "{%s}" % ",".join(map(str, list(r.keys())[:10]))
        elif isinstance(r, tuple):
            s += "(len %d)" % len(r)
        print("   " * (depth + 2) + s, flush=True)
        if depth < 2 and isinstance(r, (list, tuple, dict)) and len(r) < 1000:
            describe(r, depth + 1)

orig_holders = nodes._holders
def holders_dbg(ref, known, exclude=None):
    uc = torch._C._storage_Use_Count(ref.ref.cdata)
    known_u = list({id(t): t for t in known}.values())
    if uc > ref.baseline + len(known_u):
        mgr = trees.get_manager(0)
        owners = [(b, tuple(p.shape), p.grad is not None and p.grad.untyped_storage().data_ptr() == ref.ptr,
                   any(p.grad is k for k in known_u))
                  for b, m in MODELS for p in m.parameters()
                  if p.grad is not None and p.grad.untyped_storage().data_ptr() == ref.ptr]
        print("SCAN-WILL ptr=%x baseline=%d use=%d known=%d sources=%d owners=%s" % (
            ref.ptr, ref.baseline, uc, len(known_u), len(mgr.gradient_sources), owners), flush=True)
        res = orig_holders(ref, known, exclude)
        for t in res:
            if all(t is not k for k in known_u):
                print("  extra holder", tuple(t.shape), t.requires_grad, t._base is not None, flush=True)
                describe(t)
        return res
    return orig_holders(ref, known, exclude)
nodes._holders = holders_dbg

loops = []
for b in ["mini_inductor", "mini_inductor_adopt_grads"]:
    epoch, model = ds._train_loop(b)
    ds._sync_time(epoch); ds._sync_time(epoch)
    loops.append((b, epoch))
    print("compiled", b, flush=True)
t = ds._sync_time(loops[0][1])
print("mini epoch after adopt's recording: %.1f ms" % (t * 1e3), trees.stats()["gradients_moved_out"], flush=True)
t = ds._sync_time(loops[1][1]); t = ds._sync_time(loops[0][1])
print("mini epoch after adopt's replay: %.1f ms" % (t * 1e3), trees.stats()["gradients_moved_out"], flush=True)
