"""Secret redaction: what leaves the machine for a compactor has its secrets replaced by placeholders.

Only the outgoing request is redacted; the log keeps every original byte. Three layers, in this order:

1. pimem's own patterns: whole private key blocks, credentials inside URLs (a password, the user's too when empty,
   ``redis://:PASS@host``), provider key prefixes, webhook URLs, connection-string keys (``AccountKey=``), an AWS secret
   key beside its key id, and values assigned to secret-looking names (``password=…``, ``DB_PASS=…``, ``passphrase: …``,
   ``ENCRYPTION_KEY=…``, ``"api_key": "…"``, a hash's ``'password' => '…'``, XML's ``<add key="DbPassword" value="…"/>``
   and ``<password>…</password>``, a Dockerfile's ``ENV DB_PASSWORD …``, a password's quoted value whole, however short,
   a password's, passphrase's or secret's unquoted value to its config line's end (however short: ``password = abc``),
   or to the end of a line of prose when it is plain words, ``Authorization: Bearer …``), each on its own line (or on
   the line indented under a name ending its line: a YAML block after ``password: |``, a wrapped JSON value), unless the
   name's last part says the value is about a secret (``password_reset_url``, ``secretsManagerArn``, ``AUTH_HOST``,
   ``apiKeyId``; or when: ``PasswordLastUsed``, ``password_changed_at``) and the value is not key material, or the value
   is a reference (``${DB_PASSWORD}``, ``settings.API_KEY``; not ``$UP3RS3CR3T`` nor ``Hunter.Password``), a type
   (``password: string;``, ``string | undefined``; not ``str@wberry99``), code (``String.valueOf(x)``, a command
   substituted: ``$(pass show db)``, ```cat pw.txt```, a name the text's code gives: ``def f(pw):`` then ``password =
   pw``; alone that is a value, an ini's as much as Python's), a flag or a null (``{"pass": "yes"}``), a sentence (not
   after ``NAME=`` at a line's start), or ordinary words after a token's name (``token: refresh on 401``; a word with an
   apostrophe, of parts joined by - _ . or /, an acronym, a private name or an option, with a colon or a comma after it,
   before more words: ``auth: redaction's short values``, ``auth: build-tree and watch``, ``auth: add_cpython: Support
   3.12``, ``auth: README wording``, ``token: --dry-run counts``; one word ending the line after ``auth`` or ``secrets``
   alone: ``auth: release``, ``secrets: inherit``; not a random run of letters nor a part shaped like a password:
   ``s3cr3t-99``);
2. credentials by position: the password of ``curl -u user:PASS``, ``auth: USER PASS`` (a plain word too when the line
   is config's: ``auth = bob hunter``, beside or under YAML keys; not a commit's subject: ``auth: add tests``), ``mysql
   -pPASS``, ``sshpass -p``, ``redis-cli -a``, ``docker login -p``, ``--password PASS``; and, kept only when they look
   random (entropy and a mix of character classes), a token as a URL's user (``https://TOKEN@host``, a Sentry DSN), URL
   query values named as credentials (``?key=``, ``?code=``, ``X-Goog-Signature=``), cookie values, any other ``*_KEY=``
   holding key material, ``mysql -p PASS``, the word after ``password``/``secret``/``token`` in prose (not a
   ``$variable`` after a ``-Password`` parameter, nor the next line's key, nor an algorithm's name, ``sha256``); after
   ``password is`` (or ``is:``) or ``pass:`` a word only shaped like a password too (``hunter2``, ``s3cr3t!``), and
   plain words ending the line after ``password is`` unless a sentence's (``stored in vault``; ``red hot chili`` is
   none, nor a command of short words: ``let me in``), one plain word said alone there too: ending its sentence, before
   a new clause, a time's word, a parenthesis or what it is for (``my password is sunshine and my username is bob``,
   ``the password is sunshine now``, ``… for the admin account``; in capitals: ``PASSWORD IS SUNSHINE``, ``the password
   is SUNSHINE``, ``… is CATS.``, not an acronym: ``ASCII``, ``JSON``, ``SSO``; not ``required``, ``wrong``, ``bogus``,
   ``written down``, ``read``, ``strong and unique``, ``SSO-managed``), 3 plain words or more joined by - said alone
   there (``correct-horse-battery-staple``; not ``auto-generated``, ``state-of-the-art``), 4 to 12 digits said alone
   there (``the password is 1234``; not ``8 characters``), a value quoted or backticked there (``my password is
   "sunshine"``; not a command: ```cat ~/.pw```); so too after a password's other names in chat (``the pw is``, ``the pw
   is 'sunshine'``, ``wifi pw:``, ``my pass is``, ``the passcode is``; ``pass:`` after what it guards, ``wifi pass:``,
   ``door pass:``, not ``pass: 12 tests``), and a number said alone after them or ``pin`` (``the pw is 1234``, ``my pin
   is 4821``), a PIN's, a passcode's or a password's as a config's or a chat's value too (``pin: 4821``, ``my PIN:
   4821``, ``PIN=4821``, ``password: 1234``; not a board's: ``pin: 13``, ``Pin-Priority: 1001``; nor a count:
   ``password: 8``, ``passwords: 1234``, ``PASS: 1234``);
3. every regex detector of ``detect-secrets`` (a maintained library; imported on the first redaction, never at
   start-up) except the public-IP one, reading the text with its runs of spaces cut to 8: whatever shape it
   knows is redacted too.

Ordinary text — commit hashes, UUIDs, base64 images, numbers, paths — is left as it is unless it stands where
a credential stands; a number with its unit (``password: 1234ms``) and a date with its time
(``2016-09-08T21:47:36Z``) are left even there.
"""

from __future__ import annotations

import base64
import functools
import math
import re

# (pattern, placeholder, hints): a pattern runs only when one of its hints occurs in the text (in lower
# case). Redacting a 30 KB request costs some 20-30 ms of CPU here, about half of it detect-secrets'
# detectors (``library_redact``): small next to the model call it precedes
# names whose value is a secret: password, DB_PASS, passphrase, token, api_key, ENCRYPTION_KEY, session_key…,
# each a whole part of the name, ended by _ - . a digit, a capital after small letters or the name's end
# (dbPassword, mytoken, password2, SECRETS; not tokenizer, secretary, passwordless, access_keyboard); the short
# ones begun by one too (basicAuth, db_pwd; not oauth_provider, author's middle, OLDPWD, BYPASS, COMPASS);
# not followed by a part saying where or which the secret is, or how it is used (token_url, password_file,
# SECRET_NAME, auth_method). ``pass`` alone only after ``_`` or in capitals: DB_PASS, not bypass, compass nor
# "the first pass: …", nor a test's verdict (``--- PASS: TestParse``, ``_VERDICT``); the lookahead of first letters fails the
# other places fast, halving the cost
_STARTS = r"(?:(?<![A-Za-z])|(?<=(?-i:[a-z0-9]))(?=(?-i:[A-Z])))"
_ENDS = r"s?(?:(?<=(?-i:[a-z]))(?!(?-i:[a-z]))|(?<=(?-i:[A-Z]))(?![A-Za-z]))"
_ABOUT = r"(?![_.-]?(?:url|uri|endpoint|file|path|dir|name|type|method|mode|provider|policy)(?![a-z]))"
# a test's verdict is not a password named PASS: PASS: or --- PASS: followed by a name and its time (go test
# writes one with each verdict), a test file (go test, automake, DejaGnu, pytest), or a test's name (Test…, test…)
# or a path that does not look random (``_named_value``: PASS: kX9/2mQ+zTr, PASS: TestP@ssw0rd!, --- PASS: hunter2
# are passwords)
_VERDICT_NAME = re.compile(r"PASS:[^\S\n]+")
_VERDICT = re.compile(r"(?:Test|Example|Benchmark|Fuzz|test)(?![a-z0-9])|[^\s'\"]*(?:/|\.[a-z]{1,4}(?![\w.]))")
_TEST_FILE = re.compile(r"[\w./-]*\.(?:c|cc|cpp|h|sh|t|py|js|ts|go|rs|rb|pl|exp|test)(?:::\w+)?")
_TIMED = re.compile(r"[^\S\n]+\(\d+(?:\.\d+)?m?s\)")
_NAMES = rf"""(?=[pstaecmhjlf])(?:password|passwd|passphrase|passcode|secret|token|api[_-]?key|access[_-]?key
    |private[_-]?key|{_STARTS}(?:auth|pwd)|(?<=[_.-])pass|{_STARTS}(?-i:PASS)
    |(?:encryption|encrypt|signing|session|master|hmac|jwt|cookie|crypto|cipher|fernet|license)[_-]?key){_ENDS}{_ABOUT}"""
# a type after a name is code (password: string; passphrase: Option<&str>, api_key: SecretStr), not its value:
# its word ends the value or code follows it (string | null, str = None, string[]); a sign code does not put
# there, or a word, makes it a value (str@wberry99, string!2024, string theory rocks)
_TYPE = (r"(?-i:(?:string|String|str|bytes|Buffer|SecretStr|Uint8Array)(?=[;,|)\]>=}\[?]|[^\S\n]*(?:\r?\n|\Z)|[^\S\n]+[|=/#{])"
         r"|Option<|Optional\[)")
# a call through a class, a module or a crate (String.valueOf(x), System.getenv("X"), std::env::var("X")), or a
# constructor given a name or a string (String(x)): code, not a value (Hunter2(abc), Summer(2024) are values)
_CALL = r"""(?:[A-Za-z_]\w*(?:(?:\.|::)[A-Za-z_]\w*)+[(\[]|[A-Z][A-Za-z]*\((?:[A-Za-z_][\w.]*|"[^"\n]*"|'[^'\n]*')?\))"""
_CALLED = re.compile(_CALL)
# a command whose output is the value (``cat ~/.pw``, ``pass show db``): code in backticks or $( ), not the secret
_COMMAND_RUN = (r"(?:cat|pass|gpg|op|vault|security|echo|printf|head|tail|openssl|sops|base64|printenv|jq|awk|sed|tr|aws"
                r"|gcloud|az|kubectl|bw|lpass|keyring|secret-tool|pwgen|uuidgen|date)[ \t]+[^\s`]|[^\s`]*[/$]")
_SUBSTITUTED = re.compile(_COMMAND_RUN)
_WHOSE = "(?:" + "|".join(rf"(?<=\b{w} )" for w in "my your our his her their wifi admin root email account".split()) + ")"
# what a password guards, named before pass: (wifi pass: sunshine, door pass: 4821); a pass: after anything else is a
# test's verdict, a count or a step (PASS: test_x, pass: 12 tests, first pass: parser)
_GUARDED = "(?:" + "|".join(rf"(?<=\b{w} )" for w in """wifi wi-fi wlan router modem door gate alarm email e-mail mail
    account admin root login vpn ssh ftp sftp smtp imap""".split()) + ")"
_NAME_HINTS = ("pass", "pwd", "secret", "token", "key", "auth")
_COOKIE = re.compile(r"([\w.-]+=)((?!\[)[^;,\s]+)")  # one cookie's name= and value

