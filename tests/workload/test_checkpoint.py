"""Exact checkpoint bytes from safetensors headers, checked against files the real library writes."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscout.errors import SpecError
from gpuscout.workload.checkpoint import read_checkpoint_weights, read_safetensors_header

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
safe_open = pytest.importorskip("safetensors").safe_open


def _groups(directory: Path) -> dict[str, tuple[int, int, int]]:
    weights = read_checkpoint_weights(directory)
    return {g.dtype: (g.tensors, g.elements, g.bytes) for g in weights.by_dtype}


def _raw_file(path: Path, header: bytes, data: bytes = b"") -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def test_mixed_dtypes_give_exact_bytes(tmp_path: Path) -> None:
    safetensors_torch.save_file(
        {
            "embed.weight": torch.zeros(7, 5, dtype=torch.bfloat16),
            "layer.weight": torch.zeros(5, 5, dtype=torch.bfloat16),
            "norm.weight": torch.zeros(5, dtype=torch.float32),
            "position_ids": torch.zeros(1, 9, dtype=torch.int64),
            "scalar": torch.tensor(1.0, dtype=torch.float16),
        },
        str(tmp_path / "model.safetensors"),
    )
    weights = read_checkpoint_weights(tmp_path)
    assert weights.files == 1
    assert weights.total_bytes == (35 + 25) * 2 + 5 * 4 + 9 * 8 + 2
    assert _groups(tmp_path) == {"BF16": (2, 60, 120), "I64": (1, 9, 72), "F32": (1, 5, 20), "F16": (1, 1, 2)}
    # Largest group first, so reports can print the table as is.
    assert [g.dtype for g in weights.by_dtype] == ["BF16", "I64", "F32", "F16"]
    assert weights.quantization is None


def test_every_tensor_agrees_with_the_safetensors_library(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    tensors = {
        "a": torch.zeros(3, 4, dtype=torch.bfloat16),
        "b": torch.zeros(2, 0, dtype=torch.float32),  # empty tensors are legal
        "c": torch.zeros(6, dtype=torch.float8_e4m3fn),
        "d": torch.zeros(4, dtype=torch.bool),
        "e": torch.zeros(2, 2, dtype=torch.float64),
    }
    safetensors_torch.save_file(tensors, str(path))
    ours = {t.name: t for t in read_safetensors_header(path)}
    with safe_open(str(path), framework="pt") as handle:
        for name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
            shape = handle.get_slice(name).get_shape()
            assert ours[name].elements == int(np.prod(shape))
            assert ours[name].bytes == tensors[name].numel() * tensors[name].element_size()
    assert {t.dtype for t in ours.values()} == {"BF16", "F32", "F8_E4M3", "BOOL", "F64"}
    assert read_checkpoint_weights(tmp_path).quantization == "fp8"


def _save_bnb_4bit_layer(directory: Path) -> int:
    """A Linear(128 -> 64) as bitsandbytes NF4 saves it (`QuantState.as_dict(packed=True)` names)."""
    n = 64 * 128
    tensors = {
        "layer.weight": np.zeros((n // 2, 1), dtype=np.uint8),  # two 4-bit codes per byte
        "layer.weight.absmax": np.zeros(n // 64, dtype=np.float32),  # one per 64-weight block
        "layer.weight.quant_map": np.zeros(16, dtype=np.float32),  # the NF4 code book
        "layer.weight.quant_state.bitsandbytes__nf4": np.zeros(80, dtype=np.uint8),  # packed JSON
    }
    safetensors_numpy.save_file(tensors, str(directory / "model.safetensors"))
    return n // 2 + (n // 64) * 4 + 16 * 4 + 80


def test_bnb_4bit_checkpoint_is_detected_from_tensor_names(tmp_path: Path) -> None:
    expected = _save_bnb_4bit_layer(tmp_path)
    weights = read_checkpoint_weights(tmp_path)
    assert weights.total_bytes == expected
    assert _groups(tmp_path) == {"U8": (2, 4096 + 80, 4096 + 80), "F32": (2, 128 + 16, (128 + 16) * 4)}
    assert weights.quantization == "bitsandbytes-4bit"


@pytest.mark.parametrize(
    ("quantization_config", "expected"),
    [
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
            "bitsandbytes-4bit",
        ),
        ({"load_in_8bit": True}, "bitsandbytes-8bit"),  # configs written before quant_method existed
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq"),
        ({"quant_method": "compressed-tensors", "format": "float-quantized"}, "compressed-tensors"),
    ],
)
def test_config_names_the_quantization(tmp_path: Path, quantization_config: dict[str, object], expected: str) -> None:
    _save_bnb_4bit_layer(tmp_path)
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "llama", "quantization_config": quantization_config})
    )
    assert read_checkpoint_weights(tmp_path).quantization == expected


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["l.qweight", "l.qzeros", "l.scales", "l.g_idx"], "gptq"),
        (["l.qweight", "l.qzeros", "l.scales"], "awq"),
        (["l.weight", "l.SCB"], "bitsandbytes-8bit"),
        (["experts.gate_up_proj_blocks", "experts.gate_up_proj_scales"], "mxfp4"),
        (["transformer_blocks.0.attn.to_q.weight"], None),  # diffusers names must not look like mxfp4
    ],
)
def test_tensor_names_give_the_quantization(tmp_path: Path, names: list[str], expected: str | None) -> None:
    safetensors_numpy.save_file({n: np.zeros(4, dtype=np.int32) for n in names}, str(tmp_path / "m.safetensors"))
    assert read_checkpoint_weights(tmp_path).quantization == expected


def test_int8_weight_scales_without_fp8_are_not_called_fp8(tmp_path: Path) -> None:
    tensors = {"l.weight": np.zeros(8, dtype=np.int8), "l.weight_scale": np.zeros(1, dtype=np.float32)}
    safetensors_numpy.save_file(tensors, str(tmp_path / "m.safetensors"))
    assert read_checkpoint_weights(tmp_path).quantization == "compressed-tensors"


def _save_sharded(directory: Path) -> None:
    safetensors_torch.save_file(
        {"a": torch.zeros(10, dtype=torch.bfloat16)}, str(directory / "model-1-of-2.safetensors")
    )
    safetensors_torch.save_file({"b": torch.zeros(3, dtype=torch.float32)}, str(directory / "model-2-of-2.safetensors"))
    index = {
        "metadata": {"total_size": 32},
        "weight_map": {"a": "model-1-of-2.safetensors", "b": "model-2-of-2.safetensors"},
    }
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


def test_index_selects_only_the_shards_it_names(tmp_path: Path) -> None:
    _save_sharded(tmp_path)
    # Mistral-style repos also ship a consolidated copy of the same weights; it must not count twice.
    safetensors_torch.save_file({"a": torch.zeros(1000)}, str(tmp_path / "consolidated.safetensors"))
    weights = read_checkpoint_weights(tmp_path)
    assert weights.files == 2
    assert weights.total_bytes == 10 * 2 + 3 * 4
    assert _groups(tmp_path) == {"BF16": (1, 10, 20), "F32": (1, 3, 12)}


def test_missing_shard_is_named(tmp_path: Path) -> None:
    _save_sharded(tmp_path)
    (tmp_path / "model-2-of-2.safetensors").unlink()
    with pytest.raises(SpecError, match=r"lacks 1 of 2 shards: model-2-of-2\.safetensors"):
        read_checkpoint_weights(tmp_path)


def test_unreadable_index_is_a_spec_error(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text('{"metadata": {}}')
    with pytest.raises(SpecError, match="weight_map"):
        read_checkpoint_weights(tmp_path)


def test_single_file_path_is_accepted(tmp_path: Path) -> None:
    _save_sharded(tmp_path)
    assert read_checkpoint_weights(tmp_path / "model-2-of-2.safetensors").total_bytes == 12


def test_sub_byte_and_unknown_dtypes_use_the_offsets(tmp_path: Path) -> None:
    header = {
        "fp4": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]},  # 12 bits round up to 2 bytes
        "future": {"dtype": "Q4_K", "shape": [256], "data_offsets": [2, 146]},
        "__metadata__": {"format": "pt"},
    }
    _raw_file(tmp_path / "m.safetensors", json.dumps(header).encode(), bytes(146))
    assert _groups(tmp_path) == {"Q4_K": (1, 256, 144), "F4": (1, 3, 2)}


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "shorter than the 8-byte header length"),
        (b"\x01\x02", "shorter than the 8-byte header length"),
        # The declared length is the file's first bytes: the message gives the file size, not them.
        (struct.pack("<Q", 10**9) + b"{}", "declares a header longer than the 10-byte file"),
        (struct.pack("<Q", 17 * 2**20) + bytes(17 * 2**20), "over gpuscout's 16 MiB limit"),
        (struct.pack("<Q", 4) + b"\xff\xfe{}", "not valid UTF-8 JSON"),
        (struct.pack("<Q", 9) + b"not json!", "not valid UTF-8 JSON"),
        (struct.pack("<Q", 2) + b"[]", "not an object"),
        (struct.pack("<Q", 8) + b'{"a": 1}', "not an object"),
        (struct.pack("<Q", 18) + b'{"a": {"x": true}}', "no string 'dtype'"),
        (b"PK\x03\x04 this is a zip archive, not safetensors", "declares a"),
    ],
)
def test_garbage_files_are_spec_errors(tmp_path: Path, content: bytes, why: str) -> None:
    (tmp_path / "model.safetensors").write_bytes(content)
    with pytest.raises(SpecError, match=why) as info:
        read_checkpoint_weights(tmp_path)
    assert "To fix:" in str(info.value)


def test_truncated_data_is_a_spec_error(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file({"w": torch.zeros(100, dtype=torch.bfloat16)}, str(path))
    path.write_bytes(path.read_bytes()[:-10])  # an interrupted download
    with pytest.raises(SpecError, match="outside the 190-byte data area"):
        read_checkpoint_weights(tmp_path)


def test_offsets_that_disagree_with_shape_are_a_spec_error(tmp_path: Path) -> None:
    header = {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}
    _raw_file(tmp_path / "m.safetensors", json.dumps(header).encode(), bytes(8))
    with pytest.raises(SpecError, match="should take 16 bytes but its data_offsets span 8"):
        read_checkpoint_weights(tmp_path)


def test_empty_or_missing_directory_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"No \*\.safetensors files"):
        read_checkpoint_weights(tmp_path)
    with pytest.raises(SpecError, match="does not exist"):
        read_checkpoint_weights(tmp_path / "nope")


def test_diffusers_layout_points_at_the_component_folders(tmp_path: Path) -> None:
    (tmp_path / "unet").mkdir()
    safetensors_torch.save_file({"w": torch.zeros(1)}, str(tmp_path / "unet" / "diffusion_pytorch_model.safetensors"))
    with pytest.raises(SpecError, match=r"subfolders \(unet\)"):
        read_checkpoint_weights(tmp_path)


def test_broken_config_json_is_a_spec_error(tmp_path: Path) -> None:
    _save_sharded(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(SpecError, match=r"config\.json"):
        read_checkpoint_weights(tmp_path)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)
_ENTRY = st.fixed_dictionaries(
    {},
    optional={
        "dtype": st.sampled_from(["F32", "BF16", "U8", "F4", "XX"]) | _JSON,
        "shape": st.lists(st.integers(-3, 2**40), max_size=3) | _JSON,
        "data_offsets": st.lists(st.integers(-3, 2**40), max_size=3) | _JSON,
    },
)


def _read_or_spec_error(directory: Path, content: bytes) -> None:
    (directory / "model.safetensors").write_bytes(content)
    try:
        weights = read_checkpoint_weights(directory)
    except SpecError as exc:
        assert exc.what and exc.why and exc.fix
    else:
        assert weights.total_bytes >= 0


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=64), st.binary(max_size=32))
def test_random_bytes_never_crash(header: bytes, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as directory:
        _read_or_spec_error(Path(directory), struct.pack("<Q", len(header)) + header + data)
        _read_or_spec_error(Path(directory), header + data)  # no valid length prefix at all


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _ENTRY | _JSON, max_size=4), st.integers(0, 64))
def test_random_json_headers_never_crash(header: dict[str, object], data_bytes: int) -> None:
    raw = json.dumps(header).encode()
    with tempfile.TemporaryDirectory() as directory:
        _read_or_spec_error(Path(directory), struct.pack("<Q", len(raw)) + raw + bytes(data_bytes))


def test_unreadable_file_is_a_spec_error(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").mkdir()  # a directory where a file should be
    with pytest.raises(SpecError, match="Cannot read"):
        read_safetensors_header(tmp_path / "model.safetensors")
