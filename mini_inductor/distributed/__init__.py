"""Distributed training: functional collectives compiled (torch.ops._c10d_functional.*).

    collectives.py   the collectives and wait_tensor → CollectiveKernel / WaitKernel extern kernels,
                     registered into the lowering table (LOWERINGS) when lowering/ is imported
    overlap.py       the scheduler's overlap pass: collectives issued early, waits done late
                     (`reorder_for_overlap`), and the per-collective summary the reports show
    policy.py        which collectives a CUDA graph may capture (NCCL on CUDA), the partition rule

DDP and FSDP2 need nothing else from the compiler: under DDP, Dynamo's DDPOptimizer splits the graph at
the gradient buckets and DDP's reducer all-reduces in eager; FSDP2's hooks run eagerly between compiled
graphs. Collectives reach compiled graphs from code that calls functional collectives or DTensor
redistributions (tests/distributed/ has both).

Layer: beside the scheduler. It imports lowering (to register its lowerings, and its IR); the
scheduler imports overlap.py and reads the kernels' attributes; lowering imports only collectives.py.
"""