_PATTERNS: list[tuple[re.Pattern, str, tuple[str, ...]]] = [
    (re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY( BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\Z)", re.S),
     "[private key redacted]", ("private key",)),
    # a PEM private key in base64 (a kubeconfig's client-key-data, a Kubernetes secret's tls.key): "-----BEGIN"
    # encoded, its header read to tell it from a certificate; over the lines that are base64 alone when wrapped
    # (base64 key.pem, a YAML block: 76 characters a line)
    (re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{8,}(?:\r?\n[ \t]*[A-Za-z0-9+/]{4,}(?=[=\s\"',]|\Z))*={0,2}"),
     lambda m: _if_private_pem(m.group()), ("ls0tls1crudjti",)),
    (re.compile(r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]+"), "[slack webhook redacted]",
     ("hooks.slack.com",)),
    (re.compile(r"https://(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]+"), "[discord webhook redacted]",
     ("/api/webhooks/",)),
    # any other webhook URL: its long path segments are the credential
    (re.compile(r"(https?://[^\s/]*webhook[^\s/]*/|https?://\S{0,256}?/webhooks?/)(\S+)", re.I), lambda m: m.group(1) + _segments(m.group(2)),
     ("webhook",)),
    # scheme://user:password@host (the user may be empty: redis://:password@host)
    (re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s/@]+(@)", re.I), r"\1[password redacted]\2", ("://",)),
    # a URL's query values named as credentials (?key=, &code=, access_token=, X-Goog-Signature=), when long or
    # random
    (re.compile(r"([?&](?:[\w.-]*?(?:key|code|sig|signature|token|secret|password|passwd|pwd|pass|credential|session|"
                r"sessionid|sid|auth))=)((?!\[)[^&\s#\"'<>]+)", re.I), lambda m: m.group(1) + _if_key(m.group(2)),
     ("key=", "code=", "sig", "token=", "secret=", "pass", "pwd=", "credential=", "session", "sid=", "auth")),
    # cookies: each value of a Cookie or Set-Cookie header (or curl --cookie) that is long or random
    (re.compile(r"((?:\b(?:set-)?cookie\s*:|--cookie(?:\s+|=))\s*[\"']?)([^\n\"']+)", re.I),
     lambda m: m.group(1) + _COOKIE.sub(lambda c: c.group(1) + _if_key(c.group(2)), m.group(2)), ("cookie",)),
    (re.compile(r"\bsk-ant-[A-Za-z0-9_-]{16,}"), "[anthropic key redacted]", ("sk-ant-",)),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "[api key redacted]", ("sk-",)),
    (re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"), "[sendgrid key redacted]", ("sg.",)),
    # an AWS secret access key beside its key id (a credentials CSV row, an env dump): before the id goes
    (re.compile(r"\b((?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16})([\s,;:=|\"']{1,8})([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"),
     r"[aws key redacted]\2[aws secret redacted]", ("akia", "asia", "abia", "acca")),
    (re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b"), "[aws key redacted]", ("akia", "asia", "abia", "acca")),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b|\bgithub_pat_[A-Za-z0-9_]{30,}"), "[github token redacted]",
     ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), "[gitlab token redacted]", ("glpat-",)),
    (re.compile(r"\b(?:xox[abposre]|xapp)-[A-Za-z0-9-]{10,}"), "[slack token redacted]", ("xox", "xapp-")),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), "[google key redacted]", ("aiza",)),
    (re.compile(r"\b(?:(?:sk|rk|pk)_live|(?:sk|rk)_test)_[A-Za-z0-9]{16,}"), "[stripe key redacted]", ("_live_", "_test_")),
    (re.compile(r"\bwhsec_[A-Za-z0-9+/=]{24,}"), "[webhook secret redacted]", ("whsec_",)),
    (re.compile(r"\bhv[sbr]\.[A-Za-z0-9_-]{24,}"), "[vault token redacted]", ("hvs.", "hvb.", "hvr.")),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), "[huggingface token redacted]", ("hf_",)),
    (re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), "[npm token redacted]", ("npm_",)),
    (re.compile(r"\bpypi-[A-Za-z0-9_-]{50,}"), "[pypi token redacted]", ("pypi-",)),
    (re.compile(r"\bdo[oprs]_v1_[a-f0-9]{64}\b"), "[digitalocean token redacted]", ("_v1_",)),
    (re.compile(r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"), "[shopify token redacted]", ("shpat_", "shpca_", "shppa_", "shpss_")),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), "[jwt redacted]", ("eyj",)),
    # a token standing as a URL's user (https://TOKEN@host, a Sentry DSN's key), when random
    (re.compile(r"\b([a-z][a-z0-9+.-]*://)([^\s:/@\[]{16,})(?=@)", re.I),
     lambda m: m.group(1) + _if_random(m.group(2), "[token redacted]"), ("://",)),
    # (not an ordinary word of prose: Token configuration happens at startup, the token expiration_seconds)
    (re.compile(r"\b(Bearer|Basic|Token)(\s+)([A-Za-z0-9._~+/=-]{12,})", re.I),
     lambda m: m.group() if _ordinary_word(m.group(3).rstrip(".")) or _stamped(m, 3)
     else f"{m.group(1)} [token redacted]",
     ("bearer", "basic", "token")),
    # connection strings: Azure storage and service bus keys, shared access signatures
    (re.compile(r"\b(AccountKey|SharedAccessKey|SharedSecretValue|sig)=([^;\s\"'&]{16,})", re.I), r"\1=[secret redacted]",
     ("accountkey", "sharedaccesskey", "sharedsecretvalue", "sig=")),
    # name = value, name: value, "name": "value", 'name' => 'value' for secret-looking names (AWS secret keys included, DB_PASS,
    # passphrase, ENCRYPTION_KEY, session_key), but not code unquoted (a call, String.valueOf(x), an index,
    # self.password) nor into a placeholder already there; a password's quoted value whole, spaces and all, and when shorter than 6
    # characters (password: "abc"; not a token's or an author's: max_tokens: "a number of tokens"; nor a flag or a
    # null, ``_NO_SECRET``: a test's result, {"pass": "yes"})
    # (SECRET_KEY="…", DB_PASSWORD_PROD: '…' too: the name's later parts, unless the last says the value is about
    # a secret, SECRET_NAME: "prod db creds"; a part read to 64 characters: PasswordPassword… over 100 KB, each
    # read to the text's end, took 5 s)
    (re.compile(rf"""(?ix)({_STARTS}(?=[ps])(?:password|passwd|passphrase|passcode|pass|pwd|secret){_ENDS[2:]}
                    (?:[_.-]?[a-z0-9]{{1,64}}+){{0,4}}["']?\s*(?:[:=]|=>(?=\s*["']))\s*)
                    (["'])(?!\[)(?=[^"'\n]*?[^\S\n]|[^"'\n]{{1,5}}\2)[^"'\n]*\2"""),
     lambda m: m.group() if _about(m.group(1)) or _is_reference(value := m.group()[len(m.group(1)) + 1 : -1])
     or _TIMESTAMP.fullmatch(value)
     or value.lower() in _NO_SECRET else f"{m.group(1)}{m.group(2)}[secret redacted]{m.group(2)}",
     ("pass", "pwd", "secret")),
    # XML config: a .NET appSettings entry's value beside its key (<add key="DbPassword" value="…"/>), an element
    # named as a secret (Maven's <password>…</password>, <client_secret>), read on its line (``_whole_value``)
    (re.compile(rf"""(?ix)(<add\b[^<>\n]{{0,256}}?\bkey[ \t]*=[ \t]*(["'])(?P<name>[\w.:-]{{0,64}}?{_NAMES}[\w.:-]{{0,64}})\2
                    [^<>\n]{{0,256}}?\bvalue[ \t]*=[ \t]*(["']))(?P<value>[^"'<>\n]*)(?=\4)"""),
     lambda m: m.group(1) + _whole_value(m.group("name"), m.group("value")), ("<add",)),
    (re.compile(rf"""(?ix)(<(?P<name>[\w.:-]{{0,64}}?{_NAMES}[\w.:-]{{0,64}})>)(?P<value>[^<>\n]+)(?=</(?P=name)>)"""),
     lambda m: m.group(1) + _whole_value(m.group("name"), m.group("value")), ("</",)),
    # a Dockerfile's ENV in its space form, ENV NAME value: the value is the rest of its line
    (re.compile(rf"""(?imx)(^(?:<input>)?(?:\d+\+\d+\|)?[ \t]*(?-i:ENV)[ \t]+(?P<name>[\w.-]{{0,64}}?{_NAMES}[\w.-]{{0,64}})[ \t]+)
                    (?P<value>[^\s=][^\n]*)"""),
     lambda m: m.group(1) + _whole_value(m.group("name"), m.group("value").rstrip()) + m.group("value")[len(m.group("value").rstrip()):],
     ("env",)),
    # a config line's value (YAML, ini, a .env file, properties) unquoted, spaces and all: a passphrase runs to the
    # line's end (``_line_value``); a line of a request may open with a task's <input>, a line's number (3+1|) and
    # its message's kind and speaker (user Bob: ); after a space inside a line, only plain words end it so
    (re.compile(rf"""(?imx)((?:^(?:<input>)?(?:\d+\+\d+\|)?(?:(?-i:user|pi|tool|echo|work|note)(?:[ \t][^\s:|]{{1,40}}){{0,3}}
                    :[ \t]+)?[ \t]*(?:-[ \t]+)?(?:export[ \t]+)?|(?<=[ \t]))(?P<name>["']?[\w.-]{{0,64}}?(?P<word>{_NAMES})
                    [\w.-]{{0,64}}["']?)(?P<sep>[ \t]*[:=][ \t]*))(?P<value>[^\n]*)"""),
     lambda m: _line_value(m), ("pass", "pwd", "secret")),
    # a name ending its line, its value on the lines indented under it and no key there: a YAML scalar, plain or a
    # block after | or > (``_next_line_value``), a JSON value a formatter wrapped (the spaces after : read once:
    # password: and 100 KB of spaces took 48 s)
    (re.compile(rf"""(?imx)^(?P<head>(?P<indent>[ \t]*(?:-[ \t]+)?)(?P<name>["']?[\w.-]{{0,64}}?{_NAMES}[\w.-]{{0,64}}["']?)
                    [ \t]*[:=](?:[ \t]*(?P<block>[|>][-+]?[1-9]?))?[ \t]*+\r?\n)(?P<value>(?:[ \t]+\S[^\n]*(?:\n|\Z))+)"""),
     lambda m: _next_line_value(m), _NAME_HINTS),
    # a user and a password after auth: (auth: bob secret123, basic_auth = deploy s3cr3t99), the password ending its
    # line or before a comment, shaped like one (``_pair_password``)
    (re.compile(rf"""(?ix)((?<![\w-])[\w.-]{{0,64}}?{_STARTS}auth{_ENDS}{_ABOUT}["']?[ \t]*(?P<sep>[:=])[ \t]*
                    (?!\[)(?P<user>[\w.@+-]{{1,64}})[ \t]+)(?P<word>[^\s"',;]{{1,64}})(?=[ \t]*(?:\r?\n|\Z)|[ \t]+\#)"""),
     lambda m: m.group(1) + _pair_password(m), ("auth",)),
    (re.compile(
        rf"""(?ix)
        ((?<!::){_NAMES}[\w.-]{{0,64}}  # (a bound: a long word of names, token_token_…, is read from each of them)
         ["']?[^\S\n]*(?:(?!::)[:=]|=>(?=[^\S\n]*["']))[^\S\n]*["']?)  # (on its line: auth:'s value is not the next
         # line's password:; a hash's => only before a quote: PHP's, Ruby's 'password' => '…', not token => token.length;
         # not a path's ::, Secret::new(x), AWS::SecretsManager::Secret)
        (?!\[|(?:bearer|basic|token)\s|\d+(?![^\s"',;])|(?<!["'])(?:(?:self|this)\.|[a-z_][\w.]*[(\[]|{_CALL})|arn:aws
           |\$\(|`(?:{_COMMAND_RUN})
           |(?<![="']){_TYPE})
        ((?:[^\s"',;\[]|\[(?![\w ]+redacted\])){{6,}})"""),
     lambda m: m.group(1) + _named_value(m), _NAME_HINTS),
    # any other NAME_KEY = value, when the value is key material (long, random, base64 or hex)
    (re.compile(r"""(?i)([_-]key["']?[^\S\n]*[:=][^\S\n]*["']?)((?!\[)[^\s"',;]{16,})"""),
     lambda m: m.group(1) + _if_key(m.group(2), strict=True), ("key",)),
    # credentials by position: curl -u/--user user:PASS, mysql -pPASS, the words right after "password"
    (re.compile(r"((?:^|\s)(?:-u|--user)(?:\s+|=)[\"']?[^\s:\"'$]+:)(?!//)([^\s\"'@]{4,})"), r"\1[password redacted]",
     ("-u",)),
    (re.compile(r"(\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n|;&]{0,256}?\s-p)(?:([\"'])[^\"'\n]+\2(?![^\s;|&)])|[^\s\"']+)"),
     lambda m: f"{m.group(1)}{m.group(2) or ''}[password redacted]{m.group(2) or ''}",  # (quoted: spaces and all)
     ("mysql", "mariadb")),
    (re.compile(r"(\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b[^\n|;&]{0,256}?\s-p\s+)([^\s\"'-][^\s\"']*)"),
     lambda m: m.group(1) + _if_random(m.group(2), "[password redacted]"), ("mysql", "mariadb")),
    # the password flag of a command that takes one (sshpass -p, redis-cli -a, docker login -p, its --password),
    # and --password VALUE of any other when random (written --password=VALUE it is a name = value)
    (re.compile(r"""(\b(?:sshpass\b[^\n|;&]{0,256}?\s-p|redis-cli\b[^\n|;&]{0,256}?\s(?:-a|--pass)|"""
                r"""(?:docker|podman|buildah|nerdctl|helm\s+registry|oras|skopeo|az)\s+login\b[^\n|;&]{0,256}?\s(?:-p|--password))"""
                r"""\s*)(["']?)(?![$\[-])([^\s"']+)\2"""),
     r"\1\2[password redacted]\2", ("sshpass", "redis-cli", "login")),
    # a .netrc's password (machine HOST login USER password PASS), aws configure set's secret key or token
    (re.compile(r"(\b(?:machine\s+\S+|default)\s+login\s+\S+\s+(?:account\s+\S+\s+)?password\s+)(?!\[)(\S+)"),
     r"\1[password redacted]", ("machine", "default")),
    (re.compile(r"(\baws\s+configure\s+set\s+[\w.]*(?:secret|session_token)[\w.]*\s+)(?!\[)(\S+)"), r"\1[secret redacted]",
     ("configure",)),
    (re.compile(r"""((?:^|\s)--(?:password|passwd|pass|secret|token|api-key)\s+["']?)(?![$\[-])([^\s"']+)"""),
     lambda m: m.group(1) + _if_random(m.group(2), "[password redacted]"), ("--pass", "--secret", "--token", "--api-key")),
    (re.compile(r"((?:^|\s)-p)([^\s\"'-][^\s\"']{7,})"), lambda m: m.group(1) + _if_random(m.group(2), "[password redacted]"),
     ("-p",)),
    # a password quoted or backticked after password is or was: my password is "sunshine", `sunshine`, 'letmein'
    # (``_quoted_password``); after its other names in chat too: the pw is 'sunshine', my pass is "sunshine" (pass
    # after a possessive or a wifi's, an admin's: not the boarding pass; its possessives looked behind only before
    # pass, the pattern tried only at a p: a word's every start tried them, "a." over 100 KB 32 ms, now 2)
    (re.compile(rf"""(?i)(\b(?=p)(?:password|passwd|passphrase|passcode|pw|(?=pass){_WHOSE}pass)"""
                r"""[ \t]+(?:is|was):?[ \t]+)(["'`])(?!\[)"""
                r"""([^"'`\n]{1,64})\2(?![\w'])"""),
     lambda m: m.group(1) + m.group(2) + _quoted_password(m.group(2), m.group(3)) + m.group(2), ("pass", "pw")),
    # a password's phrase ending a line of prose: password is purple monkey dishwasher (``_prose_phrase``)
    (re.compile(r"(?i)(\b(?:password|passwd|passphrase)[ \t]+(?:is|was):?[ \t]+)"
                r"((?-i:[A-Za-z'-]{1,40}(?:[ \t]+[A-Za-z'-]{1,40}){2,11}))(?=[ \t]*[.!]?[ \t]*(?:\r?\n|\Z))"),
     lambda m: m.group(1) + _prose_phrase(m.group(2)), ("pass",)),
    (re.compile(r"(?i)(\b(?:password|passwd|passphrase|secret|token|credentials?|(?-i:[Pp]ass)(?=:))\b:?"
                r"(?:\s+(?:(?:is|was):?|=|:|of|for|to|now))*\s+)"
                rf"(?!redacted\]|[^\s\"',;]*?\[[\w ]{{1,40}} redacted\]|{_TYPE})([^\s\"',;]+)"),
     lambda m: m.group(1) + _prose_word(m), ("pass", "secret", "token", "credential")),
    # a password's other names in chat, said with is or was (the pw is sunshine, my pass is sunshine, the passcode is
    # sunshine) or pw: (wifi pw: sunshine), pass: after what it guards (wifi pass: sunshine): a word as after password
    # is (``_chat_password``); pass only after a possessive or a wifi's, an admin's (not the first pass, the boarding
    # pass); a number said alone (my pin is 4821, the pw is 1234, door pass: 4821). Its possessives and what a pass
    # guards are looked behind only before pass (a word's every start tried them: "a." over 100 KB, 3 times as long)
    (re.compile(rf"(?i)(\b(?=p)(?:pw|passcode|pin|(?=pass)(?:{_WHOSE}pass|{_GUARDED}pass(?=:)))"
                r"(?:[ \t]+(?:is|was):?|(?<=pw):|(?<=pass):)[ \t]+)(?!\[)([^\s\"',;]+)"),
     lambda m: m.group(1) + _chat_password(m), ("pw", "pass", "pin")),
    # a PIN's, a passcode's or a password's number as a config's or a chat's value (pin: 4821, my PIN: 4821,
    # SIM_PIN=1234, "pin": "4821", pinCode: 0000, the PIN code: 0000, password: 1234, DB_PASS=0000, "password":
    # 12345678): 4 to 12 digits said alone (``_pin_value``); not a board's pin, under 4 digits (LED_PIN = 13), nor
    # apt's Pin-Priority: 1001, nor a count, a length or a setting (password: 8, password: 1234 characters,
    # password_min_length: 1234, passwords: 1234, PASS: 1234: a test's count)
    (re.compile(r"""(?i)((?:(?<![\w.-])(?:[\w.-]{0,32}?[_.-])?|(?<=(?-i:[a-z]))(?=(?-i:P)))"""
                r"""(?:pin(?:[ _-]?(?:code|number))?|passcode|password|passwd|passphrase|pwd|(?<=[_.-])pass)"""
                r"""["']?[ \t]*(?:[:=]|=>)[ \t]*(["']?))(\d{4,12})(?!\d)(\2)"""),
     lambda m: m.group(1) + _pin_value(m) + m.group(4), ("pin", "pass", "pwd")),
]

# what a sentence says of a password is no passphrase: its first word one of these, or a word of a sentence
# (``_SENTENCE``), an adverb or a verb's form (hashed, missing, exactly) in it
_PROSE_ABOUT = frozenset("""wrong incorrect invalid required optional missing weak strong too very case insensitive
    sensitive insecure secure expired empty blank same different long short hard easy simple unique fine ok okay good
    bad new old reset changed""".split())
_PROSE_FORM = re.compile(r"(?i)[a-z]+(?:ed|ing|ly)")
# a word that names an algorithm, an encoding or a version, not a password (sha256, base64, argon2id, x509, 2fa)
_TECH_WORD = re.compile(r"(?i)(?:(?:sha|md|base|argon|pbkdf|aes|rsa|utf|ucs|crc|blake|ed|x|ipv|tls|ssl|oauth|http|v|py"
                        r"|python|gpt|des|rc|scrypt|bcrypt|hmac|win)[-_]?\d+(?:[a-z]{0,2}|[-_.]\d+)*|2fa|\d+(?:[a-z]{1,8}))"
                        r"(?:-[a-z]+)*[.,]?")
# a word shaped like a password: its letters with digits in them or a symbol among them
_PASSWORD_SHAPE = re.compile(r"(?=.*[A-Za-z])(?:.*[A-Za-z]\d|.*\d[A-Za-z]|.*[!@#%^&*?~+=|])")


def _prose_phrase(phrase: str) -> str:
    """What is sent of plain words ending a line after ``password is``: the placeholder unless a sentence's
    (``_PROSE_ABOUT`` first, a participle or a verb's form in it: ``_ONE_WORD_FORM``, stored, expiring, usually; not
    red, bed, king: a passphrase's, the password is red hot chili; or a word of ``_SENTENCE``, unless a passphrase of
    short words: ``_short_words``, let me in)."""
    words = [w.lower() for w in phrase.split()]
    if words[0] in _PROSE_ABOUT or any(w in _PARTICIPLES or _ONE_WORD_FORM.fullmatch(w) for w in words) \
            or any(w in _SENTENCE for w in words) and not _short_words(words):
        return phrase
    return "[secret redacted]"


# a passphrase of short words is said as a command (let me in, trust no one, take me home): the sentence's words in it
# are an object's pronoun (or no) after its first word and a verb's particle after that pronoun (not you nor it, a
# clause's subject too: one you choose, what it says)
_PHRASE_PRONOUNS = frozenset("me us them no".split())
_PHRASE_PARTICLES = frozenset("in on over".split())
# a first word that describes what follows it (the password is up to you, part of it, close to me, like me)
_DESCRIBING = frozenset("up down out off like near close due subject home part half free open next prior separate apart"
                        .split())
_SMALL_WORD = re.compile(r"[a-z]{1,40}")


def _short_words(words: list[str]) -> bool:
    """Whether ``words`` (in small letters), ending a line after ``password is`` and holding a word of ``_SENTENCE``,
    are a passphrase of short words said as a command (my password is let me in, trust no one): 3 or 4 plain words,
    the first none of a sentence's nor a description's (``_SENTENCE``, ``_PROSE_ONE_WORD``, ``_DESCRIBING``, an
    adjective's ending: in the doc, part of it, close to me, similar to mine), the sentence's words in it only an
    object's pronoun or no after the first (``_PHRASE_PRONOUNS``) and a verb's particle after that pronoun
    (``_PHRASE_PARTICLES``; not a determiner, a verb, a conjunction nor a preposition after a description: the same
    as before, one you can remember, smooth and creamy, low in calories, well worth it), none what a sentence says of
    a password (yours and mine)."""
    first = words[0]
    if not (3 <= len(words) <= 4 and all(_SMALL_WORD.fullmatch(w) for w in words) and first not in _SENTENCE
            and first not in _PROSE_ONE_WORD and first not in _DESCRIBING and not _ADJECTIVE_FORM.fullmatch(first)):
        return False
    for i, word in enumerate(words[1:], 1):
        if word in _PROSE_ABOUT or word in _PROSE_ONE_WORD:
            return False
        if word in _SENTENCE and not (i == 1 and word in _PHRASE_PRONOUNS
                                      or i == 2 and word in _PHRASE_PARTICLES and words[1] in _PHRASE_PRONOUNS):
            return False
    return True


def _quoted_password(quote: str, value: str) -> str:
    """What is sent of a value quoted or backticked after ``password is`` or ``was``: the placeholder, but the value
    itself when blank, a reference, a flag or a null (``_NO_SECRET``), or in backticks a command (``_SUBSTITUTED``)."""
    if not value.strip() or _is_reference(value) or value.lower() in _NO_SECRET \
            or quote == "`" and _SUBSTITUTED.match(value):
        return value
    return "[secret redacted]"


def _pair_password(m: re.Match) -> str:
    """What is sent of the second word after ``auth:`` ending its line (``auth: bob secret123``): the placeholder when
    it is shaped like a password (``_PASSWORD_SHAPE``), 6 characters or more, and is no algorithm's or version's
    name (``_TECH_WORD``: ``auth: bump oauth2``), path or reference; or when it is a plain word (``auth: bob
    hunter``), the line holds only the name and the pair (indented, after a list's ``-``; not a commit's subject
    in a log: ``3f2a1b9 auth: rotate keys``) and neither word is one of a commit's subject (``_NOT_A_PAIR``: ``auth: add
    tests``, ``auth: login page``), a sentence's or a verb's form (``auth: session expired``)."""
    word, user = m.group("word"), m.group("user")
    if len(word) >= 6 and _PASSWORD_SHAPE.match(word) and not _TECH_WORD.fullmatch(word) and "/" not in word \
            and not word.startswith(("$", "<", "(", "http")) and not _is_reference(word):
        return "[password redacted]"
    start = m.string.rfind("\n", 0, m.start()) + 1
    if _PLAIN_PASSWORD.fullmatch(word) and _LINE_HEAD.fullmatch(m.string, start, m.start()) \
            and (m.group("sep") == "=" or _USER_SHAPE.fullmatch(user) or _in_config(m.string, start)) \
            and not any(_PROSE_FORM.fullmatch(w) or w in _NOT_A_PAIR or w in _SENTENCE or w in _PROSE_ABOUT
                        or w in _PROSE_ONE_WORD or w in _NO_SECRET for w in (user.lower(), word.lower())):
        return "[password redacted]"
    return word


_PLAIN_PASSWORD = re.compile(r"[A-Za-z]{3,40}")
_USER_SHAPE = re.compile(r"[A-Za-z][\w.+-]*@[\w-]+(?:\.[\w-]+)+|[A-Za-z]+\d+")  # (bob@example.com, deploy2)
# a YAML key with one word or none as its value (host: 10.0.0.1, proxy:), an ini section
_CONFIG_LINE = re.compile(r"""([ \t]*)(?:-[ \t]+)?(?:["']?[\w.-]{1,64}["']?[ \t]*[:=](?:[ \t]*[^\s#]+)?(?:[ \t]+\#[^\n]*)?|\[[\w. -]{1,64}\])[ \t]*\r?""")
_INDENT = re.compile(r"[ \t]*")


def _in_config(string: str, start: int) -> bool:
    """Whether the line at ``start`` of ``string`` stands in config: the line before it or after it a key with one
    word or none as its value as deep (``host: 10.0.0.1``), or the line before it less deep and ending with ``:``
    (a mapping's name: ``proxy:``) or an ini section (``[proxy]``); a commit's subject stands alone or among
    lines of several words."""
    depth = _INDENT.match(string, start).end() - start
    if start:
        before = string.rfind("\n", 0, start - 1) + 1
        if (m := _CONFIG_LINE.fullmatch(string, before, start - 1)) and (len(m.group(1)) == depth or len(m.group(1)) < depth
                                                                       and string[before:start - 1].rstrip().endswith(":")
                                                                       or string[before:start - 1].lstrip().startswith("[")):
            return True
    end = string.find("\n", start)
    if end < 0:
        return False
    after = string.find("\n", end + 1)
    m = _CONFIG_LINE.fullmatch(string, end + 1, len(string) if after < 0 else after)
    return bool(m) and len(m.group(1)) == depth
_LINE_HEAD = re.compile(r"[ \t]*(?:-[ \t]+)?")  # (a line's indentation, a YAML list's item)
# the words of a commit's subject (its verbs and what they are done to), modes, methods and protocols (auth: sasl
# scram, auth: mutual tls) and what a sentence says: no user nor password of an auth pair
_NOT_A_PAIR = frozenset("""add adds fix fixes bump bumps drop
    drops remove removes update updates refactor refactors use uses handle handles move moves rename renames support
    supports allow allows make makes clean cleanup improve improves change changes revert reverts test tests doc docs
    document implement implements introduce introduces replace replaces simplify split merge extract enable enables
    disable disables tidy tweak tweaks polish restore rework rewrite set sets show shows hide hides skip skips log logs
    raise raises return returns retry validate validates check checks ensure ensures avoid avoids prevent prevents cache
    store stores load loads read reads write writes parse parses pass passes keep keeps let migrate upgrade downgrade
    pin unpin deprecate expose exposes export exports import imports wire guard gate release releases prepare init
    initial wip bugfix hotfix chore feat feature style perf build ci rotate rotates refresh refreshes renew revoke
    verify verifies sign signs login logout signin signup session sessions token tokens cookie cookies middleware
    config configs settings flow flows page pages error errors spec specs readme typo typos lint types type schema
    model models route routes api client server handler handlers provider providers helper helpers module modules
    service services code more less basic bearer digest ntlm kerberos negotiate oauth jwt apikey mode method scheme
    realm header headers password passwords user users username secret secrets key keys
    oidc openid saml sso ldap ldaps sasl scram plain cram sha tls mtls ssl cert certs certificate certificates mutual
    pam radius tacacs chap pap mschap eap psk htpasswd htdigest file files anonymous anon trust peer ident simple bind
    publickey pubkey hostbased interactive otp totp mfa webauthn passkey passkeys gssapi spnego iam sts okta
    keycloak cognito google github gitlab azure entra""".split())


def _prose_word(m: re.Match) -> str:
    """What is sent of the word after a secret's name in prose (``m.group(2)``): the word itself when it is a
    parameter's variable, the next line's key, an algorithm's name (``_TECH_WORD``), a call (``_CALL``:
    ``System.getenv(``), a date and its time (``_TIMESTAMP``), a number with its unit (``_MEASURE``: 2.5min) or a
    test's verdict; the
    placeholder when it looks random, or (after ``password is``, ``pass:``: no ``for``, ``of``, ``to`` between)
    is shaped like a password (``_PASSWORD_SHAPE``: hunter2, s3cr3t!), 6 characters or more and no path, or
    (after ``password is`` or ``was``) is a plain word ending its sentence (``_one_word_password``: sunshine) or 4
    to 12 digits said alone (``_PIN``, ``_said_alone``: the password is 1234; not 8 characters); else the word itself when it is an ordinary word before more prose (``_prose_after``: token: Providers: a 3xx)."""
    word = m.group(2)
    if _parameters_variable(m) or _next_lines_key(m) or _TECH_WORD.fullmatch(word) or _CALLED.match(word) \
            or _stamped(m, 2) or _MEASURE.fullmatch(word):
        return word
    head = m.group(1).lower().split()
    if head[0].startswith("pass") and not {"of", "for", "to"} & set(head) and {"is", "was", "is:", "was:"} & set(head) \
            and (_one_word_password(word, m.string, m.end(), shouted=m.group(1).isupper())
                 or _PIN.fullmatch(bare := word.rstrip(".!?:)")) and _said_alone(word, bare, m.string, m.end())):
        return "[secret redacted]" + word[len(word.rstrip(".!?:)")) :]
    if head[0].startswith("pass") and not {"of", "for", "to"} & set(head) \
            and 6 <= len(bare := word.rstrip(".:!?")) <= 64 and _PASSWORD_SHAPE.match(bare) \
            and not bare.startswith(("$", "<", "(", "http")) and "/" not in bare and not _is_reference(bare) \
            and not (head[0] == "pass:" and _verdict(bare, m.string, m.end())):
        return "[secret redacted]"
    if _prose_after(word, m.string, m.end()):
        return word  # (an ordinary word before more prose, no random run: token: Providers: a 3xx, Memory.append has)
    if _compound_said(word.rstrip(".,:!?)")):
        return word  # (what a sentence says of it: the password is SSO-managed, API-only)
    return _if_random(word, "[secret redacted]")


# the last parts of a compound a sentence says of a secret beside a verb's form (SSO-managed, API-only, URL-safe)
_COMPOUND_ENDS = frozenset("only safe free sensitive insensitive specific compatible friendly aware wide ready".split())


def _compound_said(word: str) -> bool:
    """Whether ``word`` is a compound a sentence says of a secret (the password is SSO-managed, API-only, URL-safe,
    KMS-encrypted, Google-managed): ordinary parts joined by - (``_ordinary_word``: no part shaped like a password),
    the last in small letters (not a passphrase's capitalised word: Purple-Monkey-Done) and a verb's form
    (``_ONE_WORD_FORM``), a participle or one of ``_COMPOUND_ENDS``; its capitals read it as random."""
    if "-" not in word or not _ordinary_word(word):
        return False
    last = word.rsplit("-", 1)[1]
    return last.islower() and (bool(_ONE_WORD_FORM.fullmatch(last)) or last in _PARTICIPLES or last in _COMPOUND_ENDS)

def _chat_password(m: re.Match) -> str:
    """What is sent of the word (``m.group(2)``) after a password's other name in chat (``pw``, ``pass``, ``passcode``)
    and is or was, or ``pw:``, ``pass:`` after what it guards (``wifi pass:``): the placeholder when it is a password of
    one plain word (``_one_word_password``: the pw is sunshine) or shaped like one (``_PASSWORD_SHAPE``: hunter2), as
    after ``password is``, or 4 to 12 digits said alone (``_PIN``, ``_said_alone``: the pw is 1234, door pass: 4821, my
    pin is 4821); the word otherwise (the pw is required, if pw is None, the pw is 8 characters; a type or a flag after
    ``pw:``: ``def login(user, pw: str)``)."""
    word, bare = m.group(2), m.group(2).rstrip(".!?:)")
    name = m.group(1).split()[0].lower()
    if _PIN.fullmatch(bare) and _said_alone(word, bare, m.string, m.end()):
        return "[secret redacted]" + word[len(bare) :]
    if name == "pin":
        return word  # (a PIN is a number: the pin is high, a board's)
    if m.group(1).rstrip().endswith(":") and (bare.lower() in _NO_SECRET or _TYPED.match(m.string, m.start(2))):
        return word  # (a parameter's type in code: def login(user, pw: str))
    if _one_word_password(word, m.string, m.end(), shouted=m.group(1).isupper()):
        return "[secret redacted]" + word[len(bare) :]
    if 6 <= len(bare) <= 64 and _PASSWORD_SHAPE.match(bare) and not bare.startswith(("$", "<", "(", "http")) \
            and "/" not in bare and not _is_reference(bare) and not _TECH_WORD.fullmatch(bare):
        return "[secret redacted]" + word[len(bare) :]
    return word


# what a sentence says of a password in one word, beside ``_PROSE_ABOUT``, ``_SENTENCE`` and a verb's form
# (``_ONE_WORD_FORM``): the password is correct, mandatory, ready, mine, what?
_PROSE_ONE_WORD = frozenset("""correct right mandatory necessary needed ready visible hidden unknown known null none nil
    plaintext plain clear cleartext secret safe unsafe public private random temporary temp permanent default set unset
    available unavailable present absent active inactive mine yours his hers ours theirs gone lost forgotten broken
    stolen taken enough great terrible awful better worse best worst safer safest stronger strongest weaker weakest
    longer shorter harder easier simpler newer older complex obvious predictable guessable memorable common generic
    standard shared valid identical similar current previous latest original outdated obsolete useless irrelevant
    below above attached inside elsewhere somewhere nowhere done what which who where why how whatever really even
    already again back fake real dummy placeholder important key perfect significant crucial critical essential vital
    personal confidential sensitive tough tricky impossible difficult complicated awesome nice cool fun funny silly
    stupid dumb cute clever smart something anything nothing everything
    bogus legit legitimate illegitimate sufficient insufficient adequate inadequate acceptable unacceptable
    appropriate inappropriate suitable unsuitable proper improper compliant noncompliant reasonable unreasonable
    usable unusable reusable solid robust fragile decent poor excellent terrific horrible ridiculous
    useful pointless meaningless nonsense gibberish garbage junk rubbish trivial unicode ascii numeric
    alphanumeric lowercase uppercase printable readable unreadable encrypted hashed salted""".split())
_ONE_WORD = re.compile(r"[A-Za-z][a-z]{1,39}")
_SHOUTED = re.compile(r"[A-Z]{2,40}")  # (a word in capitals: PASSWORD IS SUNSHINE, the password is SUNSHINE)
_ONE_WORD_FORM = re.compile(r"(?i)[a-z]{2,}(?:ed|ing)|[a-z]{3,}ly")  # (stored, expiring, usually; not red, king)
# a verb's irregular participle is a verb's form too (written, given, shown: the password is written down somewhere)
_PARTICIPLES = frozenset("""written given shown chosen sent kept told said made found got gotten left held put built
    sold bought spoken drawn driven begun seen worn torn sworn frozen bound hung shut cut lit done known hidden stolen
    taken forgotten broken mistaken overwritten rewritten undone withheld""".split())
# participles read as such only said alone (the password was read, heard, caught): each is a verb's present or a
# passphrase's word too (split pea soup)
_PARTICIPLES_ALONE = _PARTICIPLES | frozenset("""read misread reread heard overheard caught taught thought brought
    sought felt meant dealt run hit let cast spread split quit upset stuck struck understood shaken bitten eaten fallen
    grown thrown blown won shot led fed met paid laid lent spent""".split())
# (a quote closing: not an apostrophe before a letter, a contraction's or a possessive's: doesn't, Bob's)
_SENTENCE_END = re.compile(r"[ \t]*(?:[,;:)\"]|'(?![A-Za-z])|\r?\n|\Z)")
# a new clause after the word (and its subject: my password is sunshine and my username is bob; not a second word
# said of it: strong and unique), or a chat's aside (btw)
_CLAUSE_NEXT = re.compile(r"(?i)[ \t]+(?:(?:and|but|so|or|then|because|if|though|since|while)[ \t]+(?:my|the|i|i'm|you"
                          r"|your|it|it's|he|she|we|they|his|her|our|their|this|that|there|its)(?![\w'])|(?:btw|fyi|lol)\b)")

# a time's word, a parenthesis or a preposition and its determiner after the word: the sentence goes on about the
# password said (the password is sunshine now, … (lowercase), … for the admin account, … until last week); before a
# preposition not a word with an adjective's ending (relevant to, responsible for, famous for, equal to)
_ASIDE_NEXT = re.compile(r"(?i)[ \t]+(?:(?:now|today|tonight|currently|anyway|again)(?![\w'-])|\((?!\)))")
_PREPOSITION_NEXT = re.compile(r"(?i)[ \t]+(?:for|on|at|in|to|until|till|from|since|with)[ \t]+(?:the|my|your|our|their|his"
                               r"|her|its|this|that|these|those|all|both|each|every|any|a|an|now|today|tomorrow|tonight"
                               r"|yesterday|next|last)(?![\w'-])")
_ADJECTIVE_FORM = re.compile(r"(?i)[a-z]+(?:ive|ant|ent|al|ar|ble|ful|ous|ic|ary|ory|ish|less|ile)")

_PIN = re.compile(r"\d{4,12}")  # (a PIN's or a passcode's digits: 4821, 0000; not a count: 4 digits, pin 17)


# (a config's value: before a brace, a comment, a query's next value, another variable or a command's next option:
# PIN=4821 USER=bob, --password=123456 --username=bob)
_PIN_END = re.compile(r"[ \t]*(?:[.!?](?![\w.])|[}\]&]|\#)|[ \t]+(?:--?[A-Za-z][\w-]{0,64}|[A-Za-z_]\w{0,64})=")


def _pin_value(m: re.Match) -> str:
    """What is sent of a PIN's, a passcode's or a password's number (``m.group(3)``) as a config's or a chat's value
    (``pin: 4821``, ``password: 1234``): the placeholder when said alone (``_said_alone``: ending its line or its
    sentence, before a comma, a brace, a comment, a new clause, a command's next option; ``_PIN_END``), the number
    otherwise (``pin: 1024px``, ``pin: 0611:no-name-in-module``, ``password: 1234 characters``)."""
    number, end = m.group(3), m.end()
    if m.string[end : end + 1] == ":" and not _LINE_END.match(m.string, end + 1) and m.string[end + 1 : end + 2] not in " \t":
        return number  # (a colon and more after it: a code's, a time's, a range's: pin: 0611:no-name-in-module)
    if _PIN_END.match(m.string, end) or _said_alone(number, number, m.string, end):
        return "[secret redacted]"
    return number


def _said_alone(word: str, bare: str, string: str, end: int) -> bool:
    """Whether ``word`` (``bare`` without the sign after it), ending at ``end`` of ``string``, is said alone: it ends
    its sentence (a sign after it, the line's end), or a new clause (``_CLAUSE_NEXT``), a time's word or a
    parenthesis (``_ASIDE_NEXT``), or a preposition and its determiner (``_PREPOSITION_NEXT``; not after an
    adjective's ending: relevant to) follows it."""
    return bare != word or bool(_SENTENCE_END.match(string, end) or _CLAUSE_NEXT.match(string, end)
                                or _ASIDE_NEXT.match(string, end)
                                or _PREPOSITION_NEXT.match(string, end) and not _ADJECTIVE_FORM.fullmatch(bare))


def _one_word_password(word: str, string: str, end: int, shouted: bool = False) -> bool:
    """Whether ``word``, after ``password is`` or ``was`` and ending at ``end`` of ``string``, is a password of one
    plain word (``my password is sunshine``, ``the wifi password is bananas``; in capitals when ``shouted``, its name
    and is in capitals too: ``PASSWORD IS SUNSHINE``, or when no acronym of a known kind: ``the password is SUNSHINE``,
    not ``ASCII``, ``_acronym_password``): it ends its sentence (a sign
    after it, the line's end) or a new clause follows it (``_CLAUSE_NEXT``: ``and my username is bob``) and is no word of what a sentence says of a password (``_PROSE_ABOUT``,
    ``_PROSE_ONE_WORD``, ``_SENTENCE``, a verb's form: ``required``, ``wrong``, ``stored``, ``correct``)."""
    bare = word.rstrip(".!?:)")
    if _HYPHENED.fullmatch(bare):
        return _said_alone(word, bare, string, end) and _hyphened_password(bare)
    if not (_ONE_WORD.fullmatch(bare)
            or _SHOUTED.fullmatch(bare) and (shouted or _acronym_password(bare, word, string, end))):
        return False
    if not _said_alone(word, bare, string, end):
        return False
    lower = bare.lower()
    return lower not in _PROSE_ABOUT and lower not in _PROSE_ONE_WORD and lower not in _SENTENCE \
        and lower not in _PARTICIPLES_ALONE and not _ONE_WORD_FORM.fullmatch(lower)


_HYPHENED = re.compile(r"[A-Za-z][a-z]{0,39}(?:-[A-Za-z][a-z]{0,39}){2,11}")  # (correct-horse-battery-staple)


def _hyphened_password(word: str) -> bool:
    """Whether ``word``, 3 plain words or more joined by - (``_HYPHENED``) said alone after a password's name, is a
    passphrase (the password is correct-horse-battery-staple): none of its parts a sentence's or a description's
    (``_SENTENCE``, ``_DESCRIBING``: state-of-the-art, up-to-date, one-size-fits-all, well-thought-out), and its last
    no verb's form, participle or description (``_compound_said``, ``_PROSE_ABOUT``, ``_PROSE_ONE_WORD``, an
    adjective's ending after 3 letters or more: first-come-first-served, ten-characters-long, non-human-readable; not
    fish). Two such parts are a compound a sentence says (one-time, well-known)."""
    parts = word.lower().split("-")
    last = parts[-1]
    return not any(part in _SENTENCE or part in _DESCRIBING for part in parts) and not _compound_said(word) \
        and not (len(last) >= 7 and last.endswith(_ADJECTIVE_ENDS)) and last not in _PROSE_ABOUT \
        and last not in _PROSE_ONE_WORD


_ADJECTIVE_ENDS = ("able", "ible", "ive", "ous", "ful", "less")


# an acronym a sentence says of a password in capitals: a character set, an algorithm, a standard, a placeholder
# (the password is ASCII, MD5, TBD; beside a mode's or a protocol's name, ``_NOT_A_PAIR``: the password is LDAP)
_ACRONYMS = frozenset("""ascii ansi utf ucs unicode ebcdic latin hex base aes des rsa dsa ecdsa ecc md sha ntlm lm pbkdf
    bcrypt scrypt argon crc hash pgp gpg pem der pkcs fips nist iso pci pii gdpr hipaa soc otp sms pin id ids tbd tba tbc
    na todo fixme xxx wip n a x y z""".split())
# acronyms of 3 or 4 letters with a vowel a sentence may say a password is, or is managed by (the password is AWS,
# JSON, UUID): a format's, a system's, a directory's, a wireless network's, a null, a placeholder's (WORD, NAME)
_SHORT_ACRONYMS = frozenset("""url uri urn json yaml toml ini env var vars ide cli gui idp aws wep wpa
    peap leap uid uuid guid gid pid acl rbac abac ado aad sim esim usb rfid ocr iot faq asap eta eol eof utc oem ios osx
    unix mac bios uefi ami arn sas sig dev ops prod uat poc none null nil true yes nan cas text word name""".split())


def _acronym_password(word: str, said: str, string: str, end: int) -> bool:
    """Whether ``word`` in capitals (``said`` with the sign after it, ending at ``end`` of ``string``), in a sentence
    that is not, is a password said in capitals, not an acronym: of 5 letters or more (the password is SUNSHINE) not
    of a known kind (``_ACRONYMS``, ``_NOT_A_PAIR``: ASCII, UNICODE, LDAPS); of 3 or 4 letters (the password is CATS)
    neither, nor one of ``_SHORT_ACRONYMS`` (JSON, AWS, UUID), with a vowel (no SSH, TLS, KMS: an acronym of
    consonants), and ending its sentence (not before a colon: a label's, NOTE:) or before a new clause
    (``_CLAUSE_NEXT``; not before a word said of it: the password is CATS related); of 2 letters never (AI, ID, OK,
    AD). Most words in capitals of up to 4 letters are acronyms (API, URL, DIY, LED in the real texts): one said
    alone after a password's name is taken for the password unless a known one."""
    lower = word.lower()
    if lower in _ACRONYMS or lower in _NOT_A_PAIR:
        return False
    if len(word) >= 5:
        return True
    if len(word) < 3 or lower in _SHORT_ACRONYMS or not _VOWEL.search(word):
        return False
    if said != word and not said.endswith(":"):
        return True  # (a sign after it: CATS. CATS!)
    return bool(_SENTENCE_END.match(string, end) or _CLAUSE_NEXT.match(string, end))


# a build's or a config's property standing for the value: MSBuild's $(DB_PASSWORD), Maven's ${env.NEXUS_PASSWORD}
_PROPERTY = re.compile(r"\$(?:\([\w.:-]+\)|\{[\w.:-]+\})")


def _whole_value(name: str, value: str) -> str:
    """What is sent of a value named as a secret in XML or a Dockerfile's ``ENV NAME value``: the placeholder, but the value itself when it is blank, a
    reference (``_REFERENCE``, ``_PROPERTY``), or the name is about a secret (``_about``) and it is not key material."""
    if not value.strip() or _is_reference(value) or _PROPERTY.fullmatch(value) \
            or _about(name) and _if_key(value, strict=True) == value:
        return value
    return "[secret redacted]"


_VARIABLE = re.compile(r"\$[A-Za-z_]\w*")


def _parameters_variable(m: re.Match) -> bool:
    """Whether the word after a secret's name (``m.group(2)``) is a variable passed to a parameter so named, as a
    command's ``--password $VAR`` is (PowerShell: ``-Credential $domainCreds``, ``-Password $dbPassword``)."""
    return m.string[m.start() - 1 : m.start()] == "-" and bool(_VARIABLE.fullmatch(m.group(2)))


def _next_lines_key(m: re.Match) -> bool:
    """Whether the word after a secret's name (``m.group(2)``) is the next line's key (``kind: Secret\\nstringData:``)."""
    return "\n" in m.group(1) and m.group(2).endswith(":")


_CLASSES = (re.compile(r"[a-z]"), re.compile(r"[A-Z]"), re.compile(r"[0-9]"), re.compile(r"[^A-Za-z0-9]"))


def _entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    counts: dict[str, int] = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def looks_random(word: str) -> bool:
    """Whether a word standing where a credential stands is one: 8+ characters, three character classes (or
    two with a digit), and no less than 3 bits of entropy a character. Words, paths, numbers, ARNs and references
    (``_REFERENCE``) are not."""
    word = word.rstrip(".")
    if len(word) < 8 or word.startswith(("[", "/", "~", "http", "arn:aws")) or _is_reference(word):
        return False
    classes = [bool(c.search(word)) for c in _CLASSES]
    if sum(classes) < 2 or (sum(classes) == 2 and not classes[2]) or word.isdigit():
        return False
    return _entropy(word) >= 3.0


def _if_random(word: str, placeholder: str) -> str:
    return placeholder if looks_random(word) else word


def _if_key(value: str, strict: bool = False) -> str:
    """``[secret redacted]`` for key material standing as a value: random (``looks_random``), and with
    ``strict`` 16 characters or more in a key's alphabet too (letters, digits, ``+/=_%-``: base64, hex) with a
    digit; ``value`` as it is otherwise (a word, a path, a number, a class name, ``user:42:profile``)."""
    if strict and not (len(value) >= 16 and _KEY_ALPHABET.fullmatch(value) and any(c.isdigit() for c in value)):
        return value
    return "[secret redacted]" if looks_random(value) else value


_KEY_ALPHABET = re.compile(r"[A-Za-z0-9+/=_%-]+")

# the last part of a name saying its value is about a secret, not the secret: where it is, which, how it is
# used, how long it lasts (password_reset_url, secretsManagerArn, token_expiry, AUTH_DOMAIN, secret_store_backend,
# AUTH_CALLBACK); such a name's value is redacted still when it is key material (``_if_key``: SECRET_STORE=Zq8m…)
_ABOUT_PARTS = frozenset("""url urls uri endpoint file path dir name type method mode provider policy arn arns ref
    header prefix env var ttl expiry expires expiration lifetime length count limit size version format scope scopes
    field label hint algorithm kind store backend manager server host domain audience issuer location region
    callback redirect strategy schedule rotation realm tenant enabled disabled required interval timeout encoder
    encoding hasher hashing strength complexity rules requirements validator validation regex pattern prompt""".split())
_LAST_PART = re.compile(r"([A-Z]?[a-z0-9]+|[A-Z0-9]+)[^A-Za-z0-9]*$")
_ARN_ACCOUNT = re.compile(r":\d{12}:$")  # an ARN's account id, before its resource's type
# a value naming where the secret comes from, or standing in for it: ${VAR}, $VAR, %VAR%, a setting read
# (settings.API_KEY, process.env.OPENAI_API_KEY, config.secret, options.authToken: no digit in it), a mask
# (********), a placeholder (<your-password>); not ${VAR:-default} nor a value that only begins so
_REFERENCE = re.compile(r"""(?:\$\{[A-Za-z_]\w*\}|\$[A-Z_][A-Z0-9_]*|%[A-Za-z_]\w*%|\*{4,}|<[A-Za-z _.-]+>
    |(?:[A-Za-z_]+\.)+(?:[A-Z_]+|[A-Za-z_]*(?i:pass|pwd|secret|token|key|auth|credential)[A-Za-z_]*))[)}\]]*""", re.X)
# (a $ word mixing digits into its letters more than once is leetspeak, $UP3RS3CR3T, not a variable, $K8S_TOKEN;
# two capitalised words, Hunter.Password, are a value, not a setting read: that is an object named in lower case,
# settings.API_KEY, a compound name, BuildConfig.apiKey, a known object, Settings.Password, or a property or a
# constant, Object.keys, Secrets.DB_PASSWORD, or more than one dot, Settings.Default.Password)
_LEET = re.compile(r"[A-Za-z][0-9]+[A-Za-z][^.]*?[A-Za-z][0-9]+[A-Za-z]")
_TWO_WORDS = re.compile(r"(?!(?i:settings|config|configuration|environment|env|secrets|credentials|properties|options"
                        r"|constants|keys|vars|globals|resources|app|application|context|process)\.)"
                        r"[A-Z][a-z]+\.[A-Z][a-z]*(?:[A-Z][a-z]*)*[)}\]]*")


def _is_reference(word: str) -> bool:
    """Whether ``word`` names where a secret comes from or stands in for it (``_REFERENCE``), not a value shaped so
    (``_LEET``, ``_TWO_WORDS``)."""
    if not _REFERENCE.fullmatch(word):
        return False
    return not (_LEET.search(word) if word.startswith("$") else _TWO_WORDS.fullmatch(word))


# words a sentence holds and a passphrase hardly does: a config line's value with two of them is prose
# (``password: reset flow now emails the user``; one may be a passphrase's: the quick brown fox), or code with an
# operator or a call in it
_SENTENCE = frozenset("""a an the of on in to for with from by at as into onto after before when while if then else
    or and but not no now so than via per is are was were be been will would should can could may might must do does
    did it its this that these those we you they he she i me us them my your our their his her every each all some
    any about above below under over through without within between never always also only just still yet here
    there please""".split())
_CODE = re.compile(r"\w[(\[]|\s=\s|==|!=|&&|\|\||=>|->|[;{]$")
# what follows an environment variable's value on a command line (DB_PASSWORD=… ./migrate.sh, … npm test): a
# path, an option, another assignment, a shell operator, or a command run so
_COMMAND = re.compile(r"[\w.-]*/|-|\w+=|.*[|&;<>`$()]|(?P<name>python3?|node|npm|npx|yarn|pnpm|bun|deno|go|cargo|make|bash|sh"
                      r"|zsh|uv|uvx|poetry|pytest|pip|docker|kubectl|helm|terraform|ruby|bundle|rails|java|mvn|gradle|"
                      r"dotnet|php|perl|curl|wget|git|env|exec|sudo|time|psql|mysql|ssh)(?!\S)")
# a command whose name is a word of a passphrase too (PASSWORD=correct go fish, big make believe, why env vars) is
# one only when what follows is its: go's subcommand, make's target or nothing, or (time, env, exec, sudo) a command
_WORD_COMMANDS = {
    "go": re.compile(r"-|(?:build|run|test|get|install|mod|vet|fmt|generate|clean|list|work|tool|version|env|doc)(?!\S)"),
    "make": re.compile(r"$|-|[\w.-]*[=/]|(?:all|build|test|tests|check|install|uninstall|clean|lint|run|dev|start|serve|"
                       r"deploy|release|dist|docs|format|fmt|migrate|setup|up|down|db|seed|bootstrap)(?!\S)"),
    "time": None, "env": None, "exec": None, "sudo": None}


def _runs_command(rest: str) -> bool:
    """Whether ``rest``, what follows an environment variable's value on its line, runs a command (``_COMMAND``,
    ``_WORD_COMMANDS``): ``./migrate.sh``, ``npm test``, ``go test ./...``, ``time make`` (three such words read at
    most: ``time`` repeated over a line is no slow path)."""
    for _ in range(3):
        m = _COMMAND.match(rest)
        if not m or m.group("name") not in _WORD_COMMANDS:
            return bool(m)
        rest = rest[m.end() :].lstrip()
        if (follows := _WORD_COMMANDS[m.group("name")]) is not None:
            return bool(follows.match(rest))
    return False
_PHRASE = re.compile(r"(?i)pass|pwd|secret")  # the secret words of names whose value may be a phrase


def _line_value(m: re.Match) -> str:
    """What is sent of a config line (``NAME: value``, ``NAME = value``, ``NAME=value`` at a line's start, or
    after a space inside a line when its value is plain words: ``the wifi password: purple monkey dishwasher``) whose
    value is unquoted and holds spaces: the value, a comment after `` #`` aside, redacted whole when the name's
    secret may be a phrase (a password, passphrase, secret: ``passphrase: correct horse battery staple``); the
    line as it is (its first word left to the other patterns) when the name is a token's or a key's (a token is
    one run), is about a secret (``_about``), when the value is a sentence (``_SENTENCE``; not after ``NAME=`` at a
    line's start, a .env file's or a shell's: ``PASSWORD=to be or not to be``), code (``_CODE``, a type), a
    reference (``_REFERENCE``), a date and its time (``_TIMESTAMP``), a test's verdict, or (``NAME=value``) is
    followed by a command."""
    value = m.group("value")
    if (end := value.find("</input>")) >= 0:  # (a task's end)
        value = value[:end]
    cut = _COMMENT.search(value)
    body = value[: cut.start()] if cut else value.rstrip()
    words = body.split()
    inside = m.start() > 0 and m.string[m.start() - 1] != "\n"  # (after a space inside a line)
    if (m.group("sep") + value[:1]).strip() in ("==", ":="):
        return m.group()  # (a comparison or an assignment in code: password == abc, password := pw)
    if len(words) == 1 and len(body) < 6 and not inside and _short_secret(m, body):
        return f"{m.group(1)}[secret redacted]{m.group('value')[len(body):]}"
    if len(words) < 2 or not _PHRASE.search(m.group("word")) or body[0] in "\"'[{(|>&*!%<$" \
            or body[0] == "`" and _SUBSTITUTED.match(body, 1) \
            or inside and not _PLAIN_WORDS.fullmatch(body) or _about(m.group("name")) or _is_reference(words[0]) or _CODE.search(body) or _TYPED.match(body) or _COUNT.fullmatch(words[0]) \
            or _TIMESTAMP.fullmatch(body) \
            or (inside or m.group("sep") != "=") and sum(w.strip(".,;:!?").lower() in _SENTENCE for w in words) > 1 \
            or m.group("name") == "PASS" and _verdict(words[0], m.string, m.start("value") + len(words[0])):
        return m.group()
    if m.group("sep") == "=" and _runs_command(body[len(words[0]) :].lstrip()):
        return m.group()
    return f"{m.group(1)}[secret redacted]{m.group('value')[len(body):]}"


# what a config line's short value (``password: true``, ``secret: bool``, ``password: wrong``) is when it is no
# secret: a flag, a null, a type, a word a sentence says of a password (``_PROSE_ABOUT``)
_NO_SECRET = frozenset("""true false yes no on off y n t f null none nil undefined nan unset tbd todo str int bool any
    dict list char byte float""".split())


def _short_secret(m: re.Match, word: str) -> bool:
    """Whether ``word``, the whole value under 6 characters of a config or env line (``password = abc``,
    ``PASSWORD=abc1``, ``db_pass: xy9``), is a secret: it is when named as a password's, passphrase's or secret's,
    unless the name is about a secret (``_about``) or the value is no secret's (``_NO_SECRET``, ``_PROSE_ABOUT``,
    no letter or digit: ``~``, ``...``), a number (with its unit too: ``_MEASURE``, ``12ms``), a type, a reference
    or code (``pw;``, ``f(x)``, ``b""``), or the name is code's (``self.pwd = pwd``, ``_secret = s``) or ``PASS:``, a
    test runner's (automake's ``PASS: t1``), or it is a plain word after ``secrets:`` alone (``secrets: write``, as
    ``secrets: inherit``: ``_ALONE``); a word in backticks is read without them (``PASSWORD=`abc```)."""
    if _BACKTICKED.fullmatch(word):
        word = word[1:-1]
    return bool(_PHRASE.search(m.group("word"))) and not _about(m.group("name")) \
        and not m.group("name").startswith(("self.", "this.", "cls.", "_")) and not any(c in "\"'`" for c in word) \
        and word[0] not in "[{(|>&*!%<$" and word[-1] not in ",;)]}" and any(c.isalnum() for c in word) \
        and word.lower() not in _NO_SECRET | _PROSE_ABOUT and not _COUNT.fullmatch(word) \
        and not _MEASURE.fullmatch(word) and not _TYPED.match(word) \
        and not _is_reference(word) and not _CODE.search(word) \
        and not (m.group("name") == "PASS" and ":" in m.group("sep")) and not _code_name(word, m.string) \
        and not (_ALONE.fullmatch(m.group("name") + m.group("sep")) and _PROSE.fullmatch(word))


_COUNT = re.compile(r"\d+[,;.]?")  # (PASS: 42, FAIL: 0)
# a number and its unit, a time's, a size's, a length's, a weight's, a rate's or a share's, or an ordinal (password:
# 1234ms, a step's time; 4KB, 1.5s, 100%, 50mm, 2.4GHz, 20th): no secret; a number with a leading zero (00338d) or a
# decade (1960s) is none
_MEASURE = re.compile(r"(?!0\d|1[89]\d0s|20\d0s)\d+(?:\.\d+)?(?:[nuµm]?s|secs?|mins?|m|h|hrs?|d|[kKMGT]i?B|px|%|[cmk]m|k?g|mg|lbs?|oz|[kMG]?Hz"
                      r"|[kM]?W|x|fps|rpm|(?<=1)st|(?<=2)nd|(?<=3)rd|th)[,;.]?")
_BACKTICKED = re.compile(r"`[^`\s/$]+`")  # (a word in backticks: markdown's, no command: PASSWORD=`abc`)
_TYPED = re.compile(_TYPE)  # (a type's code: password: string | undefined)
_PLAIN_WORDS = re.compile(r"[A-Za-z'-]+(?:[ \t]+[A-Za-z'-]+)+[.!]?")  # (a phrase inside a line of prose)
_COMMENT = re.compile(r"(?<![ \t])[ \t]+(?:#.*)?$")  # (begun after a space only: a run of spaces is read once)


# what under a secret's name is no value of it: a key, a list's item, a comment, an object, a list, a type's union
_NOT_A_VALUE = re.compile(r"""["']?[\w.-]+["']?[ \t]*:(?:[ \t]|$)|-[ \t]|[#{\[|&(<]|//""")
_QUOTED = re.compile(r"""(["'])[^"'\n]*\1""")


def _next_line_value(m: re.Match) -> str:
    """What is sent of a secret's value on the lines under its name (``password:\\n  hunter2xyz``, ``password: |``
    and a block): the lines as they are when the first is no deeper than the name, is no value (a key, a list's
    item, a comment, an object: ``_NOT_A_VALUE``), is code, a type, a reference or a sentence, or the name is
    about a secret (``_about``) and the value is not key material; else its first line (a block's every line as
    deep) redacted, its quotes and a comma after it kept."""
    lines = m.group("value").split("\n")
    first = lines[0].lstrip(" \t")
    depth = len(lines[0]) - len(first)
    word = first.split()[0]
    if depth <= len(m.group("indent")) or _NOT_A_VALUE.match(first) or _CODE.search(first) \
            or _TYPED.match(first) or _is_reference(word.strip("\"',")) \
            or sum(w.strip(".,;:!?").lower() in _SENTENCE for w in first.split()) > 1 \
            or _about(m.group("name")) and _if_key(word, strict=True) == word:
        return m.group()
    out = []
    for i, line in enumerate(lines):
        body = line.lstrip(" \t")
        if i and not (m.group("block") and body and len(line) - len(body) >= depth):
            out.extend(lines[i:])
            break
        if not body:
            out.append(line)
            continue
        quoted = _QUOTED.match(body)
        rest = body[quoted.end() :] if quoted else ("," if body.endswith(",") else "")
        quote = quoted.group(1) if quoted else ""
        out.append(f"{line[: len(line) - len(body)]}{quote}[secret redacted]{quote}{rest}")
    return m.group("head") + "\n".join(out)


def _about(name: str) -> bool:
    """Whether the last part of ``name`` (``password_reset_url``, ``secretsManagerArn``) says its value is
    about a secret, not the secret (``_ABOUT_PARTS``), or when (``_about_when``: ``PasswordLastUsed``), or is an
    id's (``secret_id``)."""
    last = _LAST_PART.search(name)
    return bool(last) and last.group(1).lower() in _ABOUT_PARTS | {"id", "ids"} or _about_when(name)


# a name's last part saying when (password_changed_at, secret_expires_on, access_key_1_last_used_date), and the
# events a name says were the last or are the next after last or next (PasswordLastUsed, password_last_changed,
# PASSWORD_LAST_SET, TokenNextRefresh): not a password that was used (password_used, password_last_value)
_WHEN_PARTS = frozenset("at on date time timestamp datetime when since until".split())
_EVENTS = frozenset("set reset use used change login logon refresh rotation update access run".split())
_NAME_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z0-9]+(?![a-z])")


