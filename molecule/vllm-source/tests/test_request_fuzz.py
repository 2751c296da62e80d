"""vllm-source: the request fuzz (molecule/shared/request_fuzz.py) against our vLLM 0.6.6.post1
CPU build, directly and through the gateway on the serving host; then the engine must be the one
that started."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))

import fuzz_suite

JOURNAL_UNITS = ["vllm.service", "haproxy.service"]

NODE = fuzz_suite.Node(
    base_url="http://127.0.0.1:18300",
    key="vllm-source-scenario-key-4d7e91a2c6",
    model="gptoss-legacy-demo",
    max_num_seqs=256,
)
TARGETS = [
    fuzz_suite.Target("direct", NODE.base_url, NODE.key),
    fuzz_suite.Target("gateway", "https://127.0.0.1:18343", "vllm-source-client-key-2b97e4c05a18"),
]

test_request_gets_an_answer, test_engine_survived_every_request = fuzz_suite.tests(
    "vllm-source", NODE, TARGETS
)
