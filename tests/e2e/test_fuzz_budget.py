"""A fixed budget of fuzz programs (tests/fuzz) compiles and matches eager.

150 programs of seed 0, three tests of 50 (so that `pytest -n 2` spreads them), dims up to 4, run
in worker subprocesses with the Triton interpreter on the CPU. A program that is wrong, errors,
hangs or crashes under mini_inductor, and is neither torch's (aot_eager fails too) nor listed in
tests/fuzz/known_failures.txt, fails the test with its shrunk repro script. The kernels of 40 of them
are also compiled for sm_90 with Triton's compiler (tests/fuzz/sm90.py).
"""
from __future__ import annotations

import os

import pytest

from tests.fuzz.cli import OURS, run_programs, shrink_failures
from tests.fuzz.shrink import repro_script
from tests.fuzz.workers import WorkerPool

SEED = 0
PER_TEST = 50
SIZE = 4
KNOWN_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz", "known_failures.txt")


def known_failures(device: str) -> dict[int, str]:
    """Program index -> note, for the budget's programs that fail for a known, reported reason."""
    known = {}
    with open(KNOWN_FILE) as fh:
        for line in fh:
            line = line.split("#", 1)
            fields = line[0].split()
            if len(fields) >= 2 and fields[0] in ("any", device):
                known[int(fields[1])] = line[1].strip() if len(line) > 1 else ""
    return known


def _run_budget(device: str, indices) -> None:
    pool = WorkerPool(jobs=1, timeout=120, device=device)
    try:
        results = run_programs(pool, SEED, indices, size=SIZE)
        known = known_failures(device)
        new = [r for r in results if r.outcome.cls in OURS and r.index not in known]
        shrink_failures(pool, new, budget=40, log=lambda *_: None)
    finally:
        pool.close()
    drawn = [r for r in results if r.outcome.cls != "eager_error"]
    assert len(drawn) >= 0.9 * len(results), (
        f"the generator drew {len(results) - len(drawn)} programs eager cannot run, of {len(results)}")
    reports = []
    for r in new:
        prog, outcome = (r.shrunk, r.shrunk_outcome) if r.shrunk is not None else (r.program, r.outcome)
        script = repro_script(prog, outcome, file=f"{outcome.cls}_{prog.name}.py") if prog else outcome.detail
        reports.append(f"--- program {r.index}: {r.outcome.cls} ({r.outcome.category})\n{script}")
    assert not new, (f"{len(new)} of {len(results)} fuzz programs fail under mini_inductor "
                     f"(seed {SEED}; rerun one with python -m tests.fuzz --seed {SEED} --size {SIZE} "
                     f"--start I --n 1):\n\n" + "\n\n".join(reports))


@pytest.mark.parametrize("part", range(3))
def test_fuzz_programs_compile_and_match_eager(part):
    _run_budget("cpu", range(part * PER_TEST, (part + 1) * PER_TEST))


def test_fuzz_programs_with_matmuls_left_to_cublas_match_eager(monkeypatch):
    # --matmul-split: the GPU's usual matmul path (a template with its epilogues fused, then cuBLAS and
    # the epilogues as a kernel; ReLU in _addmm_activation), which "auto" never takes on the CPU.
    # Matmuls drawn often (the workers inherit both variables)
    monkeypatch.setenv("MINI_FUZZ_MATMUL_SPLIT", "1")
    monkeypatch.setenv("MINI_FUZZ_WEIGHTS", "matmul=20")
    _run_budget("cpu", range(40))


def test_fuzz_programs_with_number_arguments_match_eager_at_other_sizes_and_values(monkeypatch):
    # --dynamic with the scalar family (tests/fuzz/ops_scalar.py): Python int and float arguments, a
    # SymInt or a 0-d tensor to the compiled graph, called again at other sizes and other values (a bool
    # tensor times an int input was bool; an int tensor // an int input 0 gave 0s where eager raises)
    monkeypatch.setenv("MINI_FUZZ_DYNAMIC", "1")
    monkeypatch.setenv("MINI_FUZZ_WEIGHTS", "scalar=12")
    _run_budget("cpu", range(20))


@pytest.mark.gpu
def test_fuzz_programs_compile_and_match_eager_on_cuda():
    _run_budget("cuda", range(30))  # each kernel is compiled for the GPU: a smaller budget


# --- the fuzzer's own parts -------------------------------------------------------------------

def test_program_i_of_seed_s_is_drawn_the_same_every_time():
    from tests.fuzz.generate import generate

    assert generate(3, 11).to_source() == generate(3, 11).to_source()
    assert generate(3, 11).to_source() != generate(3, 12).to_source()


