"""A stop (SIGTERM) interrupts a client's start: a group join the broker
never answers must not make `busguard run` ignore its stop."""

from __future__ import annotations

import asyncio

import pytest

from busguard.runtime.loop import until_stopped


async def test_a_stop_cancels_a_start_that_never_finishes() -> None:
    stop = asyncio.Event()
    cancelled = asyncio.Event()

    async def join_never_answered() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    waiting = asyncio.ensure_future(until_stopped(join_never_answered(), stop))
    await asyncio.sleep(0)
    assert not waiting.done()
    stop.set()
    assert await waiting is False
    assert cancelled.is_set()


async def test_a_start_that_finishes_is_reported_and_its_error_propagates() -> None:
    async def joined() -> None:
        return None

    async def refused() -> None:
        raise ConnectionError("no broker")

    assert await until_stopped(joined(), asyncio.Event()) is True
    with pytest.raises(ConnectionError):
        await until_stopped(refused(), asyncio.Event())
