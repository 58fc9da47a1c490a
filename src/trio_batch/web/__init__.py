"""The web fetcher: a ``FetchFunc`` for real pages, made for agents (SPEC §6).

Needs the ``web`` extra (``pip install trio-batch[web]``)::

    from trio_batch.web import WebFetcher, precheck, validate_options

    async with WebFetcher(store=store) as fetch:
        async with open_engine(store, fetch) as engine:
            ...

:func:`shape` shapes a body already in hand, as the fetcher would.
:func:`precheck` and :func:`validate_options` are the submit-time checks the HTTP API runs;
:class:`WebFetcher` repeats them and adds the fetch-time guard (every resolved address must be
public; the connection goes to the checked address), busy handling, limits, options and cache.
:func:`site_map` lists a site's URLs (its sitemaps and its start page's links) through the
same guard and budgets, for ``POST /v1/map`` and ``trio-batch map``; :class:`WebSiteGuide` is
what a crawl asks of a site besides its pages (robots.txt for its links, its sitemaps' pages).
:func:`guarded_transport` is that fetch-time guard as an httpx transport, for the service's
own requests to URLs a caller chose (webhooks); it raises :class:`AddressRefused`.

:func:`start_shaping` starts the process that shaping workers come from, so that a program's
first page does not wait for it.

The public names are imported on first use (PEP 562), all together: a shaping worker process
imports ``trio_batch.web._extract._worker`` only, and importing the fetcher, httpx and the
rest there took 0.11 of the 0.26 s of CPU each worker spent starting (two workers a run).
:func:`start_shaping` is imported at once: it needs only the standard library, and is called
before anything else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._util import fixup_module_metadata as _fixup_module_metadata, import_public as _import_public
from ._extract._preload import start_shaping as start_shaping

if TYPE_CHECKING:
    from ._extract._options import validate_options as validate_options
    from ._fetch._convert import shape as shape
    from ._fetch._fetcher import (
        DEFAULT_USER_AGENT as DEFAULT_USER_AGENT,
        WebFetcher as WebFetcher,
        WebFetcherStatistics as WebFetcherStatistics,
    )
    from ._fetch._site_guide import WebSiteGuide as WebSiteGuide
    from ._fetch._sitemap import MapBounds as MapBounds, SiteMap as SiteMap, site_map as site_map
    from ._guard._check import Network as Network, Resolver as Resolver, precheck as precheck
    from ._guard._outbound import (
        AddressRefused as AddressRefused,
        guarded_transport as guarded_transport,
    )

_WHERE = {
    "DEFAULT_USER_AGENT": "._fetch._fetcher",
    "WebFetcher": "._fetch._fetcher",
    "WebFetcherStatistics": "._fetch._fetcher",
    "shape": "._fetch._convert",
    "Network": "._guard._check",
    "Resolver": "._guard._check",
    "precheck": "._guard._check",
    "validate_options": "._extract._options",
    "AddressRefused": "._guard._outbound",
    "guarded_transport": "._guard._outbound",
    "MapBounds": "._fetch._sitemap",
    "SiteMap": "._fetch._sitemap",
    "site_map": "._fetch._sitemap",
    "WebSiteGuide": "._fetch._site_guide",
}

__all__ = [
    "DEFAULT_USER_AGENT",
    "AddressRefused",
    "MapBounds",
    "Network",
    "Resolver",
    "SiteMap",
    "WebFetcher",
    "WebFetcherStatistics",
    "WebSiteGuide",
    "guarded_transport",
    "precheck",
    "shape",
    "site_map",
    "start_shaping",
    "validate_options",
]

_fixup_module_metadata(__name__, {"start_shaping": start_shaping, "__all__": ["start_shaping"]})


def __getattr__(name: str) -> object:
    """A public name on first use, with all the others (the fetcher's)."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _import_public(__name__, globals(), _WHERE, _WHERE)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
