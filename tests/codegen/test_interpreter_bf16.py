"""bfloat16 casts and constants in compiled programs give eager's bits exactly.

Under Triton's interpreter (CI) this checks runtime/interpreter.py's shims: the interpreter keeps a
bfloat16 as its bits in uint16, so its own casts from integers, bool and float64 returned garbage and
a bfloat16 constant raised "no attribute get_bf16". On a GPU the same tests check the generated code.
"""
import pytest
import torch

from common import compile_fn, kernels_generated, reset_metrics

# Values that need rounding in bfloat16 (8 significant bits): 257 and 259 are ties, which round to
# nearest even (256, 260) where truncation gives 256 and 258; 1001 and 12345 round up.
_INTEGERS = [0, 1, -1, 3, 100, 255, 257, 259, 1001, -1001, 12345, -12345, 30001]


def _source(dtype: torch.dtype, device) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.tensor([True, False, True, True, False], device=device)
    if dtype in (torch.int8, torch.uint8):
        info = torch.iinfo(dtype)
        return torch.tensor([v for v in _INTEGERS if info.min <= v <= info.max], dtype=dtype, device=device)
    if dtype.is_floating_point:
        gen = torch.Generator().manual_seed(0)
        values = torch.randn(64, generator=gen, dtype=torch.float64) * 300
        return torch.cat([values, torch.tensor(_INTEGERS, dtype=torch.float64)]).to(dtype).to(device)
    return torch.tensor(_INTEGERS, dtype=dtype, device=device)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def _assert_matches_eager(fn, *args, exact=True):
    """Bit-exact, or (exact=False, for arithmetic eager rounds after each op and a kernel once) within
    bfloat16's tolerance."""
    torch._dynamo.reset()
    reset_metrics()
    expected = fn(*args)
    actual = compile_fn(fn)(*args)
    assert kernels_generated() in (None, 1), "the cast should run as one Triton kernel"
    assert actual.dtype == expected.dtype
    if exact:
        assert torch.equal(_bits(actual), _bits(expected)), f"\ncompiled {actual}\neager    {expected}"
    else:
        torch.testing.assert_close(actual, expected, atol=3e-2, rtol=3e-2)


# float32 and float16 were right before (the interpreter rounds float32 → bfloat16 itself; float16 goes
# through float32); these are the sources whose casts it got wrong.
SOURCES = [torch.int32, torch.int64, torch.int16, torch.int8, torch.uint8, torch.bool, torch.float64]


@pytest.mark.parametrize("dtype", SOURCES, ids=str)
def test_cast_to_bfloat16_rounds_to_nearest_even_like_eager(device, dtype):
    _assert_matches_eager(lambda x: x.to(torch.bfloat16), _source(dtype, device))


@pytest.mark.parametrize("dtype", SOURCES, ids=str)
def test_round_trip_through_bfloat16_gives_eagers_values(device, dtype):
    _assert_matches_eager(lambda x: x.to(torch.bfloat16).to(x.dtype), _source(dtype, device))


def test_bfloat16_full_is_rounded_to_nearest_even(device):
    x = torch.randn(8, dtype=torch.bfloat16, device=device)
    _assert_matches_eager(lambda x: torch.full_like(x, 0.1), x)


def test_bfloat16_constant_feeds_arithmetic(device):
    x = torch.randn(8, dtype=torch.bfloat16, device=device)
    _assert_matches_eager(lambda x: torch.full((8,), 2.5, dtype=torch.bfloat16, device=x.device) * x + 3, x,
                          exact=False)
