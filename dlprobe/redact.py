"""Credentials out of everything dlprobe records: command lines, environment variables, free text.

Pure functions on strings, imported where data is recorded (the supervisor's meta.json and attach.json, the
training process's events) and again where the report reads a run directory (an old run, or one another tool
wrote). A redacted value becomes `***`; everything else stays byte-identical.

What counts as a credential:
- an option or `NAME=value` whose name has a credential word: token, password, passwd, passphrase, pw, secret,
  credential(s), creds, cookie, bearer, apikey, auth... (`--hf-token`, `--db-password`, `--client-secret`,
  `--auth-header`, `HF_TOKEN=`, `trainer.logger.api_key=`), `pass` as its last word (`--pass`, `--db-pass`, not
  `--pass-through` nor `--single-pass`), `pwd` in an option or a longer name (`--pwd`, `DB_PWD=`, not the shell's
  current directory `PWD=`), or whose last word is `key` (`--api-key`,
  `--wandb-key`, `AWS_SECRET_ACCESS_KEY=`) unless the word before it names data (`--sort-key`, `--image-key`,
  `--rng-key`). Not when its last word says the value is about the credential rather than the credential itself
  (`--token-length 5`, `--password-file PATH`, `--key-id`, `--secret-name`), nor for a tokenizer's own tokens
  (`--pad-token`, `--eos-token`), nor plural counts (`--max-tokens 512`), nor words that only contain one
  (`--tokenizer`, `--author`, `--keys`). `--token X` redacts X unless X is itself an option (`--token --lr 1`).
  A false positive costs a `***` in the report's "to reproduce" line; a false negative, a leaked credential.
- in free text, the same names written as a config file writes them: INI `password = x` (at a line's start the
  value runs to its end), YAML `password: x` (at a line's start: `Password: incorrect`, a capitalised word, is a
  sentence, and a key mid-line is prose), a quoted JSON or dict value anywhere;
- the mysql family's password glued to `-p` (`mysql -phunter2`, and `-p X`), only in a mysql-family command: `-p` is
  a port (psql, ssh), a path or a flag (`mkdir -p`) everywhere else;
- the password of a URL (`https://user:***@host`) and secret query parameters (`?token=***`, `&sig=***`);
- well-known token shapes anywhere (`hf_***`, `ghp_***`, `sk-***`, `AKIA***`, `glpat-***`, `xoxb-***`,
  `AIza***`, JSON web tokens `eyJ***`), `Bearer ***`, and PEM private key blocks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, cast

REDACTED = "***"

# A word of a name that makes its value a credential wherever it stands in the name.
_SECRET_WORDS = frozenset(
    {
        "token",
        "password",
        "passwd",
        "passphrase",
        "pw",
        "secret",
        "secrets",
        "credential",
        "credentials",
        "creds",
        "cookie",
        "bearer",
        "apikey",
        "jwt",
    }
)
# Joined spellings (hftoken, dbpassword, clientsecret, wandbapikey, accesskey): the word ends with one of these.
_SECRET_ENDINGS = ("token", "password", "passwd", "passphrase", "secret", "apikey", "accesskey", "privatekey")
# A last word that says the value is about the credential, not the credential (--token-length 5, --password-file).
_SAFE_TAILS = frozenset(
    {
        "file",
        "files",
        "path",
        "paths",
        "dir",
        "directory",
        "length",
        "len",
        "size",
        "count",
        "num",
        "limit",
        "max",
        "min",
        "type",
        "kind",
        "name",
        "names",
        "id",
        "ids",
        "idx",
        "index",
        "env",
        "var",
        "format",
        "mode",
        "cmd",
        "command",
        "helper",
        "url",
        "uri",
        "host",
        "port",
        "endpoint",
        "timeout",
        "ttl",
        "expiry",
        "scope",
        "scopes",
        "provider",
        "method",
        "version",
    }
)
# A tokenizer's own tokens are vocabulary, not credentials: --pad-token "<pad>", --eos_token "</s>".
# A key that names data, not a credential: --sort-key, --image-key jpg, JAX's --rng-key 0.
_DATA_KEYS = frozenset(
    {"sort", "primary", "foreign", "partition", "group", "join", "dict", "image", "label", "text", "input", "output",
     "target", "data", "dataset", "column", "field", "metric", "monitor", "batch", "sample", "feature", "map",
     "lookup", "cache", "shard", "rng", "prng", "random", "seed", "hash"}
)  # fmt: skip
_VOCABULARY = frozenset({"pad", "eos", "bos", "unk", "sep", "cls", "mask", "special", "start", "end", "stop", "chat"})
# `pass` names a password only as the name's last word (--pass, --db-pass), and not a pass of an algorithm
# (--single-pass, --two-pass, --forward-pass); --pass-through is a flag
_PASS_COUNTS = frozenset(
    {"single", "one", "two", "multi", "first", "second", "final", "last", "fast", "full", "sub", "by", "forward",
     "backward", "high", "low", "band", "skip", "no", "each", "per"}
)  # fmt: skip

# Patterns are compiled on first use (re caches them): this module is imported by every training process at
# start-up, and most command lines need none of them.
_WORD_SPLIT = r"[^a-z0-9]+"
_CAMEL = r"(?<=[a-z0-9])(?=[A-Z])"


def _words(name: str) -> list[str]:
    return [w for w in re.split(_WORD_SPLIT, re.sub(_CAMEL, "_", name).lower()) if w]


def _is_auth(word: str) -> bool:
    # auth, authtoken, authorization, authentication; not author(s)
    return word.startswith("auth") and (not word.startswith("author") or word.startswith("authoriz"))


def is_secret_name(name: str) -> bool:
    """The option or variable name (`--hf-token`, `HF_TOKEN`, `trainer.api_key`) holds a credential."""
    words = _words(name)
    if not words or words[-1] in _SAFE_TAILS:
        return False
    if words[-1] == "key" and len(words) > 1 and words[-2] in _DATA_KEYS:
        return False
    if words[-1] == "key" or words[-1].endswith(("apikey", "accesskey", "privatekey", "secretkey", "authkey")):
        return True
    if words[-1] == "pass" and (len(words) == 1 or words[-2] not in _PASS_COUNTS):
        return True
    # the shell's PWD (and OLDPWD) is the current directory; --pwd, DB_PWD a password
    if "pwd" in words and (len(words) > 1 or name.lstrip().startswith("-")):
        return True
    for i, word in enumerate(words):
        if word == "token" and i > 0 and words[i - 1] in _VOCABULARY:
            continue
        if word in _SECRET_WORDS or word.endswith(_SECRET_ENDINGS) or _is_auth(word):
            return True
    return False


# --- shapes in free text ------------------------------------------------------------------------------------

# Tokens whose shape names them, kept recognisable by their prefix (hf_***). Lengths and character classes follow
# each issuer's format, long enough that a file name or a word never matches.
_TOKEN_SHAPES = (
    r"(?<![A-Za-z0-9])(?P<p>hf_)[A-Za-z0-9]{30,}",
    r"(?<![A-Za-z0-9])(?P<p>gh[pousr]_)[A-Za-z0-9]{30,}",
    r"(?<![A-Za-z0-9])(?P<p>github_pat_)[A-Za-z0-9_]{40,}",
    r"(?<![A-Za-z0-9])(?P<p>glpat-)[A-Za-z0-9_-]{20,}",
    # OpenAI/Anthropic style: random letters and digits of both cases (a path like sk-learn-runs-2024 has no capital)
    r"(?<![A-Za-z0-9_-])(?P<p>sk-)(?=[A-Za-z0-9_-]*[A-Z])(?=[A-Za-z0-9_-]*[a-z])(?=[A-Za-z0-9_-]*[0-9])"
    r"[A-Za-z0-9_-]{32,}",
    r"(?<![A-Za-z0-9])(?P<p>(?:sk|rk)_(?:live|test)_)[A-Za-z0-9]{20,}",
    r"(?<![A-Z0-9])(?P<p>(?:AKIA|ASIA))[A-Z0-9]{16}(?![A-Z0-9])",
    r"(?<![A-Za-z0-9])(?P<p>AIza)[0-9A-Za-z_-]{35}",
    r"(?<![A-Za-z0-9])(?P<p>xox[abposr]-)[A-Za-z0-9-]{10,}",
    r"(?<![A-Za-z0-9])(?P<p>npm_)[A-Za-z0-9]{36}",
    r"(?<![A-Za-z0-9_-])(?P<p>eyJ)[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
)
# scheme://user:password@host -> scheme://user:***@host (the password runs to the last @ before the path)
_URL_PASSWORD = r"(?P<url>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s]*):(?P<pw>[^/?#\s]*)@"
# ?token=...&sig=... in a URL
_QUERY = r"(?P<q>[?&;])(?P<qname>[A-Za-z0-9_.\-]+)=(?P<qval>[^&;#\s\"'<>]*)"
_QUERY_NAMES = frozenset({"sig", "signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token", "code"})
# `Authorization: Basic dXNlcjpwdw==`, `Bearer eyJ...`: a Bearer value needs a digit and some length, so prose
# ("bearer authentication") stays
_AUTHZ = (
    r"(?P<authz>\b[Aa]uthorization[\"']?\s*[:=]\s*[\"']?(?:(?:[Bb]earer|[Bb]asic|[Tt]oken)\s+)?)"
    r"[A-Za-z0-9._~+/-]+=*"
)
_BEARER = r"(?P<bearer>\b(?:[Bb]earer|BEARER)\s+)(?=[A-Za-z0-9._~+/-]*[0-9])[A-Za-z0-9._~+/-]{16,}=*"
_PEM = r"-----BEGIN (?P<pem>[A-Z0-9 ]*PRIVATE KEY)-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----"
# In free text: --name=value, --name value, NAME=value (a secret name, see is_secret_name)
_VALUE = r"(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s,;&'\"()\[\]{}<>]+)"
_TEXT_OPTION = r"(?P<opt>(?<![\w-])--?[A-Za-z][A-Za-z0-9_.\-]*)(?P<sep>=|[ \t]+)(?P<optval>" + _VALUE + ")"
_TEXT_ASSIGN = r"(?P<name>(?<![\w.\-/])[A-Za-z_][A-Za-z0-9_.\-]*)=(?P<val>" + _VALUE + ")"
# `password = x` with spaces around `=`: at a line's start (an INI file, a config printed by the script) the value
# runs to the line's end; mid-line one word, and not a call or a subscript (`token = tok(x)`, `key = keys[i]`: the
# source line of a traceback, not a credential); never `==`
_INI_LINE = r"^(?P<iname>[A-Za-z_][A-Za-z0-9_.\-]*)(?P<isep>[ \t]+=[ \t]*|=[ \t]+)(?!=)(?P<ival>[^\s][^\n]*?)[ \t]*$"
_SPACED_ASSIGN = (
    r"(?P<sname>(?<![\w.\-/])[A-Za-z_][A-Za-z0-9_.\-]*)(?P<ssep>[ \t]+=[ \t]*|=[ \t]+)(?!=)"
    r"(?P<sval>" + _VALUE + r")(?![^\s,;&'\"()\[\]{}<>]|[ \t]*[(\[])"
)
# YAML, at a line's start (indented, or a list item): `password: hunter2`, `DB_PASSWORD: x` (value to the line's end,
# less a ` # comment`). A key as YAML writes them, lower case or all capitals: `Password: incorrect` is a sentence.
_YAML_LINE = (
    r"^(?P<yhead>[ \t]*(?:-[ \t]+)?)(?P<ykey>[a-z_][A-Za-z0-9_.\-]*|[A-Z][A-Z0-9_]*)(?P<ysep>:[ \t]+)"
    r"(?P<yval>[^\s#][^\n]*?)(?P<ytail>[ \t]+#[^\n]*)?[ \t]*$"
)
# JSON, YAML or a dict's repr: "api_key": "abc", 'token': 'abc' (a quoted value only: prose like
# "password: incorrect" stays)
_TEXT_KEYED = (
    r"(?P<kq>[\"']?)(?P<key>(?<![\w.\-])[A-Za-z_][A-Za-z0-9_.\-]*)(?P=kq)(?P<ksep>\s*:\s*)"
    r"(?P<kval>\"[^\"\n]*\"|'[^'\n]*')"
)


@cache
def _text_pattern() -> re.Pattern[str]:
    # one group per shape for its prefix (p0, p1, ...): a group name may be used once in a pattern
    shapes = [f"(?:{shape.replace('(?P<p>', f'(?P<p{i}>')})" for i, shape in enumerate(_TOKEN_SHAPES)]
    parts = [_PEM, _URL_PASSWORD, _QUERY, _AUTHZ, _BEARER, *shapes]
    return re.compile("|".join(parts), re.DOTALL)


@cache
def _named_pattern() -> re.Pattern[str]:
    # the line forms first: at a line's start they take the whole value, spaces and all
    return re.compile(
        f"{_YAML_LINE}|{_INI_LINE}|{_TEXT_OPTION}|{_TEXT_ASSIGN}|{_SPACED_ASSIGN}|{_TEXT_KEYED}", re.MULTILINE
    )


def _quoted(value: str) -> str:
    """*** in the value's own quotes, so the text around it still reads."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[0] + REDACTED + value[0]
    return REDACTED


