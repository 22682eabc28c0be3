#!/usr/bin/env bash
# The GPU checks of a session, in one device call: each step under its own time limit, its whole
# output in a file of $OUT (a step cut by its limit keeps what it printed), a one-line summary per
# step at the end. Not a test. Steps run in the order given; the default is all of them:
#
#   bash benchmarks/device_checks.sh [tests] [attention] [matmul] [suite] [dynamic] [profile]
#
#   tests      pytest -m gpu over tests/ (the large-tensor file and tests/distributed left out)
#   device_tests  the CPU suite's tests that take the test's device (dynamic shapes, random ops, scans, sorts,
#              attention matching), here on CUDA: they ran only on the CPU until session 35
#   attention  benchmarks.attention_sweep, fp16, L 1024 and 4096, five variants, fwd and fwd+bwd
#   matmul     benchmarks.matmul_templates, fp16, M 8192, cuBLAS against the cost model's choice
#              (max-autotune compiles 20-30 s a line: run it on its own)
#   suite      benchmarks.suite, GPT-2 (causal) and the decoder in float32, against Inductor
#   suite_models  the same for the held-out suite's families: ResNet-18 batch 16 and Hugging Face's GPT-2
#              (4 layers, eager attention), float32 (240 s; session 31 took about 80 s a model);
#              suite_models2: BERT-base and ViT-B/16 (240 s); suite_vit: ViT-B/16 alone (150 s)
#   cudagraph_tests  pytest -m gpu over tests/cudagraphs and tests/runtime alone (200 s; 120 s with -n 4
#              was not enough)
#   suite_hf   the same for GPT-2 with HF's registered causal `bias` buffer (read as causal by its data)
#   dynamic    benchmarks.dynamic_shapes, the serving and the training loop, mini_inductor and
#              reduce-overhead interleaved
#   train_interleaved  benchmarks.dynamic_shapes --cases train_interleaved: the training loop under
#              reduce-overhead, mini_inductor (gradients adopted in the pool) and mini_inductor with
#              them copied out after each backward (option cudagraph_adopt_gradients=False), epochs
#              in turn, 20 rounds (90 s)
#   profile    benchmarks.kernel_profile: GPT-2 (causal, float32) and the serving loop, kernel by kernel
#   tables     the attention sweep's data masks (hf_causal, padding), mini_inductor with and without block
#              tables computed from the mask data (--data-skip-min-scores 0): where they pay
#   distributed (two GPUs) tests/distributed/test_distributed_gpu.py, then benchmarks.distributed
#              --size small (DDP and FSDP2: eager, Inductor, mini_inductor)
#   distributed_bench  (two GPUs) the benchmark alone
#   train_profile  the training loop's host time per step by part, reduce-overhead and mini_inductor
#              twice each, with torch.profiler's and cProfile's tables (150 s)
#   attention_host  the causal sweep row's host time per forward and backward (train_host_profile
#              --model attention_causal): eager SDPA, mini_inductor with and without CUDA graphs (60 s)
#   matmul_sweep  benchmarks.matmul_templates in the default mode (off, auto, Inductor) over M 256,
#              2048, 16384, the GPT-2, LLaMA and ViT shapes, bias+GELU, residual, SwiGLU; fp16 (240 s);
#              matmul_sweep_bf16 the same in bfloat16
#   hash_ab    ViT-B/16 and BERT-base first calls on fresh caches with Triton's hash computed by a child
#              interpreter (the default) and in the setup thread (MINI_INDUCTOR_TRITON_HASH=here), in turn,
#              then Inductor reduce-overhead's (400 s)
#   matmul_lt  ReLU and tanh-GELU after a linear layer, fp16, M 2048 and 16384: auto against auto without
#              option cublaslt_activations (cuBLASLt's own activation epilogue) (200 s); matmul_lt_bf16 in bfloat16
#   matmul_autotune  max-autotune against Inductor's (and the default mode), M 2048 and 16384, the
#              GPT-2 shapes, bias+GELU and residual (compiles 20-30 s a line: 400 s)
#   matmul_tma  templates with and without TMA loads (option matmul_tma): always and auto, fp16, M 2048 and
#              16384, GPT-2 and LLaMA shapes, bias+GELU and residual (200 s); matmul_tma_autotune: max-autotune
#              with and without them, GPT-2 shapes (400 s)
#   pointwise  benchmarks.pointwise: mul, GELU (erf, tanh, HF gelu_new), erf, tanh, SiLU over 50M fp16 elements, eager / Inductor /
#              mini_inductor, and mini_inductor with libdevice's erff and tanhf (120 s)
#   gelu_variants  benchmarks.gelu_variants: formulations of float32 erf in an fp16 GELU kernel (60 s)
#   scans      tests/e2e/test_scan_kernels.py on CUDA (the scan kernels compiled and run), then
#              benchmarks.scans: cumsum over 4096 rows of 16 to 65536, eager, masked square, scan kernel
#              static and dynamic, float32 (150 + 150 s)
#   flash_fwd, flash_bwd  benchmarks.flash_configs: the generated flash kernels' configs timed one by one
#              (hf_causal and ALiBi, fp16, E 64, L 1024 and 4096), forward (150 s) and backward (300 s)
#   attention_tests  tests/attention/test_flex.py, test_flash.py and test_match_to_flash.py with CUDA as the test device (200 s)
#   flex       benchmarks.flex_attention: FlexAttention (causal, window, ALiBi, softcap, document, padding), fp16,
#              L 1024 and 4096, fwd and fwd+bwd: Inductor, mini_inductor, SDPA's flash (causal) (300 s)
#   flex_relative  the same for a causal relative-position bias per head (table[h, q_idx - kv_idx + L - 1]),
#              fixed, learned, and expanded to [H, L, S] beforehand, against eager too (200 s);
#              flex_learned: ALiBi with fixed and learned slopes, fwd+bwd (120 s); flex_profile: ALiBi
#              and the relative biases' fwd+bwd at L 4096, mini_inductor's kernels by GPU time (200 s);
#              flex_dkdv: the relative biases' fwd+bwd under three dk/dv configs (flash.PER_SCORE_DKDV, 3 x 90 s)
#   warm_start  benchmarks.dynamic_shapes' serving and training loops in a fresh process twice on the same
#              cache dirs, cold then warm, mini_inductor and reduce-overhead: the first round's seconds (300 s)
#   attention_profile  the kernels of the causal sweep row's forward+backward (mini_inductor, which
#              matches it to SDPA) against SDPA's own (eager): the sweep had them 0.51 against 0.22 ms
#
# The limits add up to under 10 minutes (one call of the device tool, with the machine's start):
# 240 + 90 + 60 + 150 + 80 s (profile: 90 + 90 s, tables: 60 s, distributed: 330 + 200 s, each on its own).
set -u
export PYTHONPATH=.
OUT=${OUT:-/tmp/device_checks}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests attention matmul suite dynamic)
summary="$OUT/summary.txt"
{ nvidia-smi -L; git log --oneline -1 2>/dev/null; } > "$summary"

