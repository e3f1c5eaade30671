"""The account `es-broker admin` signs its requests with (RocketMQ's AclClientRPCHook).

The first of: `--access-key`/`--secret-key`, the environment (ES_BROKER_ACCESS_KEY
and ES_BROKER_SECRET_KEY), a tools.yml (`--tools-yml PATH`, else mqadmin's
`$ROCKETMQ_HOME/conf/tools.yml` when it exists) with `accessKey:`/`secretKey:`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from es_broker.acl.signing import Credentials

ACCESS_KEY_ENV = "ES_BROKER_ACCESS_KEY"
SECRET_KEY_ENV = "ES_BROKER_SECRET_KEY"
ROCKETMQ_HOME_ENV = "ROCKETMQ_HOME"
TOOLS_YML = Path("conf", "tools.yml")  # MixAll.ACL_CONF_TOOLS_FILE, under ROCKETMQ_HOME


class CredentialsError(ValueError):
    """The account to sign with is given incompletely or unreadably (never says the secret)."""


def _pair(access_key: str | None, secret_key: str | None, names: tuple[str, str]) -> Credentials:
    if not access_key and not secret_key:
        raise CredentialsError(f"{names[0]} and {names[1]} are empty")
    if not access_key:
        raise CredentialsError(f"{names[1]} given without {names[0]}")
    if not secret_key:
        raise CredentialsError(f"{names[0]} given without {names[1]}")
    return Credentials(access_key, secret_key)


def _yml_key(data: Mapping[Any, Any], key: str, path: Path) -> str | None:
    value = data.get(key)
    # SnakeYAML reads `secretKey: 12345678` (tools.yml's own example) as a number; it is the text
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None  # blank, as AclUtils.getAclRPCHook treats it
    if not isinstance(value, str):
        raise CredentialsError(f"{path}: {key} must be a string")
    return value


def read_tools_yml(path: Path) -> Credentials | None:
    """accessKey/secretKey of an mqadmin tools.yml; None if it names neither.

    A parse error names the file, line and column but never quotes the line,
    which may be the secret's.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CredentialsError(f"tools.yml {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"tools.yml {path} cannot be read: {type(exc).__name__}") from None
    import yaml  # here, not at the top: every `es-broker` command builds this parser

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise CredentialsError(f"tools.yml {path} cannot be parsed: {problem}{where}") from None
    if data is None:
        return None  # an empty file: no account, as mqadmin
    if not isinstance(data, dict):
        raise CredentialsError(
            f"tools.yml {path} cannot be parsed: not a mapping of accessKey and secretKey"
        )
    access_key, secret_key = _yml_key(data, "accessKey", path), _yml_key(data, "secretKey", path)
    if access_key is None and secret_key is None:
        return None
    return _pair(access_key, secret_key, (f"accessKey in {path}", f"secretKey in {path}"))


def admin_credentials(args: argparse.Namespace, environ: Mapping[str, str]) -> Credentials | None:
    """The account `es-broker admin` signs with: flags, else environment, else tools.yml; None: unsigned.

    One source gives both keys: a key from one and the secret from another
    would sign with a pair nobody wrote down.
    """
    access_key, secret_key = getattr(args, "access_key", None), getattr(args, "secret_key", None)
    if access_key is not None or secret_key is not None:
        return _pair(access_key, secret_key, ("--access-key", "--secret-key"))
    access_key, secret_key = (
        environ.get(ACCESS_KEY_ENV) or None,
        environ.get(SECRET_KEY_ENV) or None,
    )
    if access_key is not None or secret_key is not None:
        return _pair(access_key, secret_key, (ACCESS_KEY_ENV, SECRET_KEY_ENV))
    tools_yml = getattr(args, "tools_yml", None)
    if tools_yml is not None:
        return read_tools_yml(Path(tools_yml))
    home = environ.get(ROCKETMQ_HOME_ENV)
    if home:
        default = Path(home) / TOOLS_YML
        if default.exists():  # mqadmin signs nothing when its tools.yml is absent
            return read_tools_yml(default)
    return None


def add_credential_options(p: argparse.ArgumentParser, default: Any) -> None:
    """--access-key, --secret-key, --tools-yml; before the verb and after it."""
    p.add_argument(
        "--access-key",
        default=default,
        help=f"sign requests with this account (else ${ACCESS_KEY_ENV})",
    )
    p.add_argument(
        "--secret-key",
        default=default,
        help=f"the account's secret (else ${SECRET_KEY_ENV}; the environment keeps it out of ps)",
    )
    p.add_argument(
        "--tools-yml",
        default=default,
        metavar="PATH",
        help="an mqadmin tools.yml with accessKey/secretKey (else $ROCKETMQ_HOME/conf/tools.yml)",
    )