def _shape(match: re.Match[str]) -> str:
    if match["pem"] is not None:
        return f"-----BEGIN {match['pem']}----- {REDACTED} -----END {match['pem']}-----"
    if match["url"] is not None:
        return f"{match['url']}:{REDACTED}@"
    if match["q"] is not None:
        name = match["qname"]
        if match["qval"] and (is_secret_name(name) or name.lower() in _QUERY_NAMES):
            return f"{match['q']}{name}={REDACTED}"
        return match.group(0)
    if match["authz"] is not None:
        return match["authz"] + REDACTED
    if match["bearer"] is not None:
        return match["bearer"] + REDACTED
    prefix = next(value for name, value in match.groupdict().items() if name[0] == "p" and name[1:].isdigit() and value)
    return prefix + REDACTED


# What every shape needs somewhere in the text: without one of these the text is returned as it is, unscanned.
_MARKERS = ("://", "earer", "EARER", "uthorization", "PRIVATE KEY", "hf_", "gh", "_pat_", "glpat-", "sk-", "sk_",
            "rk_", "AKIA", "ASIA", "AIza", "xox", "npm_", "eyJ")  # fmt: skip


def _may_hold_shape(text: str) -> bool:
    if any(marker in text for marker in _MARKERS):
        return True
    return "=" in text and ("?" in text or "&" in text or ";" in text)  # a query string


