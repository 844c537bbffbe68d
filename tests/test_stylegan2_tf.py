"""TF-era StyleGAN2 / StyleGAN2-ADA networks converted as stylegan2-ada-pytorch's legacy.py
converts them (``gan_kit.builtin.importers.stylegan2_tf``).

``tests/data/tf_reference.pt`` holds, per case, TF networks made as data (names and shapes as the
TF build functions make them, seeded values) and what the official ``legacy.load_network_pkl``
made of their pickle: the PyTorch init kwargs and state dicts of G, D and G_ema (written by
``tests/data/make_tf_reference.py``, which runs the official code). Here gankit's conversion must
give the same kwargs and the same state dicts, entry for entry, bit for bit, from the recorded
variables and from the pickle itself (rebuilt by ``tests/tf_pickles.py`` and read by gankit's
restricted reader); and every refusal is one line naming the kwarg or variable.
"""

from __future__ import annotations

import copy
import hashlib
import pickletools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gan_kit import CheckpointError, GankitError, PickledTFNetwork, read_pickle
from gan_kit.builtin.importers.stylegan2_tf import (convert_tf_discriminator, convert_tf_generator, convert_tf_snapshot,
                                                    is_tf_snapshot, tf_discriminator_kwargs,
                                                    tf_discriminator_state_dict, tf_generator_kwargs,
                                                    tf_generator_state_dict, tf_variables)
from tf_pickles import tf_pickle_bytes, write_tf_pickle

REF = torch.load(Path(__file__).parent / "data" / "tf_reference.pt", weights_only=True)
CASES = REF["cases"]
#: The cases gankit's stylegan2 architecture builds (skip G, residual D).
BUILDABLE = ["config_f", "ada_conditional"]
#: The cases only legacy.py converts (other G / D layouts, another filter): the official names,
#: gankit=False.
LAYOUTS = ["config_e_gresnet_dskip", "config_e_filter_121", "ada_gorig_dorig"]
#: Recorded network (key of "networks") -> converted network (key of "state_dicts").
PAIRS = [("G", "G"), ("D", "D"), ("Gs", "G_ema")]


def _net(record: dict) -> SimpleNamespace:
    """A recorded TF network as the object the restricted reader gives (numpy variables)."""
    return SimpleNamespace(
        name=record["state"]["name"], version=record["state"]["version"],
        static_kwargs=dict(record["state"]["static_kwargs"]), build_func_name=record["state"]["build_func_name"],
        variables={k: v.numpy() for k, v in record["variables"].items()},
        components={k: _net(c) for k, c in record["components"].items()})


def _convert(tf_key: str, net, gankit: bool = True):
    return (convert_tf_discriminator if tf_key == "D" else convert_tf_generator)(net, gankit=gankit)


def _assert_same_state(got: dict, expected: dict) -> None:
    assert list(got) == list(expected), "the entries or their order differ from legacy.py's"
    for key, value in expected.items():
        assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
        assert torch.equal(got[key], value), f"{key} differs from legacy.py's"


def _one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text and isinstance(e.value, GankitError)
    return text


# ------------------------------------------------------------------------ legacy.py parity --


@pytest.mark.parametrize("case", BUILDABLE + LAYOUTS)
@pytest.mark.parametrize("tf_key,key", PAIRS)
def test_the_init_kwargs_are_legacy_pys(case, tf_key, key):
    """G's, D's and Gs's static kwargs give exactly the init kwargs legacy.py gave the PyTorch
    networks (defaults, fmap_base doubled, None kept or replaced as it does)."""
    static = CASES[case]["networks"][tf_key]["state"]["static_kwargs"]
    derive = tf_discriminator_kwargs if tf_key == "D" else tf_generator_kwargs
    assert derive(static, gankit=False) == CASES[case]["init_kwargs"][key]
    if case in BUILDABLE:
        assert derive(static) == CASES[case]["init_kwargs"][key]


