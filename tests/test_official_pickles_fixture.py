"""The official-snapshot fixture and its pickle writer (tests/official_pickles.py): what a reader of
official StyleGAN2-ADA / StyleGAN3 / R3GAN network pickles may rely on, checked by unpickling the
written bytes symbolically (nothing imported or run) and recording every global asked for."""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from official_pickles import (
    FIXTURE,
    MALICIOUS_KINDS,
    PLACEHOLDER_SRC,
    Symbolic,
    SymbolicUnpickler,
    official_cases,
    official_global,
    symbolic_load,
    write_malicious_pickle,
    write_official_pickle,
)

CASES = official_cases()
BY_NAME = {c["case"]: c for c in CASES}

#: Every global the official snapshot pickles ask for, per format (the outer pickle).
TENSOR_GLOBALS = {("collections", "OrderedDict"), ("torch._utils", "_rebuild_parameter"),
                  ("torch._utils", "_rebuild_tensor_v2"), ("torch.storage", "_load_from_bytes")}
STYLEGAN2_GLOBALS = TENSOR_GLOBALS | {("torch_utils.persistence", "_reconstruct_persistent_obj"),
                                      ("dnnlib.util", "EasyDict"), ("numpy", "dtype"),
                                      ("numpy.core.multiarray", "scalar")}
R3GAN_GLOBALS = TENSOR_GLOBALS | {
    ("training.networks", "Generator"), ("training.networks", "Discriminator"),
    *[("R3GAN.Networks", n) for n in ("Generator", "Discriminator", "GeneratorStage", "DiscriminatorStage",
                                      "GenerativeBasis", "DiscriminativeBasis", "UpsampleLayer",
                                      "DownsampleLayer", "ResidualBlock", "Convolution")],
    ("R3GAN.FusedOperators", "BiasedActivationCUDA"), ("R3GAN.Resamplers", "InterpolativeUpsamplerCUDA"),
    ("R3GAN.Resamplers", "InterpolativeDownsamplerCUDA"), ("torch.nn.modules.container", "ModuleList"),
    ("torch.nn.modules.conv", "Conv2d"), ("torch.nn.modules.linear", "Linear"), ("torch", "float32")}
#: StyleGAN3's alias-free layers keep sizes and sampling rates as numpy arrays.
STYLEGAN3_GLOBALS = STYLEGAN2_GLOBALS | {("numpy", "ndarray"), ("numpy.core.multiarray", "_reconstruct")}
EXPECTED_GLOBALS = {"stylegan2-ada-pytorch": STYLEGAN2_GLOBALS, "stylegan3-stylegan2": STYLEGAN2_GLOBALS,
                    "stylegan3": STYLEGAN3_GLOBALS, "r3gan": R3GAN_GLOBALS}
SNAPSHOT_KEYS = {"stylegan2-ada-pytorch": ["training_set_kwargs", "G", "D", "G_ema", "augment_pipe"],
                 "stylegan3-stylegan2": ["G", "D", "G_ema", "augment_pipe", "training_set_kwargs"],
                 "stylegan3": ["G", "D", "G_ema", "augment_pipe", "training_set_kwargs"],
                 "r3gan": ["G", "D", "G_ema", "training_set_kwargs", "cur_nimg", "D_opt_state", "G_opt_state"]}


