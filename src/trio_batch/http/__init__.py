"""The HTTP API of SPEC §5 (``pip install 'trio-batch[server]'``).

::

    async with open_engine(store, fetch, config) as engine:
        app = create_app(engine, load_keys("keys.toml"), fetch=fetch)
        await serve(app, port=8080, shutdown_trigger=stop.wait)

``create_app`` builds a Starlette app; ``serve`` runs it on hypercorn's Trio worker inside the
caller's nursery and reports the bound port through ``task_status``. Signals, exit codes and the
rest of the ``trio-batch serve`` command live in the CLI. See ``docs/http.md``.
"""

from __future__ import annotations

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._app import create_app as create_app
from ._cors import check_origins as check_origins
from ._deliveries import DeliveryPolicy as DeliveryPolicy, open_deliveries as open_deliveries
from ._keys import (
    KeyRecord as KeyRecord,
    KeyRing as KeyRing,
    KeysFileError as KeysFileError,
    add_key as add_key,
    hash_key as hash_key,
    load_keys as load_keys,
    remove_key as remove_key,
    set_webhook_secret as set_webhook_secret,
)
from ._openapi import openapi_document as openapi_document
from ._parse import (
    MAX_BODY as MAX_BODY,
    OptionsCheckFunc as OptionsCheckFunc,
    PrecheckFunc as PrecheckFunc,
)
from ._serve import serve as serve

__all__ = [
    "MAX_BODY",
    "DeliveryPolicy",
    "KeyRecord",
    "KeyRing",
    "KeysFileError",
    "OptionsCheckFunc",
    "PrecheckFunc",
    "add_key",
    "check_origins",
    "create_app",
    "hash_key",
    "load_keys",
    "open_deliveries",
    "openapi_document",
    "remove_key",
    "serve",
    "set_webhook_secret",
]

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