def _about_when(name: str) -> bool:
    """Whether ``name`` says when of a secret, not the secret: its last part a time's (``_WHEN_PARTS``), or last,
    next or first before an event's (a participle in -ed or ``_EVENTS``: AWS IAM's ``PasswordLastUsed``, its
    credential report's ``password_last_changed``)."""
    words = _NAME_WORD.findall(name[-160:])
    if not words:
        return False
    last = words[-1].lower()
    return last in _WHEN_PARTS or len(words) >= 2 and words[-2].lower() in ("last", "next", "first") \
        and (last.endswith("ed") or last in _EVENTS)


# a date and its time (ISO 8601's, a log's): a value no secret is shaped as (2016-09-08T21:47:36Z, 2016-09-08 21:47)
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?"
                        r"(?![\w.:+-])")


def _stamped(m: re.Match, group: int) -> bool:
    """Whether ``m``'s ``group`` begins a date and its time that runs to its end or past it (``_TIMESTAMP``: a
    value read to a space, 2016-09-08 of 2016-09-08 21:47:36)."""
    stamp = _TIMESTAMP.match(m.string, m.start(group))
    return bool(stamp) and stamp.end() >= m.end(group)


def _verdict(value: str, string: str, end: int) -> bool:
    """Whether ``value`` after ``PASS:``, ending at ``end`` of ``string``, is a test's verdict: a name and its time,
    a test file, a test's name or a path that does not look random."""
    return bool(_TIMED.match(string, end) or _TEST_FILE.fullmatch(value) or _VERDICT.match(value) and not looks_random(value))


