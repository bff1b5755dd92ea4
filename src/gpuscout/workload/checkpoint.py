"""Exact weight bytes of a safetensors checkpoint, read from the file headers alone.

The safetensors format (https://github.com/huggingface/safetensors, README "Format"): an 8-byte
little-endian unsigned header length N, then N bytes of UTF-8 JSON mapping each tensor name to
{"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the byte after the header),
plus an optional "__metadata__" string map; the tensor data follows. We never read the data, so a
70 GB checkpoint costs a few kilobytes of I/O, and torch is not needed.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import struct
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import Any, NamedTuple, TypeGuard

from gpuscout.errors import SpecError
from gpuscout.userfile import (
    MAX_SPEC_BYTES,
    decode_user_text,
    open_user_file,
    parse_user_json,
    read_bounded,
    read_user_json,
    shown,
)
from gpuscout.workload.shape import CheckpointTensorGroup, CheckpointWeights

# The safetensors library refuses headers above 100 MB (MAX_HEADER_SIZE in safetensors/src/tensor.rs).
# gpuscout reads at most 16 MiB (docs/design.md §4.10): ~150,000 tensors at ~110 bytes each, where the
# largest public shards hold a few thousand; parsing a 100 MB header took 20 s and 1.5 GB. A length
# past the cap is a corrupt or foreign file, not a huge model.
MAX_HEADER_BYTES = 16 * 2**20

# Bits per element of every dtype the safetensors format defines (safetensors/src/tensor.rs, `Dtype`).
# Sub-byte formats (F4 = MXFP4's e2m1, F6_*) are packed, so a tensor takes ceil(elements·bits/8) bytes.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "I64": 64,
    "U64": 64,
    "F64": 64,
}

INDEX_SUFFIX = ".safetensors.index.json"
# numpy's NPY_MAXDIMS; torch allows 64 too. A longer shape is not a tensor anyone saved.
MAX_TENSOR_DIMS = 64

# Tensor-name patterns of quantized checkpoints, checked in order; the first match names the method.
# Sources: bitsandbytes `QuantState.as_dict` (absmax, quant_map, nested_absmax, quant_state.*) and
# `Int8Params` (SCB); AutoGPTQ/GPTQModel QuantLinear (qweight, qzeros, scales, g_idx); AutoAWQ WQLinear
# (qweight, qzeros, scales, no g_idx); compressed-tensors pack-quantized (weight_packed); transformers'
# mxfp4 integration for gpt-oss (`*_blocks` + `*_scales`). FP8 (weight_scale, DeepSeek's
# weight_scale_inv) is told from int8 compressed-tensors by the F8_* dtypes, in `_name_quantization`.
_NAME_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "bitsandbytes-4bit",
        re.compile(r"\.(absmax|quant_map|nested_absmax|nested_quant_map)$|\.quant_state\."),
    ),
    ("bitsandbytes-8bit", re.compile(r"\.SCB$")),
    ("gptq", re.compile(r"\.g_idx$")),
    ("awq", re.compile(r"\.(qweight|qzeros)$")),
    ("compressed-tensors", re.compile(r"\.weight_packed$")),
    ("mxfp4", re.compile(r"_blocks$")),
)
_SCALE_PATTERN = re.compile(r"\.(weight_scale|weight_scale_inv|input_scale)$")


class SafetensorsTensor(NamedTuple):
    """One tensor a safetensors header declares.

    A plain tuple, not a pydantic model: a header may declare 150,000 tensors, `_parse_entry` has
    checked every field, and a model per tensor cost more than parsing the JSON. What gpuscout
    keeps, `CheckpointWeights`, is a pydantic model.
    """

    name: str
    dtype: str
    elements: int
    bytes: int


def read_checkpoint_weights(directory: Path) -> CheckpointWeights:
    """Exact tensor bytes of the safetensors checkpoint in `directory`, grouped by dtype.

    With a `*.safetensors.index.json`, only the shards its weight_map names are read (a repo may also
    hold a consolidated copy of the same weights). `directory` may also be a single .safetensors file.
    `total_bytes` counts tensor data only, not the few-kilobyte headers.
    """
    files = _checkpoint_files(Path(directory))
    tensors = [tensor for path in files for tensor in read_safetensors_header(path)]
    return CheckpointWeights(
        path=str(directory),
        files=len(files),
        total_bytes=sum(t.bytes for t in tensors),
        by_dtype=_group_by_dtype(tensors),
        quantization=_config_quantization(Path(directory)) or _name_quantization(tensors),
    )


def read_safetensors_header(path: Path) -> list[SafetensorsTensor]:
    """The tensors one safetensors file declares, validated against the file size."""
    file_bytes, raw = _read_header_bytes(path)
    header = _parse_header_json(path, raw)
    data_bytes = file_bytes - 8 - len(raw)
    return [_parse_entry(path, name, entry, data_bytes) for name, entry in header.items() if name != "__metadata__"]


def _read_header_bytes(path: Path) -> tuple[int, bytes]:
    """The file size and the raw JSON header, after checking the declared length against the cap and the file.

    Only a regular file is opened (gpuscout.userfile); the messages give sizes, never the bytes read.
    """
    fix = "Check that the file exists and is readable by this user."
    with open_user_file(path, "safetensors file", fix) as (handle, file_bytes):
        try:
            prefix = read_bounded(handle, 8)
            if len(prefix) < 8:
                raise _bad_file(path, f"the file is {len(prefix)} bytes, shorter than the 8-byte header length")
            (header_bytes,) = struct.unpack("<Q", prefix)
            if header_bytes > file_bytes - 8:
                raise _bad_file(path, f"its 8-byte length prefix declares a header longer than the {file_bytes:,}-byte "
                                "file")
            if header_bytes > MAX_HEADER_BYTES:
                raise _bad_file(path, f"its 8-byte length prefix declares a header over gpuscout's "
                                f"{MAX_HEADER_BYTES // 2**20} MiB limit (docs/design.md §4.10)")
            raw = read_bounded(handle, header_bytes)
        except OSError as exc:
            raise SpecError(f"Cannot read the safetensors file {path}.",
                            f"The operating system refused: {exc.strerror or exc}.", fix) from None
    if len(raw) < header_bytes:
        raise _bad_file(path, "the file ended inside its header (it shrank while being read)")
    return file_bytes, raw


def _parse_header_json(path: Path, raw: bytes) -> dict[str, Any]:
    fix = "Re-download the file, or remove it from the checkpoint directory."
    try:
        header = parse_user_json(decode_user_text(raw, f"The header of {path}", fix), f"The header of {path}", fix)
    except SpecError as exc:
        raise _bad_file(path, f"its header is not valid UTF-8 JSON: {exc.what}") from None
    if not isinstance(header, dict):
        raise _bad_file(path, f"its header is a JSON {type(header).__name__}, not an object")
    return header


def _parse_entry(path: Path, name: str, entry: object, data_bytes: int) -> SafetensorsTensor:
    if not isinstance(entry, dict):
        raise _bad_file(path, f"tensor {shown(name)} is described by a {type(entry).__name__}, not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or not 0 < len(dtype) <= 32:
        raise _bad_file(path, f"tensor {shown(name)} has no string 'dtype' (a dtype name of at most 32 characters)")
    if not (_is_int_list(shape) and len(shape) <= MAX_TENSOR_DIMS):
        raise _bad_file(path, f"tensor {shown(name)} has no 'shape' list of at most {MAX_TENSOR_DIMS} non-negative "
                        "integers")
    if not (_is_int_list(offsets) and len(offsets) == 2):
        raise _bad_file(path, f"tensor {shown(name)} has no 'data_offsets' pair of non-negative integers")
    if not offsets[0] <= offsets[1] <= data_bytes:
        raise _bad_file(path, f"tensor {shown(name)} has 'data_offsets' {shown(offsets)} outside the "
                        f"{data_bytes:,}-byte data area")
    elements = math.prod(shape)
    size = offsets[1] - offsets[0]
    bits = DTYPE_BITS.get(dtype)
    expected = None if bits is None else (elements * bits + 7) // 8  # integer ceil, exact for any size
    if expected is not None and size != expected:
        raise _bad_file(
            path,
            f"tensor {shown(name)} ({shown(dtype)}, shape {shown(shape)}) should take {expected:,} bytes but its "
            f"data_offsets span {size:,}",
        )
    return SafetensorsTensor(name=name, dtype=dtype, elements=elements, bytes=size)


def _is_int_list(value: object) -> TypeGuard[list[int]]:
    # `type(v) is int` leaves out bool (an int subclass): JSON true/false is never a valid size.
    return type(value) is list and all(type(v) is int and v >= 0 for v in value)


def _checkpoint_files(path: Path) -> list[Path]:
    if path.is_file() and path.suffix == ".safetensors":
        return [path]
    if not path.is_dir():
        raise SpecError(
            f"Checkpoint directory {path} does not exist or is not a directory.",
            "gpuscout reads the *.safetensors files inside a model directory.",
            "Pass the folder that holds config.json and the *.safetensors files.",
        )
    indexes = sorted(path.glob("*" + INDEX_SUFFIX))
    if len(indexes) > 1:
        raise SpecError(
            f"Checkpoint directory {path} holds {len(indexes)} safetensors index files.",
            f"Each of {', '.join(i.name for i in indexes)} names a different set of shards.",
            "Move the unused index (and its shards) out of the directory.",
        )
    if indexes:
        return _indexed_shards(indexes[0])
    files = sorted(p for p in path.glob("*.safetensors") if p.is_file())
    if not files:
        raise SpecError(
            f"No *.safetensors files in {path}.",
            _no_files_reason(path),
            "Point at a directory with safetensors weights, or convert .bin weights with "
            "`model.save_pretrained(dir, safe_serialization=True)`.",
        )
    return files


def _no_files_reason(path: Path) -> str:
    nested = sorted({p.parent.name for p in path.glob("*/*.safetensors")})
    if nested:
        # A diffusers pipeline keeps each component (unet, vae, text_encoder …) in its own folder.
        return f"The weights are in subfolders ({', '.join(nested)}); read one component folder at a time."
    return "gpuscout reads safetensors headers only; pickled .bin/.pt weights cannot be sized unloaded."


def _indexed_shards(index: Path) -> list[Path]:
    fix = "Re-download the index file, or delete it to read every *.safetensors file in the directory."
    document = read_user_json(index, "shard index", fix, max_bytes=MAX_SPEC_BYTES)
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise SpecError(
            f"Cannot read the shard index {index}.",
            "It is not JSON with a 'weight_map' object of tensor name -> shard file name.",
            fix,
        )
    shards = [_shard_path(index, name) for name in sorted(set(weight_map.values()))]
    missing = [s.name for s in shards if not s.exists()]
    if missing:
        names = [m if m.isprintable() and len(m) <= 80 else shown(m) for m in missing[:10]]
        shown_missing = ", ".join(names) + (f" … ({len(missing)} in all)" if len(missing) > 10 else "")
        raise SpecError(
            f"Checkpoint {index.parent} lacks {len(missing)} of {len(shards)} shards: {shown_missing}.",
            f"{index.name} names these files, but they are not in the directory (an interrupted download?).",
            "Download the missing shards (e.g. `huggingface-cli download REPO --local-dir DIR`).",
        )
    return shards


def _shard_path(index: Path, name: str) -> Path:
    """The shard an index names, which must be a *.safetensors file inside the model folder.

    The name may not be absolute or climb out with '..', and where it leads after following
    symlinks must stay inside the folder, or inside the Hugging Face cache's `blobs/` folder that
    a `snapshots/<revision>/` folder links into (huggingface_hub's cache layout).
    """
    folder = index.parent
    relative = PurePath(name) if name and "\0" not in name else None
    if (relative is None or relative.is_absolute() or ".." in relative.parts or not name.endswith(".safetensors")
            or len(os.fsencode(name)) > 4096):
        raise _escaping_shard(index, name, "it is not the name of a .safetensors file inside the model folder")
    shard = folder / relative
    try:
        target, roots = shard.resolve(), _allowed_roots(folder)
    except (OSError, RuntimeError):  # a symlink loop
        raise _escaping_shard(index, name, "following its symbolic links never ends") from None
    if not any(target.is_relative_to(root) for root in roots):
        raise _escaping_shard(index, name, "it is a symbolic link that leads out of the model folder")
    return shard


def _allowed_roots(folder: Path) -> list[Path]:
    absolute = Path(os.path.abspath(folder))
    roots = [folder.resolve()]
    if absolute.parent.name == "snapshots":
        roots.append((absolute.parent.parent / "blobs").resolve())
    return roots


def _escaping_shard(index: Path, name: str, why: str) -> SpecError:
    return SpecError(
        f"The shard index {index} names the shard {shown(name)}, which gpuscout will not read: {why}.",
        "An index may only name safetensors files in its own model folder; anything else could make "
        "gpuscout read files the model does not own.",
        "Re-download the index file, or delete it to read every *.safetensors file in the directory.",
    )


def _group_by_dtype(tensors: Sequence[SafetensorsTensor]) -> tuple[CheckpointTensorGroup, ...]:
    groups: dict[str, list[SafetensorsTensor]] = {}
    for tensor in tensors:
        groups.setdefault(tensor.dtype, []).append(tensor)
    rows = [
        CheckpointTensorGroup(
            dtype=dtype,
            tensors=len(members),
            elements=sum(t.elements for t in members),
            bytes=sum(t.bytes for t in members),
        )
        for dtype, members in groups.items()
    ]
    return tuple(sorted(rows, key=lambda row: (-row.bytes, row.dtype)))


def _config_quantization(directory: Path) -> str | None:
    """The method `config.json`'s quantization_config names (transformers `QuantizationMethod`)."""
    config_path = directory / "config.json"
    if not config_path.is_file():
        return None
    config = read_user_json(config_path, "model config", "Re-download config.json from the model repository.")
    quant = config.get("quantization_config") if isinstance(config, dict) else None
    if not isinstance(quant, dict):
        return None
    method = quant.get("quant_method")
    # Old bitsandbytes configs carry only the load_in_* flags, without quant_method.
    if method in (None, "bitsandbytes"):
        if quant.get("load_in_4bit"):
            return "bitsandbytes-4bit"
        if quant.get("load_in_8bit"):
            return "bitsandbytes-8bit"
    return str(method) if method else None


def _name_quantization(tensors: Sequence[SafetensorsTensor]) -> str | None:
    """The quantization method the tensor names betray, when config.json does not say."""
    for method, pattern in _NAME_PATTERNS:
        if any(pattern.search(t.name) for t in tensors):
            return method
    if any(t.dtype.startswith("F8_") for t in tensors):
        return "fp8"
    if any(_SCALE_PATTERN.search(t.name) for t in tensors):
        return "compressed-tensors"  # per-channel scales with int8 weights
    return None


def _bad_file(path: Path, why: str) -> SpecError:
    return SpecError(
        f"{path} is not a readable safetensors file.",
        why[:1].upper() + why[1:],
        "Re-download the file (it may be truncated or not a safetensors file), "
        "or remove it from the checkpoint directory.",
    )


def checkpoint_hash(directory: Path) -> str:
    """sha256 over the checkpoint's files: each name, size and safetensors header, in name order.

    A header lists every tensor's name, dtype, shape and byte offsets, so two checkpoints with the
    same hash hold the same tensors in the same layout; hashing every weight byte of a 16 GB model
    would take minutes, and the fairness check only needs to know the same checkpoint was run.
    """
    digest = hashlib.sha256()
    for path in sorted(_checkpoint_files(directory), key=lambda p: p.name):
        size, header = _read_header_bytes(path)
        digest.update(f"{path.name}\0{size}\0".encode())
        digest.update(header)
    return digest.hexdigest()
