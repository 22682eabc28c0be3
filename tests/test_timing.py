"""mini_inductor.timing.bench: warm-up calls, then samples of back-to-back calls; on the CPU host time only."""
import statistics

import benchmarks.package_files
from mini_inductor import timing


def test_bench_makes_the_warmup_calls_then_samples_of_calls():
    calls = []
    t = timing.bench(lambda: calls.append(1), warmup=3, samples=4, calls=5, device="cpu")
    assert len(calls) == 3 + 4 * 5
    assert len(t.wall_samples_ms) == 4
    assert t.wall_ms == statistics.median(t.wall_samples_ms)


def test_on_the_cpu_there_is_no_gpu_time():
    t = timing.bench(lambda: None, warmup=0, samples=3, device="cpu")
    assert t.gpu_ms is None and t.gpu_samples_ms == ()
    assert t.wall_ms >= 0


def test_the_benchmarks_load_the_same_file_without_importing_the_package():
    loaded = benchmarks.package_files.timing
    assert loaded.__file__ == timing.__file__
    assert loaded.bench.__code__.co_code == timing.bench.__code__.co_code
