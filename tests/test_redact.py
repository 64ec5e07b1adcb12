"""Redaction: every secret shape of the corpus, and every one detect-secrets knows, is replaced before a request
leaves the machine (checked at the provider's side: a real HTTP server on 127.0.0.1 and the command provider,
with the secrets in every message kind), while ordinary text that looks random is sent as it is."""

from __future__ import annotations

import base64
import sys

import orjson
import pytest

from bench.llm_server import FakeLLM
from pimem import Memory
from pimem.compactor.redact import redact
from pimem.message import KINDS
from secret_shapes import LIBRARY_SHAPES, ORDINARY, SHAPES


def test_the_corpus_has_26_shapes():
    assert len(SHAPES) == 26 and len({name for name, _, _ in SHAPES}) == 26


@pytest.mark.parametrize("name,text,secrets", SHAPES + LIBRARY_SHAPES, ids=[s[0] for s in SHAPES + LIBRARY_SHAPES])
def test_every_shape_is_redacted(name, text, secrets):
    out = redact(text)
    for secret in secrets:
        assert secret not in out, out
    assert "redacted]" in out


def test_only_the_secret_goes_not_its_line():
    out = redact("curl -u deploy:Pa55w0rdXyZ9 https://ci.example.com/api/build")
    assert out == "curl -u deploy:[password redacted] https://ci.example.com/api/build"
    out = redact("mysql -h db.internal -u root -pMyS3cretRootPw shop < dump.sql")
    assert out == "mysql -h db.internal -u root -p[password redacted] shop < dump.sql"


# shapes once missed or garbled: (text, the secrets in it, what must stay of the text)
MORE_SHAPES = [
    ("redis://:S3cretRedisPassw0rd@cache:6379/0", ["S3cretRedisPassw0rd"], "@cache:6379/0"),
    ("REDIS_URL=rediss://:S3cretRedisPassw0rd@cache:6380", ["S3cretRedisPassw0rd"], "rediss://:"),
    ("postgres://u:pw@db:5432/app", ["pw@"], "postgres://u:[password redacted]@db:5432/app"),
    ("mongodb://root:example@mongo:27017/", ["example"], "@mongo:27017/"),
    ("redis://default:S3cretRedisPassw0rd@cache:6379", ["S3cretRedisPassw0rd"], "@cache:6379"),
    ("curl https://8f3kP2mX9vQ7rT4wZ1yC6bN0@api.example.com/x", ["8f3kP2mX9vQ7rT4wZ1yC6bN0"], "@api.example.com/x"),
    ("SENTRY_DSN=https://3f7a9c2e8b1d4f6a9e2c7b5d8a1f3e6c@o123456.ingest.sentry.io/4504",
     ["3f7a9c2e8b1d4f6a9e2c7b5d8a1f3e6c"], "@o123456.ingest.sentry.io/4504"),
    ("passphrase: CorrectHorseBatteryStaple99", ["CorrectHorseBatteryStaple99"], "passphrase: "),
    ("DB_PASS=Tr0ub4dor&3xyz", ["Tr0ub4dor&3xyz"], "DB_PASS="),
    ("export SMTP_PASS=mQ9vX2kLp7Rt", ["mQ9vX2kLp7Rt"], "SMTP_PASS="),
    ('password = "correct horse battery staple"', ["correct", "horse", "staple"], 'password = "'),
    ("{'db_password': 'two words here'}", ["two words here", "words"], "db_password"),
    ("mysql -u root -p Xy7kP2mQ9vRt shop", ["Xy7kP2mQ9vRt"], " shop"),
    ("docker login -u admin -p dckr9Xk2mP7qRt registry.example.com", ["dckr9Xk2mP7qRt"], "registry.example.com"),
    ("podman login --password 'hunter2' quay.io", ["hunter2"], "quay.io"),
    ("sshpass -p 'Zq8mX2vK7pLw' ssh deploy@host", ["Zq8mX2vK7pLw"], "ssh deploy@host"),
    ("redis-cli -h cache -p 6379 -a Rk9mX2vQ7pLt ping", ["Rk9mX2vQ7pLt"], "-p 6379"),
    ("ENCRYPTION_KEY=Zq8mX2vK7pLwR4tY", ["Zq8mX2vK7pLwR4tY"], "ENCRYPTION_KEY="),
    ("SIGNING_KEY: Zq8mX2vK7pLwR4tY", ["Zq8mX2vK7pLwR4tY"], "SIGNING_KEY"),
    ("session_key: 'Zq8mX2vK7pLwR4tY'", ["Zq8mX2vK7pLwR4tY"], "session_key"),
    ("STRIPE_WEBHOOK_SIGNING_KEY=whsec_Zq8mX2vK7pLwR4tYa9B3", ["whsec_Zq8mX2vK7pLwR4tYa9B3"], "="),
    ("MAPS_KEY=Zq8mX2vK7pLwR4tYa9B3cD5e", ["Zq8mX2vK7pLwR4tYa9B3cD5e"], "MAPS_KEY="),
    ("curl -H 'Cookie: session=Zq8mX2vK7pLwR4tYa9; theme=dark' https://app.example.com", ["Zq8mX2vK7pLwR4tYa9"], "theme=dark"),
    ("Set-Cookie: sessionid=Zq8mX2vK7pLwR4tYa9; Path=/; HttpOnly", ["Zq8mX2vK7pLwR4tYa9"], "; Path=/; HttpOnly"),
    ("GET https://api.example.com/v1/x?key=Zq8mX2vK7pLwR4tY&q=1", ["Zq8mX2vK7pLwR4tY"], "&q=1"),
    ("https://app.example.com/callback?code=4/0AbCdEfGhIjKlMnOp&state=xyz", ["0AbCdEfGhIjKlMnOp"], "&state=xyz"),
    ("https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature=9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
     "&X-Goog-Expires=900", ["9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"], "&X-Goog-Expires=900"),
    ("doctl auth init -t dop_v1_" + "3f7a9c2e8b1d4f6a" * 4, ["3f7a9c2e8b1d4f6a"], "doctl auth init -t "),
    ("the store answers to 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 now", ["3f7a9c2e8b1d4f6a9e2c7b5d8a1f3e6c"], " now"),
]

# ordinary text beside those shapes: a port, a flag, a query, a cookie, a key's name that holds no secret
MORE_ORDINARY = [
    "ssh -p 2222 deploy@10.0.0.5 && redis-cli -h cache -p 6379 ping",
    "mysql -u root -p shop < dump.sql",
    "docker login -u admin --password-stdin registry.example.com; gh auth login --token $GITHUB_TOKEN",
    "https://example.com/search?page=2&sort=created_at&zipcode=94103&key=name&code=200&X-Goog-Expires=900",
    "https://github.com/acme/app/commit/3f786850e387550fdab836ed7e6dc881de23001b?diff=split",
    "primary_key: user_id, sort_key: created_at, cache_key: user:42:profile:v2, foreign_key: orders.user_id",
    "Set-Cookie: theme=dark; Path=/; Max-Age=3600; HttpOnly",
    "git clone git@github.com:acme/app.git && curl https://deploy@ci.example.com/api",
    "postgres://localhost:5432/app and http://localhost:8080/v1 and redis://cache:6379/0",
    "compass: northwest, bypass_cache: enabled, passes: 3, pass: true",
    "# First pass: determine the longest option name; Pass :meth:`peek` a default",
    '"max_tokens": "a whole number of tokens above 0", "author": " Bob "',
    "token = self.get_token(); tokens_cached = min(tokens_cached, tokens_in); signing_key = self.match_kid(keys, kid)",
    'public_key: "_EllipticCurvePublicKey", information can be given with the --username and --password options',
]


# a secret-looking name counts only as a whole part of a name (ended by _ - . a digit, a capital or the name's
# end; auth, pwd and PASS begun by one too): not inside a longer word, nor followed by a part saying the value
# is where or which the secret is, or how it is used
NOT_NAMES = [
    "author: Margaret Atwood", "coauthor: Margaret", "oauth_provider: keycloak", "tokenizer=bert-base-uncased",
    "authentication: required", "secretary: Jonathan", "unauthorized: retrying later", "BYPASS=enabled",
    "COMPASS_HEADING=northwest", "detokenize: enabled", "OLDPWD=/home/alice", "passwordless: enabled",
    "access_keyboard: qwerty", "Authority: letsencrypt-prod", "secretsmanager: arn:aws:secretsmanager:us-east-1",
    "tokenisation: word-level", "authenticator: totp-app", "COMPASS: 'north by west'",
    # a test runner's verdict, and a name saying what its value is about: where, which, how
    "--- PASS: TestParseConfig (0.00s)", "PASS: t/basic.sh", "token_url: https://oauth2.googleapis.com/token",
    "auth_method: oauth2", "password_file: /run/secrets/db", "SECRET_NAME=prod-db-creds", "tokenType: access_token",
    "AUTH_PROVIDER=keycloak", "secret_path: kv/data/app", "TOKEN_ENDPOINT=https://login.example.com/oauth/token",
]
NAMES = [
    "dbPassword=Hunter22x", "clientSecret: Zq8mX2vK7p", "accessToken=Zq8mX2vK7p", "x-auth-token: Zq8mX2vK7p",
    "MYSQL_ROOT_PASSWORD=hunter22x", "mytoken=abcdefgh12", "rootpassword: hunter22x", "password2=hunter22x",
    "AUTH=Zq8mX2vK7p", "basicAuth: admin:hunter22", "db_pwd=hunter22x", "DB_PASS=hunter22x", "SECRETS=abcdefghij",
    "api_keys: abcdefghij", "SECRET_KEY_BASE=abcdefghij", "dbPassword: 'two words here'", "PASS=hunter22x",
    "auth_token: Zq8mX2vK7p", "password_hash=abcdefghij", "SECRET_VALUE=abcdefghij",
]


@pytest.mark.parametrize("text", NAMES)
def test_a_secret_name_as_a_part_of_a_name_is_one(text):
    out = redact(text)
    assert "[secret redacted]" in out and text.split("=")[-1].split(": ")[-1].strip("'") not in out, out


@pytest.mark.parametrize("text,secrets,kept", MORE_SHAPES, ids=[s[0][:40] for s in MORE_SHAPES])
def test_more_shapes_are_redacted_and_the_rest_kept(text, secrets, kept):
    out = redact(text)
    assert "redacted]" in out and kept in out, out
    for secret in secrets:
        assert secret not in out, out


def everything() -> list[tuple[str, list[str]]]:
    """Texts holding every shape, in long messages (sent as leaf tasks) and short ones (sent as <chat> lines)."""
    out = []
    for n, (name, text, secrets) in enumerate(SHAPES + LIBRARY_SHAPES):
        filler = " ".join(f"w{n}x{k}" for k in range(90))
        out.append((f"step {n} ({name}): {filler}\n{text}\nand then we went on.", secrets))
        if len(text) < 300:
            out.append((text, secrets))
    return out


