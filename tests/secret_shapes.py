"""A corpus of realistic secret shapes (as they appear in agent logs) and of ordinary text that looks random.

Each shape is ``(name, text, secrets)``: the text as an agent would see it, and the substrings that must never
leave the machine. Every key here is made up (right shape, random characters)."""

SHAPES = [
    # the six that once slipped through
    ("aws csv row", "User name,Password,Access key ID,Secret access key,Console login link\n"
     "deploy,,AKIAQX4Z7JH2LMN5PQRS,Kd8sJ2nQ9vXbT4mW7yZ1aP3eR6uC0hF5gL8iN2oS,https://123456789012.signin.aws.amazon.com/console",
     ["AKIAQX4Z7JH2LMN5PQRS", "Kd8sJ2nQ9vXbT4mW7yZ1aP3eR6uC0hF5gL8iN2oS"]),
    ("curl -u", "curl -u deploy:Pa55w0rdXyZ9 https://ci.example.com/api/build", ["Pa55w0rdXyZ9"]),
    ("mysql -p", "mysql -h db.internal -u root -pMyS3cretRootPw shop < dump.sql", ["MyS3cretRootPw"]),
    ("slack webhook", "curl -X POST -d '{\"text\":\"done\"}' https://hooks.slack.com/services/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",
     ["q7Wm3nXb9LpR2sTv8YdK4cZe"]),
    ("azure AccountKey", "DefaultEndpointsProtocol=https;AccountName=shopdata;AccountKey=mK3p9Xq2vB7nR4tW8yZ1cF6hJ0lS5dG3aE9uI2oP7rT4wY8qN1xV6bM3kL0jH5gD2sF9aQ7zX4cV1bN8mK3pL6oI9uY2tR5eW8qA==;EndpointSuffix=core.windows.net",
     ["mK3p9Xq2vB7nR4tW8yZ1cF6hJ0lS5dG3aE9uI2oP7rT4wY8qN1xV6bM3kL0jH5gD2sF9aQ7zX4cV1bN8mK3pL6oI9uY2tR5eW8qA=="]),
    ("sendgrid", "export SENDGRID=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",
     ["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", "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr"]),
    # twenty common ones
    ("openai key", "OPENAI_API_KEY=sk-proj-Abcdefghijklmnopqrstuvwx0123456789 python run.py", ["sk-proj-Abcdefghijklmnopqrstuvwx0123456789"]),
    ("anthropic key", "client = Anthropic(api_key='sk-ant-api03-Xq7mN2bV9cL4kJ8hG3fD6sA1pO5iU0yT')", ["sk-ant-api03-Xq7mN2bV9cL4kJ8hG3fD6sA1pO5iU0yT"]),
    ("aws key id", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE", ["AKIAIOSFODNN7EXAMPLE"]),
    ("aws secret in ini", "[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ["wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]),
    ("github pat", "git clone https://x-access-token:ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6@github.com/acme/app",
     ["ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"]),
    ("github fine-grained", "GH_TOKEN=github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF gh pr list",
     ["github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF"]),
    ("gitlab", "git remote set-url origin https://oauth2:glpat-Xk9mP2vR7tW4yZ1cF6hJ@gitlab.com/acme/app.git", ["glpat-Xk9mP2vR7tW4yZ1cF6hJ"]),
    ("slack bot token", "SLACK_BOT_TOKEN=xoxb-2345678901-3456789012345-Ab3dE6gH9jK2mN5pQ8sT1vW4", ["xoxb-2345678901-3456789012345-Ab3dE6gH9jK2mN5pQ8sT1vW4"]),
    ("google api key", "fetch('https://maps.googleapis.com/maps/api/geocode/json?key=AIzaSyB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3h')",
     ["AIzaSyB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3h"]),
    ("stripe live", "stripe.api_key = \"sk_live_4eC39HqLyjWDarjtT1zdp7dc\"", ["sk_live_4eC39HqLyjWDarjtT1zdp7dc"]),
    ("huggingface", "huggingface-cli login --token hf_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3h", ["hf_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3h"]),
    ("jwt", "Cookie: session=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     ["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"]),
    ("bearer header", "curl -H 'Authorization: Bearer 8f3kP2mX9vQ7rT4wZ1yC6bN0' https://api.example.com/v1/me", ["8f3kP2mX9vQ7rT4wZ1yC6bN0"]),
    ("private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----",
     ["b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"]),
    ("database url", "DATABASE_URL=postgres://shop:Qw3rTy9UiOp2@db.internal:5432/shop", ["Qw3rTy9UiOp2"]),
    ("password assignment", "DB_PASSWORD=hunter2-Pa55word", ["hunter2-Pa55word"]),
    ("json api key", '{"service": "mailer", "api_key": "k3Y-9fX2mQ7vB4nR8tW1"}', ["k3Y-9fX2mQ7vB4nR8tW1"]),
    ("password in prose", "the staging password is Zx8#mQ2vLp9w, rotate it Friday", ["Zx8#mQ2vLp9w"]),
    ("npm token", "//registry.npmjs.org/:_authToken=npm_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6", ["npm_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"]),
    ("telegram bot", "BOT=https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw5/sendMessage",
     ["AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw5"]),
]

# shapes only the library knows (detect-secrets' detectors): they never reach a provider either
LIBRARY_SHAPES = [
    ("twilio", "TWILIO_KEY=SK0123456789abcdef0123456789abcdef", ["SK0123456789abcdef0123456789abcdef"]),
    ("mailchimp", "mc = MailChimp('0123456789abcdef0123456789abcdef-us12')", ["0123456789abcdef0123456789abcdef-us12"]),
    ("square oauth", "SQUARE=sq0csp-ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq", ["sq0csp-ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopq"]),
    ("discord bot", "client.run('MTA1MjM0NTY3ODkwMTIzNDU2Nw.GhIjKl.AbCdEfGhIjKlMnOpQrStUvWxYz0')",
     ["MTA1MjM0NTY3ODkwMTIzNDU2Nw.GhIjKl.AbCdEfGhIjKlMnOpQrStUvWxYz0"]),
]

# ordinary text that looks random: left exactly as it is
ORDINARY = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b: fix token refresh when the clock skews",
    "Merge pull request #4821 from acme/feature (a94a8fe5ccb19ba61c4c0873d391e987982fbbd3)",
    "request id 123e4567-e89b-12d3-a456-426614174000 failed after 3 retries",
    "<img src=\"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==\">",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  app.tar.gz",
    "port 5433, max_tokens: 170000, the password is in the vault, see /etc/app.conf",
    "mkdir -p build/output && ssh -p 2222 deploy@10.0.0.5 'ls -la'",
    "the token budget is 4000 tokens; reset your password via the settings page",
    "pip install -U pytest==8.2.0 && git log --oneline -n 20",
]
