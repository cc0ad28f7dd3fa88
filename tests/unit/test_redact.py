"""dlprobe/redact.py: credentials out of recorded command lines, environments and text; everything else unchanged."""

from __future__ import annotations

import pytest

from dlprobe.redact import is_secret_name, redact_argv, redact_env, redact_shapes, redact_text

HF = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567"
GHP = "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
OPENAI = "sk-proj-" + "Ab3dEfGhIjKlMnOpQrStUvWxYz0123456789abcd"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--token=SECRET1"], ["--token=***"]),
        (["--token", "SECRET1"], ["--token", "***"]),
        (["--password", "pw"], ["--password", "***"]),
        (["--api-key", "abc"], ["--api-key", "***"]),
        (["--api_key=abc"], ["--api_key=***"]),
        (["--apiKey", "abc"], ["--apiKey", "***"]),
        (["--secret", "s"], ["--secret", "***"]),
        (["--client-secret=s"], ["--client-secret=***"]),
        (["--auth", "u:p"], ["--auth", "***"]),
        (["--auth-token", "t"], ["--auth-token", "***"]),
        (["--authorization", "t"], ["--authorization", "***"]),
        (["--hf-token", "t"], ["--hf-token", "***"]),
        (["--hf_token=t"], ["--hf_token=***"]),
        (["--wandb-key", "k"], ["--wandb-key", "***"]),
        (["--db-passwd", "k"], ["--db-passwd", "***"]),
        (["--hftoken", "k"], ["--hftoken", "***"]),
        (["-token", "k"], ["-token", "***"]),
        (["HF_TOKEN=t"], ["HF_TOKEN=***"]),
        (["WANDB_API_KEY=k"], ["WANDB_API_KEY=***"]),
        (["AWS_SECRET_ACCESS_KEY=k"], ["AWS_SECRET_ACCESS_KEY=***"]),
        (["DB_PASSWORD=k", "PGPASSWORD=k"], ["DB_PASSWORD=***", "PGPASSWORD=***"]),
        (["MY_SECRET_THING=k"], ["MY_SECRET_THING=***"]),
        (["trainer.logger.api_key=k", "+wandb.key=k"], ["trainer.logger.api_key=***", "+wandb.key=***"]),
        # the value of a credential option is redacted whatever it looks like, even a path or a number
        (["--token", "/tmp/x", "--lr", "1"], ["--token", "***", "--lr", "1"]),
        # a flag followed by another option: nothing to hide
        (["--use-auth", "--epochs", "3"], ["--use-auth", "--epochs", "3"]),
        (["--token"], ["--token"]),
        (["--data", "https://user:pw@host/x"], ["--data", "https://user:***@host/x"]),
        (["s3://bucket/x?X-Amz-Signature=abc&n=1"], ["s3://bucket/x?X-Amz-Signature=***&n=1"]),
        (["https://h/x?token=abc&page=2"], ["https://h/x?token=***&page=2"]),
        ([HF, f"--model={GHP}", OPENAI, AWS], ["hf_***", "--model=ghp_***", "sk-***", "AKIA***"]),
        (["bash", "-c", "python train.py --token abc --lr 1"], ["bash", "-c", "python train.py --token *** --lr 1"]),
        (["--config", '{"api_key":"abc","lr":0.1}'], ["--config", '{"api_key":"***","lr":0.1}']),
        (["--jwt", "x", "--sas-token=y"], ["--jwt", "***", "--sas-token=***"]),
        (["--conn", "AccountName=a;AccountKey=abc==;Suffix=x"], ["--conn", "AccountName=a;AccountKey=***;Suffix=x"]),
    ],
)
def test_credentials_on_a_command_line_are_redacted(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


ORDINARY = [
    "train.py",
    "--lr=0.1",
    "--epochs",
    "3",
    "--data",
    "/data/imagenet/train",
    "--token-length",
    "5",  # about a token, not a token
    "--max-tokens",
    "512",
    "--tokenizer",
    "bert-base-uncased",
    "--pad-token",
    "<pad>",  # a tokenizer's vocabulary
    "--eos_token=</s>",
    "--password-file",
    "/run/secrets/db",  # where the secret is, not the secret
    "--secret-name",
    "prod-db",
    "--key-id",
    "7",
    "--sort-key",
    "name",
    "--image-key",
    "jpg",
    "--rng-key",
    "0",
    "--keys",
    "jpg,cls",
    "--author",
    "Jane",
    "MAX_TOKENS=5",
    "TOKENIZERS_PARALLELISM=false",
    "model.tokenizer=gpt2",
    "--url",
    "http://host:8080/path?page=2",
    "/runs/sk-learn-experiment-2024-01-01-run42-extra",  # sk- without a key's mixed case
    "--name=hf_small",
    "--out=run=1",
    "a b  c",
    "",
    "-",
    "--",
    "é∂",
    "--token-file=/x",
]


def test_everything_else_stays_byte_identical() -> None:
    assert redact_argv(ORDINARY) == ORDINARY
    assert redact_text(" ".join(ORDINARY)) == " ".join(ORDINARY)


@pytest.mark.parametrize(
    "name",
    ["token", "--hf-token", "HF_TOKEN", "api_key", "apiKey", "OPENAI_API_KEY", "--access-key", "auth", "PGPASSWORD"],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["--token-length", "--max-tokens", "--tokenizer", "--pad-token", "--author", "--keys", "--sort-key", "PATH", ""],
)
def test_names_that_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


def test_token_shapes_inside_free_text() -> None:
    text = (
        f"ValueError: 401 for {HF} at https://u:p@ss@hub.example.com/x (key {AWS}), "
        f"header Authorization: Bearer abcdefgh1234567890xyz, api_key='abc', HF_TOKEN=xyz"
    )
    assert redact_text(text) == (
        "ValueError: 401 for hf_*** at https://u:***@hub.example.com/x (key AKIA***), "
        "header Authorization: Bearer ***, api_key='***', HF_TOKEN=***"
    )
    config = "{'token': 'abc', 'password' : \"p\", 'name': 'n'} Password: incorrect"
    assert redact_text(config) == "{'token': '***', 'password' : \"***\", 'name': 'n'} Password: incorrect"
    pem = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAAAA\n-----END RSA PRIVATE KEY-----\nafter"
    assert redact_text(pem) == "before\n-----BEGIN RSA PRIVATE KEY----- *** -----END RSA PRIVATE KEY-----\nafter"


def test_prose_about_tokens_is_left_alone() -> None:
    text = (
        "bearer authentication failed after basic training loop; tokens=512 token_count=3 "
        'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
    )
    assert redact_text(text) == text
    assert redact_shapes("") == ""


def test_environment_variables() -> None:
    env = {"HF_TOKEN": "x", "PATH": "/usr/bin", "PROXY": "http://u:pw@proxy:3128", "RANK": "0", "NOTE": HF}
    assert redact_env(env) == {
        "HF_TOKEN": "***",
        "PATH": "/usr/bin",
        "PROXY": "http://u:***@proxy:3128",
        "RANK": "0",
        "NOTE": "hf_***",
    }


def test_scan_and_tune_results_show_no_credential() -> None:
    from dlprobe.render.html_results import render_tune_html
    from dlprobe.scan.result import ScanResult

    result = ScanResult("train.py", [], None)
    bad = {
        "t": 1.0,
        "ev": "scan_bad",
        "index": 3,
        "kind": "exception",
        "detail": "HTTPError: 401 https://me:pw1234@h/x.tar",
    }
    error = {"t": 1.0, "ev": "script_error", "type": "RuntimeError", "message": f"refused {HF}"}
    result.feed([{"t": 1.0, "ev": "scan_start", "loader": 0, "total": 8}, bad, error])
    assert result.bad[0]["detail"] == "HTTPError: 401 https://me:***@h/x.tar"
    assert result.script_error is not None and result.script_error["message"] == "refused hf_***"
    # a tune.json written before redaction: its page's title still shows none
    page = render_tune_html({"script": "train.py", "argv": ["--hf-token", "tok123"], "trials": []})
    assert "tok123" not in page and "<title>dlprobe tune: train.py --hf-token ***</title>" in page


def test_triage_quotes_the_logs_lines_without_their_credentials(tmp_path) -> None:
    import json
    from pathlib import Path

    from dlprobe.triage.result import triage

    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "torchrun_worker_oom_rank1.log"
    log = tmp_path / "train.log"
    log.write_text(
        fixture.read_text().replace(
            "exited unexpectedly\n", "exited unexpectedly while reading https://me:SECRETPW42@host/shard-0.tar\n"
        )
    )
    result = json.dumps(triage(str(log), machine_check=False))
    assert "SECRETPW42" not in result
    assert "exited unexpectedly while reading https://me:***@host/shard-0.tar" in result
