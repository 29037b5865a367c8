"""Lesson 01's tcp_store: a server and a client that share keys."""

from ddp_lib.demos.tcp_store import tcp_store


def test_a_client_reaches_the_server():
    server = tcp_store("127.0.0.1", 0, is_master=True)
    client = tcp_store("127.0.0.1", server.port, is_master=False)
    client.set("key", "value")
    assert server.get("key") == b"value"
    assert client.add("count", 1) + server.add("count", 1) == 3