@pytest.mark.parametrize("case", BUILDABLE + LAYOUTS)
@pytest.mark.parametrize("tf_key,key", PAIRS)
def test_the_state_dicts_are_legacy_pys_bit_for_bit(case, tf_key, key):
    """Every entry of the converted G, D and G_ema state dicts, filters' buffers included, in
    torch's order: the same tensor as legacy.py's (transposes, flips, +1 of the style biases,
    renames)."""
    rec = CASES[case]
    kwargs, state = _convert(tf_key, _net(rec["networks"][tf_key]), gankit=case in BUILDABLE)
    assert kwargs == rec["init_kwargs"][key]
    _assert_same_state(state, rec["state_dicts"][key])


def test_the_state_dict_functions_take_the_flat_variables_too():
    """``tf_variables`` names them as legacy.py's _collect_tf_params (own, then each component's
    with its key), and the state dict functions take that flat dict."""
    rec = CASES["ada_conditional"]
    G = _net(rec["networks"]["Gs"])
    flat = tf_variables(G)
    assert list(flat)[:2] == ["dlatent_avg", "synthesis/noise0"] and "mapping/LabelEmbed/weight" in flat
    _assert_same_state(tf_generator_state_dict(flat, rec["init_kwargs"]["G_ema"]), rec["state_dicts"]["G_ema"])
    D = tf_variables(_net(rec["networks"]["D"]))
    _assert_same_state(tf_discriminator_state_dict(D, rec["init_kwargs"]["D"]), rec["state_dicts"]["D"])


@pytest.mark.parametrize("case", BUILDABLE + LAYOUTS)
def test_a_network_alone_brings_its_own_kwargs(case):
    """Given the TF network alone, the state dict functions use legacy.py's kwargs of its static
    kwargs (whatever gankit builds) and check its pickle version."""
    rec = CASES[case]
    _assert_same_state(tf_generator_state_dict(_net(rec["networks"]["Gs"])), rec["state_dicts"]["G_ema"])
    _assert_same_state(tf_discriminator_state_dict(_net(rec["networks"]["D"])), rec["state_dicts"]["D"])
    old = _net(rec["networks"]["D"])
    old.version = 2
    with pytest.raises(CheckpointError, match="^TF network 'D': pickle version 2"):
        tf_discriminator_state_dict(old)
    with pytest.raises(TypeError, match="init_kwargs is needed"):
        tf_discriminator_state_dict(tf_variables(old))


@pytest.mark.parametrize("case", BUILDABLE)
def test_the_pickle_read_by_the_safe_reader_converts_as_legacy_py(case, tmp_path):
    """The TF pickle itself (G, D, Gs as dnnlib.tflib.network.Network, numpy variables, 0-d
    ones numpy scalars), read by gankit's restricted reader, converts to legacy.py's networks."""
    rec = CASES[case]
    data = read_pickle(write_tf_pickle(rec, tmp_path / "network.pkl"))
    assert isinstance(data, tuple) and len(data) == 3 and all(isinstance(n, PickledTFNetwork) for n in data)
    assert is_tf_snapshot(data) and not is_tf_snapshot(data[:2]) and not is_tf_snapshot({"G": data[0]})
    converted = convert_tf_snapshot(data)
    assert list(converted) == ["G", "D", "G_ema"]
    for net, (tf_key, key) in zip(data, PAIRS):
        assert net.name == tf_key and list(net.components) == list(rec["networks"][tf_key]["components"])
        kwargs, state = converted[key]
        assert kwargs == rec["init_kwargs"][key]
        _assert_same_state(state, rec["state_dicts"][key])


def test_a_pickle_of_something_else_is_no_tf_snapshot():
    with pytest.raises(CheckpointError) as e:
        convert_tf_snapshot({"G_ema": None})
    assert _one_line(e) == ("not a TF StyleGAN2 snapshot: it holds dict, not the tuple of three TF networks "
                            "(G, D, Gs)")


@pytest.mark.parametrize("case", BUILDABLE + LAYOUTS)
def test_the_pickle_is_rebuilt_byte_for_byte(case):
    """tests/tf_pickles.py rebuilds from the record the very bytes legacy.py read."""
    assert hashlib.sha256(tf_pickle_bytes(CASES[case])).hexdigest() == CASES[case]["pickle_sha256"]


