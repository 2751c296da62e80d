# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private package behind module_utils/diagnose.py: collectors, redaction, failure classes.

Import through the facade (``plugins/module_utils/diagnose.py``); the layout in here may change.
"""
