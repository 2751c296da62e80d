"""A Type=notify service for the harness test: READY=1, then WATCHDOG=1 every second until the
file /run/wd-probe/stall appears; then it keeps running but stops pinging, like a hung engine.
At start it removes the stall file, so a restarted instance pings again."""

import os
import socket
import time
from pathlib import Path

STALL = Path("/run/wd-probe/stall")


def notify(message: str) -> None:
    address = os.environ["NOTIFY_SOCKET"]
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(message.encode(), address)


STALL.unlink(missing_ok=True)
notify("READY=1\nSTATUS=pinging")
while True:
    if STALL.exists():
        notify("STATUS=stalled")
        time.sleep(3600)
    notify("WATCHDOG=1")
    time.sleep(1)
