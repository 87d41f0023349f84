"""The two choices of `kllint.analysis.interpret.entry.EntryPoints` made from a module's `ast`
outline: the functions handed to `jax.grad`-like transforms (`_find_grad_targets`) and the
definitions run as entry points (`kllint.analysis.relevance.entry_units`: those that name a KL or the reference and,
to a fixpoint, those that call one of them). Code counts, prose (strings, comments, docstrings)
does not."""
from __future__ import annotations

import ast
from pathlib import Path
from textwrap import dedent

import pytest

from kllint.analysis.outline import called_names, dotted
from kllint.analysis.index import ProjectIndex
from kllint.analysis.interpreter import Interpreter
from kllint.analysis.relevance import entry_units


def _interpreter(tmp_path: Path, text: str) -> Interpreter:
    text = dedent(text)
    path = tmp_path / "module.py"
    path.write_text(text)
    index = ProjectIndex()
    return Interpreter(index.module_for_file(text, path, "module.py"), index)


def grad_targets(tmp_path: Path, text: str) -> set[str]:
    return _interpreter(tmp_path, text)._find_grad_targets()


def entry_points(tmp_path: Path, text: str) -> list[tuple[str, str]]:
    interpreter = _interpreter(tmp_path, text)
    return list(entry_units(interpreter.entry, interpreter.index, interpreter.vocab))


# ---------------------------------------------------------------------------- grad targets
GRAD_FORMS = {
    "positional": ("import jax\n", "jax.grad(target)"),
    "value_and_grad with has_aux": ("import jax\n", "jax.value_and_grad(target, has_aux=True)"),
    "split with a comment after the parenthesis": (
        "import jax\n", "jax.value_and_grad(  # w.r.t. params\n    target,\n    has_aux=True,\n)"),
    "jax keyword fun": ("import jax\n", "jax.value_and_grad(fun=target, has_aux=True)"),
    "flax.nnx keyword f": ("from flax import nnx\n", "nnx.grad(f=target)"),
    "equinox keyword fun": ("import equinox as eqx\n", "eqx.filter_value_and_grad(fun=target)"),
    "mlx.core": ("import mlx.core as mx\n", "mx.value_and_grad(target)"),
    "mlx.nn: the second argument": ("import mlx.nn as nn\n", "nn.value_and_grad(self.model, target)"),
    "mlx.nn keyword fn": ("import mlx.nn as nn\n", "nn.value_and_grad(model, fn=target)"),
    "an imported alias": ("from jax import value_and_grad as vg\n", "vg(target)"),
    "jax without its import": ("", "jax.grad(target)"),
    "a jax transform the table does not list": ("import jax\n", "jax.experimental.value_and_grad(target)"),
    "a transform called without its function": (
        "import equinox as eqx\n", "eqx.filter_value_and_grad(has_aux=True)(target)"),
    "functools.partial of a transform": (
        "import functools\nimport jax\n", "functools.partial(jax.value_and_grad, has_aux=True)(target)"),
    "the transformed function applied at once": ("import jax\n", "jax.grad(target)(params)"),
}


@pytest.mark.parametrize("imports, expression", GRAD_FORMS.values(), ids=list(GRAD_FORMS))
def test_the_function_given_to_a_grad_transform_is_a_grad_target(tmp_path, imports, expression):
    text = f"{imports}\n\ndef target(params):\n    return params\n\n\ndef step(params, model, self):\n"
    text += "    fn = " + expression.replace("\n", "\n    ") + "\n    return fn\n"
    assert grad_targets(tmp_path, text) == {"target"}


DECORATORS = {
    "the transform": ("import jax\n", "@jax.grad"),
    "partial of the transform": ("from functools import partial\nimport jax\n",
                                 "@partial(jax.value_and_grad, has_aux=True)"),
    "the transform called without its function": ("import equinox as eqx\n",
                                                  "@eqx.filter_value_and_grad(has_aux=True)"),
    "flax.nnx, among other decorators": ("import jax\nfrom flax import nnx\n", "@jax.jit\n@nnx.value_and_grad"),
}


@pytest.mark.parametrize("imports, decorator", DECORATORS.values(), ids=list(DECORATORS))
def test_a_definition_decorated_by_a_grad_transform_is_a_grad_target(tmp_path, imports, decorator):
    text = f"{imports}\n\n{decorator}\ndef target(params):\n    return params\n"
    assert grad_targets(tmp_path, text) == {"target"}


