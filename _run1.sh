set -x
export PYTHONPATH=.
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/smi.txt 2>&1
timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -m gpu tests -rfE > $OUT/gpu_tests.txt 2>&1
tail -3 $OUT/gpu_tests.txt
MINI_INDUCTOR_CONV_LAYOUT=auto timeout 110 python3 -m benchmarks.call_profile --model resnet --gpu --calls 20 --top 25 --backends mini_inductor,mini_inductor_no_cudagraphs,inductor_reduce_overhead > $OUT/prof_resnet_auto.txt 2>&1
grep "===" $OUT/prof_resnet_auto.txt
timeout 80 python3 -m benchmarks.call_profile --model resnet --gpu --calls 20 --top 25 --backends mini_inductor,mini_inductor_no_cudagraphs > $OUT/prof_resnet_off.txt 2>&1
grep "===" $OUT/prof_resnet_off.txt
MINI_INDUCTOR_CONV_LAYOUT=auto timeout 170 python3 -m benchmarks.suite --models resnet --backends eager,inductor,inductor_reduce_overhead,mini_inductor,mini_inductor_no_cudagraphs --no-warm --timeout 100 --out $OUT/suite_auto > $OUT/suite_auto.txt 2>&1
tail -15 $OUT/suite_auto.txt
