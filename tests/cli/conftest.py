from __future__ import annotations

import pytest
import trio

from trio_batch._cli._demo_site import DemoSite, serve_demo_site


@pytest.fixture
async def site(nursery: trio.Nursery) -> DemoSite:
    """The demo site on 127.0.0.1, fast: no latency, no Retry-After wait, a 30 s slow page."""
    served: DemoSite = await nursery.start(
        serve_demo_site, DemoSite(slow_seconds=30.0, retry_after=0)
    )
    return served
