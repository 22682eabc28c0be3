"""`python -m mini_inductor ...` runs the `mini-inductor` command line."""
from mini_inductor.cli import main

raise SystemExit(main())
