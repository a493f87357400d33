#!/usr/bin/env python3
"""A TCP proxy on 127.0.0.1 whose replies pass at RATE bytes a second: a slow link to a real
registry, for tests that act while an image is being pulled.

    slow_proxy.py LISTEN_PORT TARGET_PORT RATE
"""
import socket
import sys
import threading
import time


def pipe(src, dst, rate):
    """Copy src to dst until either end closes; `rate` bytes a second at most (0: no limit)."""
    try:
        while True:
            data = src.recv(min(rate, 16384) if rate else 65536)
            if not data:
                break
            dst.sendall(data)
            if rate:
                time.sleep(len(data) / rate)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    listen, target, rate = (int(a) for a in sys.argv[1:4])
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen))
    server.listen(16)
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection(("127.0.0.1", target))
        threading.Thread(target=pipe, args=(client, upstream, 0), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client, rate), daemon=True).start()


if __name__ == "__main__":
    main()
