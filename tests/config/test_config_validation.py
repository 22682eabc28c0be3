"""Option values are checked once, the same way for options=, config.patch and MINI_INDUCTOR_* variables:
an error names the option, the value (and the variable) and what is valid."""
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

from mini_inductor import config, metrics

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _compile(**options):
    torch._dynamo.reset()
    x = torch.randn(4, 8)
    out = torch.compile(lambda x: torch.relu(x) + 1, backend="mini_inductor", options=options)(x)
    torch.testing.assert_close(out, torch.relu(x) + 1)
    return metrics.compiled_graphs[-1]


def _compile_error(**options) -> str:
    """The message of the error torch.compile raises (Dynamo wraps the backend's OptionError) for `options`."""
    with pytest.raises(Exception) as info:
        _compile(**options)
    assert "OptionError" in str(info.value) or isinstance(info.value, config.OptionError), info.value
    return str(info.value)


def _import_with_env(**env) -> subprocess.CompletedProcess:
    """`import mini_inductor` in a new process with MINI_INDUCTOR_<NAME> variables set; prints the options."""
    variables = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1",
                     **{f"MINI_INDUCTOR_{k.upper()}": v for k, v in env.items()})
    script = ("import mini_inductor; c = mini_inductor.config.current(); "
              "print('OPTIONS', c.graph_cache, c.max_fusion_size, c.conv_layout, c.online_softmax)")
    return subprocess.run([sys.executable, "-c", script], env=variables, capture_output=True, text=True, timeout=300)


# ── options= ─────────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("spelling, value", [("no", False), ("off", False), ("0", False), ("FALSE", False),
                                             ("yes", True), ("On", True), ("1", True), ("true", True)])
def test_boolean_options_read_the_usual_spellings(spelling, value):
    assert config.current().replace(graph_cache=spelling).graph_cache is value


def test_graph_cache_no_turns_the_graph_cache_off():
    rec = _compile(graph_cache="no")
    assert rec.cache == "off"
    assert not (pathlib.Path(config.current().cache_dir) / "graphs").exists()


@pytest.mark.parametrize("bad", ["maybe", "", 2, 0.5, None])
def test_a_boolean_option_rejects_anything_else_naming_option_value_and_spellings(bad):
    message = _compile_error(graph_cache=bad)
    assert "graph_cache" in message and repr(bad) in message and "True or False" in message and "yes/" in message


def test_a_string_for_an_integer_option_is_read_as_the_integer():
    assert config.current().replace(max_fusion_size="8").max_fusion_size == 8
    _compile(max_fusion_size="8")


@pytest.mark.parametrize("bad", ["abc", "8.5", 8.5, -1, True, None])
def test_an_integer_option_rejects_other_values_naming_option_value_and_type(bad):
    message = _compile_error(max_fusion_size=bad)
    assert f"max_fusion_size={bad!r} is not valid: expected an integer >= 0" in message


def test_a_choice_option_lists_the_allowed_values():
    assert "conv_layout='bogus' is not valid: expected one of 'auto', 'channels_last', 'off'" in \
        _compile_error(conv_layout="bogus")


def test_a_string_option_rejects_a_number():
    assert "cudagraph_unsafe_ops=5 is not valid: expected a string, not int" in _compile_error(cudagraph_unsafe_ops=5)


def test_a_path_option_takes_a_pathlib_path(tmp_path):
    assert config.current().replace(cache_dir=tmp_path).cache_dir == str(tmp_path)


def test_an_unknown_option_suggests_the_close_names():
    assert "unknown mini_inductor option 'max_fusion_sise'; did you mean 'max_fusion_size'?" in \
        _compile_error(max_fusion_sise=8)
    with pytest.raises(config.OptionError, match=r"'grpah_cache'; did you mean 'graph_cache' or"):
        config.current().replace(grpah_cache=False)


# ── config.patch ─────────────────────────────────────────────────────────────────────────────
def test_config_patch_goes_through_the_same_check():
    with config.patch(online_softmax="off", max_fusion_size="16"):
        assert config.current().online_softmax is False and config.current().max_fusion_size == 16
    with pytest.raises(ValueError, match=r"mini_inductor option fusion_window='wide' is not valid"):
        with config.patch(fusion_window="wide"):
            pass
    with pytest.raises(ValueError, match=r"did you mean 'fusion_window'"):
        with config.patch(fusion_windw=4):
            pass


def test_config_patch_takes_a_dict_too_checked_alike():
    with config.patch({"max_fusion_size": "8", "online_softmax": False}, fusion_window=16):
        assert (config.max_fusion_size, config.online_softmax, config.fusion_window) == (8, False, 16)
        assert len(_compile().kernel_names) == 1
    assert (config.max_fusion_size, config.online_softmax, config.fusion_window) == (64, True, 64)
    with pytest.raises(config.OptionError, match=r"max_fusion_size='abc' is not valid: expected an integer"):
        with config.patch({"max_fusion_size": "abc"}):
            pass
    with pytest.raises(config.OptionError, match=r"'max_fusion_sise'; did you mean 'max_fusion_size'"):
        with config.patch({"max_fusion_sise": 8}):
            pass
    # the spelling a dict allows and keywords do not: Inductor's dotted names
    with pytest.raises(config.OptionError, match=r"'triton.cudagraphs' is an Inductor option .* is 'cudagraphs'"):
        with config.patch({"triton.cudagraphs": False}):
            pass
    with pytest.raises(TypeError, match="a dict of options or keyword arguments, not list"):
        with config.patch(["max_fusion_size"]):
            pass
    assert config.max_fusion_size == 64


