"""benchmarks/peak_memory.py: its cases compile and match eager on the CPU; on the GPU, planned peak
memory is within 10% of what the CUDA caching allocator measured."""
import pytest
import torch

from benchmarks import peak_memory


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message printed without a GPU")
def test_without_a_gpu_it_says_so_and_measures_nothing(capsys):
    assert peak_memory.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU check runs Triton's interpreter, which a GPU "
                    "process cannot switch to; the GPU test below compiles the same cases")
def test_every_case_compiles_matches_eager_and_plans_a_peak_on_the_cpu(capsys):
    assert peak_memory.main(["--cpu-check"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if "planned" in ln]
    assert len(rows) == len(peak_memory.cases(torch.device("cpu"), small=True))
    assert not any("differs" in ln for ln in rows)


@pytest.mark.gpu
def test_planned_peak_is_within_ten_percent_of_the_measured_peak(capsys):
    status = peak_memory.main([])
    print(capsys.readouterr().out)
    assert status == 0
