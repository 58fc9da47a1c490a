"""The web fetcher inside the engine: one mixed batch, end to end over a local server."""

from __future__ import annotations

import trio

from tests.support import LocalSite, Recorder, Reply, wait_ended
from tests.web.support import ARTICLE_HTML, DATA_JSON, LOOPBACK, REPORT_PAGES, make_pdf
from trio_batch import Caller, Config, JobStatus, Options, Target, TargetState, open_engine
from trio_batch.stores import MemoryStore
from trio_batch.web import WebFetcher, precheck


class TestMixedBatch:
    async def test_mixed_batch_ends_partial_with_content_meta_errors_and_hints(
        self, server: LocalSite
    ) -> None:
        """HTML, JSON+jq, PDF+pages, grep, a 429-then-200 page and a private URL: partial."""
        server.route("/article", Reply(body=ARTICLE_HTML, headers=[("content-type", "text/html")]))
        server.route(
            "/data.json", Reply(body=DATA_JSON, headers=[("content-type", "application/json")])
        )
        server.route(
            "/report.pdf",
            Reply(body=make_pdf(REPORT_PAGES), headers=[("content-type", "application/pdf")]),
        )
        server.route(
            "/busy",
            Reply(429, b"slow down", [("retry-after", "1"), ("content-type", "text/plain")]),
            Reply(body=b"finally here\n", headers=[("content-type", "text/plain")]),
        )
        targets = [
            Target(server.url("/article")),
            Target(server.url("/data.json"), Options(jq="[.items[].price] | add")),
            Target(server.url("/report.pdf"), Options(pages="2")),
            Target(server.url("/article"), Options(grep="euros")),
            Target(server.url("/busy")),
            Target("http://10.0.0.7/admin"),
        ]
        for target in targets[:-1]:
            precheck(target.url, allow=LOOPBACK)
        recorder = Recorder()
        store = MemoryStore()
        config = Config(retry_wait=0.05, hooks=recorder.hooks())
        async with (
            WebFetcher(store=store, allow=LOOPBACK, max_retry_after=0.1) as fetch,
            open_engine(store, fetch, config) as engine,
        ):
            submitted = await engine.submit(Caller("agent"), "fleet", targets)
            with trio.fail_after(20):
                await wait_ended(engine, submitted.id)
            snapshot = await engine.status(submitted.id)

        assert snapshot is not None
        assert snapshot.job.status == JobStatus.PARTIAL
        html, data, pdf, grep, busy, private = snapshot.targets
        assert [t.status for t in snapshot.targets] == [TargetState.DONE] * 5 + [TargetState.FAILED]
        assert html.result is not None
        assert html.result.content.startswith("Widgets\n")
        assert html.result.meta["title"] == "Widget Guide"
        assert data.result is not None
        assert data.result.content == "8\n"
        assert data.result.meta["jq_results"] == 1
        assert pdf.result is not None
        assert "revenue grew" in pdf.result.content
        assert (pdf.result.meta["page_count"], pdf.result.meta["pages"]) == (3, [2])
        assert grep.result is not None
        assert grep.result.meta["matches"] == 1
        assert busy.result is not None
        assert busy.result.content == "finally here\n"
        assert server.hits["/busy"] == 2
        assert recorder.retries == [0.1]
        assert private.error == "the URL's host is a private or otherwise non-public address"
        assert "public" in private.hint
        for done in (html, data, pdf, grep, busy):
            assert done.result is not None
            assert {"url", "status", "content_type", "bytes", "elapsed"} <= set(done.result.meta)