def redact_shapes(text: str) -> str:
    """URL passwords, secret query parameters, Bearer values, private keys and well-known token shapes."""
    if not text or not _may_hold_shape(text):
        return text
    return _text_pattern().sub(_shape, text)


def _named(match: re.Match[str]) -> str:
    if match["ykey"] is not None:
        if not is_secret_name(match["ykey"]):
            return match.group(0)
        return f"{match['yhead']}{match['ykey']}{match['ysep']}{_quoted(match['yval'])}{match['ytail'] or ''}"
    if match["iname"] is not None:
        value = match["ival"]
        if not is_secret_name(match["iname"]) or re.match(r"[\w.]+[ \t]*[(\[]", value):
            return match.group(0)
        return f"{match['iname']}{match['isep']}{_quoted(value)}"
    if match["sname"] is not None:
        # a bare `key = i` mid-line is code more often than a credential
        if not is_secret_name(match["sname"]) or _words(match["sname"]) == ["key"]:
            return match.group(0)
        return f"{match['sname']}{match['ssep']}{_quoted(match['sval'])}"
    if match["opt"] is not None:
        value = match["optval"]
        if not is_secret_name(match["opt"]) or (match["sep"] != "=" and value.startswith("-")):
            return match.group(0)
        return f"{match['opt']}{match['sep']}{_quoted(value)}"
    if match["key"] is not None:
        if not is_secret_name(match["key"]):
            return match.group(0)
        return f"{match['kq']}{match['key']}{match['kq']}{match['ksep']}{_quoted(match['kval'])}"
    if not is_secret_name(match["name"]):
        return match.group(0)
    return f"{match['name']}={_quoted(match['val'])}"


