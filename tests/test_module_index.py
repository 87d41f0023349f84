"""Modules indexed with `ast` and parsed one definition at a time (kllint.analysis.module):
spans are those of the whole file, and nothing but the definitions asked for is parsed."""
from __future__ import annotations

from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from kllint.analysis.definitions import class_method
from kllint.analysis.module import ModuleInfo
from kllint.diagnostics import Span

SOURCE = '''\
"""A module."""
import torch
from torch import nn as tnn

LIMIT, SCALE = 3, 2.0
KL_COEF = 0.1; BETA = {"kl": 0.2}

if True:
    GUARDED = "x"

    def guarded_helper(x):
        return x


def penalty(logp, ref_logp):
    log_ratio = ref_logp - logp  # a comment
    return torch.exp(log_ratio) - log_ratio - 1


class Base(tnn.Module):
    @staticmethod
    def helper(x):
        return x * 2


class Trainer(
    Base,
):
    def __init__(self, ref_model):
        self.ref_model = ref_model
        self.criterion = tnn.KLDivLoss(reduction="batchmean")

    @torch.no_grad()
    def score(self, batch):
        def inner(values):
            return [v + 1 for v in values]

        return inner(batch["ref_logps"])

    def helper(self, x):
        return x
'''


def _module(text: str = SOURCE) -> ModuleInfo:
    return ModuleInfo.build(text, Path("pkg/mod.py"), "pkg/mod.py", "pkg.mod")


def _full_file_spans(text: str) -> dict[tuple[str, str], list[Span]]:
    """(node type, code) -> spans, from libcst's positions over the whole file."""
    wrapper = MetadataWrapper(cst.parse_module(text))
    found: dict[tuple[str, str], list[Span]] = {}
    for node, code_range in wrapper.resolve(PositionProvider).items():
        key = (type(node).__name__, cst.Module([]).code_for_node(node))
        found.setdefault(key, []).append(Span.from_code_range(code_range))
    return found


def _all_nodes(root: cst.CSTNode) -> list[cst.CSTNode]:
    nodes, stack = [], [root]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.children)
    return nodes


def test_outline_comes_from_ast_without_parsing_definitions():
    module = _module()
    assert module.imports == {"torch": "torch", "tnn": "torch.nn"}
    assert set(module.functions) == {"guarded_helper", "penalty"}
    assert set(module.classes) == {"Base", "Trainer"}
    assert module.classes["Trainer"].method_names == ["__init__", "score", "helper"]
    assert module.classes["Trainer"].assigns_attribute("criterion") == ["__init__"]
    assert module._parsed == {}  # nothing parsed with libcst yet


def test_constants_are_parsed_on_demand_one_statement_at_a_time():
    module = _module()
    assert cst.Module([]).code_for_node(module.constants["BETA"]) == '{"kl": 0.2}'
    assert cst.Module([]).code_for_node(module.constants["KL_COEF"]) == "0.1"
    assert cst.Module([]).code_for_node(module.constants["GUARDED"]) == '"x"'
    assert "LIMIT" not in module.constants  # a tuple target is not a named constant
    assert len(module._parsed) == 2


def test_spans_of_every_node_of_parsed_definitions_match_the_whole_file():
    module = _module()
    expected = _full_file_spans(SOURCE)
    roots = [module.functions["penalty"], module.functions["guarded_helper"],
             module.classes["Trainer"].method("score"), module.classes["Trainer"].method("__init__"),
             module.classes["Base"].method("helper")]
    checked = 0
    for root in roots:
        for node in _all_nodes(root):
            key = (type(node).__name__, cst.Module([]).code_for_node(node))
            if key not in expected:
                continue  # layout nodes print differently out of context
            assert module.span(node, root) in expected[key], key
            checked += 1
    assert checked > 100


def test_methods_resolve_through_lazy_classes_and_bases():
    module = _module()
    trainer = module.classes["Trainer"]
    helper = class_method(trainer, "helper")
    assert helper.name == "helper" and not module._parsed  # looked up, not parsed
    assert helper.node.name.value == "helper" and helper.node is trainer.method("helper")
    assert class_method(trainer, "missing") is None
    assert [cst.Module([]).code_for_node(b.value) for b in trainer.bases] == ["(Base)"]


