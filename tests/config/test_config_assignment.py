"""Options set as attributes of the config module, as with torch._inductor.config: the value is checked like
options= and config.patch, later compiles use it, and reading the attribute gives the current value."""
import pytest
import torch

import mini_inductor
from mini_inductor import config, metrics


def _three_outputs(x):
    a = x.relu() * 2
    return a, a.sum(1), a + 1


def _kernels_of_a_fresh_compile() -> list[str]:
    torch._dynamo.reset()
    x = torch.randn(8, 16)
    out = torch.compile(_three_outputs, backend="mini_inductor")(x)
    for got, want in zip(out, _three_outputs(x)):
        torch.testing.assert_close(got, want)
    return metrics.compiled_graphs[-1].kernel_names


def test_assigning_max_fusion_size_on_the_module_changes_later_compiles():
    assert len(_kernels_of_a_fresh_compile()) == 1       # relu*2, its row sum and +1 fuse into one kernel
    mini_inductor.config.max_fusion_size = 1
    assert config.current().max_fusion_size == 1
    assert len(_kernels_of_a_fresh_compile()) == 3       # now no two nodes may share a kernel


def test_reading_an_option_on_the_module_gives_the_current_value():
    assert config.max_fusion_size == config.current().max_fusion_size == 64
    with config.patch(max_fusion_size=7):
        assert config.max_fusion_size == 7
    config.fusion_window = "16"                           # read as the option's type, as options= does
    assert config.fusion_window == 16 and config.current().fusion_window == 16


def test_assigning_a_bad_value_raises_option_error_naming_option_and_value():
    with pytest.raises(config.OptionError, match=r"max_fusion_size='abc' is not valid: expected an integer >= 0"):
        config.max_fusion_size = "abc"
    with pytest.raises(config.OptionError, match=r"conv_layout='nhwc' is not valid: expected one of 'auto'"):
        config.conv_layout = "nhwc"
    assert config.max_fusion_size == 64 and config.conv_layout == "auto"


def test_assigning_an_unknown_option_raises_with_the_close_names():
    with pytest.raises(config.OptionError, match=r"unknown mini_inductor option 'max_fusion_sise'; "
                                                 r"did you mean 'max_fusion_size'\?"):
        config.max_fusion_sise = 1
    assert not hasattr(config, "max_fusion_sise")
    with pytest.raises(AttributeError, match="has no attribute 'max_fusion_sise'"):
        config.max_fusion_sise


def test_patch_restores_the_options_it_patched_and_keeps_ones_assigned_inside():
    with config.patch(online_softmax=False):
        config.fusion_window = 8
        assert config.online_softmax is False
    assert config.online_softmax is True and config.fusion_window == 8
