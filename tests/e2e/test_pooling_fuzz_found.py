"""Bugs the fuzzer's pooling family found (tests/fuzz/ops_pool.py; its channels-last inputs reached a roll too),
each compared with eager."""
import pytest
import torch
import torch.nn.functional as F

from common import check


def test_max_unpool2d_of_a_channels_last_input_has_eagers_layout():
    # fuzz seed 5000 prog 17: eager's CPU kernel allocates the unpooled output in the input's suggested
    # memory format (channels last here), the decomposition's index_put a contiguous one (CUDA's too)
    x = torch.randn(2, 3, 4, 6).contiguous(memory_format=torch.channels_last)
    check(lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2), x)
    check(lambda x: F.max_unpool2d(*F.max_pool2d(x, (4, 2), (4, 2), 0, return_indices=True), (4, 2), (4, 2), 0,
                                   output_size=x.shape[-2:]), x, grad=True)
    # unbatched (3-D) and contiguous inputs stay contiguous
    check(lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2), torch.randn(3, 4, 6))
    check(lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2), torch.randn(2, 3, 4, 6))


@pytest.mark.parametrize("shape, shifts, dims", [((1, 2, 1, 2), 1, 1), ((2, 3, 4, 5), 2, 3), ((2, 3, 4, 5), 1, 0),
                                                 ((2, 3, 1, 4), (1, -2), (1, 3)), ((2, 3, 4, 5), 1, None)])
def test_roll_of_a_channels_last_input_has_eagers_layout(shape, shifts, dims):
    # fuzz seed 5014 prog 26: eager's CPU roll is a cat of two narrows, laid out as that cat (channels last
    # for a channels-last input, unless the shift is a multiple of the dim's size, or no dim is given: the
    # input flattened); the decomposition's index_select is contiguous, as eager's CUDA roll
    x = torch.randn(shape).contiguous(memory_format=torch.channels_last)
    if dims is None:
        check(lambda x: torch.roll(x, shifts) * 2, x, grad=True)
    else:
        check(lambda x: torch.roll(x, shifts, dims) * 2, x, grad=True)