def test_outline_answers_parameters_and_decorators_as_the_parsed_definition_does():
    text = ("import functools, torch\n\n\nclass C(Base):\n"
            "    @staticmethod\n    @functools.cached_property\n    @torch.no_grad()\n"
            "    def f(a, b=1, /, c=2, *args, d, e=3, **kw):\n        pass\n\n"
            "    def __init__(self, config, *, mode='x'):\n        x = 1; super().__init__(config)\n"
            "        self.cfg = self.other = config\n        self.mode = 'fixed'\n\n"
            "    def g(self):\n        if x:\n            super().__init__()\n            self.cfg = self\n")
    from kllint.analysis.definitions import parameter_names
    from kllint.analysis.interpret.attributes import decorator_names
    module = _module(text)
    cls = module.classes["C"]
    lazy = [cls.function(name) for name in ("f", "__init__", "g")]
    answers = [(parameter_names(f), parameter_names(f, keyword_only=False), decorator_names(f)) for f in lazy]
    assert not module._parsed
    assert answers == [(parameter_names(f.node), parameter_names(f.node, keyword_only=False), decorator_names(f.node))
                       for f in lazy]
    assert answers[0][0] == ["a", "b", "c", "d", "e"] and answers[0][2] == ["staticmethod", "functools.cached_property", None]
    init, g = lazy[1], lazy[2]
    assert init.calls_super_init() and init.stores_parameter("cfg") and init.stores_parameter("other")
    assert not init.stores_parameter("mode")  # a constant, not a parameter
    # `super().__init__` is looked for among the top-level statements only, as the parsed check
    # does; a store inside an `if` counts, as `_stored_on_self` reads the stores
    assert not g.calls_super_init()
    from kllint.analysis.interpret.names import _stored_parameter
    assert g.stores_parameter("cfg") and _stored_parameter(g.node, "cfg") == "self"
    assert init.stores_parameter("cfg") and _stored_parameter(init.node, "cfg") == "config"


def test_function_at_finds_nested_definitions():
    module = _module()
    lines = SOURCE.splitlines()
    inner_body = next(i for i, line in enumerate(lines, 1) if "return [v + 1" in line)
    penalty_body = next(i for i, line in enumerate(lines, 1) if "log_ratio = ref_logp" in line)
    assert module.function_at(inner_body).name.value == "inner"
    assert module.function_at(penalty_body).name.value == "penalty"
    assert module.function_at(1) is None


def test_source_of_a_parsed_definition_is_the_file_text():
    module = _module()
    assert module.source(module.functions["penalty"]).startswith("def penalty(logp, ref_logp):\n")
    assert "# a comment" in module.source(module.functions["penalty"])


def test_a_definition_libcst_rejects_is_skipped_not_a_crash(monkeypatch):
    parse = cst.parse_module

    def picky(text: str) -> cst.Module:
        if "def deep" in text:
            raise cst.ParserSyntaxError("unsupported", lines=[text], raw_line=1, raw_column=0)
        return parse(text)

    monkeypatch.setattr(cst, "parse_module", picky)
    module = _module("def deep(kl):\n    return kl\n\n\ndef fine(kl):\n    return kl\n")
    assert "deep" in module.functions and module.functions.get("deep") is None
    assert module.functions.get("fine").name.value == "fine"


def test_lines_follow_python_not_str_splitlines():
    text = "x = 1  # page\x0cbreak\ndef after(kl):\n    return kl\n"
    module = _module(text)
    assert module.span(module.functions["after"].name, module.functions["after"]).line == 2


def test_a_byte_order_mark_does_not_shift_columns():
    module = _module("\ufeffclass A(Base):\n    def f(self, kl):\n        return kl\n")
    assert [cst.Module([]).code_for_node(b.value) for b in module.classes["A"].bases] == ["(Base)"]
    method = module.classes["A"].method("f")
    assert module.span(method.name, method) == Span(2, 9, 2, 10)


