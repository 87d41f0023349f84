"""Registries filled by decorators (kllint.analysis.registries): the keys each spelling of a
registering decorator stores a definition under."""
import ast
import textwrap

from kllint.analysis.registries import registrations


def _registrations(source: str) -> dict:
    return registrations(ast.parse(textwrap.dedent(source)))


def test_factory_with_literal_name_argument():
    found = _registrations('''
        LOSSES = {}
        def register(name):
            def wrap(fn):
                LOSSES[name] = fn
                return fn
            return wrap
        @register("k3")
        def k3(a, b): ...
        @register(name="k1")
        def k1(a, b): ...
    ''')
    assert found == {"LOSSES": (("k3", "k3"), ("k1", "k1"))}


def test_loop_over_settings_attribute_and_second_registry_ignored():
    found = _registrations('''
        FNS: dict = {}
        SETTINGS: dict = {}
        def register(settings):
            def wrap(fn):
                for key in settings.names:
                    FNS[key] = fn
                    SETTINGS[key] = settings
                return fn
            return wrap
        @register(Settings(names=["kl", "k1"], flag=True))
        def estimate(a, b): ...
    ''')
    assert found == {"FNS": (("kl", "estimate"), ("k1", "estimate"))}


def test_star_names_plain_decorator_and_unreadable_key():
    found = _registrations('''
        REG = dict()
        def many(*names):
            def wrap(fn):
                for n in names:
                    REG[n] = fn
                return fn
            return wrap
        def plain(fn):
            REG[fn.__name__] = fn
            return fn
        @many("a", "b")
        def first(): ...
        @plain
        def second(): ...
        @many(*DYNAMIC)
        def third(): ...
    ''')
    assert found == {"REG": (("a", "first"), ("b", "first"), ("second", "second"), ("third", "third"))}


def test_no_registry_without_module_level_dict():
    assert _registrations('''
        def register(name):
            local = {}
            def wrap(fn):
                local[name] = fn
                return fn
            return wrap
        @register("x")
        def f(): ...
    ''') == {}
