# Copyright: (c) 2026, instinct.vllm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters over the stack matrix (files/stacks.yml); the logic is in plugin_utils/stack_matrix.

The documentation of each filter is the YAML file of its name beside this one (stack.yml,
stack_names.yml, ...): Ansible reads one documentation per filter name. Usage::

    instinct_vllm_stack | default(none) | instinct.vllm.stack(extra)  (role stack does this)
    extra | instinct.vllm.stack_matrix   (role stack does this too: every known stack)
    'GptOssForCausalLM' | instinct.vllm.stacks_serving(instinct_vllm_stacks_extra | default({}))
    ansible_facts.distribution | instinct.vllm.stacks_for_os(version, flavour, extra)
    ansible_facts.kernel | instinct.vllm.kernel_flavour(distribution, version)
    stack_dict | instinct.vllm.stack_os_check(distribution, version, kernel)
    '6.8.0-41' | instinct.vllm.kernel_newer_pattern   (role rocm's APT pin)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.instinct.vllm.plugins.plugin_utils import stack_matrix as sm


def _wrap(func: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except sm.StackError as exc:
            raise AnsibleFilterError(str(exc)) from exc

    run.__name__ = func.__name__
    run.__doc__ = func.__doc__
    return run


def stack(name: Any = None, extra: Any = None) -> dict[str, Any]:
    """The validated stack ``name`` (``instinct_vllm_stack``) with its ``name`` added.

    ``name`` None (``instinct_vllm_stack`` not set) is the matrix default (files/stacks.yml
    ``default``).
    """
    return sm.get_stack(name, extra or None)


def stack_matrix(extra: Any = None) -> dict[str, Any]:
    """Every known stack by name: files/stacks.yml with ``extra`` merged over it, unvalidated."""
    return sm.all_stacks(extra or None)[0]


def stack_names(extra: Any = None) -> list[str]:
    """Sorted names of every known stack (the input is the extra stacks dict)."""
    return sm.stack_names(extra or None)


def stacks_serving(architecture: str, extra: Any = None) -> list[str]:
    """Names of the stacks whose model_architectures include ``architecture``."""
    return sm.stacks_serving(str(architecture), extra or None)


def stacks_for_os(
    distribution: str, version: Any, flavour: Any = None, extra: Any = None
) -> list[str]:
    """Names of the stacks supporting this OS release (and kernel flavour, if given)."""
    return sm.stacks_for_os(str(distribution), str(version), flavour or None, extra or None)


def stack_os_check(
    stack_: Any, distribution: str, version: Any, kernel_release: str
) -> dict[str, Any]:
    """Check OS release and running kernel against a stack: ``{ok, flavour, series, msg}``."""
    if not isinstance(stack_, dict):
        raise sm.StackError(
            "stack_os_check: the input must be a stack (the output of instinct.vllm.stack)"
        )
    return sm.check_os(
        stack_, str(distribution), str(version), str(kernel_release), sm.ga_kernels()
    )


def kernel_flavour(kernel_release: str, distribution: str, version: Any) -> str:
    """``ga``, ``hwe`` or ``unknown`` for a running kernel on this OS release."""
    return sm.kernel_flavour(str(kernel_release), str(distribution), str(version), sm.ga_kernels())


def kernel_newer_pattern(abi: Any) -> str:
    """APT pin regular expression: kernel package versions of every release newer than ``abi``."""
    return sm.newer_kernel_pattern(abi)


class FilterModule:
    """instinct.vllm stack matrix filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "stack": _wrap(stack),
            "stack_matrix": _wrap(stack_matrix),
            "stack_names": _wrap(stack_names),
            "stacks_serving": _wrap(stacks_serving),
            "stacks_for_os": _wrap(stacks_for_os),
            "kernel_flavour": _wrap(kernel_flavour),
            "stack_os_check": _wrap(stack_os_check),
            "kernel_newer_pattern": _wrap(kernel_newer_pattern),
        }
