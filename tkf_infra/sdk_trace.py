"""Record only the frame that created a resource, not the whole Python stack, with each registration.

Why: the Pulumi Python SDK (3.260.0, `pulumi.runtime.resource._get_stack_trace`) walks and formats the
entire interpreter stack for every resource — with linecache reads and a `file://` URI per frame —
and sends it with the registration; the engine parses every frame, keeps them in each resource's
goal, copies them into every step event and writes them into the state. For this program that is
some 25 frames per resource (the language host, the program, the component constructors), of which
only the first — the line that constructed the resource — is ever shown (the engine's source
position, which the SDK derives from that same first frame). Keeping just that frame keeps every
source position as it was and removes the rest of the work (docs/performance.md, "Choices these figures rest on").
"""

from __future__ import annotations

import pathlib
import sys
from types import FrameType

from pulumi.runtime import resource as _sdk_resource
from pulumi.runtime.proto import source_pb2

#: The SDK function replaced; `tests/test_sdk_trace.py` fails if the SDK renames or drops it.
SDK_FUNCTION = "_get_stack_trace"
#: The SDK's own function, kept so the parity test can compare against it after the swap.
SDK_STACK_TRACE = getattr(_sdk_resource, SDK_FUNCTION)
_URIS: dict[str, str] = {}


def _constructor_caller(frame: FrameType | None) -> FrameType | None:
    """The frame that called the concrete resource's constructor, found as the SDK finds it.

    The SDK counts `__init__` frames outward from itself: Resource, Custom/ComponentResource, then the
    concrete class; the frame beyond the third is the user code that built the resource.
    """
    seen = 0
    while frame is not None:
        if frame.f_code.co_name == "__init__":
            seen += 1
            if seen == 3:
                return frame.f_back
        frame = frame.f_back
    return None


def creation_frame_only() -> source_pb2.StackTrace:
    """The SDK's stack trace cut to its first frame (the one its source position is taken from)."""
    caller = _constructor_caller(sys._getframe(1))
    if caller is None:
        return source_pb2.StackTrace()
    filename = caller.f_code.co_filename
    uri = _URIS.get(filename)
    if uri is None:
        try:
            uri = pathlib.Path(filename).as_uri()
        except ValueError:  # a relative or synthetic filename: the SDK records no position either
            uri = ""
        _URIS[filename] = uri
    if not uri:
        return source_pb2.StackTrace(frames=[source_pb2.StackFrame()])
    position = source_pb2.SourcePosition(uri=uri, line=caller.f_lineno)
    return source_pb2.StackTrace(frames=[source_pb2.StackFrame(pc=position)])


def record_creation_frame_only() -> None:
    """Install `creation_frame_only` in place of the SDK's full stack walk (idempotent)."""
    setattr(_sdk_resource, SDK_FUNCTION, creation_frame_only)
