"""The masking lesson 01 applies to the init-method URLs it prints."""

from ddp_lib.demos.store_server import shown_url


def test_shown_url_masks_port_and_folder():
    assert shown_url("env://", "/tmp/x") == "env://"
    assert shown_url("tcp://127.0.0.1:54321", "/tmp/x") == "tcp://127.0.0.1:PORT"
    assert shown_url("file:///tmp/lesson01-ab/file", "/tmp/lesson01-ab") == "file:///STORE_DIR/file"