def test_a_uint8_partner_input_is_drawn_in_its_range():
    # a partner of a uint8 value (after .to(torch.uint8)) was torch.randint(-2, 2, dtype=uint8): the
    # draw raised and the whole program counted as an eager error (seeds 97 and 100)
    import random

    import torch
    from tests.fuzz.generate import Ctx

    ctx = Ctx(random.Random(0), False, 4, input_seed=0)
    t = ctx.t(ctx.new_input((3, 2), "uint8"))
    assert t.dtype == torch.uint8 and t.shape == (3, 2)


def test_shrinker_keeps_only_the_statement_that_fails():
    from tests.fuzz.execute import Outcome
    from tests.fuzz.generate import generate
    from tests.fuzz.program import Stmt
    from tests.fuzz.shrink import shrink
    import dataclasses

    program = generate(0, 1)
    culprit = Stmt("v99", "torch.sin(x0)", "sin", "pointwise")
    program = dataclasses.replace(program, stmts=program.stmts + (culprit,),
                                  outputs=program.outputs + ("v99",))

    def evaluate(programs):  # "fails" exactly when the culprit's value is returned
        return [Outcome("wrong", "value") if "v99" in p.outputs else Outcome("ok") for p in programs]

    small, _ = shrink(program, "wrong:value", evaluate, budget=500)
    assert small.stmts == (culprit,) and small.outputs == ("v99",)
    assert [i.name for i in small.inputs] == ["x0"]


def test_compare_reports_outputs_that_share_storage_unlike_eagers():
    import torch
    from tests.fuzz.compare import compare_run

    base = torch.arange(6.0)
    eager = (base, base.view(2, 3))
    compiled = (base.clone(), base.clone().view(2, 3))
    category, why = compare_run(compiled, eager, [], [])
    assert category == "alias" and "outputs (1,)" in why


def test_compare_reports_strides_only_where_observable():
    import torch
    from tests.fuzz.compare import compare_run

    x = torch.randn(3, 4)
    assert compare_run((x.t().contiguous(),), (x.t(),), [], [])[0] == "stride"
    assert compare_run((torch.zeros(1, 4),), (torch.zeros(4, 1).t(),), [], []) is None


def test_a_float64_output_of_float32_inputs_is_compared_at_float32s_tolerance():
    # found by the fuzzer: layer_norm(float32).to(float64), 2 ulp of float32 apart from eager's
    import torch
    from tests.fuzz.compare import compare_run

    e = torch.tensor([1.0, -0.5], dtype=torch.float64)
    a = e + 2.4e-7
    x32, x64 = torch.zeros(2), torch.zeros(2, dtype=torch.float64)
    assert compare_run((a,), (e,), [x32], [x32]) is None
    assert compare_run((a,), (e,), [x64], [x64])[0] == "value"


def test_worker_pool_replaces_a_worker_that_hangs_or_dies_and_goes_on():
    import dataclasses

    from tests.fuzz.generate import generate
    from tests.fuzz.program import Stmt

    good = generate(0, 1)
    hang = dataclasses.replace(good, stmts=(Stmt("v0", "__import__('time').sleep(600) or x0", "sleep", "test"),),
                               outputs=("v0",))
    die = dataclasses.replace(good, stmts=(Stmt("v0", "__import__('os')._exit(3) or x0", "exit", "test"),),
                              outputs=("v0",))
    pool = WorkerPool(jobs=1, timeout=20, device="cpu")
    try:
        answers = [msg["outcome"]["cls"] for _, msg in pool.run(
            [{"program": p.to_dict()} for p in (hang, die, good)])]
    finally:
        pool.close()
    assert answers == ["timeout", "crash", "ok"]


def test_a_miss_that_eager_makes_too_with_inputs_one_rounding_step_away_is_ill_conditioned():
    import torch
    from tests.fuzz.execute import _amplified_noise

    def f(x):   # cancels all but the last bit of x: one rounding step of x moves it by 1.2
        return ((x - 1.0000001) * 1e7,)

    def make_inputs(device):
        return [torch.ones(4, device=device)]

    def reference():
        return [t.detach() for t in f(make_inputs("cpu")[0].double())]

    eager = f(make_inputs("cpu")[0])[0]
    assert "ill-conditioned" in _amplified_noise(f, make_inputs, "cpu", False, "value", [eager + 0.5], reference, 0)
    assert _amplified_noise(f, make_inputs, "cpu", False, "value", [eager + 50.0], reference, 0) == ""


def test_a_degenerate_input_stays_degenerate_so_a_wrong_gradient_there_stays_wrong():
    # std of a constant (expanded) row: eager's gradient is 0 by definition; one moved in its storage
    # stays constant, so a compiled gradient of -0.23 there (fuzz seed 151) is not called noise
    import torch
    from tests.fuzz.execute import _amplified_noise

    def f(x):
        return (torch.std(x, 1),)

    def make_inputs(device):
        return [torch.tensor([[-1.8482], [0.1]], device=device).expand(2, 6).detach().requires_grad_()]

    def reference():
        x = make_inputs("cpu")[0].detach().double().requires_grad_()
        f(x)[0].sum().backward()
        return [x.grad]

    ours = [torch.full((2, 6), -0.23)]
    assert _amplified_noise(f, make_inputs, "cpu", True, "grad", ours, reference, 0) == ""


