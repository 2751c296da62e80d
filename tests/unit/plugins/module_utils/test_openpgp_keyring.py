"""Tests for module_utils/openpgp_keyring (legacy apt-key clean-up of the rocm role)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.instinct.vllm.plugins.module_utils import openpgp_keyring as kr

KEYS = Path(__file__).resolve().parents[2] / "fixtures" / "openpgp"
VENDOR = "FFA78303CE1B6E097D7938DDCC167BEAC152E6D7"  # gpg --with-colons --list-keys
OTHER = "F51C04A3BD15222EA13226680D254BCB3BAD3355"


def test_fingerprints_match_gpg_for_armored_and_binary() -> None:
    assert kr.key_fingerprints((KEYS / "vendor.asc").read_bytes()) == [VENDOR]
    assert kr.key_fingerprints((KEYS / "vendor.gpg").read_bytes()) == [VENDOR]
    assert kr.key_fingerprints((KEYS / "other.gpg").read_bytes()) == [OTHER]


def test_apt_key_keyring_with_trust_packets() -> None:
    data = (KEYS / "apt-key-trusted.gpg").read_bytes()
    assert kr.key_fingerprints(data) == [OTHER, VENDOR]
    assert 12 in {p.tag for p in kr.packets(data)}  # gpg trust packets are carried along


def test_prune_removes_only_the_vendor_key() -> None:
    data = (KEYS / "apt-key-trusted.gpg").read_bytes()
    result = kr.prune(data, {VENDOR})
    assert result.removed == (VENDOR,)
    assert result.kept == (OTHER,)
    assert kr.key_fingerprints(result.data) == [OTHER]
    assert result.data == data[: len(result.data)]  # the other key's packets, byte for byte


def test_prune_without_match_keeps_everything() -> None:
    data = (KEYS / "other.gpg").read_bytes()
    result = kr.prune(data, {VENDOR})
    assert result.removed == ()
    assert result.data == data


def test_dearmor_and_armor_round_trip() -> None:
    binary = (KEYS / "vendor.gpg").read_bytes()
    assert kr.dearmor((KEYS / "vendor.asc").read_text()) == binary
    assert kr.armor(binary) == (KEYS / "vendor.asc").read_text()  # gpg's own CRC24 and wrapping


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not a key at all", "not an OpenPGP packet"),
        (b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!!\n", "without"),
        (
            b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n@@@@\n-----END PGP PUBLIC KEY BLOCK-----\n",
            "base64",
        ),
        (bytes([0x99, 0x01, 0x0D, 0x04]), "runs past the end"),
    ],
)
def test_bad_input_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(kr.KeyringError, match=message):
        kr.key_fingerprints(data)


def test_keybox_file_is_not_mistaken_for_a_keyring() -> None:
    # gpg's keybox format (pubring.kbx) starts with a blob header, not a packet.
    keybox = b"\x00\x00\x00\x20\x01\x02\x00\x00KBXf" + b"\x00" * 20
    with pytest.raises(kr.KeyringError):
        kr.key_fingerprints(keybox)
