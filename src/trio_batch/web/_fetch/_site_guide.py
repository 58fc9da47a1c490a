"""What a site tells its crawlers, read through a :class:`WebFetcher`: robots.txt for each link a
crawl finds, and the site's sitemaps for its seeds (the engine's ``SiteGuide``).

A link robots.txt disallows is skipped before it is admitted (counted ``robots`` in the crawl's
answer) instead of taking a place in the crawl's frontier and failing there. Only a rule that
disallows skips: a robots.txt that cannot be read now, or an address the guard refuses, is left
to the page's own fetch, which checks again (every hop) and answers for it with a status.

The sitemaps are read by :func:`~trio_batch.web.site_map` without the start page (its links are
the crawl's to find, one level deeper): every request goes through the fetcher's pool, guard,
host budget and robots.txt, bounded as a map is. A sitemap that cannot be read gives no seeds;
the crawl still starts from its URL (with ``sitemaps="include"``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import final

from ..._errors import RetryLater, TargetError
from ..._model import Caller
from ._fetcher import WebFetcher
from ._sitemap import MAX_LIMIT, site_map

logger = logging.getLogger("trio_batch.web")


@final
class WebSiteGuide:
    """A crawl's robots.txt checks and sitemap reads through ``fetcher`` (give it to
    :func:`~trio_batch.open_engine` as ``site_guide``, with the fetcher as its ``fetch``)."""

    __slots__ = ("_fetcher",)

    def __init__(self, fetcher: WebFetcher) -> None:
        self._fetcher = fetcher

    async def allows(self, caller: Caller, url: str) -> bool:
        """False only when the robots.txt of ``url``'s origin disallows it for this fetcher's
        user agent (fetched once per origin through the guard and the host budget, then
        cached as a fetch's is)."""
        try:
            verdict = await self._fetcher._robots_verdict(url)
        except (TargetError, ValueError, RetryLater):
            return True  # the fetch answers for it (a guard's refusal, a busy site)
        return verdict.allowed or verdict.unreachable

    async def sitemap_urls(self, caller: Caller, url: str, limit: int) -> Sequence[str]:
        """At most ``limit`` page URLs of the sitemaps of ``url``'s host (those its robots.txt
        names, else ``/sitemap.xml``), as ``caller``; none when they cannot be read."""
        try:
            found = await site_map(
                self._fetcher, caller, url, limit=min(limit, MAX_LIMIT), start_page=False
            )
        except (TargetError, RetryLater):
            logger.info("crawl seeds: the sitemaps could not be read; the crawl starts without")
            return []
        return [u for u in found.urls if u != url]