# a token is one run: an ordinary word after ``token:`` (colon, space, no quote) followed by another word is prose
# (not a random run of small letters: ``_a_word``), either word with an apostrophe's ending (redaction's, Code's,
# shouldn't: the value is read to the quote) or of ordinary parts joined by - or _ (build-tree, retry_seconds,
# v2-migration: ``_ordinary_word``), an acronym's capitals too (README, MCP, API-only), or a file's, a path's or a
# module's name of such parts joined by . or / (lock.json, bench/search.py, Memory.save_config)
_PROSE_NAME = re.compile(r":[^\S\n]+$")
_PROSE = re.compile(r"[A-Z]?[a-z]+")
_ACRONYM = re.compile(r"[A-Z]{2,12}")
_APOSTROPHE = r"(?:['\u2019](?:s|t|re|ve|ll|d|m)|(?<=s)['\u2019](?=\s))?"
_PROSE_TAIL = re.compile(_APOSTROPHE)
_PROSE_NEXT = re.compile(rf"[^\S\n]+(?:[(_]?_?(?:[A-Za-z]?[a-z]+|[A-Z]{{2,12}})(?:[-_./](?:[A-Za-z]?[a-z0-9]+|[A-Z]{{2,12}})){{0,7}}"
                         rf"{_APOSTROPHE}_{{0,2}}(?:\(\))?|\d+)(?![^\s.,;:!?)])|[^\S\n]+--[a-z][a-z0-9]*(?:-[a-z0-9]+)*[:,]?[^\S\n]+\S")