def test_prose_that_writes_a_grad_call_is_no_grad_target(tmp_path):
    text = '''\
        """The trainer once used jax.grad(in_docstring) here."""
        import jax

        NOTE = "call jax.value_and_grad(in_string, has_aux=True)"


        def in_docstring(params):
            """Never wrapped: jax.grad(in_function_docstring)."""
            # jax.grad(in_comment) is gone
            return params
        '''
    assert grad_targets(tmp_path, text) == set()


NOT_TARGETS = {
    "another jax transform": "import jax\n\nf = jax.jit(target)\n",
    "a method called grad": "import jax\n\nf = self.grad(target)\n",
    "an unimported bare grad": "f = grad(target)\n",
    "torch.autograd.grad": "import torch\n\ng = torch.autograd.grad(target, params)\n",
    "an attribute, not a plain name": "import jax\n\nf = jax.grad(self.target)\n",
    "a call, not a plain name": "import jax\n\nf = jax.grad(make_target(config))\n",
    "the keyword of another API": "import jax\n\nf = jax.grad(f=target)\n",
    "mlx.nn's first argument is the model": "import mlx.nn as nn\n\nf = nn.value_and_grad(target)\n",
    "partial binding its function (not followed)": "import functools\nimport jax\n\nf = functools.partial(jax.grad, other)(target)\n",
    "a decorator that is no transform": "import jax\n\n@jax.jit\ndef target(params):\n    return params\n",
}


@pytest.mark.parametrize("text", NOT_TARGETS.values(), ids=list(NOT_TARGETS))
def test_calls_that_differentiate_no_named_function_give_no_grad_target(tmp_path, text):
    assert grad_targets(tmp_path, text) == set()


def test_only_the_differentiated_function_of_a_chain_is_a_target(tmp_path):
    text = "import jax\n\nvalue = jax.value_and_grad(first)(params)\ngrads = jax.grad(second, has_aux=True)(params, batch)\n"
    assert grad_targets(tmp_path, text) == {"first", "second"}


# ---------------------------------------------------------------------------- entry points
KL_HELPER = '''\
    import torch


    def penalty(logp, batch):
        gap = batch["ref_logps"] - logp
        return torch.exp(gap) - gap - 1
    '''


def test_a_caller_through_self_split_over_lines_is_an_entry_point(tmp_path):
    text = KL_HELPER + '''

    class Learner:
        def token_penalty(self, logp, batch):
            return penalty(logp, batch)

        def update(self, logp, batch):
            penalty = self.token_penalty(
                logp,
                batch,
            )
            penalty.mean().backward()

        def unrelated(self, logp):
            return logp.mean()
    '''
    assert entry_points(tmp_path, text) == [("", "penalty"), ("Learner", "token_penalty"), ("Learner", "update")]


def test_a_helper_named_only_in_prose_makes_no_entry_point(tmp_path):
    text = KL_HELPER + '''

    def in_docstring(logp):
        """Used to return penalty(logp, batch)."""
        return logp.mean()


    def in_comment(logp):
        # penalty(logp, batch) was dropped
        return logp.mean()


    def in_string(logp):
        print("penalty(logp, batch) skipped")
        return logp.mean()


    def by_reference(logp):
        chosen = penalty
        return logp.mean()
    '''
    assert entry_points(tmp_path, text) == [("", "penalty")]


def test_callers_are_added_to_a_fixpoint_in_source_order(tmp_path):
    text = KL_HELPER + '''

    def outer(logp, batch):
        return middle(logp, batch).mean()


    def middle(logp, batch):
        return (penalty)(logp, batch)


    def shadowing(logp):
        def penalty(x):
            return x
        return logp
    '''
    # a nested definition of the same name is no call of it; a parenthesised callee is
    assert entry_points(tmp_path, text) == [("", "penalty"), ("", "outer"), ("", "middle")]


def test_called_names_are_the_callees_of_code_only():
    tree = ast.parse(dedent('''\
        @decorate(option)
        def step(self, batch):
            """helper_in_docstring(batch)"""
            # helper_in_comment(batch)
            first(batch)
            self.second(
                batch)
            batch.third().fourth
            label = "helper_in_string(batch)"
            table[key](batch)
            return (fifth)(batch)
        '''))
    assert called_names(tree) == {"decorate", "first", "second", "third", "fifth"}


def test_dotted_names_an_attribute_chain_only():
    assert dotted(ast.parse("jax.numpy.exp", mode="eval").body) == "jax.numpy.exp"
    assert dotted(ast.parse("grad", mode="eval").body) == "grad"
    assert dotted(ast.parse("make().grad", mode="eval").body) is None
