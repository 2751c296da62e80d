"""Stand-in for the pip bootstrap script ansible-test downloads from ci-files.testing.ansible.com
(not reachable from our machines). ansible-test runs it inside each fresh sanity venv with pip's
install options and pinned packages (e.g. pip==24.2); the standard library's ensurepip provides a
first pip, which then installs exactly what ansible-test asked for from the package index.
The test runner copies this file to ~/.ansible/test/cache/get_pip_<version>.py.

ensurepip runs in its own process: in-process it sets PIP_CONFIG_FILE=/dev/null in os.environ,
which would hide the machine's pip configuration (CA bundle, mirrors) from the install below."""

import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}

subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args]))
