"""Open Inference Protocol (v2) tensors to Python values and back.

Checking without decoding: :func:`check_input` / :func:`check_request` raise exactly what decoding
would, for a model that takes the request itself; :func:`check_declared` checks a request against
the inputs a model declares (names, datatypes, shapes with ``-1`` wildcards, batch size).
Checking while decoding JSON: a :class:`TypedRequest` (inputs typed by datatype) made into a
request by :func:`checked_request` holds each plain numeric input as a :class:`CheckedInput`,
which checking and decoding take as checked.

Decoding (request side): :func:`decode_input` turns one ``RequestInput`` into a numpy array of
the exact dtype its datatype names, or, for ``BYTES``, into a flat ``list[bytes]`` (or
``list[str]`` when the input's parameters say ``content_type: "str"``). Every way a tensor can
be wrong (datatype, shape, element count, element type, range) raises
:class:`~podium.errors.InvalidTensor` with a message that names the input.

Encoding (response side): :func:`encode_output` turns what a model returned (numpy arrays and
scalars, Python numbers, strings, bytes, lists of them) into a ``ResponseOutput`` whose ``data`` is
always a flat Python list; :func:`encode_outputs` does it for a whole result and applies the
outputs a client asked for. A value that no OIP tensor can carry raises
:class:`~podium.errors.UnsupportedRepresentation` naming the output.

Raw tensors (the binary tensor extension of REST, ``raw_input_contents`` /
``raw_output_contents`` of gRPC): :func:`decode_raw` reads one tensor from its raw little-endian
bytes, :func:`encode_raw` writes one output's raw bytes. BOOL is one byte per element, BYTES
elements are each a 4-byte little-endian length followed by that many bytes.

Numpy has no bfloat16, so ``BF16`` tensors decode to ``float32`` arrays (JSON values are kept as
sent, not rounded to bfloat16 precision; raw ones are exact). Only :func:`encode_raw` writes
``BF16`` (a model's ``ResponseOutput`` may name it); nothing infers it from a value.

:data:`NUMPY_DTYPES` is the numpy dtype each numeric datatype decodes to (the MLServer
compatibility layer's ``NumpyCodec`` reads it too).

JSON text (:func:`json_problem`): why a body msgspec refused is not JSON, with invalid UTF-8 and
lone surrogate escapes named exactly (every route that decodes a client's JSON catches
:data:`JSON_ERRORS` and says this).

This package knows nothing about HTTP or gRPC: front ends hand it the neutral structs of
:mod:`podium.types`. It imports only numpy, msgspec, the standard library and ``podium.types`` /
``podium.errors``.

Layout (private modules; import the names below from ``podium.codecs``)::

    _inputs.py     request tensors → values: decode_input, decode_request, inputs_as_json,
                   request_builtins;
                   the same checks without decoding: check_input, check_request;
                   checked while decoded: TypedRequest, checked_request, CheckedInput
    _declared.py   a request against the tensors its model declares: check_declared
    _outputs.py    results → response tensors: encode_output(s), concat_outputs, json_default,
                   texts;
                   streamed items as one value: joined
    _raw.py        the binary tensor extension / raw contents: decode_raw, encode_raw
    _bytes.py      BYTES elements: as JSON strings or bytes, and length-prefixed raw
    _datatypes.py  the numpy mapping: datatype → dtype, dtype → datatype, raw dtypes
    _shape.py      shapes, row-major flattening of nested lists (flatten, RaggedError,
                   output_elements), the words of their errors
    _json.py       JSON text a client sent that does not decode: json_problem, JSON_ERRORS

Imports point up this list's reverse: ``_shape`` and ``_datatypes`` import no sibling,
``_bytes`` only ``_shape``.
"""

from __future__ import annotations

from ._datatypes import NUMPY_DTYPES
from ._declared import check_declared
from ._inputs import (
    CheckedInput,
    TypedRequest,
    check_input,
    check_request,
    checked_request,
    decode_input,
    decode_request,
    inputs_as_json,
    request_builtins,
)
from ._json import JSON_ERRORS, json_problem
from ._outputs import concat_outputs, encode_output, encode_outputs, joined, json_default, texts
from ._raw import decode_raw, encode_raw
from ._shape import RaggedError, flatten, output_elements

__all__ = [
    "JSON_ERRORS",
    "NUMPY_DTYPES",
    "CheckedInput",
    "RaggedError",
    "TypedRequest",
    "check_declared",
    "check_input",
    "check_request",
    "checked_request",
    "concat_outputs",
    "decode_input",
    "decode_raw",
    "decode_request",
    "encode_output",
    "encode_outputs",
    "encode_raw",
    "flatten",
    "inputs_as_json",
    "joined",
    "json_default",
    "json_problem",
    "output_elements",
    "request_builtins",
    "texts",
]
