"""The sweep's comparison (compare.py): what it accepts against eager and a float64 reference.

Each test takes the `device` fixture and places every tensor on it (CUDA on a GPU machine, where the
sweep compares CUDA outputs); random values come from a CPU generator, so both machines see the same.
"""
import math

import torch

from compare import REFERENCE_FACTOR, compare


def _randn(*size, dtype, device, seed=0):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(*size, generator=gen, dtype=dtype, device="cpu").to(device)


def _fp16_case(device):
    """A float64 truth, eager's float16 answer a little off it, and the truth rounded to float16."""
    truth = _randn(64, dtype=torch.float64, device=device) * 4
    eager = (truth + 0.03).to(torch.float16)          # off by 0.03: outside eager-vs-compiled tolerance
    exact = truth.to(torch.float16)
    return truth, eager, exact


def test_matching_values_are_accepted_without_a_reference(device):
    x = _randn(8, dtype=torch.float16, device=device)

    def never():
        raise AssertionError("the reference is computed only when eager and compiled disagree")
    assert compare(x.clone(), x, torch.float16, True, reference=never) is None


def test_a_more_accurate_answer_is_accepted(device):
    truth, eager, exact = _fp16_case(device)
    assert compare(exact, eager, torch.float16, True) is not None          # no reference: a mismatch
    assert compare(exact, eager, torch.float16, True, reference=lambda: truth) is None


def test_a_wrong_answer_is_rejected_even_with_a_reference(device):
    truth, eager, exact = _fp16_case(device)
    wrong = exact.clone()
    wrong[5] += 1.0                                    # one element far from eager and from the truth
    why = compare(wrong, eager, torch.float16, True, reference=lambda: truth)
    assert why is not None and "against float64" in why and "exceeds" in why


def test_an_answer_much_worse_than_eager_is_rejected(device):
    truth, eager, _ = _fp16_case(device)
    worse = (truth - 0.03 * (REFERENCE_FACTOR + 1)).to(torch.float16)
    assert compare(worse, eager, torch.float16, True, reference=lambda: truth) is not None


def test_an_answer_as_good_as_eager_on_the_other_side_is_accepted(device):
    truth, eager, _ = _fp16_case(device)
    other_side = (truth - 0.03).to(torch.float16)     # as far from the truth as eager, 0.06 from eager
    assert compare(other_side, eager, torch.float16, True, reference=lambda: truth) is None


def test_nan_placement_must_match_eager_or_the_reference(device):
    truth, eager, exact = _fp16_case(device)
    with_nan = exact.clone()
    with_nan[3] = math.nan
    why = compare(with_nan, eager, torch.float16, True, reference=lambda: truth)
    assert why is not None and "NaN/inf placement" in why


def test_inf_where_eager_overflowed_but_the_truth_is_finite_is_not_required(device):
    truth, eager, exact = _fp16_case(device)
    eager = eager.clone()
    eager[0] = math.inf                               # eager's float16 intermediate overflowed
    assert compare(exact, eager, torch.float16, True, reference=lambda: truth) is None
    wrong_sign = exact.clone()
    wrong_sign[0] = -math.inf
    assert compare(wrong_sign, eager, torch.float16, True, reference=lambda: truth) is not None


def test_where_the_truth_overflows_a_finite_answer_must_match_eager(device):
    truth, eager, exact = _fp16_case(device)
    truth = truth.clone()
    truth[2] = 1e6                                    # beyond float16: the reference rounds to inf
    eager, exact = eager.clone(), exact.clone()
    eager[2] = exact[2] = 65504.0                     # both saturate: eager's answer, accepted
    assert compare(exact, eager, torch.float16, True, reference=lambda: truth) is None
    exact[2] = 3.0
    why = compare(exact, eager, torch.float16, True, reference=lambda: truth)
    assert why is not None and "beyond the dtype's range" in why


def test_dtype_shape_and_strides_are_checked_before_values(device):
    truth, eager, exact = _fp16_case(device)
    ref = lambda: truth  # noqa: E731
    assert "dtype" in compare(exact.float(), eager, torch.float16, True, reference=ref)
    assert "shape" in compare(exact[:32], eager, torch.float16, True, reference=ref)
    square = _randn(4, 4, dtype=torch.float16, device=device)
    assert "stride" in compare(square.t().contiguous().t(), square, torch.float16, True)
    # a size-1 dim's stride is not observable
    col = _randn(4, 1, dtype=torch.float16, device=device)
    assert compare(col.as_strided((4, 1), (1, 7)), col, torch.float16, True) is None


def test_float32_gets_no_reference_escape(device):
    truth = _randn(16, dtype=torch.float64, device=device)
    eager = (truth + 1e-3).float()
    assert compare(truth.float(), eager, torch.float32, True, reference=lambda: truth) is not None


def test_an_op_that_cannot_run_in_float64_keeps_the_mismatch(device):
    _, eager, exact = _fp16_case(device)

    def fails():
        raise RuntimeError("not implemented for 'Double'")
    assert compare(exact, eager, torch.float16, True, reference=fails) is not None


def test_sweep_accepts_a_float16_op_that_is_closer_to_float64_than_eager(device):
    """soft_margin_loss in float16: eager's float16 intermediate overflows to inf (seen on the CPU
    and on the H100), the compiled kernel (float32 inside) gives the float64 answer rounded to
    float16. Compiled for CUDA on a GPU machine, for the CPU under Triton's interpreter elsewhere."""
    from sweep import run_op
    from test_opinfo import op_db, op_id
    (op,) = [o for o in op_db if op_id(o) == "nn.functional.soft_margin_loss"]
    outcome = run_op(op, device, torch.float16, max_samples=1)
    assert outcome.status == "generated", outcome