def redact_text(text: str) -> str:
    """Free text (an exception message, a log's tail, a shell command): the shapes above, and the values of
    credential options, assignments and quoted keys written in it (`--token abc`, `api_key='abc'`, `HF_TOKEN=abc`,
    `{"api_key": "abc"}`)."""
    if not text:
        return text
    return _redact_mysql(_named_pattern().sub(_named, redact_shapes(text)))


# --- the mysql family's -p ------------------------------------------------------------------------------------

# mysql, mysqldump, mysqladmin... and MariaDB's take the password glued to -p (`-phunter2`). A spaced `-p X` is, to
# mysql itself, a prompt and a database named X, but people write it, and a database name starred costs little.
# Only in such a command: elsewhere -p is a port (psql, ssh, `python -m http.server -p 8080`), a path or a flag
# (`mkdir -p`, `cp -p`, `tar -pxf`), and starring it would hide what the report needs.
_MYSQL_FAMILY = frozenset(
    {"mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump", "mysqlslap",
     "mysqlbinlog", "mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import", "mariadb-show", "mariadb-check"}
)  # fmt: skip
# a mysql-family command in text, to the end of that command (a pipe, `;`, `&`, a line's end)
_MYSQL_COMMAND = (
    r"(?<![\w.\-])(?:[\w.\-]*/)*(?:mysql(?:dump|admin|import|show|check|pump|slap|binlog)?|"
    r"mariadb(?:-dump|-admin|-import|-show|-check)?)(?![\w.\-])[^\n|;&]*"
)
# -pSECRET or -p SECRET (not -p --next-option); quotes of the value kept
_MYSQL_P = (
    r"(?<![^\s\"'])-p(?:(?P<glued>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+)"
    r"|(?P<gap>[ \t]+)(?P<spaced>\"[^\"\n]*\"|'[^'\n]*'|[^\s\-\"'][^\s]*))"
)


