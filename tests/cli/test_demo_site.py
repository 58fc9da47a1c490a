"""The demo site answers what the demo and the CLI tests rely on."""

from __future__ import annotations

import io

import httpx
import pypdf

from trio_batch._cli._demo_site import PRIVATE_REDIRECT, DemoSite


class TestDemoSite:
    async def test_busy_page_answers_429_twice_per_query_then_200(self, site: DemoSite) -> None:
        """`/busy?as=X` is rate limited twice (with Retry-After) for each X, then answers."""
        async with httpx.AsyncClient() as client:
            codes = [(await client.get(site.url("/busy?as=a"))).status_code for _ in range(3)]
            other = await client.get(site.url("/busy?as=b"))

        assert codes == [429, 429, 200]
        assert other.status_code == 429
        assert other.headers["retry-after"] == "0"

    async def test_pdf_has_four_readable_pages(self, site: DemoSite) -> None:
        """`/report.pdf` is a valid four-page PDF whose text a PDF reader extracts."""
        async with httpx.AsyncClient() as client:
            response = await client.get(site.url("/report.pdf"))

        reader = pypdf.PdfReader(io.BytesIO(response.content))
        assert response.headers["content-type"] == "application/pdf"
        assert len(reader.pages) == 4
        assert "Page 2: rotation." in reader.pages[1].extract_text()

    async def test_articles_json_redirect_and_missing_pages(self, site: DemoSite) -> None:
        """Articles are HTML, the API is JSON, the redirect points at a private address."""
        async with httpx.AsyncClient() as client:
            article = await client.get(site.url("/articles/1"))
            items = await client.get(site.url("/api/items"))
            redirect = await client.get(site.url("/redirect-private"))
            missing = await client.get(site.url("/articles/99"))
            post = await client.post(site.url("/articles/1"))

        assert "<h1>Structured concurrency</h1>" in article.text
        assert items.json()["count"] == 5
        assert (redirect.status_code, redirect.headers["location"]) == (302, PRIVATE_REDIRECT)
        assert missing.status_code == 404
        assert post.status_code == 405
        assert site.requests["/articles/1"] == 2