def test_the_pickle_has_the_tf_layout():
    """tests/tf_pickles.py writes what the TF code wrote: protocol 3, the networks by their
    global name dnnlib.tflib.network.Network (NEWOBJ + BUILD), numpy by numpy 1's module name,
    the build module's source a stand-in (nothing of NVIDIA's)."""
    raw = tf_pickle_bytes(CASES["config_f"])
    assert raw[:2] == b"\x80\x03"
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(raw)]
    assert ("GLOBAL", "dnnlib.tflib.network Network") in ops
    assert ("GLOBAL", "numpy.core.multiarray _reconstruct") in ops and ("GLOBAL", "numpy.core.multiarray scalar") in ops
    assert {name for name, _ in ops} >= {"NEWOBJ", "BUILD"} and b"numpy._core" not in raw
    assert b"NVIDIA" not in raw and b"import tensorflow" not in raw


def test_the_reference_outputs_are_recorded_for_the_importer():
    """The record holds G_ema's images for seeds 0-3 at psi 1 and 0.7 and D's logits: distinct,
    finite, from the numpy seed rule's z."""
    for case in BUILDABLE:
        out = CASES[case]["outputs"]
        z_dim = CASES[case]["init_kwargs"]["G_ema"]["z_dim"]
        assert torch.equal(out["z"][2], torch.from_numpy(np.random.RandomState(2).randn(z_dim)))
        assert out["images"].shape[:2] == (2, 4) and torch.isfinite(out["images"]).all()
        assert not torch.equal(out["images"][0], out["images"][1]) and out["d_logits"].shape == (4, 1)


# -------------------------------------------------------------------------------- refusals --


def _g_static(**changes) -> dict:
    return {**CASES["ada_conditional"]["networks"]["Gs"]["state"]["static_kwargs"], **changes}


def _d_static(**changes) -> dict:
    return {**CASES["ada_conditional"]["networks"]["D"]["state"]["static_kwargs"], **changes}


@pytest.mark.parametrize("static,gankit,says", [
    (_g_static(fmap_decay=1.0), False, "static kwarg fmap_decay = 1.0: legacy.py does not know"),
    (_g_static(fused_modconv=True), False, "static kwarg fused_modconv = True"),
    (_g_static(fmap_base=None), False, "static kwarg fmap_base = None"),
    (_g_static(resolution=12), False, "static kwarg resolution = 12: expected a power of two"),
    (_g_static(architecture="orig"), True, "static kwarg architecture = 'orig': gankit's stylegan2"),
    (_g_static(architecture="resnet"), True, "architecture = 'resnet'"),
    (_g_static(nonlinearity="relu"), True, "static kwarg nonlinearity = 'relu'"),
    (_g_static(mapping_nonlinearity="tanh"), True, "static kwarg mapping_nonlinearity = 'tanh'"),
    (_g_static(resample_kernel=[1, 2, 1]), True, "static kwarg resample_kernel = [1, 2, 1]"),
    (_g_static(resample_kernel=None), True, "static kwarg resample_kernel = None"),
    (_g_static(use_noise=False), True, "static kwarg use_noise = False"),
    (_g_static(mapping_fmaps=32), True, "static kwarg mapping_fmaps = 32"),
    (_g_static(label_fmaps=16), True, "static kwarg label_fmaps = 16"),
])
def test_g_kwargs_refusals_name_the_kwarg_and_value(static, gankit, says):
    with pytest.raises(CheckpointError) as e:
        tf_generator_kwargs(static, name="Gs", gankit=gankit)
    assert _one_line(e).startswith("TF network 'Gs': ") and says in str(e.value)


@pytest.mark.parametrize("static,gankit,says", [
    (_d_static(use_pagan=True), False, "static kwarg use_pagan = True: legacy.py does not know"),
    (_d_static(architecture="skip"), True, "static kwarg architecture = 'skip': gankit's stylegan2"),
    (_d_static(architecture="orig"), True, "architecture = 'orig'"),
    (_d_static(mbstd_num_features=2), True, "static kwarg mbstd_num_features = 2"),
    (_d_static(mapping_fmaps=16), True, "static kwarg mapping_fmaps = 16"),
    (_d_static(resample_kernel=[1, 1]), True, "static kwarg resample_kernel = [1, 1]"),
    (_d_static(mbstd_group_size=0), False, "static kwarg mbstd_group_size = 0"),
])
def test_d_kwargs_refusals_name_the_kwarg_and_value(static, gankit, says):
    with pytest.raises(CheckpointError) as e:
        tf_discriminator_kwargs(static, gankit=gankit)
    assert _one_line(e).startswith("TF network 'D': ") and says in str(e.value)


