"""A compiled graph's constants (`torch.tensor(...)` in the user's code, lifted by AOT autograd) kept
in its front cache entry (caching/constant_values.py), so that a warm start serves such graphs without
AOT autograd: the values come back bit for bit, and what an entry holds is checked before use."""
import json
import logging
import pathlib

import pytest
import torch

from common import caches_per_call
from mini_inductor import config, metrics
from mini_inductor.caching import constant_values, front_cache

HIT = front_cache.LABEL


def test_constants_come_back_bit_for_bit():
    nan = torch.tensor([float("nan")]).view(torch.int32) | 0x1234   # a NaN with a payload
    constants = {"a": torch.tensor([1.0, -0.0]), "n": nan.view(torch.float32), "b": torch.tensor(True),
                 "h": torch.tensor([0.1, 65504.0], dtype=torch.bfloat16), "e": torch.zeros(0, 3, dtype=torch.int16),
                 "i": torch.arange(6).reshape(2, 3), "c": torch.tensor([1 + 2j])}
    back = constant_values.unpack(json.loads(json.dumps(constant_values.pack(constants))))
    assert sorted(back) == sorted(constants)
    for name, t in constants.items():
        assert (back[name].dtype, back[name].shape, back[name].device) == (t.dtype, t.shape, t.device)
        assert back[name].reshape(-1).view(torch.uint8).tolist() == t.reshape(-1).view(torch.uint8).tolist()


def test_only_small_plain_constants_are_kept():
    for bad in (torch.randn(4, 4).t(), torch.randn(3, requires_grad=True), torch.zeros(64 * 1024 // 4 + 1),
                torch.zeros(2, dtype=torch.float8_e4m3fn)):
        with pytest.raises(ValueError):
            constant_values.pack({"c": bad})
    with pytest.raises(ValueError, match="more than"):
        constant_values.pack({f"c{i}": torch.zeros(1) for i in range(constant_values.MOST + 1)})


def test_what_an_entry_holds_is_checked_before_a_tensor_is_made():
    good = constant_values.pack({"c": torch.arange(4, dtype=torch.int32)})["c"]
    for bad in ({**good, "dtype": "torch.nn.Module"}, {**good, "shape": [5]}, {**good, "shape": [-4]},
                {**good, "shape": [1] * 9}, {**good, "device": "meta"}, {**good, "data": "not base64!"},
                {**good, "extra": 1}, {**good, "shape": [2 ** 40]}, [1, 2]):
        with pytest.raises((ValueError, RuntimeError)):
            constant_values.check({"c": bad})
    assert constant_values.check({"c": good})[0][:3] == ("c", torch.int32, [4])


def _scale(x):
    return x * torch.tensor([1.0, 2.0, -0.5]) + torch.tensor(0.25)


def _train(x, w):
    return ((x @ w) * torch.tensor([1.0, -2.0, 3.0, 0.25])).sum()


def test_graphs_with_constants_are_served_warm_with_their_values():
    x = torch.randn(2, 3)

    def infer(compiled, _):
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), _scale(x), rtol=0, atol=0)

    def train(compiled, _):
        w = torch.randn(3, 4, generator=torch.Generator().manual_seed(0)).requires_grad_()
        ref = w.detach().clone().requires_grad_()
        compiled(x, w).backward()
        _train(x, ref).backward()
        torch.testing.assert_close(w.grad, ref.grad)
    assert caches_per_call(_scale, [[0], [0]], infer) == [[["miss"]], [[HIT]]]
    assert caches_per_call(_train, [[0], [0]], train) == [[["miss", "miss"]], [[HIT, HIT]]]


def test_a_large_constant_keeps_the_graph_out_of_the_front_cache():
    table = list(range(20000))    # 160 KB of int64

    def f(i):
        return torch.tensor(table)[i] * 2
    torch._dynamo.reset()
    first = len(metrics.compiled_graphs)
    with torch.no_grad():
        out = torch.compile(f, backend="mini_inductor")(torch.tensor([3, 19999]))
    assert out.tolist() == [6, 39998]
    (record,) = metrics.compiled_graphs[first:]
    assert "its constants are not kept (constant" in record.warm_start and "more than 65536 bytes" in record.warm_start


def test_a_damaged_constant_in_an_entry_is_a_trip_through_aot_autograd(caplog):
    x = torch.randn(2, 3)

    def infer(compiled, _):
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), _scale(x), rtol=0, atol=0)
    caches_per_call(_scale, [[0]], infer)
    (path,) = sorted((pathlib.Path(config.current().cache_dir) / "front").rglob("*.json"))
    header, body = path.read_bytes().split(b"\n", 1)
    entry = json.loads(body)
    name = next(iter(entry["constants"]))
    entry["constants"][name]["shape"] = [4]       # 16 bytes claimed, 12 held
    from mini_inductor.caching import files
    files.write(str(path), json.dumps(entry), "front cache entry")
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        assert caches_per_call(_scale, [[0]], infer) == [[["disk"]]]   # AOT autograd, then the ATen graph's entry
    assert "front cache entry" in caplog.text and "bytes for" in caplog.text
