"""Admin bearer token: where it comes from and how a request is checked against it.

The token is read from --admin-token-file, else $GPUPROBE_ADMIN_TOKEN. With neither, admin
endpoints are disabled (403): a server never invents a secret it would have to print. The
token is never logged; only its source is.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from gpuprobe.errors import UserError

ENV_VAR = "GPUPROBE_ADMIN_TOKEN"


def load_token(token_file: str | None) -> tuple[str | None, str]:
    """(token or None, a description of its source safe to log)."""
    if token_file:
        path = Path(token_file)
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise UserError(f"--admin-token-file {path}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise UserError(f"--admin-token-file {path}: not a text file") from None
        if not token:
            raise UserError(f"--admin-token-file {path}: file is empty")
        return _header_safe(token, f"--admin-token-file {path}"), f"file {path}"
    token = os.environ.get(ENV_VAR, "").strip()
    if token:
        return _header_safe(token, f"${ENV_VAR}"), f"${ENV_VAR}"
    return None, "none (admin endpoints disabled)"


def _header_safe(token: str, where: str) -> str:
    """The token travels in an HTTP header: a second line or a non-ASCII character would fail
    there, reported as the server's fault ("answered something that is not JSON")."""
    if not (token.isascii() and token.isprintable()):
        raise UserError(f"{where}: the token must be one line of printable ASCII characters")
    return token


def check(token: str | None, authorization: str | None) -> tuple[int, str] | None:
    """None when allowed, else (HTTP status, message). Constant-time comparison."""
    if token is None:
        return 403, (f"admin endpoints are disabled: start the server with --admin-token-file "
                     f"or ${ENV_VAR}")
    if not authorization or not authorization.startswith("Bearer "):
        return 401, "missing 'Authorization: Bearer <token>' header"
    given = authorization[len("Bearer "):].strip()
    if not hmac.compare_digest(given.encode(), token.encode()):
        return 401, "invalid admin token"
    return None