def test_the_known_run_time_kwargs_are_accepted_and_left_out():
    """truncation_psi, truncation_cutoff, style_mixing_prob and structure are known to legacy.py
    and have no part in the network."""
    base = tf_generator_kwargs(_g_static())
    assert tf_generator_kwargs(_g_static(truncation_psi=0.5, truncation_cutoff=8, style_mixing_prob=0.9,
                                         structure="fixed")) == base
    assert tf_discriminator_kwargs(_d_static(structure="fixed")) == tf_discriminator_kwargs(_d_static())


def test_an_old_pickle_version_is_refused():
    net = _net(CASES["config_f"]["networks"]["Gs"])
    net.version = 3
    with pytest.raises(CheckpointError) as e:
        convert_tf_generator(net)
    assert "TF network 'Gs': pickle version 3" in _one_line(e)


def _refusal(tf_key: str, change) -> str:
    net = _net(CASES["ada_conditional"]["networks"][tf_key])
    change(net)
    with pytest.raises(CheckpointError) as e:
        _convert(tf_key, net)
    return _one_line(e)


def test_a_missing_variable_is_named():
    def drop(net):
        del net.components["synthesis"].variables["8x8/Conv1/noise_strength"]
    assert "no variable 'synthesis/8x8/Conv1/noise_strength' (stylegan2-ada-pytorch's " \
           "synthesis.b8.conv1.noise_strength, [])" in _refusal("Gs", drop)


def test_a_variable_of_another_shape_is_named():
    def transpose(net):
        v = net.components["mapping"].variables
        v["Dense1/weight"] = v["Dense1/weight"].T[:, :5]
    assert "variable 'mapping/Dense1/weight' has shape [24, 5]" in _refusal("Gs", transpose)

    def squeeze(net):
        net.components["synthesis"].variables["4x4/Const/const"] = net.components["synthesis"].variables[
            "4x4/Const/const"][0]
    assert "variable 'synthesis/4x4/Const/const' has shape [8, 4, 4]" in _refusal("Gs", squeeze)


def test_a_variable_left_over_is_named():
    """A variable the conversion would not use (legacy.py silently drops it) means another network
    than the kwargs describe: refused, by name."""
    def lod(net):
        net.components["synthesis"].variables["lod"] = np.float32(0)
    assert "variable 'synthesis/lod' has no place" in _refusal("Gs", lod)

    def label_concat(net):
        net.variables["LabelConcat/weight"] = np.zeros((3, 8), np.float32)
    assert "variable 'LabelConcat/weight' has no place" in _refusal("D", label_concat)


def test_stylegan2s_lod_of_g_main_is_left_out_as_legacy_py_does():
    """StyleGAN2's G and Gs hold ``lod`` (their progressive-growing level, unused by configs E
    and F): recorded in the config F case, converted without it."""
    G = _net(CASES["config_f"]["networks"]["Gs"])
    assert list(G.variables) == ["lod", "dlatent_avg"] and G.variables["lod"].shape == ()
    _, state = convert_tf_generator(G)
    assert "lod" not in str(list(state))


def test_a_progressive_growing_network_is_refused_by_its_lod_layers():
    def progressive(net):
        v = net.components["synthesis"].variables
        v["ToRGB_lod0/weight"] = v.pop("16x16/ToRGB/weight")
    assert "variable 'synthesis/ToRGB_lod0/weight': a progressive-growing network" in _refusal("Gs", progressive)


def test_a_non_float_variable_is_refused():
    def ints(net):
        net.variables["Output/bias"] = np.zeros(8, np.int32)
    assert "variable 'Output/bias' is of type int32" in _refusal("D", ints)


def test_the_inputs_are_not_changed():
    """The conversion copies: the TF arrays and the kwargs dict are left as they were."""
    net = _net(CASES["config_f"]["networks"]["G"])
    before = copy.deepcopy(tf_variables(net))
    static = dict(net.static_kwargs)
    _, state = convert_tf_generator(net)
    state["synthesis.b4.const"].add_(1)
    assert all(np.array_equal(before[k], v) for k, v in tf_variables(net).items()) and net.static_kwargs == static
