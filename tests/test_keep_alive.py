"""The server keeps an idle keep-alive connection open longer than clients and proxies keep
one in their pools (issue 46's soak: at uvicorn's 5 s, 2 of 101,493 requests were sent
into connections the server was closing)."""

from __future__ import annotations

import threading

from tagalign.serve import server


def test_run_server_keeps_idle_connections_longer_than_client_pools(monkeypatch):
    seen = []

    class Recorded:
        started = True

        def __init__(self, config, stopping):
            seen.append(config)

        def run(self):
            pass

    monkeypatch.setattr(server, "DrainingServer", Recorded)
    server.run_server(object(), "127.0.0.1", 8000, 3.0, threading.Event())
    (config,) = seen
    assert config.timeout_keep_alive == server.KEEP_ALIVE > 60  # nginx/ALB pools: 60 s
    assert config.timeout_graceful_shutdown == 3.0
