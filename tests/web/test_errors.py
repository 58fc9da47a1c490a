"""The failure table: what an agent is told for each transport, status and busy failure."""

from __future__ import annotations

import email.utils
import ssl

import httpcore
import httpx
import pytest

from trio_batch.web._guard._errors import busy_error, status_error, transport_error


def through_the_pool(root: BaseException) -> httpx.ConnectError:
    """``root`` as the fetcher receives it: under httpcore's error, which httpcore's connection
    pool re-raises ``from None``, under httpx's error."""
    try:
        try:
            try:
                raise root
            except BaseException as exc:
                raise httpcore.ConnectError(str(exc)) from exc
        except httpcore.ConnectError as exc:
            raise exc from None
    except httpcore.ConnectError as exc:
        try:
            raise httpx.ConnectError(str(exc)) from exc
        except httpx.ConnectError as mapped:
            return mapped


REFUSED_IN_A_GROUP = ExceptionGroup("all attempts failed", [ConnectionRefusedError(111, "no")])


class TestTransportError:
    @pytest.mark.parametrize(
        ("root", "msg"),
        [
            (
                ssl.SSLCertVerificationError("certificate verify failed"),
                "the site's TLS certificate could not be verified",
            ),
            (ssl.SSLError("wrong version number"), "the TLS handshake with the site failed"),
            (
                ConnectionRefusedError(111, "refused"),
                "the site refused the connection on port 8443",
            ),
            (REFUSED_IN_A_GROUP, "the site refused the connection on port 8443"),
            (OSError("no route to host"), "could not connect to the site"),
        ],
    )
    def test_the_cause_under_the_pool_is_found(self, root: BaseException, msg: str) -> None:
        """The TLS or socket error under a connect error names the failure, also when the
        connection pool hid it with ``from None`` or it sits in an exception group."""
        error = transport_error(through_the_pool(root), port=8443, timeout=30.0)

        assert (msg, 502) == (error.msg, error.status)
        assert error.hint

    @pytest.mark.parametrize(
        ("exc", "msg", "status"),
        [
            (httpx.ReadTimeout("read"), "the site did not answer within 2.5 s", 504),
            (httpx.DecodingError("gzip"), "the site sent a body that cannot be decompressed", 502),
            (
                httpx.RemoteProtocolError("peer closed"),
                "the site sent a malformed or truncated response",
                502,
            ),
            (httpx.ReadError("reset"), "the connection to the site failed", 502),
        ],
    )
    def test_the_raised_error_names_the_failure(
        self, exc: httpx.HTTPError, msg: str, status: int
    ) -> None:
        """Timeouts, broken bodies and anything else each have their row; the last catches all."""
        error = transport_error(exc, port=443, timeout=2.5)

        assert (msg, status) == (error.msg, error.status)
        assert error.hint


class TestStatusError:
    @pytest.mark.parametrize(
        ("status", "msg", "agent_status", "hint"),
        [
            (400, "the site answered 400 Bad Request", 400, "query parameters"),
            (401, "the site answered 401 Unauthorized", 401, "credentials"),
            (418, "the site answered 418 I'm a Teapot", 418, "refused the request"),
            (451, "the site answered 451 Unavailable For Legal Reasons", 451, "legal"),
            (599, "the site failed with 599", 502, "server error"),
            (302, "the site answered 302 Found, which has no content to read", 502, "browser"),
        ],
    )
    def test_statuses_without_content(
        self, status: int, msg: str, agent_status: int, hint: str
    ) -> None:
        """4xx keep their status with a hint, 5xx become 502, other non-2xx are 502 too."""
        error = status_error(status)

        assert error is not None
        assert (msg, agent_status) == (error.msg, error.status)
        assert hint in error.hint

    @pytest.mark.parametrize("status", [401, 403])
    def test_a_login_hint_says_where_credentials_go(self, status: int) -> None:
        """A 401 or 403 names options.headers, where a target carries credentials (issue 39:
        it said trio-batch sends none)."""
        error = status_error(status)

        assert error is not None
        assert "options.headers" in error.hint
        assert "sends no credentials" not in error.hint

    def test_success_is_no_error(self) -> None:
        """A 2xx has content to read."""
        assert (None, None) == (status_error(200), status_error(204))


class TestBusyError:
    NOW = 1_800_000_000.0

    @pytest.mark.parametrize(
        ("retry_after", "after"),
        [
            (None, None),
            ("7", 7.0),
            (" 7 ", 7.0),
            ("9999", 60.0),
            (email.utils.formatdate(NOW + 42, usegmt=True), 42.0),
            (email.utils.formatdate(NOW - 42, usegmt=True), 0.0),
            ("soon", None),
        ],
    )
    def test_retry_after(self, retry_after: str | None, after: float | None) -> None:
        """Retry-After in seconds or as a date becomes ``after``, within [0, cap]."""
        busy = busy_error(503, retry_after, now=self.NOW, cap=60.0)

        assert after == busy.after
        assert "the site is busy (503 Service Unavailable)" == str(busy)
