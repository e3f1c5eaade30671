"""The send header's earlier home: `SendMessageRequestHeader` and its one-letter names live in
headers.py with every other request header; this name stays importable for the modules not yet
moved to it."""

from .headers import SEND_V1_FIELDS, SEND_V2_FIELDS, SendMessageRequestHeader

__all__ = ["SEND_V1_FIELDS", "SEND_V2_FIELDS", "SendMessageRequestHeader"]
