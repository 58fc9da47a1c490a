"""The engine the crash test kills: run as ``python crash_child.py DSN SCHEMA``.

It submits one job of four targets; targets 0 and 1 return at once, target 2 never returns.
It prints ``job <id>`` after the submit and ``started <idx>`` as each fetch starts.
"""

from __future__ import annotations

import sys

import trio

from trio_batch import Caller, Result, Target, open_engine
from trio_batch.stores import PostgresStore

TIMEOUT = 1.0
HEARTBEAT = 0.2
CLAIM_TIMEOUT = 1.0


def say(line: str) -> None:
    print(line, flush=True)


async def main(dsn: str, schema: str) -> None:
    async def fetch(caller: Caller, target: Target) -> Result:
        idx = int(target.url.rsplit("/", 1)[1])
        say(f"started {idx}")
        if idx == 2:
            await trio.sleep_forever()
        return Result(f"page {idx}", {"idx": idx})

    async with (
        PostgresStore.open(
            dsn,
            schema=schema,
            instance_timeout=TIMEOUT,
            heartbeat=HEARTBEAT,
            claim_timeout=CLAIM_TIMEOUT,
        ) as store,
        open_engine(store, fetch) as engine,
    ):
        sub = await engine.submit(
            Caller("crash"), "fleet", [Target(f"https://crash.example.test/{i}") for i in range(4)]
        )
        say(f"job {sub.id}")
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
