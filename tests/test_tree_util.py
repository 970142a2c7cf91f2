"""tg.tree_util (tapegrad._pytree) against jax.tree_util: for generated trees of every node kind
(tuples, lists, dicts, namedtuples, OrderedDict, defaultdict, None, registered classes and
dataclasses) and leaf-like look-alikes (subclasses of list and dict), the leaves, their order,
structure equality, round trips and tree_map equal JAX's; and the errors."""
import collections
import dataclasses
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import tree_util

jax = pytest.importorskip("jax")
jtu = jax.tree_util

P = collections.namedtuple("P", "a b")
Q = collections.namedtuple("Q", "x")


class Box:
    """A class registered with register_pytree_node: children (v, w), aux data ``tag``."""

    def __init__(self, v, w, tag):
        self.v, self.w, self.tag = v, w, tag

    def __eq__(self, other):
        return type(other) is Box and (self.v, self.w, self.tag) == (other.v, other.w, other.tag)

    def __repr__(self):
        return f"Box({self.v!r}, {self.w!r}, {self.tag!r})"


tree_util.register_pytree_node(Box, lambda b: ((b.v, b.w), b.tag),
                               lambda tag, children: Box(*children, tag))


@tree_util.register_dataclass
@dataclasses.dataclass
class DC:
    """A dataclass registered without fields: ``y``, ``x`` data (in field order), ``name`` meta."""
    y: object
    x: object
    name: str = dataclasses.field(default="dc", metadata={"static": True})


@dataclasses.dataclass
class Pair:
    """A dataclass registered with explicit fields (``first`` data, ``label`` meta)."""
    first: object
    label: str


tree_util.register_dataclass(Pair, data_fields=["first"], meta_fields=["label"])


class MyList(list):
    """Not registered: a leaf, as in JAX."""


class MyDict(dict):
    """Not registered: a leaf, as in JAX."""


_KEYS = st.sampled_from(["a", "b", "c", "zz", "B"])


def _nodes(children):
    return st.one_of(
        st.tuples(children, children), st.tuples(children), st.just(()),
        st.lists(children, max_size=3),
        st.dictionaries(_KEYS, children, max_size=3),
        st.builds(P, children, children), st.builds(Q, children),
        st.dictionaries(_KEYS, children, max_size=3).map(
            lambda d: collections.OrderedDict(reversed(list(d.items())))),
        st.dictionaries(_KEYS, children, max_size=3).map(
            lambda d: collections.defaultdict(list, d)),
        st.builds(Box, children, children, st.sampled_from(["t1", "t2"])),
        st.builds(DC, children, children, st.sampled_from(["m", "n"])),
        st.builds(Pair, children, st.just("p")),
    )


_LEAVES = st.one_of(st.integers(-1000, 1000), st.none(), st.just(MyList([1, 2])),
                    st.just(MyDict(k=3)), st.just("s"))
