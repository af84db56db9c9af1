"""Front ends: wire formats in, neutral types to the data plane, wire formats out.

``_asgi`` names the ASGI contract (``Scope``, ``Receive``, ``Send``, ``ASGIApp``) that the HTTP
apps (``http``, ``management``) and their middleware (``_auth``, ``_guard``) are written against.
"""

from ._asgi import ASGIApp, Message, Receive, Scope, Send
from ._guard import UnsafeExposure

__all__ = ["ASGIApp", "Message", "Receive", "Scope", "Send", "UnsafeExposure"]
