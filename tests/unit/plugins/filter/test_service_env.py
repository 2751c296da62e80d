"""Filters secret_env and env_file_lines: which entries of a service's environment are secrets,
and how they are written to a systemd EnvironmentFile."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.filter.service_env import env_file_lines, secret_env

ENV = {
    "HF_TOKEN": "hf_abc", "AWS_SECRET_ACCESS_KEY": "s", "db_password": "p", "MY_CREDENTIALS": "c",
    "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "4", "HOME": "/var/lib/vllm",
}


def test_secret_names_and_the_rest() -> None:
    assert set(secret_env(ENV)) == {"HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "db_password",
                                    "MY_CREDENTIALS"}
    assert set(secret_env(ENV, False)) == {"HF_HUB_OFFLINE", "VLLM_CPU_KVCACHE_SPACE", "HOME"}
    assert secret_env(ENV) | secret_env(ENV, False) == ENV


@pytest.mark.parametrize(("value", "line"), [
    ("hf_abc123", "K=hf_abc123"),
    ("", "K="),
    ("a b", 'K="a b"'),
    ('q"uo\\te', 'K="q\\"uo\\\\te"'),
    ("$HOME `id`", 'K="\\$HOME \\`id\\`"'),
    ("it's #1", 'K="it\'s #1"'),
    (8, "K=8"),
])
def test_values_are_quoted_when_needed(value: object, line: str) -> None:
    assert env_file_lines({"K": value}) == line + "\n"


def test_lines_are_sorted_by_name() -> None:
    assert env_file_lines({"B": "2", "A": "1"}) == "A=1\nB=2\n"


@pytest.mark.parametrize(("env", "message"), [
    ({"BAD NAME": "x"}, "'BAD NAME' is not a name"),
    ({"TOKEN": "two\nlines"}, "the value of TOKEN has a control character"),
    (["HF_TOKEN=x"], "expects a dict"),
])
def test_bad_input_is_an_error(env: object, message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        env_file_lines(env)