TREES = st.recursive(_LEAVES, _nodes, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(TREES)
def test_leaves_structure_and_round_trip_equal_jax(tree):
    leaves, structure = tree_util.tree_flatten(tree)
    assert leaves == jtu.tree_leaves(tree)
    assert tree_util.tree_leaves(tree) == leaves
    assert structure.num_leaves == jtu.tree_structure(tree).num_leaves == len(leaves)
    assert tree_util.tree_unflatten(structure, leaves) == jtu.tree_unflatten(
        jtu.tree_structure(tree), leaves) == tree
    assert tree_util.tree_structure(tree) == structure
    assert hash(tree_util.tree_structure(tree)) == hash(structure)
    # None a leaf (TensorFlow's nest, used by GradientTape) is JAX's is_leaf for None
    assert tree_util.tree_flatten(tree, none_is_leaf=True)[0] == jtu.tree_leaves(
        tree, is_leaf=lambda x: x is None)


@settings(max_examples=200, deadline=None)
@given(TREES, TREES)
def test_structures_are_equal_exactly_when_jax_says_so(a, b):
    same = tree_util.tree_structure(a) == tree_util.tree_structure(b)
    assert same == (jtu.tree_structure(a) == jtu.tree_structure(b))


def _is_builtin_only(tree):
    if type(tree) in (tuple, list):
        return all(map(_is_builtin_only, tree))
    if type(tree) is dict:
        return all(map(_is_builtin_only, tree.values()))
    return not isinstance(tree, (tuple, list, dict, Box, DC, Pair))


@settings(max_examples=200, deadline=None)
@given(TREES)
def test_tree_map_equals_jax_also_with_rest_trees_and_is_leaf(tree):
    def f(*xs):
        return ("f", *xs)

    assert tree_util.tree_map(f, tree) == jtu.tree_map(f, tree)
    other = tree_util.tree_map(lambda x: [x, x], tree)  # deeper at the leaves: a prefix match
    assert tree_util.tree_map(f, tree, tree, other) == jtu.tree_map(f, tree, tree, other)

    def is_leaf(x):
        return type(x) is tuple and len(x) == 1

    assert tree_util.tree_leaves(tree, is_leaf=is_leaf) == jtu.tree_leaves(tree, is_leaf=is_leaf)
    assert tree_util.tree_map(f, tree, is_leaf=is_leaf) == jtu.tree_map(f, tree, is_leaf=is_leaf)
    if _is_builtin_only(tree):  # printed as JAX prints it
        assert repr(tree_util.tree_structure(tree)) == repr(jtu.tree_structure(tree))


def test_hand_picked_kinds_and_their_order():
    tree = {"b": P(1, [2, None]), "a": (Box(3, Q(4), "t"), DC(y=5, x=6, name="m")),
            "c": collections.OrderedDict([("z", 7), ("y", 8)]), "d": Pair(9, "p")}
    leaves, structure = tree_util.tree_flatten(tree)
    assert leaves == [3, 4, 5, 6, 1, 2, 7, 8, 9] == jtu.tree_leaves(tree)
    rebuilt = tree_util.tree_unflatten(structure, [10 * x for x in leaves])
    assert rebuilt["b"] == P(10, [20, None]) and type(rebuilt["b"]) is P
    assert rebuilt["a"][1] == DC(y=50, x=60, name="m")
    assert list(rebuilt["c"].items()) == [("z", 70), ("y", 80)]
    assert repr(structure) == ("PyTreeDef({'a': (Box['t'](*, Q(x=*)), DC[('m',)](*, *)), "
                               "'b': P(a=*, b=[*, None]), 'c': OrderedDict[('z', 'y')](*, *), "
                               "'d': Pair[('p',)](*)})")
    assert tree_util.tree_structure(Box(1, 2, "t")) != tree_util.tree_structure(Box(1, 2, "u"))
    assert tree_util.tree_structure(P(1, 2)) != tree_util.tree_structure((1, 2))
    assert tree_util.tree_leaves([np.ones(2), MyList([1])])[1] == MyList([1])  # a leaf


def test_tg_tree_util_is_public():
    import tapegrad.tree_util as public

    assert tg.tree_util is public and "tree_util" in tg.__all__
    for name in ["tree_flatten", "tree_unflatten", "tree_map", "tree_leaves", "tree_structure",
                 "register_pytree_node", "register_dataclass", "PyTreeDef"]:
        assert getattr(tg.tree_util, name).__doc__, name


# --- errors -----------------------------------------------------------------------------------
def test_unflatten_with_the_wrong_number_of_leaves_says_how_many():
    structure = tree_util.tree_structure((1, {"a": 2, "b": [3]}))
    with pytest.raises(ValueError, match=r"the structure \(\*, \{'a': \*, 'b': \[\*\]\}\) has 3 "
                                         r"leaves, but 2 were given; give one leaf per `\*`"):
        tree_util.tree_unflatten(structure, [1, 2])
    with pytest.raises(ValueError, match="has 3 leaves, but 4 were given"):
        tree_util.tree_unflatten(structure, [1, 2, 3, 4])
    with pytest.raises(ValueError, match="has 3 leaves, but fewer were given"):
        tree_util.tree_unflatten(structure, iter([1, 2]))


def test_tree_map_names_where_a_tree_differs():
    with pytest.raises(ValueError, match=r"tree_map: tree 2 of `rest` does not have the first "
                                         r"tree's structure at \['b'\]: expected \[\*, \*\], "
                                         r"got \[\*\]"):
        tree_util.tree_map(lambda *x: x, {"a": 1, "b": [2, 3]}, {"a": 1, "b": [2, 3]},
                           {"a": 1, "b": [2]})
    with pytest.raises(ValueError, match=r"at the root: expected P\(a=\*, b=\*\), got \(\*, \*\)"):
        tree_util.tree_map(lambda *x: x, P(1, 2), (1, 2))


def test_unsortable_dict_keys_and_registering_twice_raise_clearly():
    with pytest.raises(TypeError, match=r"tree_flatten: the dict keys \[1, 'a'\] cannot be "
                                        "sorted.*use keys of one type"):
        tree_util.tree_flatten({1: 2, "a": 3})
    with pytest.raises(ValueError, match="Box is already a pytree node type; register each "
                                         "class once"):
        tree_util.register_pytree_node(Box, lambda b: ((), None), lambda a, c: Box(0, 0, ""))
    with pytest.raises(ValueError, match="tuple is already a pytree node type"):
        tree_util.register_pytree_node(tuple, lambda b: ((), None), lambda a, c: ())
    with pytest.raises(TypeError, match="give both data_fields and meta_fields, or neither"):
        tree_util.register_dataclass(Box, data_fields=["v"])
    with pytest.raises(TypeError, match="is not a dataclass; give its data_fields and "
                                        "meta_fields"):
        tree_util.register_dataclass(MyList)
    with pytest.raises(ValueError, match=r"\['v'\] are both data and meta fields"):
        tree_util.register_dataclass(MyDict, data_fields=["v"], meta_fields=["v"])


# --- registered classes reach JAX -------------------------------------------------------------
def test_a_class_registered_before_jax_is_loaded_is_registered_with_jax_when_tapegrad_loads_it():
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import tapegrad as tg

        class Box:
            def __init__(self, v, w):
                self.v, self.w = v, w

        tg.tree_util.register_pytree_node(Box, lambda b: ((b.v, b.w), None),
                                          lambda _, c: Box(*c))
        assert "jax" not in sys.modules  # importing tapegrad does not load JAX

        @tg.function(jit_compile=True)  # the first call loads JAX, the argument crosses jax.jit
        def f(b):
            return Box(b.v * 2.0, b.w + b.v)

        out = f(Box(tg.constant([1.0, 2.0]), tg.constant(3.0)))
        import jax
        print(len(jax.tree_util.tree_leaves(Box(1, 2))), out.v.numpy().tolist(),
              out.w.numpy().tolist())
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[-2] == "2 [2.0, 4.0] [4.0, 5.0]"


def test_a_class_registered_after_jax_is_imported_is_known_to_jax_at_once():
    assert jtu.tree_leaves(Box(1, (2, 3), "t")) == [1, 2, 3]
    assert jtu.tree_leaves(DC(y=1, x=2)) == [1, 2]
    with jax.enable_x64(True):
        out = jax.jit(lambda b: Box(b.v * 2, b.w, b.tag))(Box(np.ones(2), np.zeros(1), "t"))
    assert out.tag == "t" and out.v.tolist() == [2.0, 2.0]
