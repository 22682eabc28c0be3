set -x
export PYTHONPATH=.
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -m gpu tests -rfE > $OUT/gpu_tests.txt 2>&1
tail -3 $OUT/gpu_tests.txt
for m in resnet launch_bound; do
  export TRITON_CACHE_DIR=/tmp/cp_$m/triton MINI_INDUCTOR_CACHE_DIR=/tmp/cp_$m/mi TORCHINDUCTOR_CACHE_DIR=/tmp/cp_$m/ind
  timeout 60 python3 -m benchmarks.compile_profile --model $m --no-profile > $OUT/cp_${m}_cold.txt 2>&1
  timeout 60 python3 -m benchmarks.compile_profile --model $m --no-profile > $OUT/cp_${m}_warm.txt 2>&1
  timeout 60 python3 -m benchmarks.compile_profile --model $m --top 60 > $OUT/cp_${m}_warm_prof.txt 2>&1
  head -20 $OUT/cp_${m}_cold.txt $OUT/cp_${m}_warm.txt | grep -v "^ *$"
done
unset TRITON_CACHE_DIR MINI_INDUCTOR_CACHE_DIR TORCHINDUCTOR_CACHE_DIR
timeout 240 python3 -m benchmarks.suite --models resnet --backends eager,inductor,inductor_reduce_overhead,cudagraphs,mini_inductor,mini_inductor_no_cudagraphs --warm-backends inductor,inductor_reduce_overhead,mini_inductor,mini_inductor_no_cudagraphs --timeout 120 --out $OUT/suite > $OUT/suite.txt 2>&1
tail -12 $OUT/suite.txt
timeout 60 python3 -m benchmarks.call_profile --model resnet --gpu --calls 20 --top 25 --backends mini_inductor_no_cudagraphs,inductor > $OUT/prof_resnet_nocg.txt 2>&1
grep "===" $OUT/prof_resnet_nocg.txt
