"""The Kafka protocol layer shared by kipproducer's broker and client engine.

kio supplies one frozen dataclass per (message, version) with the schema in its field
metadata; this package compiles those classes into fast encoders and decoders that
skip unknown tagged fields, accept any int16 error code, never fail on trailing
request bytes and report every malformed input as :class:`ProtocolError`. It adds the
kipproducer wire extensions (ProduceMode / LogEndOffset tagged fields, new error codes,
feature names), framing helpers and a builder that fills in omitted fields.

See docs/protocol-layer.md.
"""

from . import error_codes
from .builder import build, build_request, build_response, fields_of
from .decoder import decode, decoder_for
from .encoder import SPILL_MIN_BYTES, assemble_parts, encode, encode_into, encoder_for
from .error_codes import (
    ERRORS,
    ErrorInfo,
    KafkaErrorCode,
    error_code,
    error_info,
    error_name,
    is_retriable,
)
from .errors import ProtocolError
from .field_specs import normalize
from .framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameReceiver,
    FrameTooLarge,
    Request,
    RequestHeader,
    Response,
    decode_request,
    decode_request_body,
    decode_response,
    encode_request_frame,
    encode_request_frame_parts,
    encode_response_frame,
    encode_response_frame_parts,
    expects_response,
    frame_size,
    parse_request_header,
    peek_correlation_id,
    read_frame,
)
from .schemas import (
    api_name,
    known_api_keys,
    known_versions,
    request_class,
    request_header_version,
    response_class,
    response_header_version,
    version_range,
)
from .validation import validate
from .wire_extensions import (
    FEATURE_MAX_VERSION,
    FEATURE_MIN_VERSION,
    FEATURE_PRODUCE_CONDITIONAL,
    FEATURE_PRODUCE_OFFSETS,
    LOG_END_OFFSET_TAG,
    PRODUCE_MODE_TAG,
    PRODUCE_REQUEST_CLASSES,
    PRODUCE_RESPONSE_CLASSES,
    ProduceMode,
    ProduceResponseClasses,
    produce_mode_of,
)

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "ERRORS",
    "FEATURE_MAX_VERSION",
    "FEATURE_MIN_VERSION",
    "FEATURE_PRODUCE_CONDITIONAL",
    "FEATURE_PRODUCE_OFFSETS",
    "LOG_END_OFFSET_TAG",
    "PRODUCE_MODE_TAG",
    "PRODUCE_REQUEST_CLASSES",
    "PRODUCE_RESPONSE_CLASSES",
    "SPILL_MIN_BYTES",
    "ErrorInfo",
    "FrameReceiver",
    "FrameTooLarge",
    "KafkaErrorCode",
    "ProduceMode",
    "ProduceResponseClasses",
    "ProtocolError",
    "Request",
    "RequestHeader",
    "Response",
    "api_name",
    "assemble_parts",
    "build",
    "build_request",
    "build_response",
    "decode",
    "decode_request",
    "decode_request_body",
    "decode_response",
    "decoder_for",
    "encode",
    "encode_into",
    "encode_request_frame",
    "encode_request_frame_parts",
    "encode_response_frame",
    "encode_response_frame_parts",
    "encoder_for",
    "error_code",
    "error_codes",
    "error_info",
    "error_name",
    "expects_response",
    "fields_of",
    "frame_size",
    "is_retriable",
    "known_api_keys",
    "known_versions",
    "normalize",
    "parse_request_header",
    "peek_correlation_id",
    "produce_mode_of",
    "read_frame",
    "request_class",
    "request_header_version",
    "response_class",
    "response_header_version",
    "validate",
    "version_range",
]