# (a command's option first, ``--max-cost-per-day 1e-7 was refused``: what follows on its line is its argument; a
# private name next, its underscores first or last: ``builder: _fresh reads``)
_OPTION_NEXT = re.compile(r"[^\S\n]+\S")
_NAMED = re.compile(r"[\w-]{1,64}(?:[./][\w-]{1,64}){1,7}")
_PARTS = re.compile(r"[A-Za-z0-9]{1,24}(?:[-_][A-Za-z0-9]{1,24}){1,7}")
_VOWEL = re.compile(r"(?i)[aeiouy]")
_CONSONANTS = re.compile(r"(?i)[^aeiouy]{5}")
_PAIRED = re.compile(r"[ \t]+\[password redacted\]")
# auth or secrets alone before a colon, a mode's or a collection's name more than a secret's: one word after it
# ending its line is a mode (auth: basic), GitHub Actions' secrets: inherit or a commit's subject (auth: release)
_ALONE = re.compile(r"(?i)(?:auth|secrets):[^\S\n]+")
_NAME_PART = re.compile(r"[\w.-]")
_LINE_END = re.compile(r"[^\S\n]*(?:#[^\n]*)?(?:\r?\n|\Z)")


def _a_word(letters: str) -> bool:
    """Whether a run of letters may be a word of prose, not a token of random small letters: 24 letters at most,
    and from 14 letters on no five consonants in a row (walkthroughs, 12, has them; kqzvxjwpmrtl…) nor from 16 on
    fewer than a quarter of vowels (internationalization has half)."""
    n = len(letters)
    if n > 24:
        return False
    if n >= 14 and _CONSONANTS.search(letters):
        return False
    return n < 16 or sum(c in "aeiouyAEIOUY" for c in letters) >= n / 4


