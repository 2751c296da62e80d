"""Load an nftables ruleset in this network namespace and try TCP connections to it from a
peer namespace over a veth pair: run as ``unshare -n python3 netns_tcp.py RULES CASES`` (root).

CASES is JSON: {"node": [addresses of this side], "peer": [addresses of the peer side],
"ports": [ports listened on here], "tries": [[source, destination, port], ...]}. Prints JSON:
one of "open", "refused", "timeout" per try, in order. Standard library and iproute2 only.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

CLIENT = (
    "import socket,sys\n"
    "src,dst,port=sys.argv[1],sys.argv[2],int(sys.argv[3])\n"
    "fam=socket.AF_INET6 if ':' in dst else socket.AF_INET\n"
    "s=socket.socket(fam,socket.SOCK_STREAM);s.settimeout(1.5);s.bind((src,0))\n"
    "try:\n s.connect((dst,port));print('open')\n"
    "except ConnectionRefusedError:\n print('refused')\n"
    "except (TimeoutError,socket.timeout):\n print('timeout')\n"
)


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def add(dev: str, address: str, peer: list[str] | None = None) -> None:
    prefix = (peer or []) + (["ip", "-6"] if ":" in address else ["ip"])
    extra = ["nodad"] if ":" in address else []
    run(*prefix, "addr", "add", address + ("/64" if ":" in address else "/24"), "dev", dev, *extra)


def serve(port: int, family: socket.AddressFamily) -> None:
    server = socket.socket(family, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    server.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
    server.listen(16)
    threading.Thread(target=lambda: [server.accept()[0].close() for _conn in iter(int, 1)],
                     daemon=True).start()


def main() -> None:
    rules, cases = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
    run("ip", "link", "set", "lo", "up")
    run("nft", "-f", str(rules))
    peer = subprocess.Popen(["unshare", "-n", "sleep", "60"])
    try:
        time.sleep(0.3)  # the child has entered its own namespace
        into = ["nsenter", "-t", str(peer.pid), "-n"]
        run("ip", "link", "add", "veth0", "type", "veth", "peer", "name", "veth1",
            "netns", str(peer.pid))
        for address in cases["node"]:
            add("veth0", address)
        for address in cases["peer"]:
            add("veth1", address, into)
        run("ip", "link", "set", "veth0", "up")
        run(*into, "ip", "link", "set", "veth1", "up")
        run(*into, "ip", "link", "set", "lo", "up")
        for port in cases["ports"]:
            serve(port, socket.AF_INET)
            serve(port, socket.AF_INET6)
        time.sleep(0.5)
        out = [subprocess.run([*into, sys.executable, "-c", CLIENT, src, dst, str(port)],
                              check=True, capture_output=True, text=True).stdout.strip()
               for src, dst, port in cases["tries"]]
    finally:
        peer.kill()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
