"""Options spelled the way Inductor (torch._inductor.config) spells them get an error that points to
mini_inductor's option, or says there is none, whichever way they are given."""
import pytest
import torch

from mini_inductor import config


def _compile_error(**options) -> str:
    """The message torch.compile raises for `options` (Dynamo wraps the backend's OptionError)."""
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:
        torch.compile(lambda x: x + 1, backend="mini_inductor", options=options)(torch.randn(4))
    assert "OptionError" in str(info.value) or isinstance(info.value, config.OptionError), info.value
    return str(info.value)


@pytest.mark.parametrize("inductor, ours", [
    ("triton.cudagraphs", "cudagraphs"),
    ("triton.cudagraph_trees", "cudagraphs"),
    ("graph_partition", "cudagraph_partition"),
    ("max_autotune_pointwise", "max_autotune"),
    ("fx_graph_cache", "graph_cache"),
    ("trace.enabled", "debug_dir"),
    ("triton.max_fusion_size", "max_fusion_size"),     # a nested spelling of one of ours
])
def test_an_inductor_option_in_options_names_our_option(inductor, ours):
    message = _compile_error(**{inductor: False})
    assert f"{inductor!r} is an Inductor option (torch._inductor.config); mini_inductor's option for it is " \
           f"{ours!r}" in message
    assert ours in config.valid_options()


@pytest.mark.parametrize("inductor", ["epilogue_fusion", "coordinate_descent_tuning", "freezing",
                                      "triton.unique_kernel_names"])
def test_an_inductor_option_without_an_equivalent_says_so(inductor):
    assert f"{inductor!r} is an Inductor option (torch._inductor.config) with no equivalent in mini_inductor" \
        in _compile_error(**{inductor: True})


def test_inductor_names_get_the_same_hint_from_config_patch_and_assignment():
    with pytest.raises(config.OptionError, match=r"mini_inductor's option for it is 'cudagraphs'"):
        with config.patch(**{"triton.cudagraphs": False}):
            pass
    with pytest.raises(config.OptionError, match=r"'epilogue_fusion' is an Inductor option .* no equivalent"):
        config.epilogue_fusion = False
    with pytest.raises(config.OptionError, match=r"'triton.foo' looks like an Inductor option .* flat names"):
        config.current().replace(**{"triton.foo": 1})



def test_every_inductor_name_with_an_equivalent_points_to_a_real_option():
    ours = {name: option for name, option in config._INDUCTOR_NAMES.items() if option}
    assert ours and all(option in config.valid_options() for option in ours.values())
    assert not set(config._INDUCTOR_NAMES) & set(config.valid_options())