def _prose_after(value: str, string: str, end: int) -> bool:
    """Whether ``value``, after a token's name and ending at ``end`` of ``string``, is prose's first word: an
    ordinary word (``_ordinary_word``), an apostrophe's ending after it (``redaction's``), a colon, a comma or a
    semicolon (a scope's or a list's: ``add_cpython: Support 3.12``, ``scheduler, build-tree``), and another word
    after that on its line (one in parentheses, or a command's option before more: ``build-tree --dry-run counts``);
    or a command's option of such a word before anything more on its line (``--version only on the root app``)."""
    scope = value.endswith(":")  # (read with the value; a comma or a semicolon is not)
    value = value[:-1] if scope else value
    option = value.startswith("--") and value[2:3].islower()
    value = value[2:] if option else value
    if (cut := value.find("\u2019")) >= 0 and _PROSE_TAIL.fullmatch(value, cut):
        value = value[:cut]
    elif not scope:
        end = _PROSE_TAIL.match(string, end).end()
        end += string[end : end + 1] in (",", ";", ":")
    return _ordinary_word(value) and bool((_OPTION_NEXT if option else _PROSE_NEXT).match(string, end))


def _ordinary_word(value: str) -> bool:
    """Whether ``value`` is an ordinary word (``_a_word``), an acronym (``_ACRONYM``, from 5 capitals on with a vowel:
    README, not QXZVBNMKPW) or ordinary parts joined by - or _ (``_PARTS``: build-tree, Bearer-token, retry_seconds,
    API-only): each a word or an acronym, from 4 letters on with a vowel (not xkcdqwrt-zzkvbnmp), or an
    algorithm's or a version's name beside one (v2-migration, utf8-safe: ``_TECH_WORD``, not a number alone:
    hunter-2, nor a word shaped like a password: s3cr3t-99); or such words joined by . or / (``_NAMED``: a file's, a
    path's or a module's name: lock.json, bench/search.py, Memory.save_config; not a JWT's parts), each with
    underscores first or last too (a private name: _fresh, __init__, Memory._here)."""
    if value.startswith("_") or value.endswith("_"):  # (a private name: _fresh, __init__)
        core = value.strip("_")
        return bool(core) and len(value) - len(core) <= 4 and _ordinary_word(core)
    if _PROSE.fullmatch(value):
        return _a_word(value)
    if _ACRONYM.fullmatch(value):
        return len(value) < 5 or bool(_VOWEL.search(value))
    if _NAMED.fullmatch(value):
        return all(_ordinary_word(name) for name in re.split(r"[./]", value))
    if not _PARTS.fullmatch(value):
        return False
    parts = re.split(r"[-_]", value)
    words = [p for p in parts if (_PROSE.fullmatch(p) and _a_word(p) or _ACRONYM.fullmatch(p))
             and (len(p) < 4 or _VOWEL.search(p))]
    return bool(words) and all(p in words or not p[0].isdigit() and _TECH_WORD.fullmatch(p) for p in parts)


