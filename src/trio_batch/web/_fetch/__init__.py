"""Fetching: the top floor of ``trio_batch.web``, where a target becomes a ``Result``.

``_fetcher`` is :class:`~trio_batch.web.WebFetcher` (guard, budgets, redirects, cache, robots,
rendering, shaping in workers); ``_response`` reads a response's body within its limits;
``_cache`` is the response cache in the store; ``_robots`` reads and obeys robots.txt;
``_sitemap`` maps a site (its sitemaps and its start page's links); ``_convert`` is
``trio_batch.web.shape``, the fetcher's shaping for a body already in hand.
"""