def _mysql_p(match: re.Match[str]) -> str:
    if match["glued"] is not None:
        return "-p" + _quoted(match["glued"])
    return f"-p{match['gap']}{_quoted(match['spaced'])}"


def _redact_mysql(text: str) -> str:
    if "mysql" not in text and "mariadb" not in text:
        return text
    return re.sub(_MYSQL_COMMAND, lambda m: re.sub(_MYSQL_P, _mysql_p, m.group(0)), text)


# --- command lines and environments ---------------------------------------------------------------------------

_NAME = r"[+~]{0,2}-{0,2}[A-Za-z_][A-Za-z0-9_.\-/]*"  # NAME of NAME=value: --opt, HF_TOKEN, +trainer.api_key
_OPTION = r"-{1,2}[A-Za-z][A-Za-z0-9_.\-]*"


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line, word by word: `--token X`, `--token=X`, `HF_TOKEN=X`, `trainer.api_key=X` lose X; URL
    passwords and token shapes are redacted in any word; every other word is returned unchanged."""
    out: list[str] = []
    value_next = False
    mysql = False  # in a mysql-family command: its -p is the password (see _MYSQL_FAMILY)
    for word in argv:
        if value_next:
            value_next = False
            if not word.startswith("--"):  # `--use-auth --epochs 3`: a flag, not an option with a value
                out.append(REDACTED)
                continue
        if mysql and word.startswith("-p") and not word.startswith("-p-"):
            if word == "-p":
                value_next = True
                out.append(word)
            else:
                out.append("-p" + REDACTED)
            continue
        mysql = mysql or word.rsplit("/", 1)[-1] in _MYSQL_FAMILY
        name, equals, _value = word.partition("=")
        if equals and is_secret_name(name) and re.fullmatch(_NAME, name):
            out.append(f"{name}={REDACTED}")
            continue
        if not equals and word.startswith("-") and is_secret_name(word) and re.fullmatch(_OPTION, word):
            value_next = True
            out.append(word)
            continue
        # a word with spaces is a command of its own (`bash -c "python train.py --token X"`), one with quotes
        # JSON (`--config '{"api_key":"X"}'`): read as text
        text_like = any(c.isspace() for c in word) or '"' in word or "'" in word
        out.append(redact_text(word) if text_like else redact_shapes(word))
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Environment variables: a credential's name (HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY) hides its value;
    other values lose URL passwords and token shapes."""
    return {name: REDACTED if is_secret_name(name) else redact_shapes(value) for name, value in env.items()}


# --- records ---------------------------------------------------------------------------------------------------

# The fields of an event (and of what it nests) that copy free text from the script: an exception's message, a
# worker's error as the sample check got it loading the index alone (`error_alone`, `control_error`), why a check
# could not say (`reason`, which may quote that error), a launcher's summary. Their values are read as text.
TEXT_FIELDS = frozenset(
    {"message", "cause", "error", "error_alone", "control_error", "reason", "detail", "summary", "inspect_error",
     "bounded", "hint", "consequence", "notes", "problem", "why"}
)  # fmt: skip
_MAX_DEPTH = 8


def redact_fields(record: dict[str, Any]) -> dict[str, Any]:
    """The record with the strings under TEXT_FIELDS (at any depth) redacted as text; everything else, and the
    record itself where nothing changed, as given (a caller's nested dicts are never changed in place)."""
    return cast(dict[str, Any], _fields(record, False, 0))


def _fields(value: Any, text: bool, depth: int) -> Any:
    if isinstance(value, str):
        return redact_text(value) if text else value
    if depth > _MAX_DEPTH:
        return value
    if isinstance(value, dict):
        out = None
        for key, item in value.items():
            new = _fields(item, key in TEXT_FIELDS, depth + 1)
            if new is not item:
                out = dict(value) if out is None else out
                out[key] = new
        return value if out is None else out
    if isinstance(value, (list, tuple)):
        items = [_fields(item, text, depth + 1) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else type(value)(items)
    return value