def _named_value(m: re.Match) -> str:
    """What is sent of a value (``m.group(2)``) assigned to a secret-looking name (``m.group(1)``, its ``=``,
    ``:`` and quotes too): the placeholder, but the value itself when the name's last part says it is about a
    secret (``_ABOUT_PARTS``, ``_about_when``) and it is not key material, when the value is a reference
    (``_REFERENCE``), a date and its time (``_TIMESTAMP``) or a number with its unit (``_MEASURE``: 1234ms), when
    the name is a part of an ARN (``…:123456789012:secret:prod/db``), and when it is an id (``apiKeyId``,
    ``secret_id``, ``tokenId``) that is not key material, 16 characters or more that look random (Vault's AppRole
    secret_id and a Tencent SecretId ``AKID…`` are credentials)."""
    name, value = m.group(1), m.group(2)
    if _VERDICT_NAME.fullmatch(name) and m.string[m.start() - 1 : m.start()] not in ("_", ".", "-") \
            and _verdict(value, m.string, m.end()):
        return value  # (a test's verdict: ``PASS: TestParse``, ``PASS: t/basic.sh``)
    if _PAIRED.match(m.string, m.end()):
        return value  # (the user of a pair: auth: deploy [password redacted])
    if _PROSE_NAME.search(name) and not _PHRASE.search(name) and _prose_after(value, m.string, m.end()):
        return value  # (ordinary words after a token's name: ``token: refresh on 401``, a commit's subject)
    if _ALONE.fullmatch(name) and not _NAME_PART.match(m.string, max(0, m.start() - 1), m.start()) \
            and _PROSE.fullmatch(value) and _a_word(value) and _LINE_END.match(m.string, m.end()):
        return value  # (one word ending the line after auth or secrets alone: a mode, a subject, secrets: inherit)
    if not name.rstrip().endswith(("'", '"')) and _code_name(value, m.string):
        return value  # (a name the text's code gives: def f(user, pw): … password = pw)
    if _stamped(m, 2) or _MEASURE.fullmatch(value):
        return value  # (a date and its time: "password_updated": "2016-09-08T21:47:36Z"; a number's unit: 1234ms)
    last = _LAST_PART.search(name)
    part = last.group(1).lower() if last else ""
    if part in _ABOUT_PARTS or _about_when(name):
        return _if_key(value, strict=True)
    if _ARN_ACCOUNT.search(m.string, max(0, m.start() - 14), m.start()) or _is_reference(value):
        return value
    if part in ("id", "ids") and (len(value) < 16 or not looks_random(value)):
        return value
    return "[secret redacted]"


