"""The server's two trust boundaries: who may call it (API keys) and which files a request may make it read.

Keys travel only in `Authorization: Bearer KEY`; a key anywhere else (the URL's query string) is not looked at, so
it is refused like no key at all, and since no log line carries the query string or the headers, a key put in the
wrong place is not written down either. Keys are compared with `hmac.compare_digest` against every configured key,
so the time taken says nothing about how much of a guess was right.

An image given as a path is read only from under `--image-root`: relative, no `..` part, and its real path (symlinks
resolved) inside the root's real path. Without a root every path is refused; data URLs and base64 need no file.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import re
from urllib.parse import unquote_to_bytes

from stepcritic.serve.requests import BadRequest

BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
# shorter than any image's base64 (the smallest PNG is 67 bytes, 92 characters), so a short name is a path
MIN_BASE64_CHARS = 64


def authorized(header: bytes | None, keys: tuple) -> bool:
    """Whether an `Authorization` header value carries one of `keys` as a bearer token."""
    if header is None:
        return False
    scheme, _, token = header.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    token = token.strip()
    # every key is compared, whatever the first comparison gives
    return sum(hmac.compare_digest(token, key) for key in keys) > 0


def key_in_url(query_string: bytes, keys: tuple) -> bool:
    """Whether the URL's query string holds a key, raw or percent-encoded. Asked only of a caller that showed a
    valid key, so the timing of this search tells nothing to one who does not know a key."""
    decoded = unquote_to_bytes(query_string.replace(b"+", b" "))
    return any(key in query_string or key in decoded for key in keys)


class ImageReader:
    """Image values of a request (data URL, base64, relative path) to their bytes; `BadRequest` naming `where`."""

    def __init__(self, root: str | None, max_bytes: int):
        self.root = os.path.realpath(root) if root else None
        self.max_bytes = max_bytes

    def read(self, value, where: str) -> bytes:
        if not isinstance(value, str) or not value:
            raise BadRequest(f"{where}: expected a data URL, base64 or a relative path, got {_kind(value)}")
        if value.startswith("data:"):
            header, comma, payload = value.partition(",")
            if not comma or not header.endswith(";base64"):
                raise BadRequest(f"{where}: a data URL must be data:image/...;base64,...")
            return _b64(payload, where)
        if len(value) >= MIN_BASE64_CHARS and len(value) % 4 == 0 and BASE64.fullmatch(value):
            return _b64(value, where)
        return self._file(value, where)

    def _file(self, path: str, where: str) -> bytes:
        if self.root is None:
            raise BadRequest(f"{where}: image paths are refused (the server has no --image-root); send a data URL "
                             "or base64")
        if "\x00" in path or os.path.isabs(path) or path.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", path):
            raise BadRequest(f"{where}: an image path must be relative to the server's image root")
        if ".." in re.split(r"[\\/]", path):
            raise BadRequest(f"{where}: an image path may not contain '..'")
        real = os.path.realpath(os.path.join(self.root, path))
        if os.path.commonpath([real, self.root]) != self.root:
            raise BadRequest(f"{where}: the image path leads outside the server's image root")
        if not os.path.isfile(real):  # a folder, a device or a pipe (which would block the read) is no image
            raise BadRequest(f"{where}: no image file {path!r} under the image root")
        try:
            with open(real, "rb") as f:
                if os.fstat(f.fileno()).st_size > self.max_bytes:
                    raise BadRequest(f"{where}: the image file is larger than {self.max_bytes} bytes")
                return f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise BadRequest(f"{where}: no image file {path!r} under the image root") from None
        except OSError:
            raise BadRequest(f"{where}: the image file {path!r} cannot be read") from None


def _b64(text: str, where: str) -> bytes:
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: not valid base64") from None
    if not data:
        raise BadRequest(f"{where}: the image is empty")
    return data


def _kind(value) -> str:
    return "an empty string" if value == "" else type(value).__name__