def test_findings_do_not_depend_on_which_importer_named_a_module_first(tmp_path, monkeypatch):
    """`scripts/helper.py` is `helper` to the script next to it and `scripts.helper` to a file
    at the root; its relative import resolves only under the second name. Checking the script
    alone or after the other file must give the same findings (and so must -j 1 and -j 2)."""
    from kllint.config import Settings
    from kllint.pipeline.discovery import discover
    from kllint.pipeline.run import run

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "util.py").write_text("def lr(logprob, ref_logprob):\n    return ref_logprob - logprob\n")
    # the k3 estimates are written in the checked files (findings are placed there) from the
    # log-ratio the helper gets through its relative import
    (tmp_path / "scripts" / "helper.py").write_text(
        "from .util import lr\n\n\ndef kl_log_ratio(logprob, ref_logprob):\n"
        "    return lr(logprob, ref_logprob)\n")
    (tmp_path / "scripts" / "train.py").write_text(
        "from helper import kl_log_ratio\n\n\ndef actor_loss(logprob, ref_logprob, advantages, kl_coef=0.001):\n"
        "    pg = -advantages * (logprob - logprob.detach()).exp()\n"
        "    log_r = kl_log_ratio(logprob, ref_logprob)\n"
        "    return pg.mean() + kl_coef * (log_r.exp() - log_r - 1).mean()\n")
    (tmp_path / "a.py").write_text(
        "from scripts.helper import kl_log_ratio\n\n\ndef loss_fn(logprob, ref_logprob):\n"
        "    log_r = kl_log_ratio(logprob, ref_logprob)\n"
        "    return (log_r.exp() - log_r - 1).mean()\n")
    monkeypatch.chdir(tmp_path)
    settings = Settings()

    def found(paths):
        result = run(list(discover(paths, settings)), settings)
        return {(d.path, d.span.line, d.code) for d in result.diagnostics if d.path.startswith("scripts")}

    alone = found(["scripts/train.py"])
    assert alone and found(["a.py", "scripts/train.py"]) == alone


def test_a_file_in_a_namespace_folder_resolves_imports_of_its_package(tmp_path, monkeypatch):
    """`pkg/algos/ppo/trainer.py` lives in a folder without `__init__.py` (PEP 420) inside the
    package `pkg`; `from pkg.algos import estimators` must still reach the helper that builds
    the KL, as must a relative import counted from the real package."""
    from kllint.config import Settings
    from kllint.pipeline.discovery import discover
    from kllint.pipeline.run import run

    (tmp_path / "pkg" / "algos" / "ppo").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "algos" / "__init__.py").write_text("")
    # the helper computes the log-ratio, each trainer writes the k3 estimate of it (findings
    # are placed where the estimate is written): only a reached helper makes it one
    (tmp_path / "pkg" / "algos" / "estimators.py").write_text(
        "def log_ratio(sample_lp, ref_lp):\n    return ref_lp - sample_lp\n")
    for name, line in (("absolute.py", "from pkg.algos import estimators"), ("relative.py", "from .. import estimators")):
        (tmp_path / "pkg" / "algos" / "ppo" / name).write_text(
            f"{line}\n\n\ndef shaped(scores, old_logps, ref_logps):\n"
            "    d = estimators.log_ratio(old_logps, ref_logps)\n"
            "    rewards = scores - 0.1 * (d.exp() - d - 1)\n    return rewards\n")
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    result = run(list(discover(["pkg/algos/ppo"], settings)), settings)
    found = {(Path(d.path).name, d.code) for d in result.diagnostics}
    assert ("absolute.py", "KL302") in found and ("relative.py", "KL302") in found