# the names a text's code gives: a function's parameters, a lambda's, a loop's variables, a with's, an except's or an
# import's (as), each a statement of its line (not prose's: for bob in accounting, known as admin), and in Python (a
# def, an import in the text) an assignment's target at a line's start
_CODE_NAMING = re.compile(r"""\bdef[ \t]+\w{1,64}[ \t]*\((?P<params>[^)\n]{0,512})\)|\blambda\b(?P<lambda>[^:\n]{0,256}):
    |^[ \t]*(?:async[ \t]+)?for[ \t]+(?P<loop>[\w, \t()]{1,128}?)[ \t]+in\b
    |^[ \t]*(?:async[ \t]+)?(?:with|except|import|from)\b[^\n]{0,256}?\bas[ \t]+(?P<alias>\w{1,64})""", re.X | re.M)
_PYTHON = re.compile(r"(?m)^[ \t]*(?:def[ \t]+\w+[ \t]*\(|(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]+\w)")
_ASSIGNED = re.compile(r"(?m)^[ \t]*(\w{1,64})[ \t]*(?::[^=\n]{1,64})?=(?!=)")
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
_WORD = re.compile(r"[A-Za-z_]\w*")


@functools.lru_cache(maxsize=8)
def _code_names(text: str) -> frozenset:
    """The names ``text``'s code gives (``_CODE_NAMING``; assignments' targets when it holds Python: ``_PYTHON``)."""
    names = set()
    if not any(word in text for word in ("def", "lambda", "for", " as ", "import")):
        return frozenset()
    for m in _CODE_NAMING.finditer(text):
        if (params := m.group("params")) is not None:  # (a parameter's name: before its type and its default)
            names.update(p.split("=")[0].split(":")[0].strip(" \t*") for p in params.split(","))
        else:
            names.update(_WORD.findall(m.group("lambda") or m.group("loop") or m.group("alias") or ""))
    if _PYTHON.search(text):
        names.update(m.group(1) for m in _ASSIGNED.finditer(text))
    return frozenset(names)


def _code_name(value: str, text: str) -> bool:
    """Whether ``value`` assigned to a secret's name is an identifier ``text``'s code gives (``_code_names``:
    ``def connect(user, pw):`` then ``password = pw``), not a value: in a text that holds no code, ``password = pw``
    is ini's. A keyword argument closing its call is read without its parentheses (``g(x, password=password)``)."""
    name = value.rstrip(")")
    return bool(_IDENTIFIER.fullmatch(name)) and name in _code_names(text)


def _if_private_pem(b64: str) -> str:
    """``[private key redacted]`` for a PEM private key in base64, ``b64`` as it is otherwise (a certificate)."""
    head = "".join(b64.split())[:64]
    try:
        pem = base64.b64decode(head)
    except ValueError:
        return b64
    return "[private key redacted]" if b"PRIVATE KEY" in pem.split(b"\n", 1)[0] else b64


def _segments(path: str) -> str:
    """A webhook URL's path with each long segment (the ids and tokens in it) replaced."""
    return "/".join("[webhook token redacted]" if len(seg) >= 16 or looks_random(seg) else seg for seg in path.split("/"))


@functools.lru_cache(maxsize=1)
def _detectors() -> list:
    """The regex detectors of detect-secrets (imported here, on the first redaction), as ``(name, plugin)``; an
    empty list when the library is not installed (pimem's own patterns still apply)."""
    try:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.plugins.base import RegexBasedDetector
    except ImportError:  # pragma: no cover - it is a dependency; a broken install still redacts with our patterns
        return []
    out = []
    for secret_type, cls in sorted(get_mapping_from_secret_type_to_class().items()):
        if issubclass(cls, RegexBasedDetector) and cls.__name__ != "IPPublicDetector":
            out.append((secret_type.lower(), cls()))
    return out


# a detector run only when its hint occurs in the text (in lower case): the npm one's //.+/:_authToken read each
# // of a text to its end (x:// repeated over 100 KB: 7.5 s)
_LIBRARY_HINTS = {"npm tokens": "_authtoken"}
# the detectors read a text whose runs of spaces are cut to 8 (a secret they find holds none; its every occurrence in
# the text is replaced): the IBM Cloud one's " *(?:=|:| +|::) *" read "password", 2,000 spaces and "=" in 60 s
_SPACES = re.compile(r"[ \t]{9,}")


def library_redact(text: str) -> str:
    """Every secret a detect-secrets regex detector finds in ``text``, replaced by ``[<type> redacted]``."""
    lower = None
    for secret_type, plugin in _detectors():
        if (hint := _LIBRARY_HINTS.get(secret_type)) is not None:
            lower = text.lower() if lower is None else lower
            if hint not in lower:
                continue
        read = _SPACES.sub(" " * 8, text) if " " * 9 in text or "\t" in text else text
        found = {s for s in plugin.analyze_string(read) if isinstance(s, str) and len(s) >= 8}
        for secret in sorted(found, key=len, reverse=True):
            text = text.replace(secret, f"[{secret_type} redacted]")
    return text


def redact(text: str) -> str:
    """``text`` with every secret the patterns or the library recognise replaced by a placeholder naming what
    it was."""
    return library_redact(_own(text))


def redact_shown(text: str) -> str:
    """``redact`` for a setting pimem shows (a command provider's command line: ``OPENAI_API_KEY=sk-… llm …``):
    the library's detectors run only when a long word is left that they may know (16 characters of a key's
    alphabet, letters, digits, ``+=_-``), so ``status`` and ``model`` import it only then."""
    text = _own(text)
    return library_redact(text) if _LONG_WORD.search(text) else text


def _own(text: str) -> str:
    """``text`` with every secret pimem's own patterns recognise replaced."""
    lower = text.lower()
    for pattern, placeholder, hints in _PATTERNS:
        if any(hint in lower for hint in hints):
            text = pattern.sub(placeholder, text)
            lower = text.lower()
    return text


_LONG_WORD = re.compile(r"[A-Za-z0-9+=_-]{16,}")  # (not a path: no / or .)


@functools.lru_cache(maxsize=1 << 14)
def redact_line(line: str) -> str:
    """``redact`` for one line of the compactor's view (cached: the same lines are sent with many calls)."""
    return redact(line)
