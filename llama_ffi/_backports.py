"""What the standard library gained after CPython 3.9, the oldest the abi3 wheel serves."""

from __future__ import annotations

import contextlib

if hasattr(contextlib, "aclosing"):  # 3.10
    aclosing = contextlib.aclosing
else:

    class aclosing(contextlib.AbstractAsyncContextManager):  # noqa: N801 - the standard library's name
        """``async with aclosing(agen):`` closes ``agen`` on leaving the block."""

        def __init__(self, thing):
            self.thing = thing

        async def __aenter__(self):
            return self.thing

        async def __aexit__(self, *exc_info):
            await self.thing.aclose()
