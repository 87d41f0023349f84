"""Runs a composite GitHub Action's steps locally, as the runner does, for tests/test_action.py.

Only what kllint's `action.yml` uses: `${{ ... }}` expressions over `inputs.*`,
`steps.<id>.outputs.*` and `github.action_path`, with string literals, `==` / `!=` (strings
compared ignoring case, as GitHub does), `!`, `&&`, `||`, parentheses and the status functions;
`if:` without a status function implies `success()`. `run` steps go to `bash --noprofile --norc
-eo pipefail` (GitHub's `shell: bash`) with `GITHUB_OUTPUT`, `GITHUB_ENV`, `GITHUB_ACTION_PATH`,
`RUNNER_TEMP` and `GITHUB_WORKSPACE`; `uses` steps are recorded, not run. Anything else raises.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

_TOKEN = re.compile(r"\s*(?:(?P<string>'(?:[^']|'')*')|(?P<op>==|!=|&&|\|\||!|\(|\))|(?P<name>[A-Za-z_][\w.-]*))")
_STATUS = {"success", "failure", "always", "cancelled"}
_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}")


class Unsupported(Exception):
    """An expression or a step beyond what this runner implements."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out, at = [], 0
    while at < len(text.rstrip()):
        match = _TOKEN.match(text, at)
        if match is None:
            raise Unsupported(f"cannot read {text[at:]!r}")
        kind = match.lastgroup
        out.append((kind, match.group(kind)))
        at = match.end()
    return out


class _Parser:
    def __init__(self, text: str, context: dict) -> None:
        self.tokens, self.context = _tokens(text), context

    def parse(self):
        value = self._or()
        if self.tokens:
            raise Unsupported(f"unexpected {self.tokens[0][1]!r}")
        return value

    def _take(self, op: str) -> bool:
        if self.tokens and self.tokens[0] == ("op", op):
            self.tokens.pop(0)
            return True
        return False

    def _or(self):
        value = self._and()
        while self._take("||"):
            right = self._and()
            value = value if _truthy(value) else right
        return value

    def _and(self):
        value = self._compare()
        while self._take("&&"):
            right = self._compare()
            value = right if _truthy(value) else value
        return value

    def _compare(self):
        value = self._unary()
        while self.tokens and self.tokens[0] in (("op", "=="), ("op", "!=")):
            op = self.tokens.pop(0)[1]
            same = str(value).lower() == str(self._unary()).lower()
            value = same if op == "==" else not same
        return value

    def _unary(self):
        if self._take("!"):
            return not _truthy(self._unary())
        if self._take("("):
            value = self._or()
            if not self._take(")"):
                raise Unsupported("missing )")
            return value
        if not self.tokens:
            raise Unsupported("expression ends early")
        kind, text = self.tokens.pop(0)
        if kind == "string":
            return text[1:-1].replace("''", "'")
        if kind == "name" and text in _STATUS:
            if not (self._take("(") and self._take(")")):
                raise Unsupported(f"{text} without ()")
            return self.context["status"][text]
        if kind == "name":
            return _lookup(text, self.context)
        raise Unsupported(f"unexpected {text!r}")


def _lookup(name: str, context: dict) -> str:
    parts = name.split(".")
    if parts[0] == "inputs" and len(parts) == 2:
        return context["inputs"][parts[1]]
    if parts[0] == "steps" and len(parts) == 4 and parts[2] == "outputs":
        return context["steps"].get(parts[1], {}).get(parts[3], "")
    if name == "github.action_path":
        return context["action_path"]
    raise Unsupported(f"unknown name {name!r}")


def _truthy(value) -> bool:
    return bool(value)  # as GitHub: any non-empty string is true, also 'false'


def evaluate(expression: str, context: dict):
    """The value of one expression (the text between `${{` and `}}`)."""
    return _Parser(expression, context).parse()


def _text(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def substitute(text: str, context: dict) -> str:
    """`text` with each `${{ expression }}` replaced by its value."""
    return _EXPRESSION.sub(lambda m: _text(evaluate(m.group(1), context)), text)


def _condition(step: dict, context: dict) -> bool:
    condition = str(step.get("if", "success()")).strip()
    inner = condition[3:-2] if condition.startswith("${{") and condition.endswith("}}") else condition
    if not any(re.search(rf"\b{name}\s*\(", inner) for name in _STATUS):
        inner = f"success() && ({inner})"
    return _truthy(evaluate(inner, context))


def _outputs(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if "<<" in line.split("=", 1)[0]:
            raise Unsupported("multi-line outputs")
        name, sep, value = line.partition("=")
        if sep:
            found[name] = value
    return found


@dataclass
class Step:
    name: str
    ran: bool
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    uses: str | None = None
    with_: dict = field(default_factory=dict)


@dataclass
class Run:
    steps: list[Step]
    failed: bool
    outputs: dict[str, dict[str, str]]

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)


def inputs_of(action: dict, given: dict[str, str]) -> dict[str, str]:
    """The inputs as the runner sees them: each declared one, given or its default."""
    unknown = set(given) - set(action["inputs"])
    if unknown:
        raise Unsupported(f"inputs the action does not declare: {sorted(unknown)}")
    return {name: given.get(name, str(spec.get("default", ""))) for name, spec in action["inputs"].items()}


def run_action(action_path: Path, workspace: Path, given: dict[str, str], temp: Path,
               replaced: dict[str, dict[str, str]] | None = None, env: dict[str, str] | None = None) -> Run:
    """Run the composite action in `action_path/action.yml` on `workspace` with the inputs
    `given`; steps whose id is in `replaced` are not run and get those outputs instead."""
    action = yaml.safe_load((action_path / "action.yml").read_text(encoding="utf-8"))
    if action["runs"]["using"] != "composite":
        raise Unsupported("not a composite action")
    replaced = replaced or {}
    context = {"inputs": inputs_of(action, given), "steps": {}, "action_path": str(action_path),
               "status": {"success": True, "failure": False, "always": True, "cancelled": False}}
    steps = []
    for index, step in enumerate(action["runs"]["steps"]):
        name = step.get("name", step.get("id", str(index)))
        if not _condition(step, context):
            steps.append(Step(name, False))
            continue
        if step.get("id") in replaced:
            context["steps"][step["id"]] = dict(replaced[step["id"]])
            steps.append(Step(name, False))
            continue
        if "uses" in step:
            with_ = {k: substitute(str(v), context) for k, v in step.get("with", {}).items()}
            steps.append(Step(name, True, uses=step["uses"], with_=with_))
            continue
        if step.get("shell") != "bash":
            raise Unsupported(f"step {name!r}: shell {step.get('shell')!r}")
        script, output = temp / f"step{index}.sh", temp / f"output{index}"
        script.write_text(substitute(step["run"], context), encoding="utf-8")
        output.write_text("", encoding="utf-8")
        step_env = {**os.environ, **(env or {}), "GITHUB_OUTPUT": str(output), "GITHUB_ENV": str(temp / "env"),
                    "GITHUB_ACTION_PATH": str(action_path), "RUNNER_TEMP": str(temp),
                    "GITHUB_WORKSPACE": str(workspace)}
        step_env.update({k: substitute(str(v), context) for k, v in step.get("env", {}).items()})
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workspace,
                              env=step_env, capture_output=True, text=True, timeout=600)
        steps.append(Step(name, True, done.returncode, done.stdout, done.stderr))
        if "id" in step:
            context["steps"][step["id"]] = _outputs(output)
        if done.returncode != 0:
            context["status"].update(success=False, failure=True)
    return Run(steps, context["status"]["failure"], context["steps"])
