"""Rendering: pages that need JavaScript, in Debian's Chromium, under the guard.

Above extraction (a rendered page is shaped like a fetched one) and below fetching (the fetcher
owns the browsers). ``_browser`` finds and starts Chromium; ``_cdp`` speaks the DevTools
protocol; ``_proxy`` is the guarded proxy every request of a browser goes through; ``_page``
is one render in a fresh context; ``_pool`` lends browsers to renders; ``_rendered`` is the
fetcher's side of it (settings, the pool's lifetime, a rendered page as a body to shape).
"""
