"""Test stub of ROCm's amdsmi Python package (instinct.vllm tests/aptrepo, package amd-smi-lib):
the same public names as the real package for what it implements; values replay recordings of
8 x MI300X hosts (see amdsmi_interface)."""

from .amdsmi_exception import (  # noqa: F401
    AmdSmiException,
    AmdSmiLibraryException,
    AmdSmiParameterException,
    AmdSmiRetCode,
    StubNotRecorded,
)
from .amdsmi_interface import *  # noqa: F403

__version__ = "24.6.3+instinct.stub"