def _with_grad(x, grad):
    """`x` (a leaf) again, its .grad set to `grad`: a compiled run's gradient, made up."""
    y = x.detach().requires_grad_()
    y.grad = grad
    return y


def test_a_gradient_is_compared_at_the_precision_of_the_dtypes_it_was_computed_in():
    # fuzz seed 166 prog 454 and seed 953 prog 57: a float64 input's gradient through
    # log_softmax(..., dtype=float32), beside a float64 output computed from it directly
    import torch
    from tests.fuzz.compare import compare_grads
    from tests.fuzz.generate import backward_loss

    x = torch.tensor([0.4, -0.3], dtype=torch.float64, requires_grad=True)
    outputs = [torch.log_softmax(x, 0, dtype=torch.float32), x * 2]
    backward_loss(outputs).backward()
    ours = [_with_grad(x, x.grad + 2.7e-7)]
    assert compare_grads(ours, [x], outputs=outputs) is None                           # float32's tolerance
    y = torch.tensor([0.4, -0.3], dtype=torch.float64, requires_grad=True)
    exact = [torch.log_softmax(y, 0) * 2]                                              # float64 throughout
    backward_loss(exact).backward()
    assert compare_grads([_with_grad(y, y.grad + 2.7e-7)], [y], outputs=exact)[0] == "grad"


def test_another_inputs_output_does_not_set_the_precision_of_a_gradient():
    # fuzz seed 261 prog 61: (x1, layer_norm(x1.half().add_(x3))): x3's gradient comes through float16
    # beside a leaf returned as it is; seed 214 prog 150: beside another input's float32 result
    import torch
    from tests.fuzz.compare import compare_grads
    from tests.fuzz.generate import backward_loss

    def judged(*others, through_half=True):
        """compare_grads of x's gradient, 1e-3 off, with (x.half() * 2 or x * 2) among the outputs"""
        x = torch.zeros(3, requires_grad=True)
        outputs = [*others, x.half() * 2 if through_half else x * 2]
        backward_loss(outputs).backward()
        return compare_grads([_with_grad(x, x.grad + 1e-3)], [x], outputs=outputs)

    assert judged(torch.zeros(3, requires_grad=True)) is None                 # a leaf returned as it is
    assert judged(torch.zeros(3, requires_grad=True) * 2) is None             # another input's float32 result
    assert judged(through_half=False)[0] == "grad"                            # x's own float32 result


def test_fuzz_programs_kernels_compile_for_sm90():
    # what the interpreter runs, Triton's compiler must take too (tests/fuzz/sm90.py): 40 programs of
    # the budget's seed, with their backward, in a process of their own
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=root)
    done = subprocess.run([sys.executable, "-m", "tests.fuzz.sm90", "--n", "40", "--seed", str(SEED), "--autograd"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "0 failed" in done.stdout and "distinct kernels compiled for sm_90" in done.stdout, done.stdout


def test_a_repro_script_checks_gradient_presence_and_keeps_dynamic_mode(tmp_path, monkeypatch):
    # seed 187 prog 56 (under --dynamic): the repro compiled without dynamic=True and compared only the
    # gradients eager has, so it printed "compiled matches eager" for a gradient eager does not have
    import subprocess
    import sys

    from tests.fuzz.execute import Outcome
    from tests.fuzz.program import InputSpec, Program, Stmt
    from tests.fuzz.shrink import repro_script

    # x1's only use does not reach the loss: eager leaves its gradient None
    program = Program(seed=0, index=0, inputs=(InputSpec("x0", (2,), "float32", requires_grad=True),
                                               InputSpec("x1", (2,), "float32", requires_grad=True)),
                      stmts=(Stmt("v0", "x0 * 2", "mul", "pointwise"), Stmt("v1", "x1.detach()", "detach", "view")),
                      outputs=("v0", "v1"), autograd=True)
    monkeypatch.setenv("MINI_FUZZ_DYNAMIC", "1")
    monkeypatch.setenv("MINI_FUZZ_MATMUL_SPLIT", "1")   # kept too (a program without matmuls runs the same)
    path = tmp_path / "repro.py"
    path.write_text(repro_script(program, Outcome("wrong", "grad", "why"), file="repro.py"))
    text = path.read_text()
    assert "DYNAMIC = True" in text and "assert (a.grad is None) == (e.grad is None)" in text
    assert "if True:     # found under --matmul-split" in text
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, str(path), "cpu", "eager"], cwd=root, capture_output=True, text=True,
                          env=dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=root), timeout=300)
    assert done.returncode == 0 and "compiled matches eager" in done.stdout, done.stderr[-2000:]
