"""Where the server's ports listen: the sockets for --host, with the default (every address) taking IPv4
and IPv6 on one dual-stack socket, or IPv4 alone where the kernel has no IPv6.

asyncio's create_server sets IPV6_V6ONLY on a socket bound to "::", so an HTTP port handed "::" would refuse
127.0.0.1; the HTTP and metrics ports get sockets made here instead. The gRPC port binds "[::]" itself
dual-stack, and is given "0.0.0.0" where there is no IPv6.

The sockets name their protocol (IPPROTO_TCP): asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
connections accepted from such a socket. Without it, an answer written in two parts (headers, then body)
waits for the client's delayed acknowledgement: 40 ms for every request after a keep-alive connection's
first.
"""

from __future__ import annotations

import logging
import socket

log = logging.getLogger("attnserve.listen")

EVERY_ADDRESS = ("", "::", "[::]", "*")
HOST_HELP = (
    "address every port listens on (gRPC, HTTP API, metrics): [::] (the default) is every address, IPv4 and "
    "IPv6 alike (0.0.0.0 where the kernel has no IPv6); 0.0.0.0 every IPv4 address only; a name "
    "(localhost) every address it resolves to; an address that one address"
)


def every_address(host: str) -> bool:
    return host.strip() in EVERY_ADDRESS


def listening_host(host: str) -> str:
    """--host as the ports will bind it: "[::]" for every address stays so while the kernel can make a
    dual-stack IPv6 socket, else becomes "0.0.0.0" (said in the log, once per start)."""
    if not every_address(host):
        return host
    if socket.has_dualstack_ipv6():
        return "[::]"
    log.warning("this kernel has no IPv6: listening on every IPv4 address (0.0.0.0) instead of [::]")
    return "0.0.0.0"


def tcp_server(
    address: tuple, family: socket.AddressFamily, dualstack: bool = False, shared: bool = False, listen: bool = True
) -> socket.socket:
    """socket.create_server's listening socket, but of protocol IPPROTO_TCP (see above). shared: the port is
    shared with the server's other processes (SO_REUSEPORT; the kernel spreads connections among them);
    listen False: bound only, to hold the port for them (a socket that does not listen gets no connection)."""
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dualstack else 1)
        sock.bind(address)
        if listen:
            sock.listen()
    except BaseException:
        sock.close()
        raise
    return sock


def listening_sockets(host: str, port: int, shared: bool = False, listen: bool = True) -> list[socket.socket]:
    """Bound, listening TCP sockets for host (as listening_host gives it) and port; port 0 picks one free
    port for all of them. shared, listen: as tcp_server takes them."""
    if every_address(host):
        return [tcp_server(("::", port), socket.AF_INET6, dualstack=True, shared=shared, listen=listen)]
    found = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, address in dict.fromkeys((family, address) for family, _, _, _, address in found):
            if sockets:  # every address on the port the first one got
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sockets.append(tcp_server(address, family, shared=shared, listen=listen))
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def address_text(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    if sock.family == socket.AF_INET6:
        dual = host == "::" and not sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
        return f"[{host}]:{port}" + (" (IPv4 and IPv6)" if dual else "")
    return f"{host}:{port}"
