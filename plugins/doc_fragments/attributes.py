# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The attributes every module of the collection documents; each module says its support."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: >-
      Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description: >-
      Returns details on what has changed (or possibly needs changing in C(check_mode)), when in
      diff mode.
"""