def test_files_of_one_import_root_share_an_index_and_the_next_root_starts_afresh(tmp_path):
    from kllint.analysis.index import IndexPerRoot

    for package in ("alpha", "beta"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "scripts").mkdir()
    indexes = IndexPerRoot()
    first = indexes.for_file(tmp_path / "alpha" / "losses.py")
    assert indexes.for_file(tmp_path / "beta" / "trainer.py") is first  # both import from tmp_path
    other = indexes.for_file(tmp_path / "scripts" / "train.py")  # its own import root: scripts/
    assert other is not first
    assert indexes.for_file(tmp_path / "scripts" / "eval.py") is other
    assert indexes.for_file(tmp_path / "alpha" / "losses.py") is not first  # only one root is kept
    indexes.drop()
    assert indexes.for_file(tmp_path / "scripts" / "eval.py") is not other


def test_an_entry_read_from_disk_is_the_module_its_importers_load(tmp_path, monkeypatch):
    """A file checked as an entry and imported by another file of the run is parsed once: one
    module for both, whichever comes first; a text that is not the file's (stdin, an editor's
    buffer) or a file shown under another name is always built afresh."""
    from kllint.analysis.index import ProjectIndex, display_path

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    kl, train = tmp_path / "pkg" / "kl.py", tmp_path / "pkg" / "train.py"
    kl.write_text("def penalty(logp, ref_logp):\n    return ref_logp - logp\n")
    train.write_text("from pkg.kl import penalty\n")
    monkeypatch.chdir(tmp_path)
    shown = display_path(kl)

    index = ProjectIndex()
    entry = index.module_for_file(kl.read_text(), kl, shown, from_disk=True)
    index.module_for_file(train.read_text(), train, display_path(train), from_disk=True)
    assert index.load("pkg.kl") is entry  # imported after it was checked
    assert index.module_for_file(kl.read_text(), kl, shown, from_disk=True) is entry  # checked again

    index = ProjectIndex()
    index.module_for_file(train.read_text(), train, display_path(train), from_disk=True)
    helper = index.load("pkg.kl")
    assert index.module_for_file(kl.read_text(), kl, shown, from_disk=True) is helper  # checked after an import

    for text, display, from_disk in ((kl.read_text() + "x = 1\n", shown, False), (kl.read_text(), shown, False),
                                     (kl.read_text(), str(kl), True)):
        assert index.module_for_file(text, kl, display, from_disk=from_disk) is not helper
    assert index.load("pkg.kl") is helper


def test_code_ranges_are_the_position_providers():
    """`code_ranges` (the provider's pass alone) gives every node the range the wrapper gives."""
    from kllint.analysis.module import code_ranges

    source = ("class _:\n    @torch.no_grad()\n    def step(self, batch, *, beta=0.1):\n"
              "        logp, ref = self.policy(batch), batch['ref']  # both\n"
              "        kl = (torch.exp(ref - logp) - (ref - logp) - 1)\n"
              "        if beta:\n            return (kl * beta).mean(dim=-1), [x for x in kl]\n"
              "        return lambda t: t ** 2\n")
    tree = cst.parse_module(source)
    ours = code_ranges(tree)
    theirs = MetadataWrapper(tree, unsafe_skip_copy=True).resolve(PositionProvider)
    assert len(ours) > 50
    assert dict(ours) == dict(theirs)


def test_assigns_attribute_names_each_storing_method_once_in_definition_order():
    text = ("class C:\n"
            "    def reset(self, cfg):\n        if cfg:\n            self.kl = make(cfg)\n        self.kl = cfg\n\n"
            "    def __init__(self, cfg):\n        self.beta = 0.1\n        try:\n            self.kl = cfg.kl\n"
            "        except KeyError:\n            pass\n        self.other = (cfg if cfg else None)\n\n"
            "    def nested(self):\n        def inner(self):\n            self.kl = make(1)\n        return inner\n")
    cls = _module(text).classes["C"]
    assert cls.assigns_attribute("kl") == ["reset", "__init__"]  # nested definitions do not count
    assert cls.assigns_attribute("beta") == []  # a constant is not a call, name or conditional
    assert cls.assigns_attribute("other") == ["__init__"]
    assert cls.assigns_attribute("missing") == []