# ── cudagraph_unsafe_ops: op names ───────────────────────────────────────────────────────────
@pytest.mark.parametrize("bad, entry", [("mm", "mm"), ("torch.ops.aten.mm", "torch.ops.aten.mm"),
                                        ("aten.mm; aten.bmm", "aten.mm; aten.bmm"),
                                        ("aten.mm, aten.mm.default.out", "aten.mm.default.out"),
                                        (["aten.mm", 3], "3")])
def test_unsafe_ops_that_name_no_op_raise_naming_the_option_and_the_valid_forms(bad, entry):
    message = _compile_error(cudagraph_unsafe_ops=bad)
    assert f"cudagraph_unsafe_ops={bad!r} is not valid: {entry!r} is not an op name" in message
    assert "'aten.mm' (every overload) or 'aten.mm.default'" in message and "'mylib::baz'" in message
    with pytest.raises(config.OptionError, match="is not an op name"):
        config.cudagraph_unsafe_ops = bad


@pytest.mark.parametrize("bad, why", [("aten.matmull", "there is no ATen op 'matmull'"),
                                      ("aten.mm.defualt", "aten.mm has no overload 'defualt'; it has default, "),
                                      ("mylib::baz, aten.bmmm", "there is no ATen op 'bmmm'")])
def test_unsafe_ops_with_a_misspelt_aten_name_raise_instead_of_matching_nothing(bad, why):
    assert f"cudagraph_unsafe_ops={bad!r} is not valid: " in _compile_error(cudagraph_unsafe_ops=bad)
    with pytest.raises(config.OptionError, match=re.escape(why)):
        config.cudagraph_unsafe_ops = bad


def test_unsafe_ops_take_a_list_of_names_or_ops_and_keep_those_ops_out_of_cuda_graphs():
    assert config.current().replace(cudagraph_unsafe_ops=["aten.mm", torch.ops.aten.bmm.default,
                                                          "mylib::baz"]).unsafe_op_names() == \
        {"aten.mm", "aten.bmm.default", "mylib.baz"}
    torch._dynamo.reset()
    a, b = torch.randn(4, 8), torch.randn(8, 4)
    f = torch.compile(lambda a, b: (a @ b).relu(), backend="mini_inductor",
                      options={"cudagraph_unsafe_ops": ["aten.mm"]})
    torch.testing.assert_close(f(a, b), (a @ b).relu())
    from mini_inductor.caching import PROCESS
    module = list(PROCESS.graphs.values())[-1].compiled.module
    assert [p.reason for p in module.UNSAFE_PARTITIONS.values()] == ["aten.mm.default is listed in cudagraph_unsafe_ops"]


def test_a_bad_unsafe_ops_variable_stops_the_import_naming_it():
    proc = _import_with_env(cudagraph_unsafe_ops="aten.mm;aten.bmm")
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and "MINI_INDUCTOR_CUDAGRAPH_UNSAFE_OPS='aten.mm;aten.bmm'" in last, proc.stderr
    assert "'aten.mm;aten.bmm' is not an op name" in last


# ── environment variables, read at import ────────────────────────────────────────────────────
@pytest.mark.parametrize("name, raw, expected", [
    ("max_fusion_size", "abc", "expected an integer >= 0"),
    ("conv_layout", "bogus", "expected one of 'auto', 'channels_last', 'off'"),
    ("graph_cache", "maybe", "is not a boolean: use True or False"),
])
def test_a_bad_environment_variable_stops_the_import_with_an_error_naming_it(name, raw, expected):
    proc = _import_with_env(**{name: raw})
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]      # the line a user reads first
    assert last.startswith("mini_inductor.config.OptionError: mini_inductor cannot start:"), proc.stderr
    assert f"MINI_INDUCTOR_{name.upper()}={raw!r}" in last and f"option {name}" in last and expected in last


def test_variables_read_the_usual_spellings_and_every_bad_one_is_named_in_one_error():
    proc = _import_with_env(graph_cache="off", max_fusion_size=" 12 ", conv_layout="channels_last",
                            online_softmax="No")
    assert proc.returncode == 0, proc.stderr
    assert "OPTIONS False 12 channels_last False" in proc.stdout
    proc = _import_with_env(max_fusion_size="abc", conv_layout="bogus", graph_cache="off")
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and "MINI_INDUCTOR_MAX_FUSION_SIZE" in last and "MINI_INDUCTOR_CONV_LAYOUT" in last
    assert "GRAPH_CACHE" not in last


def test_an_empty_cache_dir_is_refused_not_taken_as_the_current_folder():
    # MINI_INDUCTOR_CACHE_DIR= (set but empty) wrote the cache into the working folder (review, session 33)
    from mini_inductor.config import OptionError, check_option
    with pytest.raises(OptionError, match="empty path"):
        check_option("cache_dir", "", env_var="MINI_INDUCTOR_CACHE_DIR")
    assert check_option("debug_dir", "None") is None
