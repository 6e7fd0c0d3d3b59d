"""Element types as other tools spell them, in the trace's spelling (``float32``, …).

The PyTorch profiler names a tensor's type two ways: ``record_param_comms`` carries the
c10 ``ScalarType`` name (``Float``, ``BFloat16``), ``record_shapes`` inputs carry the
C++ type (``float``, ``c10::BFloat16``). The trace uses torch's Python names without
the ``torch.`` prefix, as the tracer writes them.
"""

from __future__ import annotations

#: canonical name -> bytes per element
ITEM_SIZE = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2": 1,
    "float8_e5m2fnuz": 1,
    "complex128": 16,
    "complex64": 8,
    "complex32": 4,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint64": 8,
    "uint32": 4,
    "uint16": 2,
    "uint8": 1,
    "bool": 1,
}

#: c10 ScalarType names (``record_param_comms`` ``dtype``)
_SCALAR_TYPE = {
    "Double": "float64",
    "Float": "float32",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Float8_e4m3fn": "float8_e4m3fn",
    "Float8_e4m3fnuz": "float8_e4m3fnuz",
    "Float8_e5m2": "float8_e5m2",
    "Float8_e5m2fnuz": "float8_e5m2fnuz",
    "ComplexDouble": "complex128",
    "ComplexFloat": "complex64",
    "ComplexHalf": "complex32",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "UInt64": "uint64",
    "UInt32": "uint32",
    "UInt16": "uint16",
    "Bool": "bool",
}

#: C++ type names (``record_shapes`` ``Input type``)
_CPP_TYPE = {
    "double": "float64",
    "float": "float32",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz",
    "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::complex<double>": "complex128",
    "c10::complex<float>": "complex64",
    "c10::complex<c10::Half>": "complex32",
    "long int": "int64",
    "long long int": "int64",
    "int": "int32",
    "short int": "int16",
    "signed char": "int8",
    "long unsigned int": "uint64",
    "unsigned int": "uint32",
    "short unsigned int": "uint16",
    "unsigned short": "uint16",
    "unsigned char": "uint8",
    "bool": "bool",
}


def canonical(name: object) -> str:
    """The trace's name of ``name`` (either spelling, or already canonical); ``""``
    when unknown."""
    if not isinstance(name, str) or not name:
        return ""
    if name in ITEM_SIZE:
        return name
    text = name.removeprefix("torch.")
    if text in ITEM_SIZE:
        return text
    return _SCALAR_TYPE.get(name) or _CPP_TYPE.get(name) or ""


def item_size(dtype: str) -> int:
    """Bytes per element of a canonical dtype; 0 when unknown."""
    return ITEM_SIZE.get(dtype, 0)
