"""tg.Module (tf.Module) and tg.name_scope: collection order, paths, trainability, names."""
import numpy as np
import pytest

import tapegrad as tg


class Dense(tg.Module):
    def __init__(self, n_in, n_out, name=None):
        super().__init__(name=name)
        with self.name_scope:
            self.w = tg.Variable(np.ones((n_in, n_out)), name="kernel")
            self.b = tg.Variable(np.zeros(n_out), name="bias")

    def __call__(self, x):
        return x @ self.w + self.b


class MLP(tg.Module):
    def __init__(self):
        super().__init__()
        self.layers = [Dense(3, 4, name="dense_1"), Dense(4, 2, name="dense_2")]
        self.extra = {"scale": tg.Variable(2.0, name="scale", trainable=False)}
        self.alias = self.layers[0]  # the same module twice: collected once

    @tg.Module.with_name_scope
    def make(self):
        return tg.Variable(0.0, name="made")


def test_variables_are_collected_in_sorted_attribute_order_with_paths():
    m = MLP()
    names = [v.name for v in m.variables]
    # TensorFlow's order: the module's own leaves (extra's scale), then the submodules in
    # sorted attribute order: alias (dense_1: b, w), layers (dense_1 seen, then dense_2)
    assert names == ["scale", "dense_1/bias", "dense_1/kernel", "dense_2/bias", "dense_2/kernel"]
    assert [v.name for v in m.trainable_variables] == ["dense_1/bias", "dense_1/kernel",
                                                       "dense_2/bias", "dense_2/kernel"]
    assert [v.name for v in m.non_trainable_variables] == ["scale"]
    assert [s.name for s in m.submodules] == ["dense_1", "dense_2"]
    assert [p for p, _ in m.named_variables()] == [
        "extra/scale", "alias/b", "alias/w", "layers/1/b", "layers/1/w"]
    assert [p for p, _ in m.named_variables(trainable_only=True)][-1] == "layers/1/w"
    paths = [p for p, _ in m._flatten(predicate=lambda v: isinstance(v, tg.Variable),
                                      with_path=True)]
    assert ("layers", 0, "w") in paths  # with paths, every path (TensorFlow's _flatten)
    assert m._flatten(recursive=False, predicate=lambda v: isinstance(v, tg.Variable))


def test_training_a_module_uses_its_trainable_variables():
    layer = Dense(2, 1)
    x = tg.constant([[1.0, 2.0]])
    with tg.GradientTape() as tape:
        y = tg.sum(layer(x))
    gw, gb = tape.gradient(y, [layer.w, layer.b])
    np.testing.assert_array_equal(gw.numpy(), [[1.0], [2.0]])
    assert layer.trainable_variables == (layer.b, layer.w)


def test_names_and_name_scopes():
    assert MLP().name == "mlp" and Dense(1, 1).name == "dense"
    with tg.name_scope("outer") as scope:
        assert scope == "outer/"
        inner = Dense(1, 1, name="inner")
        v = tg.Variable(1.0, name="v")
        with tg.name_scope("deeper") as s2:
            assert s2 == "outer/deeper/"
        with tg.name_scope("/abs/") as s3:
            assert s3 == "/abs/"
    assert v.name == "outer/v"
    assert inner.w.name == "outer/inner/kernel" and inner.name_scope.name == "outer/inner/"
    assert tg.Variable(1.0, name="free").name == "free"
    assert MLP().make().name == "mlp/made"
    with tg.name_scope(""):
        assert tg.Variable(0.0, name="root").name == "root"


def test_module_and_name_scope_errors():
    with pytest.raises(ValueError, match="'a b' is not a valid module name"):
        tg.Module(name="a b")
    with pytest.raises(ValueError, match="name for name_scope must be a string"):
        tg.name_scope(3)


def test_a_dict_with_keys_of_several_types_is_walked_in_a_fixed_order():
    class Mixed(tg.Module):
        def __init__(self):
            super().__init__()
            self.d = {"b": tg.Variable([2.0]), 1: tg.Variable([1.0]), "a": tg.Variable([3.0])}

    m = Mixed()
    assert [p for p, _ in m.named_variables()] == ["d/1", "d/a", "d/b"]  # int before str
    assert [float(v[0]) for v in m.trainable_variables] == [1.0, 3.0, 2.0]
