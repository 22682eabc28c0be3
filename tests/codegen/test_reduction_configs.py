"""Block shapes of reductions: an outer reduction (contiguous across rows, x.sum(0)) loops over short
reduction steps with blocks many rows wide, so each step reads whole sectors; inner ones keep theirs."""
import re

import pytest
import torch

from common import check
from mini_inductor import metrics
from mini_inductor.codegen.heuristics import pick_config


def launches() -> list[tuple[str, dict]]:
    out = []
    for rec in metrics.compiled_graphs:
        with open(rec.source_path) as f:
            for name, meta in re.findall(r"^\s*(triton_\w+)\[.*?\]\(.*?((?:[XYR]BLOCK=\d+, )+)", f.read(), re.M):
                out.append((name, dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", meta))))
    return out


def test_outer_config_is_looped_with_at_least_a_sector_of_rows():
    cfg = pick_config(4096, 4096, 4096, outer=True)
    assert not cfg.persistent and cfg.XBLOCK == 32 and cfg.XBLOCK * cfg.RBLOCK <= 2048
    assert pick_config(100, 30, 4096, outer=True).XBLOCK == 8
    assert pick_config(1 << 20, 64, 4096, outer=True).XBLOCK == 64


def test_sum_over_dim_0_reads_rows_of_eight_per_step():
    check(lambda x: x.sum(0), torch.randn(300, 40), kernels=1, atol=1e-4)
    ((name, meta),) = launches()
    assert name.startswith("triton_red_") and meta["XBLOCK"] == 8, (name, meta)


def test_sum_over_the_last_dim_stays_persistent():
    check(lambda x: x.sum(-1), torch.randn(40, 300), kernels=1, atol=1e-4)
    ((name, _),) = launches()
    assert name.startswith("triton_per_"), name


def test_outer_mean_var_and_argmax_match_eager():
    x = torch.randn(50, 24) * 2 + 1
    check(lambda x: (x.mean(0), x.var(0), x.argmax(0), x.amin(0, keepdim=True) + x), x, atol=1e-4)
    assert all(name.startswith("triton_red_") for name, _ in launches() if "argmax" in name or "var" in name)


@pytest.mark.parametrize("rnumel", [8192, 16384, 32768])
def test_wide_persistent_rows_keep_at_most_32_values_a_thread(rnumel):
    # the default limit (32768) keeps these rows persistent
    cfg = pick_config(256 * rnumel, rnumel, 32768)
    assert cfg.persistent and cfg.RBLOCK == rnumel and cfg.XBLOCK == 1
    assert cfg.RBLOCK // (cfg.num_warps * 32) <= 32 and cfg.num_warps <= 32
    assert pick_config(256 * 4096, 4096, 32768).num_warps == 8   # rows up to 4096: 8 warps, as before


@pytest.mark.parametrize("rnumel", [768, 1024, 2048])
def test_rows_of_1024_or_more_take_one_row_and_8_warps_a_program(rnumel):
    # a layer norm over 768 columns took 5-15% less time so than at 4 rows a program (H200, session 32)
    cfg = pick_config(512 * rnumel, rnumel, 32768)
    assert cfg.persistent and cfg.XBLOCK == 1 and cfg.num_warps == 8
    assert pick_config(512 * 512, 512, 32768).XBLOCK == 8    # narrower rows keep several a program


def test_layer_norm_of_768_wide_rows_launches_one_row_a_program():
    x, w, b = torch.randn(6, 768), torch.randn(768), torch.randn(768)
    check(lambda x, w, b: torch.nn.functional.layer_norm(x + 1, (768,), w, b), x, w, b, kernels=1,
          atol=1e-4, rtol=1e-4)
    ((name, meta),) = launches()
    assert name.startswith("triton_per_") and meta["XBLOCK"] == 1, (name, meta)
