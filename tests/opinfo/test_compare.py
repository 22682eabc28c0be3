"""The sweep's comparison (compare.py): what it accepts against eager and a float64 reference."""
import math

import torch

from compare import REFERENCE_FACTOR, compare


def _fp16_case():
    """A float64 truth, eager's float16 answer a little off it, and the truth rounded to float16."""
    gen = torch.Generator().manual_seed(0)
    truth = torch.randn(64, generator=gen, dtype=torch.float64) * 4
    eager = (truth + 0.03).to(torch.float16)          # off by 0.03: outside eager-vs-compiled tolerance
    exact = truth.to(torch.float16)
    return truth, eager, exact


def test_matching_values_are_accepted_without_a_reference():
    x = torch.randn(8, dtype=torch.float16)

    def never():
        raise AssertionError("the reference is computed only when eager and compiled disagree")
    assert compare(x.clone(), x, torch.float16, True, reference=never) is None


def test_a_more_accurate_answer_is_accepted():
    truth, eager, exact = _fp16_case()
    assert compare(exact, eager, torch.float16, True) is not None          # no reference: a mismatch
    assert compare(exact, eager, torch.float16, True, reference=lambda: truth) is None


def test_a_wrong_answer_is_rejected_even_with_a_reference():
    truth, eager, exact = _fp16_case()
    wrong = exact.clone()
    wrong[5] += 1.0                                    # one element far from eager and from the truth
    why = compare(wrong, eager, torch.float16, True, reference=lambda: truth)
    assert why is not None and "against float64" in why and "exceeds" in why


def test_an_answer_much_worse_than_eager_is_rejected():
    truth, eager, _ = _fp16_case()
    worse = (truth - 0.03 * (REFERENCE_FACTOR + 1)).to(torch.float16)
    assert compare(worse, eager, torch.float16, True, reference=lambda: truth) is not None


def test_an_answer_as_good_as_eager_on_the_other_side_is_accepted():
    truth, eager, _ = _fp16_case()
    other_side = (truth - 0.03).to(torch.float16)     # as far from the truth as eager, 0.06 from eager
    assert compare(other_side, eager, torch.float16, True, reference=lambda: truth) is None


def test_nan_placement_must_match_eager_or_the_reference():
    truth, eager, exact = _fp16_case()
    with_nan = exact.clone()
    with_nan[3] = math.nan
    why = compare(with_nan, eager, torch.float16, True, reference=lambda: truth)
    assert why is not None and "NaN/inf placement" in why


def test_inf_where_eager_overflowed_but_the_truth_is_finite_is_not_required():
    truth, eager, exact = _fp16_case()
    eager = eager.clone()
    eager[0] = math.inf                               # eager's float16 intermediate overflowed
    assert compare(exact, eager, torch.float16, True, reference=lambda: truth) is None
    wrong_sign = exact.clone()
    wrong_sign[0] = -math.inf
    assert compare(wrong_sign, eager, torch.float16, True, reference=lambda: truth) is not None


def test_where_the_truth_overflows_a_finite_answer_must_match_eager():
    truth, eager, exact = _fp16_case()
    truth = truth.clone()
    truth[2] = 1e6                                    # beyond float16: the reference rounds to inf
    eager, exact = eager.clone(), exact.clone()
    eager[2] = exact[2] = 65504.0                     # both saturate: eager's answer, accepted
    assert compare(exact, eager, torch.float16, True, reference=lambda: truth) is None
    exact[2] = 3.0
    why = compare(exact, eager, torch.float16, True, reference=lambda: truth)
    assert why is not None and "beyond the dtype's range" in why


def test_dtype_shape_and_strides_are_checked_before_values():
    truth, eager, exact = _fp16_case()
    ref = lambda: truth  # noqa: E731
    assert "dtype" in compare(exact.float(), eager, torch.float16, True, reference=ref)
    assert "shape" in compare(exact[:32], eager, torch.float16, True, reference=ref)
    square = torch.randn(4, 4, dtype=torch.float16)
    assert "stride" in compare(square.t().contiguous().t(), square, torch.float16, True)
    # a size-1 dim's stride is not observable
    col = torch.randn(4, 1, dtype=torch.float16)
    assert compare(col.as_strided((4, 1), (1, 7)), col, torch.float16, True) is None


def test_float32_gets_no_reference_escape():
    truth = torch.randn(16, dtype=torch.float64)
    eager = (truth + 1e-3).float()
    assert compare(truth.float(), eager, torch.float32, True, reference=lambda: truth) is not None


def test_an_op_that_cannot_run_in_float64_keeps_the_mismatch():
    _, eager, exact = _fp16_case()

    def fails():
        raise RuntimeError("not implemented for 'Double'")
    assert compare(exact, eager, torch.float16, True, reference=fails) is not None


def test_sweep_accepts_a_float16_op_that_is_closer_to_float64_than_eager():
    """soft_margin_loss in float16 on the CPU: eager's float16 intermediate overflows to inf, the
    compiled kernel (float32 inside) gives the float64 answer rounded to float16."""
    from sweep import run_op
    from test_opinfo import op_db, op_id
    (op,) = [o for o in op_db if op_id(o) == "nn.functional.soft_margin_loss"]
    outcome = run_op(op, "cpu", torch.float16, max_samples=1)
    assert outcome.status == "generated", outcome