def _storages(obj, out: list):
    """The byte strings of every ``torch.storage._load_from_bytes`` call under ``obj``."""
    if isinstance(obj, Symbolic):
        if obj.name == "torch.storage._load_from_bytes":
            out.append(obj.args[0])
            return out
        for part in (obj.args, obj.state, obj.items, obj.list_items):
            _storages(part, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            _storages(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _storages(v, out)
    return out


def _inner_globals(stream: bytes) -> list[tuple[str, str]]:
    """Globals of a storage's legacy torch.save stream (magic, version, system info, storage, keys)."""
    f = io.BytesIO(stream)
    up = None
    for _ in range(4):
        up = SymbolicUnpickler(f)
        up.persistent_load = lambda pid: pid  # the storage itself is a persistent id tuple
        up.load()
        if up.globals:
            return up.globals
    return []


def _tensor(node) -> torch.Tensor:
    """A tensor from its ``_rebuild_parameter`` / ``_rebuild_tensor_v2`` node (a mini reader)."""
    if node.name == "torch._utils._rebuild_parameter":
        node = node.args[0]
    assert node.name == "torch._utils._rebuild_tensor_v2"
    storage_node, offset, size, stride = node.args[:4]
    assert storage_node.name == "torch.storage._load_from_bytes"
    storage = torch.load(io.BytesIO(storage_node.args[0]), weights_only=True)
    return torch.empty(0, dtype=storage.dtype).set_(storage, offset, size, stride)


def _module_tensors(node, prefix: str, out: dict) -> dict:
    """state_dict-style tensors of a symbolic module: persistent meta's ``state`` or BUILD state."""
    if node.name == "torch_utils.persistence._reconstruct_persistent_obj":
        state = node.args[0]["state"]
    else:
        state = node.state
    for key in ("_parameters", "_buffers", "_modules"):
        d = state[key]
        items = d.items if isinstance(d, Symbolic) else d  # OrderedDict (a global) or dict
        for name, v in items.items():
            if v is None:
                continue
            if key == "_modules":
                _module_tensors(v, f"{prefix}{name}.", out)
            else:
                out[prefix + name] = _tensor(v)
    return out


def test_fixture_loads_weights_only_with_versions_and_commits():
    """The fixture is plain data (weights_only) and names the official commits and versions it ran."""
    data = torch.load(FIXTURE, weights_only=True)
    assert set(data["commits"]) == {"stylegan2-ada-pytorch", "stylegan3-stylegan2", "stylegan3", "r3gan"}
    assert all(len(c) == 40 for c in data["commits"].values())
    assert {"torch", "numpy"} <= set(data["versions"])
    assert FIXTURE.stat().st_size < 4_500_000


def test_fixture_has_the_cases_the_reader_tests_need():
    """Every requested case is there: ADA's architectures, conditional, fp16, grayscale, mapping and
    mbstd options, the augment pipe; StyleGAN3's stylegan2 and its alias-free T (with an augment pipe)
    and R (conditional, grayscale); R3GAN fp32, conditional and bf16."""
    assert set(BY_NAME) == {
        "ada-skip-resnet", "ada-orig-orig", "ada-resnet-skip", "ada-conditional", "ada-fp16-clamp",
        "ada-grayscale", "ada-mapping3-mbstd2", "sg3-skip-resnet", "sg3-conditional", "sg3-t", "sg3-r-conditional",
        "r3gan-unconditional", "r3gan-conditional", "r3gan-bf16"}
    assert BY_NAME["ada-skip-resnet"]["augment"]["p"] == 0.3
    assert BY_NAME["ada-conditional"]["c"].shape == (4, 3)
    assert BY_NAME["ada-grayscale"]["generations"][0]["uint8"].shape == (4, 8, 8, 1)
    assert BY_NAME["sg3-t"]["augment"]["p"] == pytest.approx(0.2)
    assert BY_NAME["sg3-r-conditional"]["nets"]["G"]["modules"][""]["init_kwargs"]["use_radial_filters"] is True
    for name in ("sg3-t", "sg3-r-conditional"):
        assert set(BY_NAME[name]["eq"]) >= {"eqt_int", "eqt_frac", "eqr", "seed", "labels"}
        assert BY_NAME[name]["transform"]["uint8"].shape[0] == 4
    for case in CASES:
        gens = case["generations"]
        if case["format"] != "r3gan":
            assert [(g["truncation_psi"], g["truncation_cutoff"], g["noise_mode"]) for g in gens] == [
                (1, None, "const"), (0.7, None, "const"), (0.7, 2, "const"), (1, None, "none")]
            assert case["w_file"]["w"].shape[0] == 1
        # G and G_ema differ in every weight, so a reader that mixes them up fails.
        g, g_ema = case["nets"]["G"]["tensors"], case["nets"]["G_ema"]["tensors"]
        weights = [k for k in g if k.endswith("weight")]
        assert weights and not any(torch.equal(g[k], g_ema[k]) for k in weights)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_written_pickle_asks_for_exactly_the_official_globals(tmp_path: Path, name: str):
    """The written pickle asks for exactly the official layout's globals (the list a safe reader
    allows), and its storages' inner torch.save streams only for torch's storage classes."""
    case = BY_NAME[name]
    path = write_official_pickle(case, tmp_path / "network-snapshot.pkl")
    obj, globals_ = symbolic_load(path)
    expected = EXPECTED_GLOBALS[case["format"]] | ({("torch", "bfloat16")} if name == "r3gan-bf16" else set())
    assert set(globals_) == expected
    inner = {g for s in _storages(obj, []) for g in _inner_globals(s)}
    assert inner == {("torch", "FloatStorage")}
    assert path.read_bytes()[:2] == b"\x80\x04"  # protocol 4


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_written_pickle_holds_the_recorded_tensors_in_the_official_layout(tmp_path: Path, name: str):
    """Top-level keys in the official loop's order; ADA/StyleGAN3 modules are persistence metas
    (version 6, placeholder source, class name, EasyDict init kwargs); every recorded tensor comes
    back bit for bit from its module's state."""
    case = BY_NAME[name]
    obj, _ = symbolic_load(write_official_pickle(case, tmp_path / "s.pkl"))
    assert list(obj) == SNAPSHOT_KEYS[case["format"]]
    assert obj["training_set_kwargs"] == case["training_set_kwargs"]
    if case["format"] == "r3gan":  # Adam's state dicts: plain dicts of tensors
        for key in ("D_opt_state", "G_opt_state"):
            assert list(obj[key]) == ["state", "param_groups"]
            assert obj[key]["param_groups"][0]["betas"] == (0, 0.9)
            assert obj[key]["state"][0]["exp_avg"].name == "torch._utils._rebuild_tensor_v2"
    for key in ("G", "D", "G_ema", "augment_pipe"):
        if key not in case["nets"]:
            assert obj.get(key, None) is None
            continue
        node = obj[key]
        tree = case["nets"][key]
        root = tree["modules"][""]
        if case["format"] == "r3gan":
            assert node.name == f"{root['module']}.{root['qualname']}"
            assert node.state["training"] is False
        else:
            assert node.name == "torch_utils.persistence._reconstruct_persistent_obj"
            meta = node.args[0]
            assert list(meta) == ["type", "version", "module_src", "class_name", "state"]
            assert (meta["type"], meta["version"], meta["module_src"]) == ("class", 6, PLACEHOLDER_SRC)
            assert meta["class_name"] == root["qualname"]
            kwargs = meta["state"]["_init_kwargs"]
            for path in root["init_kwargs_easydicts"]:
                assert kwargs[path].name == "dnnlib.util.EasyDict"
        got = _module_tensors(node, "", {})
        assert set(got) == set(tree["tensors"])
        for k, t in tree["tensors"].items():
            assert got[k].dtype == t.dtype and torch.equal(got[k], t), k


def test_extra_entries_follow_the_official_ones(tmp_path: Path):
    """``extra`` adds top-level entries after the official keys (e.g. a stand-in global)."""
    case = BY_NAME["r3gan-conditional"]
    extra = {"G_opt_state": {"state": {}}, "progress": official_global("training.somewhere", "Thing")}
    obj, globals_ = symbolic_load(write_official_pickle(case, tmp_path / "s.pkl", extra=extra))
    assert list(obj)[-2:] == ["G_opt_state", "progress"]
    assert ("training.somewhere", "Thing") in globals_


def test_malicious_pickles_would_run_their_payload_under_plain_pickle(tmp_path: Path):
    """Each hostile pickle creates its marker when plain ``pickle.load`` reads it, so a reader test
    that sees no marker shows the reader refused it (not that the payload was inert)."""
    markers = {}
    for kind in MALICIOUS_KINDS:
        folder = tmp_path / kind
        folder.mkdir()
        markers[kind] = (folder / "snapshot.pkl", write_malicious_pickle(folder / "snapshot.pkl", kind))
        assert not markers[kind][1].exists()
    script = (
        "import pickle, sys\n"
        "for path in sys.argv[1:]:\n"
        "    sys.path.insert(0, path.rsplit('/', 1)[0])\n"
        "    try:\n"
        "        pickle.load(open(path, 'rb'))\n"
        "    except Exception:\n"
        "        pass\n")
    subprocess.run([sys.executable, "-c", script, *[str(p) for p, _ in markers.values()]], check=True,
                   cwd=tmp_path, capture_output=True, timeout=120)
    deadline = time.monotonic() + 10  # subprocess.Popen's touch runs in the background
    while time.monotonic() < deadline and not all(m.exists() for _, m in markers.values()):
        time.sleep(0.05)
    assert {k for k, (_, m) in markers.items() if m.exists()} == set(MALICIOUS_KINDS)


def test_malicious_pickles_ask_for_their_payload_globals(tmp_path: Path):
    """The payload globals are the ones named (a reader's refusal message can name them)."""
    wanted = {"os.system": ("os", "system"), "builtins.eval": ("builtins", "eval"),
              "posix.system": ("posix", "system"), "subprocess.Popen": ("subprocess", "Popen"),
              "unknown-class": ("gankit_test_payload", "Touch"),
              "load_from_bytes": ("torch.storage", "_load_from_bytes"), "builtins.open": ("builtins", "open")}
    for kind, glob in wanted.items():
        path = tmp_path / f"{kind}.pkl"
        write_malicious_pickle(path, kind)
        _, globals_ = symbolic_load(path)
        assert glob in globals_
    with pytest.raises(ValueError, match="expected one of"):
        write_malicious_pickle(tmp_path / "x.pkl", "nope")


def test_symbolic_load_runs_nothing(tmp_path: Path):
    """symbolic_load of a hostile pickle records the call and creates no marker."""
    marker = write_malicious_pickle(tmp_path / "s.pkl", "builtins.eval")
    obj, globals_ = symbolic_load(tmp_path / "s.pkl")
    assert obj["G_ema"].name == "builtins.eval" and globals_ == [("builtins", "eval")]
    assert not marker.exists()
    with pytest.raises(pickle.UnpicklingError):
        SymbolicUnpickler(io.BytesIO(b"\x80\x02X\x01\x00\x00\x00aQ.")).load()  # a persistent id


@pytest.mark.parametrize(("layout", "internals"), [
    ("torch-1.7", ["training", "_parameters", "_buffers", "_non_persistent_buffers_set", "_backward_hooks",
                   "_forward_hooks", "_forward_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks",
                   "_modules"]),
    ("current", list(torch.nn.Module().__dict__)),
])
def test_module_state_holds_the_torch_internals_then_attributes_then_init_args(tmp_path: Path, layout, internals):
    """A persistent module's state is torch's Module.__init__ attributes of that torch release, then
    the class's own attributes in assignment order, then persistence's _init_args/_init_kwargs."""
    case = BY_NAME["ada-conditional"]
    obj, _ = symbolic_load(write_official_pickle(case, tmp_path / "s.pkl", layout=layout))
    state = obj["G"].args[0]["state"]
    attrs = list(case["nets"]["G"]["modules"][""]["attributes"])
    assert list(state) == [*internals, *attrs, "_init_args", "_init_kwargs"]
    assert state["training"] is False and state["c_dim"] == 3
    assert case["seeds"] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="torch-0.4"):
        write_official_pickle(case, tmp_path / "t.pkl", layout="torch-0.4")
