"""``mlserver.codecs``: conversions between OIP tensors and Python values, found by content type.

``PandasCodec`` imports pandas only when it first converts something (see ``pandas.py``).
"""

# isort: off
# The order registers the codecs in MLServer's order; it decides which codec wins when more
# than one can encode a payload (an empty list: StringCodec).
from .string import StringCodec, StringRequestCodec
from .numpy import NumpyCodec, NumpyRequestCodec
from .pandas import PandasCodec
from .base64 import Base64Codec
from .datetime import DatetimeCodec

# isort: on
from .base import (
    InputCodec,
    InputCodecLike,
    RequestCodec,
    RequestCodecLike,
    register_input_codec,
    register_request_codec,
)
from .decorator import decode_args
from .errors import CodecError
from .utils import (
    DecodedParameterName,
    decode_inference_request,
    decode_request_input,
    encode_inference_response,
    encode_response_output,
    get_decoded,
    get_decoded_or_raw,
    has_decoded,
)

__all__ = [
    "Base64Codec",
    "CodecError",
    "DatetimeCodec",
    "DecodedParameterName",
    "InputCodec",
    "InputCodecLike",
    "NumpyCodec",
    "NumpyRequestCodec",
    "PandasCodec",
    "RequestCodec",
    "RequestCodecLike",
    "StringCodec",
    "StringRequestCodec",
    "decode_args",
    "decode_inference_request",
    "decode_request_input",
    "encode_inference_response",
    "encode_response_output",
    "get_decoded",
    "get_decoded_or_raw",
    "has_decoded",
    "register_input_codec",
    "register_request_codec",
]
