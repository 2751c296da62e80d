"""Private package behind module_utils/acceptance.py (the acceptance checks of a node)."""
