"""trio-batch's benchmarks (not shipped in the wheel).

``python -m bench.run`` (or ``nox -s bench``) runs workloads W1-W5 on every available store beside
a bare baseline; ``python -m bench.peers`` (``nox -s bench_peers``) runs W1 and W2 on SAQ and
procrastinate; ``python -m bench.timer_overshoot`` and ``python -m bench.socket_latency`` are
the probes behind W2's analysis. See ``docs/benchmarks.md``.
"""

from __future__ import annotations
