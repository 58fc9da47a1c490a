"""What a follower costs: memory and CPU per follower of one job (not a test; a measurement).

    python -m tests.http.follow_cost [--followers 200] [--targets 100]
        [--store memory|sqlite|postgres] [--route events|results|both] [--repeat 3]

The measurement is W6 of the benchmarks and lives in ``bench/followers.py`` (see its docstring
for what it measures and how); ``nox -s bench`` runs it on every store. This name is kept for
the command that docs/http.md shows.
"""

from __future__ import annotations

from bench.followers import main

if __name__ == "__main__":
    raise SystemExit(main())
