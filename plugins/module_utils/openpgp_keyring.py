# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read OpenPGP keyrings well enough to find and remove one vendor's keys (RFC 4880 / 9580).

Used by the module ``instinct.vllm.apt_legacy_keys`` to undo apt-key era installs: a vendor key
added with ``apt-key add`` lives in ``/etc/apt/trusted.gpg`` (a keyring of many keys) or as a
file in ``/etc/apt/trusted.gpg.d`` (binary ``.gpg`` or armored ``.asc``). Only the standard
library is used; nothing is verified cryptographically - the fingerprint is a hash of the
public-key packet, which is all that identifying a key needs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

ARMOR_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
ARMOR_END = "-----END PGP PUBLIC KEY BLOCK-----"
TAG_PUBLIC_KEY = 6
TAG_PUBLIC_SUBKEY = 14


class KeyringError(ValueError):
    """The data is not an OpenPGP public keyring this module can read."""


@dataclass(frozen=True)
class Packet:
    tag: int
    body: bytes
    raw: bytes  # header + body, exactly as in the input


@dataclass(frozen=True)
class TransferableKey:
    """A primary key with the packets that follow it (user IDs, signatures, subkeys)."""

    fingerprint: str  # of the primary key, upper-case hex
    fingerprints: tuple[str, ...]  # primary and subkeys
    raw: bytes


def is_armored(data: bytes) -> bool:
    return ARMOR_BEGIN.encode() in data


def dearmor(text: str) -> bytes:
    """The binary packets of every ASCII-armored public key block in ``text``."""
    out = bytearray()
    lines = text.replace("\r", "").split("\n")
    i = 0
    found = False
    while i < len(lines):
        if lines[i].strip() != ARMOR_BEGIN:
            i += 1
            continue
        found = True
        i += 1
        while i < len(lines) and lines[i].strip() and ":" in lines[i]:  # armor headers
            i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != ARMOR_END:
            line = lines[i].strip()
            if line and not (line.startswith("=") and len(line) == 5):  # CRC24 line
                body.append(line)
            i += 1
        if i >= len(lines):
            raise KeyringError(f"armored key block without '{ARMOR_END}'")
        try:
            out += base64.b64decode("".join(body), validate=True)
        except binascii.Error as exc:
            raise KeyringError(f"armored key block is not valid base64: {exc}") from exc
        i += 1
    if not found:
        raise KeyringError(f"no '{ARMOR_BEGIN}' in the armored text")
    return bytes(out)


def as_binary(data: bytes) -> bytes:
    """Binary keyring bytes from armored or binary input."""
    if is_armored(data):
        return dearmor(data.decode("ascii", errors="replace"))
    return data


def _new_length(data: bytes, pos: int) -> tuple[int, int]:
    first = data[pos]
    if first < 192:
        return first, pos + 1
    if first < 224:
        if pos + 1 >= len(data):
            raise KeyringError("truncated packet length")
        return ((first - 192) << 8) + data[pos + 1] + 192, pos + 2
    if first == 255:
        if pos + 4 >= len(data):
            raise KeyringError("truncated packet length")
        return int.from_bytes(data[pos + 1 : pos + 5], "big"), pos + 5
    raise KeyringError("partial body lengths do not occur in keyrings")


def packets(data: bytes) -> list[Packet]:
    """Split binary OpenPGP data into packets."""
    result: list[Packet] = []
    pos = 0
    while pos < len(data):
        start = pos
        ctb = data[pos]
        if not ctb & 0x80:
            raise KeyringError(f"not an OpenPGP packet at offset {pos} (byte 0x{ctb:02x})")
        pos += 1
        if ctb & 0x40:  # new format
            tag = ctb & 0x3F
            if pos >= len(data):
                raise KeyringError("truncated packet header")
            length, pos = _new_length(data, pos)
        else:  # old format
            tag = (ctb >> 2) & 0x0F
            kind = ctb & 0x03
            if kind == 3:
                length = len(data) - pos
            else:
                size = (1, 2, 4)[kind]
                if pos + size > len(data):
                    raise KeyringError("truncated packet header")
                length = int.from_bytes(data[pos : pos + size], "big")
                pos += size
        if pos + length > len(data):
            raise KeyringError(f"packet at offset {start} runs past the end of the data")
        result.append(
            Packet(tag=tag, body=data[pos : pos + length], raw=data[start : pos + length])
        )
        pos += length
    return result


def fingerprint(key_body: bytes) -> str:
    """Fingerprint of a public-key or public-subkey packet body (v4, v5 or v6 keys)."""
    if not key_body:
        raise KeyringError("empty key packet")
    version = key_body[0]
    if version == 4:
        digest = hashlib.sha1(b"\x99" + len(key_body).to_bytes(2, "big") + key_body)
    elif version == 5:
        digest = hashlib.sha256(b"\x9a" + len(key_body).to_bytes(4, "big") + key_body)
    elif version == 6:
        digest = hashlib.sha256(b"\x9b" + len(key_body).to_bytes(4, "big") + key_body)
    else:
        raise KeyringError(f"unsupported key packet version {version}")
    return digest.hexdigest().upper()


def transferable_keys(data: bytes) -> list[TransferableKey]:
    """The keys in a binary keyring, each with its trailing packets (what gpg exports)."""
    keys: list[TransferableKey] = []
    current: list[Packet] = []
    leading: list[Packet] = []

    def close() -> None:
        if not current:
            return
        fprs = tuple(
            fingerprint(p.body) for p in current if p.tag in (TAG_PUBLIC_KEY, TAG_PUBLIC_SUBKEY)
        )
        keys.append(TransferableKey(fprs[0], fprs, b"".join(p.raw for p in current)))

    for packet in packets(data):
        if packet.tag == TAG_PUBLIC_KEY:
            close()
            current = [packet]
        elif current:
            current.append(packet)
        else:
            leading.append(packet)  # e.g. a trust packet before the first key
    close()
    if leading and not keys:
        raise KeyringError("no public key packet in the data")
    return keys


def key_fingerprints(data: bytes) -> list[str]:
    """Primary fingerprints of every key in armored or binary ``data``."""
    return [k.fingerprint for k in transferable_keys(as_binary(data))]


@dataclass(frozen=True)
class Pruned:
    """Result of removing keys from one keyring."""

    removed: tuple[str, ...]  # primary fingerprints removed
    kept: tuple[str, ...]  # primary fingerprints kept
    data: bytes  # the keyring without the removed keys (binary)


def prune(data: bytes, unwanted: set[str]) -> Pruned:
    """Remove the keys whose primary fingerprint is in ``unwanted`` (upper-case hex)."""
    keys = transferable_keys(as_binary(data))
    removed = tuple(k.fingerprint for k in keys if k.fingerprint in unwanted)
    kept_keys = [k for k in keys if k.fingerprint not in unwanted]
    return Pruned(
        removed=removed,
        kept=tuple(k.fingerprint for k in kept_keys),
        data=b"".join(k.raw for k in kept_keys),
    )


def _crc24(data: bytes) -> int:
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _bit in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def armor(data: bytes) -> str:
    """ASCII-armor binary public key packets (for rewriting an .asc file)."""
    encoded = base64.b64encode(data).decode("ascii")
    body = "\n".join(encoded[i : i + 64] for i in range(0, len(encoded), 64))
    crc = base64.b64encode(_crc24(data).to_bytes(3, "big")).decode("ascii")
    return f"{ARMOR_BEGIN}\n\n{body}\n={crc}\n{ARMOR_END}\n"