run() {   # run NAME SECONDS COMMAND...: the output to $OUT/NAME.txt, a line to the summary
    local name=$1 limit=$2
    shift 2
    local began=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
    local rc=$?
    local note=""
    [ $rc -eq 124 ] && note=" (cut by its ${limit} s limit)"
    echo "$name: exit $rc in $((SECONDS - began)) s$note; $(grep -E 'passed|failed' "$OUT/$name.txt" | tail -1)" >> "$summary"
}

for step in "${steps[@]}"; do
    case $step in
        tests) run tests 240 python3 -m pytest -m gpu -n 8 -q -p no:cacheprovider tests \
                   --deselect tests/e2e/test_large_tensors_gpu.py --ignore tests/distributed -rfE --tb=short ;;
        device_tests) run device_tests 280 python3 -m pytest -n 8 -q -p no:cacheprovider \
                   tests/e2e/test_dynamic_shapes.py tests/e2e/test_dynamic_int_values.py tests/e2e/test_random.py \
                   tests/attention/test_match.py tests/e2e/test_eager_kernel_dtypes.py tests/e2e/test_scan_kernels.py \
                   tests/e2e/test_scan_ops_more.py tests/e2e/test_sort_kernels.py \
                   tests/e2e/test_adaptive_avg_pool.py tests/e2e/test_dynamic_float_divisors.py \
                   tests/e2e/test_scatter_store.py tests/e2e/test_higher_order_ops.py \
                   tests/e2e/test_scan_and_pooling.py tests/e2e/test_forward_ad.py tests/e2e/test_pooling_fuzz_found.py \
                   tests/e2e/test_views.py -rfE --tb=short ;;   # CPU-suite tests that take the device: on CUDA here
        attention_tests) run attention_tests 200 python3 -m pytest -n 8 -q -p no:cacheprovider \
                   tests/attention/test_flex.py tests/attention/test_flash.py tests/attention/test_match_to_flash.py \
                   tests/attention/test_extra_grads.py tests/attention/test_extra_grads_review.py -rfE --tb=short ;;
        flex_relative) run flex_relative 200 python3 -m benchmarks flex_attention \
                   --variants relative,relative_learned,relative_dense --lengths 1024,4096 \
                   --backends eager,inductor,mini_inductor --out "$OUT/flex_relative.json" ;;
        flex_profile) run flex_profile 200 python3 -m benchmarks flex_attention --variants alibi,relative,relative_learned,relative_dense \
                   --lengths 4096 --modes fwdbwd --backends mini_inductor --profile ;;
        flex_dkdv) n=0; for cfg in "(64, 64, 4, 3)" "(128, 64, 8, 2)" "(64, 64, 4, 2)"; do n=$((n + 1))
                   run flex_dkdv_$n 90 python3 -m benchmarks flex_attention --variants relative,relative_dense \
                   --lengths 1024,4096 --modes fwdbwd --backends mini_inductor --profile \
                   --flash-option "PER_SCORE_DKDV=$cfg"; done ;;
        flex_learned) run flex_learned 120 python3 -m benchmarks flex_attention --variants alibi,alibi_learned \
                   --modes fwdbwd --lengths 1024,4096 --out "$OUT/flex_learned.json" ;;
        flex) run flex 300 python3 -m benchmarks flex_attention --lengths 1024,4096 --out "$OUT/flex.json" ;;
        attention) run attention 90 python3 -m benchmarks attention_sweep --dtypes float16 --lengths 1024,4096 \
                       --variants causal,hf_causal,padding,alibi,window --out "$OUT/attention.json" ;;
        matmul) run matmul 60 python3 -u -m benchmarks.matmul_templates --dtype float16 --tokens 8192 \
                    --variants off,auto --epilogues bias+gelu,residual ;;
        suite) run suite 150 python3 -m benchmarks.suite --models gpt2_causal,decoder \
                   --backends eager,inductor_reduce_overhead,mini_inductor --dtype float32 --no-warm \
                   --out "$OUT/suite" ;;
        suite_models) run suite_models 240 python3 -m benchmarks.suite --models resnet_b16,hf_gpt2 \
                   --backends eager,inductor_reduce_overhead,mini_inductor --dtype float32 --no-warm \
                   --out "$OUT/suite_models" ;;
        suite_models2) run suite_models2 240 python3 -m benchmarks.suite --models hf_bert,hf_vit \
                   --backends eager,inductor_reduce_overhead,mini_inductor --dtype float32 --no-warm \
                   --out "$OUT/suite_models2" ;;
        suite_vit) run suite_vit 150 python3 -m benchmarks.suite --models hf_vit \
                   --backends eager,inductor_reduce_overhead,mini_inductor --dtype float32 --no-warm \
                   --out "$OUT/suite_vit" ;;
        cudagraph_tests) run cudagraph_tests 200 python3 -m pytest -m gpu -n 8 -q -p no:cacheprovider tests/cudagraphs \
                   tests/runtime -rfE --tb=short ;;
        suite_hf) run suite_hf 100 python3 -m benchmarks.suite --models gpt2_hf_causal \
                   --backends eager,inductor_reduce_overhead,mini_inductor --dtype float32 --no-warm \
                   --out "$OUT/suite_hf" ;;
        dynamic) run dynamic 80 python3 -m benchmarks dynamic_shapes --out "$OUT/dynamic.json" \
                     --backends inductor_reduce_overhead,mini_inductor,inductor_reduce_overhead,mini_inductor ;;
        profile) run profile_gpt2 90 python3 -m benchmarks kernel_profile --model gpt2_causal --dtype float32 \
                     --backends eager,inductor,mini_inductor
                 run profile_serve 90 python3 -m benchmarks kernel_profile --model serve ;;
        tables) run tables 60 python3 -m benchmarks attention_sweep --dtypes float16 --lengths 1024,4096 \
                    --variants hf_causal,padding --backends mini_inductor --modes fwd,fwdbwd
                run tables_on 60 python3 -m benchmarks attention_sweep --dtypes float16 --lengths 1024,4096 \
                    --variants hf_causal,padding --backends mini_inductor --modes fwd,fwdbwd --data-skip-min-scores 0 ;;
        distributed) run distributed_tests 330 python3 -m pytest -m gpu -q -p no:cacheprovider \
                         tests/distributed/test_distributed_gpu.py -rfE --tb=short
                     run distributed_bench 200 python3 -u -m benchmarks distributed --size small ;;
        attention_profile) run attention_profile 90 bash -c "python3 -m benchmarks kernel_profile --model attention_causal \
                               --train --backends mini_inductor; python3 -m benchmarks kernel_profile --model sdpa_causal \
                               --train --backends eager" ;;
        train_profile) run train_profile 150 python3 -m benchmarks train_host_profile --top 30 --epochs 10 \
                           --backends inductor_reduce_overhead,mini_inductor,inductor_reduce_overhead,mini_inductor ;;
        attention_host) run attention_host 90 python3 -m benchmarks train_host_profile --model attention_causal \
                            --top 30 --backends eager_sdpa,mini_inductor,mini_inductor_no_graphs,mini_inductor ;;
        matmul_sweep) run matmul_sweep 300 python3 -u -m benchmarks.matmul_templates --dtype float16 \
                          --tokens 256,2048,16384 --variants off,auto,inductor --epilogues bias+gelu,residual,swiglu ;;
        matmul_lt) run matmul_lt 200 python3 -u -m benchmarks.matmul_templates --dtype float16 \
                          --tokens 2048,16384 --variants off,auto,auto-no-lt,inductor --epilogues bias+relu,bias+gelu_tanh ;;
        matmul_lt_bf16) run matmul_lt_bf16 200 python3 -u -m benchmarks.matmul_templates --dtype bfloat16 \
                          --tokens 2048,16384 --variants off,auto,auto-no-lt,inductor --epilogues bias+relu,bias+gelu_tanh ;;
        matmul_sweep_bf16) run matmul_sweep_bf16 300 python3 -u -m benchmarks.matmul_templates --dtype bfloat16 \
                          --tokens 256,2048,16384 --variants off,auto,inductor --epilogues bias+gelu,residual,swiglu ;;
        matmul_autotune) run matmul_autotune 400 python3 -u -m benchmarks.matmul_templates --dtype float16 \
                          --tokens 2048,16384 --shapes gpt2 --epilogues bias+gelu,residual \
                          --variants auto,max-autotune,inductor-max-autotune ;;
        matmul_tma) run matmul_tma 200 python3 -u -m benchmarks.matmul_templates --dtype float16 \
                          --tokens 2048,16384 --shapes gpt2,llama --epilogues bias+gelu,residual \
                          --variants off,always,always-tma,auto,auto-tma ;;
        matmul_tma_autotune) run matmul_tma_autotune 400 python3 -u -m benchmarks.matmul_templates --dtype float16 \
                          --tokens 2048,16384 --shapes gpt2 --epilogues bias+gelu,residual \
                          --variants auto,max-autotune,max-autotune-tma ;;
        pointwise) run pointwise 120 python3 -m benchmarks pointwise --ops mul,gelu,gelu_tanh,gelu_new,erf,tanh,silu ;;
        gelu_variants) run gelu_variants 60 python3 -m benchmarks gelu_variants ;;
        scans) run scan_tests 150 python3 -m pytest -n 8 -q -p no:cacheprovider tests/e2e/test_scan_kernels.py \
                   -rfE --tb=short
               run scans 150 python3 -m benchmarks scans ;;
        flash_fwd) run flash_fwd 150 python3 -u -m benchmarks flash_configs --modes fwd ;;
        flash_bwd) run flash_bwd 300 python3 -u -m benchmarks flash_configs --modes dkdv,dq ;;
        train_interleaved) run train_interleaved 90 python3 -m benchmarks dynamic_shapes --cases train_interleaved \
                               --backends inductor_reduce_overhead,mini_inductor,mini_inductor_copy_grads ;;
        warm_start) run warm_start 300 bash -c 'for b in mini_inductor inductor_reduce_overhead; do d=$(mktemp -d);
                   for run in cold warm; do echo "== $b $run"; TRITON_CACHE_DIR=$d/t MINI_INDUCTOR_CACHE_DIR=$d/m \
                   TORCHINDUCTOR_CACHE_DIR=$d/i python3 -m benchmarks dynamic_shapes --cases serve,train --backends $b \
                   2>&1 | grep -E "^(serve|train) "; done; done' ;;   # first calls cold, then warm (same caches)
        distributed_bench) run distributed_bench 200 python3 -u -m benchmarks distributed --size small ;;
        compile_ab) run compile_ab 300 bash -c 'for m in ${AB_MODELS:-hf_gpt2 hf_vit}; do for w in 1 0 1 0; do d=$(mktemp -d);
                   echo "== $m compile_workers=$w"; MINI_INDUCTOR_COMPILE_WORKERS=$w TRITON_CACHE_DIR=$d/t \
                   MINI_INDUCTOR_CACHE_DIR=$d/m python3 -m benchmarks.compile_profile --model $m --dtype float32 \
                   --no-profile 2>&1 | grep -E "^first call|backend|compile workers"; done; d=$(mktemp -d);
                   echo "== $m inductor_reduce_overhead"; TRITON_CACHE_DIR=$d/t TORCHINDUCTOR_CACHE_DIR=$d/i \
                   python3 -m benchmarks.compile_profile --model $m --dtype float32 --no-profile \
                   --backend inductor_reduce_overhead 2>&1 | grep -E "^first call"; done' ;;   # first calls, fresh caches
        hash_ab) run hash_ab 400 bash -c 'for m in ${AB_MODELS:-hf_vit hf_bert}; do for h in child here child here; do d=$(mktemp -d);
                   echo "== $m triton_hash=$h"; MINI_INDUCTOR_TRITON_HASH=$h TRITON_CACHE_DIR=$d/t \
                   MINI_INDUCTOR_CACHE_DIR=$d/m python3 -m benchmarks.compile_profile --model $m --dtype float32 \
                   --no-profile 2>&1 | grep -E "^first call|backend|compile workers"; done; d=$(mktemp -d);
                   echo "== $m inductor_reduce_overhead"; TRITON_CACHE_DIR=$d/t TORCHINDUCTOR_CACHE_DIR=$d/i \
                   python3 -m benchmarks.compile_profile --model $m --dtype float32 --no-profile \
                   --backend inductor_reduce_overhead 2>&1 | grep -E "^first call"; done' ;;   # Triton's hash: child or thread
        *) echo "unknown step $step" >> "$summary" ;;
    esac
done
cat "$summary"
