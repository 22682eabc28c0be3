"""Debug-dir dumps: per compiled graph, everything needed to see and rerun what was generated.

    <debug_dir>/<graph name>/
        aten_graph.txt      the ATen FX graph (readable, with source lines)
        ir_pre_fusion.txt   the IR buffers before fusion
        schedule.txt        the fused groups, freeing points and refused pairs with reasons
        output_code.py      wrapper + kernels; `python output_code.py` runs it on random inputs
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger("mini_inductor.debug")


def dump_graph(debug_dir: str, gm, lowered, sched, gen) -> str:
    folder = os.path.join(debug_dir, lowered.name)
    os.makedirs(folder, exist_ok=True)
    files = {
        "aten_graph.txt": gm.print_readable(print_output=False, include_stride=True, include_device=True),
        "ir_pre_fusion.txt": lowered.describe() + "\n",
        "schedule.txt": sched.describe() + "\n",
        "output_code.py": gen.source,
    }
    for fname, text in files.items():
        with open(os.path.join(folder, fname), "w") as f:
            f.write(text)
    log.info("%s: debug files in %s", lowered.name, folder)
    return folder
