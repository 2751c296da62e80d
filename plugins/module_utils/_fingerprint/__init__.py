"""Private package behind module_utils/fingerprint.py (the accuracy fingerprint of an endpoint)."""
