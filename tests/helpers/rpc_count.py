"""Count a Temporal client's outbound calls: every call its interceptor sees (start, describe, query,
signal, update, list, ...) and every RPC its service client sends (history reads included, which
the client interceptor does not see). Used by tests/test_decision_rpcs.py and bench/decision_rpcs.py."""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

from temporalio.client import Client, Interceptor, OutboundInterceptor


class CountingInterceptor(Interceptor):
    """Counts each outbound client call by its interceptor method's name."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _counting_outbound(next, self.calls)


def _counting_outbound(next: OutboundInterceptor, calls: Counter[str]) -> OutboundInterceptor:
    outbound = OutboundInterceptor(next)
    for name, _ in inspect.getmembers(OutboundInterceptor, inspect.iscoroutinefunction):
        if name.startswith("_"):
            continue
        forward = getattr(next, name)

        async def counted(*args: Any, _name: str = name, _forward: Any = forward, **kwargs: Any) -> Any:
            calls[_name] += 1
            return await _forward(*args, **kwargs)

        setattr(outbound, name, counted)
    return outbound


class CountedClient:
    """A client of its own (its own connection) whose calls and RPCs are counted."""

    def __init__(self, client: Client, interceptor: CountingInterceptor, rpcs: Counter[str]) -> None:
        self.client = client
        self.calls = interceptor.calls
        self.rpcs = rpcs

    @classmethod
    async def connect(cls, address: str, like: Client) -> CountedClient:
        """Connect to ``address`` with ``like``'s namespace and data converter, counting."""
        interceptor = CountingInterceptor()
        client = await Client.connect(
            address,
            namespace=like.namespace,
            data_converter=like.data_converter,
            interceptors=[interceptor],
        )
        rpcs: Counter[str] = Counter()
        service = client.service_client
        send = service._rpc_call

        async def counted_rpc(rpc: str, *args: Any, **kwargs: Any) -> Any:
            rpcs[rpc] += 1
            return await send(rpc, *args, **kwargs)

        service._rpc_call = counted_rpc  # type: ignore[method-assign]
        return cls(client, interceptor, rpcs)

    def reset(self) -> None:
        self.calls.clear()
        self.rpcs.clear()

    @property
    def total(self) -> int:
        """Outbound calls the interceptor saw."""
        return sum(self.calls.values())
