"""A differential fuzzer: random tensor programs run eagerly and under mini_inductor, compared.

    python -m tests.fuzz --n 200 --seed 0 [--jobs 2] [--autograd] [--device cuda] [--out DIR]

Modules: program (the program as data and source), ops (the op table), generate (drawing
programs), compare (compiled against eager), execute (one program, in a worker), workers (the
subprocess pool), shrink (delta debugging), cli (the run, the table, the repros). See README.md.
"""