def fill(mem: Memory) -> list[str]:
    records, secrets = [], []
    for n, (text, found) in enumerate(everything()):
        records.append({"kind": KINDS[n % len(KINDS)], "text": text})
        secrets += found
    mem.append(records)
    return secrets


def configure(home, compactor: dict) -> None:
    home.mkdir(parents=True, exist_ok=True)
    cfg = {"view": {"hi": 3000, "lo": 1500}, "cview": {"hi": 4000, "lo": 2000}, "compactor": compactor}
    (home / "config.json").write_bytes(orjson.dumps(cfg))


def assert_nothing_leaked(sent: str, secrets: list[str], mem: Memory) -> None:
    assert "redacted]" in sent
    leaked = [s for s in secrets if s in sent]
    assert leaked == []
    log = "".join(m["text"] for m in mem.messages(0))
    assert all(s in log for s in secrets)  # the log keeps every byte


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_no_secret_reaches_an_http_provider(api, run, home, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM(api) as server:
        configure(home, {"provider": api, "model": "m1", "base_url": server.url, "key_env": "TEST_LLM_KEY",
                         "timeout": 20, "retry_seconds": 0.05})
        mem = Memory.at("m")
        secrets = fill(mem)
        out = run("build-tree", "m")
        assert out.exit_code == 0, out.stderr
    sent = "".join(repr(orjson.loads(raw)) for raw in server.raw)  # the strings as the server decoded them
    assert {k for k in KINDS if f"{k}: " in sent} == set(KINDS)
    assert_nothing_leaked(sent, secrets, mem)


def test_no_secret_reaches_the_command_provider(run, home, tmp_path):
    seen = tmp_path / "prompts.txt"
    script = tmp_path / "model.py"
    script.write_text(
        "import sys\n"
        f"open({str(seen)!r}, 'a').write(sys.stdin.read() + '\\n----\\n')\n"
        "print('user: a summary of this part; pi: done with it.')\n")
    configure(home, {"provider": "command", "command": f"{sys.executable} {script}", "timeout": 20})
    mem = Memory.at("m")
    secrets = fill(mem)
    out = run("build-tree", "m")
    assert out.exit_code == 0, out.stderr
    sent = seen.read_text()
    assert {k for k in KINDS if f"{k}: " in sent} == set(KINDS)
    assert_nothing_leaked(sent, secrets, mem)


def test_a_long_word_of_secret_names_is_read_once():
    """``token_token_…`` (100 KB of one word) was read to its end from each name in it, on every model request:
    25 s of CPU. A name runs at most 64 characters past its secret word, so it takes a moment; a name and its
    value are still found at the end of such a word, and a long name as before."""
    assert redact("token_" * 16000 + "x") == "token_" * 16000 + "x"
    assert redact("x_pass" * 16000 + "=abcdefghij").endswith("x_pass=[secret redacted]")
    assert redact("MY_VERY_LONG_DATABASE_PASSWORD_FOR_PROD=hunter2hunter2") == \
        "MY_VERY_LONG_DATABASE_PASSWORD_FOR_PROD=[secret redacted]"


# a test runner's verdict (go test, automake, DejaGnu, TAP harnesses) is told from a password named PASS by
# what follows the colon: a test's name (Test…, test…), a test file or path, a name followed by its time
VERDICTS = [
    "--- PASS: TestParse (0.00s)", "    --- PASS: TestParse/with_token (0.00s)", "--- FAIL: TestToken (0.01s)",
    "--- PASS: hunter_cases (0.00s)", "PASS: t/basic.sh", "PASS: tests/test_x.py::test_ok", "PASS: foo.test",
    "PASS: TestPasswordReset", "PASS: test_login_with_bad_password", "PASS: 42, FAIL: 0",
    "PASS: gcc.dg/pr123.c (test for excess errors)", "PASS\nok  \tgithub.com/acme/app\t0.5s",
    "PASS: basic_usage (0.02s)", "PASS: testTokenRefresh", "PASS: Test_parse", "=== RUN   TestParse\n--- PASS: TestParse (0.00s)\nPASS",
    "PASS: tests/test_v2_api.py", "PASS: TestHTTP2Server (0.01s)", "PASS: t/basic",
    "--- PASS: TestX (0.01s)", "--- PASS: TestParse", "--- PASS: t/basic.sh", "--- PASS: hunter2 (0.01s)",
]
PASS_VALUES = ["PASS: hunter2hunter2", "PASS: 'hunter2hunter2'", "PASS=hunter2hunter2", "PASS: Zq8mX2vK7pLw",
               "export PASS=hunter2hunter2", 'PASS: "hunter2hunter2"',
               "PASS: Testing123", "PASS: test1234",
               # (a verdict's shape, but random: a password holding a slash or a dot, or begun by Test)
               "PASS: kX9/2mQ+zTr", "PASS: hunter2.abc", "USER: admin\nPASS: Tr0ub4dor/3", "PASS: TestP@ssw0rd!",
               "PASS: test_pw_Xk92!", "DB_PASS: TestParse99x",
               # (go test writes a verdict with its time: --- PASS: without one is told as PASS: is)
               "--- PASS: hunter2", "--- PASS: Zq8mX2vK7pLw", "echo '--- PASS: hunter2hunter2'"]


@pytest.mark.parametrize("text", PASS_VALUES)
def test_a_password_named_pass_is_redacted(text):
    out = redact(text)
    assert text.split()[-1].strip("'\"").split("=")[-1] not in out and "[secret redacted]" in out, out


# a name whose last part says the value is about a secret, not the secret (where, which, how, how long): its
# value stays; an id of a key or secret stays unless it is key material itself (Vault's AppRole secret_id, a
# Tencent SecretId AKID…, the id of a token that is the token), and an ARN is never a secret
ABOUT_A_SECRET = [
    "apiKeyId: a1b2c3d4e5", "apiKeyId: ak-0123456789", "api_key_id: key_prod_eu", "accessKeyId: ${AWS_ACCESS_KEY_ID}",
    "secretsManagerArn: arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf",
    "secretArn: arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf",
    "SECRET_ARN=arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf",
    "secret_id: prod/db/creds", "SECRET_ID=prod-db-creds", "--secret-id=prod/db/creds",
    "password_reset_url: https://example.com/reset", "PASSWORD_RESET_URL=https://example.com/reset",
    "passwordResetUrl: https://example.com/reset", "token_expiry: 2024-05-01T12:00:00Z", "AUTH_DOMAIN=acme.eu.auth0.com",
    "TOKEN_ISSUER=https://login.example.com/", "auth_header_name: X-Api-Key", "secret_store_backend: vault-kv",
    "password: arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf",
    # where (a host, a URL, a store), which and how: a name about a secret keeps its value unless that is key
    # material (below)
    "AUTH_HOST=auth.example.com", "SECRET_STORE=vault", "AUTH_SERVER=https://keycloak.example.com/realms/acme",
    "token_prefix: Bearer", "AUTH_HEADER=X-Api-Key", "TOKEN_AUDIENCE=api://default", "PASSWORD_MIN_LENGTH=12",
    "AUTH_CALLBACK=https://app.example.com/auth/callback", "AUTH_REDIRECT=https://app.example.com/home",
    "AUTH_STRATEGY=jwt-bearer", "SECRET_ROTATION_SCHEDULE=weekly", "AUTH_REALM=acme-prod",
    "AUTH_TENANT=contoso.onmicrosoft.com", "AUTH_ENABLED: disabled", "TOKEN_REFRESH_INTERVAL=15min",
    # when: a time's last part, last or next before it (AWS IAM's PasswordLastUsed, its credential report's
    # password_last_changed, access_key_1_last_used_date), or a date and its time as the value
    '"PasswordLastUsed": "2016-09-08T21:47:36Z"', "password_last_changed: 2016-09-08T21:47:36+00:00",
    "access_key_1_last_used_date: 2016-09-08T21:47:36+00:00", "TokenLastUsed=2016-09-08T21:47:36Z",
    "secretLastRotated: 2020-01-01T00:00:00.000Z", "password_changed_at: 2016-09-08T21:47:36Z",
    "token_created_at: 2016-09-08 21:47", "PASSWORD_LAST_SET=2023-01-05", '"password_updated": "2016-09-08 21:47:36"',
    "password: 2016-09-08T21:47:36Z", "token_issued: 2024-05-01 12:00:00+02:00", "secret_expires_on: 2025-12-31",
    "the password is 2016-09-08 21:47:36", "token 2016-09-08T21:47:36Z expired", "password: 2016-09-08 21:47:36",
]
STILL_SECRETS = [
    "apiKey: Zq8mX2vK7pLwR4tY", "api_key=abcdefghij12", "secretKey: Zq8mX2vK7pLwR4tY", "client_secret: Zq8mX2vK7pLwR4tY",
    "SECRET_ACCESS_KEY=Zq8mX2vK7pLwR4tYa9B3", "password_reset_token=Zq8mX2vK7pLw", "AUTH_TOKEN=Zq8mX2vK7pLw",
    "secret_id: 6a174c20-f6de-a53c-74d2-6018fcceff64", "VAULT_SECRET_ID=6a174c20-f6de-a53c-74d2-6018fcceff64",
    "apiKeyId: AKIDz8krbsJ5yKBZQpn74WFkmLPx3gnPhESA", "tokenId: hvs.CAESIJ3f7a9c2e8b1d4f6a9e2c7b5d8a1f3e6c",
    "SECRET_STORE=Zq8mX2vK7pLwR4tYa9B3", "AUTH_HEADER=dXNlcjpodW50ZXIyaHVudGVy", "token_prefix: Zq8mX2vK7pLwR4tYa9B3cD",
    "AUTH_HOST=Zq8mX2vK7pLwR4tYa9B3",
    # (key material under a name about when; a password that was used; a date alone, a birthday's)
    "PasswordLastUsed: Zq8mX2vK7pLwR4tYa9B3", "password_used: hunter2x", "password: 2016-09-08",
    "password: 2016-09-08T21:47:36Zx9",
    # (letters after a number that are no unit's)
    "password: 1234abcd", "password: 12ab", "password: 1234msx", "token: 1234kbz9",
    # (a number with a leading zero, or a decade, before what reads as a unit)
    "password: 00338d", "password: 0042s", "password: 1960s", "secret: 2010s",
]


@pytest.mark.parametrize("text", STILL_SECRETS)
def test_a_secret_beside_such_names_is_redacted(text):
    out = redact(text)
    assert "redacted]" in out and text.split("=")[-1].split(": ")[-1] not in out, out


# a value that names where the secret comes from (a variable, a setting) or stands in for it (a mask, a
# placeholder) is not one; a default after the variable, or a value that only begins like one, is
REFERENCES = [
    "password: ${DB_PASSWORD}", "DB_PASSWORD=$DB_PASSWORD", 'password: "${DB_PASSWORD}"', "_authToken=${NPM_TOKEN}",
    "//npm.pkg.github.com/:_authToken=${NPM_TOKEN}", "api_key = settings.API_KEY", "secret = config.secret",
    "Client(api_key=settings.OPENAI_API_KEY)", "const client = new OpenAI({ apiKey: process.env.OPENAI_API_KEY });",
    "token: options.authToken,", "password: ********", "secret: <redacted>", "password: <your-password>",
    "set PASSWORD=%DB_PASSWORD%", "token: ${token_from_vault}",
]
NOT_REFERENCES = [
    "password: ${DB_PASSWORD:-hunter2hunter2}", "password: $ecretPassw0rd", "VAULT_TOKEN=hvs.CAESIJ3f7a9c2e8b1d4f6a9e2c",
    "password: my.Secret.Pass9", "password: ***hunter2***",
]


@pytest.mark.parametrize("text", NOT_REFERENCES)
def test_a_value_only_like_a_reference_is_redacted(text):
    out = redact(text)
    assert "redacted]" in out and "hunter2" not in out and "Passw0rd" not in out and "CAESIJ" not in out \
        and "Pass9" not in out, out


# shapes found missing in a hunt through realistic session lines: (text, the secret in it, what must stay)
HUNTED = [
    ("machine api.heroku.com login alice@example.com password hunter2hunter2", "hunter2hunter2", "login alice@example.com password "),
    ("machine github.com\n  login alice\n  password hunter2hunter2", "hunter2hunter2", "  login alice\n  password "),
    ("mysql -uroot -p'hunter2' shop", "hunter2", " shop"),
    ("mysql -uroot -p'hunter2 and more' shop", "hunter2 and more", " shop"),
    ('mysql -u root -p"Zq8mX2vK7pLw" shop', "Zq8mX2vK7pLw", " shop"),
    ("az login --service-principal -u http://app -p Zq8mX2vK7pLw~abc --tenant t", "Zq8mX2vK7pLw~abc", "-u http://app -p "),
    ("aws configure set aws_secret_access_key Kd8sJ2nQ9vXbT4mW7yZ1aP3eR6uC0hF5gL8iN2oS",
     "Kd8sJ2nQ9vXbT4mW7yZ1aP3eR6uC0hF5gL8iN2oS", "aws configure set aws_secret_access_key "),
    ("    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVBdGVzdA==",
     "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVBdGVzdA==", "    client-key-data: "),
    ("data:\n  tls.key: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2UUlCQURBTkJna3Foa2lHOXcwQkFRRUZBQVND",
     "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2UUlCQURBTkJna3Foa2lHOXcwQkFRRUZBQVND", "  tls.key: "),
    ("STRIPE_KEY=sk_test_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc", "STRIPE_KEY="),
    ("stripe listen gave whsec_Zq8mX2vK7pLwR4tYa9B3cD5eF6", "Zq8mX2vK7pLwR4tYa9B3cD5eF6", "stripe listen gave "),
    ("SLACK_APP=xapp-1-A0123456789-1234567890123-0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef", "SLACK_APP="),
    ("vault login hvs.CAESIJ3f7a9c2e8b1d4f6a9e2c7b5d8a1f3e6cAbCd", "CAESIJ3f7a9c2e8b1d4f6a9e2c7b5d8a1f3e6cAbCd", "vault login "),
]
# beside them, what stays: a certificate in base64 (public), a port, a flag reading the password from stdin
HUNTED_ORDINARY = [
    "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSURBRENDQWVpZ0F3SUJBZ0lJ",
    "    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSURBRENDQWVpZ0F3SUJBZ0lJ",
    "mysql --password shop < dump.sql; mysql -p shop",  # (mysql's --password takes a value only after =)
    "machine api.heroku.com login alice password",
    "a machine learning password classifier; the default password is printed once",
    "aws configure set region eu-west-1 && aws configure set output json",
    "pk_test_4eC39HqLyjWDarjtT1zdp7dc is the publishable key",
]


def test_a_private_key_in_base64_is_redacted_over_all_its_lines():
    """``base64 key.pem`` wraps at 76 characters, and so does a Secret's ``tls.key: |`` block: only the first line,
    the header's, was redacted, the key's own lines sent. The key runs on over the lines that are base64 alone."""
    pem = ("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIGxV3q0m6b2f9kQ1pZ7sT8rN4wY5uE2aH3jL6cX9vB0d"
           "Zq8mX2vK7pLwR4tYa9B3cD5eF6\n-----END PRIVATE KEY-----\n")
    b64 = base64.encodebytes(pem.encode()).decode()
    assert b64.count("\n") > 2
    for text, after in ((f"$ base64 key.pem\n{b64}$ ls\n", "\n$ ls\n"),
                        ("tls.key: |\n  " + b64.replace("\n", "\n  ").rstrip(" ") + "tls.crt: x\n", "\ntls.crt: x\n"),
                        ("key: " + b64.replace("\n", "\n" + " " * 5)[:-5] + "done: yes", "\ndone: yes")):
        out = redact(text)
        assert not [line for line in b64.splitlines() if line in out], out
        assert "[private key redacted]" in out and out.endswith(after), out


@pytest.mark.parametrize("text,secret,kept", HUNTED, ids=[s[0][:40] for s in HUNTED])
def test_hunted_shapes_are_redacted(text, secret, kept):
    out = redact(text)
    assert secret not in out and kept in out and "redacted]" in out, out


# a hash's value after => (PHP, Ruby, Perl): it leaked, as a JSON or YAML value does not; an arrow's
# unquoted right side is code (a JavaScript arrow function, a PHP variable), not a value
ARROWS = [("$db = ['password' => 'hunter2xyz'];", "hunter2xyz", "$db = ['password' => '"),
          ('$cfg = ["db_password" => "s3cr3t!"];', "s3cr3t!", '$cfg = ["db_password" => "'),
          (':password => "hunter2xyz",', "hunter2xyz", ':password => "'),
          ("'password' => 'correct horse battery'", "horse", "'password' => '"),
          ('{ "api_key" => "Zq8mX2vK7pLwR4tY" }', "Zq8mX2vK7pLwR4tY", '{ "api_key" => "')]
ARROWS_ORDINARY = ["tokens.filter(token => token.length > 0)", "$hash = password_hash($password => $algo);",
                   "users.map(password => password.trim())", "'password_reset_url' => 'https://example.com/reset'"]


# XML config: a .NET appSettings entry's value beside its key's name, an element named as a secret (Maven's
# settings.xml, a .NET user secret); a connection string's Password=…; was caught before
XML = [('<add key="DbPassword" value="P@ssw0rd!"/>', "P@ssw0rd!", '<add key="DbPassword" value="'),
       ("  <add key='ApiKey' value='hunter' />", "hunter", "  <add key='ApiKey' value='"),
       ('<add name="Smtp" key="smtp.password" value="correct horse" />', "horse", 'value="'),
       ("<server><id>nexus</id><password>hunter</password></server>", "hunter", "<password>[secret redacted]</password></server>"),
       ("<DbPassword>hunter2</DbPassword>", "hunter2", "<DbPassword>"),
       ("<client_secret>Zq8mX2vK7pLwR4tY</client_secret>", "Zq8mX2vK7pLwR4tY", "</client_secret>"),
       ('<connectionStrings><add name="Db" connectionString="Server=db;User Id=sa;Password=hunter;" /></connectionStrings>',
        "hunter", "User Id=sa;Password=")]
XML_ORDINARY = ['<add key="PasswordResetUrl" value="https://example.com/reset"/>', '<add key="DbPassword" value=""/>',
                "<password>$(DB_PASSWORD)</password>", "<password>${env.NEXUS_PASSWORD}</password>",
                '<add key="Theme" value="dark"/>', "<passwordPolicy>strict</passwordPolicy>", "<password></password>"]


# a Dockerfile's ENV in its space form (ENV NAME value: the value is the rest of the line); ENV NAME=value, ARG
# NAME=value and export NAME=value were caught before
DOCKER_ENV = [("ENV DB_PASSWORD correct horse", "horse", "ENV DB_PASSWORD "),
              ("FROM postgres:16\nENV POSTGRES_PASSWORD hunter2xyz\nEXPOSE 5432", "hunter2xyz", "\nEXPOSE 5432"),
              ("ENV API_TOKEN Zq8mX2vK7pLwR4tY  ", "Zq8mX2vK7pLwR4tY", "ENV API_TOKEN "),
              ("ARG DB_PASSWORD=hunter2xyz", "hunter2xyz", "ARG DB_PASSWORD="),
              ("RUN export DB_PASSWORD=hunter2xyz && ./migrate", "hunter2xyz", "RUN export DB_PASSWORD=")]
DOCKER_ENV_ORDINARY = ["ENV DB_PASSWORD_FILE /run/secrets/db_password", "ENV DB_PASSWORD $DB_PASSWORD",
                       "ENV DB_PASSWORD ${DB_PASSWORD}", "ARG DB_PASSWORD\nENV PASSWORD_MIN_LENGTH 12"]


# a chat's password: a word shaped like one (digits in its letters, a symbol) after "password is" or "pass:", a
# phrase of plain words ending the line after "password is"; not what a sentence about a password says of it
CHAT = [("the db pass: Tr0ub4dor&3", "Tr0ub4dor&3", "the db pass: "),
        ("wifi pass: hunter22 (guest network)", "hunter22", "wifi pass: "),
        ("my password is hunter2 btw", "hunter2", "my password is [secret redacted] btw"),
        ("ok the admin password was s3cr3t! now", "s3cr3t!", "admin password was "),
        ("password is purple monkey dishwasher", "monkey", "password is "),
        ("so the password is correct horse battery staple.", "horse", "so the password is "),
        # (one plain word ending a sentence after "password is": a password, unless what a sentence says of one)
        ("my password is sunshine", "sunshine", "my password is "), ("the wifi password is bananas", "bananas", "wifi "),
        ("my password is purple", "purple", "my password is "),
        ("Our old password was Dragon. Changed it.", "Dragon", "old password was [secret redacted]. Changed it."),
        # (a password quoted or backticked after "password is": its quotes kept, a command in backticks is code)
        ('my password is "sunshine"', "sunshine", 'my password is "[secret redacted]"'),
        ("my password is `sunshine`", "sunshine", "my password is `[secret redacted]`"),
        ("the password was 'letmein' I think", "letmein", "the password was '[secret redacted]' I think"),
        ("password is 'correct horse', he said", "horse", "password is '[secret redacted]', he said"),
        # (a colon after is or was)
        ("the password is: sunshine", "sunshine", "the password is: "), ("password was: hunter2 now", "hunter2", "was: "),
        ("the password is: purple monkey dishwasher", "monkey", "the password is: "),
        ('the password is: "sunshine"', "sunshine", 'the password is: "[secret redacted]"'),
        # (one plain word before a new clause: and, but, so… and its subject; btw)
        ("my password is sunshine and my username is bob", "sunshine", "my password is [secret redacted] and my username is bob"),
        ("the wifi password is bananas, ask me if it changes", "bananas", "is [secret redacted], ask me if it changes"),
        ("the password was letmein but I changed it", "letmein", "was [secret redacted] but I changed it"),
        ("my password is sunshine btw", "sunshine", "my password is [secret redacted] btw"),
        # (a time's word, a parenthesis or what it is for after the word: no second word said of it)
        ("the password is sunshine now", "sunshine", "the password is [secret redacted] now"),
        ("the password is sunshine for the admin account", "sunshine", "is [secret redacted] for the admin account"),
        ("the password is: sunshine (lowercase)", "sunshine", "the password is: [secret redacted] (lowercase)"),
        ("my password was letmein until last week, I changed it", "letmein", "was [secret redacted] until last week"),
        ("the wifi password is bananas on the guest network", "bananas", "is [secret redacted] on the guest network"),
        # (a sentence in capitals: its word in capitals)
        ("PASSWORD IS SUNSHINE", "SUNSHINE", "PASSWORD IS [secret redacted]"),
        ("MY WIFI PASSWORD WAS BANANAS!", "BANANAS", "MY WIFI PASSWORD WAS [secret redacted]!"),
        ("THE PASSWORD IS SUNSHINE AND THE USER IS BOB", "SUNSHINE", "IS [secret redacted] AND THE USER IS BOB"),
        # (other names of a password in chat: pw, pass, passcode)
        ("the pw is sunshine", "sunshine", "the pw is [secret redacted]"), ("wifi pw: sunshine", "sunshine", "wifi pw: "),
        ("my pass is sunshine", "sunshine", "my pass is [secret redacted]"),
        ("the passcode is sunshine now", "sunshine", "the passcode is [secret redacted] now"),
        ("the pw is hunter2 btw", "hunter2", "the pw is [secret redacted] btw"),
        ("my pass was letmein but I changed it", "letmein", "was [secret redacted] but I changed it"),
        ("THE PW IS SUNSHINE", "SUNSHINE", "THE PW IS [secret redacted]"),
        # (a passcode or a PIN said in chat: a number too)
        ("the passcode is 4821", "4821", "the passcode is [secret redacted]"),
        ("my pin is 4821", "4821", "my pin is [secret redacted]"), ("the PIN is 0000", "0000", "the PIN is [secret redacted]"),
        ("my pin is 4821 btw", "4821", "my pin is [secret redacted] btw"),
        ("the card PIN was 1234 but I changed it", "1234", "was [secret redacted] but I changed it"),
        ("the door pin is 482190.", "482190", "the door pin is [secret redacted]."),
        # (a number of 4 to 12 digits said alone after password is: a PIN's as much as a password)
        ("the password is 1234", "1234", "the password is [secret redacted]"),
        ("my wifi password is 12345678.", "12345678", "my wifi password is [secret redacted]."),
        ("the password was 0000 but I changed it", "0000", "was [secret redacted] but I changed it"),
        # (a PIN's or a passcode's number as a config's or a chat's value: 4 to 12 digits)
        ("pin: 4821", "4821", "pin: "), ("my PIN: 4821", "4821", "my PIN: "), ("PIN=4821", "4821", "PIN="),
        ('{"pin": "4821", "user": "bob"}', "4821", '"user": "bob"'), ("SIM_PIN=1234\nAPN=internet", "1234", "\nAPN=internet"),
        ("passcode: 482190", "482190", "passcode: "), ("pinCode: 0000", "0000", "pinCode: "),
        ("the card's PIN code: 0000.", "0000", "the card's PIN code: [secret redacted]."),
        ("  pin_number = 4821  # card", "4821", "  # card"),
        ("PIN=4821 USER=bob", "4821", "PIN=[secret redacted] USER=bob"), ("?pin=4821&x=1", "4821", "?pin=[secret redacted]&x=1"),
        ("$card = ['pin' => '4821'];", "4821", "'pin' => '[secret redacted]'"),
        # (a word in capitals said alone in a sentence that is not: a password, not an acronym)
        ("the password is SUNSHINE", "SUNSHINE", "the password is [secret redacted]"),
        ("my wifi password is BANANAS, ask me if it changes", "BANANAS", "is [secret redacted], ask me"),
        ("the pw is LETMEIN now", "LETMEIN", "the pw is [secret redacted] now"),
        # (of 3 or 4 letters, no acronym, ending its sentence or before a new clause)
        ("the password is CATS", "CATS", "the password is [secret redacted]"),
        ("my wifi password is LOVE.", "LOVE", "my wifi password is [secret redacted]."),
        ("the password was FISH but I changed it", "FISH", "was [secret redacted] but I changed it"),
        ("the pw is MOON, ask me", "MOON", "the pw is [secret redacted], ask me"),
        # (a password's name after what it guards, pass: and one word said alone: wifi pass:, door pass:)
        ("wifi pass: sunshine", "sunshine", "wifi pass: [secret redacted]"),
        ("the wi-fi pass: bananas.", "bananas", "the wi-fi pass: [secret redacted]."),
        ("router pass: letmein, user admin", "letmein", "router pass: [secret redacted], user admin"),
        ("Door pass: 4821", "4821", "Door pass: [secret redacted]"),
        ("email pass: Sunshine", "Sunshine", "email pass: "),
        ("WIFI PASS: SUNSHINE", "SUNSHINE", "WIFI PASS: [secret redacted]"),
        # (words joined by -, capitalised: a passphrase, not what a sentence says of it as SSO-managed)
        ("the password is Purple-Monkey-Done", "Monkey", "the password is [secret redacted]"),
        # (a phrase's words: a participle that is a verb's present too is its word, not a sentence's)
        ("the password is split pea soup", "pea", "the password is [secret redacted]"),
        # (a word of a phrase ending in -ed, -ing or -ly that is no verb's form: red, bed, king)
        ("the password is red hot chili", "hot", "the password is [secret redacted]"),
        ("my password is king bed sunrise.", "bed", "my password is [secret redacted]."),
        # (a phrase of short words said as a command: 3 or 4, a sentence's in it only an object's pronoun or no after
        # its first word, which is none of a description's, and a verb's particle after that pronoun)
        ("my password is let me in", "let me in", "my password is [secret redacted]"),
        ("the password is trust no one.", "trust no one", "the password is [secret redacted]."),
        ("the wifi password is take me home", "take me home", "wifi password is [secret redacted]"),
        # (3 plain words or more joined by - said alone: a passphrase's shape, not a compound a sentence says of it)
        ("the password is correct-horse-battery-staple", "horse", "the password is [secret redacted]"),
        ("my pw is purple-monkey-dishwasher.", "monkey", "my pw is [secret redacted]."),
        ("the password was red-fish-blue-fish but I changed it", "blue", "was [secret redacted] but I changed it"),
        # (a number said alone after pw or pass, as after password is)
        ("the pw is 1234", "1234", "the pw is [secret redacted]"), ("wifi pw: 12345678.", "12345678", "wifi pw: "),
        ("my pass was 0000 but I changed it", "0000", "was [secret redacted] but I changed it"),
        # (a password's other names in chat, its value quoted or backticked: pw, pass after a possessive)
        ("the pw is 'sunshine'", "sunshine", "the pw is '[secret redacted]'"),
        ('my pass is "sunshine" btw', "sunshine", 'my pass is "[secret redacted]" btw'),
        ("the wifi pw was `letmein`", "letmein", "the wifi pw was `[secret redacted]`"),
        # (a quote closing after the word ends it)
        ("she wrote 'my password is sunshine' on the board", "sunshine", "is [secret redacted]' on the board")]
CHAT_ORDINARY = ["the password is stored in vault", "password is required", "the first pass: fix the parser",
                 "password is required for login", "the password is hashed using sha256", "password is sha256-hashed",
                 "the password for admin2 is in the vault", "--- PASS: TestParse2 (0.00s)", "second pass: 3 errors left",
                 "the password is too short", "password is case sensitive", "the password is never logged anywhere",
                 "password is at least 12 characters", "the password is base64 encoded", "password is wrong again today",
                 "the password is argon2id hashed", "a second pass: step2 of the plan", "password is wrong",
                 "the password is correct", "the password is mandatory.", "password is expired", "password is invalid!",
                 "the password was changed", "the password is not", "the password is", "the password is ready, log in",
                 "the wifi password is what?", "password is case-sensitive", "the password is optional",
                 # (a number that is no password: a count, a length)
                 "the password is 8 characters", "the password is 1234 characters long", "password is 12 digits",
                 "the password is 2 years old", "the password is 16 to 64 characters",
                 # (a sign ending a sentence is no password's symbol: LongMemEval's texts)
                 "could you recommend a good password manager? I use LastPass", "A password manager! Happy to help",
                 'the password is ""', 'the password is "$DB_PASSWORD"', "the password is `cat ~/.pw`",
                 "the password is `pass show db`", "password is 'none'", "the password's 'strength' isn't checked",
                 "the password is: required", "password is: wrong", "the password is: stored in vault",
                 "the password is required for login", "the password is wrong again", "password is stored in vault",
                 "the password is strong and unique", "the password is important and you should keep it",
                 "my password is long and I forget it", "the password is fine but the user is locked",
                 "the password is important.", "the password is key and the username too",
                 # (a contraction or a possessive after the word: no sentence's end)
                 "what the password is doesn't matter", "whatever my password is isn't your business",
                 "what the password was wasn’t logged", "the password is Bob's birthday",
                 # (an adjective of quality or validity, an irregular participle: what a sentence says of a password)
                 "the password is bogus", "the password is sufficient", "the password is insufficient",
                 "the password is unicode", "the password is written down somewhere", "the password was gibberish",
                 "the password is acceptable.", "my password was given to me", "the password is legit",
                 "the password was read.", "only a word shaped like a password was read). A plain word",
                 "the password was heard", "the password was caught, not sent",
                 # (a word said of it before what it is for, a time's word or a parenthesis)
                 "the password is required for the admin account", "the password is valid for the next hour",
                 "the password is different on each server", "the password is correct now", "the password is wrong (again)",
                 "the password is reset every month", "the password is usually changed",
                 # (an adjective's ending before a preposition: what a sentence says of it, LongMemEval's re-said)
                 "the password is relevant to your matter", "the password was responsible for the cost",
                 "the password is famous for its cuisine", "the password is attentive to my needs",
                 "the password was almost too much to bear",
                 # (a sentence's words after password is: no passphrase of short words when its first word is a
                 # sentence's or a description's, or one of its words is a determiner, a verb's or what it is for)
                 "the password is in the doc", "the password is part of it", "the password is up to you",
                 "the password is close to me", "the password is due to us", "the password is next to it",
                 "the password is similar to mine", "the password is something only you know",
                 "the password is yours and mine", "the password is the same as before", "the password is not in it",
                 "the password is there in it", "the password is like me", "the password is separate from it",
                 "the password is one you can remember", "the password is whatever you like",
                 "the password is admin by default", "the password is different for us", "the password is safe with me",
                 "the password is shared with them", "the password is unique to me", "password is on it",
                 "the password is smooth and creamy", "the password is low in calories",
                 "the password is well worth it", "the password is gentle on surfaces",
                 "the password is taught in English",
                 "the password is someone you trust", "the password is what it says", "the password is word you chose",
                 # (words joined by - that a sentence says of a password: two, a sentence's word among them, the last a
                 # verb's form, a participle or a description)
                 "the password is auto-generated", "the password is well-known", "the password is hard-coded",
                 "the password is state-of-the-art", "the password is up-to-date", "the password is easy-to-guess",
                 "the password is one-size-fits-all", "the password is first-come-first-served",
                 "the password is ten-characters-long", "the password is non-human-readable",
                 "the password is correct-horse-battery-staple-shaped", "the password is one-time",
                 "the password is well-thought-out",
                 # (a word in capitals in a sentence that is not: an acronym; what a sentence in capitals says)
                 "the password is ASCII", "the password is NOT", "the password is UTF8", "the password is SHA256",
                 "the password is TBD", "the password is N/A", "the password is NULL", "the password is OK.",
                 "the password is REQUIRED", "the password is AES encrypted", "the password is MD5",
                 "the password is ID.", "the password is LDAPS", "the password is JSON", "the password is EBCDIC", "PASSWORD IS REQUIRED", "THE PASSWORD IS WRONG",
                 "the password is NOT required", "the password is SSO-managed", "the password is SSO.", "the password is AWS",
                 "the password is YAML", "the password is API-only", "the password is LDAP", "the password is OTP.",
                 "the password is CATS related", "the password is URL-safe", "the password is NONE", "the password is AI",
                 "the password is TRUE", "the password is ALL", "the password is EASY", "the password is IAM-managed",
                 "the password is KMS encrypted", "the password is UTF-8", "the password is PII, treat it so",
                 "the password is vault-backed.", "the token is Okta-managed", "the secret is KMS-encrypted",
                 "the password is UTF8-safe",
                 "the password is WORD.", "the password is NOTE: see below", "the password is UUID.",
                 "the password is SSH.",
                 "PASSWORD IS STORED IN VAULT",
                 # (what a sentence says of a pw, a pass, a passcode; a pass that is no password's word)
                 "the pw is required", "my pass is expired", "the first pass is slow", "the boarding pass is ready",
                 "if pw is None:", "assert pw is not None", "the passcode is wrong", "wifi pw: see the fridge",
                 "the bus pass is valid for the next hour", "bypass is enabled", "the compass is broken",
                 "def login(user, pw: str):", "def f(pw: bytes, n: int):", "pw: bool = False", "pw: int,", "pw: none",
                 # (a pin's number that is no PIN: a count, a board's pin; a PIN's word)
                 "the pin is 4 digits", "GPIO pin is 17", "the pin is 1234 characters long", "my pin is required",
                 "the pin is high", "the PIN is 4 to 6 digits", "the pin is sunshine", "the passcode is 6 digits",
                 # (a pin's number in code or config that is no PIN: a board's, under 4 digits; apt's Pin-Priority)
                 "pin: 13", "LED_PIN = 13", "const int buttonPin = 2;", "Pin-Priority: 1001", "pin: GPIO13",
                 "spin: 4000", "pin_memory: 1024", "pin: 2.0.1", "Pin: release a=stable", "the pin: 4 digits",
                 "pinned: 2024", "pin: 1234567890123", "pin: 1024px", "pin: 0611:no-name-in-module", "PIN: 1234:5678",
                 # (a quoted pw or pass that is none: a command, a flag, a pass that is no password's word)
                 "the pw is `cat ~/.pw`", "the pw is 'none'", "the boarding pass is 'valid'", "the first pass was 'fast'",
                 # (pass: after no name of what a password guards: a test's verdict, a review's pass, a count)
                 "pass: 12 tests", "PASS: test_x", "first pass: parser", "second pass: done", "unit pass: 12",
                 "wifi pass: required", "door pass: see the fridge", "email pass: 3 of 4", "wifi pass: 12 tests",
                 "the wifi pass: str", "router pass: none", "email pass: Sent", "wifi pw: 8 chars",
                 "the pw is 8 characters", "my pass is 2 years old", "door pass: 1234567890123"]


# a password's quoted value shorter than 6 characters (a fixture's, a default's): it is the password all the same
SHORT_QUOTED = [('password: "x7Yq!"', "x7Yq!", 'password: "'), ("$db = ['password' => 'abc'];", "abc", "'password' => '"),
                ('{"db_password": "pw1", "user": "bob"}', "pw1", '"user": "bob"'), ("SECRET='s3!'", "s3!", "SECRET='"),
                ('{"user": "bob", "pass": "abc"}', "abc", '"pass": "')]
# (a flag, a null: a test's result, {"pass": "yes"}, is no password)
SHORT_QUOTED_ORDINARY = ['{"password": "", "user": "bob"}', 'password: "$PW"', 'password_hint: "pet"',
                         "token_type: 'jwt'", '{"pass": "yes"}', '{"pass": "no", "fail": "yes"}', '"password": "none",',
                         "secret: 'false'", '{"passed": 3, "pass": true}', '{"pass": "Y"}', "{'pass': 'TRUE'}"]

# a password's, passphrase's or secret's unquoted value under 6 characters on a config or env line (ini, YAML, a
# .env file): a secret all the same, whatever its length; not a flag, a null, a number, a type, a reference or code
SHORT_UNQUOTED = [("password = abc", "abc", "password = "), ("PASSWORD=abc1", "abc1", "PASSWORD="),
                  ("db_pass: xy9", "xy9", "db_pass: "), ("  password: pw1  # rotated\n  user: bob", "pw1", "  # rotated"),
                  ("[db]\npassword = 1a\nhost = db", "1a", "\nhost = db"), ("export SMTP_PASS=x7!", "x7!", "SMTP_PASS="),
                  # (a value alone is a value: password = pw is ini's as much as Python's, unless the text's code
                  # names it, ``CODE_NAMES``)
                  ("password = pw", "pw", "password = "), ("user = admin\npassword = pw\nhost = db", "pw", "\nhost = db"),
                  ("f = lambda: None\npassword = pw", "pw", "f = lambda: None\n"),
                  # (prose's for … in, as: no code's names)
                  ("waiting for bob in the lobby, known as admin\n[db]\npassword = bob", "password = bob", "[db]\npassword = "),
                  # (4 to 12 digits alone as a password's value: a PIN's shape)
                  ("password: 1234", "1234", "password: "), ("db:\n  password: 123456\n  host: db", "123456", "\n  host: db"),
                  ("DB_PASSWORD=0000", "0000", "DB_PASSWORD="), ("SMTP_PASS: 4821", "4821", "SMTP_PASS: "),
                  ("gcloud x --password=123456 --username=bob", "123456",
                   "--password=[secret redacted] --username=bob"),
                  ("  password = 4821  # door", "4821", "  # door"),
                  ('{"user": "bob", "password": 12345678, "port": 5432}', "12345678", '"port": 5432')]
SHORT_UNQUOTED_ORDINARY = ["password: true", "password = None", "secret: false", "PASS: 3", "password: 8",
                           # (a number that is a count, a length or a setting: under 4 digits, a unit after it, a
                           # name's other part, pass's test counts, a secret's)
                           "password: 8 characters", "password_min_length: 1234", "PASSWORD_MAX_AGE: 9000",
                           "passwords: 1234", "PASS: 1234", "secret: 1234", "password_attempts: 1000",
                           '"password_history": 2400,', "password: 1234567890123",
                           # (a number with its unit: a time's, a size's, a share's)
                           "password: 1234ms", "password: 12ms", "password: 1.5s", "password: 4KB", "secret: 30s",
                           '"password": "1234ms"', "token: 1234ms", "password: 100%", "password: 2.5min",
                           "password: 50mm", "secret: 2.4GHz", "password: 20th", "password: 1.25x",
                           "password: str", "secret: bool", '  "pass": true,', "password: ~", "password = ...",
                           "password: ${PW}", "password: $PW", "password = pw;", "password: null", "password: f(x)",
                           "password: wrong", "password_ttl: 3d", "PASS: t1", '            password = b""',
                           "        self._pwd = pwd", "    this.secret = s"]
# an identifier the text's code names (a parameter, a loop's or a with's variable, an assignment in Python) assigned
# to a password's name is code, not its value
CODE_NAMES = ["def connect(user, pw):\n    password = pw\n    return login(user, password)",
              "for pw in candidates:\n    password = pw", "def f(new_password):\n    password = new_password",
              "with open(path) as fh:\n    secret = fh", "import os\npw = os.environ['PW']\npassword = pw",
              "lambda pw: dict(password = pw)",
              # (a keyword argument closing its call: its parenthesis is no part of the name)
              "def f(password):\n    g(x=1, password=password)", "def f(api_key):\n    return Client(api_key=api_key)",
              "def f(pw):\n    connect(host, password=pw))"]


# a user and a password after auth: (a password's shape: digits in its letters, a symbol), the user kept
AUTH_PAIRS = [("auth: bob secret123", "secret123", "auth: bob "),
              ("basic_auth: deploy s3cr3t99", "s3cr3t99", "basic_auth: deploy "),
              ("  httpAuth = admin Tr0ub4dor&3  # staging", "Tr0ub4dor&3", "  httpAuth = admin "),
              ("log in with auth: bob secret123\nthen", "secret123", "with auth: bob [password redacted]\nthen"),
              # (a plain word ending a line that holds only the name and the pair, in config: ini's =, a YAML key
              # beside others or under a mapping, or its user shaped as one: an address, letters and digits)
              ("proxy:\n  host: 10.0.0.1\n  auth: bob hunter\n  port: 3128", "hunter", "  auth: bob [password redacted]\n  port: 3128"),
              ("smtp:\n  auth: alice bananas  # staging", "bananas", "  auth: alice "),
              ("auth = admin sunshine", "sunshine", "auth = admin "), ("[proxy]\nhttp_auth = bob hunter", "hunter", "auth = bob "),
              ("auth: bob@example.com hunter", "hunter", "auth: bob@example.com "), ("auth: deploy2 letmein", "letmein", "deploy2 ")]
AUTH_PAIRS_ORDINARY = ["auth: fix login", "auth: bump oauth2", "auth: drop sha256", "auth: bump v2.1.0",
                       "auth: fix issue42 again", "auth_method: basic digest2x", "auth: bob ${AUTH_PASSWORD}",
                       "author: bob secret123", "oauth: bob secret123",
                       "auth: bump version", "auth: add tests", "Auth: Add tests", "auth: login page", "auth: fix typo",
                       "auth: session expired", "auth: token refresh", "auth: update docs", "auth: more tests",
                       "auth: the user", "auth: handle errors", "auth: cleanup code", "  auth: none required",
                       "3f2a1b9 auth: rotate keys", "fix(auth): bob hunter", "auth: basic realm", "auth: bearer token",
                       # (a commit's subject: no config around it; nor a changelog's lines of several words)
                       "auth: session cookies", "auth: session cookies\napi: rate limits\nui: dark mode",
                       "commit 3f2a1b9\nDate:   Mon Dec 7\n\n    auth: redaction shapes\n", "  auth: view quality",
                       "proxy:\n  auth: add tests", "auth = fix login",
                       # (a method's or a protocol's pair in config: no user and password)
                       "mongodb:\n  auth: scram sha", "broker:\n  auth: sasl scram", "client:\n  auth: mutual tls",
                       "mail:\n  auth: oidc github", "sso:\n  auth: google workspace", "[db]\nauth = pam unix",
                       "registry:\n  auth: htpasswd file", "vpn:\n  auth: radius chap", "db:\n  auth: md5 trust",
                       "ftp:\n  auth: anonymous allowed", "idp:\n  auth: saml okta", "ldap:\n  auth: simple bind"]


@pytest.mark.parametrize("text,secret,kept", AUTH_PAIRS)
def test_a_password_after_its_user_after_auth_is_redacted(text, secret, kept):
    out = redact(text)
    assert secret not in out and kept in out and "[password redacted]" in out, out


def test_a_long_line_of_commands_is_read_once():
    """``mysql -p'`` repeated over 100 KB was read to the line's end from each command in it looking for its
    password: 45 s of CPU on a model request. A command's password flag is looked for in its next 256
    characters; a password after more options than that is still found when it looks random (``-pXk9…``). So
    with URLs: x:// repeated (detect-secrets' npm detector, 7.5 s; now run only beside an _authToken), and a
    webhook's path looked for in a URL's next 256 characters (https://a/webhooks repeated: 5 s)."""
    for text in ("sshpass -x " * 9000, "redis-cli -x " * 7500, "docker login -x " * 6000,
                 "x://" * 25000, "https://a/webhooks" * 5500):
        assert redact(text) == text
    text = "mysql -p'" * 11000  # (its last command's password is quoted, ``-p'mysql -p'``)
    assert redact(text) == text[: -len("mysql -p'")] + "[password redacted]'"
    assert redact("mysql " + "--ssl-mode=REQUIRED " * 5 + "-u root -p'hunter2' shop") == \
        "mysql " + "--ssl-mode=REQUIRED " * 5 + "-u root -p'[password redacted]' shop"


# a config line's value (YAML, ini, a .env file, properties) unquoted with spaces in it: a passphrase runs to the
# line's end (a comment after `` #`` aside), or to its closing quote; only its first word was redacted, the rest
# sent. (text, the secret's words, what must stay)
PHRASES = [
    ("passphrase: correct horse battery staple", ["horse battery staple", "correct"], "passphrase: "),
    ("  password: correct horse battery staple  # rotated in May\n  user: bob", ["horse", "staple"],
     "  # rotated in May\n  user: bob"),
    ("[db]\npassword = correct horse battery staple\nhost = db.internal", ["horse", "staple"], "\nhost = db.internal"),
    ("DB_PASSWORD=correct horse battery staple", ["horse", "staple"], "DB_PASSWORD="),
    ("- secret: correct horse battery staple\n- name: web", ["horse", "staple"], "\n- name: web"),
    ("spring.datasource.password: correct horse battery staple", ["horse", "staple"], "spring.datasource.password: "),
    ('SECRET_KEY="correct horse battery staple"', ["horse", "staple"], 'SECRET_KEY="'),
    ("export GPG_PASSPHRASE='correct horse battery staple'", ["horse", "staple"], "export GPG_PASSPHRASE='"),
    ("PASS: correct horse battery staple", ["horse", "staple"], "PASS: "),
    # (one word a sentence holds is not a sentence: a passphrase may hold it)
    ("passphrase: the quick brown fox jumps", ["quick brown fox", "jumps"], "passphrase: "),
    ("secret: correct horse on battery staple", ["horse", "staple"], "secret: "),
    # (NAME=value, a .env file's or a shell's, is no sentence's shape: its words are a passphrase's, whichever)
    ("PASSWORD=to be or not to be", ["be or not"], "PASSWORD="),
    ("      - MYSQL_ROOT_PASSWORD=it is what it is", ["what it is"], "      - MYSQL_ROOT_PASSWORD="),
    ("export GPG_PASSPHRASE=now is the time  # gpg", ["is the time"], "  # gpg"),
    # (a word that is also a command's, go, make, time, env, is a passphrase's unless what follows is that command's)
    ("PASSWORD=correct go fish", ["go fish"], "PASSWORD="), ("PASSWORD=correct time machine", ["time machine"], "="),
    ("PASSWORD=big make believe", ["make believe"], "PASSWORD="), ("SECRET=why env vars", ["env vars"], "SECRET="),
]
# beside them, what a config line's value is not: a command after an environment variable's value, code, a
# sentence, a reference with a comment after it, the next key
PHRASES_BESIDE = [
    ("DB_PASSWORD=Zq8mX2vK7pLw ./migrate.sh --all", "DB_PASSWORD=[secret redacted] ./migrate.sh --all"),
    ("DB_PASSWORD=Zq8mX2vK7pLw npm test", "DB_PASSWORD=[secret redacted] npm test"),
    ("DB_PASSWORD=Zq8mX2vK7pLw go test ./...", "DB_PASSWORD=[secret redacted] go test ./..."),
    ("DB_PASSWORD=Zq8mX2vK7pLw make migrate", "DB_PASSWORD=[secret redacted] make migrate"),
    ("DB_PASSWORD=Zq8mX2vK7pLw make", "DB_PASSWORD=[secret redacted] make"),
    ("DB_PASSWORD=Zq8mX2vK7pLw time npm test", "DB_PASSWORD=[secret redacted] time npm test"),
    ("DB_PASSWORD=Zq8mX2vK7pLw env -i node app.js", "DB_PASSWORD=[secret redacted] env -i node app.js"),
    ("PASSWORD=hunter2 go run main.go", "PASSWORD=[secret redacted] go run main.go"),
    ("password: ${DB_PASSWORD}  # from the vault", "password: ${DB_PASSWORD}  # from the vault"),
    ("PASS: gcc.dg/pr123.c (test for excess errors)", "PASS: gcc.dg/pr123.c (test for excess errors)"),
    ("password = getpass.getpass('Password: ') or default", "password = getpass.getpass('Password: ') or default"),
    ("password: reset flow now emails the user", "password: reset flow now emails the user"),
    # (a sentence after a password's name: its first word is judged as a lone value, as before, the rest stays)
    ("- password: stored in the vault, ask ops", "- password: [secret redacted] in the vault, ask ops"),
    ("Password: Enter your password below", "Password: Enter your password below"),
    ("password-encoder: bcrypt with cost 12", "password-encoder: bcrypt with cost 12"),
    ("PASSWORD_PATTERN=^[A-Za-z0-9]{12,}$", "PASSWORD_PATTERN=^[A-Za-z0-9]{12,}$"),
    ("password_strength: very strong", "password_strength: very strong"),
]


@pytest.mark.parametrize("text,secrets,kept", PHRASES, ids=[s[0][:40] for s in PHRASES])
def test_a_config_lines_value_runs_to_the_lines_end(text, secrets, kept):
    out = redact(text)
    assert "[secret redacted]" in out and kept in out, out
    for secret in secrets:
        assert secret not in out, out


@pytest.mark.parametrize("text,want", PHRASES_BESIDE, ids=[s[0][:40] for s in PHRASES_BESIDE])
def test_what_follows_a_config_value_that_is_not_one_stays(text, want):
    assert redact(text) == want


# a token is one run of characters: ordinary words after ``token:`` are prose (a commit's subject), not a secret;
# a token-like run there is one
TOKEN_PROSE = ["token: refresh on 401", "fix(api) token: refresh on 401", "auth: handle expired tokens in the client",
               "api_key: rotate them monthly", "Token: Refresh it before it expires",
               "auth: internationalization of the login page", "token: strengths and weaknesses",
               # (one word after auth or secrets alone: a mode, GitHub Actions' secrets: inherit, a commit's subject)
               "auth: release", "auth: update", "auth: basic", "secrets: inherit", "    secrets: inherit\n    with:",
               "secrets: write", "secrets: read", "  secrets: write  # the app's permission\n  issues: read", "Secrets: Tidy",
               "Auth: Refactor", "fix(ci) auth: cleanup", "user.pw", "if user.pw:"]
TOKEN_VALUES = [("token: Zq8mX2vK7p on staging", "Zq8mX2vK7p"), ("token: abcdefghij", "abcdefghij"),
                ("TOKEN=abcdefghij python run.py", "abcdefghij"), ("auth_token: abcdefghij\nuser: bob", "abcdefghij"),
                ('token: "abcdefghij" for now', "abcdefghij"),
                # (letters no word is made of: a random run of small letters, whatever prose follows it)
                ("api_key: kqzvxjwpmrtlbnhdfgsy for staging", "kqzvxjwpmrtlbnhdfgsy"),
                ("token: qwhtzkvbnmprslt then restart", "qwhtzkvbnmprslt"),
                ("auth: abcdefghijklmnopqrstuvwxyz please", "abcdefghijklmnopqrstuvwxyz"),
                # (a word shaped like a password, a random run, or after a name that is more than auth or secrets)
                ("auth: s3cr3tpass", "s3cr3tpass"), ("secrets: kqzvxjwpmrtlbnhdfgsy", "kqzvxjwpmrtlbnhdfgsy"),
                ("auth_token: release", "release"), ("secret: sunshine", "sunshine"), ("secret: write", "write"),
                ("SECRETS=write", "write")]


@pytest.mark.parametrize("text,secret", TOKEN_VALUES)
def test_a_token_like_run_after_a_tokens_name_is_redacted(text, secret):
    out = redact(text)
    assert secret not in out and "[secret redacted]" in out, out


# a commit's subject or a changelog's line after a token's name: its first word an ordinary word with an
# apostrophe in it (a possessive, a contraction) is prose, the next word's too (Claude Code's)
TOKEN_PROSE_WORDS = ["auth: redaction's short config values", "token: Claude Code's slash command said so",
                     "auth: compactor's retry times with no builder", "auth: shouldn't refresh on 401",
                     "auth: patterns' docstring wrapped", "auth: redaction\u2019s short config values"]
# (still a secret: a run that is no word with 's after it, a word shaped like a password, one ending its line)
TOKEN_VALUES_WORDS = [("token: kqzvxjwpmrtlbnhdfgsy's test run", "kqzvxjwpmrtlbnhdfgsy"),
                      ("token: s3cr3t99's in the file", "s3cr3t99"), ("auth_token: Zq8mX2vK7p's here", "Zq8mX2vK7p"),
                      ("api_key: sunshine's", "sunshine"), ("token: 'kqzvxjwpmrtls' for now", "kqzvxjwpmrtls")]


# (a word of ordinary parts joined by - or _, a version among them: a command's, a function's, a compound's name;
# the next word's too: offline build-tree)
TOKEN_PROSE_WORDS += ["auth: build-tree and watch share one lease", "auth: Bearer-token support", "auth: v2-migration done",
                      "token: retry_seconds is the cap", "auth: offline build-tree at 100,000 messages",
                      "api_key: read-only by default", "auth: sign-in-with-apple flow", "token: utf8-safe slicing"]
TOKEN_VALUES_WORDS += [("token: s3cr3t-99 and more", "s3cr3t-99"), ("token: Zq8mX2vK7p-x on staging", "Zq8mX2vK7p"),
                       ("auth: kqzvxjwpmrtlbnhdfgsy-abc please", "kqzvxjwpmrtlbnhdfgsy"),
                       ("token: xkcdqwrt-zzkvbnmp for staging", "xkcdqwrt-zzkvbnmp"),
                       ("api_key: build-tree", "build-tree"), ("auth: Tr0ub4dor-x and more", "Tr0ub4dor"),
                       ("token: my_s3cr3t_token then restart", "my_s3cr3t_token")]


# (a word ending in a colon, a comma or a semicolon, a scope's or a list's, before more prose)
TOKEN_PROSE_WORDS += ["auth: add_cpython: Support 3.12", "auth: scheduler, build-tree, watch, model",
                      "token: interrupted; tests; README", "auth: release: bump the version",
                      "token: Compactor, scheduler and watch"]
TOKEN_VALUES_WORDS += [("token: s3cr3t99, then restart", "s3cr3t99"), ("auth: Zq8mX2vK7p: on staging", "Zq8mX2vK7p"),
                       ("token: kqzvxjwpmrtlbnhdfgsy; please", "kqzvxjwpmrtlbnhdfgsy"),
                       ("api_key: sunshine,", "sunshine"), ("token: sunshine:\nuser: bob", "sunshine")]


# (an acronym's capitals, first or next, and a part of a compound: README, MCP, API-only)
TOKEN_PROSE_WORDS += ["auth: README wording", "token: README: MCP ids that are no string", "auth: API-only access for now",
                      "auth: README, MCP and the man pages", "token: NDJSON import keeps order"]
TOKEN_VALUES_WORDS += [("token: QXZVBNMKPW and more", "QXZVBNMKPW"), ("auth: ABCDEFGHIJKLMNOPQRSTUVWXYZ please", "ABCDEFGHIJ"),
                       ("token: README", "README"), ("token: S3CR3T99 then restart", "S3CR3T99"),
                       ("api_key: README\nuser: bob", "README")]


# (a file's, a path's or a module's name of ordinary parts joined by . or /, first or next)
TOKEN_PROSE_WORDS += ["auth: lock.json and projects.json in the store layout", "token: bench/search.py: both states",
                      "auth: Memory.save_config checks the settings", "auth: README, bench/README: final figures",
                      "token: view.py, viewfile.py, index.py"]
TOKEN_VALUES_WORDS += [("token: eyJhbGciOi.eyJzdWIi.SflKxwRJ and more", "SflKxwRJ"),
                       ("auth: kqzvxjwpmrtlbnhdfgsy.json then restart", "kqzvxjwpmrtlbnhdfgsy"),
                       ("token: s3cr3t99/prod then restart", "s3cr3t99"), ("token: lock.json", "lock.json"),
                       ("token: Zq8mX2vK7p.json then restart", "Zq8mX2vK7p")]


# (the word after token in prose, read for a random run: a capital, a letter and a colon or a dot were taken for one)
TOKEN_PROSE_WORDS += ["token: Providers: a 3xx from the provider", "token: Memory.append has no prepared keyword",
                      "token: Anthropic: an input count", "the token for Memory.append is new"]
TOKEN_VALUES_WORDS += [("token: Zq8mX2vK.p7: on staging", "Zq8mX2vK"), ("the token Xk9.Qm2zL7vR has expired", "Xk9.Qm2zL7vR")]


# (a command's option, first or next, a word in parentheses next: a command's or a flag's subject)
TOKEN_PROSE_WORDS += ["token: --max-cost-per-day 1e-7 was refused", "auth: --version only on the root app",
                      "auth: build-tree --dry-run counts the calls", "token: import --follow: a session file",
                      "auth: providers (openai, anthropic, command)", "token: remember --session '' stored a memory"]
TOKEN_VALUES_WORDS += [("token: --Zq8mX2vK7p then restart", "Zq8mX2vK7p"), ("token: kqzvxjwpmrtlbnhdfgsy --verbose", "kqzvxjwpmrtlbnhdfgsy"),
                       ("token: s3cr3t99 (for staging)", "s3cr3t99"), ("auth_token: sunshine --verbose\n", "sunshine")]


# (a private name, its underscores first: a function's or a module's)
TOKEN_PROSE_WORDS += ["auth: _fresh reads each parked leaf's failure once", "token: _changed names its test once",
                      "auth: Memory._here: moved() then pin()", "token: __init__ imports nothing heavy",
                      "auth: builder: _fresh reads each parked leaf's failure once", "token: import: _changed names its test",
                      "auth: module: __init__ imports nothing heavy"]
TOKEN_VALUES_WORDS += [("token: _Zq8mX2vK7p then restart", "Zq8mX2vK7p"), ("token: _kqzvxjwpmrtlbnhdfgsy please", "kqzvxjwpmrtlbnhdfgsy"),
                       ("token: _sunshine\nuser: bob", "sunshine")]

# (Bearer, Basic or Token before an ordinary word of 12 letters or more: prose, not a header's credential)
TOKEN_PROSE_WORDS += ["Token configuration happens at startup", "the token expiration_seconds is short",
                      "Basic authentication over plain HTTP is refused", "bearer authentication.",
                      "Token validation.rules moved to the gateway"]
TOKEN_VALUES_WORDS += [("Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnopqrstuvwxyz0123"),
                       ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
                       ("Token kqzvxjwpmrtlbnhdfgsy", "kqzvxjwpmrtlbnhdfgsy"), ("Bearer eyJhbGciOiJIUzI1NiJ9", "eyJhbGciOiJIUzI1NiJ9")]


@pytest.mark.parametrize("text", TOKEN_PROSE_WORDS)
def test_prose_after_a_tokens_name_keeps_its_words(text):
    assert redact(text) == text


@pytest.mark.parametrize("text,secret", TOKEN_VALUES_WORDS)
def test_a_token_with_punctuation_after_it_is_redacted_still(text, secret):
    out = redact(text)
    assert secret not in out and "redacted]" in out, out


# a value passing for a reference: a $ word mixing digits into its letters (leetspeak: $UP3RS3CR3T, where an
# environment variable holds at most one digit run between letters, $K8S_TOKEN), and two dotted words that are
# no code's (Hunter.Password: a setting is read from an object named in lower case, settings.API_KEY, from a
# constant, BuildConfig.API_KEY, Secrets.DB_PASSWORD, or through more than one dot, Settings.Default.Password)
LIKE_REFERENCES = [("password: $UP3RS3CR3T", "UP3RS3CR3T"), ("DB_PASSWORD=$P4SSW0RD", "P4SSW0RD"),
                   ("password: Hunter.Password", "Hunter.Password"), ("secret: Super.Secret", "Super.Secret"),
                   ("token: $S3CR3T_T0K3N", "S3CR3T_T0K3N"), ("the password is $ecretPassw0rd", "ecretPassw0rd")]
STILL_REFERENCES = ["password: $K8S_TOKEN", "password: $AWS_S3_SECRET", "PASSWORD=$P4PASSWD", "token: $OAUTH2_TOKEN",
                    "password: Settings.Default.Password", "apiKey: BuildConfig.API_KEY", "password: Secrets.DB_PASSWORD",
                    "password: config.db.password", "api_key: settings.apiKey", "token: ConfigManager.authToken",
                    "password: env.DB_PASSWORD", "apiKey: params.litellmApiKey",
                    # (a PowerShell parameter's variable: the LongMemEval texts' Add-Computer -Credential $domainCreds)
                    "Add-Computer -DomainName $domainName -Credential $domainCreds -Restart -Force",
                    "Invoke-Sqlcmd -Username sa -Password $dbPassword", "Connect-Api -Token $accessToken -Secret $clientSecret"]

# code as a password's value: a call through a class, a module, a crate (String.valueOf(x), System.getenv("X"),
# std::env::var("X")), a constructor of a name or a string (String(x)); not a password shaped like one's name
# (Hunter2(abc), a number between parentheses)
CODE_VALUES = ["password: String.valueOf(x)", 'password = System.getenv("DB_PASSWORD")', "password: Base64.decode(x)",
               'password: Environment.GetEnvironmentVariable("DB_PASSWORD")', 'password: os.Getenv("DB_PASSWORD")',
               'password: std::env::var("DB_PASSWORD")', "password: Secret::new(x)", "password: String(x)",
               'password: ENV.fetch("DB_PASSWORD")', 'password: Deno.env.get("DB_PASSWORD")', "password = new String(pw)",
               "the password is String.valueOf(chars)",
               # (what held before)
               'password: getenv("DB_PASSWORD")', 'password: os.environ["DB_PASSWORD"]', "password: config.password",
               "password: ${DB_PASSWORD}", "password: $DB_PASSWORD", 'password = os.environ.get("DB_PASSWORD")',
               'password: ENV["DB_PASSWORD"]', "password = str(x)", "password: $(cat pw.txt)", "password = SecretStr(x)",
               # (a name of a :: path is a type's: CloudFormation's, in botocore's data)
               '    "AWS::SecretsManager::Secret": "c85175a4ebcce361",',
               # (a command substituted, in backticks or $( ): its output is the value, the command is code)
               "password: `cat pw.txt`", "PASSWORD=`cat ~/.pw`", "export DB_PASSWORD=`pass show db`",
               "password: $(pass show db)", "DB_PASSWORD=$(security find-generic-password -w)",
               "the password: `gpg -d pw.gpg`"]
CALL_LIKE_VALUES = [("password: Hunter2(abc)", "Hunter2"), ("password: Summer(2024)", "Summer(2024)"),
                    ("password: Tr0ub.4dor(x)", "Tr0ub"),
                    # (a word in backticks is no command: markdown's)
                    ("password: `hunter2x`", "hunter2x"), ("password: `correct horse`", "horse"), ("PASSWORD=`abc`", "abc")]


@pytest.mark.parametrize("text,secret", LIKE_REFERENCES + CALL_LIKE_VALUES)
def test_a_value_like_a_reference_is_redacted(text, secret):
    out = redact(text)
    assert secret not in out and "[secret redacted]" in out, out


def test_a_config_lines_passphrase_never_reaches_the_command_provider(run, home, tmp_path):
    """A request holds a message's first line after ``<input>user: `` and a view line after ``user: `` (or
    ``3+1|``): a config line's value runs to the line's end there too, and ``</input>`` after it is the task's."""
    seen = tmp_path / "prompts.txt"
    script = tmp_path / "model.py"
    script.write_text(
        "import sys\n"
        f"open({str(seen)!r}, 'a').write(sys.stdin.read() + '\\n----\\n')\n"
        "print('user: a summary of this part; pi: done with it.')\n")
    configure(home, {"provider": "command", "command": f"{sys.executable} {script}", "timeout": 20})
    mem = Memory.at("m")
    filler = " ".join(f"w{k}" for k in range(150))
    mem.append([{"kind": "user", "text": "passphrase: correct horse battery staple"},
                {"kind": "echo", "text": f"password: correct horse battery staple\n{filler}"},
                {"kind": "pi", "text": f"DB_PASSWORD=purple monkey dishwasher\n{filler}"},
                {"kind": "user", "text": "token: refresh on 401"}, {"kind": "note", "text": filler}] * 8)
    out = run("build-tree", "m")
    assert out.exit_code == 0, out.stderr
    sent = seen.read_text()
    for secret in ("horse battery staple", "monkey dishwasher", "correct", "purple"):
        assert secret not in sent
    assert "user: passphrase: [secret redacted]</input>" in sent and "token: refresh on 401" in sent


# a YAML mapping named like a secret (auth:, token:, secrets:) took the next line's key for its value, and the
# secret on that line was sent: a name's value is on its own line
NESTED = [("auth:\n  username: bob\n  password: hunter2x", "hunter2x", "auth:\n  username: bob\n  password: "),
          ("token:\n  secret: Zq8mX2vK7pLw", "Zq8mX2vK7pLw", "token:\n  secret: "),
          ("secret:\n  passphrase: correct horse battery staple", "horse battery", "secret:\n  passphrase: ")]


@pytest.mark.parametrize("text,secret,kept", NESTED)
def test_a_secret_under_a_mapping_named_like_one_is_redacted(text, secret, kept):
    out = redact(text)
    assert secret not in out and out.startswith(kept) and "[secret redacted]" in out, out


def test_a_mapping_named_like_a_secret_keeps_its_keys():
    text = "secrets:\n  db_password:\n    file: ./db_password.txt\nauth:\n  type: basic"
    assert redact(text) == text


# a name's value on the next line, indented under it and no key there: a YAML scalar (plain, or a block after |
# or >), a JSON value a formatter wrapped
NEXT_LINE = [("api_key:\n  abcdef1234567890abcdef\nuser: bob", ["abcdef1234567890abcdef"], "\nuser: bob"),
             ('  "password":\n    "hunter2xyz",\n  "user": "bob"', ["hunter2xyz"], '\n  "user": "bob"'),
             ("password: |\n  correct horse battery staple\nhost: db", ["horse battery", "correct"], "\nhost: db"),
             ("  DB_PASSWORD: >-\n    Tr0ub4dor&3xyz\n    and more\n  DB_HOST: db", ["Tr0ub4dor", "and more"],
              "  DB_HOST: db"),
             ("secret:\n  Zq8mX2vK7pLwR4tY", ["Zq8mX2vK7pLwR4tY"], "secret:\n  ")]
NEXT_LINE_KEPT = ["secrets:\n  - name: db\n    file: ./db.txt", "password:\n  # set in the vault\n  min_length: 12",
                  "password:\n  ${DB_PASSWORD}", "token:\n  {\"type\": \"jwt\"}",
                  "  password:\n    | string\n    | undefined", "password_file:\n  /run/secrets/db_password.txt",
                  "secret:\n\n  Keep it in the vault.", "Secret:\n  Keep it in the vault, never in git.",
                  '"password":\n  "${DB_PASSWORD}",']


@pytest.mark.parametrize("text,secrets,kept", NEXT_LINE)
def test_a_value_on_the_next_line_under_a_secrets_name_is_redacted(text, secrets, kept):
    out = redact(text)
    assert "[secret redacted]" in out and kept in out, out
    for secret in secrets:
        assert secret not in out, out


# a password's or passphrase's value of plain words ending a line of prose is a phrase too; a value with other
# signs in it there (code, a list, a sentence) is judged by its first word as before
MID_LINE = [("here is the wifi password: purple monkey dishwasher", "monkey dishwasher", "here is the wifi password: "),
            ("user: the staging passphrase = correct horse battery staple.", "horse battery", "staging passphrase = "),
            ("ok, DB password: Purple Monkey Dishwasher!", "Monkey Dishwasher", "ok, DB password: ")]
MID_LINE_KEPT = [
    ("def login(user: str, password: str, remember: bool = False) -> bool:",) * 2,
    ("function f(password: string, salt: string): Hash {",) * 2,
    ("the old password: reset flow now emails the user",) * 2,
    ("call it with password: secret123, then restart", "call it with password: [secret redacted], then restart"),
    ("x = {password: pw, user: name}",) * 2, ("Note the secret: never commit it",) * 2,
    ("Password: Please choose a strong password", "Password: [secret redacted] choose a strong password"),
    # (a comparison is code; a placeholder is never read again as a word: password [secret redacted] redacted])
    ("password == abc",) * 2, ("password == 'abc'",) * 2, ("password === abc;",) * 2,
    ("password = =abc", "password = [secret redacted]"),
    ("password =correct horse battery", "password =[secret redacted]")]


@pytest.mark.parametrize("text,secret,kept", MID_LINE)
def test_a_phrase_ending_a_line_of_prose_is_redacted(text, secret, kept):
    out = redact(text)
    assert secret not in out and kept in out and "[secret redacted]" in out, out


@pytest.mark.parametrize("text,want", MID_LINE_KEPT)
def test_code_and_sentences_after_a_password_mid_line_keep_their_words(text, want):
    assert redact(text) == want


# a type after a secret's name is code (a TypeScript interface, a Python or Rust signature), not a value
TYPED = ["  password: string;", "  passphrase: string,", "password: Optional[str] = None", "secret: String,",
         "passphrase: Option<&str>,", "api_key: SecretStr", "token: string | null;", "password?: string;",
         "    passphrase: Uint8Array,", "  password: string | undefined;", "password: string | undefined",
         "  secret: string[]", "passphrase: str = None  # from the form"]
TYPED_VALUES = [("password: string123", "string123"), ("password: Strings4ever", "Strings4ever"),
                # (a type's word then a sign that is not code's: a password, str@wberry99, string!2024)
                ("password: str@wberry99", "wberry99"), ("DB_PASSWORD: string!2024", "2024"),
                ("secret: bytes$Z9q", "Z9q"), ("the password is str@wberry99", "wberry99"),
                ("passphrase: string theory rocks", "theory rocks"), ("password: String cheese 4ever", "cheese"),
                ("password: String#1x", "1x")]


@pytest.mark.parametrize("text,secret", TYPED_VALUES)
def test_a_value_only_beginning_like_a_type_is_redacted(text, secret):
    out = redact(text)
    assert secret not in out and "[secret redacted]" in out, out


def test_the_librarys_detectors_read_long_runs_of_spaces_cut_and_the_text_keeps_them():
    key = "Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7jKl0nOp_-"
    text = f"ibm_cloud_iam_key{' ' * 30}{key}\nnext:{' ' * 40}line\tand\t\t\t\t\t\t\t\t\t\ttabs"
    out = redact(text)
    assert key not in out and "redacted]" in out, out
    assert out.endswith(f"\nnext:{' ' * 40}line\tand\t\t\t\t\t\t\t\t\t\ttabs") and f"key{' ' * 30}[ibm cloud iam key redacted]" in out, out


# a manifest's next key after ``kind: Secret`` is no secret (stringData: was taken for the word after "secret")
def test_the_key_after_a_kubernetes_secrets_kind_stays():
    text = "apiVersion: v1\nkind: Secret\nstringData:\n  password: Zq8mX2vK7pLw\n  username: admin"
    assert redact(text) == "apiVersion: v1\nkind: Secret\nstringData:\n  password: [secret redacted]\n  username: admin"


@pytest.mark.parametrize("text", ORDINARY + NOT_NAMES + MORE_ORDINARY + VERDICTS + ABOUT_A_SECRET + REFERENCES
                         + HUNTED_ORDINARY + ARROWS_ORDINARY + XML_ORDINARY + DOCKER_ENV_ORDINARY + CHAT_ORDINARY
                         + SHORT_QUOTED_ORDINARY + SHORT_UNQUOTED_ORDINARY + AUTH_PAIRS_ORDINARY + CODE_VALUES + TOKEN_PROSE
                         + STILL_REFERENCES + NEXT_LINE_KEPT + TYPED + CODE_NAMES)
def test_what_holds_no_secret_is_left_alone(text):
    """Ordinary text, a name about a secret, a reference to one, a test's verdict, prose after a token's name, a
    type, a flag, code, the line under a name that holds no value: each is sent as it is."""
    assert redact(text) == text


REDACTED_IN_PLACE = ARROWS + XML + DOCKER_ENV + CHAT + SHORT_QUOTED + SHORT_UNQUOTED


@pytest.mark.parametrize("text,secret,kept", REDACTED_IN_PLACE, ids=[s[0][:40] for s in REDACTED_IN_PLACE])
def test_the_secret_goes_and_what_names_it_stays(text, secret, kept):
    """A hash's value after =>, XML config, a Dockerfile's ENV, a password said in chat, a short one: the
    secret is redacted, its name and the text around it kept."""
    out = redact(text)
    assert secret not in out and kept in out and "[secret redacted]" in out, out
